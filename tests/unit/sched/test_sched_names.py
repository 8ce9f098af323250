"""Hostlist compression as Slurm reads it (zero padding included) and the one name rule."""

from __future__ import annotations

import pytest

from fabricops.sched import tree_conf
from fabricops.sched.names import BadName, check, expand, hostlist


@pytest.mark.parametrize(
    ("names", "expr"),
    [
        (["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"], "gpu[01-04,07]"),
        (["gpu07", "gpu03", "gpu01", "gpu02", "gpu04", "gpu03"], "gpu[01-04,07]"),  # order, duplicates
        (["gpu9", "gpu10", "gpu11"], "gpu[9-11]"),  # unpadded: 10 prints as 10 at width 1
        (["gpu09", "gpu10"], "gpu[09-10]"),  # padded to 2
        (["gpu9", "gpu010"], "gpu[9,010]"),  # 010 is not 10 at width 1: not one range
        (["gpu099", "gpu100", "gpu101"], "gpu[099-101]"),
        (["gpu1"], "gpu1"),
        (["login", "gpu02", "gpu01", "ib-leaf1", "ib-leaf2"], "gpu[01-02],ib-leaf[1-2],login"),
        (["rack1-n01", "rack1-n02", "rack2-n01"], "rack1-n[01-02],rack2-n01"),
    ],
)
def test_hostlist(names, expr):
    assert hostlist(names) == expr
    assert sorted(expand(expr)) == sorted(set(names))


@pytest.mark.parametrize(
    "bad", ["leaf 1", "leaf=1", "leaf,1", "gpu[1-2]", "a.b", "#x", "-leaf", "leaf-", "", "x" * 64, "lé"]
)
def test_names_outside_the_rule_are_refused_with_the_name(bad):
    with pytest.raises(BadName) as exc:
        check(bad, "switch name", "rename it")
    assert repr(bad) in str(exc.value) and "rename it" in str(exc.value)


def test_hostile_switch_or_node_names_never_reach_the_file():
    base = {
        "host": "gpu01",
        "hca": "mlx5_0",
        "port": 1,
        "netdev": "ibp26s0",
        "switch": "l1",
        "switch_port": "1",
    }
    for field, value in (("switch", "leaf 1 Nodes=evil"), ("host", "gpu01,gpu02"), ("switch", "l=1")):
        with pytest.raises(BadName, match="cannot go into a scheduler topology file"):
            tree_conf([{**base, field: value}], [])
    with pytest.raises(BadName, match=r"node name of host gpu01 'gpu 01'"):
        tree_conf([base], [], node_names={"gpu01": "gpu 01"})
    link = {"switch_a": "l1", "port_a": "33", "switch_b": "spine#1", "port_b": "1"}
    with pytest.raises(BadName, match="'spine#1'"):
        tree_conf([base], [link])
