"""NVUE parsers on real captures (CumulusNetworks/docs) and on edge cases."""

import json

import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers import get_parser
from fabricops.parsers.nvue import parse_config_diff, parse_qos_roce, size_to_bytes


def test_registered_names():
    assert get_parser("nvue-qos-roce") is parse_qos_roce
    assert get_parser("nvue-config-diff") is parse_config_diff


def test_qos_roce_cl510():
    rec = parse_qos_roce(read_fixture("nvue-qos-roce", "cl510-lossless.txt"))
    assert rec.enable == "on" and rec.enabled and rec.mode == "lossless"
    assert rec.pfc_priority == 3 and rec.pfc_rx == "enabled" and rec.cable_length is None
    assert rec.congestion_mode == "ECN" and rec.ecn_traffic_classes == [0, 3]
    assert rec.min_threshold_bytes == 149996 and rec.max_threshold_bytes == 1499464  # 146.48 KB / 1.43 MB
    assert rec.probability == 100 and rec.trust == "pcp,dscp"
    assert rec.lldp_app_tlv == {"priority": "3", "protocol-id": "4791", "selector": "UDP"}
    assert len(rec.prio_map) == 8 and rec.prio_map[3]["dscp"] == "24,25,26,27,28,29,30,31"
    assert rec.tc_map[6]["scheduler-weight"] == "strict-priority"
    assert [p["name"] for p in rec.pools][1] == "roce-reserved-ingress"


def test_qos_roce_cl514_newer_layout():
    rec = parse_qos_roce(read_fixture("nvue-qos-roce", "cl514-lossless-single-ipool.txt"))
    assert rec.mode == "lossless-single-ipool" and rec.cable_length == 100
    assert rec.pfc_priority == 3 and rec.ecn_traffic_classes == [0, 3]
    assert len(rec.pools) == 3 and rec.pools[0]["size"] == "100%"


def test_qos_roce_json():
    doc = {
        "enable": "on",
        "mode": "lossy",
        "pfc": {"pfc-priority": "-"},
        "congestion-control": {
            "congestion-mode": "ECN",
            "enabled-tc": "0,3",
            "min-threshold": "146.48 KB",
            "max-threshold": "1.43 MB",
            "probability": "100",
        },
        "trust": {"trust-mode": "pcp,dscp"},
    }
    rec = parse_qos_roce(json.dumps(doc))
    assert rec.source_column == "json" and rec.mode == "lossy" and rec.pfc_priority is None
    assert rec.min_threshold_bytes == 149996


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "cumulus@switch:~$ nv show qos roce\n",
        "PFC: enabled\n",
        '{"foo": 1}',
        "                   operational  applied\n",
    ],
)
def test_qos_roce_rejects(bad):
    with pytest.raises(ParseError):
        parse_qos_roce(bad)


def test_qos_roce_truncated_before_mode():
    text = read_fixture("nvue-qos-roce", "cl510-lossless.txt").splitlines()[:3]
    with pytest.raises(ParseError):
        parse_qos_roce("\n".join(text[:1] + text[1:3]).replace("enable", "xenable"))


def test_size_to_bytes():
    assert size_to_bytes("146.48 KB") == 149996
    assert size_to_bytes("0 Bytes") == 0
    assert size_to_bytes("inf") is None


def test_config_diff_captures():
    rec = parse_config_diff(read_fixture("nvue-config-diff", "cl55-diff-revisions.txt"))
    assert not rec.empty and rec.set == {}
    assert rec.changes == ["unset system wjh channel forwarding trigger l2"]
    rec = parse_config_diff(read_fixture("nvue-config-diff", "cl55-diff-applied-startup.txt"))
    assert rec.unset == {"interface": None, "system": {"wjh": None}}
    assert rec.changes == ["unset interface", "unset system wjh"]


def test_config_diff_set_and_empty():
    rec = parse_config_diff("- set:\n    qos:\n      roce:\n        mode: lossless\n")
    assert rec.set == {"qos": {"roce": {"mode": "lossless"}}} and rec.changes == [
        "set qos roce mode lossless"
    ]
    assert parse_config_diff("").empty
    assert parse_config_diff("cumulus@leaf:mgmt:~$ nv config diff\n").empty


@pytest.mark.parametrize(
    "bad", ["PFC: enabled\n", "- foo:\n    a: 1\n", "- set: [\n", "applied [rev_id: 2]\n"]
)
def test_config_diff_rejects(bad):
    with pytest.raises(ParseError):
        parse_config_diff(bad)
