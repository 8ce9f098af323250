"""Diagnose's reports, all derived from the findings (:class:`fabricops.result.Result` s): the exit
status, ``--json``, ``--junit`` and the terminal text.

Exit status (docs/cli.md): 0 every host gave evidence and none shows a fault; 1 a fault was found;
4 no verdict (no host, or a host without evidence and no fault elsewhere: such hosts are listed,
never called healthy).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from fabricops.diagnose.collect import Raw
from fabricops.diagnose.rules import likelihood
from fabricops.errors import EXIT_FAILED, EXIT_NORUN, EXIT_OK
from fabricops.result import Result

#: Evidence without which no port/link verdict can be given: a host without any of these readable
#: (rc 0 and some output) was not examined, whatever else it answered.
CORE_EVIDENCE = ("sysfs", "ibstat", "ibv_devinfo")


def no_evidence(evidence: Mapping[str, Raw]) -> dict[str, str]:
    """host -> why it gave no usable evidence (unreachable, or every core command failed)."""
    out = {}
    for host, raw in evidence.items():
        items = [v for v in raw.values() if isinstance(v, Mapping)]
        if any((raw.get(k) or {}).get("rc") == 0 and str((raw.get(k) or {}).get("stdout") or "").strip()
               for k in CORE_EVIDENCE):
            continue
        if items and all(v.get("rc") == 255 and not str(v.get("stdout") or "").strip() for v in items):
            out[host] = "unreachable over SSH, no evidence"
        elif not items:
            out[host] = "no evidence in the file"
        else:
            out[host] = f"no readable {'/'.join(CORE_EVIDENCE)} (every one failed or was empty)"
    return dict(sorted(out.items()))


def exit_status(findings: Sequence[Result], hosts: Sequence[str], missing: Mapping[str, str]) -> int:
    """1 a fault found; 4 no host, or a host without evidence and no fault elsewhere; 0 healthy."""
    if any(not f.ok for f in findings):
        return EXIT_FAILED
    if not hosts or missing:
        return EXIT_NORUN
    return EXIT_OK


def finding_data(finding: Result) -> dict[str, Any]:
    """A finding as ``--json`` writes it: the result's data (fabricops.result.Result.to_data: component,
    severity, action, evidence, observed_at, ...) and, for the readers of the finding record
    (docs/diagnose.md), ``kind`` (the check), ``symptom`` (the message), ``remedy`` (the action) and
    ``likelihood``."""
    data = finding.to_data()
    data.update(
        kind=finding.check, symptom=finding.message, remedy=finding.action, likelihood=likelihood(finding)
    )
    return data


def to_json(
    findings: Sequence[Result], hosts: Sequence[str], notes: Sequence[str] = (),
    missing: Mapping[str, str] | None = None,
) -> str:
    missing = dict(missing or {})
    status = exit_status(findings, hosts, missing)
    return (
        json.dumps(
            {
                "hosts": list(hosts),
                "healthy": status == EXIT_OK,
                "exit_status": status,
                "not_checked": missing,
                "notes": list(notes),
                "findings": [finding_data(f) for f in findings],
            },
            indent=2,
        )
        + "\n"
    )


def to_junit(
    findings: Sequence[Result], hosts: Sequence[str], missing: Mapping[str, str] | None = None
) -> str:
    """One test case per host: a failure per finding, an error for a host without evidence."""
    import xml.etree.ElementTree as ET

    missing = dict(missing or {})
    suite = ET.Element("testsuite", name="fabricops diagnose")
    by_host: dict[str, list[Result]] = {}
    for f in findings:
        by_host.setdefault(f.host, []).append(f)
    failures = errors = 0
    for host in sorted(set(hosts) | set(by_host)) or ["-"]:
        case = ET.SubElement(suite, "testcase", classname="fabricops.diagnose", name=host)
        if host in missing or host == "-":
            errors += 1
            ET.SubElement(case, "error", message="not checked").text = missing.get(host, "no hosts")
        for f in by_host.get(host, []):
            failures += 1
            el = ET.SubElement(case, "failure", message=f.cause or f.message, type=f.check)
            el.text = "\n".join([f"symptom: {f.message}", *(f"evidence: {e}" for e in f.evidence),
                                 f"remedy: {f.action}"])
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return ET.tostring(suite, encoding="unicode") + "\n"


def terminal(
    findings: Sequence[Result], hosts: Sequence[str], notes: Sequence[str] = (),
    missing: Mapping[str, str] | None = None,
) -> str:
    missing = dict(missing or {})
    lines = []
    examined = [h for h in hosts if h not in missing]
    if not findings and examined and not missing:
        lines.append(f"no finding on {', '.join(hosts)}: the evidence matches a healthy fabric")
    elif not findings and examined:
        lines.append(f"no finding on {', '.join(examined)}; the other hosts gave no evidence, so no verdict")
    elif not findings:
        lines.append("no evidence from any host: no verdict")
    for n, f in enumerate(findings, 1):
        lines.append(f"{n}. [{f.host}{' ' + f.device if f.device else ''}] {f.cause}")
        lines.append(f"   symptom:  {f.message}")
        for e in f.evidence:
            lines.append(f"   evidence: {e}")
        lines.append(f"   remedy:   {f.action}")
    for host, why in missing.items():
        lines.append(f"NOT CHECKED: {host}: {why}")
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines) + "\n"
