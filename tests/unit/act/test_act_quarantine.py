"""Port quarantine through the switch platforms (fabricops.act.quarantine), on emulated switches.

Over real SSH (the lab's switch daemon, reached through the inventory's variables, password and
known_hosts as the roce_switch role reaches a switch): a dry run prints the exact commands and changes
nothing; --execute shuts exactly that port (read back from the switch's own CLI); a second run finds it
already quarantined and sends nothing; an unreachable switch is FAILED in one sentence. In-process (the
same emulator, no SSH): the per-run port cap, a port not in the plan, the only-path rule, the
allow-list, an InfiniBand switch, inter-switch links, a dropped session, the per-switch lock.
"""

from __future__ import annotations

import json

import pytest
from act_fakes import FakeNode, FakeSlurm, report, res, run_act
from act_switches import Loop, Rack, SshSwitch, admin_state, cabling, inventory, port, show, ssh_vars

from fabricops.act.plan import Rails
from fabricops.act.quarantine import SwitchPorts
from fabricops.act.table import DRAIN, QUARANTINE

COMMANDS = {
    "onyx": ["interface ethernet 1/3 shutdown", "configuration write"],
    "cumulus": ["nv set interface swp3 link state down", "nv config apply -y", "nv config save"],
}
RELEASE = {
    "onyx": ["interface ethernet 1/3 no shutdown", "configuration write"],
    "cumulus": ["nv set interface swp3 link state up", "nv config apply -y", "nv config save"],
}
UP = {"onyx": "Enabled", "cumulus": "up"}
DOWN = {"onyx": "Disabled", "cumulus": "down"}
NAME = {"onyx": "Eth1/3", "cumulus": "swp3"}
UPLINKS = [  # leaf1's two links to spine1
    {"switch_a": "leaf1", "port_a": "swp31", "switch_b": "spine1", "port_b": "swp1"},
    {"switch_a": "leaf1", "port_a": "swp32", "switch_b": "spine1", "port_b": "swp2"},
]


@pytest.fixture(autouse=True)
def _lock_dir(tmp_path, monkeypatch):
    """The switch locks of each test in a directory of its own (0700, fabricops.switch.lock)."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("FABRICOPS_LOCK_DIR", raising=False)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return runtime


@pytest.fixture(scope="module")
def loop():
    return Loop()


def switch_port(switch: str, name: str, peer: str) -> dict:
    return res(
        "switches",
        "switch_port",
        switch,
        name,
        message=f"{switch} {name} ({peer}): rx error packets 4211 (limit 0)",
        details={"kind": "host", "peer": peer},
    )


def isl(a: str, pa: str, b: str, pb: str) -> dict:
    return res(
        "switches",
        "switch_port",
        f"{a}<->{b}",
        f"{pa}<->{pb}",
        message=f"ISL {a}:{pa}<>{b}:{pb} down",
        details={"kind": "isl", "link": f"{a}:{pa}<>{b}:{pb}"},
    )


def config(sw, os_name: str):
    """The switch's whole configuration (Onyx running-config without its timestamp; NVUE applied)."""
    if os_name == "onyx":
        return [ln for ln in sw.running_config().splitlines() if "Generated at" not in ln]
    return json.loads(json.dumps(sw.applied))


def log_records(state) -> list[dict]:
    path = state / "act.log"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


# --- over SSH --------------------------------------------------------------------------------------


@pytest.fixture(params=["onyx", "cumulus"])
def ssh_leaf(request, tmp_path, loop):
    os_name = request.param
    sw = SshSwitch(loop, tmp_path / "leaf1", os_name, "leaf1")
    kh = tmp_path / "known_hosts"
    kh.write_text(sw.known_line + "\n")
    inv = inventory(
        {"leaf1": ssh_vars(sw, kh)},
        cabling(os_name, "leaf1", {"gpu01": 1, "gpu02": 2, "gpu03": 3, "gpu04": 4}),
    )
    yield os_name, sw, SwitchPorts(lambda name: inv.get(name, {}))
    sw.close()


def test_dry_run_prints_the_commands_and_changes_nothing(ssh_leaf, tmp_path):
    os_name, sw, switches = ssh_leaf
    before = config(sw.switch, os_name)
    doc = report([switch_port("leaf1", port(os_name, 3), "gpu03 mlx5_0/1")])
    run = run_act(doc, FakeSlurm.cluster(), tmp_path / "state", switches=switches)
    [q] = run.actions(QUARANTINE)
    assert q["status"] == "planned" and q["commands"] == COMMANDS[os_name], q
    assert q["switch"] == "leaf1" and q["switch_port"] == NAME[os_name] and q["previous_admin"] == "up"
    assert q["release"] == RELEASE[os_name]
    assert f"would quarantine leaf1 {NAME[os_name]}: would send {'; '.join(COMMANDS[os_name])}" in run.out
    assert "gpu03 stays in service" in q["why"] and run.actions(DRAIN) == []
    assert run.status == 0
    assert admin_state(sw.switch, os_name, 3) == UP[os_name]
    assert config(sw.switch, os_name) == before  # nothing sent


def test_execute_shuts_exactly_that_port_and_a_second_run_changes_nothing(ssh_leaf, tmp_path):
    os_name, sw, switches = ssh_leaf
    doc = report([switch_port("leaf1", port(os_name, 3), "gpu03 mlx5_0/1")])
    state = tmp_path / "state"
    run = run_act(doc, FakeSlurm.cluster(), state, execute=True, switches=switches)
    [q] = run.actions(QUARANTINE)
    assert q["status"] == "done" and q["commands"] == COMMANDS[os_name], q
    assert run.status == 0
    assert f"quarantined leaf1 {NAME[os_name]} (was admin up)" in run.out
    assert f"release: {'; '.join(RELEASE[os_name])}" in run.out
    assert [admin_state(sw.switch, os_name, n) for n in (1, 2, 3, 4)] == [
        UP[os_name], UP[os_name], DOWN[os_name], UP[os_name]
    ]
    if os_name == "onyx":
        assert "interface ethernet 1/3 shutdown" in show(sw.switch, os_name, "show running-config")
    else:
        assert show(sw.switch, os_name, "nv config diff applied startup").strip() == ""  # saved
    [rec] = [r for r in log_records(state) if r["action"] == QUARANTINE]
    assert rec["mode"] == "executed" and rec["previous_admin"] == "up" and rec["release"] == RELEASE[os_name]
    assert rec["switch"] == "leaf1" and rec["switch_port"] == NAME[os_name]

    after = config(sw.switch, os_name)
    again = run_act(doc, FakeSlurm.cluster(), state, execute=True, switches=switches)
    [q2] = again.actions(QUARANTINE)
    assert q2["status"] == "skipped" and "already quarantined" in q2["why"], q2
    assert q2["previous_admin"] == "down" and q2["commands"] == []
    assert again.status == 0 and "nothing to do" in again.out
    assert config(sw.switch, os_name) == after
    assert len([r for r in log_records(state) if r["action"] == QUARANTINE]) == 1


def test_an_unreachable_switch_is_failed_in_one_sentence(tmp_path, loop):
    from act_switches import free_port

    kh = tmp_path / "known_hosts"
    kh.write_text("")
    hv = {
        "ansible_host": "127.0.0.1",
        "ansible_port": free_port(),  # nobody listens there
        "ansible_user": "admin",
        "ansible_password": "x",
        "fabricops_switch_os": "onyx",
        "roce_switch_known_hosts": str(kh),
    }
    inv = inventory({"leaf1": hv}, cabling("onyx", "leaf1", {"gpu03": 3}))
    doc = report([switch_port("leaf1", "1/3", "gpu03 mlx5_0/1")])
    run = run_act(doc, FakeSlurm.cluster(), tmp_path / "state", execute=True,
                  switches=SwitchPorts(lambda n: inv.get(n, {})))
    [q] = run.actions(QUARANTINE)
    assert q["status"] == "failed" and run.status == 1
    assert "leaf1: step 'connect' failed: 127.0.0.1:" in q["why"] and "did not answer SSH" in q["why"]
    assert "\n" not in q["why"] and "Traceback" not in run.out
    assert "quarantine FAILED" in run.out


# --- in-process ------------------------------------------------------------------------------------


class Fabric:
    """Emulated switches in-process, and the inventory (``extra``: more switches' variables)."""

    def __init__(self, tmp_path, os_name="cumulus", hosts=None, links=None, extra=None, **more_racks):
        self.os = os_name
        self.racks = {"leaf1": Rack(os_name, tmp_path / "leaf1", [p for p in _ports(os_name)])}
        for name, os2 in more_racks.items():
            self.racks[name] = Rack(os2, tmp_path / name, _ports(os2))
        hosts = hosts or {"gpu01": 1, "gpu02": 2, "gpu03": 3, "gpu04": 4, "gpu05": 5}
        switches = {name: {"fabricops_switch_os": r.os} for name, r in self.racks.items()}
        switches.update(extra or {})
        self.inv = inventory(switches, cabling(os_name, "leaf1", hosts), links, hosts=list(hosts))
        self.switches = SwitchPorts(lambda n: self.inv.get(n, {}), self.connect)

    def connect(self, switch, os_name, hv):
        return self.racks[switch].connect()

    def admin(self, n, switch="leaf1"):
        r = self.racks[switch]
        return admin_state(r.switch, r.os, n)

    def sent(self, switch="leaf1"):
        return self.racks[switch].config_lines()


def _ports(os_name):
    return [f"Eth1/{n}" for n in range(1, 33)] if os_name == "onyx" else [f"swp{n}" for n in range(1, 33)]


def test_the_per_run_port_cap_refuses_the_rest_and_counts_only_ports_it_shuts(tmp_path):
    fab = Fabric(tmp_path)
    doc = report([switch_port("leaf1", f"swp{n}", f"gpu0{n} mlx5_0/1") for n in (3, 4, 5)])
    state = tmp_path / "state"
    wide = Rails(max_rail_hosts=8)  # three ports of one rail: not a rail fault here
    run = run_act(doc, FakeSlurm.cluster(), state, execute=True, switches=fab.switches, rails=wide)
    assert run.targets(QUARANTINE, "done") == ["leaf1 swp3", "leaf1 swp4"]
    [refused] = run.actions(QUARANTINE, "refused")
    assert refused["target"] == "leaf1 swp5" and "--max-quarantine-per-run 2 reached" in refused["why"]
    assert run.status == 1
    assert [fab.admin(n) for n in (3, 4, 5)] == ["down", "down", "up"]
    # the next run: two already down (not counted), the third shut
    again = run_act(doc, FakeSlurm.cluster(), state, execute=True, switches=fab.switches, rails=wide)
    assert again.targets(QUARANTINE, "skipped") == ["leaf1 swp3", "leaf1 swp4"]
    assert again.targets(QUARANTINE, "done") == ["leaf1 swp5"] and again.status == 0
    none = Rails(max_rail_hosts=8, max_ports_per_run=0)
    one = run_act(doc, FakeSlurm.cluster(), tmp_path / "s1", switches=fab.switches, rails=none)
    assert one.targets(QUARANTINE, "skipped") == ["leaf1 swp3", "leaf1 swp4", "leaf1 swp5"]


def test_a_dry_run_counts_the_cap_too_and_sends_nothing(tmp_path):
    fab = Fabric(tmp_path)
    doc = report([switch_port("leaf1", f"swp{n}", f"gpu0{n} mlx5_0/1") for n in (3, 4, 5)])
    run = run_act(doc, FakeSlurm.cluster(), tmp_path / "state", switches=fab.switches,
                  rails=Rails(max_rail_hosts=8))
    assert run.targets(QUARANTINE, "planned") == ["leaf1 swp3", "leaf1 swp4"]
    assert run.targets(QUARANTINE, "refused") == ["leaf1 swp5"] and run.status == 1
    assert fab.sent() == []


def test_a_port_not_in_the_plan_is_refused(tmp_path):
    fab = Fabric(tmp_path)
    doc = report([switch_port("leaf1", "swp7", "gpu07 mlx5_0/1")])
    run = run_act(doc, FakeSlurm.cluster(), tmp_path / "state", execute=True, switches=fab.switches)
    [q] = run.actions(QUARANTINE)
    assert q["status"] == "refused" and "leaf1 swp7 is not in the plan" in q["why"]
    assert run.status == 1 and fab.sent() == [] and fab.admin(7) == "up"
    gone = report([switch_port("leaf9", "swp3", "gpu03 mlx5_0/1")])
    run = run_act(gone, FakeSlurm.cluster(), tmp_path / "s2", execute=True, switches=fab.switches)
    assert "leaf9 is not in the inventory" in run.actions(QUARANTINE)[0]["why"]


def test_a_hosts_only_path_is_shut_only_once_the_host_is_drained(tmp_path):
    fab = Fabric(tmp_path)
    one_rail = [
        {"index": 0, "name": "mlx5_0/1", "link_layer": "Ethernet", "hosts": ["gpu03", "gpu04"]},
        {"index": 1, "name": "mlx5_1/1", "link_layer": "InfiniBand", "hosts": ["gpu03", "gpu04"]},
    ]
    doc = report([switch_port("leaf1", "swp3", "gpu03 mlx5_0/1")], rails=one_rail)
    # the drain refused (no drains this run): the port stays up, the host in service
    held = run_act(doc, FakeSlurm.cluster(), tmp_path / "s0", execute=True, switches=fab.switches,
                   rails=Rails(max_per_run=0))
    [q] = held.actions(QUARANTINE)
    assert q["status"] == "refused"
    assert "gpu03's only path to that fabric and gpu03 is not drained" in q["why"]
    assert fab.admin(3) == "up" and fab.sent() == []
    slurm = FakeSlurm.cluster()
    run = run_act(doc, slurm, tmp_path / "s1", execute=True, switches=fab.switches)
    assert run.targets(DRAIN, "done") == ["gpu03"] and run.targets(QUARANTINE, "done") == ["leaf1 swp3"]
    assert "gpu03" in slurm.drained() and fab.admin(3) == "down"


def test_a_host_already_out_of_service_lets_its_only_path_be_shut(tmp_path):
    fab = Fabric(tmp_path)
    one_rail = [{"index": 0, "name": "mlx5_0/1", "link_layer": "Ethernet", "hosts": ["gpu03", "gpu04"]}]
    doc = report([switch_port("leaf1", "swp3", "gpu03 mlx5_0/1")], rails=one_rail)
    slurm = FakeSlurm.cluster(gpu03=FakeNode(flags={"DRAIN"}, reason="bad dimm"))
    run = run_act(doc, slurm, tmp_path / "s", execute=True, switches=fab.switches)
    assert run.targets(QUARANTINE, "done") == ["leaf1 swp3"] and fab.admin(3) == "down"


def test_the_allow_list_applies_to_the_hosts_at_a_ports_end(tmp_path):
    fab = Fabric(tmp_path, links=UPLINKS, spine1="cumulus")
    doc = report([
        switch_port("leaf1", "swp3", "gpu03 mlx5_0/1"),
        switch_port("leaf1", "swp4", "gpu04 mlx5_0/1"),
        isl("leaf1", "swp31", "spine1", "swp1"),
    ])
    run = run_act(doc, FakeSlurm.cluster(), tmp_path / "s", execute=True, switches=fab.switches,
                  rails=Rails(allow=r"gpu0[14]"))
    assert run.targets(QUARANTINE, "done") == ["leaf1 swp4"]
    by = {a["target"]: a for a in run.actions(QUARANTINE, "refused")}
    assert "gpu03 (at its end) not in --allow" in by["leaf1 swp3"]["why"]
    assert "run without --allow" in by["ISL leaf1:swp31<>spine1:swp1"]["why"]
    assert [fab.admin(3), fab.admin(4), fab.admin(31)] == ["up", "down", "up"]


def test_an_inter_switch_link_is_shut_at_one_end_but_never_a_leafs_last(tmp_path):
    fab = Fabric(tmp_path, links=UPLINKS, spine1="cumulus")
    first = report([isl("leaf1", "swp31", "spine1", "swp1")])
    run = run_act(first, FakeSlurm.cluster(), tmp_path / "s1", execute=True, switches=fab.switches)
    [q] = run.actions(QUARANTINE)
    assert q["status"] == "done" and q["switch"] == "leaf1" and q["switch_port"] == "swp31"
    assert "hosts at its ends stay in service" in q["why"] and run.actions(DRAIN) == []
    assert fab.admin(31) == "down" and fab.admin(1, "spine1") == "up" and fab.sent("spine1") == []
    last = report([isl("leaf1", "swp32", "spine1", "swp2")])
    run = run_act(last, FakeSlurm.cluster(), tmp_path / "s2", execute=True, switches=fab.switches)
    [q] = run.actions(QUARANTINE)
    assert q["status"] == "refused" and "leaf1's last inter-switch link that is up" in q["why"]
    assert fab.admin(32) == "up" and run.status == 1


def test_an_infiniband_switch_port_is_left_to_be_done_by_hand(tmp_path):
    fab = Fabric(tmp_path, extra={"ib-leaf1": {"ansible_host": "10.0.0.9"}})
    doc = report([switch_port("ib-leaf1", "17", "gpu03 mlx5_0/1")])
    dry = run_act(doc, FakeSlurm.cluster(), tmp_path / "s1", switches=fab.switches)
    [q] = dry.actions(QUARANTINE)
    assert q["status"] == "not_automated" and "ib-leaf1 is not a switch fabricops drives" in q["why"]
    assert dry.status == 0 and "NOT DONE by act" in dry.out and "quarantine it by hand" in dry.out
    run = run_act(doc, FakeSlurm.cluster(), tmp_path / "s2", execute=True, switches=fab.switches)
    assert run.status == 1


@pytest.mark.parametrize(
    "os_name, fault, words",
    [
        ("onyx", "reject", "leaf1: step 'send' failed: the switch rejected a command"),
        ("onyx", "drop", "leaf1: step 'send' failed: the session dropped"),
        ("cumulus", "reject", "leaf1: step 'stage' failed: 'nv set interface swp3 link state down' answered"),
        ("cumulus", "drop", "leaf1: step 'stage' failed: the session dropped"),
    ],
)
def test_a_refused_command_or_a_dropped_session_is_failed_in_one_sentence(tmp_path, os_name, fault, words):
    fab = Fabric(tmp_path, os_name=os_name)
    rack = fab.racks["leaf1"]
    (rack.switch.state_dir / "faults.json").write_text(
        json.dumps({"rules": [{"match": "(shutdown|link state down)$", "action": fault}]})
    )
    doc = report([switch_port("leaf1", port(os_name, 3), "gpu03 mlx5_0/1")])
    run = run_act(doc, FakeSlurm.cluster(), tmp_path / "s", execute=True, switches=fab.switches)
    [q] = run.actions(QUARANTINE)
    assert q["status"] == "failed" and run.status == 1, q
    assert q["why"].startswith("gpu03 stays in service") and words in q["why"], q["why"]
    assert "\n" not in q["why"] and "Traceback" not in run.out
    assert fab.admin(3) == UP[os_name]


def test_a_change_running_on_the_switch_holds_the_quarantine_back(tmp_path):
    from fabricops.switch.lock import switch_lock

    fab = Fabric(tmp_path)
    doc = report([switch_port("leaf1", "swp3", "gpu03 mlx5_0/1")])
    with switch_lock("leaf1", "roce_switch state=merged"):
        run = run_act(doc, FakeSlurm.cluster(), tmp_path / "s", execute=True, switches=fab.switches)
    [q] = run.actions(QUARANTINE)
    assert q["status"] == "failed" and "another change is running on this switch" in q["why"]
    assert "roce_switch state=merged" in q["why"] and fab.sent() == [] and fab.admin(3) == "up"
    dry = run_act(doc, FakeSlurm.cluster(), tmp_path / "s2", switches=fab.switches)
    assert dry.targets(QUARANTINE, "planned") == ["leaf1 swp3"]  # a dry run reads without the lock


def test_a_host_port_a_user_table_quarantines_is_shut_at_its_switch_port(tmp_path):
    fab = Fabric(tmp_path)
    table = "rules:\n  - {check: hca_port, action: quarantine_port}\n"
    down = res("hosts", "hca_port", "gpu04", "mlx5_0/1", message="gpu04 mlx5_0/1: symbol errors 90000")
    run = run_act(report([down]), FakeSlurm.cluster(), tmp_path / "s", execute=True,
                  switches=fab.switches, table_text=table)
    [q] = run.actions(QUARANTINE)
    assert q["target"] == "gpu04 mlx5_0/1" and q["status"] == "done" and q["switch_port"] == "swp4"
    assert fab.admin(4) == "down"


def test_a_pending_nvue_revision_that_is_not_ours_is_left_alone(tmp_path):
    fab = Fabric(tmp_path)
    show(fab.racks["leaf1"].switch, "cumulus", "nv set system hostname staged-by-someone")
    doc = report([switch_port("leaf1", "swp3", "gpu03 mlx5_0/1")])
    run = run_act(doc, FakeSlurm.cluster(), tmp_path / "s", execute=True, switches=fab.switches)
    [q] = run.actions(QUARANTINE)
    assert q["status"] == "failed" and "pending revision that is not ours" in q["why"]
    assert "nothing was sent" in q["why"] and fab.admin(3) == "up"
    assert "staged-by-someone" in show(fab.racks["leaf1"].switch, "cumulus", "nv config diff")


def test_a_planned_port_the_switch_lacks_is_failed(tmp_path):
    fab = Fabric(tmp_path, hosts={"gpu03": 3, "gpu06": 40})  # the emulated switch has 32 ports
    doc = report([switch_port("leaf1", "swp40", "gpu06 mlx5_0/1")])
    run = run_act(doc, FakeSlurm.cluster(), tmp_path / "s", switches=fab.switches)
    [q] = run.actions(QUARANTINE)
    assert q["status"] == "failed" and "leaf1 lists no port swp40" in q["why"] and run.status == 1


def test_the_port_cap_is_an_option_beside_the_node_limits():
    import argparse

    from fabricops.act import cli as act_cli
    from fabricops.errors import UsageError

    parser = argparse.ArgumentParser()
    act_cli.register(parser.add_subparsers())
    args = parser.parse_args(["act", "r.json", "--max-quarantine-per-run", "5"])
    assert act_cli.rails_from(args).max_ports_per_run == 5
    assert act_cli.rails_from(parser.parse_args(["act", "r.json"])).max_ports_per_run == 2
    with pytest.raises(UsageError, match="--max-quarantine-per-run -1: give 0 or more"):
        act_cli.rails_from(parser.parse_args(["act", "r.json", "--max-quarantine-per-run", "-1"]))
