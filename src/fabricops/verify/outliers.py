"""Outliers, not only floors: a pair that passes its floor but sits far below its peers on the rail.

A floor (``pairs.rail_threshold``: the profile's published figure or 90 % of the port rate) catches a
broken path; it does not catch a pair that runs at 91 % of line rate on a rail where every other pair
runs at 98 % -- a cable at the edge of its budget, a port retraining, a hot switch buffer. The rule
is NVIDIA ClusterKit's pairwise evaluation (NVIDIA HPC-X Software Toolkit, "Running ClusterKit",
ClusterKit Evaluation Logic for Pairwise Tests, https://docs.nvidia.com/networking/display/hpcxv224/
running+clusterkit): "Message bandwidths less than 93 % (by default) of the maximum are deemed
'bad'"; "message latencies that are 2.1 times (by default) above the minimum are considered 'bad'"
(its ``--btol`` / ``--ltol`` tolerances). We chose it over a statistical rule (median - k*MAD) because
operators know it, it needs no k, and it reads as one sentence ("71 % of the best on the rail").

:func:`judge` compares, per rail (the same HCA port name, link layer and pass threshold, i.e. the
same rate), each bandwidth test with the best bandwidth there and each latency test with the best
latency there. It needs at least :data:`MIN_RESULTS` measured results of a test on a rail; with
fewer it gives no outlier verdict and says so (a ``skip`` result). An outlier is a ``fail`` result
of its own (check ``outlier``): the result model has no warning level, and ClusterKit calls such a
pair bad; the pair's own floor result stays as measured. ``fabricops_verify_outliers: false`` turns
the rule off (one ``skip`` result says so); ``{bw_percent, lat_factor, min_results}`` tunes it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricops.verify.result import ERROR, FAIL, PASS, SKIP, CheckResult

__all__ = ["CHECK", "MIN_RESULTS", "SOURCE", "VARIABLE", "Rules", "RulesError", "judge", "rules_from"]

CHECK = "outlier"
VARIABLE = "fabricops_verify_outliers"
#: ClusterKit's defaults (HPC-X docs, Running ClusterKit: pairwise evaluation logic)
BW_PERCENT = 93.0
LAT_FACTOR = 2.1
#: the fewest measured results of one test on one rail that give a "best" worth comparing with: with
#: two, the slower of a pair of pairs is "the outlier" of nothing but the other
MIN_RESULTS = 3
SOURCE = (
    "NVIDIA ClusterKit pairwise evaluation (HPC-X docs, Running ClusterKit): bandwidth below 93 % of the "
    "best, latency above 2.1x the best on the rail is bad"
)


@dataclass(frozen=True)
class Rules:
    enabled: bool = True
    bw_percent: float = BW_PERCENT  #: a bandwidth below this percentage of the rail's best is an outlier
    lat_factor: float = LAT_FACTOR  #: a latency above this multiple of the rail's best is an outlier
    min_results: int = MIN_RESULTS

    @property
    def source(self) -> str:
        if (self.bw_percent, self.lat_factor) == (BW_PERCENT, LAT_FACTOR):
            return SOURCE
        return (
            f"{VARIABLE}: bandwidth below {self.bw_percent:g} % of the best, latency above "
            f"{self.lat_factor:g}x the best on the rail (ClusterKit's rule, its defaults 93 % and 2.1x)"
        )


class RulesError(ValueError):
    """``fabricops_verify_outliers`` is not a rule; the message is one sentence naming the key."""


#: Ansible's boolean spellings (an INI inventory or -e gives text)
_TRUE, _FALSE = ("1", "true", "yes", "on", "y", "t"), ("0", "false", "no", "off", "n", "f")


def _bool(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    return value


def _number(value: Any, key: str, lo: float, hi: float, integer: bool = False) -> float:
    if isinstance(value, str):  # text from an INI inventory or -e
        with contextlib.suppress(ValueError):
            value = float(value.strip())
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and integer and int(value) != value:
        ok = False
    if not ok or not lo <= value <= hi:
        kind = "an integer" if integer else "a number"
        raise RulesError(f"{VARIABLE}.{key} is {value!r}; use {kind} from {lo:g} to {hi:g}.")
    return int(value) if integer else float(value)


def rules_from(value: Any) -> Rules:
    """``fabricops_verify_outliers`` (unset / true: ClusterKit's defaults; false: off; a mapping of
    ``bw_percent`` (50-100), ``lat_factor`` (1-100), ``min_results`` (3-10000)) as :class:`Rules`."""
    value = _bool(value)
    if value is None or value is True:
        return Rules()
    if value is False:
        return Rules(enabled=False)
    if not isinstance(value, Mapping):
        raise RulesError(
            f"{VARIABLE} is {value!r}; use false, true or a mapping of bw_percent, lat_factor, min_results."
        )
    unknown = sorted(set(value) - {"enabled", "bw_percent", "lat_factor", "min_results"})
    if unknown:
        raise RulesError(
            f"{VARIABLE} has unknown key(s) {', '.join(map(str, unknown))}; use bw_percent, lat_factor, "
            "min_results, enabled."
        )
    enabled = _bool(value.get("enabled", True))
    if not isinstance(enabled, bool):
        raise RulesError(f"{VARIABLE}.enabled is {enabled!r}; use true or false.")
    return Rules(
        enabled=enabled,
        bw_percent=_number(value.get("bw_percent", BW_PERCENT), "bw_percent", 50, 100),
        lat_factor=_number(value.get("lat_factor", LAT_FACTOR), "lat_factor", 1, 100),
        min_results=int(_number(value.get("min_results", MIN_RESULTS), "min_results", 3, 10000, True)),
    )


def _kind(check: str) -> str | None:
    return "bw" if check.endswith("_bw") else "lat" if check.endswith("_lat") else None


def _measured(r: CheckResult) -> float | None:
    v = r.measured
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        return None
    return float(v)


def _rail(r: CheckResult) -> str:
    name = r.details.get("rail_name")
    return str(name) if name else f"rail {r.details.get('rail', '?')}"


def _group_key(r: CheckResult) -> tuple[str, str, str, Any, Any]:
    # the same HCA port (rail name, across switches: a two-tier fabric has one rail per leaf), link
    # layer and pass threshold (the rail's rate decides it), and the same test
    return (_rail(r), str(r.details.get("link_layer") or ""), r.check, r.threshold, r.unit)


def judge(results: Sequence[CheckResult], hostvars: Mapping[str, Any] | None = None) -> list[CheckResult]:
    """The outlier verdicts of the pair results in ``results`` (new results; the measured pair results
    get ``details.outlier`` in place). ``hostvars``: where ``fabricops_verify_outliers`` is read."""
    measured = [
        r
        for r in results
        if r.category == "pairs"
        and r.status in (PASS, FAIL)
        and _kind(r.check)
        and _measured(r) is not None
    ]
    if not measured:
        return []
    try:
        rules = rules_from((hostvars or {}).get(VARIABLE))
    except RulesError as exc:
        return [CheckResult("pairs", CHECK, "-", None, ERROR, f"outliers not judged: {exc}", source=VARIABLE)]
    if not rules.enabled:
        return [
            CheckResult(
                "pairs", CHECK, "-", None, SKIP,
                f"outliers not judged ({VARIABLE}: false): only the floors decide", source=VARIABLE,
            )
        ]
    groups: dict[tuple[str, str, str, Any, Any], list[CheckResult]] = {}
    for r in measured:
        groups.setdefault(_group_key(r), []).append(r)
    out: list[CheckResult] = []
    too_few: dict[tuple[str, str], list[str]] = {}
    judged: dict[tuple[str, str], list[str]] = {}
    hosts: dict[tuple[str, str], set[str]] = {}
    for key, rs in groups.items():
        rail, layer, check, _thr, unit = key
        where = (rail, layer)
        hosts.setdefault(where, set()).update(h for r in rs for h in r.host.split("<->"))
        if len(rs) < rules.min_results:
            too_few.setdefault(where, []).append(f"{len(rs)} {check}")
            continue
        out.extend(_outliers(rs, rail, check, unit or "", rules))
        judged.setdefault(where, []).append(f"{len(rs)} {check}")
    _blame(out)
    for where in sorted(set(too_few) | set(judged)):
        rail, layer = where
        members = ",".join(sorted(hosts[where]))
        on = f"rail {rail}" + (f" ({layer})" if layer else "")
        if where in too_few:
            out.append(
                CheckResult(
                    "pairs", CHECK, members, rail, SKIP,
                    f"{on}: {' and '.join(too_few[where])} result(s); an outlier verdict needs at least "
                    f"{rules.min_results} of a test on the rail: no outlier verdict there",
                    source=rules.source, details={"rail_name": rail, "link_layer": layer},
                )
            )
        bad = [r for r in out if r.status == FAIL and r.details.get("rail_name") == rail
               and r.details.get("link_layer") == layer]
        if where in judged and not bad:  # the evidence that the rail was judged (outliers speak for it)
            out.append(
                CheckResult(
                    "pairs", CHECK, members, rail, PASS,
                    f"{on}: {' and '.join(judged[where])} results, none an outlier "
                    f"(ClusterKit: {rules.bw_percent:g}% of the best bandwidth, {rules.lat_factor:g}x the "
                    "best latency)",
                    measured=0, threshold=0, op="==", unit="outliers",
                    source=rules.source, details={"rail_name": rail, "link_layer": layer},
                )
            )
    return out


def _blame(found: Sequence[CheckResult]) -> None:
    """Name the host that several outliers on a rail share (``pairs.blame``, as for failed floors)."""
    from fabricops.verify.pairs import blame

    blamed = blame([r for r in found if r.status == FAIL])
    for r in found:
        a, b = r.details.get("client"), r.details.get("server")
        rail = r.details.get("rail")
        who = [h for h in (a, b) if (h, rail) in blamed]
        if r.status != FAIL or not who:
            continue
        devs = (r.device or "").split("<->")
        dev = devs[0] if who[0] == a else devs[-1]
        peers = blamed[(who[0], rail)]
        r.details["blamed"] = [who[0]]
        r.cause = (
            f"{who[0]} {dev}: an outlier with {len(peers)} different peers ({', '.join(peers)}); {r.cause}"
        )


def _outliers(rs: Sequence[CheckResult], rail: str, check: str, unit: str, rules: Rules) -> list[CheckResult]:
    kind = _kind(check)
    values = {id(r): _measured(r) for r in rs}
    best_r = max(rs, key=lambda r: values[id(r)]) if kind == "bw" else min(rs, key=lambda r: values[id(r)])
    best = values[id(best_r)]
    out = []
    for r in rs:
        v = values[id(r)]
        if kind == "bw":
            pct = 100.0 * v / best
            bad = pct < rules.bw_percent
            ratio_text = f"{pct:.0f}% of the best"
            rule = f"ClusterKit {rules.bw_percent:g}% rule"
            measured, threshold, op, ratio_unit = round(pct, 1), rules.bw_percent, ">=", "% of best"
        else:
            factor = v / best
            bad = factor > rules.lat_factor
            ratio_text = f"{factor:.1f}x the best"
            rule = f"ClusterKit {rules.lat_factor:g}x rule"
            measured, threshold, op, ratio_unit = round(factor, 2), rules.lat_factor, "<=", "x best"
        verdict = {
            "best": best, "best_pair": best_r.host, "results": len(rs), "ratio": measured, "outlier": bad
        }
        r.details["outlier"] = verdict
        if not bad or r.status != PASS:
            continue  # a failed floor is reported already; an outlier is a pair that passed it
        cause = (
            f"outlier: {ratio_text} on rail {rail} ({rule}): passes its floor, but the path of this pair "
            "(a cable, port or switch buffer at the edge) or congestion during its test holds it back"
        )
        out.append(
            CheckResult(
                "pairs",
                CHECK,
                r.host,
                r.device,
                FAIL,
                f"{r.host} {r.device}: {check} {v:g} {unit} is {ratio_text} on rail {rail} "
                f"({best:g} {unit}, {best_r.host}; {len(rs)} results); it passes its floor"
                + (f" ({r.op} {r.threshold:g})" if isinstance(r.threshold, int | float) else "")
                + f" but is an outlier ({rule})",
                measured=measured,
                threshold=threshold,
                op=op,
                unit=ratio_unit,
                cause=cause,
                source=rules.source,
                details={
                    "rail": r.details.get("rail"),
                    "rail_name": rail,
                    "link_layer": r.details.get("link_layer"),
                    "client": r.details.get("client"),
                    "server": r.details.get("server"),
                    "test": check,
                    "value": v,
                    **{k: verdict[k] for k in ("best", "best_pair", "results")},
                },
            )
        )
    return out
