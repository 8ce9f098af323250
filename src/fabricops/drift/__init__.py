"""``fabricops drift``: what moved away from the inventory's declared state, per host and switch.

Runs the playbooks (default ``site.yml`` without the verification phase) in check mode with diff
through ansible-runner, and reports each drifted task with its before -> after values as a terminal
summary, JSON and JUnit. Nothing is changed unless ``--fix`` is given: then the same playbook is
applied and checked again.

Exit status: 0 no drift; 2 drift found (after ``--fix``: drift remains); 1 the run itself failed
(failed or unreachable hosts are listed and never counted as "no drift").
"""

from __future__ import annotations

import sys
from pathlib import Path

from fabricops.drift import report as drift_report


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "drift",
        help="report what drifted from the declared state (check mode; --fix applies)",
        description="Run the playbooks in check mode with --diff through ansible-runner and report, per host "
        "and switch, every task that would change something (before -> after). Exit 0: no drift; 2: drift "
        "found; 1: the run failed (unreachable or failed hosts are listed, never counted as no drift).",
    )
    p.add_argument("-i", "--inventory", help="Ansible inventory (default: ansible.cfg's, the lab)")
    p.add_argument("--limit", "-l", help="host pattern (ansible-playbook --limit)")
    p.add_argument("--playbook", default="site.yml", help="playbook to check (default: site.yml)")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                   help="extra variables as for ansible-playbook -e (repeatable; the same as the converge)")
    p.add_argument("--tags", help="only these tags (ansible-playbook --tags)")
    p.add_argument("--skip-tags", default="verify",
                   help="tags to leave out (default: verify; '' for none)")
    p.add_argument("--fix", action="store_true", help="apply the playbook (not check mode), then check again")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the JSON report")
    p.add_argument("--junit", type=Path, metavar="FILE", help="write a JUnit XML report (one case per host)")
    p.add_argument("--artifacts", type=Path, metavar="DIR",
                   help="keep ansible-runner's private data directory (events, stdout) here")
    p.add_argument("-v", "--verbose", action="store_true", help="print ansible-playbook's output too")
    p.set_defaults(func=cmd_drift)


def _run(args, check: bool, artifacts: Path | None) -> drift_report.DriftReport:
    from fabricops.drift.runner import run_playbook

    skip = tuple(t for t in (args.skip_tags or "").split(",") if t)
    run = run_playbook(
        args.playbook, inventory=args.inventory, limit=args.limit, check=check, extra_vars=args.extra_vars,
        skip_tags=skip, tags=args.tags, keep_artifacts=artifacts, quiet=not args.verbose,
    )
    return drift_report.from_events(run.events, check_mode=check, status=run.status, rc=run.rc)


def cmd_drift(args) -> int:
    def artifacts(name: str) -> Path | None:
        return args.artifacts / name if args.artifacts else None

    rep = _run(args, check=True, artifacts=artifacts("check"))
    if args.fix and rep.run_ok and rep.items:
        print(drift_report.terminal(rep, "fabricops drift (before --fix)"), end="")
        applied = _run(args, check=False, artifacts=artifacts("fix"))
        print(drift_report.terminal(applied, "fabricops drift --fix"), end="")
        rep = applied if not applied.run_ok else _run(args, check=True, artifacts=artifacts("recheck"))
    elif args.fix and not rep.run_ok:
        print("fabricops drift: the check run failed; --fix applies nothing", file=sys.stderr)
    print(drift_report.terminal(rep), end="")
    if args.json:
        args.json.write_text(drift_report.to_json(rep))
    if args.junit:
        args.junit.write_text(drift_report.to_junit(rep))
    return rep.exit_status()
