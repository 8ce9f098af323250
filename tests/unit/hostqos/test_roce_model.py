"""fabricops.model.roce: the fabric-wide RoCE definition, its validation and derived values."""

from __future__ import annotations

import pytest

from fabricops.model.roce import DEFAULTS, RoceConfigError, validate

EXAMPLE = {
    "lossless_priority": 3,
    "dscp": 26,
    "cnp_dscp": 48,
    "cnp_priority": 6,
    "trust": "dscp",
    "ecn": {"min_kb": 150, "max_kb": 1500, "probability": 100},
    "cable_length_m": 7,
    "roce_mode": 2,
}


def test_example_and_derived_values():
    r = validate(EXAMPLE)
    assert r.tos == 106  # DSCP 26 << 2 | ECT(0)
    assert r.pfc_vector == [0, 0, 0, 1, 0, 0, 0, 0]
    assert r.dscp2prio == {26: 3, 48: 6}
    assert r.roce_mode_name == "RoCE v2"
    assert r.cable_length_m == 7
    assert [r.ecn_enabled(p) for p in range(8)] == [True] * 8  # other_priorities: enabled (default)


def test_empty_definition_is_nvidia_defaults():
    r = validate(None)
    assert (r.lossless_priority, r.dscp, r.cnp_dscp, r.cnp_priority, r.trust) == (3, 26, 48, 6, "dscp")
    assert (r.ecn.min_kb, r.ecn.max_kb, r.ecn.probability) == (150, 1500, 100)
    assert r.cable_length_m is None
    assert DEFAULTS["lossless_priority"] == 3


def test_other_priority_and_dscp():
    r = validate(
        {"lossless_priority": 5, "dscp": 46, "ecn": {"other_priorities": "disabled"}, "dscp_map": {"34": 4}}
    )
    assert r.tos == 186 and r.pfc_vector == [0, 0, 0, 0, 0, 1, 0, 0]
    assert r.dscp2prio == {34: 4, 46: 5, 48: 6}
    assert [r.ecn_enabled(p) for p in range(8)] == [False] * 5 + [True] + [False] * 2
    assert validate({"ecn": {"other_priorities": "unmanaged"}}).ecn_enabled(0) is None


def test_to_data_is_plain():
    data = validate(EXAMPLE).to_data()
    assert data["derived"]["tos"] == 106
    assert data["derived"]["dscp2prio"] == {"26": 3, "48": 6}
    assert data["ecn"]["other_priorities"] == "enabled"


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"lossless_priority": 9}, "fabricops_roce.lossless_priority is 9; it must be from 0 to 7."),
        ({"dscp": 64}, "fabricops_roce.dscp is 64; it must be from 0 to 63."),
        ({"cnp_dscp": -1}, "fabricops_roce.cnp_dscp is -1"),
        ({"cnp_priority": 3}, "cnp_priority (3) equals lossless_priority"),
        ({"cnp_dscp": 26}, "cnp_dscp (26) equals dscp"),
        ({"trust": "l3"}, "fabricops_roce.trust is 'l3'"),
        ({"roce_mode": 3}, "fabricops_roce.roce_mode is 3"),
        ({"ecn": {"min_kb": 2000, "max_kb": 1500}}, "ecn.min_kb (2000) is above ecn.max_kb (1500)"),
        ({"ecn": {"probability": 0}}, "ecn.probability is 0"),
        ({"ecn": {"other_priorities": "maybe"}}, "ecn.other_priorities is 'maybe'"),
        ({"ecn": {"mark": 1}}, "fabricops_roce.ecn has unknown key(s) mark"),
        ({"pfc_priority": 3}, "fabricops_roce has unknown key(s) pfc_priority"),
        (
            {"dscp_map": {26: 1}},
            "maps the RoCE DSCP 26 to priority 1, but RoCE must land on lossless_priority 3",
        ),
        ({"dscp_map": {48: 3}}, "maps the CNP DSCP 48 to priority 3, but CNPs must land on cnp_priority 6"),
        ({"dscp_map": {70: 1}}, "dscp_map key 70"),
        ({"lossless_priority": "three"}, "must be an integer from 0 to 7, not 'three'"),
        ({"lossless_priority": True}, "must be an integer"),
        ({"cable_length_m": 0}, "cable_length_m is 0"),
        ([1, 2], "fabricops_roce must be a mapping"),
    ],
)
def test_bad_input_is_one_sentence(data, needle):
    with pytest.raises(RoceConfigError) as err:
        validate(data)
    msg = str(err.value)
    assert needle in msg
    assert "\n" not in msg and msg.endswith(".")
