"""Running the coverage schedule with the pair runner, and isolating what fails.

``fabricops verify`` uses this when the inventory describes the fabric (``fabricops_cabling``, plus
``fabricops_switch_links`` for a multi-tier fabric, or a single switch per rail): the rails of one
fabric become one rail (so cross-leaf pairs exist), :func:`fabricops.verify.coverage.schedule` plans
the rounds, each test runs as the same :class:`~fabricops.verify.pairs.RailTest` through
:func:`~fabricops.verify.pairs.run_test` (server first, then client), failed tests are re-run alone
as in all-pairs mode, and :func:`fabricops.verify.isolate.isolate` names the bad cable with probe
rounds. ``--all-pairs`` keeps the circle method.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import FabricopsError, ParseError
from fabricops.model import rates
from fabricops.model.fabric import DirLink, Fabric, dirlink_str, natural
from fabricops.parsers import parse
from fabricops.verify import coverage, isolate, pairs, switchports
from fabricops.verify.result import FAIL, PASS, SKIP, CheckResult

#: ISL byte counters of a RoCE fabric: the directed ISLs asked for -> bytes sent so far (the
#: transmitting switch port's counter; fabricops.verify.switchports.IslCounters). A link it cannot
#: read is left out (its ``why(link)``, when it has one, says why).
CounterFn = Callable[[Fabric, Sequence[DirLink]], Mapping[DirLink, int]]
#: judges the directed cables no byte count proved: (rail name, rail index, fabric, links, why each
#: was not measured) -> results (fabricops.verify.switchports.LinkProof)
UnprovenFn = Callable[[str, int, Fabric, set[DirLink], Callable[[DirLink], str]], list[CheckResult]]
ROCE_FOLLOWUP_ROUNDS = 3
#: bytes an ISL direction must move in a round to count as crossed by its tests: far above the
#: control traffic a link carries between tests (LLDP: a frame of a few hundred bytes every 30 s),
#: far below what one QP of a bandwidth test moves (perftest: 5000 iterations x 64 KiB and more)
ISL_MIN_BYTES = 1 << 20

__all__ = [
    "CounterFn", "CoverageRun", "FabricPlan", "UnprovenFn", "lids_from_raws", "plan_fabrics", "run_coverage",
]


@dataclass(eq=False)
class FabricPlan:
    fabric: Fabric
    rail: pairs.Rail
    rounds: list[list[coverage.Test]]
    lower_bound: int
    unroutable: set[DirLink] = field(default_factory=set)


@dataclass
class CoverageRun(pairs.PairRun):
    """A :class:`~fabricops.verify.pairs.PairRun` plus what the coverage mode proved."""

    mode: str = "coverage"
    lower_bound: int = 0
    followup_rounds: int = 0  # RoCE rounds added for ISLs the ECMP hash did not cross (of ``rounds``)
    links_total: int = 0
    links_covered: int = 0
    isolation_rounds: int = 0
    fabrics: list[dict[str, Any]] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)


def lids_from_raws(raws: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    """(host, "mlx5_0/1") -> Base lid, from the ibstat each host's check phase read."""
    out: dict[tuple[str, str], int] = {}
    for h, raw in raws.items():
        res = raw.get("ibstat") or {}
        if res.get("rc") not in (0, None):
            continue
        try:
            rec = parse("ibstat", res.get("stdout") or "")
        except ParseError:
            continue
        for ca in rec.cas:
            for p in ca.ports:
                if p.base_lid:
                    out[(h, f"{ca.name}/{p.port}")] = int(p.base_lid)
    return out


def plan_fabrics(
    rails: Sequence[pairs.Rail],
    cabling: Sequence[Mapping[str, Any]] | None,
    switch_links: Sequence[Mapping[str, Any]] | None,
    lids: Mapping[tuple[str, str], int],
) -> tuple[list[FabricPlan] | None, str]:
    """One merged rail and a coverage schedule per fabric, or (None, why all-pairs is used)."""
    if not cabling:
        return None, "no fabricops_cabling: the fabric is not described"
    testable = {(h, d) for r in rails for h, d in r.devices.items()}
    if not testable:
        return None, "no testable port"
    by_dev = {(h, d): r for r in rails for h, d in r.devices.items()}

    def key(e: Mapping[str, Any]) -> tuple[Any, str]:
        return (e.get("host"), f"{e.get('hca')}/{e.get('port', 1)}")

    entries = [e for e in cabling if isinstance(e, Mapping) and key(e) in testable]
    # each switch carries the link layer of the rails cabled to it (planned or observed)
    layers = {str(e.get("switch")): by_dev[key(e)].link_layer for e in entries}
    try:
        fabrics = Fabric.from_inventory(entries, switch_links or [], lids=lids, link_layer=layers or None)
    except FabricopsError as exc:
        return None, f"the inventory's fabric cannot be modelled ({exc})"
    covered_eps = {e for f in fabrics for e in f.endpoints}
    if testable - covered_eps:
        h, d = sorted(testable - covered_eps)[0]
        return None, f"{h} {d} is not in fabricops_cabling"
    out = []
    split: list[Fabric] = []
    for f in fabrics:
        hosts = [h for h, _d in f.endpoints]
        if len(hosts) == len(set(hosts)):
            split.append(f)
            continue
        if f.isl_links():
            dup = sorted({h for h in hosts if hosts.count(h) > 1})[0]
            return None, f"{dup} has two ports on one multi-switch fabric (their tests would share ISLs)"
        # one switch, several ports per host: each HCA port is its own rail; they share no cable
        for dev in sorted({d for _h, d in f.endpoints}, key=natural):
            eps = [e for e in f.endpoints if e[1] == dev]
            cables = [c for c in f.cables if c.kind == "host" and c.a in eps]
            split.append(
                Fabric(eps, cables, f.link_layer, {e: v for e, v in f.lids.items() if e in eps}, f.tiers)
            )
    for i, f in enumerate(split):
        hosts = [h for h, _d in f.endpoints]
        if len(hosts) != len(set(hosts)):
            dup = sorted({h for h in hosts if hosts.count(h) > 1})[0]
            return None, f"{dup} has two {f.endpoints[0][1]} ports on one switch"
        members = [by_dev[e] for e in f.endpoints]
        r0 = members[0]
        merged = pairs.Rail(
            index=i,
            name=r0.name,
            link_layer=r0.link_layer,
            rate_gbps=min(r.rate_gbps for r in members),
            devices={h: d for h, d in f.endpoints},
            addresses={h: by_dev[(h, d)].addresses[h] for h, d in f.endpoints},
            switch=f.leaves[0] if len(f.leaves) == 1 else None,
            rate_source=r0.rate_source,
            switch_ports={
                h: by_dev[(h, d)].switch_ports[h] for h, d in f.endpoints if h in by_dev[(h, d)].switch_ports
            },
            netdevs={h: by_dev[(h, d)].netdevs[h] for h, d in f.endpoints if h in by_dev[(h, d)].netdevs},
            gid_index={
                h: by_dev[(h, d)].gid_index[h] for h, d in f.endpoints if h in by_dev[(h, d)].gid_index
            },
            tos=r0.tos,
        )
        cap = roce_capacity(f, switch_links or [], merged.rate_gbps) if f.roce else 1
        out.append(
            FabricPlan(
                f, merged, coverage.schedule(f, capacity=cap), coverage.lower_bound(f), coverage.unroutable(f)
            )
        )
    return out, ""


def roce_capacity(f: Fabric, switch_links: Sequence[Mapping[str, Any]], host_gbps: float) -> int:
    """Cross-leaf RoCE tests a leaf may send (and receive) per round: with unknown ECMP paths every
    QP of every test may hash onto one uplink, so only as many tests as one uplink carries at full
    rate: ``floor(slowest ISL / host port)`` when every ISL of the fabric has a ``speed``, else 1."""
    mine = {c.a for c in f.cables if c.kind == "isl"} | {c.b for c in f.cables if c.kind == "isl"}
    speeds = []
    for e in switch_links:
        if not isinstance(e, Mapping) or (str(e.get("switch_a")), str(e.get("port_a"))) not in mine:
            continue
        if not e.get("speed"):
            return 1
        try:
            speeds.append(float(rates.port_rate("Ethernet", str(e["speed"]))))
        except (ValueError, KeyError):
            return 1
    if not speeds or not host_gbps:
        return 1
    return max(1, int(min(speeds) // host_gbps))


def _why_unmeasured(counters: CounterFn | None, error: str | None) -> Callable[[DirLink], str]:
    """Why a RoCE ISL direction carries no byte count: no counters, a failed read, or the reader's
    own word for that link."""
    if counters is None:
        return lambda _d: "no switch port counters were read (RoCE paths are an ECMP hash)"
    per_link = getattr(counters, "why", None)

    def why(d: DirLink) -> str:
        if error:
            return f"the switch counters could not be read: {error}"
        return f"no byte count: {per_link(d)}" if callable(per_link) else "no byte count from the switches"

    return why


def _run_round(
    run: pairs.RunFn,
    jobs: Sequence[tuple[FabricPlan, coverage.Test]],
    profile: Any,
    opts: Mapping[str, Any],
    serial: bool,
) -> dict[tuple[int, coverage.Test], list[CheckResult]]:
    def one(fp: FabricPlan, t: coverage.Test) -> list[CheckResult]:
        o = dict(opts)
        if t.qps:
            o["bw_qps"] = max(int(o.get("bw_qps", 1)), t.qps)
        rt = t.rail_test(fp.rail.index)
        results = pairs.run_test(run, rt, {}, profile, fp.rail.rate_gbps, o, pairs.TESTS, fp.rail)
        # each end's leaf: engine.explain_roce reads the inter-switch link ends between two leaves
        leaves = {t.src[0]: fp.fabric.leaf_of(t.src), t.dst[0]: fp.fabric.leaf_of(t.dst)}
        for r in results:
            r.details.setdefault("switches", dict(leaves))
        return results

    out: dict[tuple[int, coverage.Test], list[CheckResult]] = {}
    if serial:
        for fp, t in jobs:
            out[(fp.rail.index, t)] = one(fp, t)
        return out
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        futs = {(fp.rail.index, t): pool.submit(one, fp, t) for fp, t in jobs}
        for k, fu in futs.items():
            out[k] = fu.result()
    return out


def explained_by(f: Fabric, t: coverage.Test, bad: Sequence[Any]) -> dict[str, Any] | None:
    """The part isolation named bad that test ``t`` crosses: a cable between switches
    (``{"kind": "cable", "name": "ISL a:p<>b:q"}``, for RoCE an ISL of the ECMP group between two
    leaves) or a host's port (``{"kind": "hca_port", "host", "device", "name"}``); None when the test
    crosses no named part. A test explained by a cable blames no host: the hosts at its ends are
    healthy (fabricops.verify.pairs.blame)."""
    path = f.path(t.src, t.dst)
    crossed = set(path) if path is not None else {
        f.up(t.src), isolate.Bundle(f.leaf_of(t.src), f.leaf_of(t.dst)), f.down(t.dst)
    }
    host_part = None
    for b in bad:
        if b not in crossed:
            continue
        if isinstance(b, isolate.Bundle):
            return {"kind": "cable", "name": str(b)}
        kind = f.kind(b)
        if kind.startswith("isl"):
            up = b if kind == "isl-up" else (b[1], b[0])
            return {"kind": "cable", "name": f"ISL {up[0][0]}:{up[0][1]}<>{up[1][0]}:{up[1][1]}"}
        host_end = b[0] if kind == "host-up" else b[1]
        host_part = {"kind": "hca_port", "host": host_end[0], "device": host_end[1],
                     "name": f"host port {host_end[0]} {host_end[1]}"}
    return host_part


def run_coverage(
    run: pairs.RunFn,
    plans: Sequence[FabricPlan],
    profile: Any,
    opts: Mapping[str, Any],
    *,
    progress: Callable[[str], None] | None = None,
    serial: bool = False,
    rerun: bool = True,
    counters: CounterFn | None = None,
    max_isolation_rounds: int = 4,
    link_proof: UnprovenFn | None = None,
) -> CoverageRun:
    """Run every fabric's coverage rounds side by side (round i of each fabric at once: fabrics
    share no cable), re-run failed tests alone, then isolate per fabric.

    A RoCE ISL direction is proven by bytes crossing it (``counters``, read between rounds); one
    whose counters were read and never moved fails; one no counter reached is judged by
    ``link_proof`` (default: unproven, an ``error`` -- never a pass)."""
    say = progress or (lambda _m: None)
    t_start = time.monotonic()
    n_rounds = max((len(p.rounds) for p in plans), default=0)
    cr = CoverageRun(rounds=n_rounds, rails=[p.rail for p in plans])
    cr.lower_bound = max((p.lower_bound for p in plans), default=0)
    by_test: dict[tuple[int, coverage.Test], list[CheckResult]] = {}
    observed: dict[int, set[DirLink]] = {p.rail.index: set() for p in plans}
    counted: dict[int, set[DirLink]] = {p.rail.index: set() for p in plans}  # read before and after a round
    counter_error: dict[int, str] = {}
    last: dict[int, Mapping[DirLink, int] | None] = {}

    def snapshot(p: FabricPlan) -> Mapping[DirLink, int] | None:
        if counters is None or not p.fabric.roce or not p.fabric.isl_links():
            return None
        try:
            return dict(counters(p.fabric, sorted(p.fabric.isl_links())))
        except Exception as exc:  # evidence missing: the ISLs stay unobserved
            counter_error[p.rail.index] = " ".join(str(exc).split())[:200]
            say(f"switch counters not read ({counter_error[p.rail.index][:120]})")
            return None

    def do_round(label: str, jobs: list[tuple[FabricPlan, coverage.Test]]) -> None:
        mine = [p for p in plans if any(q is p for q, _t in jobs)]
        # the counters after one round are the counters before the next (nothing runs between)
        before = {p.rail.index: last[p.rail.index] if last.get(p.rail.index) is not None else snapshot(p)
                  for p in mine}
        t0 = time.monotonic()
        say(
            f"{label}: "
            + ", ".join(f"{t.src[0]}->{t.dst[0]}" for _p, t in jobs[:12])
            + (" ..." if len(jobs) > 12 else "")
        )
        res = _run_round(run, jobs, profile, opts, serial)
        by_test.update(res)
        cr.round_wall_s.append(time.monotonic() - t0)
        bad = sum(1 for v in res.values() for r in v if not r.ok)
        say(f"{label} done in {cr.round_wall_s[-1]:.1f} s" + (f", {bad} failed" if bad else ""))
        for p in mine:
            b = before[p.rail.index]
            if b is None:
                continue
            after = last[p.rail.index] = snapshot(p)
            if after is None:
                continue
            both = [d for d in after if d in b]  # a link read only once proves nothing
            counted[p.rail.index].update(both)
            deltas = {d: after[d] - b[d] for d in both}
            tests = [t for q, t in jobs if q is p]
            observed[p.rail.index] |= coverage.observe(p.fabric, deltas, tests, bytes_per_test=ISL_MIN_BYTES)

    for i in range(n_rounds):
        jobs = [(p, t) for p in plans if i < len(p.rounds) for t in p.rounds[i]]
        do_round(f"coverage round {i + 1}/{n_rounds} (lower bound {cr.lower_bound})", jobs)
    # RoCE: follow-up rounds for ISLs the counters did not see
    if counters is not None:
        for k in range(ROCE_FOLLOWUP_ROUNDS):
            extra: list[tuple[FabricPlan, coverage.Test]] = []
            for p in plans:
                if not p.fabric.roce:
                    continue
                unseen = p.fabric.isl_links() - observed[p.rail.index]
                more = coverage.followup(p.fabric, unseen, attempt=k + 1)
                if more:
                    extra += [(p, t) for t in more[0]]
            if not extra:
                break
            cr.rounds += 1
            cr.followup_rounds += 1
            do_round(f"follow-up round {k + 1} (ISLs not seen on switch counters)", extra)
    if rerun:
        t0 = time.monotonic()
        for key, res in list(by_test.items()):
            if all(r.ok for r in res):
                continue
            p = next(q for q in plans if q.rail.index == key[0])
            say(f"re-running alone: {key[1]}")
            cr.reruns += 1
            again = _run_round(run, [(p, key[1])], profile, opts, True)[key]
            pairs.mark_rerun(res, again)
            by_test[key] = again
        cr.rerun_wall_s = time.monotonic() - t0
    # isolation, per fabric
    probes: dict[tuple[int, coverage.Test], list[CheckResult]] = {}
    for p in plans:
        f = p.fabric
        mine = [(t, all(r.ok for r in res)) for (ri, t), res in by_test.items() if ri == p.rail.index]
        tests = [t for t, _ok in mine]
        proven = coverage.covered(f, tests) | (observed[p.rail.index] if f.roce else set())
        total = f.directed()
        cr.links_total += len(total)
        cr.links_covered += len(proven & total)
        info: dict[str, Any] = {
            "rail": p.rail.index,
            "name": p.rail.name,
            "fabric": f.describe(),
            "rounds": len(p.rounds),
            "lower_bound": p.lower_bound,
            "links_total": len(total),
            "links_covered": len(proven & total),
            "unroutable": sorted(dirlink_str(d) for d in p.unroutable),
            "not_covered": sorted(dirlink_str(d) for d in total - proven),
        }
        if any(not ok for _t, ok in mine):

            def oracle(batch: Sequence[coverage.Test], p: FabricPlan = p) -> dict[coverage.Test, bool]:
                say(f"isolation round on {p.rail.name}: " + ", ".join(str(t) for t in batch))
                t0 = time.monotonic()
                res = _run_round(run, [(p, t) for t in batch], profile, opts, serial)
                cr.round_wall_s.append(time.monotonic() - t0)
                out = {}
                for (_ri, t), rs in res.items():
                    for r in rs:
                        r.details["isolation_probe"] = True
                    probes[(p.rail.index, t, len(probes))] = rs  # type: ignore[index]
                    out[t] = all(r.ok for r in rs)
                return out

            iso = isolate.isolate(f, mine, oracle, max_rounds=max_isolation_rounds)
            cr.isolation_rounds += iso.rounds
            text = iso.summary(f)
            info["isolation"] = {
                "bad": isolate.names(f, iso.bad),
                "links": [str(s) if isinstance(s, isolate.Bundle) else dirlink_str(s) for s in iso.bad],
                "ambiguous": [isolate.name(f, s) for s in iso.suspects],
                "rounds": iso.rounds,
                "not_reproduced": [str(t) for t in iso.not_reproduced],
            }
            cr.findings.append(f"rail {p.rail.name}: {text}")
            for text_bad in isolate.names(f, iso.bad):
                cr.results.append(
                    CheckResult(
                        "pairs",
                        "isolation",
                        p.rail.name,
                        None,
                        FAIL,
                        f"rail {p.rail.name}: bad {text_bad}",
                        cause=f"named by {iso.rounds} isolation round(s): every other cable on its "
                        "failing tests passed",
                        details={"rail": p.rail.index},
                    )
                )
            if iso.suspects:
                cr.results.append(
                    CheckResult(
                        "pairs",
                        "isolation",
                        p.rail.name,
                        None,
                        FAIL,
                        f"rail {p.rail.name}: ambiguous: one or more of "
                        + "; ".join(isolate.name(f, s) for s in iso.suspects),
                        cause="no test can separate these cables (each test crosses them together)",
                        details={"rail": p.rail.index},
                    )
                )
            mine_tests = [(t, rs) for (ri, t), rs in by_test.items() if ri == p.rail.index]
            mine_tests += [(k[1], rs) for k, rs in probes.items() if k[0] == p.rail.index]
            for t, res in mine_tests:
                part = explained_by(f, t, iso.bad)
                for r in res:
                    if not r.ok:
                        r.cause = f"isolation: {text}; {r.cause}" if r.cause else f"isolation: {text}"
                        if part is not None:
                            r.details["explained_by"] = part
        cr.fabrics.append(info)
        unseen = p.fabric.isl_links() - observed[p.rail.index] if f.roce else p.unroutable
        if f.roce and unseen:
            # never read on a counter (no switch access, a switch not read): the switch read or nothing
            blind = unseen - counted[p.rail.index]
            if blind:
                proof = link_proof or switchports.LinkProof(no_switch_access="no switch read")
                why = _why_unmeasured(counters, counter_error.get(p.rail.index))
                judged = proof(p.rail.name, p.rail.index, f, blind, why)
                cr.results.extend(judged)
                info["proven_by_switch_read"] = sorted(
                    d for r in judged if r.status == PASS for d in r.details.get("directions", ())
                )
                info["unproven"] = sorted(
                    d for r in judged if r.status != PASS for d in r.details.get("directions", ())
                )
            for d in sorted(unseen - blind, key=dirlink_str):  # read, and never moved
                cr.results.append(
                    CheckResult(
                        "pairs",
                        "coverage",
                        p.rail.name,
                        None,
                        FAIL,
                        f"rail {p.rail.name}: ISL {dirlink_str(d)} carried no traffic in "
                        f"{len(cr.round_wall_s)} rounds of cross-leaf tests",
                        cause="link down or out of the ECMP group (switch port counters did not move)",
                        details={"rail": p.rail.index, "link": dirlink_str(d)},
                    )
                )
        elif unseen:
            cr.results.append(
                CheckResult(
                    "pairs",
                    "coverage",
                    p.rail.name,
                    None,
                    SKIP,
                    f"rail {p.rail.name}: {len(unseen)} ISL directions carry no ftree route (a leaf with "
                    "more uplinks than hosts; no test can cross them; traffic does not use them either)",
                    details={"rail": p.rail.index, "links": sorted(dirlink_str(d) for d in unseen)},
                )
            )
    for key in sorted(by_test, key=lambda k: (k[0], k[1].src, k[1].dst)):
        cr.results.extend(by_test[key])
    for key in probes:
        cr.results.extend(probes[key])
    cr.wall_s = time.monotonic() - t_start
    return cr
