"""From a verify report to the actions on Slurm and on ports, within the safety rails (pure).

:func:`findings` maps each failing result through the action table to a target: a node to drain
(the host's; for a failed pair test, the host isolation named or the report blames), a port or
cable to quarantine, or a line to monitor. A consequence (``caused_by``) maps to nothing; a test
explained by a cable is the cable's, never the hosts' at its ends.

**Only path.** A quarantined port whose other end is a host's port (a switch port of a host cable;
an HCA port the table sends to quarantine) leaves that host in service when the report shows the
host another healthy port on the same fabric: a port of the host on another rail of the same link
layer (``pairs.rails``) or with an ``hca_port`` result, that no failing result names and that is
not itself quarantined. Otherwise the port is the host's only path to that fabric and the host's
node is drained too (the quarantine records it: ``only_path``; the port is shut only once that host
is out of service, :mod:`fabricops.act.quarantine`). An inter-switch cable never drains a host.

:func:`plan` then reads Slurm's view: a node absent from Slurm is reported, not acted on; a node
drained or down with any reason not starting ``fabricops:`` is never touched; a node fabricops
drained is resumed only when this report passes its host and was generated after the drain the
action log records. The rails (:class:`Rails`) refuse what is too much; a rail cap or a
partition's fraction refuses the whole run (nothing at all is done). The allow-list applies to a
quarantine through the hosts at its ends; the per-run cap on ports is applied when the switches are
read (:mod:`fabricops.act.quarantine`: a port already shut does not count).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from fabricops.act import slurm as sl
from fabricops.act.state import EXECUTED, Record
from fabricops.act.table import DRAIN, MONITOR, NONE, QUARANTINE, Table, facts_of, kind_of
from fabricops.act.verdict import Verdict, iso

RESUME = "resume"
PLANNED, REFUSED, SKIPPED, DONE, FAILED, NOT_AUTOMATED = (
    "planned",
    "refused",
    "skipped",
    "done",
    "failed",
    "not_automated",
)


@dataclass(frozen=True)
class Rails:
    """The safety rails; defaults stated in ``fabricops act --help`` and docs/act.md."""

    max_per_run: int = 2  #: nodes drained by one run
    max_per_hour: int = 3  #: nodes drained in any rolling hour (executed drains of the action log)
    cooldown: timedelta = timedelta(minutes=30)  #: since fabricops last drained or resumed the node
    allow: str | None = None  #: a regular expression the whole node name must match (None: all)
    partition_fraction: float = 0.25  #: at most this fraction of a partition drained or down
    max_rail_hosts: int = 2  #: failing hosts on one rail above this: a rail fault, not node faults
    max_ports_per_run: int = 2  #: switch ports shut by one run (fabricops.act.quarantine)


@dataclass
class Action:
    kind: str  #: drain | resume | quarantine_port | monitor
    target: str  #: node, port or result name
    host: str | None = None
    node: str | None = None
    reason: str | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)
    status: str = PLANNED
    why: str = ""
    rails: set[str] = field(default_factory=set)  #: the rails (HCA port names) its evidence is on
    ends: list[tuple[str, str]] = field(default_factory=list)  #: a quarantined port's host ends
    argv: list[str] | None = None
    # a quarantine: the part named (switch_port | cable | hca_port), the hosts whose only path it is,
    # and what fabricops.act.quarantine found and sent
    part: str | None = None
    only_path: list[str] = field(default_factory=list)
    switch: str | None = None
    switch_port: str | None = None
    previous_admin: str | None = None  #: the port's admin state before this run ("up" | "down")
    commands: list[str] = field(default_factory=list)  #: sent (or, in a dry run, that would be)
    release: list[str] = field(default_factory=list)  #: the commands that undo the quarantine

    def to_data(self) -> dict[str, Any]:
        return {
            "action": self.kind,
            "target": self.target,
            "host": self.host,
            "node": self.node,
            "reason": self.reason,
            "status": self.status,
            "why": self.why,
            "argv": self.argv,
            "evidence": self.evidence,
            **(
                {
                    "switch": self.switch,
                    "switch_port": self.switch_port,
                    "previous_admin": self.previous_admin,
                    "commands": list(self.commands),
                    "release": list(self.release),
                }
                if self.kind == QUARANTINE
                else {}
            ),
        }


@dataclass
class Plan:
    actions: list[Action]
    refusal: str | None = None
    executed: bool = False

    def of(self, kind: str, status: str | None = None) -> list[Action]:
        return [a for a in self.actions if a.kind == kind and (status is None or a.status == status)]

    @property
    def exit_status(self) -> int:
        """0 nothing to do or all done (dry run: nothing would be refused); 1 refused or failed (or,
        with --execute, a port quarantine that act cannot perform: left to be done by hand)."""
        if self.refusal:
            return 1
        bad = {REFUSED, FAILED} | ({NOT_AUTOMATED} if self.executed else set())
        return 1 if any(a.status in bad for a in self.actions) else 0


# --- results -> findings ---------------------------------------------------------------------------


def _component_text(r: Mapping[str, Any]) -> str:
    return " ".join(str(x) for x in (r.get("host"), r.get("device")) if x)


def _evidence(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "category": r.get("category"),
        "check": r.get("check"),
        "component": _component_text(r),
        "message": " ".join(str(r.get("message") or "").split())[:500],
    }


def _explained(r: Mapping[str, Any]) -> dict[str, Any] | None:
    d = r.get("details") if isinstance(r.get("details"), dict) else {}
    part = d.get("explained_by")
    return part if isinstance(part, dict) and part.get("kind") else None


def _rail_names(v: Verdict) -> dict[int, dict[str, Any]]:
    pairs = v.data.get("pairs") if isinstance(v.data.get("pairs"), dict) else {}
    out = {}
    for rail in pairs.get("rails") or []:
        if isinstance(rail, dict) and isinstance(rail.get("index"), int):
            out[rail["index"]] = rail
    return out


def _blamed(v: Verdict) -> set[tuple[str, int]]:
    out = set()
    for b in v.data.get("blamed") or []:
        if isinstance(b, dict) and isinstance(b.get("host"), str) and isinstance(b.get("rail"), int):
            out.add((b["host"], b["rail"]))
    return out


@dataclass
class _Target:
    """A failing result resolved: the hosts to drain and the port to quarantine, with why."""

    action: str
    hosts: list[tuple[str, str | None]] = field(default_factory=list)  #: (host, its port or None)
    port: str | None = None  #: the port or cable to quarantine
    port_ends: list[tuple[str, str]] = field(default_factory=list)  #: host ends of that port
    note: str = ""


def _resolve(r: Mapping[str, Any], action: str, v: Verdict) -> _Target:
    kind = kind_of(r)
    d = r.get("details") if isinstance(r.get("details"), dict) else {}
    part = _explained(r)
    host = str(r.get("host") or "")
    device = r.get("device")
    if kind == "cable":
        name = (part or {}).get("name") if part and part.get("kind") == "cable" else None
        name = name or (f"ISL {d['link']}" if d.get("link") else _component_text(r))
        # a cable blames the cable: a drain asked for it quarantines the cable instead
        return _Target(QUARANTINE if action in (DRAIN, QUARANTINE) else action, port=str(name))
    if kind == "switch_port":
        peer = str(d.get("peer") or "").split()
        ends = [(peer[0], peer[1])] if len(peer) == 2 else []
        if action == QUARANTINE:
            return _Target(QUARANTINE, port=f"{host} {device}", port_ends=ends)
        if action == DRAIN:
            return (
                _Target(DRAIN, hosts=[(h, p) for h, p in ends])
                if ends
                else _Target(MONITOR, note="no host at this switch port's end in the report")
            )
        return _Target(action)
    if part and part.get("kind") == "hca_port" and isinstance(part.get("host"), str):
        host, device = part["host"], part.get("device")
    elif kind == "pair":
        if action not in (DRAIN, QUARANTINE):
            return _Target(action)
        rail = d.get("rail")
        ends = [x for x in (d.get("client"), d.get("server")) if isinstance(x, str)]
        blamed = _blamed(v)
        hosts = [h for h in ends if isinstance(rail, int) and (h, rail) in blamed]
        if not hosts:
            return _Target(MONITOR, note="no host blamed for it (a failure of this pair only)")
        dev = (_rail_names(v).get(rail) or {}).get("name") if isinstance(rail, int) else None
        return _Target(DRAIN, hosts=[(h, dev) for h in hosts])
    if kind in ("fabric", "switch"):
        return _Target(
            MONITOR if action != NONE else NONE,
            note="" if action in (MONITOR, NONE) else f"a {kind} result is not one node's fault",
        )
    if action == QUARANTINE:
        if kind == "hca_port" and device:
            return _Target(QUARANTINE, port=f"{host} {device}", port_ends=[(host, str(device))])
        return _Target(MONITOR, note=f"no port to quarantine for a {kind} result")
    if action == DRAIN:
        return _Target(DRAIN, hosts=[(host, str(device) if kind == "hca_port" and device else None)])
    return _Target(action)


def _ports_of(v: Verdict, host: str) -> dict[str, str | None]:
    """The host's ports the report shows: port -> link layer (None: not said)."""
    out: dict[str, str | None] = {}
    for rail in _rail_names(v).values():
        if host in (rail.get("hosts") or []) and isinstance(rail.get("name"), str):
            out[rail["name"]] = rail.get("link_layer")
    for r in v.results:
        if r.get("check") == "hca_port" and r.get("host") == host and isinstance(r.get("device"), str):
            out.setdefault(r["device"], None)
    return out


def _bad_ports(v: Verdict, host: str) -> set[str]:
    bad = set()
    for r in v.results:
        if r.get("status") in ("pass", "skip"):
            continue
        part = _explained(r)
        if part and part.get("kind") == "hca_port" and part.get("host") == host:
            bad.add(str(part.get("device")))
        elif r.get("host") == host and r.get("device"):
            bad.add(str(r["device"]))
        d = r.get("details") if isinstance(r.get("details"), dict) else {}
        peer = str(d.get("peer") or "").split() if r.get("check") == "switch_port" else []
        if len(peer) == 2 and peer[0] == host:
            bad.add(peer[1])
    return bad


def other_path(v: Verdict, host: str, port: str, quarantined: set[tuple[str, str]]) -> str | None:
    """Another healthy port of ``host`` on the fabric of ``port`` (None: ``port`` is its only path)."""
    ports = _ports_of(v, host)
    layer = ports.get(port)
    bad = _bad_ports(v, host) | {p for h, p in quarantined if h == host}
    for p, p_layer in sorted(ports.items()):
        if p == port or p in bad:
            continue
        if layer is None or p_layer is None or p_layer == layer:
            return p
    return None


def _rails_of(v: Verdict, r: Mapping[str, Any], device: str | None) -> set[str]:
    if device:
        return {device}
    d = r.get("details") if isinstance(r.get("details"), dict) else {}
    rail = d.get("rail")
    name = (_rail_names(v).get(rail) or {}).get("name") if isinstance(rail, int) else None
    return {name} if isinstance(name, str) else set()


def findings(v: Verdict, table: Table) -> list[Action]:
    """Drains (one per host), quarantines (one per port) and monitor lines for the failing results."""
    drains: dict[str, Action] = {}
    ports: dict[str, Action] = {}
    ends: dict[str, set[tuple[str, str]]] = defaultdict(set)
    monitors: list[Action] = []
    hosts = set(v.hosts)
    for r in v.results:
        if r.get("status") not in ("fail", "error") or r.get("caused_by"):
            continue  # a consequence of another result maps to nothing itself
        action, _rule = table.action_for(facts_of(r))
        if action == NONE:
            continue
        t = _resolve(r, action, v)
        ev = _evidence(r)
        if t.action == QUARANTINE and t.port:
            a = ports.setdefault(t.port, Action(QUARANTINE, t.port, part=kind_of(r)))
            a.evidence.append(ev)
            ends[t.port].update(t.port_ends)
            continue
        if t.action == DRAIN and t.hosts:
            for h, dev in t.hosts:
                if h not in hosts:
                    monitors.append(
                        Action(
                            MONITOR,
                            h,
                            h,
                            evidence=[ev],
                            why=f"{h} is not a host of the report: nothing drained",
                        )
                    )
                    continue
                a = drains.get(h)
                if a is None:
                    a = drains[h] = Action(
                        DRAIN, h, h, reason=sl.drain_reason(str(r.get("check")), h, dev or "")
                    )
                a.evidence.append(ev)
                a.rails |= _rails_of(v, r, dev)
            continue
        if t.action in (MONITOR, DRAIN, QUARANTINE):
            monitors.append(
                Action(MONITOR, str(r.get("name") or _component_text(r)), evidence=[ev], why=t.note)
            )
    quarantined = {e for es in ends.values() for e in es}
    for port, a in ports.items():
        a.ends = sorted(ends[port])
        stays = []
        for h, dev in sorted(ends[port]):
            alt = other_path(v, h, dev, quarantined) if h in hosts else None
            if h in hosts and alt is None:
                a.only_path.append(h)  # shut only once h is out of service (fabricops.act.quarantine)
            if h in drains:
                drains[h].evidence.extend(a.evidence)
                stays.append(f"{h} is drained (its DRAIN line)")
                continue
            if alt is not None:
                stays.append(f"{h} stays in service ({alt} healthy on the same fabric)")
                continue
            if h not in hosts:
                continue
            d = drains.get(h)
            if d is None:
                d = drains[h] = Action(
                    DRAIN, h, h, reason=sl.drain_reason(str(a.evidence[0]["check"]), *port.split())
                )
                d.why = f"{port} is its only path to that fabric"
            d.evidence.extend(a.evidence)
            d.rails.add(dev)
            stays.append(f"{h} drained: {port} is its only path to that fabric")
        a.why = (
            "; ".join(stays)
            if stays
            else ("the hosts at its ends stay in service" if port.startswith("ISL") else "")
        )
    return [*sorted(drains.values(), key=lambda a: a.target), *ports.values(), *monitors]


# --- Slurm state and the rails ---------------------------------------------------------------------


def _passes(v: Verdict) -> set[str]:
    """The hosts this report passes: host_verdicts, else no failing result on them (an older report)."""
    if v.data.get("host_verdicts"):
        return {h for h, verdict in v.host_verdicts.items() if verdict == "pass"}
    not_checked = set((v.data.get("not_checked") or {}).keys())
    bad = set()
    for r in v.results:
        if r.get("status") in ("pass", "skip") or (_explained(r) or {}).get("kind") == "cable":
            continue
        bad.update(h for pair in str(r.get("host") or "").split(",") for h in pair.split("<->") if h)
    return {h for h in v.hosts if h not in bad and h not in not_checked}


def _last(records: list[Record], node: str, actions: tuple[str, ...]) -> Record | None:
    mine = [r for r in records if r.node == node and r.mode == EXECUTED and r.action in actions]
    return max(mine, key=lambda r: r.time) if mine else None


def _minutes(d: timedelta) -> str:
    return f"{int(d.total_seconds() // 60)} min"


def plan(
    v: Verdict,
    table: Table,
    nodes: Mapping[str, sl.Node],
    node_of: Callable[[str], str],
    records: list[Record],
    now: datetime,
    rails: Rails = Rails(),
) -> Plan:
    actions = findings(v, table)
    drains = [a for a in actions if a.kind == DRAIN]
    drain_hosts = {a.host for a in drains}
    for a in drains:
        node = a.node = sl.check_node(node_of(str(a.host)), f"host {a.host}: ")
        n = nodes.get(node)
        if n is None:
            a.status, a.why = (
                SKIPPED,
                _join(
                    a.why, f"node {node} is not in Slurm (absent from scontrol show node): nothing to drain"
                ),
            )
        elif sl.ours(n):
            a.status, a.why = SKIPPED, _join(a.why, f"already drained by fabricops ({n.reason!r})")
        elif n.out_of_service:
            a.status, a.why = (
                SKIPPED,
                _join(
                    a.why, f"{n.state_text.lower()} by someone else ({n.reason or 'no reason'!r}): left alone"
                ),
            )
        else:
            a.argv = sl.drain_argv(node, str(a.reason))
    resumes: list[Action] = []
    for h in sorted(_passes(v) - drain_hosts):
        node = node_of(h)
        n = nodes.get(node) if isinstance(node, str) else None
        if n is None or not sl.ours(n):
            continue
        sl.check_node(node, f"host {h}: ")
        a = Action(
            RESUME,
            node,
            h,
            node,
            evidence=[
                {
                    "category": "report",
                    "check": "host_verdict",
                    "component": h,
                    "message": f"{h}: passes in this report",
                }
            ],
        )
        last = _last(records, node, (DRAIN,))
        if last is None:
            a.status, a.why = (
                SKIPPED,
                (
                    f"drained by fabricops ({n.reason!r}) but this action log has no record "
                    "of when; resume it by hand when it is healthy, or use the state dir "
                    "that drained it"
                ),
            )
        elif last.time >= v.generated_at:
            a.status, a.why = (
                SKIPPED,
                (
                    f"the report ({iso(v.generated_at)}) is not newer than the drain "
                    f"({iso(last.time)}): run verify again"
                ),
            )
        else:
            a.why = f"drained by fabricops ({n.reason!r}) at {iso(last.time)}; passes in a newer report"
            a.argv = sl.resume_argv(node)
        resumes.append(a)
    out = Plan([*resumes, *actions])
    out.refusal = _whole_run(v, out, nodes, rails)
    if out.refusal:
        for a in out.actions:
            if a.status == PLANNED and a.kind in (DRAIN, RESUME, QUARANTINE):
                a.status, a.why = REFUSED, _join(a.why, "the whole run is refused")
        return out
    _per_node(out, records, now, rails, node_of)
    return out


_PAST = {DRAIN: "drained", RESUME: "resumed"}


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _whole_run(v: Verdict, p: Plan, nodes: Mapping[str, sl.Node], rails: Rails) -> str | None:
    """A rail fault or a partition drained past its fraction: the sentence that refuses the run."""
    per_rail: dict[str, set[str]] = defaultdict(set)
    for a in p.of(DRAIN):
        for rail in a.rails:
            per_rail[rail].add(str(a.host))
    for q in p.of(QUARANTINE):
        for h, dev in q.ends:
            per_rail[dev].add(h)
    for rail, hosts in sorted(per_rail.items()):
        if len(hosts) > rails.max_rail_hosts:
            switch = next(
                (
                    r.get("switch")
                    for r in _rail_names(v).values()
                    if r.get("name") == rail and r.get("switch")
                ),
                None,
            )
            where = f"rail {rail}" + (f" ({switch})" if switch else "")
            return (
                f"refused: {len(hosts)} hosts fail on {where} ({', '.join(sorted(hosts))}), more than "
                f"--max-rail-hosts {rails.max_rail_hosts}: a fabric-wide fault is not {len(hosts)} node "
                "faults; check that rail's switch and cables; nothing drained"
            )
    new = p.of(DRAIN, PLANNED)
    parts: dict[str, list[str]] = defaultdict(list)
    for n in nodes.values():
        for part in n.partitions:
            parts[part].append(n.name)
    for part, members in sorted(parts.items()):
        adding = sorted({str(a.node) for a in new if a.node in members})
        if not adding:
            continue
        out = {m for m in members if nodes[m].out_of_service} | set(adding)
        if len(out) > rails.partition_fraction * len(members):
            return (
                f"refused: draining {', '.join(adding)} would leave {len(out)} of {len(members)} nodes of "
                f"partition {part} drained or down, more than --max-partition-fraction "
                f"{rails.partition_fraction:g}: a fabric-wide fault is not {len(adding)} node faults; "
                "nothing drained"
            )
    return None


def _allowed_port(a: Action, allow: re.Pattern[str], pattern: str, node_of: Callable[[str], str]) -> str:
    """Why --allow refuses quarantine ``a`` ("" when it does not): the nodes of the hosts at its
    ends must all match; a port with no host at its end (an inter-switch cable) affects hosts beyond
    any node list, so it is refused while --allow narrows the run."""
    if not a.ends:
        return (
            f"--allow {pattern!r} narrows the run to some nodes and the report names no host at the end "
            f"of {a.target} (an inter-switch cable affects every host behind it): run without --allow to "
            "quarantine it"
        )
    outside = sorted({node_of(h) for h, _dev in a.ends if not allow.fullmatch(node_of(h))})
    if outside:
        return f"{', '.join(outside)} (at its end) not in --allow {pattern!r}"
    return ""


def _per_node(
    p: Plan, records: list[Record], now: datetime, rails: Rails, node_of: Callable[[str], str]
) -> None:
    allow = re.compile(rails.allow) if rails.allow else None
    hour_ago = now - timedelta(hours=1)
    drained_last_hour = {
        r.node for r in records if r.mode == EXECUTED and r.action == DRAIN and r.time > hour_ago
    }
    run = 0
    for a in p.actions:
        if a.status == PLANNED and a.kind == QUARANTINE and allow is not None:
            why = _allowed_port(a, allow, str(rails.allow), node_of)
            if why:
                a.status, a.why = REFUSED, _join(a.why, why)
            continue
        if a.status != PLANNED or a.kind not in (DRAIN, RESUME):
            continue
        node = str(a.node)
        if allow is not None and not allow.fullmatch(node):
            a.status, a.why = REFUSED, _join(a.why, f"{node} is not in --allow {rails.allow!r}")
            continue
        last = _last(records, node, (DRAIN, RESUME))
        if last is not None and now - last.time < rails.cooldown:
            a.status, a.why = (
                REFUSED,
                _join(
                    a.why,
                    (
                        f"cooldown: fabricops {_PAST.get(last.action, last.action)} it "
                        f"{_minutes(now - last.time)} ago "
                        f"({iso(last.time)}; --cooldown {_minutes(rails.cooldown)})"
                    ),
                ),
            )
            continue
        if a.kind != DRAIN:
            continue
        if run >= rails.max_per_run:
            a.status, a.why = REFUSED, _join(a.why, f"--max-drain-per-run {rails.max_per_run} reached")
            continue
        if len(drained_last_hour) + run >= rails.max_per_hour:
            a.status, a.why = (
                REFUSED,
                _join(
                    a.why,
                    (
                        f"--max-drain-per-hour {rails.max_per_hour} reached ({len(drained_last_hour)} "
                        "drained by fabricops in the last hour)"
                    ),
                ),
            )
            continue
        run += 1
