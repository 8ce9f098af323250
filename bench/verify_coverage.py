#!/usr/bin/env python3
"""Coverage schedule vs all pairs on the running lab (issue 18): rounds, wall time, solo re-runs,
cables covered; then one injected bad inter-switch link, and how many extra rounds name it.

    fabricops lab up --topology two-tier --hosts 16      # or 32; OFED and RoCE configured, see below
    .venv/bin/python bench/verify_coverage.py [--isl ib-leaf2 33] [--skip-all-pairs]

The lab must be converged first (MLNX_OFED on the hosts; playbooks/roce_host.yml and
playbooks/switches.yml for a lossless RoCE fabric). Every figure is read from `fabricops verify
--json`; nothing is timed inside a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FABRICOPS = str(Path(sys.executable).with_name("fabricops"))


def verify(*args: str) -> tuple[int, dict, float]:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "v.json"
        t0 = time.monotonic()
        p = subprocess.run([FABRICOPS, "verify", "-q", "--only", "pairs", "--json", str(out), *args],
                           capture_output=True, text=True, timeout=3600)
        wall = time.monotonic() - t0
        if not out.exists():
            sys.exit(f"verify wrote no report (exit {p.returncode}): {(p.stdout + p.stderr)[-400:]}")
        return p.returncode, json.loads(out.read_text()), wall


def fault(*args: str) -> None:
    subprocess.run([FABRICOPS, "lab", "fault", *args], check=True, capture_output=True, timeout=120)


def row(label: str, rc: int, data: dict, wall: float) -> None:
    p = data.get("pairs") or {}
    bad = [r for r in data["results"] if r["status"] not in ("pass", "skip")]
    cov = f"{p['links_covered']}/{p['links_total']}" if "links_total" in p else "-"
    print(f"{label:<28} exit {rc}  rounds {p.get('rounds', '-'):>3}  "
          f"lower bound {p.get('lower_bound', '-'):>2}  "
          f"isolation rounds {p.get('isolation_rounds', '-'):>2}  solo re-runs {p.get('reruns', '-'):>3}  "
          f"links {cov:>7}  {wall:6.1f} s  not passed {len(bad)}")
    for f in p.get("findings") or []:
        print(f"{'':<28} named: {f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--isl", nargs=2, metavar=("SWITCH", "PORT"), default=["ib-leaf2", "33"],
                    help="the inter-switch link end to degrade (port-width 2X)")
    ap.add_argument("--skip-all-pairs", action="store_true")
    args = ap.parse_args()
    lab = json.loads(Path("/var/lib/fabricops-lab/lab.json").read_text())
    topo = lab["topology"]
    leaves = [s["name"] for s in topo["switches"] if s.get("tier", "leaf") == "leaf"]
    print(f"lab: {len(topo['hosts'])} hosts, {len(leaves)} leaves, "
          f"{len(topo['switches']) - len(leaves)} spines, {len(topo.get('links', []))} ISLs")
    row("coverage, healthy", *verify())
    if not args.skip_all_pairs:
        row("all pairs, healthy", *verify("--all-pairs"))
    fault(args.isl[0], "port-width", args.isl[1], "2X")
    try:
        row(f"coverage, {args.isl[0]} {args.isl[1]} at 2X", *verify())
        if not args.skip_all_pairs:
            row(f"all pairs, {args.isl[0]} {args.isl[1]} at 2X", *verify("--all-pairs"))
    finally:
        fault("clear")
    return 0


if __name__ == "__main__":
    sys.exit(main())
