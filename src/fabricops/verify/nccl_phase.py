"""The multi-node NCCL phase of ``fabricops verify`` (docs/verify.md, "Multi-node NCCL").

From the first host of the run, through the verify transport, one nccl-tests run per collective
(``all_reduce_perf`` by default) across every host, launched by a template (mpirun by default),
read with :mod:`fabricops.parsers.nccl_tests` and judged:

- ``nccl_busbw`` (device = the collective): the out-of-place busbw at the largest size against the
  published floor (the profile's thresholds, ``model/data/nccl_band.yml``) AND the band around the
  model's prediction (:mod:`fabricops.model.busbw`); above the band on two hosts is a FAIL (Tree,
  nccl-tests#196);
- ``nccl_gdr`` (device = HCA): NCCL's own "GPU Direct RDMA Enabled/Disabled for HCA" lines;
- ``nccl_rail``: when busbw is low, bounded subset re-runs (one rail across all hosts; each host with
  a reference host) that name the slowest rail and host.

A run that did not finish (non-zero exit, timeout, unreadable output) is ERROR "could not run" with
its last line of output, never a pass.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricops import validate
from fabricops.errors import FabricopsError, ParseError
from fabricops.model import busbw as model
from fabricops.model import rates
from fabricops.parsers import parse
from fabricops.verify.expect import (
    NCCL_COLLECTIVES,
    NCCL_MAX_BYTES_RE,
    HostExpect,
    NcclSettings,
    NcclSettingsError,
    _natural,
    launcher_error,
)
from fabricops.verify.result import ERROR, FAIL, PASS, CheckResult

CATEGORY = "nccl"
#: Subset re-runs after a low result, at most (docs/verify.md): one per rail, then one per host
#: paired with a reference host, then one run to confirm the reference; the rest is reported untested.
MAX_SUBSET_RUNS = 16
#: Marker printed between the launcher's output and the -J JSON file in one transport call.
JSON_MARK = "=== fabricops nccl -J result ==="
_LAYER = {"ib": "InfiniBand", "roce": "Ethernet"}


# --- NCCL's INFO lines -------------------------------------------------------------------------

#: ``HOST:PID:TID [DEV] NCCL INFO ...`` (NCCL src/debug.cc); the prefix is absent when a log was
#: copied without it.
_PREFIX = re.compile(r"^(?:(?P<host>[^\s:]+):\d+:\d+\s+\[\d+\]\s+)?NCCL INFO\s+(?P<msg>.*)$")
#: ``NET/%s : GPU Direct RDMA %s for HCA %d '%s'`` (NCCL src/graph/topo.cc); older NCCL
#: (transport/net_ib.cc) printed only Disabled, with `` (no module)``; the SHARP plugin prints
#: ``GPU Direct RDMA (DMABUF) enabled``.
_GDR = re.compile(
    r"^NET/(?P<net>\S+)\s*: GPU Direct RDMA (?:\((?P<how>[^)]*)\) )?"
    r"(?P<state>Enabled|Disabled|enabled|disabled)"
    r"\s+for HCA (?P<index>\d+) '(?P<hca>[^']+)'(?P<rest>.*)$"
)
_DMABUF = re.compile(r"^DMA-BUF is available on GPU device (?P<gpu>\d+)")
#: ``Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA`` (older: ``Channel 00 : ...``)
_CHANNEL = re.compile(r"^Channel \d+(?:/\d+)? : .*\bvia NET/(?P<net>[^/\s]+)/(?P<index>\d+)(?P<gdr>/GDRDMA)?")


@dataclass
class GdrLine:
    host: str | None
    net: str  #: "IB", "Socket", "IBext_v8", ...
    index: int  #: NCCL's net device index
    hca: str
    enabled: bool
    line: str


@dataclass
class NcclInfo:
    gdr: list[GdrLine] = field(default_factory=list)
    dmabuf: dict[str | None, set[int]] = field(default_factory=dict)  #: host -> GPUs with DMA-BUF
    #: (host, net index) -> [channels with GDRDMA, channels without]
    channels: dict[tuple[str | None, int], list[int]] = field(default_factory=dict)


def parse_nccl_info(text: str) -> NcclInfo:
    """The GPUDirect RDMA evidence in NCCL's ``NCCL_DEBUG=INFO`` output (any other line is ignored)."""
    info = NcclInfo()
    for raw in (text or "").splitlines():
        s = re.sub(r"^\[\d+,\d+\]<(?:stdout|stderr)>:", "", raw.strip())  # mpirun --tag-output
        m = _PREFIX.match(s)
        if not m:
            continue
        host, msg = m.group("host"), m.group("msg").strip()
        g = _GDR.match(msg)
        if g:
            info.gdr.append(
                GdrLine(
                    host,
                    g.group("net"),
                    int(g.group("index")),
                    g.group("hca"),
                    g.group("state").lower() == "enabled",
                    s,
                )
            )
            continue
        d = _DMABUF.match(msg)
        if d:
            info.dmabuf.setdefault(host, set()).add(int(d.group("gpu")))
            continue
        c = _CHANNEL.match(msg)
        if c:
            counts = info.channels.setdefault((host, int(c.group("index"))), [0, 0])
            counts[0 if c.group("gdr") else 1] += 1
    return info


# --- launch --------------------------------------------------------------------------------------


def binary(settings: NcclSettings, collective: str) -> str:
    name = f"{collective}_perf"
    return f"{settings.tests_dir.rstrip('/')}/{name}" if settings.tests_dir else name


def nccl_env(n_hosts: int, hca: str | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The NCCL settings every run passes to its ranks; ``extra`` adds or overrides some (the
    multi-scale plan's ``NCCL_MNNVL_ENABLE``, :mod:`fabricops.verify.nccl_scales`)."""
    # INFO with the INIT and NET subsystems: NCCL's default NCCL_DEBUG_SUBSYS is INIT,BOOTSTRAP,ENV
    # (src/debug.cc), and "NET/IB : GPU Direct RDMA Enabled for HCA" is logged under NET only.
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    if n_hosts == 2:
        # Exactly two hosts: NCCL picks Tree, whose busbw formula counts bytes the NICs never carry
        # and can exceed the NIC rate (NVIDIA/nccl-tests#196); Ring measures the fabric.
        env["NCCL_ALGO"] = "Ring"
    if hca:
        env["NCCL_IB_HCA"] = f"={hca}"  # "=" prefix: exact name, one rail (NCCL docs, NCCL_IB_HCA)
    env.update(extra or {})
    return env


def _checked(validator, what: str, value: Any) -> None:
    try:
        validator(what, value)
    except validate.UnsafeValue as exc:
        raise NcclSettingsError(
            f"{exc}; it would reach the NCCL launcher line, so nothing was run."
        ) from None


def check_launch(
    settings: NcclSettings,
    hosts: Sequence[str],
    slots: int,
    collective: str | None = None,
    hcas: Sequence[str] = (),
) -> None:
    """Every value that reaches the launcher line, against the inventory's own patterns
    (:mod:`fabricops.validate`: host names, paths, HCA names, NCCL names and words, counts), and the
    template against :func:`fabricops.verify.expect.launcher_error`. Raises
    :class:`NcclSettingsError` (one sentence; the verify CLI's "invalid input" status)."""
    why = launcher_error(settings.launcher)
    if why:
        raise NcclSettingsError(why)
    if not hosts:
        raise NcclSettingsError("the NCCL launcher line needs at least one host.")
    for h in hosts:
        _checked(validate.hostname, "host name", h)
    _checked(validate.optional_path, "fabricops_verify_nccl_tests_dir", settings.tests_dir)
    for coll in [collective] if collective is not None else list(settings.collectives):
        if coll not in NCCL_COLLECTIVES:
            raise NcclSettingsError(
                f"fabricops_verify_nccl_collectives: unknown collective {coll!r}; "
                f"choose from {', '.join(NCCL_COLLECTIVES)}."
            )
    if not NCCL_MAX_BYTES_RE.fullmatch(str(settings.max_bytes)):
        raise NcclSettingsError(
            f"fabricops_verify_nccl_max_bytes {settings.max_bytes!r} is not a size such as 1G or 8G."
        )
    _checked(validate.integer(1, 4096), "GPUs per host (the hardware profile's gpu.count)", slots)
    _checked(validate.integer(1, 1 << 20), "ranks", slots * len(hosts))
    for hca in hcas:
        _checked(validate.hca, "HCA", hca)


def preflight(settings: NcclSettings, expects: Mapping[str, HostExpect]) -> None:
    """Before any host is run: every host name, setting, count and planned HCA of the NCCL phase
    can reach the launcher line (:func:`check_launch`), else :class:`NcclSettingsError`."""
    hosts = list(expects)
    slots = next(iter(expects.values())).profile.gpu.count if expects else 1
    hcas = sorted({p.hca for e in expects.values() for p in e.ports if p.hca})
    check_launch(settings, hosts, slots, hcas=hcas)


def build_command(
    settings: NcclSettings,
    hosts: Sequence[str],
    slots: int,
    collective: str,
    hca: str | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """The launcher line for one run: every value is checked (:func:`check_launch`), then
    shell-quoted into a template whose placeholders all stand bare. ``env``: more NCCL settings for
    this run (checked like the others)."""
    check_launch(settings, hosts, slots, collective, [hca] if hca else ())
    env = nccl_env(len(hosts), hca, env)
    for k, v in env.items():
        _checked(validate.nccl_name, "NCCL setting name", k)
        _checked(validate.nccl_ifname, k, v)
    q = shlex.quote
    values = {
        "np": str(slots * len(hosts)),
        "hostslots": q(",".join(f"{h}:{slots}" for h in hosts)),
        "hosts": q(",".join(hosts)),
        "nodes": str(len(hosts)),
        "ppn": str(slots),
        "binary": q(binary(settings, collective)),
        "max_bytes": q(settings.max_bytes),
        "mpi_env": " ".join(f"-x {q(f'{k}={v}')}" for k, v in env.items()),
        "env": " ".join(q(f"{k}={v}") for k, v in env.items()),
        "json": '"$fo_nccl_dir/result.json"',
    }
    line = settings.launcher.format(**values)
    if "{json}" not in settings.launcher:
        return line
    # The -J file lands on the host of rank 0 (this one): a private directory, printed after the run.
    return (
        "fo_nccl_dir=$(mktemp -d /tmp/fabricops-nccl.XXXXXX) || exit 1; "
        f"{line}; fo_rc=$?; printf '\\n%s\\n' {q(JSON_MARK)}; cat \"$fo_nccl_dir/result.json\" 2>/dev/null; "
        'rm -rf "$fo_nccl_dir"; exit $fo_rc'
    )


@dataclass
class RunResult:
    ok: bool
    error: str | None = None  #: why it could not run (one line)
    busbw: float | None = None
    size: int | None = None
    record: Any = None
    text: str = ""
    command: str = ""


def _last_line(res: Mapping[str, Any]) -> str:
    """The line of output that says most: the last one naming a failure or error (mpirun prints its
    own banner after a rank's ``Test CUDA failure``), else the last line that is not a rule."""
    lines = [
        ln.strip()
        for stream in ("stdout", "stderr")
        for ln in str(res.get(stream) or "").splitlines()
        if ln.strip() and not re.fullmatch(r"[-=*#\s]+", ln.strip())
    ]
    telling = [
        ln for ln in lines
        if re.search(r"failure|error|WARN|unable|not enough|Invalid number of GPUs", ln, re.IGNORECASE)
    ]
    if telling:
        # the first two: the cause (nccl-tests' "Invalid number of GPUs: 8 requested but only 7 were
        # found.", ssh's own error) and the line naming the host; mpirun's banner comes after them
        return " / ".join(dict.fromkeys(telling[:2]))[:300]
    if lines:
        return lines[-1][:200]
    return f"exit {res.get('rc')} with no output"


def launch(run, first: str, command: str, settings: NcclSettings, np_: int, n_hosts: int = 0) -> RunResult:
    res = run(first, command, settings.timeout_s)
    text = str(res.get("stdout") or "")
    out, _, json_text = text.partition(f"\n{JSON_MARK}\n")
    rc = res.get("rc")
    if rc in (124, 137):
        return RunResult(
            False,
            f"no result within {settings.timeout_s} s (a hang: NCCL init or a rail that "
            f"passes no traffic, e.g. an MTU mismatch, NVIDIA/nccl#1524); last line: "
            f"{_last_line({'stdout': out, 'stderr': res.get('stderr')})}",
            text=out,
            command=command,
        )
    if rc not in (0, None):
        return RunResult(
            False,
            f"exit {rc}: {_last_line({'stdout': out, 'stderr': res.get('stderr')})}",
            text=out,
            command=command,
        )
    try:
        rec = parse("nccl-tests", json_text if json_text.strip() else out)
    except ParseError as exc:
        return RunResult(
            False,
            f"unreadable output ({exc}); last line: {_last_line({'stdout': out})}",
            text=out,
            command=command,
        )
    rows = rec.results or rec.results_in_place
    if not rec.complete or not rows:
        return RunResult(
            False,
            f"the run did not finish (no '# Avg bus bandwidth' footer); last line: "
            f"{_last_line({'stdout': out})}",
            text=out,
            command=command,
        )
    if rec.ranks is not None and rec.ranks != np_:
        return RunResult(False, f"ran on {rec.ranks} ranks, {np_} were launched", text=out, command=command)
    on = sorted({d.host for d in rec.devices if d.host})
    if n_hosts and on and len(on) != n_hosts:  # e.g. a launcher that put every rank on one host
        return RunResult(
            False,
            f"its ranks ran on {len(on)} host(s) ({', '.join(on)[:120]}), {n_hosts} were asked for",
            text=out,
            command=command,
        )
    top = max(rows, key=lambda r: r.bytes)
    if top.busbw is None:
        return RunResult(False, f"no busbw at the largest size {top.bytes} B", text=out, command=command)
    return RunResult(True, None, top.busbw, top.bytes, rec, out, command)


# --- the plan: ranks, rails, rates -----------------------------------------------------------------


def _layer(e: HostExpect) -> str | None:
    if e.nccl_profile:
        return _LAYER.get(e.nccl_profile)
    return e.profile.hca.link_layer


def _observed(raw: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, float]]:
    res = raw.get("ibstat")
    if not res or res.get("rc") not in (0, None):
        return {}, {}
    try:
        rec = parse("ibstat", res.get("stdout") or "")
    except ParseError:
        return {}, {}
    layers = {f"{ca.name}/{p.port}": p.link_layer for ca in rec.cas for p in ca.ports if p.link_layer}
    seen = {f"{ca.name}/{p.port}": float(p.rate) for ca in rec.cas for p in ca.ports if p.rate}
    return layers, seen


def plan_rails(
    expects: Mapping[str, HostExpect], raws: Mapping[str, Any]
) -> tuple[dict[str, dict[str, float]], str]:
    """host -> {HCA: planned rate Gb/s} of the ports NCCL uses (the NCCL profile's link layer; the
    hardware profile's when no NCCL profile is planned), and the link layer. The rate is the cabling
    entry's speed, else the profile's HCA rate for its own link layer, else what ibstat reports."""
    out: dict[str, dict[str, float]] = {}
    layer = None
    for h, e in expects.items():
        layer = _layer(e)
        layers, seen = _observed(raws.get(h, {}))
        rails: dict[str, float] = {}
        for p in e.ports:
            if layer is None or (p.link_layer or layers.get(p.device)) != layer:
                continue
            rate = None
            if p.speed:
                try:
                    rate = float(rates.port_rate(layer, p.speed, "4X"))
                except (ValueError, KeyError):
                    rate = None
            if rate is None and layer == e.profile.hca.link_layer:
                rate = float(e.profile.hca.rate_gbps)
            rate = rate or seen.get(p.device)
            if rate:
                rails[p.hca] = max(rate, rails.get(p.hca, 0.0))
        out[h] = dict(sorted(rails.items(), key=lambda kv: _natural(kv[0])))
    return out, layer or "none"


# --- the phase ---------------------------------------------------------------------------------------


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def phase(
    run,
    expects: Mapping[str, HostExpect],
    raws: Mapping[str, Any],
    settings: NcclSettings | FabricopsError | ValueError,
    say: Callable[[str], None] = lambda _m: None,
    domains: Mapping[str, str | None] | None = None,
    unhealthy_domains: Mapping[str, str] | None = None,
) -> list[CheckResult]:
    """The NCCL phase. Hosts whose profile has a multi-node NVLink domain (GB200/GB300 NVL72) run the
    multi-scale plan instead of one run across all hosts (:mod:`fabricops.verify.nccl_scales`):
    ``domains`` is host -> its NVLink domain (``fabricops_nvlink_domain``), ``unhealthy_domains``
    domain -> why it is not healthy (its MNNVL runs are then not started)."""
    hosts = list(expects)
    who = ",".join(hosts) or "-"
    results: list[CheckResult] = []

    def error(device: str | None, msg: str, **kw: Any) -> list[CheckResult]:
        results.append(CheckResult(CATEGORY, "nccl_busbw", who, device, ERROR, msg, **kw))
        return results

    if isinstance(settings, Exception):
        return error(None, f"NCCL phase not run: {settings}")
    if not hosts:
        return error(None, "NCCL phase not run: no host to run it on")
    profiles = {e.profile.name for e in expects.values()}
    if len(profiles) > 1:
        return error(
            None,
            f"NCCL phase not run: hosts have different hardware profiles ({', '.join(sorted(profiles))})",
        )
    exp0 = expects[hosts[0]]
    if exp0.profile.nvlink_domain is not None:
        from fabricops.verify import nccl_scales

        return nccl_scales.phase(run, expects, raws, settings, say, domains or {}, unhealthy_domains or {})
    slots = exp0.profile.gpu.count
    rails, layer = plan_rails(expects, raws)
    try:
        pred = model.predict({h: list(r.values()) for h, r in rails.items()}, exp0.profile.gpu.nvlink)
        floor = model.floor(pred, exp0.profile)
    except ValueError as exc:
        bare = [h for h, r in rails.items() if not r]
        why = (
            f"{', '.join(bare)} plan no {layer} port for NCCL (fabricops_cabling / nccl_profile_name)"
            if bare
            else str(exc)
        )
        return error(None, f"NCCL phase not run: no busbw expectation: {why}")
    band = model.band()
    say(f"nccl: {len(hosts)} hosts x {slots} ranks; predicted busbw {pred.basis}; floor {floor.value:g} GB/s")
    first_ok: RunResult | None = None
    for coll in settings.collectives:
        cmd = build_command(settings, hosts, slots, coll)
        say(f"nccl: {coll} across {len(hosts)} hosts")
        rr = launch(run, hosts[0], cmd, settings, slots * len(hosts), len(hosts))
        details = {"command": cmd, "prediction": pred.basis, "rails": rails, "floor_basis": floor.basis}
        if not rr.ok:
            results.append(
                CheckResult(
                    CATEGORY,
                    "nccl_busbw",
                    who,
                    coll,
                    ERROR,
                    f"{coll}_perf across {who}: could not run: {rr.error}",
                    details=details,
                )
            )
            continue
        first_ok = first_ok or rr
        results.append(_judge(coll, who, rr, pred, floor, band, len(hosts), details))
        if results[-1].status == FAIL and rr.busbw is not None and rr.busbw < band.low * pred.busbw_gbs:
            subset = isolate(run, expects, rails, settings, coll, slots, pred, band, say)
            results.extend(subset)
            _name_slowest(results[-1 - len(subset)], subset)
    if first_ok is not None:
        results.extend(judge_gdr(first_ok.text, expects, raws))
    return results


def _judge(coll, who, rr: RunResult, pred, floor, band, n_hosts, details, device=None) -> CheckResult:
    """busbw against ``floor`` and, when the model predicts the run (``pred`` and ``band``; None for a
    published floor alone), the band around its prediction. ``device``: the result's device (the
    collective unless given)."""
    b = float(rr.busbw or 0.0)
    device = device or coll
    rec = rr.record
    details = {**details, "size_bytes": rr.size, "avg_busbw": rec.avg_busbw}
    common = {
        "measured": b,
        "threshold": round(floor.value, 2),
        "op": ">=",
        "unit": "GB/s",
        "source": f"{floor.source}; band: {band.source}" if band else floor.source,
        "details": details,
    }
    where = f"{coll}_perf across {who} ({n_hosts} hosts)"
    wrong = [r for r in (rec.results + rec.results_in_place) if isinstance(r.wrong, int | float) and r.wrong]
    if (rec.out_of_bounds or 0) > 0 or wrong:
        return CheckResult(
            CATEGORY,
            "nccl_busbw",
            who,
            device,
            FAIL,
            f"{where}: wrong results ({rec.out_of_bounds or 0} out-of-bounds values, "
            f"{len(wrong)} rows with #wrong)",
            cause="data corrupted in flight: a failing GPU, NVLink or NIC; re-run per rail "
            "and check Xid errors",
            **common,
        )
    if band is None or pred is None:
        verdict = "ok"
        fig = f"busbw {b:.1f} GB/s at {rr.size} B (floor {floor.value:.1f}: {floor.basis})"
    else:
        verdict = band.judge(b, pred.busbw_gbs)
        lo, hi = band.low * pred.busbw_gbs, band.high * pred.busbw_gbs * (1 + band.above_tolerance)
        fig = (
            f"busbw {b:.1f} GB/s at {rr.size} B (floor {floor.value:.1f}: {floor.basis}; model "
            f"{pred.busbw_gbs:.1f}, band {lo:.1f}-{hi:.1f})"
        )
    if verdict == "high" and pred is not None and pred.rail_gbps is not None:
        return CheckResult(
            CATEGORY,
            "nccl_busbw",
            who,
            device,
            FAIL,
            f"{where}: {fig}: busbw exceeds what the NICs carry -- was Tree used on two nodes?",
            cause="a busbw above the rails' rate is not a fabric measurement: on two hosts "
            "NCCL_ALGO=Ring must reach every rank (nccl-tests#196); or the plan names fewer "
            "or slower rails than the hosts have",
            **common,
        )
    if b < floor.value or verdict == "low":
        return CheckResult(
            CATEGORY,
            "nccl_busbw",
            who,
            device,
            FAIL,
            f"{where}: {fig}: too low",
            cause="a slow rail or host: see the nccl_rail re-runs; or GPUDirect RDMA off "
            "(nccl_gdr), a lossy RoCE path, a downtrained PCIe link",
            **common,
        )
    return CheckResult(CATEGORY, "nccl_busbw", who, device, PASS, f"{where}: {fig}", **common)


# --- naming the slow part -------------------------------------------------------------------------


def isolate(
    run,
    expects,
    rails,
    settings: NcclSettings,
    coll,
    slots,
    pred,
    band,
    say,
    env: Mapping[str, str] | None = None,
) -> list[CheckResult]:
    """Bounded subset re-runs (:data:`MAX_SUBSET_RUNS`): each rail alone across all hosts
    (``NCCL_IB_HCA==HCA``), then each host with a reference host (the first; when every pair with it
    is slow, one more pair without it tells whether the reference is the slow one). ``env``: NCCL
    settings every re-run keeps (``NCCL_MNNVL_ENABLE=0`` where NVLink would otherwise carry them)."""
    hosts = list(expects)
    out: list[CheckResult] = []
    budget = [MAX_SUBSET_RUNS]

    def one(subset: Sequence[str], hca: str | None) -> RunResult | None:
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        cmd = build_command(settings, subset, slots, coll, hca, env)
        return launch(run, subset[0], cmd, settings, slots * len(subset), len(subset))

    common_hcas = [h for h in rails[hosts[0]] if all(h in rails[x] for x in hosts)]
    nv = pred.nvlink_gbs
    for hca in common_hcas:
        expect = min(min(rails[x][hca] for x in hosts) / 8, nv)
        say(f"nccl: re-run {coll} on rail {hca} alone")
        rr = one(hosts, hca)
        if rr is None:
            break
        out.append(
            _subset_result(
                coll, ",".join(hosts), hca, rr, expect, band, f"rail {hca} alone across {len(hosts)} hosts"
            )
        )
    if len(hosts) >= 3:
        ref = hosts[0]
        pair_rates = {}
        for h in hosts[1:]:
            sub = {x: list(rails[x].values()) for x in (ref, h)}
            expect = model.predict(sub, expects[ref].profile.gpu.nvlink).busbw_gbs
            say(f"nccl: re-run {coll} on {ref} + {h}")
            rr = one([ref, h], None)
            if rr is None:
                out.append(
                    CheckResult(
                        CATEGORY,
                        "nccl_rail",
                        h,
                        None,
                        ERROR,
                        f"{h}: not re-run with {ref}: the bound of {MAX_SUBSET_RUNS} subset "
                        "runs is spent (docs/verify.md)",
                    )
                )
                continue
            pair_rates[h] = rr
            out.append(_subset_result(coll, h, None, rr, expect, band, f"{h} with reference {ref}"))
        slow = [r for r in out if r.check == "nccl_rail" and r.device is None and r.status == FAIL]
        if pair_rates and len(slow) == len(pair_rates) and len(hosts) >= 3:
            a, b = hosts[1], hosts[2]
            sub = {x: list(rails[x].values()) for x in (a, b)}
            expect = model.predict(sub, expects[a].profile.gpu.nvlink).busbw_gbs
            rr = one([a, b], None)
            if rr is not None:
                res = _subset_result(coll, a, None, rr, expect, band, f"{a} with {b} (without {ref})")
                if res.status == PASS:  # the others are fine together: the reference is the slow host
                    for r in slow:
                        r.status, r.message = PASS, r.message + f" (slow only with {ref})"
                    res = CheckResult(
                        CATEGORY,
                        "nccl_rail",
                        ref,
                        None,
                        FAIL,
                        f"{ref}: every pair with it is slow, {a} with {b} is not "
                        f"({res.measured} GB/s): {ref} is the slow host",
                        measured=min(float(p.busbw or 0) for p in pair_rates.values()),
                        unit="GB/s",
                        details=res.details,
                    )
                out.append(res)
    return out


def _subset_result(coll, host, hca, rr: RunResult, expect, band, what) -> CheckResult:
    details = {"command": rr.command, "subset": what, "collective": coll}
    if not rr.ok:
        return CheckResult(
            CATEGORY, "nccl_rail", host, hca, ERROR, f"{what}: could not run: {rr.error}", details=details
        )
    b = float(rr.busbw or 0)
    thr = round(band.low * expect, 2)
    status = PASS if b >= thr else FAIL
    cause = None
    if status == FAIL and hca:
        cause = (f"rail {hca} is slow on its own: check its ports and cables on every host (hca_port, "
                 f"pcie_link, the rail's perftest pairs) and, on RoCE, its lossless class (roce_qos)")
    elif status == FAIL:
        cause = (f"{what} is slow: check {host}'s HCA ports and PCIe links (hca_port, pcie_link) and its "
                 "GPUDirect path (nccl_gdr, pcie_acs, iommu, gpudirect_mechanism)")
    return CheckResult(
        CATEGORY,
        "nccl_rail",
        host,
        hca,
        status,
        f"{what}: {coll} busbw {b:.1f} GB/s (expected >= {thr:.1f}, {band.low:g} x {expect:.1f})",
        measured=b,
        threshold=thr,
        op=">=",
        unit="GB/s",
        cause=cause,
        details=details,
    )


def _name_slowest(main: CheckResult, subset: Sequence[CheckResult]) -> None:
    parts = []
    rails_ = [r for r in subset if r.device and r.status == FAIL and r.measured is not None]
    if rails_:
        worst = min(rails_, key=lambda r: r.measured / (r.threshold or 1))
        parts.append(f"slowest rail {worst.device} ({worst.measured:.1f} GB/s alone)")
    hosts_ = [r for r in subset if r.device is None and r.status == FAIL and r.measured is not None]
    if hosts_:
        worst = min(hosts_, key=lambda r: r.measured)
        parts.append(f"slowest host {worst.host} ({worst.measured:.1f} GB/s)")
    if not parts and subset:
        parts.append(
            "no single rail or host subset is slow on its own (a whole-fabric limit: "
            "congestion, an ISL, or a setting every host shares)"
        )
    if parts:
        main.cause = "; ".join(parts) + (f" -- {main.cause}" if main.cause else "")
        main.details["slowest"] = parts


# --- GPUDirect RDMA from NCCL's log ----------------------------------------------------------------


def _host_of(printed: str | None, hosts: Sequence[str]) -> str | None:
    if printed is None:
        return None
    for h in hosts:
        if printed == h or printed.split(".")[0] == h.split(".")[0]:
            return h
    return None


def judge_gdr(text: str, expects: Mapping[str, HostExpect], raws: Mapping[str, Any]) -> list[CheckResult]:
    hosts = list(expects)
    info = parse_nccl_info(text)
    out: list[CheckResult] = []
    seen: dict[tuple[str, str], GdrLine] = {}
    dmabuf: dict[str, bool] = {}
    channels: dict[tuple[str, int], list[int]] = {}
    for line in info.gdr:
        h = _host_of(line.host, hosts)
        if h is None:
            continue
        key = (h, line.hca)
        if key not in seen or (seen[key].enabled and not line.enabled):
            seen[key] = line  # one Disabled line among the ranks decides
    for printed, gpus in info.dmabuf.items():
        h = _host_of(printed, hosts)
        if h:
            dmabuf[h] = dmabuf.get(h, False) or bool(gpus)
    for (printed, idx), counts in info.channels.items():
        h = _host_of(printed, hosts)
        if h:
            c = channels.setdefault((h, idx), [0, 0])
            c[0] += counts[0]
            c[1] += counts[1]
    for h in hosts:
        mine = sorted(
            ((hca, ln) for (hh, hca), ln in seen.items() if hh == h), key=lambda kv: _natural(kv[0])
        )
        if not mine:
            out.append(
                CheckResult(
                    CATEGORY,
                    "nccl_gdr",
                    h,
                    None,
                    ERROR,
                    f"{h}: no 'GPU Direct RDMA ... for HCA' line from this host in NCCL's log "
                    "(NCCL_DEBUG=INFO did not reach its ranks, or the ranks printed no host "
                    "prefix): GPUDirect RDMA unproven (failing closed)",
                )
            )
            continue
        peermem = _peermem_loaded(raws.get(h, {}))
        for hca, ln in mine:
            c = channels.get((h, ln.index), [0, 0])
            details = {
                "line": ln.line,
                "net": ln.net,
                "dmabuf": dmabuf.get(h, False),
                "channels_gdrdma": c[0],
                "channels_without": c[1],
            }
            if ln.enabled and not (c[1] and not c[0]):
                out.append(
                    CheckResult(
                        CATEGORY,
                        "nccl_gdr",
                        h,
                        hca,
                        PASS,
                        f"{h} {hca}: NCCL reports GPU Direct RDMA Enabled"
                        + (f" ({c[0]} channels via GDRDMA)" if c[0] else ""),
                        details=details,
                    )
                )
                continue
            if ln.enabled:
                msg = (
                    f"{h} {hca}: GPU Direct RDMA Enabled but none of its {c[1]} channels uses it (no /GDRDMA)"
                )
                cause = (
                    f"{h}: NCCL judged the GPU-{hca} PCIe path too far for GPUDirect RDMA: an ACS "
                    "redirect on a bridge between them, a translated IOMMU, or the NIC on the other "
                    "socket; check pcie_acs / iommu (NVIDIA/nccl#1737)"
                )
            else:
                msg = f"{h} {hca}: NCCL reports GPU Direct RDMA Disabled (NET/{ln.net})"
                if peermem:
                    cause = (
                        f"{h}: nvidia_peermem is loaded but NCCL cannot use it for {hca} (not registered "
                        "with the IB core, NVIDIA/nccl#1939): reload it after openibd (gpudirect role)"
                    )
                elif dmabuf.get(h):
                    cause = (
                        f"{h}: the GPU offers DMA-BUF but {hca}'s driver does not take it (MLNX_OFED/"
                        "rdma-core or kernel < 5.12) and nvidia_peermem is not loaded: run the "
                        "gpudirect role"
                    )
                else:
                    cause = (
                        f"{h}: neither nvidia_peermem nor DMA-BUF (the open NVIDIA kernel module, "
                        "kernel >= 5.12) is available for {hca}: run the gpudirect role; NCCL stages "
                        "through host memory"
                    )
            out.append(CheckResult(CATEGORY, "nccl_gdr", h, hca, FAIL, msg, cause=cause, details=details))
    return out


def _peermem_loaded(raw: Mapping[str, Any]) -> bool:
    res = raw.get("lsmod")
    if not res or res.get("rc") not in (0, None):
        return False
    return any(
        ln.split()[:1] in (["nvidia_peermem"], ["nv_peer_mem"]) for ln in str(res.get("stdout")).splitlines()
    )
