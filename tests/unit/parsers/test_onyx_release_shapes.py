"""parsers.onyx reads each emulated release's JSON shapes: the pre-3.6.6000 forms (captures) and the
forms of 3.6.6000 on (the block layout mellanox.onyx reads)."""

from __future__ import annotations

import json

from captures import read_fixture

from fabricops.parsers.onyx import parse_ecn, parse_pfc, parse_qos_trust, parse_running_config


def test_pfc_before_3_6_6000_is_a_dict_of_interfaces():
    rec = parse_pfc(read_fixture("onyx-show", "show-dcb-pfc-3.6.5000.json"))
    assert rec.enabled is None  # that form carries no global line: the running config does
    assert set(rec.interfaces) == {"Eth1/1", "Eth1/1/2", "Po1", "Mpo2"}
    assert all(i.enabled for i in rec.interfaces.values())


def test_pfc_from_3_6_6000_three_blocks():
    doc = [
        {"PFC": "enabled"},
        {"Priority Enabled List": "3 4", "Priority Disabled List": "0 1 2 5 6 7"},
        {"Eth1/1": [{"PFC admin": "on", "PFC oper": "Enabled"}],
         "Eth1/2": [{"PFC admin": "Auto", "PFC oper": "Disabled"}]},
    ]
    rec = parse_pfc(json.dumps(doc, indent=4))
    assert rec.enabled is True and rec.priorities_enabled == [3, 4]
    assert rec.vector() == [0, 0, 0, 1, 1, 0, 0, 0]
    assert rec.interfaces["Eth1/1"].enabled and not rec.interfaces["Eth1/2"].enabled


def test_qos_three_blocks_per_port():
    rec = parse_qos_trust(read_fixture("onyx-show", "show-qos-interface-ethernet.json"))
    q = rec.interfaces["Eth1/1"]
    assert (q.trust, q.pcp_rewrite, q.dscp_rewrite) == ("both", "enabled", "disabled")


def test_relative_thresholds_keep_their_mode():
    rec = parse_ecn(read_fixture("onyx-show", "show-congestion-control-relative.json"))
    tc2, tc3 = rec.traffic_classes[2], rec.traffic_classes[3]
    assert (tc2.threshold_mode, tc2.min_threshold, tc2.max_threshold, tc2.ecn) == ("relative", 9, 90, False)
    assert (tc3.threshold_mode, tc3.min_threshold, tc3.max_threshold) == ("absolute", 500, 1550)
    assert tc3.ecn


def test_running_config_with_relative_and_rewrite_lines():
    red = "traffic-class 2 congestion-control red minimum-relative 9 maximum-relative 90"
    text = (
        "##\n## Interface Ethernet configuration\n##\n"
        "   interface ethernet 1/1 qos trust L3\n"
        "   interface ethernet 1/1 qos rewrite pcp\n"
        f"   interface ethernet 1/1 {red}\n"
    )
    rc = parse_running_config(text)
    assert rc.interface_has("Eth1/1", "qos rewrite pcp")
    assert rc.interface_has("Eth1/1", red)
