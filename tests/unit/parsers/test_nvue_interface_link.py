"""NVUE interface link state, speed and counters (``nv show interface [-o json]``,
``nv show interface <port> link [stats]``), read from real captures in NVIDIA's own documentation
(tests/fixtures/nvue-interface-link/)."""

from __future__ import annotations

import json

import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers.nvue import parse_interface_links
from fabricops.roce.platforms import switch_platform

STATS = read_fixture("nvue-interface-link", "cl512-api-swp1-link-stats.json")
TREE = read_fixture("nvue-interface-link", "cl512-api-interface.json")
TABLE = read_fixture("nvue-interface-link", "nvue-reference-swp1-link.txt")


def test_operational_interface_tree():
    rec = parse_interface_links(TREE)
    assert rec.source == "json" and list(rec.interfaces) == ["eth0"]
    eth0 = rec.interfaces["eth0"]
    assert eth0.state == "up" and eth0.up  # JSON prints a state as a set: {"up": {}}
    assert eth0.mtu == 1500 and eth0.speed is None
    assert eth0.stats["carrier-transitions"] == 2
    assert (eth0.stats["in-bytes"], eth0.stats["out-bytes"]) == (184151, 117506)


def test_link_stats_object():
    ln = parse_interface_links(STATS, "swp1").interfaces["swp1"]
    assert ln.state is None and ln.speed_gbps is None
    assert ln.stats == {"carrier-transitions": 6, "in-bytes": 293771538, "in-drops": 0, "in-errors": 0,
                        "in-pkts": 2321737, "out-bytes": 366068936, "out-drops": 0, "out-errors": 0,
                        "out-pkts": 3536629}


def test_link_table_operational_column():
    rec = parse_interface_links(TABLE, "swp1")
    assert rec.source == "text"
    ln = rec.interfaces["swp1"]
    assert (ln.state, ln.speed, ln.speed_gbps, ln.mtu) == ("up", "1G", 1.0, 9000)  # not the applied 9216
    assert ln.stats["carrier-transitions"] == 6 and ln.stats["in-pkts"] == 324461
    assert ln.stats["out-errors"] == 0
    assert ln.stats["in-bytes"] == pytest.approx(39.21 * 1024**2, rel=1e-3)  # the table rounds


def test_newer_release_shape_with_oper_status():
    """5.9+ adds admin-status / oper-status beside the state set: oper-status is read first."""
    link = json.loads(STATS)
    doc = {"swp1": {"link": {"admin-status": "up", "oper-status": "down", "state": {"up": {}},
                             "speed": "400G", "stats": link}, "type": "swp"}}
    ln = parse_interface_links(json.dumps(doc)).interfaces["swp1"]
    assert (ln.state, ln.admin_status, ln.speed_gbps) == ("down", "up", 400.0)


def test_platform_port_state():
    plat = switch_platform("cumulus")
    tree = json.loads(TREE)
    tree["swp1"] = {"link": {**json.loads(TREE)["eth0"]["link"], "speed": "1G",
                             "stats": json.loads(STATS)}, "type": "swp"}
    states = plat.port_states({"interfaces": json.dumps(tree)}, ["swp1", "swp9"])
    assert list(states) == ["swp1"]
    st = states["swp1"]
    assert (st.oper, st.speed_gbps, st.speed_text) == ("up", 1.0, "1G")
    assert (st.rx_bytes, st.tx_bytes) == (293771538, 366068936)
    assert st.errors == {"in-errors": 0, "out-errors": 0}
    # each flap is a down and an up transition: 6 transitions, 3 times down
    assert (st.flaps, st.flaps_basis) == (3, "carrier-transitions / 2")
    assert st.source == "nv show interface -o json"
    tree["swp1"]["link"]["stats"]["carrier-down-count"] = 5  # 5.9+: counted by the switch
    st = plat.port_states({"interfaces": json.dumps(tree)}, ["swp1"])["swp1"]
    assert (st.flaps, st.flaps_basis) == (5, "carrier-down-count")


@pytest.mark.parametrize("text", ["", "   ", "[1]", '{"eth0": {"type": "eth"}}', "no table here\n"])
def test_not_link_state_is_refused(text):
    with pytest.raises(ParseError):
        parse_interface_links(text)
