"""The multi-scale NCCL phase for hosts in multi-node NVLink domains (GB200/GB300 NVL72).

NVIDIA's Cluster Readiness approach tests NCCL at several scales (the groups of
:data:`fabricops.model.profiles.NCCL_SCALE_GROUPS`), so that a slow result names the part it comes from:

- **intra-node**: each compute tray's GPUs alone (one run per host, ranks = GPUs per host);
- **intra-domain, MNNVL=1**: the trays of one NVLink domain over multi-node NVLink;
- **intra-domain, MNNVL=0**: the same trays with ``NCCL_MNNVL_ENABLE=0``, so the traffic between trays
  goes over the network (NCCL docs, Troubleshooting, "Multi-node NVLink (MNNVL) issues": NCCL uses MNNVL
  for inter-node communication within one NVLink domain unless ``NCCL_MNNVL_ENABLE`` is 0);
- **across domains**: every host, ``NCCL_MNNVL_ENABLE=0``: the network at full scale.

The floors: intra-node, the profile's published single-node all_reduce figure; intra-domain MNNVL=1, the
profile's published intra-domain figure (none is published for GB200/GB300 in our sources), else the
same trays' MNNVL=0 result: NVLink must carry more than the network does; MNNVL=0 and across domains,
the model's network prediction and floor exactly as :func:`fabricops.verify.nccl_phase.phase` derives
them (the band alone where no per-NIC floor is published for the rails' rate). A group with no floor
is measured and reported, not judged (status ``skip``, its busbw in ``measured``).

The cause, per domain: MNNVL=1 slow with MNNVL=0 at its floor is NVLink; MNNVL=0 (or across domains)
slow with MNNVL=1 fine is the network; both slow names both. A domain named unhealthy (the IMEX domain
check, ``imex_domain``) gets an ``error`` for its MNNVL=1 group instead of a run.

Planning (:func:`plan`), judging (:func:`judge`), the cause (:func:`cause_verdict`) and the table
(:func:`table_rows`) are pure; :func:`phase` runs the plan through the verify transport with
:func:`fabricops.verify.nccl_phase.build_command` and :func:`~fabricops.verify.nccl_phase.launch`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricops.model import busbw as model
from fabricops.model import profiles
from fabricops.verify import nccl_phase as ncp
from fabricops.verify.expect import HostExpect, NcclSettings, _natural
from fabricops.verify.result import ERROR, FAIL, PASS, SKIP, CheckResult

CATEGORY = ncp.CATEGORY
CHECK = "nccl_busbw"
#: the inventory variable naming each host's NVLink domain (the nvidia_imex role reads the same one)
DOMAIN_VAR = "fabricops_nvlink_domain"
#: the IMEX domain status check whose failing results name unhealthy domains
IMEX_CHECK = "imex_domain"
MNNVL = "NCCL_MNNVL_ENABLE"
INTRA_NODE, INTRA_DOMAIN, ACROSS = "intra_node", "intra_domain", "across_domains"
SCALES = tuple(profiles.NCCL_SCALE_GROUPS)
#: the causes a per-domain verdict names
NVLINK = "NVLink (the domain's NVLink switch trays or a tray's NVLink)"
NETWORK = "network (the rails between the trays: HCA ports, cables, leaf and spine switches)"
_MNNVL_SOURCE = (
    "NCCL docs, Troubleshooting, 'Multi-node NVLink (MNNVL) issues' (NCCL uses MNNVL between the nodes of "
    "one NVLink domain unless NCCL_MNNVL_ENABLE=0)"
)


@dataclass(frozen=True)
class Group:
    """One NCCL run of the plan (per collective)."""

    scale: str  #: intra_node | intra_domain | across_domains
    hosts: tuple[str, ...]
    mnnvl: int | None  #: NCCL_MNNVL_ENABLE for the run; None: not set (NCCL's default)
    domain: str | None = None
    blocked: str | None = None  #: why it is not run (its NVLink domain is not healthy)

    @property
    def label(self) -> str:
        if self.scale == INTRA_NODE:
            return f"intra-node {self.hosts[0]}"
        if self.scale == INTRA_DOMAIN:
            return f"intra-domain {self.domain}"
        return "across domains"

    @property
    def env(self) -> dict[str, str]:
        return {} if self.mnnvl is None else {MNNVL: str(self.mnnvl)}

    def device(self, coll: str) -> str:
        return coll if self.mnnvl is None else f"{coll} MNNVL={self.mnnvl}"

    @property
    def who(self) -> str:
        return ",".join(self.hosts)


@dataclass
class Plan:
    groups: list[Group] = field(default_factory=list)
    #: what planning found (a host without a domain, a one-tray domain, no run across domains)
    results: list[CheckResult] = field(default_factory=list)


# --- inputs ---------------------------------------------------------------------------------------


def domains_of(hostvars: Mapping[str, Mapping[str, Any]], hosts: Sequence[str]) -> dict[str, str | None]:
    """host -> its NVLink domain (``fabricops_nvlink_domain``), None where it is not set."""
    return {h: str((hostvars.get(h) or {}).get(DOMAIN_VAR) or "").strip() or None for h in hosts}


def unhealthy_domains(results: Sequence[CheckResult]) -> dict[str, str]:
    """domain -> why it is not healthy, from the failing IMEX domain results (check ``imex_domain``,
    ``details.domain``); the first reason of a domain is kept."""
    out: dict[str, str] = {}
    for r in results:
        dom = r.details.get("domain") if isinstance(r.details, dict) else None
        if r.check == IMEX_CHECK and r.status in (FAIL, ERROR) and dom:
            out.setdefault(str(dom), r.message)
    return out


# --- planning -------------------------------------------------------------------------------------


def _scale(scale: str, who: str, device: str | None, status: str, msg: str, **details: Any) -> CheckResult:
    return CheckResult(CATEGORY, CHECK, who, device, status, msg,
                       details={"scale": {"scale": scale, **details}})


def plan(
    hosts: Sequence[str], domains: Mapping[str, str | None], unhealthy: Mapping[str, str] | None = None
) -> Plan:
    """The groups for ``hosts`` (in inventory order) by NVLink domain: intra-node per host; per domain of
    two or more trays MNNVL=1 (blocked when the domain is in ``unhealthy``) and MNNVL=0; across domains
    (MNNVL=0, every host) when the hosts span more than one domain."""
    unhealthy = unhealthy or {}
    out = Plan()
    out.groups += [Group(INTRA_NODE, (h,), None) for h in hosts]
    by_domain: dict[str, list[str]] = {}
    bare = []
    for h in hosts:
        d = domains.get(h)
        if d:
            by_domain.setdefault(d, []).append(h)
        else:
            bare.append(h)
    for h in bare:
        out.results.append(_scale(
            INTRA_DOMAIN, h, None, ERROR,
            f"{h}: {DOMAIN_VAR} is not set: no intra-domain NCCL run for it (name the NVLink domain, the "
            "NVL72 rack, this compute tray belongs to, the same name on every tray of that domain)",
            group=f"intra-domain ? ({h})", hosts=[h], domain=None, mnnvl=None,
        ))
    for d in sorted(by_domain, key=_natural):
        members = tuple(by_domain[d])
        if len(members) < 2:
            out.results.append(_scale(
                INTRA_DOMAIN, members[0], None, SKIP,
                f"{members[0]}: NVLink domain {d} has one host in this run: nothing crosses NVLink between "
                "trays (its intra-node run covers its NVLink)",
                group=f"intra-domain {d}", hosts=list(members), domain=d, mnnvl=None,
            ))
            continue
        why = unhealthy.get(d)
        out.groups.append(Group(INTRA_DOMAIN, members, 1, d, f"NVLink domain {d} is not healthy: {why}"
                                if why else None))
        out.groups.append(Group(INTRA_DOMAIN, members, 0, d))
    if len(hosts) >= 2 and (len(by_domain) + (1 if bare else 0) >= 2 or len(bare) >= 2):
        out.groups.append(Group(ACROSS, tuple(hosts), 0))
    elif len(hosts) >= 2:
        out.results.append(_scale(
            ACROSS, ",".join(hosts), None, SKIP,
            f"one NVLink domain ({next(iter(by_domain))}): its MNNVL=0 run is the full-scale network run",
            group="across domains", hosts=list(hosts), domain=None, mnnvl=0,
        ))
    return out


# --- expectations ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    floor: model.Floor | None
    pred: model.Prediction | None = None  #: the model's network prediction (network groups)
    band: model.Band | None = None
    why_none: str = ""  #: why there is no floor (measured and reported, not judged)


def _published(profile: profiles.Profile, test: str, coll: str) -> Expectation:
    if coll != "all_reduce":
        return Expectation(None, why_none=f"the profile's {test} floor is for all_reduce, not {coll}")
    try:
        t = profiles.threshold_for(profile, test)
    except profiles.ProfileError as exc:
        return Expectation(None, why_none=str(exc))
    return Expectation(model.Floor(float(t.value), t.basis, t.source))


def network_expectation(
    profile: profiles.Profile, rails: Mapping[str, Mapping[str, float]], hosts: Sequence[str]
) -> Expectation:
    """The model's prediction, floor and band for ``hosts`` over their rails (as phase() derives them).
    No per-NIC floor for the rails' rate: the band's low edge under the prediction is the floor."""
    band = model.band()
    try:
        pred = model.predict({h: list(rails.get(h, {}).values()) for h in hosts}, profile.gpu.nvlink)
    except ValueError as exc:
        bare = [h for h in hosts if not rails.get(h)]
        why = (f"{', '.join(bare)} plan no port for NCCL (fabricops_cabling / nccl_profile_name)"
               if bare else str(exc))
        return Expectation(None, why_none=f"no busbw expectation: {why}")
    try:
        floor = model.floor(pred, profile)
    except ValueError as exc:
        floor = model.Floor(
            band.low * pred.busbw_gbs,
            f"{band.low:g} x the model's prediction (no published per-NIC floor: {exc})",
            band.source,
        )
    return Expectation(floor, pred, band)


def mnnvl_expectation(
    profile: profiles.Profile, coll: str, off: ncp.RunResult | None, off_exp: Expectation | None
) -> Expectation:
    """MNNVL=1 across one domain: the profile's published intra-domain floor; else more than the same
    trays carry over the network (MNNVL=0's busbw above the band's measurement noise, and at least
    MNNVL=0's own floor)."""
    pub = _published(profile, "nccl_all_reduce_intra_domain", coll)
    if pub.floor is not None:
        return pub
    band = model.band()
    parts, values = [], []
    if off is not None and off.ok and off.busbw is not None:
        values.append(float(off.busbw) * (1 + band.above_tolerance))
        parts.append(f"MNNVL=0 measured {float(off.busbw):.1f} GB/s + {band.above_tolerance:.0%} noise")
    if off_exp is not None and off_exp.floor is not None:
        values.append(off_exp.floor.value)
        parts.append(f"MNNVL=0 floor {off_exp.floor.value:.1f}")
    if not values:
        return Expectation(None, why_none=f"{pub.why_none}; and the same trays over the network (MNNVL=0) "
                                          "were not measured")
    basis = f"no published MNNVL floor: NVLink must carry more than the network ({'; '.join(parts)})"
    return Expectation(model.Floor(max(values), basis, f"{_MNNVL_SOURCE}; noise: {band.source}"))


# --- judging --------------------------------------------------------------------------------------


def _details(g: Group, coll: str, rr: ncp.RunResult | None, exp: Expectation | None) -> dict[str, Any]:
    d: dict[str, Any] = {
        "scale": {
            "scale": g.scale,
            "group": g.label,
            "hosts": list(g.hosts),
            "domain": g.domain,
            "mnnvl": g.mnnvl,
            "collective": coll,
        }
    }
    if rr is not None:
        d["command"] = rr.command
    if exp is not None and exp.floor is not None:
        d["floor_basis"] = exp.floor.basis
    if exp is not None and exp.pred is not None:
        d["prediction"] = exp.pred.basis
    return d


def judge_group(g: Group, coll: str, rr: ncp.RunResult | None, exp: Expectation) -> CheckResult:
    """One group's result: not run (blocked), could not run, no floor (measured, ``skip``), or busbw
    against its floor (and the model's band for the network groups) with
    :func:`fabricops.verify.nccl_phase._judge`."""
    details = _details(g, coll, rr, exp)
    dev = g.device(coll)
    head = f"{g.label}" + ("" if g.mnnvl is None else f" (MNNVL={g.mnnvl})")
    if g.blocked:
        return CheckResult(CATEGORY, CHECK, g.who, dev, ERROR, f"{head}: {coll} not run: {g.blocked}",
                           caused_by=f"{IMEX_CHECK} {g.domain}", details=details)
    if rr is None or not rr.ok:
        why = rr.error if rr is not None else "not run"
        return CheckResult(CATEGORY, CHECK, g.who, dev, ERROR, f"{head}: {coll}_perf could not run: {why}",
                           details=details)
    if exp.floor is None:
        return CheckResult(
            CATEGORY, CHECK, g.who, dev, SKIP,
            f"{head}: {coll} busbw {float(rr.busbw or 0):.1f} GB/s at {rr.size} B: measured and reported "
            f"without a floor ({exp.why_none})",
            measured=rr.busbw, unit="GB/s", details=details,
        )
    r = ncp._judge(coll, g.who, rr, exp.pred, exp.floor, exp.band, len(g.hosts), details, device=dev)
    r.message = f"{head}: {r.message}"
    return r


def _status(r: CheckResult | None) -> str | None:
    return None if r is None else r.status


def cause_verdict(on: str | None, off: str | None, blocked: str | None = None) -> tuple[str, str]:
    """(kind, sentence) from the statuses of MNNVL=1 (``on``) and MNNVL=0 / across-domains (``off``)
    runs of the same trays. kind: none | nvlink | network | both | domain | unknown."""
    if blocked:
        return "domain", f"the NVLink domain is not healthy ({blocked}): fix it before its MNNVL run"
    if on == FAIL and off == FAIL:
        return "both", f"both: {NVLINK} and the {NETWORK}"
    if on == FAIL and off == PASS:
        return "nvlink", f"{NVLINK}: MNNVL=1 is slow while the same trays reach their floor over the network"
    if on == PASS and off == FAIL:
        return "network", f"{NETWORK}: MNNVL=0 is slow while MNNVL=1 on the same trays is fine"
    if on == FAIL:
        return "nvlink", (f"{NVLINK} suspected: MNNVL=1 is slow; the network (MNNVL=0) was not judged, so "
                          "it is not ruled out")
    if off == FAIL:
        return "network", (f"{NETWORK} suspected: MNNVL=0 is slow; NVLink (MNNVL=1) was not judged, so it "
                           "is not ruled out")
    if on == PASS and off == PASS:
        return "none", "none: NVLink and the network both reach their floors"
    return "unknown", "undetermined: not every run of the domain was judged"


def _apply_cause(results: Sequence[CheckResult], kind: str, text: str) -> None:
    for r in results:
        r.details["scale"]["cause"] = {"kind": kind, "text": text}
        if not r.ok and r.caused_by is None:
            slowest = r.details.get("slowest")
            r.cause = text + (f"; {'; '.join(slowest)}" if slowest else "")


def judge(
    groups: Sequence[Group],
    runs: Mapping[tuple[Group, str], ncp.RunResult],
    collectives: Sequence[str],
    profile: profiles.Profile,
    rails: Mapping[str, Mapping[str, float]],
) -> list[CheckResult]:
    """Every group's result per collective (intra-node, then per domain MNNVL=1 and MNNVL=0, then across
    domains), each with the cause verdict of its domain (``details.scale.cause``; a failing one's
    ``cause``)."""
    out: list[CheckResult] = []
    for coll in collectives:
        by: dict[tuple[str, str | None, int | None], tuple[Group, CheckResult]] = {}
        nodes: list[CheckResult] = []
        for g in groups:
            rr = runs.get((g, coll))
            if g.scale == INTRA_NODE:
                exp = _published(profile, "nccl_all_reduce_single_node", coll)
            elif g.mnnvl == 0:
                exp = network_expectation(profile, rails, g.hosts)
            else:
                off_g = next(
                    (x for x in groups if x.domain == g.domain and x.scale == g.scale and x.mnnvl == 0), None
                )
                off_exp = network_expectation(profile, rails, off_g.hosts) if off_g else None
                exp = mnnvl_expectation(profile, coll, runs.get((off_g, coll)) if off_g else None, off_exp)
            res = judge_group(g, coll, rr, exp)
            out.append(res)
            if g.scale == INTRA_NODE:
                _apply_cause([res], *_node_cause(res))
                nodes.append(res)
            else:
                by[(g.scale, g.domain, g.mnnvl)] = (g, res)
        for (scale, dom, mnnvl), (g, res) in by.items():
            if scale == INTRA_DOMAIN and mnnvl == 1:
                off = by.get((INTRA_DOMAIN, dom, 0))
                kind, text = cause_verdict(res.status, _status(off and off[1]), g.blocked)
                _apply_cause([res] + ([off[1]] if off else []), kind, text)
        across = by.get((ACROSS, None, 0))
        if across is not None:
            offs = [g.domain for (sc, _d, m), (g, r) in by.items()
                    if sc == INTRA_DOMAIN and m == 0 and r.status == FAIL]
            _apply_cause([across[1]], *across_cause(across[1].status, offs,
                                                    [r.host for r in nodes if r.status == FAIL]))
    return out


def across_cause(
    status: str, slow_domains: Sequence[str | None], slow_trays: Sequence[str]
) -> tuple[str, str]:
    """The cause of the run across domains (MNNVL=0: the network between every tray, NVLink only inside a
    tray): the network, where within the domains (their MNNVL=0 runs slow too) or between them; and the
    trays whose own NVLink is slow (their intra-node runs), when there are such trays."""
    if status == PASS:
        return "none", "none: the network reaches its floor across the domains"
    if status != FAIL:
        return "unknown", "undetermined: the run across domains was not judged"
    names = ", ".join(str(d) for d in slow_domains)
    where = (f"slow within NVLink domain(s) {names} too (their MNNVL=0 runs)" if slow_domains
             else "while every domain's own MNNVL=0 run reaches its floor: the links between the domains "
             "(spine switches and their cables)")
    text = f"{NETWORK}: the run across domains (MNNVL=0) is slow, {where}"
    if slow_trays:
        trays = ", ".join(slow_trays)
        return "both", f"both: {text}; and {NVLINK} of {trays} (their intra-node runs are slow)"
    return "network", text


def _node_cause(r: CheckResult) -> tuple[str, str]:
    if r.status == FAIL:
        return "node", (f"{r.host}: its own GPUs or their NVLink ports (a tray alone crosses no network; "
                        "check nvlink, gpu_count and Xid errors on it)")
    return ("none", "none") if r.status == PASS else ("unknown", "not judged")


# --- running ----------------------------------------------------------------------------------------


def phase(
    run,
    expects: Mapping[str, HostExpect],
    raws: Mapping[str, Any],
    settings: NcclSettings,
    say: Callable[[str], None],
    domains: Mapping[str, str | None],
    unhealthy: Mapping[str, str],
) -> list[CheckResult]:
    """Run the plan through ``run`` (the verify transport; each group launched from its first host with
    :func:`fabricops.verify.nccl_phase.build_command` and the group's ``NCCL_MNNVL_ENABLE``), judge it,
    re-run a slow network group per rail and host (:func:`fabricops.verify.nccl_phase.isolate`, MNNVL=0)
    and read GPUDirect RDMA from the network runs' NCCL log."""
    hosts = list(expects)
    profile = expects[hosts[0]].profile
    slots = profile.gpu.count
    rails, _layer = ncp.plan_rails(expects, raws)
    p = plan(hosts, domains, unhealthy)
    say(f"nccl: multi-scale plan for {len(hosts)} hosts in NVLink domains: {len(p.groups)} groups")
    runs: dict[tuple[Group, str], ncp.RunResult] = {}
    for coll in settings.collectives:
        for g in p.groups:
            if g.blocked:
                say(f"nccl: {g.label} MNNVL={g.mnnvl} not run: {g.blocked}")
                continue
            cmd = ncp.build_command(settings, g.hosts, slots, coll, env=g.env)
            say(f"nccl: {coll} {g.label}" + ("" if g.mnnvl is None else f" MNNVL={g.mnnvl}"))
            runs[(g, coll)] = ncp.launch(run, g.hosts[0], cmd, settings, slots * len(g.hosts), len(g.hosts))
    results = list(p.results)
    judged = judge(p.groups, runs, settings.collectives, profile, rails)
    # a slow network group: which rail or host (bounded re-runs, MNNVL kept off)
    slow_nets = {
        x.details["scale"]["collective"] for x in judged if x.status == FAIL
        and x.details["scale"]["scale"] == INTRA_DOMAIN and x.details["scale"]["mnnvl"] == 0
    }
    for r in list(judged):
        sc = r.details["scale"]
        if r.status != FAIL or sc["mnnvl"] != 0 or len(sc["hosts"]) < 2:
            continue
        if sc["scale"] == ACROSS and sc["collective"] in slow_nets:
            continue  # a domain's own network run is slow: its re-runs name the rail and host
        exp = network_expectation(profile, rails, sc["hosts"])
        if exp.pred is None or exp.band is None or (r.measured or 0) >= exp.band.low * exp.pred.busbw_gbs:
            continue
        sub = {h: expects[h] for h in sc["hosts"]}
        subset = ncp.isolate(run, sub, {h: rails[h] for h in sub}, settings, sc["collective"], slots,
                             exp.pred, exp.band, say, env={MNNVL: "0"})
        ncp._name_slowest(r, subset)
        slowest = r.details.get("slowest")
        r.cause = sc["cause"]["text"] + (f"; {'; '.join(slowest)}" if slowest else "")
        judged.extend(subset)
    results.extend(judged)
    # GPUDirect RDMA: from the run across domains, else each domain's MNNVL=0 run
    net = [(g, rr) for (g, _c), rr in runs.items() if g.mnnvl == 0 and rr.ok]
    across = [(g, rr) for g, rr in net if g.scale == ACROSS]
    for g, rr in across[:1] or list({g: (g, rr) for g, rr in net}.values()):
        results.extend(ncp.judge_gdr(rr.text, {h: expects[h] for h in g.hosts}, raws))
    return results


# --- the per-scale table ----------------------------------------------------------------------------


def table_rows(results: Sequence[CheckResult]) -> list[dict[str, Any]]:
    """The per-scale table (group, hosts, MNNVL, busbw, floor, verdict, cause) from the phase's results."""
    rows = []
    for r in results:
        sc = r.details.get("scale") if isinstance(r.details, dict) else None
        if not isinstance(sc, dict) or r.category != CATEGORY:
            continue
        verdict = {PASS: "pass", FAIL: "FAIL", ERROR: "ERROR", SKIP: "skip"}[r.status]
        if r.status == SKIP and r.measured is not None:
            verdict = "no floor"
        rows.append({
            "group": sc.get("group"),
            "scale": sc.get("scale"),
            "collective": sc.get("collective"),
            "hosts": list(sc.get("hosts") or []),
            "mnnvl": sc.get("mnnvl"),
            "busbw": r.measured,
            "floor": r.threshold,
            "verdict": verdict,
            "cause": (sc.get("cause") or {}).get("text"),
        })
    return rows


def _hosts_cell(hosts: Sequence[str]) -> str:
    return ",".join(hosts) if len(hosts) <= 2 else f"{hosts[0]}..{hosts[-1]} ({len(hosts)})"


def render_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The terminal lines of the per-scale table, then one cause line per domain that is not fine."""
    if not rows:
        return []

    def num(x: Any) -> str:
        return "-" if x is None else f"{float(x):.1f}"

    cells = [
        (f"{r['group']} {r['collective'] or ''}".strip(), _hosts_cell(r["hosts"]),
         "-" if r["mnnvl"] is None else str(r["mnnvl"]), num(r["busbw"]), num(r["floor"]), r["verdict"])
        for r in rows
    ]
    head = ("group", "hosts", "MNNVL", "busbw", "floor", "verdict")
    w = [max(len(c[i]) for c in [*cells, head]) for i in range(len(head))]
    line = "  " + "  ".join(f"{{:<{w[i]}}}" for i in range(len(head)))
    out = ["", "NCCL SCALES (busbw GB/s at the largest size)", line.format(*head).rstrip()]
    out += [line.format(*c).rstrip() for c in cells]
    causes = dict.fromkeys(
        f"  cause, {r['group']}: {r['cause']}" for r in rows
        if r["cause"] and r["scale"] != INTRA_NODE and r["verdict"] in ("FAIL", "ERROR")
    )
    out += list(causes)
    return out
