#!/usr/bin/env python3
"""Simulation (no lab): the coverage schedule and the isolator on synthetic two-tier fat trees.

    .venv/bin/python bench/coverage_sim.py [--trials N] [--seed S] [--sizes 256,1024,4096]

Fabric: 32 hosts per leaf, 32 spines, one link from each leaf to each spine (non-blocking 1:1),
InfiniBand D-mod-k routing with LIDs from 2 in host order (fabricops.model.fabric.fat_tree).

Per size it prints: directed cables; the lower bound on rounds (fabricops.verify.coverage.lower_bound);
the coverage schedule's rounds; all-pairs (circle method) N-1 rounds; and, for one injected bad
directed cable (random host link or ISL, ``--trials`` each), the extra rounds to name it: ours
(fabricops.verify.isolate, worst and mean), ClusterKit's halving (re-test failing pairs in halving
rounds, modelled as ceil(log2(#failing pairs)) + 1 after its N-1 all-pairs rounds) and log2(N)
bisection (NVIDIA Cluster Readiness Engine). A fault fails every test crossing it. The RoCE rows
hash every QP of a cross-leaf test (2 x n_up QPs) onto an uplink at random and count the rounds
until every ISL direction was seen on a counter (schedule + follow-ups; mean and worst).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time

from fabricops.model.fabric import fat_tree
from fabricops.verify.coverage import _cross_table, followup, lower_bound, schedule, unroutable
from fabricops.verify.isolate import isolate

HOSTS_PER_LEAF = 32
SPINES = 32


def failing_pairs(f, bad) -> int:
    """Host pairs (unordered) whose all-pairs test crosses ``bad`` (both directions are tested)."""
    k = f.kind(bad)
    if k.startswith("host"):
        return len(f.endpoints) - 1
    _cross, opts = _cross_table(f)
    return sum(len(f.on_leaf(leaf)) for leaf, _t in opts.get(bad, ()))


def isolation_trials(f, rounds, trials, rng):
    links = sorted(f.directed() - unroutable(f))
    hosts = [d for d in links if f.kind(d).startswith("host")]
    isls = [d for d in links if f.kind(d).startswith("isl")]
    tests = [t for r in rounds for t in r]
    paths = {t: set(f.path(t.src, t.dst)) for t in tests}
    ours, halving, exact = [], [], 0
    for i in range(trials):
        bad = rng.choice(hosts if i % 2 else isls)
        results = [(t, bad not in paths[t]) for t in tests]

        def oracle(batch, bad=bad):
            return {t: bad not in f.path(t.src, t.dst) for t in batch}

        iso = isolate(f, results, oracle)
        exact += iso.bad == [bad] and not iso.suspects
        ours.append(iso.rounds)
        halving.append(math.ceil(math.log2(max(2, failing_pairs(f, bad)))) + 1)
    return ours, halving, exact


def roce_trials(n, trials, rng):
    f = fat_tree(n, HOSTS_PER_LEAF, SPINES, 1, "Ethernet")
    first = schedule(f)
    counts = []
    for _ in range(trials):
        seen = set()
        rounds = 0
        plan = list(first)
        while plan and rounds < 50:
            rnd = plan.pop(0)
            rounds += 1
            for t in rnd:
                ls, ld = f.leaf_of(t.src), f.leaf_of(t.dst)
                if ls == ld:
                    continue
                ups = f.uplinks(ls)
                for _q in range(t.qps or 1):
                    up = ups[rng.randrange(len(ups))]
                    spine = up[1][0]
                    downs = f.downlinks(spine, ld)
                    seen.add(up)
                    seen.add(downs[rng.randrange(len(downs))])
            if not plan:
                plan = followup(f, f.isl_links() - seen, attempt=rounds)[:1]
        counts.append(rounds)
    return len(first), counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--trials", type=int, default=60, help="injected faults per size (default 60)")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--sizes", default="256,1024,4096")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t_all = time.monotonic()
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        t0 = time.monotonic()
        f = fat_tree(n, HOSTS_PER_LEAF, SPINES, 1)
        rounds = schedule(f)
        lb = lower_bound(f)
        ours, halving, exact = isolation_trials(f, rounds, args.trials, rng)
        roce_first, roce_counts = roce_trials(n, max(5, args.trials // 4), rng)
        rows.append(
            {
                "n": n,
                "leaves": len(f.leaves),
                "cables": len(f.directed()),
                "lb": lb,
                "rounds": len(rounds),
                "all_pairs": n - 1,
                "iso_worst": max(ours),
                "iso_mean": statistics.mean(ours),
                "exact": f"{exact}/{len(ours)}",
                "ck_worst": max(halving),
                "ck_mean": statistics.mean(halving),
                "bisect": math.ceil(math.log2(n)),
                "roce_first": roce_first,
                "roce_mean": statistics.mean(roce_counts),
                "roce_worst": max(roce_counts),
                "s": time.monotonic() - t0,
            }
        )
    head = (
        f"{'hosts':>6} {'leaves':>6} {'dir.cables':>10} {'lower bd':>8} {'coverage':>8} {'N-1':>5} | "
        f"{'isolate worst/mean':>18} {'named':>7} {'halving worst/mean':>18} {'log2N':>5} | "
        f"{'to name: ours':>13} {'ClusterKit':>10} | {'RoCE rounds (first/mean/worst)':>30} {'s':>5}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        roce = f"{r['roce_first']} / {r['roce_mean']:.2f} / {r['roce_worst']}"
        print(
            f"{r['n']:>6} {r['leaves']:>6} {r['cables']:>10} {r['lb']:>8} {r['rounds']:>8} "
            f"{r['all_pairs']:>5} | {r['iso_worst']:>9}/{r['iso_mean']:<8.2f} {r['exact']:>7} "
            f"{r['ck_worst']:>9}/{r['ck_mean']:<8.2f} {r['bisect']:>5} | "
            f"{r['rounds'] + r['iso_worst']:>13} {r['all_pairs'] + r['ck_worst']:>10} | "
            f"{roce:>30} {r['s']:>5.1f}"
        )
    print(f"\n{HOSTS_PER_LEAF} hosts per leaf, {SPINES} spines x 1 link per leaf (non-blocking); "
          f"{args.trials} injected faults per size (half host links, half ISLs); "
          f"total {time.monotonic() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
