"""The host half of the fault matrix (issue 15): a host lost mid-run and an openibd restart mid-run.

For each fault the rollout's own words are compared with what the host then holds: the run names
the host it lost; and afterwards ``fabricops drift`` says "drift" exactly when a converge would
change something (0 cases where the tool says one thing and the host holds another).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading

import pytest
from integration.conftest import INVENTORY, REPO, VENV_BIN, _recap, ansible_env

pytestmark = pytest.mark.lab

EXTRA = ["-e", "nccl_profile_name=ib"]
NETDEV = "enp170s0f0np0"  # a RoCE port of gpu03 and gpu04 (Onyx rail)
RESULTS: list[tuple[str, str]] = []


def _fault(*args: str) -> None:
    proc = subprocess.run([str(VENV_BIN / "fabricops"), "lab", "fault", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def _site_with_trigger(limit: str, patterns: list[str], action) -> subprocess.CompletedProcess:
    """site.yml's host phases on LIMIT; ACTION() runs once, when lines have matched PATTERNS in order."""
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(INVENTORY), "site.yml", "--limit", limit,
            "--tags", "hosts", "-e", "fabricops_serial=1", *EXTRA]
    proc = subprocess.Popen(argv, cwd=REPO, env=ansible_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines, fired, step = [], threading.Event(), 0
    for line in proc.stdout:
        lines.append(line)
        if not fired.is_set() and re.search(patterns[step], line):
            step += 1
            if step == len(patterns):
                fired.set()
                action()
    rc = proc.wait(timeout=1800)
    assert fired.is_set(), f"the trigger {patterns!r} never matched:\n{''.join(lines)[-3000:]}"
    return subprocess.CompletedProcess(argv, rc, "".join(lines), "")


def _drift(host: str, tmp_path) -> tuple[int, dict]:
    out = tmp_path / f"drift-{host}.json"
    proc = subprocess.run([str(VENV_BIN / "fabricops"), "drift", "-i", str(INVENTORY), "--limit", host,
                           *EXTRA, "--json", str(out)], cwd=REPO, env=ansible_env(), capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    return proc.returncode, json.loads(out.read_text())


def _converge_changes(host: str) -> int:
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(INVENTORY), "site.yml", "--limit", host,
            "--tags", "hosts", *EXTRA]
    proc = subprocess.run(argv, cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return _recap(proc.stdout)[host]["changed"]


def _truthful(host: str, tmp_path) -> tuple[int, int]:
    """drift's verdict vs what a converge then changes: the two must agree."""
    rc, report = _drift(host, tmp_path)
    changed = _converge_changes(host)
    assert (rc == 3) == (changed > 0), f"drift said {rc} ({report['items']}) but a converge changed {changed}"
    return rc, changed


@pytest.fixture(scope="module")
def hosts_up(lab, ssh):
    from labtools import ensure_ofed

    for h in ("gpu03", "gpu04"):
        ensure_ofed(ssh, lab, h)
    yield
    for h in ("gpu03", "gpu04"):  # its own hosts only: files on other hosts may have faults armed
        subprocess.run([str(VENV_BIN / "fabricops"), "lab", "fault", "clear", h], cwd=REPO,
                       capture_output=True, timeout=120)


def test_a_host_lost_mid_run_is_named_and_drift_tells_the_truth_after(hosts_up, ssh, tmp_path):
    """gpu03's batch first, then gpu04 loses sshd as its RoCE host phase starts. Ansible ends the
    rollout at an unreachable host (no rescue runs for it): the run fails, names gpu04 UNREACHABLE
    in the task and the recap, and claims nothing done for it."""
    try:
        run = _site_with_trigger(
            "gpu03,gpu04", [r"^ok: \[gpu04\]", r"^TASK \[fabricops\.fabric\.roce_host"],
            lambda: _fault("gpu04", "host-unreachable"),
        )
    finally:
        _fault("clear", "gpu04")
    recap = _recap(run.stdout)
    assert run.returncode != 0, run.stdout[-3000:]
    assert recap["gpu03"]["failures"] == 0 and recap["gpu03"]["unreachable"] == 0
    assert recap["gpu04"]["unreachable"] == 1, run.stdout[-3000:]
    assert "fatal: [gpu04]: UNREACHABLE!" in run.stdout
    assert not re.search(r"ROLLOUT DONE: [^;]*gpu04", run.stdout), "the rollout claimed gpu04 done"
    rc, changed = _truthful("gpu04", tmp_path)
    RESULTS.append(("host lost mid-run", f"gpu04 named unreachable; drift {rc}, converge changed {changed}"))
    assert _drift("gpu04", tmp_path)[0] == 0


def test_openibd_restart_mid_run_leaves_no_silent_difference(hosts_up, ssh, host_exec, tmp_path):
    # The roce_host phase has applied and persisted QoS; openibd restarts (the driver forgets QoS)
    # while the NCCL phase starts. The boot-time unit is PartOf openibd, so it re-applies.
    run = _site_with_trigger(
        "gpu04", [r"^TASK \[fabricops\.fabric\.nccl_profile"],
        lambda: host_exec("gpu04", ["systemctl", "restart", "openibd"], timeout=120),
    )
    assert run.returncode == 0, run.stdout[-3000:]
    assert "ROLLOUT DONE: gpu04; failed: none" in run.stdout
    qos = ssh("gpu04", f"mlnx_qos -i {NETDEV}").stdout
    pfc_ok = "enabled     0   0   0   1" in qos
    rc, _changed = _truthful("gpu04", tmp_path)
    assert (rc == 0) == pfc_ok, f"drift {rc} while the port's PFC is {'right' if pfc_ok else 'wrong'}"
    RESULTS.append(("openibd restart mid-run", f"PFC {'kept' if pfc_ok else 'lost'}; drift {rc}"))


def test_openibd_restart_without_the_boot_unit_is_drift(hosts_up, ssh, host_exec, tmp_path):
    """A driver reload that forgets QoS with nothing to re-apply it: drift must say so (not 'no drift')."""
    _converge_changes("gpu03")
    host_exec("gpu03", ["systemctl", "disable", "--now", "fabricops-roce-qos.service"], check=False)
    host_exec("gpu03", ["systemctl", "restart", "openibd"], timeout=120)
    rc, report = _drift("gpu03", tmp_path)
    assert rc == 3 and any(i["role"] == "roce_host" for i in report["items"]), report
    assert _converge_changes("gpu03") > 0
    assert _drift("gpu03", tmp_path)[0] == 0
    RESULTS.append(("openibd restart, boot unit off", "drift 3 naming roce_host; converge fixed it"))
