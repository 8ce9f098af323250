#!/usr/bin/env python3
"""Wall time of the pairwise phase on the running lab: circle-method rounds vs one pair at a time,
over every cabled rail (InfiniBand and RoCE, planned as `fabricops verify` plans them).

    EMUL_PERFTEST_SECONDS=0.5 .venv/bin/python bench/verify_pairs.py [-i INVENTORY] [--limit gpu_hosts]

EMUL_PERFTEST_SECONDS is passed to the emulated perftest on the hosts (fabricops_verify_perftest.env).
For 8/16/32 hosts bring a lab up with `fabricops lab up --hosts N` first (this script does not):
it prints what each size would need.
"""

from __future__ import annotations

import argparse
import os
import sys

from fabricops.model.schedule import pair_count, round_count
from fabricops.verify import hostchecks, pairs
from fabricops.verify.engine import plan_rails
from fabricops.verify.expect import host_expect
from fabricops.verify.transport import Fabric


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-i", "--inventory")
    ap.add_argument("--limit", default="gpu_hosts")
    args = ap.parse_args()
    secs = float(os.environ.get("EMUL_PERFTEST_SECONDS", "1.0"))
    fabric = Fabric(args.inventory, args.limit)
    exps = {
        h: host_expect(h, fabric.hostvars(h), switch_link_layers=fabric.switch_link_layers())
        for h in fabric.hosts
    }
    first = next(iter(exps.values()))
    opts = dict(first.perftest, env={"EMUL_PERFTEST_SECONDS": secs})
    raws = {
        h: {
            k: dict(fabric.run(h, c, 60))
            for k, c in {"ibstat": "ibstat", **hostchecks.pair_commands(e)}.items()
        }
        for h, e in exps.items()
    }
    rails, errors = plan_rails(exps, raws)
    for e in errors:
        print(f"planning: {e.message}")
    addr = {h: str(e.address) for h, e in exps.items()}
    n, nr = len(exps), len(rails)
    print(
        f"{n} hosts, {nr} rails ({', '.join(f'{r.name} {r.link_layer}' for r in rails)}), "
        f"EMUL_PERFTEST_SECONDS={secs}"
    )
    out = {}
    for mode in ("rounds", "serial"):
        pr = pairs.run_pairs(
            fabric.run,
            list(exps),
            rails,
            addr,
            first.profile,
            first.rate_gbps,
            opts,
            serial=mode == "serial",
            rerun=False,
        )
        failed = sum(1 for r in pr.results if not r.ok)
        out[mode] = pr.wall_s
        print(
            f"{mode:>7}: {pr.wall_s:7.1f} s  ({pr.rounds} rounds, {len(pr.results)} results, {failed} failed)"
        )
    print(f"speed-up: {out['serial'] / out['rounds']:.1f}x")
    print(
        "\nlarger labs (not started here): per size, rounds vs pair runs, and the estimate at this run time"
    )
    per_test = 2 * secs + 0.5  # bw + lat, plus SSH and connect
    for size in (8, 16, 32):
        print(
            f"  {size:>2} hosts: {round_count(size)} rounds vs {pair_count(size)} pairs one at a time "
            f"(~{round_count(size) * per_test:.0f} s vs ~{pair_count(size) * nr * per_test:.0f} s); "
            f"needs `fabricops lab up --hosts {size}`"
            + (" and fs.inotify.max_user_instances=256" if size > 16 else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
