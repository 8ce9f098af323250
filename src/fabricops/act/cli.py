"""``fabricops act``: drain, resume and quarantine from a verify report, within safety rails.

Dry run by default: prints each action it would take, one line each, with its evidence (for a port
quarantine, the exact switch commands, after reading the port's state); nothing changes.
``--execute`` acts: ``scontrol update`` on the Slurm controller (the inventory's ``slurm_controller``
host over SSH, or this machine with ``--slurm-local``), and a port quarantine shuts the switch port
through the switch platforms (:mod:`fabricops.act.quarantine`; Onyx and Cumulus switches of the
inventory).

Exit status: 0 nothing to do, or every action done (dry run: none would be refused); 1 an action
needed was refused by a rail (a rail cap or a partition's fraction refuses the whole run), or failed
(a switch not reachable, a command refused), or (with --execute) a port quarantine act cannot
perform remains to be done by hand (an InfiniBand switch); 4 could not run (a stale report or
one with no verdict, Slurm not reachable, no controller, an action log that cannot be read); 5
invalid input (a report that is not JSON, an action table with an unknown check or action, a Slurm
node name that is not one); 2 usage error.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fabricops import cliopts
from fabricops.act import plan as pl
from fabricops.act.quarantine import Quarantine, SwitchPorts
from fabricops.act.slurm import Runner, Slurm, local_runner, ssh_runner
from fabricops.act.state import EXECUTED, ActionLog, state_dir
from fabricops.act.table import DRAIN, MONITOR, QUARANTINE, load_table
from fabricops.act.verdict import Verdict, iso, parse_duration, read_report
from fabricops.errors import BadInput, CouldNotRun, FabricopsError, UsageError

SCHEMA = "fabricops.act/1"
DEFAULTS = pl.Rails()


def _now() -> datetime:
    """Now, UTC; tests pin it."""
    return datetime.now(UTC)


def register(subparsers) -> None:
    d = DEFAULTS
    p = subparsers.add_parser(
        "act",
        help="drain / resume Slurm nodes and quarantine switch ports from a verify report "
        "(dry run by default)",
        description="Map each failing result of a verify --json report through the action table to an "
        "action: drain the host's node in Slurm (reason 'fabricops: <check> <component>'), quarantine a "
        "switch port or cable (shut it on its Onyx or Cumulus switch; its hosts stay in service unless it "
        "is their only path), or monitor. Resumes only nodes fabricops drained whose hosts a newer "
        "report passes; never touches a node drained or down for another reason. Dry run unless "
        "--execute. Exit 0 nothing to do or all done; 1 refused by a rail or failed; 4 could not run "
        "(stale report, Slurm not reachable, no controller); 5 invalid input; 2 usage error (docs/act.md).",
    )
    p.add_argument("report", metavar="REPORT", help="a fabricops verify --json report")
    p.add_argument(
        "-i",
        "--inventory",
        help="Ansible inventory (default: ansible.cfg's): the slurm_controller "
        "group, slurm_node_name host variables, and the switches (access, fabricops_cabling)",
    )
    p.add_argument(
        "--actions", metavar="FILE", help="an action table (YAML) tried before the shipped one (docs/act.md)"
    )
    p.add_argument("--execute", action="store_true", help="act (default: dry run, nothing changes)")
    p.add_argument(
        "--slurm-local",
        action="store_true",
        help="run scontrol on this machine (a Slurm login node) instead of the slurm_controller host",
    )
    p.add_argument(
        "--max-age",
        metavar="DURATION",
        help="how old the report may be (30m, 2h); required for a report without valid_until",
    )
    p.add_argument(
        "--max-drain-per-run",
        type=int,
        default=d.max_per_run,
        metavar="N",
        help=f"nodes drained by one run at most (default {d.max_per_run})",
    )
    p.add_argument(
        "--max-drain-per-hour",
        type=int,
        default=d.max_per_hour,
        metavar="N",
        help=f"nodes drained in any rolling hour at most, counted from the action log "
        f"(default {d.max_per_hour})",
    )
    p.add_argument(
        "--cooldown",
        default="30m",
        metavar="DURATION",
        help="no drain or resume of a node fabricops acted on this recently (default 30m)",
    )
    p.add_argument(
        "--max-quarantine-per-run",
        type=int,
        default=d.max_ports_per_run,
        metavar="N",
        help=f"switch ports shut by one run at most; a port already down does not count "
        f"(default {d.max_ports_per_run})",
    )
    p.add_argument(
        "--allow",
        metavar="REGEX",
        help="only nodes whose whole name matches, and only ports whose hosts' nodes all match "
        "(no inter-switch cable) (default: all)",
    )
    p.add_argument(
        "--max-partition-fraction",
        type=float,
        default=d.partition_fraction,
        metavar="F",
        help=f"refuse the whole run when more than this fraction of a partition's nodes would be "
        f"drained or down, those already so counted (default {d.partition_fraction:g})",
    )
    p.add_argument(
        "--max-rail-hosts",
        type=int,
        default=d.max_rail_hosts,
        metavar="N",
        help=f"refuse the whole run when more than N hosts fail on one rail (default "
        f"{d.max_rail_hosts}): a fabric-wide fault is not N node faults",
    )
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where the action log act.log is kept (default $XDG_STATE_HOME/fabricops)",
    )
    p.add_argument(
        "--json", metavar="FILE", help="write the plan and its outcome as JSON to FILE ('-': stdout)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no action lines on stdout")
    p.set_defaults(func=cmd_act)


def rails_from(args: Any) -> pl.Rails:
    for flag, value in (
        ("--max-drain-per-run", args.max_drain_per_run),
        ("--max-drain-per-hour", args.max_drain_per_hour),
        ("--max-rail-hosts", args.max_rail_hosts),
        ("--max-quarantine-per-run", args.max_quarantine_per_run),
    ):
        if value < 0:
            raise UsageError(f"{flag} {value}: give 0 or more")
    if not 0 <= args.max_partition_fraction <= 1:
        raise UsageError(
            f"--max-partition-fraction {args.max_partition_fraction:g}: give a fraction from 0 to 1"
        )
    if args.allow is not None:
        try:
            re.compile(args.allow)
        except re.error as exc:
            raise UsageError(f"--allow {args.allow!r}: not a regular expression ({exc})") from None
    return pl.Rails(
        args.max_drain_per_run,
        args.max_drain_per_hour,
        parse_duration(args.cooldown, "--cooldown"),
        args.allow,
        args.max_partition_fraction,
        args.max_rail_hosts,
        args.max_quarantine_per_run,
    )


def read_table(path: str | None):
    if not path:
        return load_table()
    raw = cliopts.read_input(path, f"--actions {path}", cliopts.MAX_VARS_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"--actions {path}: not a UTF-8 YAML file") from None
    return load_table(text, f"--actions {path}")


def inventory_access(args: Any) -> tuple[Callable[[str], str], Runner, str]:
    """(host -> Slurm node name, the runner of Slurm's commands, where they run) from the inventory."""
    from fabricops.verify.transport import Fabric

    parsed = cliopts.read_inventory(args.inventory)
    try:
        fabric = Fabric(args.inventory, "all", parsed=parsed)
    except FabricopsError as exc:
        raise CouldNotRun(str(exc)) from None

    def node_of(host: str) -> str:
        name = fabric.inventory_vars(host).get("slurm_node_name")
        return str(name) if name is not None else host

    if args.slurm_local:
        return node_of, local_runner, "this machine (--slurm-local)"
    try:
        controllers = list(fabric.runner.get_hosts("slurm_controller"))
    except Exception:
        controllers = []
    if not controllers:
        raise CouldNotRun(
            "no Slurm controller: the inventory has no host in group slurm_controller; add it, "
            "or run act on a Slurm login node with --slurm-local; nothing acted on"
        )
    return node_of, ssh_runner(fabric.run, controllers[0]), f"the controller {controllers[0]}"


def switch_access(args: Any) -> SwitchPorts:
    """The inventory's switches for port quarantines: their variables, read when a quarantine first
    needs one (a run without quarantines reads no switch)."""
    fabrics: list[Any] = []

    def hostvars(name: str) -> dict[str, Any]:
        if not fabrics:
            from fabricops.verify.transport import Fabric

            fabrics.append(Fabric(args.inventory, "all"))
        return fabrics[0].inventory_vars(name)

    return SwitchPorts(hostvars)


def cmd_act(args: Any) -> int:
    now = _now()
    rails = rails_from(args)
    max_age = parse_duration(args.max_age, "--max-age") if args.max_age else None
    if args.json:
        cliopts.check_writable(args.json, "--json")
    table = read_table(args.actions)
    verdict = read_report(args.report, now, max_age)
    log = ActionLog(state_dir(args.state_dir))
    node_of, runner, where = inventory_access(args)
    return act(
        verdict,
        table,
        Slurm(runner, where),
        node_of,
        log,
        now,
        rails,
        execute=args.execute,
        quiet=args.quiet,
        json_dest=args.json,
        switches=switch_access(args),
    )


def act(
    verdict: Verdict,
    table,
    slurm: Slurm,
    node_of: Callable[[str], str],
    log: ActionLog,
    now: datetime,
    rails: pl.Rails = DEFAULTS,
    *,
    execute: bool = False,
    quiet: bool = False,
    json_dest: str | None = None,
    out=None,
    switches: SwitchPorts | None = None,
) -> int:
    """Plan, act when ``execute``, log every action, print one line per action; the exit status.

    ``switches``: the inventory's switches, for port quarantines (None: no switch access; a quarantine
    is named only, and with ``execute`` left to be done by hand)."""
    out = out or sys.stdout
    records = log.records()
    nodes = slurm.nodes()
    p = pl.plan(verdict, table, nodes, node_of, records, now, rails)
    p.executed = execute
    mode = "executed" if execute else "dry-run"
    ports = Quarantine(switches, rails, nodes, node_of, execute=execute) if switches is not None else None
    entries = []
    for a in p.actions:
        if a.kind not in (DRAIN, pl.RESUME, QUARANTINE) or a.status == pl.SKIPPED:
            continue
        if a.kind == QUARANTINE and a.status == pl.PLANNED:
            # after the drains (the plan's order): a host whose only path this is is out of service first
            if ports is not None:
                ports.run(a, p)
            elif execute:
                a.status = pl.NOT_AUTOMATED
                a.why = pl._join(a.why, "no switch access given: quarantine it on the switch by hand")
            if a.status == pl.SKIPPED:
                continue
        if execute and a.status == pl.PLANNED and a.kind != QUARANTINE:
            ok, why = slurm.update(list(a.argv or []))
            a.status, a.why = (pl.DONE, a.why) if ok else (pl.FAILED, pl._join(a.why, f"scontrol: {why}"))
        if execute and a.status in (pl.DONE, pl.FAILED, pl.NOT_AUTOMATED):
            log_mode = {pl.DONE: EXECUTED, pl.FAILED: "failed", pl.NOT_AUTOMATED: "not-automated"}[a.status]
            log.append([_entry(a, verdict, log_mode, now)])
            continue
        modes = {pl.REFUSED: "refused", pl.FAILED: "failed", pl.NOT_AUTOMATED: "not-automated"}
        entries.append(_entry(a, verdict, modes.get(a.status, mode), now))
    log.append(entries)
    status = p.exit_status
    if not quiet and json_dest != cliopts.STDOUT:
        out.write(render(p, verdict, execute, status))
    if p.refusal:
        print(f"fabricops act: {p.refusal}", file=sys.stderr)
    if json_dest:
        cliopts.write_output(json_dest, to_json(p, verdict, execute, status), "--json")
    return status


def _entry(a: pl.Action, v: Verdict, mode: str, t: datetime) -> dict[str, Any]:
    port = (
        {
            "switch": a.switch,
            "switch_port": a.switch_port,
            "previous_admin": a.previous_admin,
            "commands": list(a.commands),
            "release": list(a.release),
        }
        if a.kind == QUARANTINE
        else {}
    )
    return {
        "time": iso(t),
        "action": a.kind,
        "node": a.node,
        "host": a.host,
        "port": a.target if a.kind == QUARANTINE else None,
        "mode": mode,
        "outcome": a.status,
        "why": a.why,
        "reason": a.reason,
        "evidence": a.evidence,
        "report": v.path,
        "report_generated_at": iso(v.generated_at),
        **port,
    }


_VERB = {DRAIN: "DRAIN", pl.RESUME: "RESUME", QUARANTINE: "QUARANTINE", MONITOR: "MONITOR"}


def _port_phrase(a: pl.Action) -> str | None:
    """A quarantine's own words: the commands it sends (would send) and how to release it."""
    where = f"{a.switch} {a.switch_port}"
    if a.status == pl.PLANNED:
        if not a.commands:
            return "would quarantine (named only: no switch access)"
        return f"would quarantine {where}: would send {'; '.join(a.commands)}"
    if a.status == pl.DONE:
        sent, release = "; ".join(a.commands), "; ".join(a.release)
        return f"quarantined {where} (was admin {a.previous_admin}): sent {sent}; release: {release}"
    if a.status == pl.NOT_AUTOMATED:
        return "NOT DONE by act"
    return None


def _phrase(a: pl.Action, execute: bool) -> str:
    what = {DRAIN: "drain", pl.RESUME: "resume", QUARANTINE: "quarantine"}.get(a.kind, "")
    reason = f' (reason "{a.reason}")' if a.kind == DRAIN and a.reason else ""
    if a.kind == MONITOR:
        return "monitor only"
    if a.kind == QUARANTINE and (own := _port_phrase(a)) is not None:
        return own
    return {
        pl.PLANNED: f"would {what}{reason}",
        pl.DONE: {DRAIN: "drained", pl.RESUME: "resumed"}.get(a.kind, "done") + reason,
        pl.FAILED: f"{what} FAILED",
        pl.REFUSED: f"{what} REFUSED",
        pl.SKIPPED: "nothing to do",
        pl.NOT_AUTOMATED: "NOT DONE: do it by hand",
    }[a.status]


def _evidence_text(a: pl.Action) -> str:
    if not a.evidence:
        return ""
    e = a.evidence[0]
    more = f" (+{len(a.evidence) - 1} more)" if len(a.evidence) > 1 else ""
    return f" -- [{e.get('category')}/{e.get('check')}] {e.get('message')}{more}"


def render(p: pl.Plan, v: Verdict, execute: bool, status: int) -> str:
    valid = f", valid until {iso(v.valid_until)}" if v.valid_until else ""
    head = "executing" if execute else "dry run (nothing changes; --execute to act)"
    lines = [
        f"fabricops act: {head}: report {v.path} generated {iso(v.generated_at)}"
        f"{' (file mtime)' if v.generated_from != 'report' else ''}{valid}"
    ]
    for a in p.actions:
        why = f": {a.why}" if a.why else ""
        lines.append(
            f"{_VERB.get(a.kind, a.kind.upper()):<10} {a.target}  {_phrase(a, execute)}{why}"
            f"{_evidence_text(a)}"
        )
    if p.refusal:
        lines.append(f"REFUSED    {p.refusal}")
    count = {
        k: len([a for a in p.actions if a.kind == k and a.status not in (pl.SKIPPED,)])
        for k in (DRAIN, pl.RESUME, QUARANTINE, MONITOR)
    }
    refused = len([a for a in p.actions if a.status == pl.REFUSED])
    if not any(count.values()) and not p.refusal:
        lines.append("nothing to do")
    lines.append(
        f"{count[DRAIN]} drain, {count[pl.RESUME]} resume, {count[QUARANTINE]} quarantine, "
        f"{count[MONITOR]} monitor; {refused} refused; exit {status}"
    )
    return "\n".join(lines) + "\n"


def to_json(p: pl.Plan, v: Verdict, execute: bool, status: int) -> str:
    doc = {
        "schema": SCHEMA,
        "execute": execute,
        "exit_status": status,
        "refused": p.refusal,
        "report": {
            "path": v.path,
            "generated_at": iso(v.generated_at),
            "valid_until": iso(v.valid_until) if v.valid_until else None,
        },
        "actions": [a.to_data() for a in p.actions],
    }
    return json.dumps(doc, indent=2, default=str) + "\n"


__all__ = ["act", "cmd_act", "register"]
