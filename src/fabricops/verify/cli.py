"""``fabricops verify``: host, GPU and pairwise checks against an Ansible inventory.

Exit status: 0 every check passed; 1 a check failed or could not run (fails closed); 2 bad input
(inventory unreadable, unknown profile).
"""

from __future__ import annotations

import sys
from pathlib import Path

from fabricops.verify.engine import ONLY, Options
from fabricops.verify.hostchecks import GPU_CHECKS, HOST_CHECKS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "verify",
        help="prove the fabric works: hosts, GPUs, and every pair of hosts per rail",
        description="Run the host and GPU checks on every host of the inventory, then ib_write_bw and "
        "ib_write_lat between every pair of hosts per rail in parallel rounds. Exit 0 only when every "
        "check passed; a check that could not run is a failure.",
    )
    p.add_argument("-i", "--inventory", help="Ansible inventory (default: ansible.cfg's)")
    p.add_argument(
        "--limit", default="gpu_hosts", help="host pattern or group to verify (default: gpu_hosts)"
    )
    p.add_argument("--profile", help="hardware profile (default: the inventory's fabricops_hardware_profile)")
    p.add_argument("--only", choices=ONLY, help="run only the host, GPU or pairwise checks")
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=[*HOST_CHECKS, *GPU_CHECKS],
        help="leave out a check (repeatable); also fabricops_verify_skip in the inventory",
    )
    p.add_argument("--ofed-version", help="pinned MLNX_OFED version (default: from the inventory)")
    p.add_argument("--junit", type=Path, metavar="FILE", help="write a JUnit XML report")
    p.add_argument("--json", type=Path, metavar="FILE", help="write a JSON report")
    p.add_argument(
        "--counters-baseline",
        type=Path,
        metavar="REPORT",
        help="judge error counters by their increase since this earlier --json report",
    )
    p.add_argument("--serial", action="store_true", help="pairwise tests one at a time (for comparison)")
    p.add_argument("--no-rerun", action="store_true", help="do not re-run failed pairs alone")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_verify)


def cmd_verify(args) -> int:
    from fabricops.verify import report
    from fabricops.verify.engine import verify
    from fabricops.verify.transport import Fabric

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"  .. {msg}", file=sys.stderr, flush=True)

    baseline = None
    if args.counters_baseline:
        import json

        from fabricops.verify.engine import baseline_from_report

        baseline = baseline_from_report(json.loads(args.counters_baseline.read_text()))
    fabric = Fabric(args.inventory, args.limit)
    hostvars = {h: fabric.hostvars(h) for h in fabric.hosts}
    opts = Options(
        only=args.only,
        profile=args.profile,
        ofed_version=args.ofed_version,
        skip=args.skip,
        serial=args.serial,
        rerun=not args.no_rerun,
        progress=progress,
        counter_baseline=baseline,
    )
    progress(f"verifying {len(fabric.hosts)} hosts: {', '.join(fabric.hosts)}")
    roce = next((hv.get("fabricops_roce") for hv in hostvars.values() if hv.get("fabricops_roce")), None)
    run = verify(
        fabric.run,
        fabric.hosts,
        hostvars,
        opts,
        fabric.switch_link_layers(),
        switch_reader=fabric.switch_reader(roce),
    )
    print(report.terminal(run), end="")
    if args.json:
        args.json.write_text(report.to_json(run))
    if args.junit:
        args.junit.write_text(report.to_junit(run))
    return 0 if run.ok else 1
