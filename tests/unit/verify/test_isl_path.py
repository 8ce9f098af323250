"""Verify checks the inter-switch link ends too: the candidate ISL ends between two leaves
(``switchstate.isl_path``), and the cause of a failed cross-switch RoCE pair names the one that lost
the lossless class (``engine.explain_roce``)."""

from __future__ import annotations

import pytest

from fabricops.switch.errors import SwitchError
from fabricops.verify import pairs
from fabricops.verify.engine import explain_roce
from fabricops.verify.result import FAIL, CheckResult
from fabricops.verify.switchstate import isl_path

#: two leaves, two spines, one leaf (leaf3) on spine1 only; the planner's shape (plan/writers.py _link)
LINKS = [
    {"switch_a": "leaf1", "port_a": "swp31", "switch_b": "spine1", "port_b": "swp1", "tier": "leaf_spine"},
    {"switch_a": "leaf1", "port_a": "swp32", "switch_b": "spine2", "port_b": "swp1", "tier": "leaf_spine"},
    {"switch_a": "leaf2", "port_a": "swp31", "switch_b": "spine1", "port_b": "swp2", "tier": "leaf_spine"},
    {"switch_a": "leaf2", "port_a": "swp32", "switch_b": "spine2", "port_b": "swp2", "tier": "leaf_spine"},
    {"switch_a": "leaf3", "port_a": "swp31", "switch_b": "spine1", "port_b": "swp3", "tier": "leaf_spine"},
]
PFC_OFF = "PFC off on priority 3 (fabricops_roce.lossless_priority)"


def test_isl_path_is_every_end_a_leaf_to_leaf_packet_may_cross():
    ends = isl_path(LINKS, "leaf1", "leaf2")
    assert [(sw, p) for sw, p, _peer, _pp in ends] == [
        ("leaf1", "swp31"), ("leaf1", "swp32"), ("leaf2", "swp31"), ("leaf2", "swp32"),
        ("spine1", "swp1"), ("spine1", "swp2"), ("spine2", "swp1"), ("spine2", "swp2"),
    ]
    assert ("spine1", "swp2", "leaf2", "swp31") in ends  # each end knows its peer
    # leaf3 hangs off spine1 only: spine2 is not on its paths, and leaf3's link is not on leaf1-leaf2's
    assert {sw for sw, *_ in isl_path(LINKS, "leaf1", "leaf3")} == {"leaf1", "spine1", "leaf3"}
    assert ("leaf1", "swp32", "spine2", "swp1") not in isl_path(LINKS, "leaf1", "leaf3")
    # a leaf to its spine: the direct links only
    assert isl_path(LINKS, "leaf2", "spine1") == [("leaf2", "swp31", "spine1", "swp2"),
                                                  ("spine1", "swp2", "leaf2", "swp31")]
    assert isl_path(LINKS, "leaf1", "leaf1") == []
    with pytest.raises(SwitchError, match="has no port_b"):
        isl_path([*LINKS, {"switch_a": "leaf4", "port_a": "swp31", "switch_b": "spine1"}], "leaf1", "leaf2")


class Reader:
    """The SwitchReader seam: read ports (here a dict of known problems) and tell the links."""

    def __init__(self, problems):
        self.problems, self.reads = problems, []

    def __call__(self, switch, ports):
        self.reads.append((switch, list(ports)))
        return {p: list(self.problems.get((switch, p), [])) for p in ports}

    def isl_path(self, a, b):
        return isl_path(LINKS, a, b)


RAIL = pairs.Rail(
    index=1, name="mlx5_1/1", link_layer="Ethernet", rate_gbps=400.0,
    devices={"gpu01": "mlx5_1/1", "gpu02": "mlx5_1/1"}, addresses={"gpu01": "10.0.0.1", "gpu02": "10.0.0.2"},
    switch="leaf1", switch_ports={"gpu01": "swp1", "gpu02": "swp2"},
    netdevs={"gpu01": "enp170s0f0np0", "gpu02": "enp170s0f0np0"},
)


def _failed(switches=None):
    details = {"rail": 1, "client": "gpu01", "server": "gpu02"}
    if switches:
        details["switches"] = switches
    return CheckResult("pairs", "ib_write_bw", "gpu01<->gpu02", "mlx5_1/1<->mlx5_1/1", FAIL, "slow",
                       measured=120.0, cause="below 90% of 400 Gb/s", details=details)


def test_a_cross_leaf_pair_names_the_spine_port_without_pfc():
    reader = Reader({("spine2", "swp2"): [PFC_OFF]})
    r = _failed({"gpu01": "leaf1", "gpu02": "leaf2"})
    explain_roce([r], [RAIL], [], reader)
    assert r.cause == (f"spine2 swp2 (inter-switch link to leaf2 swp32): {PFC_OFF} -- below 90% of 400 Gb/s")
    # one read per switch: each leaf's host port and uplinks, each spine's two downlinks
    assert sorted(reader.reads) == [
        ("leaf1", ["swp1", "swp31", "swp32"]), ("leaf2", ["swp2", "swp31", "swp32"]),
        ("spine1", ["swp1", "swp2"]), ("spine2", ["swp1", "swp2"]),
    ]
    path = r.details["path"]
    assert path["switch_ports"] == {"swp1": [], "leaf2 swp2": []}
    assert path["isl_ports"]["spine2 swp2"] == [PFC_OFF] and path["isl_ports"]["leaf1 swp31"] == []


def test_a_clean_cross_leaf_path_says_so_and_a_same_leaf_pair_reads_no_isl():
    reader = Reader({})
    r = _failed({"gpu01": "leaf1", "gpu02": "leaf2"})
    explain_roce([r], [RAIL], [], reader)
    assert r.cause.startswith("below 90% of 400 Gb/s; leaf1 swp1, leaf2 swp2 hold the lossless class as "
                              "declared; inter-switch link ends leaf1 swp31, leaf1 swp32, leaf2 swp31")
    same = Reader({("spine2", "swp2"): [PFC_OFF]})
    r = _failed()
    explain_roce([r], [RAIL], [], same)
    assert same.reads == [("leaf1", ["swp1", "swp2"])] and "isl_ports" not in r.details["path"]
    assert r.cause == "below 90% of 400 Gb/s; leaf1 swp1, swp2 hold the lossless class as declared"


def test_links_that_cannot_be_told_are_a_sentence_not_a_pass():
    r = _failed({"gpu01": "leaf1", "gpu02": "leaf2"})
    explain_roce([r], [RAIL], [], lambda sw, ports: {p: [] for p in ports})  # a reader without isl_path
    assert r.cause.endswith("the inter-switch links between leaf1 and leaf2 not read "
                            "(the switch reader tells no links)")
    r = _failed({"gpu01": "leaf1", "gpu02": "leaf2"})
    explain_roce([r], [RAIL], [], None)
    assert "leaf1 not read (no switch access given)" in r.cause
    assert r.cause.endswith("between leaf1 and leaf2 not read (no switch access given)")

    class Broken(Reader):
        def isl_path(self, a, b):
            raise SwitchError("leaf1: fabricops_switch_links entry {'switch_a': 'leaf1'} has no port_a")

    r = _failed({"gpu01": "leaf1", "gpu02": "leaf2"})
    explain_roce([r], [RAIL], [], Broken({}))
    assert r.cause.endswith("could not be told (leaf1: fabricops_switch_links entry {'switch_a': 'leaf1'} "
                            "has no port_a)")
