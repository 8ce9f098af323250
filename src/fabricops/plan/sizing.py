"""Topology sizing: fat trees of one, two or three tiers, or Dragonfly+ beyond (docs/plan.md).

End ports E = nodes x rails (one NIC port per rail per node). With radix-k switches and a leaf that
gives ``down`` ports to hosts and ``up = k - down`` to the tier above (non-blocking: down = up = k/2):

* 1 tier: one switch, E <= k.
* 2 tiers (leaf-spine): at most k leaves (a spine has k ports), so E <= k x down = k^2/2.
* 3 tiers (pods of k/2 leaves and ``up`` spines, plus a core): at most k pods, so
  E <= k x k/2 x down = k^3/4.
* Dragonfly+ beyond: groups are two-level fat trees of k/2 leaves and k/2 spines, (k/2)^2 hosts per
  group; every spine gives k/2 ports to global links, so a group has k^2/4 global links and at most
  k^2/4 + 1 groups connect all-to-all (Shpiner et al., "Dragonfly+", HiPINEB 2017).

Switch counts come from port counts: spines = ceil(leaf uplinks / spine ports facing leaves),
cores = ceil(spine uplinks / k). Rail-optimised (rails > 1): each rail has its own leaf group
(rail r of every node goes to a rail-r leaf), so leaves = rails x ceil(nodes / down).
Bandwidths in Gb/s per direction; bisection = the bandwidth across a cut into two equal halves.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from fabricops.plan.catalog import PlanInputError, Switch

__all__ = [
    "Design",
    "dragonfly_plus_max_ports",
    "fat_tree_max_ports",
    "size",
]


def fat_tree_max_ports(k: int, tiers: int, oversubscription: float = 1.0) -> int:
    """End ports a fat tree of radix-k switches reaches: k, k^2/2, k^3/4 when non-blocking."""
    down, _up = _leaf_split(k, oversubscription)
    if tiers == 1:
        return k
    if tiers == 2:
        return k * down
    if tiers == 3:
        return k * (k // 2) * down
    raise ValueError("a fat tree here has 1, 2 or 3 tiers")


def dragonfly_plus_max_ports(k: int) -> int:
    """Hosts of the largest Dragonfly+ of radix-k switches: (k/2)^2 x ((k/2)^2 + 1)."""
    per_group = (k // 2) ** 2
    return per_group * (per_group + 1)


def _leaf_split(k: int, oversubscription: float) -> tuple[int, int]:
    """(down, up) ports of a leaf for a down:up ratio (1.0 = non-blocking, k/2 each)."""
    if oversubscription < 1:
        raise PlanInputError("oversubscription must be 1 (non-blocking) or more, e.g. 2 for 2:1")
    down = math.floor(k * oversubscription / (1 + oversubscription))
    down = max(1, min(k - 1, down))
    return down, k - down


@dataclass
class Design:
    """A sized fabric. Counts are switches and cables; rates Gb/s per direction."""

    #: "none" (one node), "single switch", "two-tier fat tree", "three-tier fat tree", "Dragonfly+"
    topology: str
    tiers: int  #: 0 (NVLink only), 1, 2, 3; Dragonfly+ counts 3 (leaf, spine, global)
    gpus: int
    gpus_per_node: int
    nodes: int
    rails: int  #: NIC ports per node into this fabric
    end_ports: int  #: nodes x rails
    switch: str | None  #: model
    radix: int
    port_rate_gbps: float
    rail_optimised: bool
    leaf_down: int  #: leaf ports facing hosts
    leaf_up: int  #: leaf ports facing spines
    max_end_ports: int  #: capacity of this topology with this radix
    switches: dict[str, int] = field(default_factory=dict)  #: per tier: leaf, spine, core (or group)
    cables: dict[str, int] = field(default_factory=dict)  #: host_leaf, leaf_spine, spine_core, global
    oversubscription: float = 1.0  #: leaf down:up ratio (1.0 = non-blocking)
    bisection_gbps: float = 0.0  #: per direction, across a cut into two halves
    leaves_per_rail: int = 0
    groups: int = 0  #: pods (3 tiers) or Dragonfly+ groups
    notes: list[str] = field(default_factory=list)

    @property
    def total_switches(self) -> int:
        return sum(self.switches.values())

    @property
    def total_cables(self) -> int:
        return sum(self.cables.values())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["total_switches"] = self.total_switches
        d["total_cables"] = self.total_cables
        return d


def size(
    gpus: int,
    gpus_per_node: int,
    sw: Switch | None,
    rails: int | None = None,
    oversubscription: float = 1.0,
    tiers: int | None = None,
) -> Design:
    """Size the smallest fabric that connects ``gpus`` GPUs (or the given number of ``tiers``)."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise PlanInputError(f"--gpus must be a positive whole number, not {gpus!r}")
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1:
        raise PlanInputError(f"--gpus-per-node must be a positive whole number, not {gpus_per_node!r}")
    nodes = math.ceil(gpus / gpus_per_node)
    if nodes > 1 and gpus % gpus_per_node:
        raise PlanInputError(
            f"--gpus {gpus} is not a multiple of --gpus-per-node {gpus_per_node}: "
            f"use {nodes * gpus_per_node} or {(nodes - 1) * gpus_per_node} GPUs"
        )
    rails = gpus_per_node if rails is None else rails
    if isinstance(rails, bool) or not isinstance(rails, int) or rails < 1:
        raise PlanInputError(f"--rails must be a positive whole number, not {rails!r}")
    if nodes == 1:
        return Design(
            topology="none",
            tiers=0,
            gpus=gpus,
            gpus_per_node=gpus_per_node,
            nodes=1,
            rails=0,
            end_ports=0,
            switch=None,
            radix=0,
            port_rate_gbps=0.0,
            rail_optimised=False,
            leaf_down=0,
            leaf_up=0,
            max_end_ports=0,
            notes=["one node: the GPUs talk over NVLink/NVSwitch; no scale-out fabric to size"],
        )
    if sw is None:
        raise PlanInputError("a multi-node plan needs a switch model (--switch)")
    k = sw.ports
    rate = sw.port_rate_gbps
    end = nodes * rails
    down, up = _leaf_split(k, oversubscription)
    ratio = down / up
    base = dict(
        gpus=gpus,
        gpus_per_node=gpus_per_node,
        nodes=nodes,
        rails=rails,
        end_ports=end,
        switch=sw.model,
        radix=k,
        port_rate_gbps=rate,
        rail_optimised=rails > 1,
    )
    caps = {t: fat_tree_max_ports(k, t, oversubscription) for t in (1, 2, 3)}
    if tiers is None:
        tiers = next((t for t in (1, 2, 3) if end <= caps[t]), 4)
    elif tiers not in (1, 2, 3) or end > caps[tiers]:
        raise PlanInputError(f"{end} end ports do not fit {tiers} tier(s) of {sw.model} (radix {k})")

    if tiers == 1:
        d = Design(
            topology="single switch",
            tiers=1,
            leaf_down=k,
            leaf_up=0,
            max_end_ports=k,
            switches={"leaf": 1},
            cables={"host_leaf": end},
            oversubscription=1.0,
            bisection_gbps=end / 2 * rate,
            leaves_per_rail=1 if rails > 1 else 0,
            **base,
        )
        if rails > 1:
            d.notes.append(f"rail-optimised on one switch: rail r uses ports r*{nodes}+1..(r+1)*{nodes}")
        return d

    if rails > 1:
        per_rail = math.ceil(nodes / down)
        leaves = rails * per_rail
    else:
        per_rail = 0
        leaves = math.ceil(end / down)
    host_leaf = end
    leaf_uplinks = leaves * up

    if tiers == 2:
        spines = math.ceil(leaf_uplinks / k)
        return Design(
            topology="two-tier fat tree",
            tiers=2,
            leaf_down=down,
            leaf_up=up,
            max_end_ports=caps[2],
            switches={"leaf": leaves, "spine": spines},
            cables={"host_leaf": host_leaf, "leaf_spine": leaf_uplinks},
            oversubscription=ratio,
            bisection_gbps=end / 2 * rate / ratio,
            leaves_per_rail=per_rail,
            **base,
        )

    if tiers == 3:
        half = k // 2
        pods = math.ceil(leaves / half)
        # a pod's spines give k/2 ports to its leaves and k/2 to the core
        spines = sum(math.ceil(min(half, leaves - p * half) * up / half) for p in range(pods))
        spine_core = spines * half
        cores = math.ceil(spine_core / k)
        return Design(
            topology="three-tier fat tree",
            tiers=3,
            leaf_down=down,
            leaf_up=up,
            max_end_ports=caps[3],
            switches={"leaf": leaves, "spine": spines, "core": cores},
            cables={"host_leaf": host_leaf, "leaf_spine": leaf_uplinks, "spine_core": spine_core},
            oversubscription=ratio,
            bisection_gbps=end / 2 * rate / ratio,
            leaves_per_rail=per_rail,
            groups=pods,
            **base,
        )

    # Dragonfly+: groups of k/2 leaves (k/2 hosts each) and k/2 spines (k/2 global ports each)
    half = k // 2
    per_group = half * half
    cap = dragonfly_plus_max_ports(k)
    if end > cap:
        raise PlanInputError(
            f"{end} end ports exceed the largest Dragonfly+ of radix-{k} switches ({cap}); "
            "choose a switch with more ports"
        )
    groups = math.ceil(end / per_group)
    leaves = math.ceil(end / half)
    spines = groups * half
    links_per_pair = per_group // (groups - 1)
    global_links = groups * (groups - 1) // 2 * links_per_pair
    crossing = (groups // 2) * (groups - groups // 2) * links_per_pair
    bisection = min(end / 2 * rate, crossing * rate)
    d = Design(
        topology="Dragonfly+",
        tiers=3,
        leaf_down=half,
        leaf_up=half,
        max_end_ports=cap,
        switches={"leaf": leaves, "spine": spines},
        cables={"host_leaf": end, "leaf_spine": leaves * half, "global": global_links},
        oversubscription=round(end / 2 / crossing, 3) if crossing else float("inf"),
        bisection_gbps=bisection,
        leaves_per_rail=math.ceil(nodes / half) if rails > 1 else 0,
        groups=groups,
        **base,
    )
    d.notes.append(
        f"{groups} groups of up to {per_group} end ports, {links_per_pair} global link(s) between "
        f"every pair of groups; at most 3 switch-to-switch hops between groups"
    )
    return d
