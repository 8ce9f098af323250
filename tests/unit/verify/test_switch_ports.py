"""The switches' view of every fabric port (fabricops.verify.switchports): planned vs read speed,
both ends of an inter-switch link named, error and flap limits, the ISL byte counters, and the rule
that a link neither measured nor read healthy leaves the run without a verdict (exit 4).

Port state comes from real captures (tests/fixtures/onyx-show, nvue-interface-link) through the
platforms' own parsers, or from the lab's emulated Onyx / NVUE switches (whose port views follow
those captures) with a lab fault in place."""

from __future__ import annotations

import json
import random
import re

import pytest
from captures import read_fixture
from fake_counters import PortCounters

from fabricops.errors import EXIT_FAILED, EXIT_NORUN, EXIT_OK
from fabricops.model.profiles import load_profile
from fabricops.roce.platforms import switch_platform
from fabricops.roce.platforms.base import PortState
from fabricops.verify import pairs, rounds, switchports
from fabricops.verify.engine import VerifyRun, exit_status
from fabricops.verify.result import CheckResult
from fabricops.verify.switchstate import SwitchPortsRead, SwitchReader
from fabricops_lab.switchd.nvue import NvueSession, NvueSwitch
from fabricops_lab.switchd.onyx import OnyxSession, OnyxSwitch

PROFILE = load_profile("hgx-h100-ndr")
BW = read_fixture("perftest-bw", "csegpu_ndr_write_bw_gbits_client.txt")
LAT = read_fixture("perftest-lat", "csegpu_ndr_send_lat_client.txt")
NVUE_TABLE = read_fixture("nvue-interface-link", "nvue-reference-swp1-link.txt")  # swp1 up at 1G
ONYX_FACTS = read_fixture("onyx-show", "show-interfaces-ethernet-3.6.5000.json")  # Eth1/1-2, 100 Gbps, Down
OPTS = {"bw_size": 8388608, "bw_qps": 1, "lat_size": 2, "base_port": 18515, "timeout_s": 60,
        "connect_retries": 5, "server_start_s": 0}


class CaptureReader:
    """A switch reader answering from captured show output, through the platforms' parsers."""

    def __init__(self, switches, down=()):
        self.switches = switches  # name -> (os, text)
        self.down = set(down)
        self.calls = []

    def port_states(self, switch, ports, qos=False):
        self.calls.append((switch, list(ports), qos))
        if switch in self.down:
            raise OSError(f"TCP connection to {switch}:22 timed out")
        os_name, text = self.switches[switch]
        states = switch_platform(os_name).port_states({"interfaces": text}, ports)
        return SwitchPortsRead(switch, os_name, states=dict(states),
                               missing=[p for p in ports if p not in states], qos=None)


def _plan(host_ports, links, rates):
    layers = {sw: "Ethernet" for _h, _d, sw, _p in host_ports}
    layers.update({e[k]: "Ethernet" for e in links for k in ("switch_a", "switch_b")})
    return switchports.plan_ports(host_ports, links, layers, rates, lambda sw: layers.get(sw) == "Ethernet")


# --- planned vs read, on real captures ------------------------------------------------------------


def test_a_host_port_is_held_to_its_planned_rate():
    reader = CaptureReader({"leaf1": ("cumulus", NVUE_TABLE)})
    host_ports = [("gpu01", "mlx5_1/1", "leaf1", "swp1")]
    cases = ((1.0, "pass", "leaf1 swp1 (gpu01 mlx5_1/1): up at 1 Gb/s (planned 1)"),
             (10.0, "fail", "leaf1 swp1 (gpu01 mlx5_1/1): trained at 1 Gb/s, planned 10"))
    for planned, status, text in cases:
        plan = _plan(host_ports, [], {("gpu01", "mlx5_1/1"): (planned, "the rail's rate")})
        reads = switchports.read_switches(reader, {"leaf1": plan.ports_of("leaf1")})
        (r,), health = switchports.judge(plan, reads, PROFILE)
        assert (r.category, r.check, r.host, r.device, r.status) == ("switches", "switch_port", "leaf1",
                                                                     "swp1", status)
        assert r.message.startswith(text), r.message
        assert (r.measured, r.threshold, r.unit) == (1.0, planned, "Gb/s")
        assert r.details["state"]["source"] == "nv show interface -o json"
        assert (health[("leaf1", "swp1")] is None) is (status == "pass")


def test_an_isl_names_both_ends():
    """An Onyx leaf (its ports down in the capture) to a Cumulus spine (up at 1G): one result for the
    link, each end's finding under its own name."""
    reader = CaptureReader({"leaf3": ("onyx", ONYX_FACTS), "spine1": ("cumulus", NVUE_TABLE)})
    links = [{"switch_a": "leaf3", "port_a": "Eth1/1", "switch_b": "spine1", "port_b": "swp1",
              "speed": "100GbE"}]
    plan = _plan([("gpu03", "mlx5_1/1", "leaf3", "Eth1/2")], links, {("gpu03", "mlx5_1/1"): (100.0, "rail")})
    assert [(e.name, e.gbps, e.source) for pair in plan.isls for e in pair] == [
        ("leaf3:Eth1/1", 100.0, "fabricops_switch_links speed 100GbE"),
        ("spine1:swp1", 100.0, "fabricops_switch_links speed 100GbE"),
    ]
    reads = switchports.read_switches(reader, {sw: plan.ports_of(sw) for sw in plan.switches})
    (host, r), health = switchports.judge(plan, reads, PROFILE)
    assert host.status == "fail" and host.message == "leaf3 Eth1/2 (gpu03 mlx5_1/1): link down"
    assert r.status == "fail" and (r.host, r.device) == ("leaf3<->spine1", "Eth1/1<->swp1")
    assert r.message == ("ISL leaf3:Eth1/1<>spine1:swp1 leaf3:Eth1/1 link down; spine1:swp1 trained at "
                         "1 Gb/s, planned 100 (fabricops_switch_links speed 100GbE)")
    assert set(r.details["ends"]) == {"leaf3:Eth1/1", "spine1:swp1"}
    assert health[("leaf3", "Eth1/1")] and health[("spine1", "swp1")]


def test_an_isl_without_a_planned_speed_is_held_to_the_fabrics_host_rate():
    links = [{"switch_a": "leaf1", "port_a": "swp33", "switch_b": "spine1", "port_b": "swp1"}]
    plan = _plan([("gpu01", "mlx5_1/1", "leaf1", "swp1")], links, {("gpu01", "mlx5_1/1"): (400.0, "rail")})
    (a, b), = plan.isls
    assert a.gbps == b.gbps == 400.0 and "no speed" in a.source
    assert plan.ports_of("leaf1") == ["swp1", "swp33"] and plan.switches == ["leaf1", "spine1"]


def test_a_switch_that_cannot_be_read_is_no_verdict_not_a_failure():
    reader = CaptureReader({"leaf1": ("cumulus", NVUE_TABLE)}, down={"leaf1"})
    plan = _plan([("gpu01", "mlx5_1/1", "leaf1", "swp1")], [], {("gpu01", "mlx5_1/1"): (1.0, "rail")})
    reads = switchports.read_switches(reader, {"leaf1": ["swp1"]})
    (r,), health = switchports.judge(plan, reads, PROFILE)
    assert r.status == "error" and switchports.no_verdict(r)
    assert "not checked: leaf1 could not be read (TCP connection to leaf1:22 timed out)" in r.message
    assert health[("leaf1", "swp1")].startswith("leaf1 could not be read")
    run = VerifyRun(hosts=["gpu01"], profile="p", only=None, results=[r])
    assert exit_status(run) == EXIT_NORUN


def test_a_port_the_switch_does_not_list_fails():
    reader = CaptureReader({"leaf1": ("cumulus", NVUE_TABLE)})
    plan = _plan([("gpu01", "mlx5_1/1", "leaf1", "swp7")], [], {("gpu01", "mlx5_1/1"): (1.0, "rail")})
    reads = switchports.read_switches(reader, {"leaf1": ["swp7"]})
    # the table names no port: it is read as the one asked for, so ask the tree for another name
    reads.reads["leaf1"].states.pop("swp7", None)
    reads.reads["leaf1"].missing = ["swp7"]
    (r,), _health = switchports.judge(plan, reads, PROFILE)
    assert r.status == "fail" and "not listed by the switch" in r.message


# --- the lab's emulated switches, a fault in place -------------------------------------------------


class EmuConn:
    """The session the SwitchReader's connector hands out: the emulator's own CLI, line by line."""

    def __init__(self, session):
        self.session = session
        self.sent = []

    def send_command(self, cmd, **_kw):
        self.sent.append(cmd)
        out, _drop = self.session.handle(cmd)
        return out

    def enable(self):
        self.session.handle("enable")

    def disconnect(self):
        pass


def _emulated(tmp_path, faults):
    """leaf3 (Onyx, SN4700) Eth1/1 to gpu03 and Eth1/18 up to spine2 (Cumulus) swp3, as the two-tier
    lab cables them; ``faults``: switch -> faults.json."""
    fab = tmp_path / "state" / "fabric"
    (fab / "switches").mkdir(parents=True)
    isl = {"switch_a": "leaf3", "port_a": "Eth1/18", "switch_b": "spine2", "port_b": "swp3",
           "speed": "400GbE", "width": "4X", "gbps": 400, "tier": "leaf_spine"}
    cabling = {"links": [{"host": "gpu03", "netdev": "enp170s0f0np0", "hca": "mlx5_1", "port": 1,
                          "switch": "leaf3", "switch_port": "Eth1/1"}],
               "isls": [isl], "switches": {"leaf3": {"os": "onyx", "tier": "leaf"},
                                           "spine2": {"os": "cumulus", "tier": "spine"}}}
    (fab / "cabling.json").write_text(json.dumps(cabling))
    hw = tmp_path / "state" / "hosts" / "gpu03" / "hw"
    hw.mkdir(parents=True)
    (hw / "hardware.json").write_text(json.dumps({"hcas": [{"name": "mlx5_1", "ports": [
        {"port": 1, "netdev": "enp170s0f0np0", "rate_gbps": 400, "width": "4X"}]}]}))
    sws = {}
    for name, os_name, ports in (("leaf3", "onyx", ["Eth1/1", "Eth1/17", "Eth1/18"]),
                                 ("spine2", "cumulus", ["swp1", "swp2", "swp3", "swp4"])):
        st = tmp_path / "sw" / name
        st.mkdir(parents=True)
        (st / "faults.json").write_text(json.dumps(faults.get(name, {})))
        cls = OnyxSwitch if os_name == "onyx" else NvueSwitch
        sws[name] = (os_name, cls(name, ports, st, fab / "switches" / f"{name}.json"))

    def connector(switch, os_name, hv):
        assert os_name == sws[switch][0]
        sw = sws[switch][1]
        if os_name == "onyx":
            sess = OnyxSession(sw)
            sess.handle("no cli session paging enable")
            return EmuConn(sess)
        return EmuConn(NvueSession(sw))

    hostvars = {"leaf3": {"fabricops_switch_os": "onyx"}, "spine2": {"fabricops_switch_os": "cumulus"}}
    reader = SwitchReader(lambda n: hostvars.get(n, {}), None, connector=connector)
    links = [{k: isl[k] for k in ("switch_a", "port_a", "switch_b", "port_b", "speed")}]
    plan = _plan([("gpu03", "mlx5_1/1", "leaf3", "Eth1/1")], links,
                 {("gpu03", "mlx5_1/1"): (400.0, "the highest rate ibstat reports on the rail")})
    return reader, plan


def test_emulated_isl_trained_at_half_width_fails_naming_both_ends(tmp_path):
    """`fabricops lab fault spine2 port-width swp3 2X` writes this at both ends of the link."""
    half = {"speed": "400GbE", "width": "2X", "gbps": 200}
    reader, plan = _emulated(tmp_path, {"leaf3": {"port_faults": {"Eth1/18": half}},
                                        "spine2": {"port_faults": {"swp3": half}}})
    reads = switchports.read_switches(reader, {sw: plan.ports_of(sw) for sw in plan.switches})
    assert not reads.errors
    results, health = switchports.judge(plan, reads, PROFILE)
    host, isl = results
    assert host.status == "pass" and host.message.startswith("leaf3 Eth1/1 (gpu03 mlx5_1/1): up at 400 Gb/s")
    assert isl.status == "fail", isl.message
    assert isl.message == ("ISL leaf3:Eth1/18<>spine2:swp3 trained at 200 Gb/s, planned 400 "
                           "(fabricops_switch_links speed 400GbE)")
    assert (isl.measured, isl.threshold) == (200.0, 400.0)
    ends = isl.details["ends"]
    assert ends["leaf3:Eth1/18"]["state"]["speed"] == "200 Gbps"  # Onyx "Actual speed"
    assert ends["spine2:swp3"]["state"]["speed"] == "200G"  # NVUE link speed
    assert health[("leaf3", "Eth1/18")] and health[("spine2", "swp3")]
    # healthy again: the same reads pass
    for d in (tmp_path / "sw").iterdir():
        (d / "faults.json").write_text("{}")
    reads = switchports.read_switches(reader, {sw: plan.ports_of(sw) for sw in plan.switches})
    results, health = switchports.judge(plan, reads, PROFILE)
    assert [r.status for r in results] == ["pass", "pass"], [r.message for r in results]
    assert results[1].message.startswith("ISL leaf3:Eth1/18<>spine2:swp3: up at 400 Gb/s (planned 400)")
    assert all(v is None for v in health.values())


def test_emulated_flapping_port_fails_on_its_counters(tmp_path):
    """`fabricops lab fault spine2 flapping swp3`: 8 flaps, 500 symbol errors, at both ends."""
    flap = {"flaps": 8, "symbol_errors": 500}
    reader, plan = _emulated(tmp_path, {"leaf3": {"port_faults": {"Eth1/18": flap}},
                                        "spine2": {"port_faults": {"swp3": flap}}})
    reads = switchports.read_switches(reader, {sw: plan.ports_of(sw) for sw in plan.switches})
    _host, isl = switchports.judge(plan, reads, PROFILE)[0]
    assert isl.status == "fail"
    assert "leaf3:Eth1/18 rx error packets 500 (limit 0 since the counters were cleared)" in isl.message
    assert "spine2:swp3 in-errors 500" in isl.message
    assert "spine2:swp3 went down 8 times (carrier-transitions / 2; fail at 5)" in isl.message
    assert "flapping" in isl.cause


def test_the_reader_reads_each_switch_once_with_its_own_show(tmp_path):
    reader, plan = _emulated(tmp_path, {})
    sent = []
    orig = reader.connector

    def spy(switch, os_name, hv):
        conn = orig(switch, os_name, hv)
        sent.append((switch, conn))
        return conn

    reader.connector = spy
    switchports.read_switches(reader, {sw: plan.ports_of(sw) for sw in plan.switches})
    cmds = {sw: c.sent for sw, c in sent}
    assert cmds == {"leaf3": ["show interfaces ethernet | json-print"],
                    "spine2": ["nv show interface -o json"]}


# --- ISL byte counters and the link proof -----------------------------------------------------------


def _roce(n=8, leaves=4):
    hosts = [f"gpu{i:02d}" for i in range(1, n + 1)]
    cab, per = [], {}
    for i, h in enumerate(hosts, 1):
        leaf = f"leaf{(i - 1) % leaves + 1}"
        per[leaf] = per.get(leaf, 0) + 1
        cab.append({"host": h, "hca": "mlx5_1", "port": 1, "netdev": "enp170s0f0np0", "switch": leaf,
                    "switch_port": f"swp{per[leaf]}"})
    links = [{"switch_a": f"leaf{li}", "port_a": f"swp{30 + s}", "switch_b": f"spine{s}",
              "port_b": f"swp{li}", "tier": "leaf_spine"} for li in range(1, leaves + 1) for s in (1, 2)]
    rail = pairs.Rail(0, "mlx5_1/1", "Ethernet", 400.0, {h: "mlx5_1/1" for h in hosts},
                      {h: f"203.0.113.{i}" for i, h in enumerate(hosts, 1)},
                      gid_index=dict.fromkeys(hosts, 3), tos=106)
    (plan,), why = rounds.plan_fabrics([rail], cab, links, {})
    assert not why
    return plan


class Fabric:
    """Hosts whose RoCE tests hash each QP onto an uplink (ECMP), and switches whose port counters
    count what crossed them: the reader answers ``port_states`` from those counters."""

    def __init__(self, fabric, down_switches=(), seed=7):
        self.f, self.rng = fabric, random.Random(seed)
        self.ip = {f"203.0.113.{i}": h for i, (h, _d) in enumerate(fabric.endpoints, 1)}
        self.tx = dict.fromkeys(fabric.isl_links(), 5000)  # control frames since boot
        self.down = set(down_switches)
        self.port_counters = PortCounters()
        self.reads = 0

    def run(self, host, cmd, timeout=60):
        answer = self.port_counters.answer(host, cmd)
        if answer is not None:
            return answer
        if "while :; do out=$(" not in cmd:
            return {"rc": 0, "stdout": "", "stderr": ""}
        if "ib_write_bw" not in cmd:
            return {"rc": 0, "stdout": LAT, "stderr": ""}
        peer = self.ip[re.search(r"(203\.0\.113\.\d+)", cmd)[1]]
        q = int(re.search(r" -q (\d+)", cmd)[1])
        ls, ld = self.f.leaf_of((host, "mlx5_1/1")), self.f.leaf_of((peer, "mlx5_1/1"))
        if ls != ld:
            for _ in range(q):
                up = self.f.uplinks(ls)[self.rng.randrange(len(self.f.uplinks(ls)))]
                (dn,) = self.f.downlinks(up[1][0], ld)
                self.tx[up] += 8 << 20
                self.tx[dn] += 8 << 20
        self.port_counters.credit(host, "mlx5_1", peer, "mlx5_1", BW)
        return {"rc": 0, "stdout": BW, "stderr": ""}

    def port_states(self, switch, ports, qos=False):
        self.reads += 1
        if switch in self.down:
            raise OSError(f"{switch}: authentication failed")
        states = {}
        for p in ports:
            out = next((b for d, b in self.tx.items() if d[0] == (switch, p)), None)
            inn = next((b for d, b in self.tx.items() if d[1] == (switch, p)), None)
            states[p] = PortState(p, "up", "up", 400.0, "400G", tx_bytes=out, rx_bytes=inn)
        return SwitchPortsRead(switch, "cumulus", states=states)


def _run(fab, plan, **kw):
    return rounds.run_coverage(fab.run, [plan], PROFILE, OPTS, **kw)


def test_isl_counters_prove_every_roce_isl_by_the_bytes_that_crossed_it():
    plan = _roce()
    fab = Fabric(plan.fabric)
    counters = switchports.IslCounters(fab)
    cr = _run(fab, plan, counters=counters, link_proof=switchports.LinkProof())
    assert cr.links_covered == cr.links_total == 2 * (8 + 8)
    assert all(r.ok for r in cr.results) and not [r for r in cr.results if r.check == "link_proof"]
    # read before the first round, then once after each round (the next round's "before")
    assert counters.reads == cr.rounds + 1


def test_control_frames_alone_prove_nothing():
    """A link whose counters moved by less than ISL_MIN_BYTES between reads (LLDP) is not crossed."""
    plan = _roce()
    fab = Fabric(plan.fabric)
    isls = sorted(plan.fabric.isl_links())

    def lldp_only(fabric, links):  # every read: a few frames more, never a test's bytes
        lldp_only.n += 1
        return {d: 5000 + 300 * lldp_only.n for d in links}

    lldp_only.n = 0
    cr = _run(fab, plan, counters=lldp_only)
    dark = [r for r in cr.results if r.check == "coverage"]
    assert len(dark) == len(isls) and all(r.status == "fail" for r in dark)  # read, and never moved


def test_switches_not_read_leave_the_isls_unproven_exit_4_or_accepted():
    plan = _roce()
    fab = Fabric(plan.fabric, down_switches={"spine1", "spine2", "leaf1", "leaf2", "leaf3", "leaf4"})
    cr = _run(fab, plan, counters=switchports.IslCounters(fab),
              link_proof=switchports.LinkProof(read_errors={"spine1": "authentication failed"}))
    proof = [r for r in cr.results if r.check == "link_proof"]
    assert len(proof) == 8 and all(switchports.no_verdict(r) for r in proof)
    assert all("the switch counters could not be read: no switch could be read" in r.message for r in proof)
    assert any("spine1 could not be read (authentication failed)" in r.message for r in proof)
    run = VerifyRun(hosts=list(plan.rail.devices), profile="p", only="pairs", results=cr.results)
    assert exit_status(run) == EXIT_NORUN  # no verdict: never 0, and not a failure of the hosts
    run.results.append(CheckResult("pairs", "ib_write_bw", "gpu01<->gpu02", "x", "fail", "slow"))
    assert exit_status(run) == EXIT_FAILED  # a real failure still says 1
    cr = _run(Fabric(plan.fabric, down_switches=fab.down), plan, counters=switchports.IslCounters(fab),
              link_proof=switchports.LinkProof(accept=True))
    accepted = [r for r in cr.results if r.check == "link_proof"]
    assert len(accepted) == 8 and all(r.status == "skip" and r.details["accepted"] for r in accepted)
    assert all(r.message.startswith("accepted unproven (--accept-unproven): rail mlx5_1/1: ISL ")
               for r in accepted)
    assert exit_status(VerifyRun(hosts=["gpu01"], profile="p", only="pairs", results=cr.results)) == EXIT_OK


def test_one_end_read_counts_both_directions_of_a_link():
    """A spine that cannot be read: its links are still counted at the leaf end (tx one way, rx the
    other); only a link with neither end read stays unproven."""
    plan = _roce()
    fab = Fabric(plan.fabric, down_switches={"spine2"})
    cr = _run(fab, plan, counters=switchports.IslCounters(fab), link_proof=switchports.LinkProof())
    assert cr.links_covered == cr.links_total and not [r for r in cr.results if r.check == "link_proof"]
    fab = Fabric(plan.fabric, down_switches={"spine2", "leaf3"})
    cr = _run(fab, plan, counters=switchports.IslCounters(fab), link_proof=switchports.LinkProof())
    (proof,) = [r for r in cr.results if r.check == "link_proof"]
    assert proof.details["link"] == "leaf3:swp32<>spine2:swp3" and switchports.no_verdict(proof)
    assert "leaf3 could not be read (leaf3: authentication failed); spine2 could not be read" in proof.message
    assert cr.links_covered == cr.links_total - 2


def test_isls_read_healthy_are_proven_by_the_read_when_no_byte_was_counted():
    plan = _roce()
    f = plan.fabric
    health = {end: None for d in f.isl_links() for end in d}
    cr = _run(Fabric(f), plan, link_proof=switchports.LinkProof(health=health))
    proof = [r for r in cr.results if r.check == "link_proof"]
    assert len(proof) == 8
    assert all(r.status == "pass" and r.details["proven_by"] == "switch read" for r in proof)
    assert len(cr.fabrics[0]["proven_by_switch_read"]) == 16 and not cr.fabrics[0]["unproven"]
    assert exit_status(VerifyRun(hosts=["gpu01"], profile="p", only="pairs", results=cr.results)) == EXIT_OK
    # one end read but degraded: that link stays unproven, naming why
    bad = f.uplinks("leaf2")[0]
    health[bad[0]] = "trained at 200 Gb/s, planned 400"
    cr = _run(Fabric(f), plan, link_proof=switchports.LinkProof(health=health))
    (unproven,) = [r for r in cr.results if r.check == "link_proof" and r.status != "pass"]
    assert f"{bad[0][0]}:{bad[0][1]} trained at 200 Gb/s, planned 400" in unproven.message


@pytest.mark.parametrize("status", ["fail", "error"])
def test_exit_status_keeps_real_failures(status):
    r = CheckResult("hosts", "hca_port", "gpu01", "mlx5_0/1", status, "gpu01 mlx5_0/1: state Down")
    assert exit_status(VerifyRun(hosts=["gpu01"], profile="p", only=None, results=[r])) == EXIT_FAILED
