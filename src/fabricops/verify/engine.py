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

from fabricops.errors import FabricopsError
from fabricops.verify import hostchecks, pairs
from fabricops.verify.expect import HostExpect, host_expect
from fabricops.verify.result import ERROR, CheckResult, passed

ONLY = ("hosts", "pairs", "gpus")


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


@dataclass
class VerifyRun:
    hosts: list[str]
    profile: str | None
    only: str | None
    results: list[CheckResult] = field(default_factory=list)
    pairs: pairs.PairRun | None = None
    wall_s: float = 0.0
    host_phase_s: float = 0.0

    @property
    def ok(self) -> bool:
        return passed(self.results)


def collect(run: pairs.RunFn, expect: HostExpect, only: str | None, timeout: float) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for key, cmd in hostchecks.commands(expect, only).items():
        raw[key] = dict(run(expect.host, cmd, timeout))
    return raw


def baseline_from_report(data: Mapping[str, Any]) -> dict[str, dict[str, dict[str, int]]]:
    """Error counters of a previous JSON report (``--json``) as a baseline."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in data.get("results") or []:
        absolute = (r.get("details") or {}).get("absolute")
        if r.get("check") == "error_counters" and r.get("device") and isinstance(absolute, dict):
            out.setdefault(r["host"], {})[r["device"]] = {k: v for k, v in absolute.items() if v is not None}
    return out


def verify(
    run: pairs.RunFn,
    hosts: Sequence[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    opts: Options,
    switch_link_layers: Mapping[str, str] | None = None,
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
            raws[h] = raw
            if opts.only != "pairs":
                res = hostchecks.evaluate(expects[h], raw, opts.only)
                vr.results.extend(res)
                bad = [r for r in res if not r.ok]
                say(f"{h}: {len(res) - len(bad)}/{len(res)} checks passed")
    vr.host_phase_s = time.monotonic() - th

    if opts.only in (None, "pairs"):
        vr.pairs = _pair_phase(run, expects, raws, vr, opts, say)
    vr.wall_s = time.monotonic() - t0
    return vr


def _pair_phase(run, expects, raws, vr: VerifyRun, opts: Options, say) -> pairs.PairRun | None:
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
    rails = {
        h: [p.device for p in expects[h].rails(hostchecks.observed_link_layers(raws.get(h, {})))]
        for h in names
    }
    counts = {len(v) for v in rails.values()}
    if 0 in counts or len(counts) > 1:
        detail = ", ".join(f"{h}: {len(v)}" for h, v in rails.items())
        vr.results.append(
            CheckResult(
                "pairs",
                "schedule",
                ",".join(names),
                None,
                ERROR,
                f"cannot plan rails: compute ports per host differ or are unknown ({detail})",
            )
        )
        return None
    exp0 = expects[names[0]]
    addresses = {h: str(expects[h].address) for h in names}
    pr = pairs.run_pairs(
        run,
        names,
        rails,
        addresses,
        exp0.profile,
        exp0.rate_gbps,
        exp0.perftest,
        progress=say,
        serial=opts.serial,
        rerun=opts.rerun,
    )
    pairs.annotate(pr.results, vr.results, n_hosts=len(names))
    vr.results.extend(pr.results)
    return pr
