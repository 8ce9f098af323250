"""roce_host on the emulated rack (issue 4, "Done when"), on gpu01.

Converge, a second run changes nothing, ``--check`` on the converged host changes nothing, drift is
reported by ``--check --diff`` and not fixed, an openibd restart loses the mlnx_qos state and the
persistence unit restores it, bad input fails before any task and leaves the host as it was.
The fabric-wide definition is ``fabricops_roce`` from inventories/lab/group_vars/all.yml.
"""

from __future__ import annotations

import hashlib
import re
import time

import pytest
from labtools import ensure_ofed

from fabricops.parsers import parse, to_data

pytestmark = pytest.mark.lab

HOST = "gpu01"
PLAYBOOK = "playbooks/roce_host.yml"
UNIT = "fabricops-roce-qos.service"
SCRIPT = "/usr/local/sbin/fabricops-roce-qos"
PFC3 = [0, 0, 0, 1, 0, 0, 0, 0]


def roce_ports(lab: dict) -> list[tuple[str, str]]:
    """(hca, netdev) of the host's Ethernet-link-layer ports, from the lab's topology."""
    host = next(h for h in lab["topology"]["hosts"] if h["name"] == HOST)
    return [(hca["name"], p["netdev"]) for hca in host["hcas"] for p in hca["ports"]
            if p["link_layer"] == "Ethernet"]


def play(ansible_playbook, *args: str):
    return ansible_playbook(PLAYBOOK, "--limit", HOST, *args)


def stats(run) -> dict:
    assert HOST in run.hosts, f"no PLAY RECAP for {HOST}:\n{run.stdout[-3000:]}\n{run.stderr[-2000:]}"
    return run.hosts[HOST]


def converged_ok(run) -> dict:
    s = stats(run)
    assert run.rc == 0 and s["failures"] == 0 and s["unreachable"] == 0, run.stdout[-4000:]
    return s


def qos(ssh, netdev: str) -> dict:
    return to_data(parse("mlnx_qos", ssh(HOST, f"mlnx_qos -i {netdev}").stdout))


def unit_show(ssh, prop: str, unit: str = UNIT) -> str:
    return ssh(HOST, f"systemctl show -p {prop} --value {unit}").stdout.strip()


def host_state(ssh, lab) -> str:
    """A digest of everything the role manages: mlnx_qos output, the RoCE knobs, its files."""
    parts = []
    for hca, netdev in roce_ports(lab):
        parts.append(ssh(HOST, f"mlnx_qos -i {netdev}").stdout)
        parts.append(ssh(HOST, f"cat /sys/class/infiniband/{hca}/tc/1/traffic_class; "
                               f"cat /sys/class/net/{netdev}/ecn/roce_np/enable/* "
                               f"/sys/class/net/{netdev}/ecn/roce_rp/enable/*; "
                               f"cma_roce_tos -d {hca} -p 1; cma_roce_mode -d {hca} -p 1").stdout)
    parts.append(ssh(HOST, "find /etc/fabricops -type f 2>/dev/null | sort | xargs -r sha256sum; "
                           f"sha256sum /etc/systemd/system/{UNIT} {SCRIPT} 2>/dev/null; "
                           f"systemctl is-enabled {UNIT} 2>/dev/null", check=False).stdout)
    return hashlib.sha256("\n--\n".join(parts).encode()).hexdigest()


def tasks_run(stdout: str) -> list[str]:
    return re.findall(r"^TASK \[(.+?)\] \*+$", stdout, re.M)


@pytest.fixture(scope="module")
def converged(lab, ssh, ansible_playbook):
    """gpu01 converged once, on the emulated OFED (installed from the lab's tarball when absent:
    the test must not depend on an earlier test module having installed it)."""
    ensure_ofed(ssh, lab, HOST)
    assert ssh(HOST, "ofed_info -s").stdout.startswith("MLNX_OFED_LINUX-")
    # Start from firmware defaults on one port so the first converge has something to do.
    first = roce_ports(lab)[0][1]
    ssh(HOST, f"mlnx_qos -i {first} --trust pcp --pfc 0,0,0,0,0,0,0,0 >/dev/null")
    run = play(ansible_playbook)
    s = converged_ok(run)
    assert s["changed"] > 0
    return run


def assert_lossless(ssh, lab):
    for hca, netdev in roce_ports(lab):
        q = qos(ssh, netdev)
        assert (q["trust"], q["pfc_enabled"]) == ("dscp", PFC3), netdev
        assert 26 in q["dscp2prio"]["3"] and 48 in q["dscp2prio"]["6"], netdev
        assert ssh(HOST, f"cat /sys/class/infiniband/{hca}/tc/1/traffic_class").stdout.strip() in (
            "106", "Global tclass=106")
        assert ssh(HOST, f"cat /sys/class/net/{netdev}/ecn/roce_np/enable/3").stdout.strip() == "1"
        assert ssh(HOST, f"cma_roce_mode -d {hca} -p 1").stdout.strip() == "RoCE v2"


def test_converge_applies_the_fabric_definition(converged, ssh, lab):
    assert_lossless(ssh, lab)
    assert ssh(HOST, f"systemctl is-enabled {UNIT}").stdout.strip() == "enabled"
    assert ssh(HOST, f"{SCRIPT} verify").returncode == 0


def test_second_run_changes_nothing(converged, ansible_playbook):
    assert converged_ok(play(ansible_playbook))["changed"] == 0


def test_check_on_converged_host_changes_nothing(converged, ansible_playbook):
    assert converged_ok(play(ansible_playbook, "--check", "--diff"))["changed"] == 0


def test_check_diff_reports_drift_without_fixing_it(converged, ssh, lab, ansible_playbook):
    netdev = roce_ports(lab)[0][1]
    ssh(HOST, f"mlnx_qos -i {netdev} --trust pcp >/dev/null")
    try:
        run = play(ansible_playbook, "--check", "--diff")
        assert converged_ok(run)["changed"] > 0
        diff = run.stdout.split(f"--- before: {netdev} (mlnx_qos)", 1)
        assert len(diff) == 2, run.stdout[-4000:]
        body = diff[1].split("\n\n", 1)[0]
        assert "-trust: pcp" in body.splitlines() and "+trust: dscp" in body.splitlines()
        assert qos(ssh, netdev)["trust"] == "pcp"  # reported, not fixed
        assert ssh(HOST, f"{SCRIPT} verify", check=False).returncode == 1
    finally:
        ssh(HOST, f"{SCRIPT} apply")  # back to the declared state (the unit's own apply)
    assert qos(ssh, netdev)["trust"] == "dscp"


def test_openibd_restart_loses_qos_and_the_unit_restores_it(converged, ssh, lab):
    # The emulated OFED ships the real openibd.service; the unit is tied to it.
    assert unit_show(ssh, "LoadState", "openibd.service") == "loaded"
    assert "openibd.service" in unit_show(ssh, "PartOf").split()
    assert "openibd.service" in unit_show(ssh, "After").split()
    assert UNIT in unit_show(ssh, "ConsistsOf", "openibd.service").split()

    # Half 1: the driver reset alone (init script, not systemd, so the unit is not triggered).
    before = unit_show(ssh, "InvocationID")
    out = ssh(HOST, "/etc/init.d/openibd restart").stdout
    assert "Loading HCA driver" in out
    for hca, netdev in roce_ports(lab):
        q = qos(ssh, netdev)
        assert (q["trust"], q["pfc_enabled"]) == ("pcp", [0] * 8), netdev
        assert ssh(HOST, f"cat /sys/class/infiniband/{hca}/tc/1/traffic_class").stdout.strip() in ("", "-1")
    verify = ssh(HOST, f"{SCRIPT} verify", check=False)
    assert verify.returncode == 1 and "trust is pcp, want dscp" in verify.stdout
    assert unit_show(ssh, "InvocationID") == before

    # Half 2: `systemctl restart openibd` restarts the unit with it (PartOf), which re-applies.
    ssh(HOST, "systemctl restart openibd.service")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if unit_show(ssh, "InvocationID") != before and unit_show(ssh, "ActiveState") in ("active", "failed"):
            break
        time.sleep(0.5)
    assert unit_show(ssh, "InvocationID") != before, "the unit did not run again after the openibd restart"
    assert unit_show(ssh, "ActiveState") == "active" and unit_show(ssh, "ExecMainStatus") == "0"
    assert_lossless(ssh, lab)
    assert ssh(HOST, f"{SCRIPT} verify").returncode == 0


def test_pfc_priority_9_fails_before_any_task_and_changes_nothing(converged, ssh, lab, ansible_playbook):
    netdev = roce_ports(lab)[0][1]
    # Drift first: a run that got past validation would fix it and change the digest.
    ssh(HOST, f"mlnx_qos -i {netdev} --trust pcp >/dev/null")
    try:
        before = host_state(ssh, lab)
        run = play(ansible_playbook, "-e", '{"fabricops_roce": {"lossless_priority": 9}}')
        s = stats(run)
        assert run.rc != 0 and s["failures"] == 1 and s["changed"] == 0
        reason = "value of lossless_priority must be one of: 0, 1, 2, 3, 4, 5, 6, 7, got: 9"
        lines = [ln for ln in (run.stdout + run.stderr).splitlines() if ln.startswith(reason)]
        assert lines, run.stdout[-3000:]
        role_tasks = [t for t in tasks_run(run.stdout) if t.startswith("fabricops.fabric.roce_host")]
        assert len(role_tasks) == 1 and "Validating arguments" in role_tasks[0], role_tasks
        assert host_state(ssh, lab) == before
    finally:
        ssh(HOST, f"{SCRIPT} apply")
