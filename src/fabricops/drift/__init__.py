"""``fabricops drift``: what moved away from the inventory's declared state, per host and switch.

Runs the playbooks (default ``site.yml`` without the verification phase) in check mode with diff
through ansible-runner, and reports each drifted task with its before -> after values as a terminal
summary, JSON and JUnit. Nothing is changed unless ``--fix`` is given: then the same playbook is
applied and checked again.

Exit status (docs/cli.md): 0 no drift on every targeted host; 3 drift found (after ``--fix``: drift
remains); 4 could not run: the inventory is missing, broken or empty, the playbook targets no host,
or a host was not checked (unreachable, failed, never reached) and no drift was found elsewhere
(when drift was found elsewhere the status is 3 and the hosts not checked are listed). 2 usage.
"""

from __future__ import annotations

import sys

from fabricops import cliopts
from fabricops.drift import report as drift_report
from fabricops.errors import EXIT_NORUN, CouldNotRun


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "drift",
        help="report what drifted from the declared state (check mode; --fix applies)",
        description="Run the playbooks in check mode with --diff through ansible-runner and report, per host "
        "and switch, every task that would change something (before -> after). Exit 0: no drift on every "
        "targeted host; 3: drift found; 4: could not run (no/broken/empty inventory, no host, or a host not "
        "checked and no drift elsewhere); 2: usage error (docs/cli.md).",
    )
    cliopts.add_common(p, limit_default=None, limit_help="host pattern (ansible-playbook --limit)")
    p.add_argument("--playbook", default="site.yml", help="playbook to check (default: site.yml)")
    p.add_argument("--tags", help="only these tags (ansible-playbook --tags)")
    p.add_argument("--skip-tags", default="verify",
                   help="tags to leave out (default: verify; '' for none)")
    p.add_argument("--fix", action="store_true", help="apply the playbook (not check mode), then check again")
    p.add_argument("--artifacts", metavar="DIR",
                   help="keep ansible-runner's private data directory (events, stdout) here")
    p.set_defaults(func=cmd_drift)


def _skip(args) -> tuple[str, ...]:
    return tuple(t for t in (args.skip_tags or "").split(",") if t)


# A check run changes nothing, so the rolling rollout's batches and failure budget only cost time
# (one host at a time by default) and hide hosts: a failed host would end the run before the next
# batch was checked. Check runs take every host in one batch with no budget, and every switch in one
# batch (a failing switch ends the switch play either way: switches.yml has no failure budget); --fix
# applies with the inventory's own fabricops_serial, fabricops_max_fail_percentage and
# fabricops_switch_serial. These come before the user's -e, which wins (a later -e overrides an
# earlier one).
CHECK_EXTRA_VARS = (
    "fabricops_serial=100%",
    "fabricops_max_fail_percentage=100",
    "fabricops_switch_serial=100%",
)


def _run(args, check: bool, artifacts, targets, out, label: str) -> drift_report.DriftReport:
    from fabricops.drift.progress import DriftProgress
    from fabricops.drift.runner import run_playbook

    live = DriftProgress(out, check_mode=check, label=label)
    extra = [*(CHECK_EXTRA_VARS if check else ()), *(args.extra_vars or ())]
    run = run_playbook(
        args.playbook, inventory=args.inventory, limit=args.limit, check=check, extra_vars=extra,
        skip_tags=_skip(args), tags=args.tags, keep_artifacts=artifacts,
        quiet=not (args.verbose and not args.quiet), on_event=live,
    )
    out.done()
    return drift_report.from_events(run.events, check_mode=check, status=run.status, rc=run.rc,
                                    targets=targets)


def cmd_drift(args) -> int:
    from pathlib import Path

    from fabricops.drift.runner import list_hosts

    cliopts.check_inventory(args.inventory)
    cliopts.check_outputs(args)
    to_stdout = cliopts.json_to_stdout(args)
    out = cliopts.Progress(cliopts.progress_wanted(args))

    def summary(text: str) -> None:
        """The human summary: stdout, unless stdout carries JSON (then stderr, with -v only)."""
        if not to_stdout:
            sys.stdout.write(text)
        elif args.verbose and not args.quiet:
            sys.stderr.write(text)

    def artifacts(name: str):
        return Path(args.artifacts) / name if args.artifacts else None

    targets = list_hosts(args.playbook, inventory=args.inventory, limit=args.limit,
                         extra_vars=args.extra_vars, skip_tags=_skip(args), tags=args.tags)
    if not targets:
        where = args.inventory or "the ansible.cfg inventory"
        raise CouldNotRun(f"{args.playbook} targets no host of {where}"
                          + (f" with --limit {args.limit}" if args.limit else "")
                          + ": nothing to check (is the inventory empty, or the limit wrong?)")
    out.line(f"checking {len(targets)} hosts/switches: {', '.join(targets)}")
    rep = _run(args, True, artifacts("check"), targets, out, "check")
    if args.fix and rep.run_ok and rep.items:
        summary(drift_report.terminal(rep, "fabricops drift (before --fix)"))
        applied = _run(args, False, artifacts("fix"), targets, out, "fix")
        summary(drift_report.terminal(applied, "fabricops drift --fix"))
        if applied.run_ok:
            applied = _run(args, True, artifacts("recheck"), targets, out, "recheck")
        rep = applied
    elif args.fix and not rep.run_ok:
        print("fabricops drift: the check run did not complete on every host; --fix applies nothing",
              file=sys.stderr)
    summary(drift_report.terminal(rep))
    status = rep.exit_status()
    if status == EXIT_NORUN and not args.quiet:
        why = "; ".join(f"{h}: {w}" for h, w in list(rep.not_checked.items())[:3]) or "no host reported"
        print(f"fabricops drift: could not check every host ({why})", file=sys.stderr)
    if args.json:
        cliopts.write_output(args.json, drift_report.to_json(rep), "--json")
    if args.junit:
        cliopts.write_output(args.junit, drift_report.to_junit(rep), "--junit")
    return status
