"""Reports of a verification run: JSON (schema below), JUnit XML, and the terminal summary.

JSON (``schema: fabricops.verify/1``)::

    {"schema", "observed_from", "generated_at", "valid_until", "ok", "exit_status", "profile", "only",
     "hosts": [..], "not_checked": {host: why}, "wall_s",
     "summary": {"total", "passed", "failed", "errors", "skipped"},
     "pairs": {"rounds", "round_wall_s", "rerun_wall_s", "wall_s", "reruns", "rails"} | null,
     "blamed": [{"host", "rail", "peers"}], "host_verdicts": {host: {"verdict", "why"}},
     "bad_parts": [{"kind", "name", "failed_tests"}],
     "nccl_scales": [{"group", "scale", "collective", "hosts", "mnnvl", "busbw", "floor", "verdict",
                      "cause"}] | null   (NVLink-domain profiles: fabricops.verify.nccl_scales),
     "results": [CheckResult.to_data()...]}

Times are ISO-8601 UTC to the second: ``observed_from`` when the run began to gather evidence,
``generated_at`` when the report was made, ``valid_until`` ``observed_from`` plus the run's validity
(``fabricops verify --valid-for``, default :data:`VALID_FOR_S`).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from fabricops import result as _result
from fabricops.cliopts import terminal_safe, xml_safe
from fabricops.errors import EXIT_FAILED, EXIT_NORUN, EXIT_OK
from fabricops.verify import nccl_scales
from fabricops.verify.pairs import blame
from fabricops.verify.result import ERROR, FAIL, PASS, SKIP, CheckResult

SCHEMA = "fabricops.verify/1"
#: how long a report's verdicts may drive an action by default (``--valid-for``): a health verdict
#: an hour old is what a periodic check (Slurm's HealthCheckInterval, a cron'd verify) leaves behind
VALID_FOR_S = 3600


def summary(results: list[CheckResult]) -> dict[str, int]:
    count = {s: sum(1 for r in results if r.status == s) for s in (PASS, FAIL, ERROR, SKIP)}
    return {
        "total": len(results),
        "passed": count[PASS],
        "failed": count[FAIL],
        "errors": count[ERROR],
        "skipped": count[SKIP],
    }


def hosts_of(r: CheckResult) -> list[str]:
    """The hosts a result is about: one host, a pair ``a<->b``, or a multi-host check ``a,b,c``
    (the NCCL phase, rail consistency)."""
    return [h for pair in r.host.split(",") for h in pair.split("<->") if h]


def part_of(r: CheckResult) -> dict[str, Any] | None:
    """The part a failed pair test is attributed to when isolation named it (a cable between
    switches, or a host's port): ``details["explained_by"]`` (fabricops.verify.rounds.explained_by)."""
    part = r.details.get("explained_by") if isinstance(r.details, dict) else None
    return part if isinstance(part, dict) and part.get("kind") else None


def _on_host(r: CheckResult, host: str) -> bool:
    """Whether a failed result counts against ``host``: its own check, a multi-host check it took part
    in, a pair test that could not run; a failed pair test only through blame (below), never when
    isolation attributed it to a cable."""
    if r.ok:
        return False
    if r.category == "pairs":
        return r.status == ERROR and not part_of(r)
    return True


def host_verdicts(run: Any, not_checked: Any = None) -> dict[str, dict[str, Any]]:
    """host -> {"verdict": pass | fail | not_checked, "why": first reason}: one judgement that the
    terminal table and the JSON report share. A host on the path of a cable that isolation named bad
    passes (the cable fails, as its own result); a host whose port was named fails."""
    not_checked = dict(not_checked or {})
    per: dict[str, list[CheckResult]] = defaultdict(list)
    for r in run.results:
        for h in hosts_of(r):
            per[h].append(r)
    blamed = blame(run.results)
    out: dict[str, dict[str, Any]] = {}
    for h in run.hosts:
        if h in not_checked:
            out[h] = {"verdict": "not_checked", "why": str(not_checked[h])}
            continue
        bad = [r for r in per[h] if _on_host(r, h)]
        rails = sorted(rail for (bh, rail) in blamed if bh == h)
        if not bad and not rails:
            out[h] = {"verdict": "pass", "why": ""}
            continue
        first = bad[0].message.split(": ", 1)[-1] if bad else ""
        if rails:
            first += f"{'; ' if first else ''}blamed by pair tests on rail(s) {', '.join(map(str, rails))}"
        out[h] = {"verdict": "fail", "why": first}
    return out


def bad_parts(run: Any) -> list[dict[str, Any]]:
    """The parts isolation attributed failed pair tests to, with how many failed tests cross each."""
    count: dict[tuple[str, str], int] = defaultdict(int)
    for r in run.results:
        part = None if r.ok else part_of(r)
        if part is not None:
            count[(str(part["kind"]), str(part["name"]))] += 1
    return [{"kind": k, "name": n, "failed_tests": c} for (k, n), c in sorted(count.items())]


def no_verdict(r: CheckResult) -> bool:
    """A result that says no verdict could be reached (``error`` with ``details.no_verdict``: a
    switch not read, a link unproven; fabricops.verify.switchports)."""
    return r.status == ERROR and isinstance(r.details, dict) and bool(r.details.get("no_verdict"))


def exit_status(run: Any, not_checked: Any = None) -> int:
    """1 when a check failed on a host that was reached (its own failure, not a pair with an
    unreached host); else 4 when a host was not checked or there were no hosts; else 0."""
    not_checked = not_checked or {}
    if not run.hosts:
        return EXIT_NORUN
    real = [r for r in run.results if not r.ok and not any(h in not_checked for h in hosts_of(r))]
    if real and all(no_verdict(r) for r in real):
        # a switch that could not be read, a link neither measured nor read healthy: no verdict
        return EXIT_NORUN
    if real:
        return EXIT_FAILED
    if not_checked:
        return EXIT_NORUN
    return EXIT_OK if run.ok else EXIT_FAILED


def _status(run: Any, not_checked: Any, status: int | None) -> int:
    return exit_status(run, not_checked) if status is None else status


def to_data(run: Any, not_checked: Any = None, status: int | None = None) -> dict[str, Any]:
    """``ok`` is true only for a run that checked every host and passed (exit status 0)."""
    pr = run.pairs
    not_checked = dict(not_checked or {})
    status = _status(run, not_checked, status)
    generated = _result.clock()
    observed = getattr(run, "started_at", None) or generated
    return {
        "schema": SCHEMA,
        # when the evidence was gathered and until when its verdicts may drive an action (fabricops
        # act refuses a report past valid_until: a stale verdict never drains a node)
        "observed_from": observed,
        "generated_at": generated,
        "valid_until": valid_until(observed, getattr(run, "valid_for_s", None) or VALID_FOR_S),
        "ok": status == EXIT_OK,
        "exit_status": status,
        "profile": run.profile,
        "only": run.only,
        "hosts": list(run.hosts),
        "not_checked": not_checked,
        "wall_s": round(run.wall_s, 3),
        # how the pair rounds and the NCCL phase ran: over SSH, or as job steps of one Slurm allocation
        "launcher": getattr(run, "launcher", None) or {"kind": "ssh"},
        "summary": summary(run.results),
        "pairs": None
        if pr is None
        else {
            "rounds": pr.rounds,
            "round_wall_s": [round(x, 3) for x in pr.round_wall_s],
            "rerun_wall_s": round(pr.rerun_wall_s, 3),
            "wall_s": round(pr.wall_s, 3),
            "reruns": pr.reruns,
            **_coverage_data(pr),
            "rails": [
                {
                    "index": r.index,
                    "name": r.name,
                    "link_layer": r.link_layer,
                    "switch": r.switch,
                    "rate_gbps": r.rate_gbps,
                    "rate_source": r.rate_source,
                    "hosts": sorted(r.devices),
                    "tclass": r.tos,
                }
                for r in pr.rails
            ],
        },
        "blamed": [
            {"host": h, "rail": rail, "peers": peers}
            for (h, rail), peers in sorted(blame(run.results).items())
        ],
        "host_verdicts": host_verdicts(run, not_checked),
        "bad_parts": bad_parts(run),
        "nccl_scales": nccl_scales.table_rows(run.results) or None,
        "results": [r.to_data() for r in run.results],
    }


def valid_until(observed: str, seconds: float) -> str:
    """``observed`` (ISO-8601 UTC, ``...Z``) plus ``seconds``, in the same form."""
    start = datetime.strptime(observed, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return (start + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _coverage_data(pr: Any) -> dict[str, Any]:
    """The coverage schedule's figures (fabricops.verify.rounds.CoverageRun); all-pairs: mode only."""
    if getattr(pr, "mode", "all-pairs") != "coverage":
        return {"mode": "all-pairs"}
    return {
        "mode": "coverage",
        "lower_bound": pr.lower_bound,
        "followup_rounds": pr.followup_rounds,
        "links_covered": pr.links_covered,
        "links_total": pr.links_total,
        "isolation_rounds": pr.isolation_rounds,
        "findings": list(pr.findings),
        "fabrics": list(pr.fabrics),
    }


def to_json(run: Any, not_checked: Any = None, status: int | None = None) -> str:
    return json.dumps(to_data(run, not_checked, status), indent=2, sort_keys=False, default=str) + "\n"


def to_junit(run: Any, not_checked: Any = None) -> str:
    """JUnit XML: one <testsuite> per category, one <testcase> per result; a host that was not
    checked is one more <error> case (a CI never reads a host it could not reach as passed). Text
    from hosts is made XML 1.0 (control characters shown as ``\\xNN``), so the report always parses."""
    root = ET.Element("testsuites", name="fabricops verify")
    not_checked = dict(not_checked or {})
    if not run.hosts:
        not_checked = {"-": "no host to verify"}
    by_cat: dict[str, list[CheckResult]] = defaultdict(list)
    for r in run.results:
        by_cat[r.category].append(r)
    tot = summary(run.results)
    root.set("tests", str(tot["total"]))
    root.set("failures", str(tot["failed"]))
    root.set("errors", str(tot["errors"]))
    root.set("skipped", str(tot["skipped"]))
    root.set("time", f"{run.wall_s:.3f}")
    if not_checked:
        suite = ET.SubElement(root, "testsuite", name="fabricops.verify.reach", tests=str(len(not_checked)),
                              failures="0", errors=str(len(not_checked)), skipped="0")
        for host, why in sorted(not_checked.items()):
            case = ET.SubElement(suite, "testcase", classname="fabricops.verify.reach", name=host)
            ET.SubElement(case, "error", message=f"not checked: {why}", type="not_checked")
        root.set("tests", str(tot["total"] + len(not_checked)))
        root.set("errors", str(tot["errors"] + len(not_checked)))
    for cat in sorted(by_cat):
        rs = by_cat[cat]
        s = summary(rs)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"fabricops.verify.{cat}",
            tests=str(s["total"]),
            failures=str(s["failed"]),
            errors=str(s["errors"]),
            skipped=str(s["skipped"]),
        )
        for r in rs:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"fabricops.verify.{cat}.{r.check}",
                name=" ".join(x for x in (r.host, r.device) if x),
            )
            wall = r.details.get("wall_s") if isinstance(r.details, dict) else None
            if wall is not None:
                case.set("time", f"{float(wall):.3f}")
            body = _body(r)
            if r.status == FAIL:
                ET.SubElement(case, "failure", message=r.message, type=r.check).text = body
            elif r.status == ERROR:
                ET.SubElement(case, "error", message=r.message, type=r.check).text = body
            elif r.status == SKIP:
                ET.SubElement(case, "skipped", message=r.message)
            else:
                ET.SubElement(case, "system-out").text = body
    ET.indent(root)
    return xml_safe('<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n")


def _body(r: CheckResult) -> str:
    lines = [r.message]
    if r.measured is not None or r.threshold is not None:
        lines.append(f"measured: {r.measured} {r.unit or ''}  threshold: {r.op or ''} {r.threshold}".rstrip())
    if r.cause:
        lines.append(f"likely cause: {r.cause}")
    if r.source:
        lines.append(f"threshold source: {r.source}")
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def terminal(run: Any, not_checked: Any = None, status: int | None = None) -> str:
    """The summary a person reads at a glance. A host that was not reached is NOT CHECKED, never
    "pass"; a host in a check that failed or could not run (its own, or a multi-host check's; a
    pair test only when it could not run or blamed the host) is FAIL, never "pass"; the head says
    PASS only for exit status 0. Control characters from hosts are shown as ``\\xNN``."""
    s = summary(run.results)
    not_checked = dict(not_checked or {})
    status = _status(run, not_checked, status)
    head = {EXIT_OK: "PASS", EXIT_FAILED: "FAIL"}.get(status, "NOT CHECKED")
    if status == EXIT_NORUN and not run.hosts:
        head = "NOTHING CHECKED (no hosts)"
    elif status == EXIT_NORUN and not not_checked:
        head = "NO VERDICT (a switch not read or a link unproven; --accept-unproven to accept it)"
    out = [
        f"fabricops verify: {head}  (profile {run.profile}, {len(run.hosts)} hosts, {s['total']} checks: "
        f"{s['passed']} passed, {s['failed']} failed, {s['errors']} errors, {s['skipped']} skipped) "
        f"in {run.wall_s:.1f} s",
        "",
    ]
    cats = [c for c in ("hosts", "gpus", "cabling", "pairs", "nccl")
            if any(r.category == c for r in run.results)]
    per: dict[str, dict[str, list[CheckResult]]] = defaultdict(lambda: defaultdict(list))
    for r in run.results:
        for h in hosts_of(r):
            per[h][r.category].append(r)
    verdicts = host_verdicts(run, not_checked)
    width = max([4, *(len(h) for h in run.hosts)])
    out.append(f"{'HOST':<{width}}  " + "  ".join(f"{c:<8}" for c in cats) + "  verdict")
    for h in run.hosts:
        cells = []
        for c in cats:
            rs = per[h][c]
            # a failed pair test attributed to a cable is the cable's failure, not this host's
            nbad = sum(1 for r in rs if not r.ok and not (c == "pairs" and part_of(r)))
            cells.append(f"{'ok' if rs and not nbad else ('-' if not rs else f'{nbad} FAIL'):<8}")
        v = verdicts[h]
        verdict = {"pass": "pass", "not_checked": "NOT CHECKED", "fail": "FAIL"}[v["verdict"]]
        if v["why"]:
            verdict += f": {v['why']}"
        out.append(f"{h:<{width}}  " + "  ".join(cells) + f"  {verdict}")
    parts = bad_parts(run)
    if parts:
        out += ["", "BAD PARTS (named by isolation; the hosts at their ends are not failed for them)"]
        out += [f"  {p['kind']} {p['name']}: {p['failed_tests']} failed pair test(s) cross it" for p in parts]
    pr = run.pairs
    pair_rs = [r for r in run.results if r.category == "pairs" and r.check in ("ib_write_bw", "ib_write_lat")]
    if pr is not None and getattr(pr, "mode", "") == "coverage":
        out += [
            "",
            f"COVERAGE ({pr.rounds} rounds"
            + (f" ({pr.followup_rounds} RoCE follow-up)" if pr.followup_rounds else "")
            + f", lower bound {pr.lower_bound}; links covered "
            f"{pr.links_covered}/{pr.links_total}; {pr.isolation_rounds} isolation rounds; "
            f"{pr.wall_s:.1f} s; {pr.reruns} re-run alone)",
        ]
        for fab in pr.fabrics:
            out.append(
                f"  rail {fab['name']}: {fab['fabric']}: {fab['rounds']} rounds (lower bound "
                f"{fab['lower_bound']}), links covered {fab['links_covered']}/{fab['links_total']}"
            )
        out += [f"  isolation: {f}" for f in pr.findings]
    if pr is not None:
        out += ["", f"PAIRS ({pr.rounds} rounds, {pr.wall_s:.1f} s; {pr.reruns} re-run alone)"]
        rows: dict[tuple[str, str], dict[str, CheckResult]] = defaultdict(dict)
        for r in pair_rs:
            rows[(r.host, r.device or "")][r.check] = r
        for (pair, dev), tests in rows.items():
            a, b = pair.split("<->")
            da, db = dev.split("<->")
            cells = []
            for name in ("ib_write_bw", "ib_write_lat"):
                r = tests.get(name)
                if r is None:
                    cells.append(f"{name} -")
                elif r.measured is None:
                    cells.append(f"{name} {r.status.upper()}")
                else:
                    cells.append(f"{name} {_fmt(r.measured)} {r.unit} ({r.op} {_fmt(r.threshold)})")
            ok = all(t.ok for t in tests.values())
            out.append(f"  {a} {da} <-> {b} {db}  " + "  ".join(cells) + f"  {'pass' if ok else 'FAIL'}")
    out += nccl_scales.render_table(nccl_scales.table_rows(run.results))
    fails = [r for r in run.results if not r.ok]
    if fails:
        out += ["", "FAILURES"]
        for r in fails:
            out.append(f"  [{r.category}/{r.check}] {r.message}")
            if r.cause:
                out.append(f"      likely cause: {r.cause}")
    if not_checked:
        out += ["", f"NOT CHECKED: {', '.join(sorted(not_checked))}"]
    skipped = [r for r in run.results if r.status == SKIP]
    if skipped:
        out += ["", "NOT PLANNED (skipped)"]
        out += _not_planned(skipped)
    return terminal_safe("\n".join(out) + "\n")


#: hosts named on a collapsed "not planned" line before "and N more"
NAMED_HOSTS = 6


def _not_planned(skipped: list[CheckResult]) -> list[str]:
    """One line per check and reason, with the count of hosts: "not applicable" grows with hosts x
    devices, and a summary that says the same thing 24 times hides the line that matters. A reason
    held by one host keeps its own message."""
    groups: dict[tuple[str, str, str], list[CheckResult]] = {}
    for r in skipped:
        reason = r.message
        if r.host and reason.startswith(f"{r.host}: "):
            reason = reason[len(r.host) + 2:]
        groups.setdefault((r.category, r.check, reason), []).append(r)
    lines = []
    for (category, check, reason), rs in groups.items():
        hosts = sorted({r.host for r in rs if r.host})
        if len(hosts) <= 1:  # one host (or none): its own message, once
            lines.append(f"  [{category}/{check}] {rs[0].message}")
            continue
        named = ", ".join(hosts[:NAMED_HOSTS])
        if len(hosts) > NAMED_HOSTS:
            named += f" and {len(hosts) - NAMED_HOSTS} more"
        lines.append(f"  [{category}/{check}] {reason} ({len(hosts)} hosts: {named})")
    return lines
