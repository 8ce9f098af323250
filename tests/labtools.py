"""Helpers shared by integration test modules (a plain module: see tests/captures.py for why)."""

from __future__ import annotations


def ensure_ofed(ssh, lab, host: str) -> str:
    """Install the lab's default emulated MLNX_OFED on a host from its tarball (checksum checked)."""
    version = lab["ofed"]["default_version"]
    artifacts = lab["ofed"]["versions"][version]
    before = ssh(host, "command -v ibstat ofed_info ibv_devinfo mlnx_qos || true").stdout
    if not before.strip():
        script = (
            "set -e; cd /tmp; "
            f"python3 -c 'import urllib.request,sys; urllib.request.urlretrieve(sys.argv[1], \"ofed.tgz\")' "
            f"{artifacts['tgz_url']}; "
            f"echo '{artifacts['tgz_sha256']}  ofed.tgz' | sha256sum -c - >/dev/null; "
            "rm -rf ofed && mkdir ofed && tar -xzf ofed.tgz -C ofed --strip-components=1; "
            "cd ofed && ./mlnxofedinstall --force --skip-distro-check"
        )
        out = ssh(host, script, timeout=300).stdout
        assert "/etc/init.d/openibd restart" in out  # the installer asks; it never restarts itself
    return version


def topology_lab(topology_name: str, problem: str | None = None):
    """The body of a module fixture that runs its tests on the lab's TOPOLOGY_NAME (``fabricops lab up
    --topology NAME``): yields lab.json's data with that rack up, after taking down a lab of another
    topology, and takes it down after the module (``FABRICOPS_LAB_KEEP=1`` keeps it). PROBLEM (or the
    lab's own) skips the module, or fails it under ``FABRICOPS_REQUIRE_LAB=1``. Use it as
    ``yield from topology_lab("gb200")``."""
    import os
    import shutil

    import pytest
    from integration.conftest import INVENTORY, REPO, _lab_problem

    problem = _lab_problem() or problem
    if problem:
        if os.environ.get("FABRICOPS_REQUIRE_LAB") == "1":
            pytest.fail(f"lab not available: {problem}")
        pytest.skip(f"lab not available: {problem}")
    from fabricops_lab import paths, rack, topology

    if paths.lab_json().exists() and paths.load_lab().get("topology") != topology.resolve(topology_name):
        rack.down()
    # facts cached from the hosts of another lab must not stand for these (gathering = smart)
    shutil.rmtree(REPO / ".cache" / "facts", ignore_errors=True)
    data = rack.up(topology_name, None, INVENTORY.parent)
    yield data
    if os.environ.get("FABRICOPS_LAB_KEEP") != "1" and paths.lab_json().exists():
        rack.down()


def fabricops_drift(*args: str, json_path=None) -> tuple[int, str, dict | None]:
    """``fabricops drift ARGS`` from the checkout's venv: exit status, output, and the JSON report
    (``--json JSON_PATH``, None when not asked for or not written)."""
    import json
    import subprocess

    from integration.conftest import REPO, VENV_BIN, ansible_env

    argv = [str(VENV_BIN / "fabricops"), "drift", *args]
    if json_path:
        argv += ["--json", str(json_path)]
    proc = subprocess.run(argv, cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=600)
    data = json.loads(json_path.read_text()) if json_path and json_path.exists() else None
    return proc.returncode, proc.stdout + proc.stderr, data
