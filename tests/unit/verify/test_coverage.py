"""The coverage schedule: every directed cable proven, none shared within a round, near the bound."""

from __future__ import annotations

import itertools

import pytest

from fabricops.model.fabric import Fabric, dirlink_str, fat_tree
from fabricops.verify.coverage import (
    Test,
    check_round,
    covered,
    followup,
    lower_bound,
    observe,
    roce_qps,
    schedule,
    unroutable,
)

FACTOR = 2  #: the schedule stays within this factor of the lower bound on these fabrics


def _assert_schedule(f, rounds):
    for rnd in rounds:
        seen = {}
        for t in rnd:
            p = f.path(t.src, t.dst) or [f.up(t.src), f.down(t.dst)]
            for d in p:
                assert d not in seen, f"{t} and {seen[d]} share {dirlink_str(d)}"
                seen[d] = t
        check_round(f, rnd)
    return covered(f, [t for r in rounds for t in r])


def test_4_leaf_2_spine_every_directed_cable_in_one_round():
    f = fat_tree(16, 4, 2, 2 // 2)  # 4 leaves, 4 hosts each, one link to each of 2 spines... non-blocking x2
    rounds = schedule(f)
    assert _assert_schedule(f, rounds) == f.directed()
    assert unroutable(f) == set()
    assert lower_bound(f) == 1 and len(rounds) == 1
    assert len(f.directed()) == 2 * (16 + 8)


def test_non_blocking_4_leaf_2_spine_16_hosts():
    f = fat_tree(16, 4, 2, 2)  # 4 uplinks per leaf = 4 hosts: non-blocking
    rounds = schedule(f)
    got = _assert_schedule(f, rounds)
    # ftree (destination's position on its leaf) routes over every uplink and every parallel down
    # link: every cable is proven (raw D-mod-k on consecutive LIDs left 8 down ISLs unused here)
    assert unroutable(f) == set()
    assert got == f.directed()
    assert len(rounds) <= FACTOR * lower_bound(f)


@pytest.mark.parametrize(
    "shape",
    [(8, 2, 2, 1), (10, 3, 2, 1), (24, 8, 2, 4), (64, 8, 2, 2), (64, 8, 4, 2), (96, 8, 2, 4), (7, 7, 0, 0)],
)
def test_irregular_and_oversubscribed_fabrics(shape):
    f = fat_tree(*shape)
    rounds = schedule(f)
    assert _assert_schedule(f, rounds) == f.directed() - unroutable(f)
    lb = lower_bound(f)
    assert 1 <= lb <= len(rounds) <= FACTOR * lb


def test_irregular_inventory_uneven_leaves_and_spine_links():
    # leaf1: 3 hosts, 1 link to each spine; leaf2: 1 host, 2 links to spine1 only; leaf3: 2 hosts, spine2 x2
    cab = []
    for i, leaf in enumerate(["leaf1"] * 3 + ["leaf2"] + ["leaf3"] * 2, 1):
        cab.append(
            {
                "host": f"h{i}",
                "hca": "mlx5_0",
                "port": 1,
                "netdev": "ibp26s0",
                "switch": leaf,
                "switch_port": f"{i}",
            }
        )
    links = [
        ("leaf1", "31", "spine1", "1"),
        ("leaf1", "32", "spine2", "1"),
        ("leaf2", "31", "spine1", "2"),
        ("leaf2", "32", "spine1", "3"),
        ("leaf3", "31", "spine2", "2"),
        ("leaf3", "32", "spine2", "3"),
    ]
    sl = [
        {"switch_a": a, "port_a": pa, "switch_b": b, "port_b": pb, "tier": "leaf_spine"}
        for a, pa, b, pb in links
    ]
    lids = {(f"h{i}", "mlx5_0/1"): 10 + i for i in range(1, 7)}
    (f,) = Fabric.from_inventory(cab, sl, lids=lids)
    rounds = schedule(f)
    got = _assert_schedule(f, rounds)
    assert got == f.directed() - unroutable(f)
    assert got | unroutable(f) == f.directed()
    assert len(rounds) <= FACTOR * lower_bound(f) + 1


def test_single_switch_is_one_ring_round_not_n_minus_1():
    f = fat_tree(16, 16, 0, 0)
    rounds = schedule(f)
    assert len(rounds) == 1 == lower_bound(f)
    assert _assert_schedule(f, rounds) == f.directed()


def test_every_down_isl_is_routed_with_parallel_links():
    # 8 hosts per leaf, 4 links to each of 2 spines: positions 0..7 spread over the 8 uplinks, and
    # the k-th parallel link down mirrors the k-th up, so all 96 down ISLs carry a route (raw D-mod-k
    # on consecutive LIDs reached only 36 of them)
    f = fat_tree(96, 8, 2, 4)
    up = sum(1 for d in f.directed() - unroutable(f) if f.kind(d) == "isl-up")
    down = sum(1 for d in f.directed() - unroutable(f) if f.kind(d) == "isl-down")
    assert (up, down) == (96, 96)
    assert len(schedule(f)) >= lower_bound(f) >= 1


def test_rounds_beat_all_pairs_by_the_topology_factor():
    f = fat_tree(256, 32, 32, 1)
    rounds = schedule(f)
    assert len(rounds) == 1 and len(rounds[0]) == 256
    assert _assert_schedule(f, rounds) == f.directed()


def test_roce_schedule_host_links_and_one_cross_test_per_leaf_direction():
    f = fat_tree(16, 4, 2, 2, "Ethernet")
    rounds = schedule(f)
    for rnd in rounds:
        check_round(f, rnd)
        out = [f.leaf_of(t.src) for t in rnd if f.leaf_of(t.src) != f.leaf_of(t.dst)]
        inn = [f.leaf_of(t.dst) for t in rnd if f.leaf_of(t.src) != f.leaf_of(t.dst)]
        assert len(out) == len(set(out)) and len(inn) == len(set(inn))
        for t in rnd:
            if f.leaf_of(t.src) != f.leaf_of(t.dst):
                assert t.qps == 2 * 4 == roce_qps(f, t.src, t.dst)
            else:
                assert t.qps is None
    tests = [t for r in rounds for t in r]
    assert covered(f, tests) == f.host_links()
    assert {f.leaf_of(t.src) for t in tests if f.leaf_of(t.src) != f.leaf_of(t.dst)} == set(f.leaves)
    assert {f.leaf_of(t.dst) for t in tests if f.leaf_of(t.src) != f.leaf_of(t.dst)} == set(f.leaves)


def test_roce_isls_from_counter_deltas_then_followup_for_the_unseen():
    f = fat_tree(16, 4, 2, 2, "Ethernet")
    rounds = schedule(f)
    tests = [t for r in rounds for t in r]
    isls = sorted(f.isl_links())
    seen_all = {d: 10**9 for d in isls}
    missing = isls[0]  # an up ISL of leaf1
    assert f.kind(missing) == "isl-up"
    deltas = {**seen_all, missing: 0}
    seen = observe(f, deltas, tests, bytes_per_test=10**6)
    assert seen == set(isls) - {missing}
    # a counter on an ISL no test of the round could use is not evidence
    assert observe(f, seen_all, [t for t in tests if f.leaf_of(t.src) == f.leaf_of(t.dst)]) == set()
    more = followup(f, [missing])
    assert len(more) == 1
    cross = [t for t in more[0] if f.leaf_of(t.src) != f.leaf_of(t.dst)]
    assert [f.leaf_of(t.src) for t in cross] == ["leaf1"]
    assert followup(f, []) == []


def test_check_round_rejects_a_shared_cable():
    f = fat_tree(8, 4, 2, 2)
    a, b, c = f.endpoints[0], f.endpoints[1], f.endpoints[2]
    with pytest.raises(ValueError, match="share"):
        check_round(f, [Test(a, b), Test(c, b)])
    check_round(f, [Test(a, b), Test(b, a)])  # opposite directions are different directed cables


def test_covered_set_equals_cables_brute_force_small():
    # every pair schedule covers exactly the routable set: the coverage schedule's equals it
    f = fat_tree(12, 3, 2, 1)
    every = covered(f, [Test(a, b) for a, b in itertools.permutations(f.endpoints, 2)])
    assert every == f.directed() - unroutable(f)
    assert covered(f, [t for r in schedule(f) for t in r]) == every


def test_spines_beyond_the_hosts_per_leaf_carry_no_route():
    # 5 leaves of 2 hosts, 4 spines x 1 link: positions 0 and 1 pick uplinks to spine1 and spine2
    # only, so no route uses spine3 or spine4 -- listed as unroutable, never claimed covered
    f = fat_tree(10, 2, 4, 1)
    spare = {d for d in f.isl_links() if {d[0][0], d[1][0]} & {"spine3", "spine4"}}
    assert spare and unroutable(f) == spare
    rounds = schedule(f)
    lb = lower_bound(f)
    assert 1 <= lb <= len(rounds) <= FACTOR * lb
    assert _assert_schedule(f, rounds) == f.directed() - spare
