"""IMEX on the RHEL family: the nvidia_imex role on the lab's ``rpm`` tray tray02 (real dnf / rpm, Rocky
Linux 9.4's identity; docs/lab-fidelity.md, "Host variants") beside the Debian tray tray01, one NVLink
domain, from one inventory (playbooks/imex.yml).

- the lab writes tray02's driver source as a driver installed from NVIDIA's CUDA rhel9 repository leaves
  it (/etc/yum.repos.d/cuda-rhel9-x86_64.repo: gpgcheck, repo_gpgcheck; its key in the rpmdb), and
  tray01's apt source; the role brings no source of its own on either;
- ``--check`` on the new trays changes nothing; the first run installs nvidia-imex-550-<driver>-1 with
  dnf (signature checked), ``dnf versionlock`` locks it, nvidia-imex runs and the two trays' IMEX
  daemons connect to each other, as on Debian (apt, dpkg hold);
- a second run and ``--check`` report changed=0 on both;
- ``fabricops drift`` names a hand-made unlock and a hand-made removal, ``--fix`` puts both back;
- a locked older IMEX package is replaced (its lock deleted first), as the Debian path replaces a held one.

Each test after the first needs only the converged trays and leaves them converged.
"""

from __future__ import annotations

import json
import time

import pytest
from integration.conftest import ssh
from lab_rpm_imex.conftest import DEB_TRAY, PLAYBOOK, RPM_TRAY, imex
from labtools import fabricops_drift

pytestmark = pytest.mark.lab

DRIVER = "550.54.15"  # the lab's driver (fabricops_lab.hardware.DRIVER_VERSION)
OLD = "550.54.14-1"  # the repository's other version (fabric_services.FM_VERSIONS)
PKG = "nvidia-imex-550"
PROBE = "; ".join([
    "rpm -qa --qf '%{NAME} %{VERSION}-%{RELEASE}\\n' | sort",
    "echo ---", "grep -v '^#' /etc/dnf/plugins/versionlock.list | grep . || true",
    "echo ---", "systemctl is-active nvidia-imex || true",
])


def probe() -> tuple[dict[str, str], list[str], str]:
    """tray02's installed RPMs (name -> version-release), its versionlock entries, the service state."""
    pkgs, locks, active = ssh(RPM_TRAY, PROBE, check=False).stdout.split("---\n")
    return (dict(ln.split() for ln in pkgs.splitlines() if ln.strip()), locks.split(), active.strip())


def imex_view(tray: str) -> dict:
    """TRAY's ``nvidia-imex-ctl -N -j``: {address: the status of TRAY's connection to it}."""
    from fabricops_lab import paths

    me = paths.load_lab()["hosts"][tray]["mgmt_ip"]
    nodes = json.loads(ssh(tray, "nvidia-imex-ctl -N -j").stdout)["nodes"]
    mine = next(n for n in nodes.values() if n["host"] == me)
    return {c["host"]: c["status"] for c in mine["connections"].values()}


def wait_for(what: str, cond, timeout: float = 60.0):
    end = time.monotonic() + timeout
    while True:
        try:
            got = cond()
        except (AssertionError, ValueError, KeyError, StopIteration):
            got = None
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(1)


@pytest.fixture(scope="module")
def converged(imex_rpm_lab):
    """The first imex run on the new trays (its AnsibleRun)."""
    # a fresh rpm tray's rpmdb holds only the driver repository's key (its source was installed)
    assert [p for p in probe()[0] if p != "gpg-pubkey"] == []
    check = imex("--check", "--diff")
    assert check.rc == 0 and check.hosts[RPM_TRAY]["changed"] > 0, check.stdout[-4000:]
    assert f"would run: dnf versionlock add {PKG}-{DRIVER}-1" in check.stdout, check.stdout[-4000:]
    assert probe()[1:] == ([], "inactive")
    assert PKG not in probe()[0]
    run = imex()
    assert run.rc == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return run


def test_the_rpm_tray_has_its_drivers_dnf_source(imex_rpm_lab):
    rpm = imex_rpm_lab["fabric_manager"]["rpm"]
    repo = ssh(RPM_TRAY, "cat /etc/yum.repos.d/cuda-rhel9-x86_64.repo").stdout.splitlines()
    for line in ("[cuda-rhel9-x86_64]", f"baseurl={rpm['repo_url']}", "gpgcheck=1", "repo_gpgcheck=1",
                 f"gpgkey={rpm['repo_key_url']}"):
        assert line in repo, repo
    assert "nvidia-cuda.list" not in ssh(RPM_TRAY, "ls /etc/apt/sources.list.d").stdout.split()
    assert "nvidia-cuda.list" in ssh(DEB_TRAY, "ls /etc/apt/sources.list.d").stdout.split()
    assert "gpg-pubkey" in probe()[0]  # the driver's install imported the repository key
    facts = ssh(RPM_TRAY, "grep -E '^(ID|VERSION_ID)=' /etc/os-release").stdout.split()
    assert facts == ['ID="rocky"', 'VERSION_ID="9.4"'], facts


def test_first_run_installs_locks_and_starts_imex_with_dnf_and_peers_connect(converged, imex_rpm_lab):
    assert {h: s["changed"] > 0 for h, s in converged.hosts.items()} == {RPM_TRAY: True, DEB_TRAY: True}
    pkgs, locks, active = probe()
    assert pkgs.get(PKG) == f"{DRIVER}-1", pkgs
    assert locks == [f"{PKG}-0:{DRIVER}-1.*"], locks
    assert active == "active"
    assert not [p for p in pkgs if p.startswith("nvidia-fabric")], pkgs  # GB200: IMEX, no fabric manager
    deb = ssh(DEB_TRAY, f"dpkg-query -W -f='${{Version}} ${{db:Status-Abbrev}}' {PKG}").stdout
    assert deb.split() == [f"{DRIVER}-1", "hi"], deb
    addr = {h["name"]: h["mgmt_ip"] for h in imex_rpm_lab["topology"]["hosts"]}
    for tray in (RPM_TRAY, DEB_TRAY):
        nodes = ssh(tray, "cat /etc/nvidia-imex/nodes_config.cfg").stdout.split()
        assert nodes == sorted(addr.values()), (tray, nodes)
    wait_for("both trays READY", lambda: all(ssh(t, "nvidia-imex-ctl -q").stdout.strip() == "READY"
                                               for t in (RPM_TRAY, DEB_TRAY)))
    wait_for("tray02 connected to tray01",
             lambda: imex_view(RPM_TRAY).get(addr[DEB_TRAY]) == "CONNECTED")
    wait_for("tray01 connected to tray02",
             lambda: imex_view(DEB_TRAY).get(addr[RPM_TRAY]) == "CONNECTED")
    # dnf itself now refuses to move the locked package
    out = ssh(RPM_TRAY, f"dnf -q -y install {PKG}-{OLD} 2>&1", check=False)
    assert out.returncode != 0 and probe()[0][PKG] == f"{DRIVER}-1", out.stdout


def test_second_run_and_check_change_nothing(converged):
    for extra in ((), ("--check", "--diff")):
        run = imex(*extra)
        assert run.rc == 0, run.stdout[-3000:]
        changed = {h: s["changed"] for h, s in run.hosts.items()}
        assert set(changed.values()) == {0}, (extra, changed, run.changed_tasks())


def _drift(tmp_path, *args: str) -> tuple[int, list[str]]:
    rc, _out, data = fabricops_drift("--playbook", PLAYBOOK, "--limit", RPM_TRAY, *args,
                                    json_path=tmp_path / f"drift{len(list(tmp_path.iterdir()))}.json")
    return rc, [i["task"] for i in (data or {}).get("items", [])]


def test_drift_sees_a_hand_made_unlock_and_removal_and_fix_restores_them(converged, tmp_path):
    ssh(RPM_TRAY, f"dnf -q versionlock delete {PKG}")
    rc, tasks = _drift(tmp_path)
    assert (rc, tasks) == (3, ["Report the version lock --check cannot add"]), tasks
    ssh(RPM_TRAY, f"systemctl stop nvidia-imex; dnf -q -y remove {PKG}")
    assert PKG not in probe()[0]
    rc, tasks = _drift(tmp_path)
    assert rc == 3 and "Install the IMEX package at the driver's version (dnf)" in tasks, tasks
    rc, _tasks = _drift(tmp_path, "--fix")
    assert rc == 0
    pkgs, locks, active = probe()
    assert (pkgs.get(PKG), locks, active) == (f"{DRIVER}-1", [f"{PKG}-0:{DRIVER}-1.*"], "active")
    assert _drift(tmp_path) == (0, [])


def test_a_locked_older_imex_package_is_replaced_with_its_lock(converged):
    """Driver 550.54.15, nvidia-imex-550 550.54.14 installed and locked by hand: --check reports the
    install it cannot simulate and changes nothing; the run deletes the old lock, installs 550.54.15 and
    locks it (the Debian path releases an older held package's hold the same way)."""
    ssh(RPM_TRAY, f"systemctl stop nvidia-imex; dnf -q versionlock delete {PKG}; "
                  f"dnf -q -y downgrade {PKG}-{OLD}; dnf -q versionlock add {PKG}-{OLD}")
    assert probe()[0][PKG] == OLD and probe()[1] == [f"{PKG}-0:{OLD}.*"]
    check = imex("--limit", RPM_TRAY, "--check")
    assert check.rc == 0 and check.hosts[RPM_TRAY]["changed"] > 0, check.stdout[-3000:]
    assert f"would install {PKG}-{DRIVER}-1" in check.stdout, check.stdout[-3000:]
    assert probe()[0][PKG] == OLD
    run = imex("--limit", RPM_TRAY)
    assert run.rc == 0, run.stdout[-3000:]
    pkgs, locks, active = probe()
    assert (pkgs[PKG], locks, active) == (f"{DRIVER}-1", [f"{PKG}-0:{DRIVER}-1.*"], "active")
