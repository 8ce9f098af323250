"""``fabricops diagnose``: the subcommand (arguments, from the inventory or from evidence files,
reports); the work is done by collect, rules and report."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path

from fabricops import cliopts
from fabricops.diagnose.collect import (
    DiagnoseError,
    Raw,
    collect,
    load_evidence_dir,
    read_json,
    switch_states,
)
from fabricops.diagnose.report import exit_status, no_evidence, terminal, to_json, to_junit
from fabricops.diagnose.rules import Context, analyse, context_from_hostvars
from fabricops.errors import EXIT_NORUN, BadInput, CouldNotRun, FabricopsError, UsageError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "diagnose",
        help="collect fabric evidence from hosts and name the likely cause",
        description="Collect ibv_devinfo, ibstat, port counters, mlnx_qos, ethtool PFC counters, DCQCN, "
        "NVLink status, NCCL profile, IPoIB reachability and switch PFC/ECN state, and map them to the "
        "troubleshooting table (docs/troubleshooting.md). Exit 0: every host gave evidence, no finding; "
        "1: findings; 4: no evidence (no verdict); 5: malformed evidence; 2: usage error (docs/cli.md).",
    )
    p.add_argument(
        "hosts", nargs="*", metavar="HOST",
        help="deprecated: hosts to diagnose; use -l/--limit (default: every gpu_hosts host)",
    )
    cliopts.add_common(p, limit_default=None,
                       limit_help="host pattern or group to diagnose (default: gpu_hosts)")
    p.add_argument("--profile", help="hardware profile (default: the inventory's fabricops_hardware_profile)")
    p.add_argument("--no-switches", action="store_true", help="do not read the switches' PFC/ECN state")
    p.add_argument(
        "--from-evidence",
        type=Path,
        metavar="DIR",
        help="analyse evidence collected by playbooks/diagnose.yml (DIR/HOST.json, DIR/context.json)",
    )
    p.set_defaults(func=cmd_diagnose)


def context_from_file(path: Path, profile: str | None = None) -> Context:
    """context.json (written by playbooks/diagnose.yml): one sentence when it is malformed."""
    hostvars = read_json(path) if path.is_file() else {}
    if not isinstance(hostvars, Mapping):
        raise DiagnoseError(f"{path}: not a context object (expected the hosts' variables as a mapping)")
    try:
        ctx = context_from_hostvars(hostvars, profile)
        states = hostvars.get("switch_states") or {}
        if not isinstance(states, Mapping) or not all(isinstance(v, Mapping) for v in states.values()):
            raise TypeError("switch_states must map switch names to their state")
        for name, state in states.items():
            ctx.switches[str(name)] = dict(state)
    except DiagnoseError as exc:
        raise DiagnoseError(f"{path}: {exc}") from None
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise DiagnoseError(f"{path}: malformed context ({exc})") from None
    return ctx


def _load_evidence_dir(
    directory: Path, profile: str | None = None
) -> tuple[dict[str, Raw], Context, list[str]]:
    """``--from-evidence DIR``: the hosts' evidence and the context playbooks/diagnose.yml wrote."""
    evidence = load_evidence_dir(directory)
    ctx = context_from_file(directory / "context.json", profile)
    if not evidence:
        raise CouldNotRun(f"{directory}: no HOST.json evidence files: nothing to diagnose")
    return evidence, ctx, []


def _hosts_pattern(args) -> str:
    if args.hosts and args.limit:
        raise UsageError("give the hosts either with -l/--limit or as arguments (deprecated), not both")
    if args.hosts:
        print("fabricops diagnose: HOST arguments are deprecated; use -l/--limit "
              f"{':'.join(args.hosts)}", file=sys.stderr)
        return ":".join(args.hosts)
    return args.limit or "gpu_hosts"


def cmd_diagnose(args) -> int:
    from fabricops.verify.cli import check_profile

    cliopts.check_outputs(args)
    check_profile(args.profile)
    pattern = _hosts_pattern(args)
    extra = cliopts.extra_vars(args.extra_vars)
    out = cliopts.Progress(cliopts.progress_wanted(args))

    if args.from_evidence:
        evidence, ctx, notes = _load_evidence_dir(args.from_evidence, args.profile)
        hosts = sorted(evidence)
    else:
        from fabricops.verify.transport import Fabric

        parsed = cliopts.read_inventory(args.inventory)
        try:
            fabric = Fabric(args.inventory, pattern, parsed=parsed)
        except FabricopsError as exc:
            raise CouldNotRun(str(exc)) from None
        hosts = list(fabric.hosts)
        hostvars = {**fabric.hostvars(hosts[0]), **extra}
        try:
            ctx = context_from_hostvars(hostvars, args.profile)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            raise BadInput(f"malformed fabricops_roce or fabricops_cabling ({exc})") from None
        notes = []
        started = time.monotonic()
        out.line(f"collecting evidence from {len(hosts)} hosts: {', '.join(hosts)}")
        evidence = collect(fabric.run, hosts, out.line)
        if not args.no_switches and ctx.cabling:
            ctx.switches, notes = switch_states(fabric, ctx.cabling, hosts, ctx.lossless_priority)
        out.line(f"collected in {time.monotonic() - started:.1f} s")
        out.done()
    missing = no_evidence(evidence)
    findings = analyse(evidence, ctx)
    status = exit_status(findings, hosts, missing)
    text = terminal(findings, hosts, notes, missing)
    if status == EXIT_NORUN and not args.quiet:
        print(f"fabricops diagnose: no verdict: no evidence from {', '.join(missing) or 'any host'}",
              file=sys.stderr)
    cliopts.emit_report(args, text, lambda: to_json(findings, hosts, notes, missing),
                        lambda: to_junit(findings, hosts, missing))
    return status
