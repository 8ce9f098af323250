"""Two-tier topologies: switch tiers, inter-switch links (``links:``), their validation errors,
the two-tier data file, its scaling to 8/16/32 hosts, and ``--topology NAME`` resolution."""

from __future__ import annotations

import collections
import copy
import json
import math

import pytest
import yaml

from fabricops import cli
from fabricops_lab import hardware, inventory, paths, rack, topology
from fabricops_lab.topology import TopologyError

TWO_TIER = paths.DATA_DIR / "topology-two-tier.yml"
IB_LEAVES = [f"ib-leaf{k}" for k in range(1, 5)]
ROCE_LEAVES = [f"leaf{k}" for k in range(1, 5)]
IB_SPINES = ["ib-spine1", "ib-spine2"]
ROCE_SPINES = ["spine1", "spine2"]


@pytest.fixture
def raw():
    return yaml.safe_load(TWO_TIER.read_text())


def _err(raw) -> str:
    with pytest.raises(TopologyError) as info:
        topology.normalise(raw, source="t.yml")
    msg = str(info.value)
    assert msg.startswith("topology t.yml: ") and "\n" not in msg
    return msg


# --- the data file ------------------------------------------------------------------------------


def test_two_tier_file_shape():
    topo = topology.load(TWO_TIER)
    sws = {s["name"]: s for s in topo["switches"]}
    assert [h["name"] for h in topo["hosts"]] == [f"gpu{i:02d}" for i in range(1, 9)]
    assert {n: (s["os"], s["tier"]) for n, s in sws.items()} == {
        **{n: ("ib", "leaf") for n in IB_LEAVES},
        **{n: ("ib", "spine") for n in IB_SPINES},
        "leaf1": ("cumulus", "leaf"),
        "leaf2": ("cumulus", "leaf"),
        "leaf3": ("onyx", "leaf"),
        "leaf4": ("onyx", "leaf"),
        **{n: ("cumulus", "spine") for n in ROCE_SPINES},
    }
    for h in topo["hosts"]:  # one NDR IB port and one 400GbE RoCE port
        ports = [
            (hca["name"], p["netdev"], p["link_layer"], p["rate_gbps"])
            for hca in h["hcas"]
            for p in hca["ports"]
        ]
        assert ports == [
            ("mlx5_0", "ibp26s0", "InfiniBand", 400),
            ("mlx5_1", "enp170s0f0np0", "Ethernet", 400),
        ]
    # host i on leaf ((i-1) % 4)+1 of each fabric
    for c in topo["cabling"]:
        i = int(c["host"][3:])
        want = (IB_LEAVES if c["netdev"] == "ibp26s0" else ROCE_LEAVES)[(i - 1) % 4]
        assert c["switch"] == want
    # U = 1: one link from every leaf to each spine of its fabric, leaf first, NDR 4X / 400GbE
    pairs = collections.Counter((ln["switch_a"], ln["switch_b"]) for ln in topo["links"])
    assert pairs == {
        (lf, sp): 1
        for lfs, sps in ((IB_LEAVES, IB_SPINES), (ROCE_LEAVES, ROCE_SPINES))
        for lf in lfs
        for sp in sps
    }
    for ln in topo["links"]:
        assert set(ln) == {"switch_a", "port_a", "switch_b", "port_b", "speed", "width", "gbps", "tier"}
        assert ln["tier"] == "leaf_spine" and ln["width"] == "4X" and ln["gbps"] == 400
        assert ln["speed"] == ("NDR" if ln["switch_a"].startswith("ib-") else "400GbE")


def test_two_tier_file_equals_its_own_scaling_to_8(raw):
    """The file is what the scaling rule gives for 8 hosts: the rule and the file cannot drift apart."""
    assert topology.scaled(8, raw) == topology.load(TWO_TIER)


def test_topology_name_resolves_to_the_data_dir():
    assert topology.resolve("two-tier") == topology.load(TWO_TIER)
    assert topology.resolve("default") == topology.load()
    assert topology.resolve(None, None) == topology.load()
    assert topology.resolve(str(TWO_TIER)) == topology.load(TWO_TIER)
    assert rack.resolve_topology("two-tier", 16) == topology.scaled(16, yaml.safe_load(TWO_TIER.read_text()))
    assert len(rack.resolve_topology(None, 6)["hosts"]) == 6  # --hosts alone: the default rack's shape


def test_unknown_topology_name_is_one_sentence(capsys, monkeypatch):
    with pytest.raises(TopologyError) as info:
        topology.resolve("three-tier")
    msg = str(info.value)
    assert msg == (
        "topology: --topology: 'three-tier' is neither a file nor a lab topology "
        "(one of arm64, b200, default, gb200, gb200-rpm, rpm, two-tier, variants)"
    )
    # the CLI takes --topology and --hosts together and prints the sentence; rack.up is replaced by
    # its first step that reads them (a unit test never brings a lab up)
    seen = []

    def up(topology_file, n_hosts, inventory_dir):
        seen.append((topology_file, n_hosts))
        return rack.resolve_topology(topology_file, n_hosts)

    monkeypatch.setattr(rack, "up", up)
    rc = cli.main(["lab", "up", "--topology", "three-tier", "--hosts", "8"])
    err = capsys.readouterr().err.strip()
    assert seen == [("three-tier", 8)]
    assert rc != 0 and "'three-tier' is neither a file nor a lab topology" in err and "\n" not in err


# --- scaling ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [8, 16, 32])
def test_scaled_two_tier_shapes(raw, n):
    topo = topology.scaled(n, raw)
    assert [h["name"] for h in topo["hosts"]] == [f"gpu{i:02d}" for i in range(1, n + 1)]
    tiers = {s["name"]: s["tier"] for s in topo["switches"]}
    for leaves, spines in ((IB_LEAVES, IB_SPINES), (ROCE_LEAVES, ROCE_SPINES)):
        on_leaf = collections.Counter(c["switch"] for c in topo["cabling"] if c["switch"] in leaves)
        assert on_leaf == {lf: n // 4 for lf in leaves}  # hosts spread evenly
        u = max(1, math.ceil(n / 4 / 2))
        for lf in leaves:
            per_spine = collections.Counter(ln["switch_b"] for ln in topo["links"] if ln["switch_a"] == lf)
            assert per_spine == {sp: u for sp in spines}
            assert 2 * u >= on_leaf[lf]  # non-blocking: as many uplinks as hosts (or more)
    assert {tiers[ln["switch_a"]] for ln in topo["links"]} == {"leaf"}
    assert {tiers[ln["switch_b"]] for ln in topo["links"]} == {"spine"}
    # no switch port is used twice, by a host cable or a link
    used = [(c["switch"], c["switch_port"]) for c in topo["cabling"]]
    used += [(ln[f"switch_{e}"], ln[f"port_{e}"]) for ln in topo["links"] for e in "ab"]
    assert len(used) == len(set(used))
    ports = {s["name"]: s["ports"] for s in topo["switches"]}
    assert all(p in ports[s] for s, p in used)
    # every host on both fabrics, its IB port on leaf ((i-1) % 4)+1
    assert len(topo["cabling"]) == 2 * n
    for c in topo["cabling"]:
        if c["netdev"] == "ibp26s0":
            assert c["switch"] == IB_LEAVES[(int(c["host"][3:]) - 1) % 4]


def test_scaled_32_uplinks_and_ports(raw):
    topo = topology.scaled(32, raw)
    leaf3 = sorted(
        (ln["port_a"], ln["switch_b"], ln["port_b"]) for ln in topo["links"] if ln["switch_a"] == "leaf3"
    )
    # Onyx SN4700 (32 ports): hosts on Eth1/1-8, U = 4 uplinks per spine from the upper half
    assert [p for p, _, _ in leaf3] == sorted(f"Eth1/{k}" for k in range(17, 25))
    assert {(sp, p) for _, sp, p in leaf3} == {("spine1", f"swp{k}") for k in range(9, 13)} | {
        ("spine2", f"swp{k}") for k in range(9, 13)
    }
    hosts3 = sorted(c["switch_port"] for c in topo["cabling"] if c["switch"] == "leaf3")
    assert hosts3 == sorted(f"Eth1/{k}" for k in range(1, 9))


def test_scaled_grows_switch_ports(raw):
    """63 hosts: 16 on an Onyx leaf whose 32 ports then take 16 + 16 uplinks; a small leaf grows."""
    for s in raw["switches"]:
        if s["name"] == "leaf3":
            s["ports"]["count"] = 8
    topo = topology.scaled(20, raw)
    leaf3 = next(s for s in topo["switches"] if s["name"] == "leaf3")
    # 5 hosts on leaf3, uplinks from max(8 // 2, 5) = port 6 on: 5 + 2 * 3 = 11 ports
    assert leaf3["ports"] == [f"Eth1/{k}" for k in range(1, 12)]
    up = sorted(int(ln["port_a"].split("/")[1]) for ln in topo["links"] if ln["switch_a"] == "leaf3")
    assert up == list(range(6, 12))


def test_scaled_fewer_hosts_than_leaves_keeps_every_leaf_linked(raw):
    topo = topology.scaled(2, raw)
    assert len(topo["cabling"]) == 4
    assert {ln["switch_a"] for ln in topo["links"]} == set(IB_LEAVES + ROCE_LEAVES)


# --- validation: one sentence naming the key path -------------------------------------------------


def _link(raw, i):
    return raw["links"][i]


def test_bad_tier(raw):
    raw["switches"][0]["tier"] = "core"
    assert "switches[0].tier: 'core' is not a switch tier (one of leaf, spine)" in _err(raw)


def test_link_unknown_switch(raw):
    _link(raw, 0)["switch_b"] = "ib-spine9"
    assert "links[0].switch_b: 'ib-spine9' is not a switch of this topology" in _err(raw)


def test_link_unknown_port(raw):
    _link(raw, 0)["port_a"] = "99"
    assert "links[0].port_a: ib-leaf1 has no port '99'" in _err(raw)


def test_link_port_used_by_a_host_cable(raw):
    _link(raw, 0)["port_a"] = "1"  # gpu01's IB cable
    assert "links[0].port_a: ib-leaf1:1 is already cabled by cabling[0]" in _err(raw)


def test_link_port_used_by_another_link(raw):
    _link(raw, 1)["port_b"] = "1"  # ib-spine2:1 ... and links[2] takes ib-spine1:2 -> make it spine1:1
    _link(raw, 2)["port_b"] = "1"
    assert "links[2].port_b: ib-spine1:1 is already cabled by links[0]" in _err(raw)


def test_link_infiniband_to_ethernet(raw):
    _link(raw, 0)["switch_b"], _link(raw, 0)["port_b"] = "spine1", "swp40"
    assert (
        "links[0].switch_b: ib switch ib-leaf1 cannot be linked to cumulus switch spine1 "
        "(InfiniBand and Ethernet are separate fabrics)"
    ) in _err(raw)


def test_link_leaf_to_leaf_refused(raw):
    _link(raw, 0)["switch_b"], _link(raw, 0)["port_b"] = "ib-leaf2", "40"
    assert (
        "links[0].switch_b: ib-leaf1 and ib-leaf2 are both leaves: a link joins a leaf and a spine "
        "(the lab models two-tier leaf-spine fabrics only)"
    ) in _err(raw)


def test_link_spine_to_spine_refused(raw):
    _link(raw, 0).update(switch_a="ib-spine1", port_a="40", switch_b="ib-spine2", port_b="40")
    assert "links[0].switch_b: ib-spine1 and ib-spine2 are both spines" in _err(raw)


def test_link_to_itself_refused(raw):
    _link(raw, 0).update(switch_b="ib-leaf1", port_b="40")
    assert "links[0].switch_b: ib-leaf1 and ib-leaf1 are both leaves" in _err(raw)


def test_host_cable_to_a_spine_refused(raw):
    raw["cabling"][0].update(switch="ib-spine1", port="40")
    assert "cabling[0].switch: ib-spine1 is a spine: hosts are cabled to leaves" in _err(raw)


def test_link_unknown_key_and_missing_key(raw):
    _link(raw, 0)["lanes"] = 4
    assert "links[0].lanes: unknown key" in _err(raw)
    del _link(raw, 0)["lanes"]
    del _link(raw, 0)["port_b"]
    assert "links[0].port_b: is required" in _err(raw)


def test_links_must_be_a_list(raw):
    raw["links"] = {"a": 1}
    assert "links: must be a list, not a mapping" in _err(raw)


def test_link_bad_speed_and_width(raw):
    _link(raw, 0)["speed"] = "400GbE"
    assert "links[0].speed: '400GbE' is not an InfiniBand speed" in _err(raw)
    _link(raw, 0)["speed"] = "HDR"
    _link(raw, 0)["width"] = "3X"
    assert "links[0].width: '3X' is not a link width" in _err(raw)
    _link(raw, 0)["width"] = "2X"
    _link(raw, 8)["speed"] = "NDR"
    assert "links[8].speed: 'NDR' is not an Ethernet speed (like 400GbE)" in _err(raw)


def test_link_bad_tier_key(raw):
    _link(raw, 0)["tier"] = "spine_core"
    assert "links[0].tier: 'spine_core' is not a link tier the lab models (one of leaf_spine)" in _err(raw)
    _link(raw, 0)["tier"] = "leaf_spine"  # the planner's own value is accepted
    topology.normalise(raw)


def test_link_speed_needs_a_host_port_on_the_fabric(raw):
    raw["cabling"] = [c for c in raw["cabling"] if c["netdev"] != "ibp26s0"]
    assert "links[0].speed: is required (no host port is cabled to this fabric to take it from)" in _err(raw)
    for ln in raw["links"][:8]:
        ln["speed"] = "HDR"
    topo = topology.normalise(raw)
    assert {ln["gbps"] for ln in topo["links"][:8]} == {200}


def test_link_explicit_speed_and_spine_first_is_normalised(raw):
    _link(raw, 0).update(
        switch_a="ib-spine1", port_a="1", switch_b="ib-leaf1", port_b="33", speed="HDR", width="2X"
    )
    ln = topology.normalise(raw)["links"][0]
    assert ln == {
        "switch_a": "ib-leaf1",
        "port_a": "33",
        "switch_b": "ib-spine1",
        "port_b": "1",
        "speed": "HDR",
        "width": "2X",
        "gbps": 100,
        "tier": "leaf_spine",
    }


def test_the_default_rack_has_no_links_and_leaf_switches():
    topo = topology.load()
    assert topo["links"] == [] and {s["tier"] for s in topo["switches"]} == {"leaf"}


# --- what the lab writes from it -----------------------------------------------------------------


def test_cabling_json_has_isls_and_switch_tiers():
    topo = topology.load(TWO_TIER)
    cab = hardware.cabling_json(topo)
    assert cab["links"] == topo["cabling"]
    assert cab["isls"] == topo["links"] and len(cab["isls"]) == 16
    assert cab["isls"][0] == {
        "switch_a": "ib-leaf1",
        "port_a": "33",
        "switch_b": "ib-spine1",
        "port_b": "1",
        "speed": "NDR",
        "width": "4X",
        "gbps": 400,
        "tier": "leaf_spine",
    }
    assert cab["switches"]["ib-spine2"] == {"os": "ib", "tier": "spine"}
    assert cab["switches"]["leaf3"] == {"os": "onyx", "tier": "leaf"}
    assert len(cab["switches"]) == 12
    default = hardware.cabling_json(topology.load())
    assert default["isls"] == [] and set(default["switches"]) == {"ib-sw1", "leaf-onyx", "leaf-cumulus"}


def _lab(topo):
    return {"name": topo["name"], "topology": topo, "hosts": {}, "switches": {}}


def test_inventory_switch_links_and_tiers(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    topo = topology.load(TWO_TIER)
    gv = yaml.safe_load(inventory.render(_lab(topo))["group_vars/all.yml"])
    assert gv["fabricops_switch_links"][0] == {
        "switch_a": "ib-leaf1",
        "port_a": "33",
        "switch_b": "ib-spine1",
        "port_b": "1",
        "tier": "leaf_spine",
        "speed": "NDR",
    }
    assert len(gv["fabricops_switch_links"]) == 16
    hosts = yaml.safe_load(inventory.render(_lab(topo))["hosts.yml"])["all"]["children"]
    ib = hosts["ib_switches"]["hosts"]
    assert (
        ib["ib-spine1"]["fabricops_switch_tier"] == "spine"
        and ib["ib-leaf4"]["fabricops_switch_tier"] == "leaf"
    )
    sw = hosts["switches"]["children"]
    assert sw["onyx_switches"]["hosts"]["leaf3"]["fabricops_switch_tier"] == "leaf"
    assert sw["cumulus_switches"]["hosts"]["spine2"]["fabricops_switch_tier"] == "spine"
    assert set(sw["cumulus_switches"]["hosts"]) == {"leaf1", "leaf2", "spine1", "spine2"}


def test_inventory_of_the_default_rack_is_unchanged(tmp_path, monkeypatch):
    """No links: no fabricops_switch_links and no tier variables, the files as before."""
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    topo = topology.load()
    files = inventory.render(_lab(topo))
    assert "fabricops_switch_links" not in files["group_vars/all.yml"]
    assert "fabricops_switch_tier" not in files["hosts.yml"]
    legacy = copy.deepcopy(topo)
    del legacy["links"]
    for s in legacy["switches"]:
        del s["tier"]
    assert inventory.render(_lab(legacy)) == files


def test_isl_ports_reach_the_switch_emulators(tmp_path, monkeypatch):
    """Every ISL port is in its switch's port list: the IB fabric file lists it, switchd gets it in
    --ports, and the Onyx and NVUE emulators accept it (running state, fabric file)."""
    from fabricops_lab import switches
    from fabricops_lab.switchd.nvue import NvueSwitch
    from fabricops_lab.switchd.onyx import OnyxSwitch

    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    topo = topology.scaled(16, yaml.safe_load(TWO_TIER.read_text()))
    sws = {s["name"]: s for s in topo["switches"]}
    isl = collections.defaultdict(set)
    for ln in topo["links"]:
        isl[ln["switch_a"]].add(ln["port_a"])
        isl[ln["switch_b"]].add(ln["port_b"])
    data = json.loads(switches.write_ib_switch(sws["ib-spine1"]).read_text())
    assert isl["ib-spine1"] <= set(data["ports"]) and all(
        data["ports"][p] == {"link": "up"} for p in isl["ib-spine1"]
    )
    info = {
        "mgmt_ip": "198.51.100.1",
        "host_key": "k",
        "password_file": "p",
        "state_dir": "s",
        "fabric_file": "f",
    }
    argv = switches.switchd_command(sws["leaf3"], info)
    assert isl["leaf3"] <= set(argv[argv.index("--ports") + 1].split(","))
    onyx = OnyxSwitch("leaf3", sws["leaf3"]["ports"], tmp_path / "leaf3", tmp_path / "leaf3.json")
    fab = json.loads((tmp_path / "leaf3.json").read_text())
    assert isl["leaf3"] <= set(fab["ports"]) and isl["leaf3"] <= set(onyx.cfg["ports"])
    nv = NvueSwitch("spine1", sws["spine1"]["ports"], tmp_path / "spine1", tmp_path / "spine1.json")
    fab = json.loads((tmp_path / "spine1.json").read_text())
    assert isl["spine1"] <= set(fab["ports"]) and isl["spine1"] <= set(nv.ports)


def test_fabric_bridges_join_each_fabric_as_a_loop_free_star(monkeypatch):
    """fo-fabric: each leaf bridge gets one trunk to its fabric's first spine (hosts on different
    leaves reach each other's data addresses); no spine-spine or second path, so no bridge loop."""
    from fabricops_lab import network

    topo = topology.load(TWO_TIER)
    assert network.fabric_trunks(topo["switches"], topo["links"]) == [
        *((lf, "ib-spine1") for lf in IB_LEAVES),
        *((lf, "spine1") for lf in ROCE_LEAVES),
    ]
    assert network.fabric_trunks(topology.load()["switches"], []) == []  # one tier: no trunk
    batches = []
    monkeypatch.setattr(network, "netns_exists", lambda name: True)
    monkeypatch.setattr(network, "link_exists", lambda name, netns=None: False)
    monkeypatch.setattr(network, "ip_batch", lambda lines, netns=None: batches.append((netns, lines)))
    network.ensure_fabric(topo["switches"], topo["links"])
    ((ns, lines),) = batches
    assert ns == network.FABRIC_NS
    a, b = network.trunk_veths("leaf3")
    assert len(a) <= 15 and len(b) <= 15
    assert f"link set {a} master br-leaf3 up" in lines and f"link set {b} master br-spine1 up" in lines
    trunks = [ln for ln in lines if " type veth " in ln]
    assert len(trunks) == 8 and all("mtu 9216" in ln for ln in trunks)
    # bridges first, then the trunks that join them
    assert max(i for i, ln in enumerate(lines) if "type bridge" in ln) < min(
        i for i, ln in enumerate(lines) if " type veth " in ln
    )
