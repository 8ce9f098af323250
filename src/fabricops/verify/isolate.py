"""Adaptive fault isolation: from failed coverage tests to the one bad directed cable, named.

Evidence rules (sound with any number of faults, for faults that degrade every test crossing them
in that direction -- a link down, trained at a lower width or speed, erroring, a lossy port):

- a test that **passed** proves every directed cable of its path good;
- a test that **failed** has a bad cable on its path; its *suspects* are its cables not proven good;
- a failed test with exactly **one** suspect names that cable bad (everything else on it passed
  elsewhere). Nothing else ever names a cable: with two faults the result is an ambiguity (the
  suspects listed), never a wrong single name.

Each isolation round re-tests every open suspect with a *probe*: a test through the suspect whose
other cables are proven good (a known-good peer: a same-leaf port for a host link; a proven source
port, uplink and destination for an ISL), probes of a round sharing no directed cable. A probe
that fails names its suspect; one that passes clears it. When no such probe exists the probe with
the fewest unproven cables is used, and the next round splits what it left.

**Worst case, one bad directed cable f, two-tier tree: 2 extra rounds**
(:data:`WORST_ROUNDS_ONE_FAULT`, independent of the number of hosts). Argument: every test that
does not cross f passes, so after the coverage rounds the only unproven cables lie on failed tests,
each a path of at most 4 cables through f (host up, up ISL, down ISL, host down). Round 1 gives
every suspect a probe; a probe that does not cross f passes and clears its suspect (and every other
cable on it), so after round 1 the open suspects are f and the suspects whose probe crossed f. In
round 1 already, f's own probe has every other cable proven, and f is named, whenever such a probe
exists: for a host link, a test with another port of the same leaf that passed a test not crossing
f; for an ISL, a test from another port of its source leaf to another destination ftree routes
over f, whose other cables carried a passing test. Otherwise round 2 probes f through the cables
the passing round-1 probes proved (they touch f's leaf pair and spine only, hence no dependence on
N). Where no probe can separate two suspects (a leaf with a single port whose every route shares
one spine link, say), the result is an ambiguity listing them -- never more rounds than
``max_rounds`` and never a wrong name. Checked exhaustively (every directed cable) on the lab's
4-leaf/2-spine shapes at 8, 16 and 32 hosts and two more 16-host trees
(tests/unit/verify/test_isolate.py), and by bench/coverage_sim.py at 256 to 4,096 hosts (worst 2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fabricops.model.fabric import DirLink, Fabric
from fabricops.verify.coverage import Test, _cross_table, roce_qps

__all__ = ["WORST_ROUNDS_ONE_FAULT", "Bundle", "Isolation", "Oracle", "isolate", "name", "names"]

#: Extra rounds to name one bad directed cable in a two-tier tree (module docstring).
WORST_ROUNDS_ONE_FAULT = 2

Oracle = Callable[[Sequence[Test]], Mapping[Test, bool]]  #: runs one round: test -> passed


@dataclass(frozen=True)
class Bundle:
    """RoCE: the unknown (ECMP) ISLs between two leaves: up out of ``src_leaf``, down into ``dst_leaf``."""

    src_leaf: str
    dst_leaf: str

    def __str__(self) -> str:
        return f"an ISL on the ECMP paths {self.src_leaf} -> {self.dst_leaf}"


Suspect = DirLink | Bundle


@dataclass
class Isolation:
    """What isolation found: ``bad`` (each proven by a failed test whose every other cable passed
    elsewhere), ``suspects`` left open (ambiguous), the extra ``rounds`` and the probes run."""

    bad: list[Suspect] = field(default_factory=list)
    suspects: list[Suspect] = field(default_factory=list)
    rounds: int = 0
    probes: list[tuple[Test, bool]] = field(default_factory=list)
    not_reproduced: list[Test] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return bool(self.bad) and not self.suspects

    def summary(self, fabric: Fabric) -> str:
        parts = []
        if self.bad:
            parts.append("bad: " + "; ".join(names(fabric, self.bad)))
        if self.suspects:
            parts.append("ambiguous, one or more of: " + "; ".join(name(fabric, s) for s in self.suspects))
        if self.not_reproduced:
            parts.append(
                f"{len(self.not_reproduced)} failed test(s) not reproduced: every cable on their path "
                "passed in other tests (intermittent fault or congestion)"
            )
        return (", ".join(parts) or "nothing to isolate") + f" ({self.rounds} extra round(s))"


def names(fabric: Fabric, items: Sequence[Suspect]) -> list[str]:
    """Names of bad items, the two directions of one cable as one: ``host port gpu05 mlx5_0/1
    (both directions: ...)``, ``ISL leaf1:swp31<>spine1:swp1 (both directions: ...)``."""
    out, done = [], set()
    have = set(items)
    for s in items:
        if s in done:
            continue
        rev = None if isinstance(s, Bundle) else (s[1], s[0])
        if rev is not None and rev in have:
            done.update({s, rev})
            k = fabric.kind(s)
            if k.startswith("host"):
                host_end, sw_end = (s[0], s[1]) if k == "host-up" else (s[1], s[0])
                out.append(
                    f"host port {host_end[0]} {host_end[1]} (both directions: the port, its cable or "
                    f"{sw_end[0]} port {sw_end[1]})"
                )
            else:
                up = s if k == "isl-up" else rev
                out.append(
                    f"ISL {up[0][0]}:{up[0][1]}<>{up[1][0]}:{up[1][1]} (both directions: the cable or "
                    "either switch port)"
                )
            continue
        done.add(s)
        out.append(name(fabric, s))
    return out


def name(fabric: Fabric, s: Suspect) -> str:
    """``ISL leaf2:swp31>spine1:swp2`` / ``host port gpu07 mlx5_1/1 (transmit: ...)``."""
    if isinstance(s, Bundle):
        return str(s)
    return fabric.name(s)


def _suspects(fabric: Fabric, t: Test) -> list[Suspect]:
    p = fabric.path(t.src, t.dst)
    if p is not None:
        return list(p)
    return [fabric.up(t.src), Bundle(fabric.leaf_of(t.src), fabric.leaf_of(t.dst)), fabric.down(t.dst)]


def _probes(fabric: Fabric, s: Suspect) -> Iterable[tuple[Test, list[Suspect]]]:
    """Candidate tests through suspect ``s``, with their suspect lists."""
    f = fabric
    if isinstance(s, Bundle):
        for a in f.on_leaf(s.src_leaf):
            for b in f.on_leaf(s.dst_leaf):
                t = Test(a, b, roce_qps(f, a, b))
                yield t, _suspects(f, t)
        return
    kind = f.kind(s)
    if kind == "host-up":
        a = s[0]
        others = sorted(f.endpoints, key=lambda e: f.leaf_of(e) != f.leaf_of(a))
        for b in others:
            if b != a:
                t = Test(a, b, roce_qps(f, a, b))
                yield t, _suspects(f, t)
    elif kind == "host-down":
        b = s[1]
        others = sorted(f.endpoints, key=lambda e: f.leaf_of(e) != f.leaf_of(b))
        for a in others:
            if a != b:
                t = Test(a, b, roce_qps(f, a, b))
                yield t, _suspects(f, t)
    else:
        _cross, opts = _cross_table(f)
        for leaf, dst in opts.get(s, ()):
            for a in f.on_leaf(leaf):
                t = Test(a, dst)
                yield t, _suspects(f, t)


def isolate(
    fabric: Fabric,
    results: Iterable[tuple[Test, bool]],
    oracle: Oracle,
    *,
    max_rounds: int = 4,
) -> Isolation:
    """Name the bad directed cable(s) behind the failed tests of ``results`` ((test, passed) pairs
    of the coverage rounds), running at most ``max_rounds`` rounds of probes through ``oracle``."""
    f = fabric
    good: set[Suspect] = set()
    failed: list[list[Suspect]] = []
    failed_tests: list[Test] = []
    out = Isolation()

    def learn(t: Test, ok: bool) -> None:
        sus = _suspects(f, t)
        if ok:
            # a passing RoCE cross-leaf test proves its host links; its ISLs are unknown
            good.update(x for x in sus if not isinstance(x, Bundle))
            for x in sus:
                if isinstance(x, Bundle):
                    good.add(x)
        else:
            failed.append(sus)
            failed_tests.append(t)

    for t, ok in results:
        learn(t, ok)
    if not failed:
        return out
    bad: list[Suspect] = []
    for _round in range(max_rounds + 1):
        # what the evidence says now
        open_tests = []
        for sus in failed:
            left = [x for x in sus if x not in good]
            if any(x in bad for x in left):
                continue  # explained by a cable already named
            if len(left) == 1:
                bad.append(left[0])
                continue
            open_tests.append(left)
        # a newly named cable may explain tests seen earlier in this pass
        open_tests = [left for left in open_tests if not any(x in bad for x in left)]
        # the other unproven cables of explained tests may hide a second fault: probe them too
        hidden = [x for sus in failed for x in sus if x not in good and x not in bad]
        if not (open_tests or hidden) or _round == max_rounds:
            break
        suspects = list(dict.fromkeys([*(x for left in open_tests for x in left), *hidden]))
        if not suspects:
            break
        used: set[Suspect] = set()
        probes: list[Test] = []
        # a probe whose unproven cables include all of a failed test's tells nothing: it must fail
        known_fail = [frozenset(x for x in sus if x not in good) for sus in failed]
        for s in suspects:
            best = None
            for t, sus in _probes(f, s):
                if any(x in used for x in sus) or any(x in bad for x in sus):
                    continue
                unk = frozenset(x for x in sus if x not in good)
                if any(k <= unk for k in known_fail):
                    continue
                unknown = sum(1 for x in sus if x not in good and x != s)
                if best is None or unknown < best[0]:
                    best = (unknown, t, sus)
                    if unknown == 0:
                        break
            if best is not None:
                probes.append(best[1])
                used.update(best[2])
        if not probes:
            break
        res = oracle(probes)
        out.rounds += 1
        for t in probes:
            ok = bool(res.get(t, False))
            out.probes.append((t, ok))
            learn(t, ok)
    out.bad = list(dict.fromkeys(bad))
    open_left: list[Suspect] = []
    for t, sus in zip(failed_tests, failed, strict=True):
        left = [x for x in sus if x not in good]
        if not left:
            out.not_reproduced.append(t)
        elif not any(x in out.bad for x in left):
            open_left.extend(left)
    out.suspects = list(dict.fromkeys(open_left))
    return out
