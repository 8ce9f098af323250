"""Onyx ``show interfaces ethernet | json-print``: each port's state, actual speed and Rx/Tx counters,
read from real captures (tests/fixtures/onyx-show/, mellanox.onyx unit-test fixtures)."""

from __future__ import annotations

import json

import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers.onyx import parse_interfaces, speed_gbps
from fabricops.roce.platforms import switch_platform


def test_with_counters_before_3_6_6000():
    rec = parse_interfaces(read_fixture("onyx-show", "show-interfaces-3.6.5000.json"))
    assert rec.format == "json-header"
    assert list(rec.interfaces) == ["Eth1/1"]  # the "Vlan 10" / "Vlan 1002" blocks are not ports
    p = rec.interfaces["Eth1/1"]
    assert (p.admin_state, p.oper_state, p.up) == ("Enabled", "Down", False)
    assert (p.actual_speed, p.speed_gbps, p.mtu, p.last_change) == ("40 Gbps", 40.0, 1500, "Never")
    assert p.rx == {"error packets": 0, "packets": 0, "bytes": 0, "multicast packets": 0,
                    "unicast packets": 0, "discard packets": 0, "broadcast packets": 0}
    assert p.tx["hoq discard packets"] == 0 and p.tx["bytes"] == 0


def test_facts_form_two_ports_no_counters():
    rec = parse_interfaces(read_fixture("onyx-show", "show-interfaces-ethernet-3.6.5000.json"))
    assert list(rec.interfaces) == ["Eth1/1", "Eth1/2"]
    assert all(p.speed_gbps == 100.0 and p.rx == {} and p.tx == {} for p in rec.interfaces.values())


def test_one_key_dicts_from_3_6_6000():
    """From 3.6.6000 the same block sits under its port name ([{"Eth1/1": [{...}]}], the shape
    mellanox.onyx onyx_interface's API branch reads)."""
    (block,) = [b for b in json.loads(read_fixture("onyx-show", "show-interfaces-3.6.5000.json"))
                if b.get("header") == "Eth1/1"]
    fields = {k: v for k, v in block.items() if k != "header"}
    rec = parse_interfaces(json.dumps([{"Eth1/1": [fields]}]))
    assert rec.format == "json" and rec.interfaces["Eth1/1"].speed_gbps == 40.0


def test_platform_port_state_from_the_capture():
    plat = switch_platform("onyx")
    text = read_fixture("onyx-show", "show-interfaces-3.6.5000.json")
    states = plat.port_states({"interfaces": text}, ["Eth1/1", "Eth1/9"])
    assert list(states) == ["Eth1/1"]  # a port the switch does not list is left out
    st = states["Eth1/1"]
    assert (st.oper, st.admin, st.speed_gbps, st.speed_text) == ("down", "up", 40.0, "40 Gbps")
    assert (st.rx_bytes, st.tx_bytes) == (0, 0)
    assert st.errors == {"rx error packets": 0, "tx error packets": 0}
    assert st.flaps is None and st.width is None  # Onyx shows neither here
    assert st.source == "show interfaces ethernet | json-print"


@pytest.mark.parametrize(("text", "gbps"), [("100 Gbps", 100.0), ("40 Gbps", 40.0), ("400G", 400.0),
                                            ("25000 Mbps", 25.0), ("N\\A", None), ("Unknown", None),
                                            (None, None)])
def test_speed(text, gbps):
    assert speed_gbps(text) == gbps


@pytest.mark.parametrize("text", ["", "Eth1/1:\n  Admin state : Enabled\n", "[]", '{"Vlan 10": [{}]}',
                                  "[1, 2]"])
def test_not_the_json_of_ports_is_refused(text):
    with pytest.raises(ParseError):
        parse_interfaces(text)
