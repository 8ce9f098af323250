"""Fat-tree and Dragonfly+ sizing: the standard formulas and worked examples (docs/plan.md)."""

from __future__ import annotations

import pytest

from fabricops.plan import catalog, sizing
from fabricops.plan.catalog import PlanInputError

QM9700 = catalog.switch("QM9700")
QM8700 = catalog.switch("QM8700")


@pytest.mark.parametrize("k", [8, 16, 32, 36, 40, 64, 128, 144])
def test_capacity_formulas(k):
    assert sizing.fat_tree_max_ports(k, 1) == k
    assert sizing.fat_tree_max_ports(k, 2) == k * k // 2
    assert sizing.fat_tree_max_ports(k, 3) == k**3 // 4
    assert sizing.dragonfly_plus_max_ports(k) == (k // 2) ** 2 * ((k // 2) ** 2 + 1)


def test_radix_64_worked_example():
    assert [sizing.fat_tree_max_ports(64, t) for t in (1, 2, 3)] == [64, 2048, 65536]
    assert sizing.dragonfly_plus_max_ports(64) == 1_049_600


@pytest.mark.parametrize(
    ("end_ports", "tiers"),
    [(2, 1), (64, 1), (65, 2), (2048, 2), (2049, 3), (65536, 3), (65537, 4)],
)
def test_tier_choice_at_the_boundaries(end_ports, tiers):
    d = sizing.size(end_ports, 1, QM9700, rails=1)
    assert d.tiers == (3 if tiers == 4 else tiers)
    assert (
        d.topology
        == {1: "single switch", 2: "two-tier fat tree", 3: "three-tier fat tree", 4: "Dragonfly+"}[tiers]
    )


def test_full_two_tier_radix_64():
    d = sizing.size(2048, 1, QM9700, rails=1)
    assert d.switches == {"leaf": 64, "spine": 32}
    assert d.cables == {"host_leaf": 2048, "leaf_spine": 2048}
    assert (d.leaf_down, d.leaf_up) == (32, 32)
    assert d.oversubscription == 1.0
    assert d.bisection_gbps == 2048 / 2 * 400


def test_full_three_tier_radix_64():
    d = sizing.size(65536, 1, QM9700, rails=1)
    # k^2/2 leaves... (k/2 leaves and k/2 spines in each of k pods) and (k/2)^2 cores: 5k^2/4 switches
    assert d.switches == {"leaf": 2048, "spine": 2048, "core": 1024}
    assert d.total_switches == 5 * 64 * 64 // 4
    assert d.groups == 64
    assert d.cables == {"host_leaf": 65536, "leaf_spine": 65536, "spine_core": 65536}


def test_single_switch_64_gpus_rail_optimised():
    d = sizing.size(64, 8, QM9700)
    assert (d.nodes, d.rails, d.end_ports) == (8, 8, 64)
    assert d.switches == {"leaf": 1} and d.cables == {"host_leaf": 64}
    assert d.bisection_gbps == 32 * 400


def test_512_gpus_rail_optimised_two_tier():
    # 64 nodes x 8 rails; each rail its own leaf group of ceil(64/32) = 2 leaves
    d = sizing.size(512, 8, QM9700)
    assert d.rail_optimised and d.leaves_per_rail == 2
    assert d.switches == {"leaf": 16, "spine": 8}
    assert d.cables == {"host_leaf": 512, "leaf_spine": 512}


def test_4096_and_16384_gpus_three_tier():
    d = sizing.size(4096, 8, QM9700)
    assert d.topology == "three-tier fat tree"
    assert d.switches == {"leaf": 128, "spine": 128, "core": 64}
    assert d.total_cables == 3 * 4096
    d = sizing.size(16384, 8, QM9700)
    assert d.switches == {"leaf": 512, "spine": 512, "core": 256}
    assert d.bisection_gbps == 16384 / 2 * 400


def test_hdr_radix_40():
    # 40-port QM8700: 2 tiers reach 800, 3 tiers 16000 end ports
    d = sizing.size(800, 8, QM8700)
    assert d.topology == "two-tier fat tree" and d.max_end_ports == 800
    assert d.switches == {"leaf": 40, "spine": 20}
    assert d.port_rate_gbps == 200  # HDR 4X port rate, not the 50 Gb/s lane rate
    assert sizing.size(808, 8, QM8700).tiers == 3


def test_dragonfly_plus_beyond_three_tiers():
    d = sizing.size(100_000, 8, QM9700)
    assert d.topology == "Dragonfly+"
    assert d.groups == 98  # ceil(100000 / 1024)
    assert d.switches == {"leaf": 3125, "spine": 98 * 32}
    links_per_pair = 1024 // 97
    assert d.cables["global"] == 98 * 97 // 2 * links_per_pair
    assert d.oversubscription > 1  # global links are tapered


def test_oversubscription_two_to_one():
    d = sizing.size(4096, 1, QM9700, rails=1, oversubscription=2.0)
    # leaves give 42 ports down, 22 up: 2 tiers reach 64 x 42 = 2688; 4096 needs 3
    assert (d.leaf_down, d.leaf_up) == (42, 22)
    assert d.tiers == 3
    assert d.oversubscription == pytest.approx(42 / 22)
    assert d.bisection_gbps == pytest.approx(4096 / 2 * 400 / (42 / 22))


def test_single_node_needs_no_fabric():
    d = sizing.size(8, 8, None)
    assert d.tiers == 0 and d.topology == "none" and d.total_switches == 0


@pytest.mark.parametrize(
    ("args", "fix"),
    [
        ((-1, 8), "--gpus must be a positive whole number"),
        ((0, 8), "--gpus must be a positive whole number"),
        ((12, 8), "use 16 or 8 GPUs"),
        ((16, 0), "--gpus-per-node must be a positive whole number"),
    ],
)
def test_bad_input(args, fix):
    with pytest.raises(PlanInputError, match=fix):
        sizing.size(*args, QM9700)


def test_too_many_for_dragonfly_plus():
    with pytest.raises(PlanInputError, match="choose a switch with more ports"):
        sizing.size(32 * 32 * (32 * 32 + 1) + 8, 8, catalog.switch("SN4700"))
