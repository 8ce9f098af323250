"""Pairwise test schedules (circle method).

Testing every pair of N nodes one pair at a time takes N(N-1)/2 runs; the circle method (round-robin
tournament) packs them into N-1 rounds of N/2 disjoint pairs for even N (N rounds with one idle node
for odd N), so each round runs in parallel without any node in two tests at once
(microsoft/superbenchmark ``gen_traffic_pattern_config.py``; REFERENCE.md "Pairwise tests").

>>> pair_rounds(["a", "b", "c", "d"])
[[('a', 'd'), ('b', 'c')], [('a', 'c'), ('b', 'd')], [('a', 'b'), ('c', 'd')]]
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["RailPair", "pair_count", "pair_rounds", "rail_pairs", "round_count"]

T = TypeVar("T", bound=Hashable)


def _check_nodes(nodes: Sequence[T]) -> list[T]:
    items = list(nodes)
    if any(n is None for n in items):
        raise ValueError("node names must not be None")
    if len(set(items)) != len(items):
        dupes = sorted({str(n) for n in items if items.count(n) > 1})
        raise ValueError(f"duplicate nodes: {', '.join(dupes)}")
    return items


def round_count(n: int) -> int:
    """Rounds the circle method needs for n nodes: n-1 (even n), n (odd n), 0 for fewer than 2."""
    if n < 2:
        return 0
    return n - 1 if n % 2 == 0 else n


def pair_count(n: int) -> int:
    """Unordered pairs among n nodes: n(n-1)/2."""
    return n * (n - 1) // 2 if n > 1 else 0


def pair_rounds(nodes: Sequence[T]) -> list[list[tuple[T, T]]]:
    """Rounds of disjoint pairs covering every unordered pair of ``nodes`` exactly once.

    Deterministic for a given input order. In each pair the node that comes first in ``nodes`` comes
    first; pairs in a round are sorted by input position. 0 or 1 nodes give no rounds; duplicates
    raise ValueError.
    """
    items = _check_nodes(nodes)
    if len(items) < 2:
        return []
    index = {node: i for i, node in enumerate(items)}
    ring: list[T | None] = list(items)
    if len(ring) % 2:
        ring.append(None)  # the "bye": whoever meets it sits the round out
    m = len(ring)
    rounds: list[list[tuple[T, T]]] = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = ring[i], ring[m - 1 - i]
            if a is None or b is None:
                continue
            pairs.append((a, b) if index[a] < index[b] else (b, a))
        pairs.sort(key=lambda p: (index[p[0]], index[p[1]]))
        rounds.append(pairs)
        ring = [ring[0], ring[-1], *ring[1:-1]]  # keep the first fixed, rotate the rest
    return rounds


@dataclass(frozen=True)
class RailPair:
    """One test of a round: HCA ``hca_a`` on ``host_a`` to its peer ``hca_b`` on ``host_b`` (same rail)."""

    rail: int  #: rail index (0-based position of the HCA in the host's rail list)
    host_a: str
    hca_a: str
    host_b: str
    hca_b: str


def rail_pairs(
    hosts: Sequence[str], rails: Sequence[str] | Mapping[str, Sequence[str]]
) -> list[list[RailPair]]:
    """Per-rail pairs with the round structure of :func:`pair_rounds`.

    ``rails`` is the list of HCAs in rail order (the same names on every host, e.g.
    ``["mlx5_0", ..., "mlx5_7"]``) or a mapping host -> its HCAs in rail order (names may differ per
    host, counts may not). Each host pair of a round becomes one test per rail, HCA i to HCA i; all
    tests of a round use disjoint HCAs, so they can run at once.
    """
    host_list = _check_nodes(hosts)
    if isinstance(rails, Mapping):
        missing = [h for h in host_list if h not in rails]
        if missing:
            raise ValueError(f"no rail list for hosts: {', '.join(map(str, missing))}")
        per_host = {h: list(rails[h]) for h in host_list}
    else:
        per_host = {h: list(rails) for h in host_list}
    counts = {len(v) for v in per_host.values()}
    if len(counts) > 1:
        detail = ", ".join(f"{h}: {len(v)}" for h, v in per_host.items())
        raise ValueError(f"hosts have different numbers of rails ({detail})")
    for host, hcas in per_host.items():
        if len(set(hcas)) != len(hcas):
            raise ValueError(f"host {host} lists an HCA twice in its rails")
    nrails = counts.pop() if counts else 0
    return [
        [
            RailPair(rail, a, per_host[a][rail], b, per_host[b][rail])
            for a, b in round_pairs
            for rail in range(nrails)
        ]
        for round_pairs in pair_rounds(host_list)
    ]
