"""The coverage schedule: rounds of tests in which no two tests share a directed cable, chosen so
that every directed cable of the fabric (host links and ISLs, each direction) carries a full-rate
test at least once (SPEC-18 §3, §5).

A test is one ``ib_write_bw`` from a client port ``src`` to a server port ``dst``: its data crosses
the directed cables of ``fabric.path(src, dst)`` (perftest's write test is one-way; the reverse
direction carries only acknowledgements), so a test proves one direction of each cable on its path.
Within a round a port may be the client of one test and the server of another: the two use
different directed cables (host -> leaf, leaf -> host).

**InfiniBand** paths are known (ftree), so the schedule is planned: :func:`schedule` is a greedy
that first places tests on uncovered ISLs (the most constrained cables: a down ISL is reachable only
from the destinations ftree routes over it), then pairs ports on the same leaf for the host links
left. A directed cable no route uses (ftree with these LIDs sends nothing over it) is
*unroutable*: no test can prove it; :func:`unroutable` lists them and the report says so.

**RoCE** paths are an ECMP hash of the flow (random QP numbers), so ISL coverage is *observed*:
cross-leaf tests carry at least ``2 x n_up`` QPs (:func:`roce_qps`), at most ``capacity`` cross-leaf
tests leave (and enter) a leaf per round, so flows of two tests can never share an uplink at more
than the uplink's capacity whatever the hash; :func:`observe` marks ISLs covered from switch-counter
deltas and :func:`followup` plans rounds for the ones not seen.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fabricops.model.fabric import DirLink, Fabric, Port, dirlink_str, natural

__all__ = [
    "Test",
    "check_round",
    "covered",
    "followup",
    "lower_bound",
    "observe",
    "roce_qps",
    "schedule",
    "unroutable",
]


@dataclass(frozen=True)
class Test:
    """One bandwidth test: client ``src`` writes to server ``dst`` (``qps``: QPs to use, None = the
    perftest default)."""

    __test__ = False  # not a pytest class

    src: Port
    dst: Port
    qps: int | None = None

    def rail_test(self, rail: int):
        """The same test as the pair runner's :class:`~fabricops.verify.pairs.RailTest`."""
        from fabricops.verify.pairs import RailTest

        return RailTest(rail, self.src[0], self.src[1], self.dst[0], self.dst[1])

    def __str__(self) -> str:
        return f"{self.src[0]} {self.src[1]} -> {self.dst[0]} {self.dst[1]}"


def covered(fabric: Fabric, tests: Iterable[Test]) -> set[DirLink]:
    """The directed cables the tests' known paths prove."""
    out: set[DirLink] = set()
    for t in tests:
        p = fabric.path(t.src, t.dst)
        if p is None:  # RoCE cross-leaf: only the host links are known
            p = [fabric.up(t.src), fabric.down(t.dst)]
        out.update(p)
    return out


def check_round(fabric: Fabric, tests: Sequence[Test]) -> None:
    """Raise ValueError when two tests of a round share a directed cable (known paths) or, for
    RoCE, a leaf sends or receives more cross-leaf tests than one."""
    seen: dict[DirLink, Test] = {}
    for t in tests:
        p = fabric.path(t.src, t.dst) or [fabric.up(t.src), fabric.down(t.dst)]
        for d in p:
            if d in seen:
                raise ValueError(f"{t} and {seen[d]} share {dirlink_str(d)}")
            seen[d] = t


def _cross_table(
    fabric: Fabric,
) -> tuple[dict[tuple[str, Port], tuple[DirLink, DirLink]], dict[DirLink, list]]:
    """(source leaf, destination) -> (up ISL, down ISL), and ISL -> [(source leaf, destination)]."""
    cached = getattr(fabric, "_cross_cache", None)
    if cached is not None:
        return cached
    cross: dict[tuple[str, Port], tuple[DirLink, DirLink]] = {}
    opts: dict[DirLink, list[tuple[str, Port]]] = defaultdict(list)
    fabric._cross_cache = (cross, opts)  # type: ignore[attr-defined]
    if fabric.roce or len(fabric.leaves) < 2:
        return cross, opts
    for leaf in fabric.leaves:
        for t in fabric.endpoints:
            if fabric.leaf_of(t) == leaf:
                continue
            x = fabric.cross(leaf, t)
            if x is None:
                continue
            cross[(leaf, t)] = x
            opts[x[0]].append((leaf, t))
            opts[x[1]].append((leaf, t))
    return cross, opts


def unroutable(fabric: Fabric, _opts: Mapping | None = None) -> set[DirLink]:
    """InfiniBand ISL directions no ftree route uses (no test can prove them); for RoCE none
    (any ISL may carry a flow)."""
    if fabric.roce:
        return set()
    opts = _opts if _opts is not None else _cross_table(fabric)[1]
    return {d for d in fabric.isl_links() if not opts.get(d)}


def lower_bound(fabric: Fabric) -> int:
    """Rounds any schedule needs to prove every provable directed cable of ``fabric``.

    The argument (each item is a valid bound; the result is their maximum):

    1. A round proves something only if it holds a test: 1 round when any cable exists.
    2. A port is the client of at most one test per round (the tests would share its host -> leaf
       cable), and every cross-leaf test leaving leaf L uses exactly one of L's up ISLs, so a round
       proves at most ``h_L`` (ports on L) of L's up ISLs: ``ceil(up_L / h_L)``. Likewise a port
       is the server of at most one test per round: ``ceil(down_M / h_M)`` for the ISLs into M.
    3. (InfiniBand) an ISL direction ``l`` is only crossed by tests to the destinations ftree
       routes over it, ``D(l)``. For a set X of destinations, the up ISLs (or the down ISLs) whose
       ``D(l)`` lies inside X can only be proven by tests into X, each test proves one of them,
       and at most ``|X|`` tests enter X per round: ``ceil(#{l: D(l) within X} / |X|)``, taken over
       every distinct ``D(l)`` (and, for down ISLs, all ports of the leaf).
    4. (RoCE) a cross-leaf test with ``2 x n_up`` QPs can light every uplink of its leaf, so ISLs
       add nothing beyond 2; paths are observed, so the follow-up rounds are not in the bound.
    """
    if len(fabric.endpoints) < 2:
        return 0
    lb = 1
    cross, opts = _cross_table(fabric)
    bad = unroutable(fabric, opts)
    for leaf in fabric.leaves:
        h = len(fabric.on_leaf(leaf))
        ups = [d for d in fabric.uplinks(leaf) if d not in bad]
        downs = [d for s in fabric.spines for d in fabric.downlinks(s, leaf) if d not in bad]
        if h and len(fabric.leaves) > 1:
            lb = max(lb, math.ceil(len(ups) / h), math.ceil(len(downs) / h))
    if fabric.roce:
        return lb
    # every cross-leaf test uses one up and one down ISL, none shared within a round
    r_up = sum(1 for d, o in opts.items() if o and fabric.kind(d) == "isl-up")
    r_down = sum(1 for d, o in opts.items() if o and fabric.kind(d) == "isl-down")
    if r_up and r_down:
        lb = max(lb, math.ceil(r_up / r_down), math.ceil(r_down / r_up))
    down_of: dict[Port, set[DirLink]] = defaultdict(set)
    for (_leaf, t), (_u, dn) in cross.items():
        down_of[t].add(dn)

    def cap(x: frozenset) -> int:  # tests that can enter X in one round
        return min(len(x), len(set().union(*(down_of[t] for t in x))))

    for kind in ("isl-up", "isl-down"):
        sets: dict[frozenset, int] = defaultdict(int)
        for d, o in opts.items():
            if o and fabric.kind(d) == kind:
                sets[frozenset(t for _l, t in o)] += 1
        candidates = set(sets)
        # and the union of each group of overlapping destination sets
        parent: dict[Port, Port] = {}

        def find(a: Port, parent: dict[Port, Port] = parent) -> Port:
            parent.setdefault(a, a)
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        for x in sets:
            first = min(x)
            for t in x:
                parent[find(t)] = find(first)
        groups: dict[Port, set[Port]] = defaultdict(set)
        for x in sets:
            groups[find(min(x))].update(x)
        candidates |= {frozenset(g) for g in groups.values()}
        by_elem: dict[Port, list[frozenset]] = defaultdict(list)
        for y in sets:
            by_elem[min(y)].append(y)
        for x in candidates:
            n = sum(sets[y] for t in x for y in by_elem.get(t, ()) if y <= x)
            lb = max(lb, math.ceil(n / max(1, cap(x))))
    for leaf in fabric.leaves:  # all ports of a leaf as X, for its down ISLs
        x = set(fabric.on_leaf(leaf))
        n = sum(
            1
            for s in fabric.spines
            for d in fabric.downlinks(s, leaf)
            if opts.get(d) and {t for _l, t in opts[d]} <= x
        )
        if x:
            lb = max(lb, math.ceil(n / len(x)))
    return lb


def roce_qps(fabric: Fabric, src: Port, dst: Port, minimum: int = 0) -> int | None:
    """QPs of a RoCE test: cross-leaf at least ``2 x n_up`` of the source leaf, so that ECMP spreads
    flows over every uplink with good odds (a given uplink gets none with chance about e^-2)."""
    if not fabric.roce or fabric.leaf_of(src) == fabric.leaf_of(dst):
        return None
    n_up = len(fabric.uplinks(fabric.leaf_of(src)))
    return max(minimum, 2 * n_up) if n_up else None


class _Round:
    def __init__(self, fabric: Fabric):
        self.f = fabric
        self.used: set[DirLink] = set()
        self.tests: list[Test] = []
        self.cross_out: dict[str, int] = defaultdict(int)
        self.cross_in: dict[str, int] = defaultdict(int)

    def free_src(self, e: Port) -> bool:
        return self.f.up(e) not in self.used

    def free_dst(self, e: Port) -> bool:
        return self.f.down(e) not in self.used

    def add(self, t: Test, path: Sequence[DirLink]) -> None:
        self.used.update(path)
        self.tests.append(t)
        ls, ld = self.f.leaf_of(t.src), self.f.leaf_of(t.dst)
        if ls != ld:
            self.cross_out[ls] += 1
            self.cross_in[ld] += 1


def _host_phase(
    fabric: Fabric, rnd: _Round, uncovered: set[DirLink], cross: Mapping, cap: int | None
) -> None:
    """Cover host links left: same-leaf tests first, else a cross-leaf test on free ISLs."""
    f = fabric
    for leaf in f.leaves:
        eps = f.on_leaf(leaf)
        ring = [e for e in eps if rnd.free_src(e) and rnd.free_dst(e)]
        if len(ring) >= 2:  # a ring proves every port's two directions in one round
            for j, s in enumerate(ring):
                d = ring[(j + 1) % len(ring)]
                if (f.up(s) in uncovered or f.down(d) in uncovered) and rnd.free_src(s) and rnd.free_dst(d):
                    rnd.add(Test(s, d), [f.up(s), f.down(d)])
        need_up = [e for e in eps if f.up(e) in uncovered and rnd.free_src(e)]
        for s in need_up:
            dsts = sorted(
                (e for e in eps if e != s and rnd.free_dst(e)), key=lambda e: f.down(e) not in uncovered
            )
            if dsts:
                rnd.add(Test(s, dsts[0]), [f.up(s), f.down(dsts[0])])
        need_down = [e for e in eps if f.down(e) in uncovered and rnd.free_dst(e)]
        for d in need_down:
            srcs = [e for e in eps if e != d and rnd.free_src(e)]
            if srcs:
                rnd.add(Test(srcs[0], d), [f.up(srcs[0]), f.down(d)])
    # what a leaf cannot cover alone (a single port on it): cross-leaf
    for e in f.endpoints:
        for role in ("src", "dst"):
            link = f.up(e) if role == "src" else f.down(e)
            if link not in uncovered or link in rnd.used:
                continue
            for o in f.endpoints:
                if f.leaf_of(o) == f.leaf_of(e):
                    continue
                s, d = (e, o) if role == "src" else (o, e)
                if not (rnd.free_src(s) and rnd.free_dst(d)):
                    continue
                if f.roce:
                    if cap is not None and (
                        rnd.cross_out[f.leaf_of(s)] >= cap or rnd.cross_in[f.leaf_of(d)] >= cap
                    ):
                        continue
                    rnd.add(Test(s, d, roce_qps(f, s, d)), [f.up(s), f.down(d)])
                    break
                x = cross.get((f.leaf_of(s), d))
                if x is None or x[0] in rnd.used or x[1] in rnd.used:
                    continue
                rnd.add(Test(s, d), [f.up(s), x[0], x[1], f.down(d)])
                break


def schedule(fabric: Fabric, *, capacity: int = 1, max_rounds: int | None = None) -> list[list[Test]]:
    """Rounds covering every provable directed cable at least once, no directed cable shared in a
    round. InfiniBand: planned (module doc). RoCE: host links planned, and every leaf sends and
    receives at least one cross-leaf test (``capacity`` per leaf direction per round) carrying
    :func:`roce_qps` QPs; the ISLs they prove come from :func:`observe`."""
    f = fabric
    if len(f.endpoints) < 2:
        return []
    if f.roce:
        return _roce_rounds(f, set(f.leaves), set(f.leaves), capacity, host_links=f.host_links())
    cross, opts = _cross_table(f)
    best: list[list[Test]] | None = None
    # the greedy in two orders (scarcest ISLs first; down ISLs first); the shorter schedule wins
    lb = lower_bound(f)
    orders: list[str | int] = ["scarce", "down"]
    if len(f.endpoints) <= 512:  # small fabrics: a few seeded shuffles too (cheap, often reach the bound)
        orders += list(range(1, 9))
    for order in orders:
        got = _ib_greedy(f, cross, opts, order, max_rounds)
        if best is None or len(got) < len(best):
            best = got
        if len(best) <= lb:
            break
    return best or []


def _ib_greedy(
    f: Fabric, cross: Mapping, opts: Mapping, order: str | int, max_rounds: int | None
) -> list[list[Test]]:
    uncovered = f.host_links() | (f.isl_links() - unroutable(f, opts))
    rounds: list[list[Test]] = []
    limit = max_rounds or (4 * len(f.endpoints) + 8)

    rng = random.Random(order) if isinstance(order, int) else None
    tiebreak = {}

    def key(d: DirLink) -> tuple:
        first = f.kind(d) != "isl-down" if order == "down" else 0
        if rng is not None:
            if d not in tiebreak:
                tiebreak[d] = rng.random()
            return (len(opts[d]), tiebreak[d])
        return (first, len(opts[d]), natural(dirlink_str(d)))

    while uncovered and len(rounds) < limit:
        rnd = _Round(f)
        isls = sorted((d for d in uncovered if d in opts), key=key)
        for link in isls:
            if link in rnd.used:
                continue
            best, best_gain = None, -1
            for leaf, t in opts[link]:
                if not rnd.free_dst(t):
                    continue
                up, dn = cross[(leaf, t)]
                if up in rnd.used or dn in rnd.used:
                    continue
                srcs = [e for e in f.on_leaf(leaf) if rnd.free_src(e)]
                if not srcs:
                    continue
                src = next((e for e in srcs if f.up(e) in uncovered), srcs[0])
                gain = (
                    (up in uncovered)
                    + (dn in uncovered)
                    + (f.down(t) in uncovered)
                    + (f.up(src) in uncovered)
                )
                if gain > best_gain:
                    best, best_gain = (src, t, up, dn), gain
                    if gain == 4:
                        break
            if best is not None:
                src, t, up, dn = best
                rnd.add(Test(src, t), [f.up(src), up, dn, f.down(t)])
        _host_phase(f, rnd, uncovered, cross, None)
        before = len(uncovered)
        uncovered -= rnd.used
        if not rnd.tests or len(uncovered) == before:
            break
        rounds.append(rnd.tests)
    return rounds


def _roce_rounds(
    f: Fabric,
    need_out: set[str],
    need_in: set[str],
    capacity: int,
    host_links: set[DirLink] | None = None,
    attempt: int = 0,
) -> list[list[Test]]:
    """Rounds giving each leaf of ``need_out`` one cross-leaf test out and each of ``need_in`` one
    in (at most ``capacity`` per leaf direction per round), plus tests for ``host_links``.

    Traffic into a leaf of ``need_in`` comes preferably from a leaf *not* in ``need_out`` (an
    uplink that is down or out of the ECMP group there would keep a spine's down link dark), and
    the pairing rotates with ``attempt`` so that follow-ups do not repeat one leaf pair."""
    multi = len(f.leaves) > 1
    need_out = {leaf for leaf in need_out if f.uplinks(leaf)} if multi else set()
    need_in = {leaf for leaf in need_in if any(f.downlinks(s, leaf) for s in f.spines)} if multi else set()
    suspect_out = set(need_out)
    hosts_left = set(host_links or ())
    rounds: list[list[Test]] = []
    leaves = f.leaves
    n = len(leaves)

    def place(rnd: _Round, ls: str, ld: str) -> bool:
        if ls == ld or rnd.cross_out[ls] >= capacity or rnd.cross_in[ld] >= capacity:
            return False
        s = next((e for e in f.on_leaf(ls) if rnd.free_src(e)), None)
        d = next((e for e in f.on_leaf(ld) if rnd.free_dst(e)), None)
        if s is None or d is None:
            return False
        rnd.add(Test(s, d, roce_qps(f, s, d)), [f.up(s), f.down(d)])
        need_out.discard(ls)
        need_in.discard(ld)
        return True

    for r in range(4 * len(f.endpoints) + 8):
        if not (need_out or need_in or hosts_left):
            break
        rnd = _Round(f)
        shift = attempt + r
        for i, ld in enumerate(leaves):  # into leaves with dark down links: from a sound leaf
            if ld not in need_in:
                continue
            cands = [leaves[(i + 1 + (j + shift) % (n - 1)) % n] for j in range(n - 1)]
            cands.sort(key=lambda m: (m in suspect_out, m not in need_out))
            for ls in cands:
                if place(rnd, ls, ld):
                    break
        for i, ls in enumerate(leaves):
            if ls not in need_out:
                continue
            cands = [leaves[(i + 1 + (j + shift) % (n - 1)) % n] for j in range(n - 1)]
            for ld in cands:
                if place(rnd, ls, ld):
                    break
        _host_phase(f, rnd, hosts_left, {}, capacity)
        hosts_left -= rnd.used
        if not rnd.tests:
            break
        rounds.append(rnd.tests)
    return rounds


def observe(
    fabric: Fabric, deltas: Mapping[DirLink, int], tests: Sequence[Test], bytes_per_test: float = 1.0
) -> set[DirLink]:
    """ISL directions proven by a round, from switch-counter deltas (directed cable -> bytes sent
    over it during the round, from the transmitting port's counters): an ISL counts only when it
    moved at least ``bytes_per_test`` bytes and a test of the round could have used it (its up
    ISL leaves a leaf some test left; its down ISL enters a leaf some test entered)."""
    out_leaves = {fabric.leaf_of(t.src) for t in tests if fabric.leaf_of(t.src) != fabric.leaf_of(t.dst)}
    in_leaves = {fabric.leaf_of(t.dst) for t in tests if fabric.leaf_of(t.src) != fabric.leaf_of(t.dst)}
    seen = set()
    isls = fabric.isl_links()
    for d, b in deltas.items():
        if d not in isls or b is None or b < bytes_per_test:
            continue
        k = fabric.kind(d)
        if (k == "isl-up" and d[0][0] in out_leaves) or (k == "isl-down" and d[1][0] in in_leaves):
            seen.add(d)
    return seen


def followup(
    fabric: Fabric, unobserved: Iterable[DirLink], capacity: int = 1, attempt: int = 0
) -> list[list[Test]]:
    """Rounds of cross-leaf RoCE tests for ISL directions not yet seen: one test out of the leaf of
    each unseen up ISL, one into the leaf of each unseen down ISL (new QP numbers, new hashes)."""
    need_out, need_in = set(), set()
    for d in unobserved:
        k = fabric.kind(d)
        if k == "isl-up":
            need_out.add(d[0][0])
        elif k == "isl-down":
            need_in.add(d[1][0])
    return _roce_rounds(fabric, need_out, need_in, capacity, attempt=attempt)
