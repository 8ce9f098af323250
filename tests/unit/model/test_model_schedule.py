"""Circle-method pair rounds, with hypothesis properties."""

from itertools import combinations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fabricops.model.schedule import RailPair, pair_count, pair_rounds, rail_pairs, round_count

nodes_strategy = st.lists(st.text(min_size=1, max_size=6), unique=True, max_size=24)


@given(nodes_strategy)
def test_every_pair_exactly_once(nodes):
    rounds = pair_rounds(nodes)
    seen = [frozenset(p) for r in rounds for p in r]
    assert len(seen) == len(set(seen)) == pair_count(len(nodes))
    assert set(seen) == {frozenset(p) for p in combinations(nodes, 2)}


@given(nodes_strategy)
def test_pairs_in_a_round_are_disjoint(nodes):
    for r in pair_rounds(nodes):
        members = [n for p in r for n in p]
        assert len(members) == len(set(members))
        assert len(r) == len(nodes) // 2


@given(nodes_strategy)
def test_round_count(nodes):
    n = len(nodes)
    expected = 0 if n < 2 else (n - 1 if n % 2 == 0 else n)
    assert len(pair_rounds(nodes)) == expected == round_count(n)


@given(nodes_strategy)
def test_deterministic_and_oriented(nodes):
    assert pair_rounds(nodes) == pair_rounds(list(nodes))
    pos = {n: i for i, n in enumerate(nodes)}
    for r in pair_rounds(nodes):
        assert all(pos[a] < pos[b] for a, b in r)


@given(st.lists(st.integers(), unique=True, min_size=3, max_size=15).filter(lambda x: len(x) % 2 == 1))
def test_odd_one_idle_per_round(nodes):
    idle = [set(nodes) - {n for p in r for n in p} for r in pair_rounds(nodes)]
    assert all(len(i) == 1 for i in idle)
    assert sorted(n for i in idle for n in i) == sorted(nodes)  # each node sits out once


def test_edge_cases():
    assert pair_rounds([]) == []
    assert pair_rounds(["a"]) == []
    assert pair_rounds(["a", "b"]) == [[("a", "b")]]
    assert pair_rounds(["a", "b", "c", "d"]) == [
        [("a", "d"), ("b", "c")],
        [("a", "c"), ("b", "d")],
        [("a", "b"), ("c", "d")],
    ]
    with pytest.raises(ValueError, match="duplicate"):
        pair_rounds(["a", "b", "a"])


def test_rail_pairs_same_names():
    rounds = rail_pairs(["h1", "h2", "h3", "h4"], ["mlx5_0", "mlx5_1"])
    assert len(rounds) == 3 and all(len(r) == 4 for r in rounds)
    assert rounds[0][0] == RailPair(0, "h1", "mlx5_0", "h4", "mlx5_0")
    assert rounds[0][1] == RailPair(1, "h1", "mlx5_1", "h4", "mlx5_1")
    for r in rounds:  # disjoint HCAs within a round
        ends = [(p.host_a, p.hca_a) for p in r] + [(p.host_b, p.hca_b) for p in r]
        assert len(ends) == len(set(ends))
        assert all(p.hca_a == p.hca_b for p in r)


def test_rail_pairs_per_host_names():
    rounds = rail_pairs(["a", "b"], {"a": ["mlx5_0", "mlx5_3"], "b": ["mlx5_1", "mlx5_2"]})
    assert rounds == [[RailPair(0, "a", "mlx5_0", "b", "mlx5_1"), RailPair(1, "a", "mlx5_3", "b", "mlx5_2")]]
    with pytest.raises(ValueError, match="different numbers of rails"):
        rail_pairs(["a", "b"], {"a": ["x"], "b": ["y", "z"]})
    with pytest.raises(ValueError, match="no rail list"):
        rail_pairs(["a", "b"], {"a": ["x"]})


@given(nodes_strategy, st.integers(min_value=0, max_value=4))
def test_rail_pairs_keep_round_structure(hosts, nrails):
    rails = [f"mlx5_{i}" for i in range(nrails)]
    got = rail_pairs(hosts, rails)
    base = pair_rounds(hosts)
    assert len(got) == len(base)
    for r, b in zip(got, base, strict=True):
        assert [(p.host_a, p.host_b) for p in r] == [pair for pair in b for _ in range(nrails)]
