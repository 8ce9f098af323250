"""The knob tables (parse and render from one declaration) and the desired-state model."""

from __future__ import annotations

import pytest
from captures import read_fixture

from fabricops.errors import FabricopsError
from fabricops.roce.platforms.nvue import NVUE_KNOBS, nvue_facts
from fabricops.roce.platforms.onyx import ONYX_KNOBS, onyx_facts
from fabricops.roce.resource import config_lines, facts_from_onyx_config
from fabricops.roce.switchspec import normalize_ports, ports_from_cabling, switch_spec, want_facts
from fabricops.switch.knobs import bytes_value

ROCE = {"lossless_priority": 3, "dscp": 26}


@pytest.mark.parametrize("os_name", ["onyx", "cumulus"])
def test_every_wanted_fact_renders_a_line_that_parses_back(os_name):
    ports = ["Eth1/1", "Eth1/2"] if os_name == "onyx" else ["swp1", "swp2"]
    want = want_facts(switch_spec(os_name, ROCE, ports))
    lines = config_lines(os_name, want)
    if os_name == "onyx":
        text = "\n".join(["## Running database \"initial\"", "hostname sw1", *lines])
        assert facts_from_onyx_config(text) == want
    else:  # build the tree the lines describe, then read it back
        tree: dict = {}
        for line in lines:
            words = line.split()[2:]
            knob = next(k for k in NVUE_KNOBS if _match(k, words))
            node = tree
            path = words[:-1] if knob.leaf else words
            for w in path[:-1]:
                node = node.setdefault(w, {})
            node[path[-1]] = words[-1] if knob.leaf else {}
        assert nvue_facts(tree.get("qos"), tree.get("interface")) == want


def _match(knob, words):
    path = list(knob.path)
    body = words[:-1] if knob.leaf else words
    same = all(p.startswith("{") or p == w for p, w in zip(path, body, strict=False))
    return len(path) == len(body) and same


def test_onyx_real_running_config_capture():
    text = read_fixture("onyx-running-config", "ansible-onyx-config.txt")
    facts = facts_from_onyx_config(text)
    assert facts[("pfc",)] is True
    assert facts[("port_pfc", "Eth1/7")] is True and facts[("port_pfc", "Eth1/8")] is True
    assert facts[("port_pfc", "Po1")] is True
    assert ("port_pfc", "Eth1/1") not in facts
    assert not any(k[0] == "pfc_priority" for k in facts)


def test_onyx_parse_reads_force_optional_and_last_line_wins():
    facts = onyx_facts(
        ["dcb priority-flow-control enable", "dcb priority-flow-control priority 3 enable", "roce lossless"],
        {"Eth1/1": ["qos trust L2", "qos trust L3", "dcb priority-flow-control mode on",
                    "no traffic-class 3 congestion-control", "description uplink"]},
    )
    assert facts == {
        ("pfc",): True,
        ("pfc_priority", 3): True,
        ("roce",): "lossless",
        ("port_trust", "Eth1/1"): "L3",
        ("port_pfc", "Eth1/1"): True,
    }


def test_onyx_ecn_template_regex_and_render():
    knob = next(k for k in ONYX_KNOBS if k.name == "port_ecn")
    key, value = knob.parse(
        "traffic-class 3 congestion-control ecn minimum-absolute 150 maximum-absolute 1500", "Eth1/4"
    )
    assert key == ("port_ecn", "Eth1/4", 3) and value == (150, 1500)
    assert knob.render_remove(key, value) == "no traffic-class 3 congestion-control"
    assert knob.parse("traffic-class 9 congestion-control ecn minimum-absolute 1 maximum-absolute 2") is None


def test_nvue_tree_reading_normalises_sizes_and_bare_values():
    qos = {
        "congestion-control": {"default-global": {"traffic-class": {"3": {
            "min-threshold": "150KB", "max-threshold": "1.5MB", "probability": "100", "ecn": "enable"}}}},
        "egress-scheduler": {"default-global": {"traffic-class": {"3": {"bw-percent": {"50": {}}}}}},
        "pfc": {"default-global": {"switch-priority": {"3": {}}}},
    }
    facts = nvue_facts(qos, {"swp2": {"qos": {"pfc-watchdog": {}}}})
    assert facts[("ecn_min", 3)] == 150000 and facts[("ecn_max", 3)] == 1500000
    assert facts[("ecn_probability", 3)] == 100 and facts[("ets_bw", 3)] == 50
    assert facts[("pfc_priority", 3)] is True and facts[("port_pfc_wd", "swp2")] is True
    assert bytes_value("146KB") == 146000 and bytes_value("nonsense") is None


def test_want_comes_from_the_shared_definition():
    spec = switch_spec("onyx", {"lossless_priority": 4, "dscp": 34, "cnp_priority": 6,
                                "ecn": {"min_kb": 200, "max_kb": 2000}}, ["eth1/2", "1/1"])
    assert spec.ports == ["Eth1/1", "Eth1/2"]
    want = want_facts(spec)
    assert want[("pfc_priority", 4)] is True and ("pfc_priority", 3) not in want
    assert want[("port_ecn", "Eth1/2", 4)] == (200, 2000)
    assert want[("port_ets", "Eth1/1", 6)] == "strict" and want[("port_ets", "Eth1/1", 4)] == "wrr 50"
    nv = want_facts(switch_spec("cumulus", {"lossless_priority": 4, "dscp": 34}, ["swp1"]))
    assert nv[("dscp_map", 34)] == 4 and nv[("dscp_map", 48)] == 6 and nv[("pfc_priority", 4)] is True
    assert nv[("ecn_min", 4)] == 150000 and nv[("roce_mode",)] == "lossless"


def test_onyx_refuses_a_dscp_map_it_cannot_render():
    with pytest.raises(FabricopsError, match="DSCP 46 -> 3"):
        switch_spec("onyx", {"lossless_priority": 3, "dscp": 46}, ["Eth1/1"])
    with pytest.raises(FabricopsError, match="lossless_priority is 9"):
        switch_spec("onyx", {"lossless_priority": 9}, ["Eth1/1"])
    with pytest.raises(FabricopsError, match="not an Onyx"):
        normalize_ports("onyx", ["swp1"])
    with pytest.raises(FabricopsError, match="buffer_pool"):
        switch_spec("onyx", ROCE, ["Eth1/1"], buffer_pool="lossless")


def test_ports_from_cabling():
    cabling = [
        {"host": "gpu01", "netdev": "enp170s0f0np0", "hca": "mlx5_2", "port": 1, "switch": "leaf-onyx",
         "switch_port": "Eth1/1"},
        {"host": "gpu01", "netdev": "ibp26s0", "hca": "mlx5_0", "port": 1, "switch": "ib-sw1",
         "switch_port": "1"},
        {"host": "gpu02", "netdev": "enp170s0f0np0", "hca": "mlx5_2", "port": 1, "switch": "leaf-onyx",
         "switch_port": "Eth1/10"},
    ]
    assert ports_from_cabling(cabling, "leaf-onyx") == ["Eth1/1", "Eth1/10"]
    assert normalize_ports("onyx", ports_from_cabling(cabling, "leaf-onyx")[::-1]) == ["Eth1/1", "Eth1/10"]
    assert ports_from_cabling(cabling, "leaf-cumulus") == []
