"""The fabric manager and the NVLink subnet manager on HGX B200 servers (the lab's b200 topology:
b200-01, b200-02, 8 B200 GPUs each on NVLink 5 NVSwitches; docs/lab-fidelity.md, "HGX B200").

- before any playbook the servers' GPUs report no completed fabric (the fabric manager is required);
- the first playbooks/fabric_manager.yml run installs nvidia-fabricmanager-550 at the driver's version
  (held), nvlsm and libnvsdm-550 at the driver's version, and the fabric manager runs with nvlsm beside
  it on the first NVSwitch management port: nvidia-smi -q shows Fabric State Completed on every GPU;
- a second run and ``--check`` report changed=0;
- nvlsm killed under a running fabric manager: a restart of the fabric manager starts it again; a restart
  or stop of the unit leaves no old nv-fabricmanager or nvlsm running;
- nvlsm removed and the fabric manager restarted: it fails (NV_WARN_NOTHING_TO_DO), ``fabricops verify``
  fails that server's fabric_manager check (the product's verify reads the GPUs' fabric state; it has no
  nvlsm check of its own), and the next playbook run reinstalls nvlsm and brings the fabric back.

Each test after the first needs only the converged servers and leaves them converged.
docs/development.md, "The HGX B200 lab test", says how to run it and what it costs.
"""

from __future__ import annotations

import pytest
from integration.conftest import ssh
from lab_b200.conftest import HOSTS, fabric_manager, fabric_states, verify_fabric_manager

pytestmark = pytest.mark.lab

DRIVER = "550.54.15"  # the lab's driver (fabricops_lab.hardware.DRIVER_VERSION)
NVLSM = "2025.06.6-1"  # the newest nvlsm of the lab's repository (fabric_services.NVLSM_VERSIONS)
PROBE = "; ".join([
    "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' 'nvidia-fabricmanager*' nvlsm "
    "'libnvsdm*'",
    "echo ---", "systemctl is-active nvidia-fabricmanager", "cat /run/nvlsm.pid",
    "test -S /run/nvidia-fabricmanager/fm_sm_ipc.socket && echo socket",
    "kill -0 $(cat /run/nvlsm.pid) && echo alive",
    "python3 -c 'import json; print(json.load(open(\"/run/emulated-hw/nvlsm.json\"))[\"guid\"])'",
    "python3 -c 'import json; print(json.load(open(\"/var/lib/emulated-hw/hardware.json\"))"
    "[\"nvswitch_mgmt_ports\"][0][\"guid\"])'",
])


def probe(host: str) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """(package -> (version, dpkg status),
    [FM active, nvlsm pid, 'socket', 'alive', nvlsm's GUID, the first management port's GUID])."""
    pkgs, rest = ssh(host, PROBE, check=False).stdout.split("---\n")
    installed = {ln.split()[0]: (ln.split()[1], ln.split()[2])
                 for ln in pkgs.splitlines() if len(ln.split()) == 3}
    return installed, rest.split()


def daemons(host: str) -> dict[str, int]:
    """How many nv-fabricmanager and nvlsm processes run on HOST."""
    args = ssh(host, "ps -eo args=").stdout.splitlines()
    return {"nv-fabricmanager": sum(a.split()[1:2] == ["/usr/bin/nv-fabricmanager"] for a in args),
            "nvlsm": sum(a.split()[1:2] == ["/opt/nvidia/nvlsm/sbin/nvlsm"] for a in args)}


def test_first_run_installs_fm_nvlsm_libnvsdm_and_completes_the_fabric(before, converged):
    # as the lab brings them up: the fabric manager they need is not there
    assert before == {h: {("In Progress", "N/A")} for h in HOSTS}, before
    bad = {h: s for h, s in converged.hosts.items() if s["failures"] or s["unreachable"]}
    assert not bad, bad
    assert {h: converged.hosts[h]["changed"] > 0 for h in HOSTS} == {h: True for h in HOSTS}
    for host in HOSTS:
        installed, (active, pid, sock, alive, sm_guid, port_guid) = probe(host)
        assert installed["nvidia-fabricmanager-550"] == (f"{DRIVER}-1", "hi"), installed  # held
        assert installed["nvlsm"] == (NVLSM, "ii"), installed
        assert installed["libnvsdm-550"] == (f"{DRIVER}-1", "ii"), installed
        assert (active, sock, alive) == ("active", "socket", "alive"), (host, active, pid, sock, alive)
        assert sm_guid == port_guid  # nvlsm on the first NVSwitch management port
        assert fabric_states(host) == {("Completed", "Success")}, host


def test_second_run_and_check_change_nothing(converged):
    for extra in ((), ("--check",)):
        run = fabric_manager(*extra)
        assert run.rc == 0, run.stdout[-3000:]
        changed = {h: s["changed"] for h, s in run.hosts.items()}
        assert set(changed.values()) == {0}, (extra, changed, run.changed_tasks())


def test_killed_nvlsm_is_started_again_with_the_fabric_manager(converged):
    host = HOSTS[0]
    _, (_, old_pid, *_rest) = probe(host)
    ssh(host, "kill $(cat /run/nvlsm.pid); sleep 1; systemctl restart nvidia-fabricmanager")
    _, (active, pid, sock, alive, *_rest) = probe(host)
    assert (active, sock, alive) == ("active", "socket", "alive") and pid != old_pid
    assert fabric_states(host) == {("Completed", "Success")}
    assert daemons(host) == {"nv-fabricmanager": 1, "nvlsm": 1}  # the old fabric manager stopped


def test_restart_stops_both_daemons_of_the_unit(converged):
    host = HOSTS[0]
    _, (_, old_pid, *_rest) = probe(host)
    ssh(host, "systemctl restart nvidia-fabricmanager")
    _, (active, pid, sock, alive, *_rest) = probe(host)
    assert (active, sock, alive) == ("active", "socket", "alive") and pid != old_pid
    assert daemons(host) == {"nv-fabricmanager": 1, "nvlsm": 1}
    ssh(host, "systemctl stop nvidia-fabricmanager")
    try:
        assert daemons(host) == {"nv-fabricmanager": 0, "nvlsm": 0}
        assert fabric_states(host) == {("In Progress", "N/A")}
    finally:
        ssh(host, "systemctl start nvidia-fabricmanager")
    assert fabric_states(host) == {("Completed", "Success")}


def test_removed_nvlsm_fails_the_fabric_and_verify_then_the_role_repairs_it(converged, tmp_path):
    host, other = HOSTS[1], HOSTS[0]
    ssh(host, "dpkg --purge nvlsm && systemctl restart nvidia-fabricmanager", check=False)
    assert ssh(host, "systemctl is-active nvidia-fabricmanager", check=False).stdout.strip() == "failed"
    log = ssh(host, "cat /var/log/fabricmanager.log").stdout
    assert "NV_WARN_NOTHING_TO_DO" in log and "nvlsm is not installed" in log
    assert fabric_states(host) == {("In Progress", "N/A")}
    results = verify_fabric_manager(tmp_path)
    assert results[host]["status"] == "fail", results[host]
    assert "Fabric State In Progress" in results[host]["message"], results[host]
    assert results[other]["status"] == "pass", results[other]
    run = fabric_manager()
    assert run.rc == 0, run.stdout[-3000:]
    assert run.hosts[host]["changed"] > 0 and run.hosts[other]["changed"] == 0, run.changed_tasks()
    installed, (active, _pid, sock, alive, *_rest) = probe(host)
    assert installed["nvlsm"] == (NVLSM, "ii") and (active, sock, alive) == ("active", "socket", "alive")
    results = verify_fabric_manager(tmp_path)
    assert {h: r["status"] for h, r in results.items()} == {h: "pass" for h in HOSTS}, results
