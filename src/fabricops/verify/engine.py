"""The verification run: host and GPU checks on every host, then the pairwise rounds.

Transport-agnostic: a ``run(host, command, timeout) -> {rc, stdout, stderr}`` function and each
host's inventory variables are all it needs (``fabricops.verify.transport.Fabric`` provides both
from an Ansible inventory; unit tests pass fakes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fabricops import result as _result
from fabricops.errors import BadInput, FabricopsError, ParseError
from fabricops.evidence.collect import collect as collect_host
from fabricops.model import rates
from fabricops.parsers import parse
from fabricops.verify import cabling, counters, hostchecks, pairs, switchports, switchstate
from fabricops.verify.expect import HostExpect, NcclSettings, PortExpect, _natural, host_expect
from fabricops.verify.result import ERROR, CheckResult, passed
from fabricops.verify.switchstate import ReadFn

ONLY = ("hosts", "pairs", "gpus", "cabling", "nccl")


@dataclass
class Options:
    only: str | None = None
    profile: str | None = None
    ofed_version: str | None = None
    skip: Sequence[str] = ()
    serial: bool = False
    rerun: bool = True
    command_timeout_s: float = 60
    #: host -> device -> {counter: value}: error counters are judged by their increase since then
    counter_baseline: Mapping[str, dict[str, dict[str, int]]] | None = None
    progress: Callable[[str], None] | None = None
    #: test every pair per rail (circle method) instead of the coverage schedule
    all_pairs: bool = False
    #: RoCE ISL byte counters (fabricops.verify.rounds.CounterFn): ISL coverage is observed from them.
    #: None: the switches' own port counters (switchports.IslCounters) when the switch reader can
    #: read port state
    isl_counters: Callable[..., Any] | None = None
    #: a cable neither measured nor read healthy is a skip (knowingly accepted), not an error
    #: (--accept-unproven)
    accept_unproven: bool = False
    #: run the multi-node NCCL phase in a full run (--nccl; also fabricops_verify_nccl: true)
    nccl: bool = False
    #: the transport of the pair rounds and the NCCL phase (the intensive tier), e.g. Slurm job steps
    #: (fabricops.verify.slurm.Allocation.run); None: the ``run`` given to :func:`verify`
    steps: Callable[[str, str, float], Mapping[str, Any]] | None = None
    #: the transport of the NCCL launcher line when it differs from ``steps`` (an srun template under the
    #: Slurm launcher runs on the Slurm controller, in the allocation); None: ``steps``
    launch: Callable[[str, str, float], Mapping[str, Any]] | None = None


@dataclass
class VerifyRun:
    hosts: list[str]
    profile: str | None
    only: str | None
    results: list[CheckResult] = field(default_factory=list)
    pairs: pairs.PairRun | None = None
    wall_s: float = 0.0
    host_phase_s: float = 0.0
    #: host -> why it could not be checked (every command of the host phase failed at the transport)
    unreached: dict[str, str] = field(default_factory=dict)
    #: when the run began to gather evidence (ISO-8601 UTC): the report's verdicts are valid from it
    started_at: str = field(default_factory=lambda: _result.clock())
    #: seconds from started_at its verdicts may drive an action (None: the report's default)
    valid_for_s: float | None = None
    #: how the pair rounds and the NCCL phase ran (the JSON report's ``launcher``; None: over SSH)
    launcher: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return passed(self.results)


SWITCHES = "switches"  #: --skip switches: leave out the switch port read (fabricops_verify_skip too)


@dataclass
class SwitchPhase:
    """What the switch port read found (switchports): its results, each read port's health and the
    switches that could not be read, for the ISL counters and the link proof of the pair phase."""

    plan: switchports.PortPlan | None = None
    results: list[CheckResult] = field(default_factory=list)
    health: dict[tuple[str, str], str | None] = field(default_factory=dict)
    read_errors: dict[str, str] = field(default_factory=dict)
    reader: Any = None  #: a reader with ``port_states`` (None: the switches are not read)
    no_access: str | None = None  #: why no switch was read, when none was

    def proof(self, accept: bool) -> switchports.LinkProof:
        return switchports.LinkProof(self.health, self.read_errors, accept, self.no_access)


def exit_status(run: Any, not_checked: Mapping[str, str] | None = None) -> int:
    """The exit status of a verify run (docs/cli.md): :func:`fabricops.verify.report.exit_status`,
    except that a run whose only problems say it could not reach a verdict -- a switch that could not
    be read, a link neither measured nor read healthy (``details.no_verdict``) -- exits 4, never 1
    (and never 0)."""
    from fabricops.verify import report

    return report.exit_status(run, not_checked)


#: the transport's own failure (ssh's exit status when it cannot connect or the session dies)
TRANSPORT_FAILED = 255


def unreached(raw: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why a host gave no evidence at all, or None when it answered: every command of its host phase
    ended with the transport's failure (rc 255) and printed nothing. A host that answered some
    commands was reached; what it did not answer is judged by each check (fails closed)."""
    if not raw:
        return None
    if any(r.get("rc") != TRANSPORT_FAILED or (r.get("stdout") or "").strip() for r in raw.values()):
        return None
    first = next(iter(raw.values()))
    return " ".join(str(first.get("stderr") or "no answer over SSH").split())[:200]


def collect(run: pairs.RunFn, expect: HostExpect, only: str | None, timeout: float) -> dict[str, Any]:
    """The host's evidence: every command of its host phase in one session when the transport can
    batch them (fabricops.evidence.collect), else one call per command in order."""
    return collect_host(run, expect.host, hostchecks.commands(expect, only), timeout)


def baseline_from_report(data: Mapping[str, Any]) -> dict[str, dict[str, dict[str, int]]]:
    """Error counters of a previous JSON report (``--json``) as a baseline.

    Every value must be a counter reading (:func:`fabricops.verify.counters.baseline_value_problem`:
    a non-negative integer of at most 64 bits); anything else raises :class:`BadInput` naming the
    host, device and counter, before any host is contacted (``null``: the counter was not reported
    then, and is left out)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in data.get("results") or []:
        absolute = (r.get("details") or {}).get("absolute")
        if r.get("check") == "error_counters" and r.get("device") and isinstance(absolute, dict):
            where = f"{_one_line(r.get('host'))} {_one_line(r['device'])}"
            for name, value in absolute.items():
                why = None if value is None else counters.baseline_value_problem(value)
                if why:
                    raise BadInput(f"{where} {_one_line(name)}: {why}")
            out.setdefault(r["host"], {})[r["device"]] = {k: v for k, v in absolute.items() if v is not None}
    return out


def _one_line(value: Any) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def verify(
    run: pairs.RunFn,
    hosts: Sequence[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    opts: Options,
    switch_link_layers: Mapping[str, str] | None = None,
    switch_reader: ReadFn | None = None,
) -> VerifyRun:
    """``switch_reader`` (read-only) explains degraded RoCE pairs by the switch ports on their path.

    One session per switch is kept for the whole run (the port-state read, every ISL counter read,
    the RoCE causes: :meth:`fabricops.verify.switchstate.SwitchReader.keep_sessions`) and closed at
    its end, also when the run raises."""
    sessions = switchstate.keep_sessions(switch_reader)
    try:
        return _verify(run, hosts, hostvars, opts, switch_link_layers, switch_reader)
    finally:
        sessions.close()


def _verify(
    run: pairs.RunFn,
    hosts: Sequence[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    opts: Options,
    switch_link_layers: Mapping[str, str] | None,
    switch_reader: ReadFn | None,
) -> VerifyRun:
    say = opts.progress or (lambda _m: None)
    t0 = time.monotonic()
    vr = VerifyRun(hosts=list(hosts), profile=opts.profile, only=opts.only)
    expects: dict[str, HostExpect] = {}
    for h in hosts:
        try:
            expects[h] = host_expect(
                h,
                hostvars.get(h) or {},
                profile=opts.profile,
                ofed_override=opts.ofed_version,
                switch_link_layers=switch_link_layers,
                skip=opts.skip,
                counter_baseline=(opts.counter_baseline or {}).get(h),
            )
        except FabricopsError as exc:
            vr.results.append(CheckResult("hosts", "expectation", h, None, ERROR, f"{h}: {exc}"))
    if expects and vr.profile is None:
        vr.profile = next(iter(expects.values())).profile.name
    # the NCCL phase's launcher line is checked before any host is run: a refused value (a host name,
    # a setting, a quoted placeholder) raises NcclSettingsError, "invalid input" (exit 5)
    nccl = _nccl_settings(expects, hostvars) if expects and _nccl_wanted(opts, hosts, hostvars) else None
    if not hosts:
        vr.results.append(CheckResult("hosts", "inventory", "-", None, ERROR, "no hosts to verify"))

    # host + GPU phase (also the ibstat read that pair planning needs)
    host_only = "pairs" if opts.only == "pairs" else opts.only
    raws: dict[str, dict[str, Any]] = {}

    def one(h: str) -> tuple[str, dict[str, Any]]:
        say(f"{h}: collecting")
        return h, collect(run, expects[h], host_only, opts.command_timeout_s)

    th = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, min(32, len(expects)))) as pool:
        for h, raw in pool.map(one, list(expects)):
            why = unreached(raw)
            if why is not None:
                # no evidence, no verdict: the host is "not checked", and it takes no part in the
                # phases after this one (no pair, cabling or NCCL result is judged without it)
                vr.unreached[h] = why
                say(f"{h}: unreachable ({why[:80]})")
                continue
            raws[h] = raw
            if opts.only not in ("pairs", "nccl"):
                res = hostchecks.evaluate(expects[h], raw, opts.only)
                vr.results.extend(res)
                bad = [r for r in res if not r.ok]
                say(f"{h}: {len(res) - len(bad)}/{len(res)} checks passed")
    vr.host_phase_s = time.monotonic() - th
    if opts.only in (None, "gpus", "nccl") and expects:
        # per NVLink domain, IMEX as every tray sees it (unreachable trays count as members whose view
        # is missing); under --only nccl too: the NCCL phase starts a domain's MNNVL runs only when
        # its domain passed (fabricops.verify.nccl_scales.unhealthy_domains)
        from fabricops.verify import imex_domain

        vr.results.extend(imex_domain.phase(expects, raws, vr.unreached, hostvars))
    expects = {h: e for h, e in expects.items() if h not in vr.unreached}
    if not expects:
        nccl = None
    if opts.only in (None, "hosts") and expects:
        from fabricops.verify import consistency  # every host on a rail: same MTU, same NCCL settings

        vr.results.extend(consistency.phase(run, expects, raws, opts.command_timeout_s))

    if opts.only in (None, "cabling") and expects and not cabling.skipped(opts.skip, expects.values()):
        vr.results.extend(cabling.phase(run, list(expects), hostvars, switch_link_layers, switch_reader,
                                        opts.command_timeout_s))
    sw = SwitchPhase(no_access="switch ports not read in this run")
    if opts.only in (None, "pairs", "cabling") and expects:
        sw = _switch_phase(expects, raws, hostvars, switch_link_layers, switch_reader, opts, say)
        vr.results.extend(sw.results)
    steps = opts.steps or run  # the intensive tier: SSH, or job steps of the site's scheduler
    if opts.only in (None, "pairs") and expects:
        vr.pairs = _pair_phase(steps, expects, raws, vr, opts, say, switch_reader, hostvars, sw)
        from fabricops.verify import outliers  # pairs that pass the floor far below the rail's best

        vr.results.extend(outliers.judge(vr.results, next((hostvars.get(h) for h in hosts), None)))
    if nccl is not None:
        from fabricops.verify import nccl_phase, nccl_scales

        # NVL72 profiles: the multi-scale plan groups hosts by fabricops_nvlink_domain and leaves out the
        # MNNVL runs of a domain the IMEX domain check found unhealthy (fabricops.verify.nccl_scales)
        domains = nccl_scales.domains_of(hostvars, list(expects))
        vr.results.extend(nccl_phase.phase(opts.launch or steps, expects, raws, nccl, say, domains,
                                           nccl_scales.unhealthy_domains(vr.results)))
    vr.wall_s = time.monotonic() - t0
    return vr


def _switch_phase(
    expects: Mapping[str, HostExpect],
    raws: Mapping[str, Mapping[str, Any]],
    hostvars: Mapping[str, Mapping[str, Any]],
    link_layers: Mapping[str, str] | None,
    reader: Any,
    opts: Options,
    say: Callable[[str], None],
) -> SwitchPhase:
    """Read every fabric port of every Ethernet switch of the verified fabric once (all switches in
    parallel) and judge it (fabricops.verify.switchports); InfiniBand switches are not read."""
    ph = SwitchPhase()
    if SWITCHES in set(opts.skip) or all(SWITCHES in e.skip for e in expects.values()):
        ph.no_access = "the switch port read was skipped (--skip switches)"
        return ph
    layers = dict(link_layers or {})
    host_ports = [(h, p.device, str(p.switch), str(p.switch_port))
                  for h, e in expects.items() for p in e.ports if p.switch and p.switch_port]
    links = next((hv.get("fabricops_switch_links") for hv in hostvars.values()
                  if (hv or {}).get("fabricops_switch_links")), None)
    plan = ph.plan = switchports.plan_ports(
        host_ports, links, layers, _host_rates(expects, raws), lambda sw: layers.get(sw) == "Ethernet"
    )
    if plan.empty:
        ph.no_access = "no Ethernet switch in the plan"
        return ph
    if not callable(getattr(reader, "port_states", None)):
        ph.no_access = "no switch access given"
        return ph
    say(f"switches: reading {len(plan.switches)} ({', '.join(plan.switches)})")
    reads = switchports.read_switches(reader, {sw: plan.ports_of(sw) for sw in plan.switches}, qos=True)
    ph.reader, ph.read_errors = reader, dict(reads.errors)
    ph.results, ph.health = switchports.judge(plan, reads, next(iter(expects.values())).profile)
    bad = sum(1 for r in ph.results if not r.ok)
    say(f"switches: {len(ph.results) - bad}/{len(ph.results)} ports and links as planned"
        + (f"; not read: {', '.join(sorted(reads.errors))}" if reads.errors else ""))
    return ph


def _host_rates(
    expects: Mapping[str, HostExpect], raws: Mapping[str, Mapping[str, Any]]
) -> dict[tuple[str, str], tuple[float | None, str]]:
    """(host, device) -> the rate its cable should run at and where that comes from: the port's own
    ``fabricops_cabling`` speed, else its rail's rate (:func:`_rail_rate`: the profile, a cabling
    speed on the rail, or the highest rate ibstat reports on the rail)."""
    exp0 = next(iter(expects.values()))
    groups: dict[tuple[str, int, str], dict[str, PortExpect]] = {}
    for h, e in expects.items():
        observed = hostchecks.observed_link_layers(raws.get(h, {}))
        for p in e.ports:
            layer = p.link_layer or observed.get(p.device)
            if layer:
                groups.setdefault((p.hca, p.port, layer), {})[h] = p
    out: dict[tuple[str, str], tuple[float | None, str]] = {}
    for (_hca, _port, layer), members in groups.items():
        rail = _rail_rate(layer, members, exp0, raws)
        for h, p in members.items():
            own = None
            if p.speed:
                try:
                    own = float(rates.port_rate(layer, p.speed, "4X")), f"fabricops_cabling speed {p.speed}"
                except (ValueError, KeyError):
                    own = None
            out[(h, p.device)] = own or rail
    return out


def _nccl_wanted(opts: Options, hosts: Sequence[str], hostvars: Mapping[str, Mapping[str, Any]]) -> bool:
    """``--only nccl``; in a full run only when asked (--nccl or fabricops_verify_nccl: true)."""
    from fabricops.verify.expect import nccl_wanted

    if opts.only == "nccl":
        return True
    return opts.only is None and (opts.nccl or nccl_wanted(next((hostvars.get(h) or {} for h in hosts), {})))


def _nccl_settings(expects, hostvars) -> NcclSettings:
    """The multi-node NCCL phase's settings (from the first host), with every value that reaches its
    launcher line checked (fabricops.verify.nccl_phase.preflight); raises NcclSettingsError."""
    from fabricops.verify import nccl_phase
    from fabricops.verify.expect import nccl_settings

    settings = nccl_settings(hostvars.get(next(iter(expects))) or {})
    nccl_phase.preflight(settings, expects)
    return settings


def _ibstat_rates(raw: Mapping[str, Any]) -> dict[str, float]:
    res = raw.get("ibstat")
    if not res or res.get("rc") not in (0, None):
        return {}
    try:
        rec = parse("ibstat", res.get("stdout") or "")
    except ParseError:
        return {}
    return {f"{ca.name}/{p.port}": float(p.rate) for ca in rec.cas for p in ca.ports if p.rate}


def _rail_rate(
    layer: str, members: Mapping[str, PortExpect], exp0: HostExpect, raws: Mapping[str, Any]
) -> tuple[float | None, str]:
    """The rate a rail's ports should run at, and where it comes from."""
    prof = exp0.profile
    if layer == prof.hca.link_layer:
        width = f" {prof.hca.width}" if prof.hca.width else ""
        return float(prof.hca.rate_gbps), f"profile {prof.name} ({prof.hca.speed}{width})"
    for p in members.values():
        if p.speed:
            try:
                return float(rates.port_rate(layer, p.speed, "4X")), f"fabricops_cabling speed {p.speed}"
            except (ValueError, KeyError):
                continue
    seen = [_ibstat_rates(raws.get(h, {})).get(p.device) for h, p in members.items()]
    seen = [r for r in seen if r]
    if seen:
        return max(seen), "the highest rate ibstat reports on the rail (the profile names no rate for it)"
    return None, "unknown"


def plan_rails(
    expects: Mapping[str, HostExpect], raws: Mapping[str, Mapping[str, Any]], by_switch: bool = True
) -> tuple[list[pairs.Rail], list[CheckResult]]:
    """Every cabled HCA port, InfiniBand and RoCE, grouped into rails: the same HCA port on the same
    switch. RoCE rails carry each host's RoCE data address (cabling ``address``,
    ``fabricops_roce_addresses``, else the RoCE v2 IPv4 GID), its RoCE v2 GID index from the GID
    table, and the ToS of ``fabricops_roce``. What cannot be planned is an ``error`` result."""
    hosts = list(expects)
    exp0 = expects[hosts[0]]
    errors: list[CheckResult] = []

    def err(host: str, device: str | None, msg: str) -> None:
        errors.append(CheckResult("pairs", "schedule", host, device, ERROR, msg))

    groups: dict[tuple[str, int, str | None], dict[str, PortExpect]] = {}
    layers: dict[tuple[str, int, str | None], str] = {}
    for h, e in expects.items():
        observed = hostchecks.observed_link_layers(raws.get(h, {}))
        for p in e.ports:
            layer = p.link_layer or observed.get(p.device)
            if layer is None:
                err(
                    h,
                    p.device,
                    f"{h} {p.device}: link layer unknown (its switch is in no switch group and "
                    "ibstat does not list it): cannot plan its rail (failing closed)",
                )
                continue
            key = (p.hca, p.port, p.switch if by_switch else None)
            groups.setdefault(key, {})[h] = p
            layers.setdefault(key, layer)
    tos = None
    roce_cfg = exp0.roce
    if roce_cfg is not None:
        try:
            from fabricops.model.roce import validate

            tos = validate(roce_cfg).tos
        except FabricopsError:
            tos = None  # reported by the roce_qos host check
    rails: list[pairs.Rail] = []
    for key in sorted(groups, key=lambda k: (_natural(k[0]), k[1], str(k[2] or ""))):
        members = dict(groups[key])
        name = f"{key[0]}/{key[1]}"
        where = f" on {key[2]}" if key[2] else ""
        layer = layers[key]
        addresses = {h: str(expects[h].address) for h in members}
        gids: dict[str, int] = {}
        if layer == "Ethernet":
            for h, p in list(members.items()):
                e = expects[h]
                addr = (
                    p.address or e.roce_addresses.get(p.hca) or (p.netdev and e.roce_addresses.get(p.netdev))
                )
                entries = hostchecks.parse_gids((raws.get(h, {}).get(f"gids:{p.device}") or {}).get("stdout"))
                gid = hostchecks.roce_v2_gid(entries, addr or None)
                if gid is None:
                    err(
                        h,
                        p.device,
                        f"{h} {p.device}"
                        + (f" ({p.netdev})" if p.netdev else "")
                        + f": no RoCE v2 GID for {addr or 'an IPv4 address'} in its GID table: the netdev "
                        "lacks the address or RoCE v2 is off; its RoCE pairs cannot run (failing closed)",
                    )
                    del members[h]
                    continue
                addresses[h] = str(addr or gid["ipv4"])
                gids[h] = int(gid["index"])
        missing = [h for h in hosts if h not in members]
        if len(members) < 2:
            err(
                ",".join(members) or "-",
                name,
                f"rail {name}{where}: "
                + (f"only {', '.join(members)} can test there" if members else "no host can test there")
                + ", no peer (failing closed)",
            )
            continue
        if missing:
            err(
                ",".join(missing),
                name,
                f"rail {name}{where}: {', '.join(missing)} not on this rail "
                "(not cabled there, or not testable); tested among the others (failing closed)",
            )
        rate, rate_src = _rail_rate(layer, members, exp0, raws)
        if rate is None:
            err(
                ",".join(members),
                name,
                f"rail {name}{where}: no rate known for its {layer} ports (set "
                "speed in fabricops_cabling); not tested (failing closed)",
            )
            continue
        rails.append(
            pairs.Rail(
                index=len(rails),
                name=name,
                link_layer=layer,
                rate_gbps=rate,
                devices={h: p.device for h, p in members.items()},
                addresses=addresses,
                switch=key[2],
                rate_source=rate_src,
                switch_ports={h: p.switch_port for h, p in members.items() if p.switch_port},
                netdevs={h: p.netdev for h, p in members.items() if p.netdev},
                gid_index=gids,
                tos=tos if layer == "Ethernet" else None,
            )
        )
    return rails, errors


def explain_roce(
    results: Sequence[CheckResult],
    rails: Sequence[pairs.Rail],
    host_results: Sequence[CheckResult],
    reader: ReadFn | None,
) -> None:
    """Name the path of each failed RoCE pair: both hosts' RoCE QoS (the roce_qos check) and, when the
    inventory has the switch, its ports on the path (read-only). A pair whose hosts are on different
    switches (``details.switches``: {host: switch}) also gets every inter-switch link end its ECMP
    path may cross checked (the reader's ``isl_path``; the ports roce_switch configures there too).
    Writes ``cause`` and ``details.path`` in place."""
    by_index = {r.index: r for r in rails}
    failing = [
        r
        for r in results
        if r.category == "pairs" and not r.ok and getattr(by_index.get(r.details.get("rail")), "roce", False)
    ]
    if not failing:
        return
    qos = {(hr.host, hr.device): hr for hr in host_results if hr.check == "roce_qos" and not hr.ok}
    wanted: dict[str, set[str]] = {}
    for r in failing:
        rail = by_index[r.details["rail"]]
        for h in (r.details.get("client"), r.details.get("server")):
            hsw = _host_switch(r, rail, h)
            if hsw and rail.switch_ports.get(h):
                wanted.setdefault(hsw, set()).add(rail.switch_ports[h])
    isls = {id(r): _isl_ends(r, by_index[r.details["rail"]], reader) for r in failing}
    for ends in isls.values():
        for sw, port, _peer, _peer_port in ends if isinstance(ends, list) else []:
            wanted.setdefault(sw, set()).add(port)
    states: dict[tuple[str, str], list[str]] = {}
    notes: dict[str, str] = {}
    for sw, ports in sorted(wanted.items()):
        if reader is None:
            notes[sw] = f"{sw} not read (no switch access given)"
            continue
        try:
            for port, problems in reader(sw, sorted(ports)).items():
                states[(sw, port)] = list(problems)
        except Exception as exc:  # a cause is best effort; the failure stands
            notes[sw] = f"{sw} could not be read ({' '.join(str(exc).split())[:160]})"
    for r in failing:
        rail = by_index[r.details["rail"]]
        found: list[str] = []
        clean: list[tuple[str, str]] = []
        cross = False  # a clean host port on another switch than the rail's: each named with its switch
        path: dict[str, Any] = {"switch": rail.switch, "switch_ports": {}, "host_qos": {}}
        for h in (r.details.get("client"), r.details.get("server")):
            nd = rail.netdevs.get(h)
            hr = qos.get((h, nd))
            path["host_qos"][h] = list(hr.measured or []) if hr is not None else "as declared or not checked"
            if hr is not None:
                diffs = [str(d) for d in hr.measured or []]
                more = f" (+{len(diffs) - 3} more)" if len(diffs) > 3 else ""
                found.append(f"{h} {nd} ({rail.devices.get(h)}): " + "; ".join(diffs[:3]) + more)
            sp = rail.switch_ports.get(h)
            hsw = _host_switch(r, rail, h)
            if hsw and sp:
                st = states.get((hsw, sp))
                name = sp if hsw == rail.switch else f"{hsw} {sp}"  # a cross-switch pair: switch and port
                path["switch_ports"][name] = st if st is not None else notes.get(hsw)
                if st:
                    found.append(f"{hsw} {sp} ({h} {rail.devices.get(h)}): {'; '.join(st)}")
                elif st == []:
                    clean.append((hsw, sp))
                    cross = cross or hsw != rail.switch
        ends = isls[id(r)]
        if isinstance(ends, str):  # the links could not be told
            path["isl_ports"] = ends
            clean_isl = None
        elif ends:
            path["isl_ports"] = {}
            clean_isl = []
            for sw, port, peer, peer_port in ends:
                st = states.get((sw, port))
                path["isl_ports"][f"{sw} {port}"] = st if st is not None else notes.get(sw)
                if st:
                    found.append(f"{sw} {port} (inter-switch link to {peer} {peer_port}): {'; '.join(st)}")
                elif st == []:
                    clean_isl.append(f"{sw} {port}")
        r.details["path"] = path
        if found:
            r.cause = "; ".join(dict.fromkeys(found)) + (f" -- {r.cause}" if r.cause else "")
            continue
        extra = []
        if clean:
            named = [f"{sw} {p}" for sw, p in clean] if cross else [f"{rail.switch} {clean[0][1]}"]
            named += [] if cross else [p for _sw, p in clean[1:]]
            extra.append(f"{', '.join(named)} hold the lossless class as declared")
        if rail.switch in notes:
            extra.append(notes[rail.switch])
        if isinstance(ends, str):
            extra.append(ends)
        elif ends:
            if clean_isl:
                extra.append(
                    f"inter-switch link ends {', '.join(clean_isl)} hold the lossless class as declared"
                )
            others = dict.fromkeys(e[0] for e in ends if e[0] != rail.switch)
            extra.extend(notes[sw] for sw in others if sw in notes)
        if extra:
            r.cause = f"{r.cause}; {'; '.join(extra)}" if r.cause else "; ".join(extra)


def _host_switch(r: CheckResult, rail: pairs.Rail, host: str | None) -> str | None:
    """The switch ``host`` is cabled to in pair result ``r``: ``details.switches`` of a cross-switch
    test, else the rail's switch."""
    return (r.details.get("switches") or {}).get(host) or rail.switch


def _isl_ends(
    r: CheckResult, rail: pairs.Rail, reader: ReadFn | None
) -> list[tuple[str, str, str, str]] | str:
    """The inter-switch link ends a cross-switch pair may cross (``reader.isl_path``), [] for a pair on
    one switch, or a sentence saying why they cannot be told."""
    a, b = (_host_switch(r, rail, h) for h in (r.details.get("client"), r.details.get("server")))
    if not a or not b or a == b:
        return []
    path_of = getattr(reader, "isl_path", None)
    if path_of is None:
        why = "no switch access given" if reader is None else "the switch reader tells no links"
        return f"the inter-switch links between {a} and {b} not read ({why})"
    try:
        return list(path_of(a, b))
    except Exception as exc:  # a cause is best effort; the failure stands
        why = " ".join(str(exc).split())[:160]
        return f"the inter-switch links between {a} and {b} could not be told ({why})"


def _pair_phase(
    run, expects, raws, vr: VerifyRun, opts: Options, say, reader: ReadFn | None = None, hostvars=None,
    sw: SwitchPhase | None = None,
) -> pairs.PairRun | None:
    names = list(expects)
    if len(names) < 2:
        vr.results.append(
            CheckResult(
                "pairs",
                "schedule",
                ",".join(names) or "-",
                None,
                ERROR,
                "pairwise tests need at least two hosts (failing closed)",
            )
        )
        return None
    profiles = {e.profile.name for e in expects.values()}
    if len(profiles) > 1:
        vr.results.append(
            CheckResult(
                "pairs",
                "schedule",
                ",".join(names),
                None,
                ERROR,
                f"hosts have different hardware profiles ({', '.join(sorted(profiles))})",
            )
        )
        return None
    # switches joined by inter-switch links are one fabric: its rail spans the leaves (--all-pairs then
    # tests every pair across the fabric, not only the pairs on one leaf)
    linked = any((hv or {}).get("fabricops_switch_links") for hv in (hostvars or {}).values())
    rails, errors = plan_rails(expects, raws, by_switch=not linked)
    sw = sw or SwitchPhase(no_access="switch ports not read in this run")
    if not opts.all_pairs:
        cov = _coverage_phase(run, expects, raws, vr, opts, say, reader, hostvars or {}, sw)
        if cov is not None:
            return cov
    vr.results.extend(errors)
    if not rails:
        vr.results.append(
            CheckResult(
                "pairs",
                "schedule",
                ",".join(names),
                None,
                ERROR,
                "cannot plan rails: no HCA port is cabled on two hosts "
                "(fabricops_cabling or fabricops_verify_ports) (failing closed)",
            )
        )
        return None
    say("rails: " + ", ".join(f"{r.index} {r.label} {r.link_layer} {r.rate_gbps:g} Gb/s" for r in rails))
    exp0 = expects[names[0]]
    pr = pairs.run_pairs(
        run,
        names,
        rails,
        {h: str(expects[h].address) for h in names},
        exp0.profile,
        exp0.rate_gbps,
        exp0.perftest,
        progress=say,
        serial=opts.serial,
        rerun=opts.rerun,
    )
    pairs.annotate(pr.results, vr.results, n_hosts=len(names))
    explain_roce(pr.results, rails, vr.results, reader)
    vr.results.extend(pr.results)
    vr.results.extend(_all_pairs_proof(expects, raws, hostvars or {}, opts, sw))
    return pr


def _all_pairs_proof(expects, raws, hostvars, opts: Options, sw: SwitchPhase) -> list[CheckResult]:
    """--all-pairs reads no switch counters: a RoCE fabric's inter-switch links (ECMP paths no test
    can name) are proven only by the switch read, else unproven (switchports.LinkProof)."""
    from fabricops.verify import rounds

    rails, _errors = plan_rails(expects, raws, by_switch=False)
    hv = next((hostvars.get(h) for h in expects if (hostvars.get(h) or {}).get("fabricops_cabling")), None)
    if not rails or not hv:
        return []
    plans, _why = rounds.plan_fabrics(
        rails, hv.get("fabricops_cabling"), hv.get("fabricops_switch_links"), rounds.lids_from_raws(raws)
    )
    proof = sw.proof(opts.accept_unproven)
    out: list[CheckResult] = []
    for p in plans or []:
        if p.fabric.roce and p.fabric.isl_links():
            out += proof(p.rail.name, p.rail.index, p.fabric, p.fabric.isl_links(),
                         lambda _d: "--all-pairs reads no switch counters; RoCE paths are an ECMP hash")
    return out


def _coverage_phase(run, expects, raws, vr: VerifyRun, opts: Options, say, reader, hostvars,
                    sw: SwitchPhase | None = None):
    """The coverage schedule (fabricops.verify.rounds) when the inventory describes the fabric;
    None (all-pairs) when it does not. Its rails are the HCA ports of one fabric, whatever leaf
    they are on (a two-tier fabric is one rail, not one per leaf)."""
    from fabricops.verify import rounds

    names = list(expects)
    rails, errors = plan_rails(expects, raws, by_switch=False)
    if not rails:
        return None
    hv = next((hostvars.get(h) or {} for h in names if (hostvars.get(h) or {}).get("fabricops_cabling")), {})
    plans, why = rounds.plan_fabrics(
        rails, hv.get("fabricops_cabling"), hv.get("fabricops_switch_links"), rounds.lids_from_raws(raws)
    )
    if not plans:
        say(f"all pairs (circle method): {why}")
        return None
    vr.results.extend(errors)
    for p in plans:
        say(
            f"coverage: rail {p.rail.name}, {p.fabric.describe()}: {len(p.rounds)} rounds "
            f"(lower bound {p.lower_bound}; all pairs: {len(pairs.plan(sorted(p.rail.devices), [p.rail]))})"
        )
    exp0 = expects[names[0]]
    sw = sw or SwitchPhase(no_access="switch ports not read in this run")
    isl_counters = opts.isl_counters
    if isl_counters is None and sw.reader is not None and any(p.fabric.roce and p.fabric.isl_links()
                                                                for p in plans):
        isl_counters = switchports.IslCounters(sw.reader, known_errors=sw.read_errors)
    pr = rounds.run_coverage(
        run,
        plans,
        exp0.profile,
        exp0.perftest,
        progress=say,
        serial=opts.serial,
        rerun=opts.rerun,
        counters=isl_counters,
        link_proof=sw.proof(opts.accept_unproven),
    )
    explain_roce(pr.results, pr.rails, vr.results, reader)
    vr.results.extend(pr.results)
    return pr
