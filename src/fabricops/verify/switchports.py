"""The switches' own view of every fabric port, and the rule that no link passes unproven.

**What is read.** Every Onyx / Cumulus switch of the verified fabric is read once per run, all
switches in parallel, through the inventory's switch access (:class:`~fabricops.verify.switchstate.
SwitchReader`, show commands only; one SSH session per switch kept for the whole run and reused by
this read and every ISL counter read, closed at its end): every port that carries a host cable of a
verified host or an inter-switch link (``fabricops_cabling``, ``fabricops_switch_links``) -- its
operational state, the speed it trained at, its error counters, how often it went down, its tx/rx
bytes (the platform's ``read_port_state``: Onyx ``show interfaces ethernet | json-print``, NVUE
``nv show interface -o json``) and what it lacks for the lossless class of ``fabricops_roce``
(:func:`~fabricops.verify.switchstate.port_problems`). InfiniBand switches are not read here (their
ports are read from the hosts: ``ibstat``, ``perfquery``, ``ibnetdiscover``).

**What is judged** (:func:`judge`, check ``switch_port``, category ``switches``): a port that is
down, trained below its planned speed (``fabricops_switch_links`` ``speed``/``width`` for an
inter-switch link, else the fabric's host port rate; ``fabricops_cabling`` ``speed`` or the rail's
rate for a host cable), has error counters above the profile's limit or flapped as often as the
profile's flap limit FAILS; an inter-switch link is one result naming both ends. A switch that
cannot be read is an ``error`` with ``details.no_verdict``. The lossless-class findings are kept in
``details.qos`` (the RoCE pair tests and ``fabricops drift`` judge that configuration; a port that
lacks it is not "read healthy" below).

**No pass on an unproven fabric** (:func:`LinkProof`, check ``link_proof``): every directed cable
must be *measured* -- a pair test's known path crossed it, or, for a RoCE inter-switch link whose
path is an ECMP hash, its switch port's byte counter moved during a round (:class:`IslCounters`,
the coverage rounds' ``counters``) -- or *read healthy* on the switch (both ends up at the planned
speed, no error or flap over the limits, the lossless class as declared). A cable that is neither
is an ``error`` (``details.no_verdict``: verify exits 4, "no verdict", never 0), or with
``--accept-unproven`` a ``skip`` that says it was knowingly accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import FabricopsError
from fabricops.model import rates
from fabricops.model.fabric import DirLink, Fabric, dirlink_str, natural
from fabricops.verify.result import ERROR, FAIL, PASS, SKIP, CheckResult

__all__ = [
    "CATEGORY",
    "IslCounters",
    "LinkProof",
    "PlannedPort",
    "PortPlan",
    "SwitchReads",
    "judge",
    "no_verdict",
    "plan_ports",
    "read_switches",
]

CATEGORY = "switches"
CHECK = "switch_port"
PROOF = "link_proof"
#: parallel switch sessions
MAX_WORKERS = 32


def _one_line(text: Any, n: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def no_verdict(r: CheckResult) -> bool:
    """A result that says the run could not reach a verdict (a switch not read, a link unproven):
    ``error`` with ``details.no_verdict``."""
    return r.status == ERROR and bool((r.details or {}).get("no_verdict"))


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class PlannedPort:
    """One end of a cable on a switch this run reads."""

    switch: str
    port: str
    kind: str  #: "host" | "isl"
    peer: str  #: "gpu01 mlx5_1/1" (host cable) or "spine1:swp1" (the ISL's other end)
    gbps: float | None  #: the planned rate (None: nothing says)
    width: str | None  #: the planned width, where the plan gives one
    source: str  #: where the planned rate comes from

    @property
    def name(self) -> str:
        return f"{self.switch}:{self.port}"


@dataclass
class PortPlan:
    hosts: list[PlannedPort] = field(default_factory=list)  #: the switch ends of host cables
    isls: list[tuple[PlannedPort | None, PlannedPort | None]] = field(default_factory=list)
    #: an ISL end on a switch this run does not read (InfiniBand): None in ``isls``; its name here
    isl_names: list[tuple[str, str]] = field(default_factory=list)
    switches: list[str] = field(default_factory=list)  #: the switches read, natural order

    def ports_of(self, switch: str) -> list[str]:
        ports = [p.port for p in self.hosts if p.switch == switch]
        ports += [e.port for pair in self.isls for e in pair if e is not None and e.switch == switch]
        return sorted(set(ports), key=natural)

    @property
    def empty(self) -> bool:
        return not self.switches


def _planned_rate(layer: str, speed: Any, width: Any) -> float | None:
    try:
        return float(rates.port_rate(layer, str(speed), str(width or "4X")))
    except (ValueError, KeyError, TypeError):
        return None


def plan_ports(
    host_ports: Iterable[tuple[str, str, str, str]],
    switch_links: Sequence[Mapping[str, Any]] | None,
    link_layers: Mapping[str, str],
    host_rates: Mapping[tuple[str, str], tuple[float | None, str]],
    readable: Callable[[str], bool],
) -> PortPlan:
    """The ports to read: the switch end of every host cable ``(host, device, switch, port)`` and both
    ends of every inter-switch link of the fabrics those switches belong to (``fabricops_switch_links``
    entries joining them), on the switches ``readable`` accepts.

    ``host_rates``: (host, device) -> (planned Gb/s, source) of the host ports (the rail's rate);
    ``link_layers``: switch -> link layer (an ISL's planned ``speed`` is read in its layer)."""
    out = PortPlan()
    hp = list(host_ports)
    switches = {sw for _h, _d, sw, _p in hp}
    links = [e for e in switch_links or [] if isinstance(e, Mapping)]
    grow = True
    while grow:  # the fabrics of the host ports: every switch linked to one of them, transitively
        grow = False
        for e in links:
            a, b = str(e.get("switch_a")), str(e.get("switch_b"))
            if (a in switches) != (b in switches):
                switches |= {a, b}
                grow = True
    for host, device, sw, port in hp:
        if not readable(sw):
            continue
        gbps, source = host_rates.get((host, device), (None, "no planned rate for the host port"))
        out.hosts.append(PlannedPort(sw, port, "host", f"{host} {device}", gbps, None, source))
    by_switch_rate: dict[str, float] = {}
    for (host, device), (gbps, _src) in host_rates.items():
        for h, d, sw, _p in hp:
            if (h, d) == (host, device) and gbps:
                by_switch_rate[sw] = max(by_switch_rate.get(sw, 0.0), gbps)
    for e in links:
        a, pa, b, pb = (str(e.get(k)) for k in ("switch_a", "port_a", "switch_b", "port_b"))
        if a not in switches or not (readable(a) or readable(b)):
            continue
        layer = link_layers.get(a) or link_layers.get(b) or "Ethernet"
        width = str(e["width"]) if e.get("width") else None
        if e.get("speed"):
            gbps = _planned_rate(layer, e["speed"], width)
            source = f"fabricops_switch_links speed {e['speed']}" + (f" {width}" if width else "")
        else:
            rate = max((by_switch_rate.get(s, 0.0) for s in (a, b)), default=0.0) or max(
                by_switch_rate.values(), default=0.0
            )
            gbps = rate or None
            source = "the fabric's host port rate (fabricops_switch_links gives no speed)"
        end_a = PlannedPort(a, pa, "isl", f"{b}:{pb}", gbps, width, source) if readable(a) else None
        end_b = PlannedPort(b, pb, "isl", f"{a}:{pa}", gbps, width, source) if readable(b) else None
        out.isls.append((end_a, end_b))
        out.isl_names.append((f"{a}:{pa}", f"{b}:{pb}"))
    out.switches = sorted(
        {p.switch for p in out.hosts} | {e.switch for pair in out.isls for e in pair if e is not None},
        key=natural,
    )
    return out


# --------------------------------------------------------------------------- reading


@dataclass
class SwitchReads:
    """Each switch's read (``SwitchPortsRead``), or why it could not be read."""

    reads: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def state(self, switch: str, port: str) -> Any:
        rd = self.reads.get(switch)
        return None if rd is None else rd.states.get(port)


def read_switches(
    reader: Any, ports: Mapping[str, Sequence[str]], qos: bool = True, workers: int = MAX_WORKERS
) -> SwitchReads:
    """``reader.port_states(switch, ports, qos=...)`` for every switch, in parallel (one session
    each: the reader's kept session of the switch during a verify run,
    :meth:`~fabricops.verify.switchstate.SwitchReader.keep_sessions`); a switch that cannot be read
    is in ``errors`` with one sentence."""
    out = SwitchReads()
    items = [(sw, list(p)) for sw, p in ports.items() if p]
    if not items:
        return out

    def one(item: tuple[str, list[str]]) -> tuple[str, Any, str | None]:
        sw, plist = item
        try:
            return sw, reader.port_states(sw, plist, qos=qos), None
        except Exception as exc:  # the switch is not read: said, never passed
            return sw, None, _one_line(exc) or type(exc).__name__

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        for sw, rd, why in pool.map(one, items):
            if rd is None:
                out.errors[sw] = str(why)
            else:
                out.reads[sw] = rd
    return out


class IslCounters:
    """The coverage rounds' ``counters`` (:data:`fabricops.verify.rounds.CounterFn`): the bytes each
    directed inter-switch link has carried, from the transmitting port's tx counter (else the
    receiving port's rx counter), every switch read in parallel (through the sessions the reader
    keeps for the run: no new login per read). A link whose switches could not be read is left out
    (:meth:`why` says why); when none could, it raises. A switch in ``known_errors`` (the run's
    first read could not reach it) is not tried again."""

    def __init__(
        self, reader: Any, workers: int = MAX_WORKERS, known_errors: Mapping[str, str] | None = None
    ):
        self.reader = reader
        self.workers = workers
        self.skip = dict(known_errors or {})
        self.errors: dict[str, str] = dict(self.skip)
        self.reads = 0

    def __call__(self, fabric: Fabric, links: Sequence[DirLink]) -> dict[DirLink, int]:
        want: dict[str, set[str]] = {}
        for (a, pa), (b, pb) in links:
            for sw, port in ((a, pa), (b, pb)):
                if sw not in self.skip:
                    want.setdefault(sw, set()).add(port)
        got = read_switches(self.reader, {s: sorted(p, key=natural) for s, p in want.items()}, False,
                            self.workers)
        self.reads += 1
        self.errors.update(got.errors)
        for sw in got.reads:
            self.errors.pop(sw, None)
        if not got.reads:
            raise FabricopsError(
                "no switch could be read: " + "; ".join(f"{s}: {w}" for s, w in sorted(self.errors.items()))
            )
        out: dict[DirLink, int] = {}
        for d in links:
            (a, pa), (b, pb) = d
            tx, rx = got.state(a, pa), got.state(b, pb)
            value = tx.tx_bytes if tx is not None and tx.tx_bytes is not None else None
            if value is None and rx is not None:
                value = rx.rx_bytes
            if value is not None:
                out[d] = int(value)
        return out

    def why(self, d: DirLink) -> str:
        (a, _pa), (b, _pb) = d
        bad = [f"{s} could not be read ({self.errors[s]})" for s in (a, b) if s in self.errors]
        return "; ".join(bad) or "the switches did not report its byte counters"


# --------------------------------------------------------------------------- judging


@dataclass
class _Limits:
    errors: Any  #: fabricops.model.profiles.Threshold (symbol_error: at most max)
    flaps: Any  #: (link_flaps_24h: fail at >= fail_at)


def _limits(profile: Any) -> _Limits:
    from fabricops.model.profiles import threshold_for

    return _Limits(threshold_for(profile, "symbol_error"), threshold_for(profile, "link_flaps_24h"))


@dataclass
class _End:
    planned: PlannedPort
    state: Any = None  #: PortState
    problems: list[str] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)
    not_read: str | None = None  #: why the port was not read
    qos: list[str] | None = None
    unhealthy: str | None = None  #: why the read does not prove the port healthy (None: it does)


def _judge_end(pp: PlannedPort, reads: SwitchReads, lim: _Limits) -> _End:
    end = _End(pp)
    if pp.switch in reads.errors:
        end.not_read = f"{pp.switch} could not be read ({reads.errors[pp.switch]})"
        end.unhealthy = end.not_read
        return end
    rd = reads.reads.get(pp.switch)
    if rd is None:
        end.not_read = f"{pp.switch} was not read"
        end.unhealthy = end.not_read
        return end
    if pp.port in rd.missing or pp.port not in rd.states:
        end.problems.append("not listed by the switch")
        end.causes.append(f"no port {pp.port} on {pp.switch} (a wrong port name in the inventory?)")
        end.unhealthy = "not listed by the switch"
        return end
    st = end.state = rd.states[pp.port]
    if rd.qos is not None:
        end.qos = list(rd.qos.get(pp.port) or [])
    if st.oper != "up":
        admin = " (administratively down)" if st.admin == "down" else ""
        end.problems.append(f"link {st.oper or 'state unknown'}{admin}")
        end.causes.append("the port is shut down" if admin else "cable, transceiver or the peer port down")
    elif pp.gbps and st.speed_gbps is not None and st.speed_gbps + 1e-6 < pp.gbps:
        end.problems.append(f"trained at {st.speed_gbps:g} Gb/s, planned {pp.gbps:g}")
        end.causes.append("a degraded link (lanes down, a bad cable or transceiver) or a forced lower speed")
    if pp.width and st.width and str(st.width).upper() != str(pp.width).upper():
        end.problems.append(f"width {st.width}, planned {pp.width}")
        end.causes.append("lanes down (a bad cable or transceiver)")
    for name, value in sorted(st.errors.items()):
        if not lim.errors.passes(value):
            end.problems.append(f"{name} {value} (limit {lim.errors.value} since the counters were cleared)")
            end.causes.append("a bad cable, transceiver or port (corrupted frames)")
    if st.flaps is not None and not lim.flaps.passes(st.flaps):
        end.problems.append(f"went down {st.flaps} times ({st.flaps_basis}; fail at {lim.flaps.value})")
        end.causes.append("a flapping link (a loose or bad cable or transceiver)")
    if end.problems:
        end.unhealthy = "; ".join(end.problems)
    elif st.oper == "up" and st.speed_gbps is None:
        end.unhealthy = "its speed is not shown"
    elif st.oper == "up" and not pp.gbps:
        end.unhealthy = "no planned rate to hold its speed against"
    elif end.qos:
        end.unhealthy = "lossless class: " + "; ".join(end.qos[:3])
    return end


def _speed(st: Any) -> str:
    return f"{st.speed_gbps:g} Gb/s" if st is not None and st.speed_gbps is not None else "speed not shown"


def _details(end: _End) -> dict[str, Any]:
    return {
        "state": end.state.to_data() if end.state is not None else None,
        "problems": list(end.problems),
        "qos": end.qos,
        "not_read": end.not_read,
    }


def _thresholds(lim: _Limits) -> str:
    return f"{lim.errors.source}; {lim.flaps.source}"


def _host_result(end: _End, lim: _Limits) -> CheckResult:
    pp, st = end.planned, end.state
    where = f"{pp.switch} {pp.port} ({pp.peer})"
    planned = f"planned {pp.gbps:g}" if pp.gbps else "no planned rate"
    details = {"kind": "host", "peer": pp.peer, "planned_gbps": pp.gbps, "planned_source": pp.source,
               **_details(end)}
    measured = st.speed_gbps if st is not None else None
    if end.not_read:
        return CheckResult(CATEGORY, CHECK, pp.switch, pp.port, ERROR,
                           f"{where}: not checked: {end.not_read}",
                           cause="the switch could not be read (no verdict on this port)",
                           details={**details, "no_verdict": True})
    if end.problems:
        return CheckResult(CATEGORY, CHECK, pp.switch, pp.port, FAIL, f"{where}: " + "; ".join(end.problems),
                           measured=measured, threshold=pp.gbps, op=">=", unit="Gb/s",
                           cause="; ".join(dict.fromkeys(end.causes)), source=pp.source, details=details)
    return CheckResult(CATEGORY, CHECK, pp.switch, pp.port, PASS,
                       f"{where}: up at {_speed(st)} ({planned}), error and flap counters within limits",
                       measured=measured, threshold=pp.gbps, op=">=", unit="Gb/s", source=pp.source,
                       details=details)


def _isl_result(a: _End | None, b: _End | None, names: tuple[str, str], lim: _Limits) -> CheckResult:
    ends = [e for e in (a, b) if e is not None]
    pp = ends[0].planned
    link = f"{names[0]}<>{names[1]}"
    host = "<->".join(n.split(":", 1)[0] for n in names)
    device = "<->".join(n.split(":", 1)[1] for n in names)
    details: dict[str, Any] = {
        "kind": "isl", "link": link, "planned_gbps": pp.gbps, "planned_width": pp.width,
        "planned_source": pp.source, "ends": {e.planned.name: _details(e) for e in ends},
    }
    unread = [n for n, e in zip(names, (a, b), strict=True) if e is None]
    if unread:
        details["not_read_ends"] = unread  # on a switch this run does not read (InfiniBand)
    # problems the two ends share (the link trained at 200 Gb/s: both say so) are said once
    shared = [p for p in ends[0].problems if len(ends) == 2 and p in ends[1].problems]
    problems = list(shared)
    for e in ends:
        problems += [f"{e.planned.name} {p}" for p in e.problems if p not in shared]
    causes = list(dict.fromkeys(c for e in ends for c in e.causes))
    speeds = [e.state.speed_gbps for e in ends if e.state is not None and e.state.speed_gbps is not None]
    measured = min(speeds) if speeds else None
    if problems:
        return CheckResult(CATEGORY, CHECK, host, device, FAIL,
                           f"ISL {link} " + "; ".join(problems) + f" ({pp.source})",
                           measured=measured, threshold=pp.gbps, op=">=", unit="Gb/s",
                           cause="; ".join(causes), source=pp.source, details=details)
    missing = [e.not_read for e in ends if e.not_read]
    if missing:
        read = [f"{e.planned.name} up at {_speed(e.state)}" for e in ends if not e.not_read]
        msg = f"ISL {link}: not checked: " + "; ".join(dict.fromkeys(missing))
        msg += f" ({'; '.join(read)})" if read else ""
        return CheckResult(CATEGORY, CHECK, host, device, ERROR, msg,
                           cause="the switch could not be read (no verdict on this link)",
                           details={**details, "no_verdict": True})
    planned = f"planned {pp.gbps:g}" if pp.gbps else "no planned rate"
    at = " / ".join(sorted({_speed(e.state) for e in ends}))
    return CheckResult(CATEGORY, CHECK, host, device, PASS,
                       f"ISL {link}: up at {at} ({planned}), error and flap counters within limits",
                       measured=measured, threshold=pp.gbps, op=">=", unit="Gb/s", source=pp.source,
                       details=details)


def judge(
    plan: PortPlan, reads: SwitchReads, profile: Any
) -> tuple[list[CheckResult], dict[tuple[str, str], str | None]]:
    """``switch_port`` results (one per host cable's switch port, one per inter-switch link naming
    both ends), and each read port's health for :class:`LinkProof`: (switch, port) -> None when the
    read proves it healthy, else why not."""
    lim = _limits(profile)
    results: list[CheckResult] = []
    health: dict[tuple[str, str], str | None] = {}
    for pp in plan.hosts:
        end = _judge_end(pp, reads, lim)
        health[(pp.switch, pp.port)] = end.unhealthy
        results.append(_host_result(end, lim))
    for (pa, pb), names in zip(plan.isls, plan.isl_names, strict=True):
        ea = _judge_end(pa, reads, lim) if pa is not None else None
        eb = _judge_end(pb, reads, lim) if pb is not None else None
        for e in (ea, eb):
            if e is not None:
                health[(e.planned.switch, e.planned.port)] = e.unhealthy
        results.append(_isl_result(ea, eb, names, lim))
    return results, health


# --------------------------------------------------------------------------- link proof


class LinkProof:
    """Judges the directed cables no byte count proved (:data:`fabricops.verify.rounds.UnprovenFn`):
    a cable both of whose switch ends were read healthy is proven by the read (a ``pass``); any other
    is unproven -- ``error`` with ``details.no_verdict`` (verify exits 4), or ``skip`` when the run
    ``accept``\\ s unproven links (``--accept-unproven``).

    ``health``: (switch, port) -> None (read healthy) or why not (:func:`judge`); a port not in it
    was not read. ``read_errors``: switch -> why it could not be read."""

    def __init__(
        self,
        health: Mapping[tuple[str, str], str | None] | None = None,
        read_errors: Mapping[str, str] | None = None,
        accept: bool = False,
        no_switch_access: str | None = None,
    ):
        self.health = dict(health or {})
        self.read_errors = dict(read_errors or {})
        self.accept = accept
        self.no_switch_access = no_switch_access

    def _end_reason(self, node: str, port: str, fabric: Fabric) -> str | None:
        """None when (node, port) was read healthy, else why it proves nothing."""
        if node not in fabric.leaves and node not in fabric.spines:
            return None  # the host end: the leaf end's read speaks for the cable
        if (node, port) in self.health:
            why = self.health[(node, port)]
            return None if why is None else f"{node}:{port} {why}"
        if node in self.read_errors:
            return f"{node} could not be read ({self.read_errors[node]})"
        return f"{node}:{port} not read" + (f" ({self.no_switch_access})" if self.no_switch_access else "")

    def __call__(self, rail: str, rail_index: int, fabric: Fabric, links: Iterable[DirLink],
                 unmeasured: Callable[[DirLink], str]) -> list[CheckResult]:
        by_cable: dict[tuple[Any, Any], list[DirLink]] = {}
        for d in sorted(links, key=dirlink_str):
            for c in fabric.cables:
                if {c.a, c.b} == {d[0], d[1]}:
                    by_cable.setdefault((c.a, c.b, c.kind), []).append(d)
                    break
        out: list[CheckResult] = []
        for (a, b, kind), dirs in by_cable.items():
            name = f"{a[0]}:{a[1]}<>{b[0]}:{b[1]}"
            what = "ISL" if kind == "isl" else "host cable"
            reasons = [r for r in (self._end_reason(*a, fabric), self._end_reason(*b, fabric)) if r]
            why_not_measured = "; ".join(dict.fromkeys(unmeasured(d) for d in dirs))
            which = "both directions" if len(dirs) == 2 else dirlink_str(dirs[0])
            details = {"rail": rail_index, "link": name, "directions": [dirlink_str(d) for d in dirs]}
            if not reasons:
                out.append(CheckResult(
                    "pairs", PROOF, rail, None, PASS,
                    f"rail {rail}: {what} {name} proven by the switch read ({which} not measured: "
                    f"{why_not_measured}; both ends read up at the planned speed, counters within limits)",
                    details={**details, "proven_by": "switch read"},
                ))
                continue
            msg = (f"rail {rail}: {what} {name} unproven ({which}): not measured ({why_not_measured}) "
                   f"and not read healthy ({'; '.join(dict.fromkeys(reasons))})")
            if self.accept:
                out.append(CheckResult("pairs", PROOF, rail, None, SKIP,
                                       f"accepted unproven (--accept-unproven): {msg}",
                                       details={**details, "accepted": True}))
            else:
                out.append(CheckResult(
                    "pairs", PROOF, rail, None, ERROR, msg,
                    cause="no traffic was seen crossing it and the switch does not vouch for it: the "
                    "verdict would be a guess (read the switches, or --accept-unproven to accept it)",
                    details={**details, "no_verdict": True},
                ))
        return out
