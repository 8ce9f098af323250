"""Onyx parsers on real captures (ansible/ansible onyx fixtures) and on edge cases."""

import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers import get_parser
from fabricops.parsers.onyx import (
    expand_interface_range,
    parse_ecn,
    parse_pfc,
    parse_qos_trust,
    parse_running_config,
)

PFC_TEXT = """switch (config) # show dcb priority-flow-control

PFC: enabled
Priority Enabled List: 3
Priority Disabled List: 0 1 2 4 5 6 7

-------------------------------------------------
Interface        PFC admin        PFC oper
-------------------------------------------------
Eth1/1           Auto             Enabled
Eth1/2           Auto             Enabled
"""


def test_registered_names():
    assert get_parser("onyx-pfc") is parse_pfc
    assert get_parser("onyx-ecn") is parse_ecn
    assert get_parser("onyx-qos-trust") is parse_qos_trust
    assert get_parser("onyx-running-config") is parse_running_config


def test_pfc_json_interfaces_enabled():
    rec = parse_pfc(read_fixture("onyx-pfc", "ansible-pfc-interface-enabled.json"))
    assert rec.format == "json"
    assert rec.enabled is None  # the capture is the interface part only
    assert set(rec.interfaces) == {"Eth1/1", "Eth1/1/2", "Po1", "Mpo2"}
    assert rec.interfaces["Eth1/1"].admin == "on" and rec.interfaces["Po1"].enabled


def test_pfc_json_interfaces_disabled():
    rec = parse_pfc(read_fixture("onyx-pfc", "ansible-pfc-interface-disabled.json"))
    assert rec.interfaces["Mpo2"].admin == "Auto"
    assert not any(i.enabled for i in rec.interfaces.values())


def test_pfc_text_with_prompt_and_crlf():
    rec = parse_pfc(PFC_TEXT.replace("\n", "\r\n"))
    assert rec.enabled is True and rec.format == "text"
    assert rec.priorities_enabled == [3] and rec.priorities_disabled == [0, 1, 2, 4, 5, 6, 7]
    assert rec.vector() == [0, 0, 0, 1, 0, 0, 0, 0]
    assert rec.interfaces["Eth1/2"].admin == "Auto" and rec.interfaces["Eth1/2"].enabled


def test_pfc_full_json_form():
    doc = (
        '[{"PFC": "disabled", "Priority Enabled List": "", "Priority Disabled List": "0 1 2 3 4 5 6 7"},'
        ' {"Eth1/16": [{"PFC admin": "Auto", "PFC oper": "Enabled"}]}]'
    )
    rec = parse_pfc(doc)
    assert rec.enabled is False and rec.priorities_enabled == [] and rec.interfaces["Eth1/16"].enabled


@pytest.mark.parametrize(
    "bad", ["", "   \n", "PFC admin only\n", '{"foo": "bar"}', "Priority Enabled List: 3\n"]
)
def test_pfc_rejects(bad):
    with pytest.raises(ParseError):
        parse_pfc(bad)


def test_ecn_json_capture():
    rec = parse_ecn(read_fixture("onyx-ecn", "ansible-congestion-control.json"))
    assert rec.interface == "Eth1/1" and rec.ecn_marked_packets == 0
    tc3 = rec.traffic_classes[3]
    assert tc3.ecn and tc3.threshold_mode == "absolute"
    assert (tc3.min_threshold, tc3.max_threshold) == (500, 1550)
    tc2 = rec.traffic_classes[2]
    assert not tc2.ecn and tc2.mode == "RED" and (tc2.min_threshold, tc2.max_threshold) == (9, 90)
    assert rec.traffic_classes[0].mode == "none" and len(rec.traffic_classes) == 8


def test_ecn_rejects_pfc_output_and_truncation():
    with pytest.raises(ParseError):
        parse_ecn(PFC_TEXT)
    with pytest.raises(ParseError):
        parse_ecn('[{"Interface ethernet": "1/1", "ECN marked packets": "0"}]')
    with pytest.raises(ParseError):
        parse_ecn("")


def test_qos_trust_json_capture():
    rec = parse_qos_trust(read_fixture("onyx-qos-trust", "ansible-show-qos-interface-ethernet.json"))
    q = rec.interfaces["Eth1/1"]
    assert q.trust == "both" and q.default_switch_priority == 0
    assert q.dscp_rewrite == "disabled" and q.pcp_rewrite == "enabled"


def test_qos_trust_text_and_rejects():
    rec = parse_qos_trust("Interface Eth1/2:\n  Trust mode: L3\n  Default switch-priority: 0\n")
    assert rec.interfaces["Eth1/2"].trust == "L3" and rec.format == "text"
    for bad in ("", PFC_TEXT, "[]"):
        with pytest.raises(ParseError):
            parse_qos_trust(bad)


def test_running_config_capture():
    rec = parse_running_config(read_fixture("onyx-running-config", "ansible-onyx-config.txt"))
    assert rec.hostname == "ufm-switch16" and rec.database == "initial"
    assert rec.pfc_enabled and rec.pfc_priorities == [] and rec.roce is None
    # 'interface ethernet 1/7-1/8 ...' expanded per port
    assert rec.interfaces["Eth1/7"] == [
        "channel-group 1 mode active",
        "dcb priority-flow-control mode on force",
    ]
    assert rec.interface_has("Eth1/8", "dcb priority-flow-control mode on force")
    assert rec.interface_has("Po1", "dcb priority-flow-control mode on force")
    assert "Eth1/9" not in rec.interfaces
    assert rec.interfaces["Vlan101"][0] == "ip address 10.0.0.254 255.255.255.0"
    assert "lacp" in rec.global_lines and "no spanning-tree" in rec.global_lines


def test_running_config_fragment_capture():
    rec = parse_running_config(read_fixture("onyx-running-config", "ansible-onyx-config-src.txt"))
    assert rec.interfaces == {"Mpo2": []} and rec.hostname is None and not rec.pfc_enabled


def test_running_config_roce_and_priorities():
    rec = parse_running_config(
        "hostname sw1\nroce lossless\ndcb priority-flow-control enable force\n"
        "dcb priority-flow-control priority 3 enable\ndcb priority-flow-control priority 4 enable\n"
        "no dcb priority-flow-control priority 4 enable\n"
        "interface ethernet 1/1-1/32 dcb priority-flow-control mode on force\n"
    )
    assert rec.roce == "lossless" and rec.pfc_priorities == [3]
    assert len(rec.interfaces) == 32 and rec.interface_has(
        "Eth1/32", "dcb priority-flow-control mode on force"
    )


def test_running_config_rejects():
    for bad in ("", "PFC: enabled\n", '% Unrecognized command "show".\n', "lorem ipsum\n"):
        with pytest.raises(ParseError):
            parse_running_config(bad)
    with pytest.raises(ParseError):
        parse_running_config("interface ethernet 1/9-1/3 shutdown\n")


def test_expand_interface_range():
    assert expand_interface_range("1/1-1/3") == ["Eth1/1", "Eth1/2", "Eth1/3"]
    assert expand_interface_range("1/1,1/5") == ["Eth1/1", "Eth1/5"]
    with pytest.raises(ValueError):
        expand_interface_range("1/1-2/3")
