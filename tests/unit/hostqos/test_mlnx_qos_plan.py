"""fabricops.hostqos.mlnx_qos: desired vs what real mlnx_qos prints -> argument groups.

Current state comes from the real captures in tests/fixtures/mlnx_qos/; every knob has a
same-value twin that must plan nothing.
"""

from __future__ import annotations

import pytest
from captures import read_fixture

from fabricops.hostqos import mlnx_qos as q
from fabricops.hostqos.mlnx_qos import QosError, QosWant

LOSSLESS = {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "dscp2prio": {26: 3, 48: 6}}


def have(name):
    return q.have_from(q.parse(read_fixture("mlnx_qos", name)))


def test_have_from_real_captures():
    h = have("dscp_split_prio_line_buffers.txt")
    assert h.trust == "dscp" and h.pfc == (0, 0, 0, 1, 0, 0, 0, 0) and h.cable_len == 7
    assert h.dscp2prio[30] == 6 and h.dscp2prio[48] == 6 and h.dscp2prio[26] == 3
    p = have("trust_pcp_buffers.txt")
    assert p.trust == "pcp" and p.dscp2prio is None


def test_converged_capture_plans_nothing():
    # netarbiter: trust dscp, PFC on 3, default map (26 -> 3) but 48 -> 6 is the default too
    h = have("trust_dscp_no_buffers_netarbiter.txt")
    assert q.plan(q.want_from(LOSSLESS), h) == []
    assert q.verify(q.want_from(LOSSLESS), h) == []


def test_trust_pcp_to_dscp_sets_trust_alone_then_every_entry():
    groups = q.plan(q.want_from(LOSSLESS), have("trust_pcp_buffers.txt"))
    assert groups == [["--trust", "dscp"], ["--dscp2prio", "set,26,3"], ["--dscp2prio", "set,48,6"]]


def test_pfc_on_wrong_priority():
    # default_priority_strict: PFC on priority 5, trust dscp, cable 30
    groups = q.plan(q.want_from(LOSSLESS), have("default_priority_strict.txt"))
    assert groups == [["--pfc", "0,0,0,1,0,0,0,0"]]


def test_pfc_same_value_twin():
    want = q.want_from({"pfc": [0, 0, 0, 0, 0, 1, 0, 0]})
    assert q.plan(want, have("default_priority_strict.txt")) == []


def test_dscp_entry_moved_and_twin():
    h = have("dscp_split_prio_line_buffers.txt")  # DSCP 30 moved to priority 6
    assert q.plan(q.want_from({"dscp2prio": {30: 3}}), h) == [["--dscp2prio", "set,30,3"]]
    assert q.plan(q.want_from({"dscp2prio": {30: 6}}), h) == []


def test_cable_len_and_twin():
    h = have("default_priority_strict.txt")  # Cable len: 30
    assert q.plan(q.want_from({"cable_len": 7}), h) == [["--cable_len", "7"]]
    assert q.plan(q.want_from({"cable_len": 30}), h) == []


def test_trust_and_twin():
    h = have("firmware_dcbx_ets.txt")
    assert q.plan(q.want_from({"trust": "pcp"}), h) == [["--trust", "pcp"]]
    assert q.plan(q.want_from({"trust": "dscp"}), h) == []


def test_trust_pfc_cable_in_one_run():
    groups = q.plan(q.want_from({**LOSSLESS, "cable_len": 10}), have("trust_pcp_buffers.txt"))
    assert groups[0] == ["--trust", "dscp", "--cable_len", "10"]


def test_unmanaged_fields_are_left_alone():
    assert q.plan(QosWant(), have("default_priority_strict.txt")) == []


def test_predict_render_and_verify():
    h = have("trust_pcp_buffers.txt")
    want = q.want_from(LOSSLESS)
    after = q.predict(want, h)
    assert q.verify(want, after) == []
    assert q.render(h, want) == (
        "trust: pcp\npfc: 0,0,0,1,0,0,0,0\ndscp2prio 26: unknown\ndscp2prio 48: unknown\n"
    )
    assert q.render(after, want) == "trust: dscp\npfc: 0,0,0,1,0,0,0,0\ndscp2prio 26: 3\ndscp2prio 48: 6\n"
    assert q.verify(want, h) == [
        "trust is pcp, want dscp",
        "dscp2prio 26 is unknown, want 3",
        "dscp2prio 48 is unknown, want 6",
    ]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({"trust": "l3"}, "trust must be dscp or pcp"),
        ({"pfc": [0, 0, 0, 1]}, "pfc must be 8 values"),
        ({"pfc": [0, 0, 0, 2, 0, 0, 0, 0]}, "pfc must be 8 values"),
        ({"dscp2prio": {64: 3}}, "out of range"),
        ({"dscp2prio": {26: 8}}, "out of range"),
        ({"trust": "pcp", "dscp2prio": {26: 3}}, "need trust dscp"),
        ({"cable_len": 0}, "cable_len must be a positive"),
    ],
)
def test_bad_want(args, needle):
    with pytest.raises(QosError, match=needle):
        q.want_from(args)


def test_pfc_as_string():
    assert q.want_from({"pfc": "0,0,0,1,0,0,0,0"}).pfc == (0, 0, 0, 1, 0, 0, 0, 0)
