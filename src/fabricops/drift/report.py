"""ansible-runner events of a check-mode run -> a drift report (pure Python, no Ansible needed).

A check-mode run with ``--diff`` reports every task that *would* change something as ``changed``
and, for modules that support it, a ``diff`` with the current state (``before``) and the declared
one (``after``). This module reads the event stream (``runner_on_ok`` / ``runner_on_failed`` /
``runner_on_unreachable`` / ``playbook_on_stats``) and turns it into one :class:`DriftItem` per
host, task and loop item, with the changed lines paired by key (``pfc: 0,0,0,0,0,0,0,0`` ->
``pfc: 0,0,0,1,0,0,0,0``; ``NCCL_IB_TC=96`` -> ``NCCL_IB_TC=106``).

Handlers are not drift (they follow from a change already reported) and are left out. Secrets never
reach the report: module arguments are never copied, results hidden by ``no_log`` are reported as
hidden, and any line whose key looks like a credential has its value replaced
(:func:`fabricops.redact.redact`).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any
from xml.etree import ElementTree as ET

from fabricops.errors import EXIT_DRIFT, EXIT_NORUN, EXIT_OK
from fabricops.redact import REDACTED, SECRET_KEY, redact

_KEYED = re.compile(r"^\s*(?P<key>[^:=]+?)\s*(?P<sep>[:=])\s?(?P<value>.*)$")
HIDDEN = "(hidden by no_log)"


@dataclass(frozen=True)
class Change:
    """One drifted value: ``key`` is the setting (``pfc``, ``NCCL_IB_TC``, a file line), ``before``
    what the host or switch has now, ``after`` what the inventory declares (``None``: absent)."""

    key: str
    before: str | None
    after: str | None


@dataclass
class DriftItem:
    host: str
    task: str
    role: str | None = None
    item: str | None = None  #: the loop item's label (a netdev, a port), when the task loops
    action: str | None = None  #: module name (fabricops.fabric.mlnx_qos, ansible.builtin.template, ...)
    changes: list[Change] = field(default_factory=list)
    note: str | None = None  #: why there is no before/after (module returned no diff, no_log)

    def title(self) -> str:
        where = f"{self.role} : {self.task}" if self.role else self.task
        return f"{where} [{self.item}]" if self.item else where


@dataclass
class DriftReport:
    check_mode: bool = True
    items: list[DriftItem] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  #: every host or switch the run reported on
    failed: dict[str, str] = field(default_factory=dict)  #: host -> first failure message
    unreachable: dict[str, str] = field(default_factory=dict)  #: host -> message
    status: str = "successful"  #: ansible-runner's status (successful, failed, timeout, canceled)
    rc: int = 0  #: ansible-playbook's exit status
    #: hosts the playbook targets (ansible-playbook --list-hosts); None: not known
    targets: list[str] | None = None

    @property
    def run_complete(self) -> bool:
        """ansible-playbook ran to its end with status 0."""
        return self.status == "successful" and self.rc == 0

    @property
    def run_ok(self) -> bool:
        return not self.failed and not self.unreachable and self.run_complete

    @property
    def unseen(self) -> list[str]:
        """Targeted hosts with no result at all (never reached: an earlier batch stopped the run)."""
        return sorted(set(self.targets or ()) - set(self.hosts))

    @property
    def not_checked(self) -> dict[str, str]:
        """host -> why its drift is unknown: unreachable, failed, or no result. When the run stopped
        without a host to blame, nobody's check is complete."""
        out = {h: f"unreachable: {m}" for h, m in self.unreachable.items()}
        out.update({h: f"failed: {m}" for h, m in self.failed.items() if h not in out})
        out.update({h: "no result (the run never reached it)" for h in self.unseen})
        if not self.run_complete and not out:
            why = f"the run stopped (ansible-runner status {self.status}, rc {self.rc})"
            out.update({h: why for h in self.hosts if h not in self.drifted_hosts})
        return dict(sorted(out.items()))

    @property
    def clean_hosts(self) -> list[str]:
        """Hosts checked to the end with nothing drifted: the only ones a report calls "no drift"."""
        bad = set(self.drifted_hosts) | set(self.not_checked)
        return [h for h in self.hosts if h not in bad]

    @property
    def drifted_hosts(self) -> list[str]:
        return sorted({i.host for i in self.items})

    def exit_status(self) -> int:
        """3 drift found (even where other hosts were not checked: they are listed); 4 could not
        run (no host checked, or a host not checked and no drift elsewhere); 0 no drift on every
        targeted host. After --fix (``check_mode=False``): 4 unless the apply run completed."""
        if not self.check_mode:
            return EXIT_OK if self.run_ok and self.hosts and not self.unseen else EXIT_NORUN
        if self.items:
            return EXIT_DRIFT
        if not self.hosts or self.not_checked:
            return EXIT_NORUN
        return EXIT_OK


# --- events -> report ---------------------------------------------------------------------------

_RESULT_EVENTS = {"runner_on_ok", "runner_on_failed", "runner_on_unreachable"}


def from_events(
    events: Iterable[Mapping[str, Any]],
    *,
    check_mode: bool = True,
    status: str = "successful",
    rc: int = 0,
    secrets: Iterable[str] = (),
    targets: Iterable[str] | None = None,
) -> DriftReport:
    """Build the report from ansible-runner events (``Runner.events`` or ``job_events/*.json``)."""
    secrets = tuple(secrets)
    report = DriftReport(check_mode=check_mode, status=status, rc=rc,
                         targets=None if targets is None else sorted(set(targets)))
    handler_tasks: set[str] = set()
    hosts: set[str] = set()
    for ev in events:
        kind = ev.get("event")
        data = ev.get("event_data") or {}
        if kind == "playbook_on_handler_task_start":
            handler_tasks.add(data.get("task_uuid") or data.get("uuid") or "")
            continue
        if kind == "playbook_on_stats":
            for key in ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored", "processed"):
                hosts.update((data.get(key) or {}).keys())
            continue
        if kind not in _RESULT_EVENTS:
            continue
        host = data.get("host") or "?"
        hosts.add(host)
        res = data.get("res") or {}
        if kind == "runner_on_unreachable":
            report.unreachable.setdefault(host, redact(str(res.get("msg", "unreachable")), secrets))
            continue
        if kind == "runner_on_failed":
            if not data.get("ignore_errors"):
                msg = HIDDEN if res.get("censored") else str(res.get("msg", "failed"))
                report.failed.setdefault(host, redact(f"{data.get('task', '?')}: {msg}", secrets))
            continue
        if data.get("task_uuid") in handler_tasks or data.get("is_handler"):
            continue
        report.items.extend(_items_from_result(host, data, res, secrets))
    report.hosts = sorted(hosts)
    return report


def _items_from_result(
    host: str, data: Mapping[str, Any], res: Mapping[str, Any], secrets
) -> list[DriftItem]:
    base = {
        "host": host,
        "task": data.get("task") or "?",
        "role": data.get("role") or None,
        "action": data.get("resolved_action") or data.get("task_action"),
    }
    results = res.get("results")
    # a loop: one result (a mapping) per item. dnf's module also returns ``results``, a list of strings
    # ("Installed: nvidia-fabric-manager-550.54.15-1.x86_64"): that is one task's result, not a loop's.
    if isinstance(results, list) and any(isinstance(sub, Mapping) for sub in results):
        out = []
        for sub in results:
            if isinstance(sub, Mapping) and sub.get("changed") and not sub.get("skipped"):
                out.append(_item(base, sub, _label(sub), secrets))
        return out
    if res.get("changed"):
        return [_item(base, res, None, secrets)]
    return []


def _label(sub: Mapping[str, Any]) -> str | None:
    if "_ansible_item_label" in sub:
        label = sub["_ansible_item_label"]
    else:
        loop_var = sub.get("ansible_loop_var", "item")
        label = sub.get(loop_var)
    if label is None:
        return None
    return label if isinstance(label, str) else json.dumps(label, sort_keys=True)


def _item(base: Mapping[str, Any], res: Mapping[str, Any], label: str | None, secrets) -> DriftItem:
    item = DriftItem(**base, item=redact(label, secrets) if label else None)
    if res.get("censored") or res.get("_ansible_no_log"):
        item.note = HIDDEN
        return item
    diffs = res.get("diff")
    if isinstance(diffs, Mapping):
        diffs = [diffs]
    for diff in diffs or []:
        if isinstance(diff, Mapping):
            item.changes.extend(_changes(diff, secrets))
    if not item.changes:
        msg = res.get("msg")
        item.note = redact(str(msg), secrets) if msg else "would change (the module returned no diff)"
    return item


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=0, sort_keys=True)


def _changes(diff: Mapping[str, Any], secrets) -> list[Change]:
    """Changed lines of one diff, paired by key (``key: value`` / ``KEY=value``)."""
    before, after = diff.get("before"), diff.get("after")
    if before is None and after is None:
        prepared = diff.get("prepared")
        if prepared:
            key = str(diff.get("after_header") or "change")
            return [Change(key, None, redact(str(prepared).strip(), secrets))]
        return []
    header = str(diff.get("before_header") or diff.get("after_header") or "")
    if isinstance(before, Mapping) and isinstance(after, Mapping):  # state dicts (e.g. file: state)
        keys = sorted(set(before) | set(after))
        return [
            _change(str(k), _text(before.get(k)) if k in before else None,
                    _text(after.get(k)) if k in after else None, secrets)
            for k in keys
            if before.get(k) != after.get(k)
        ]
    b_lines, a_lines = _text(before).splitlines(), _text(after).splitlines()
    removed, added = [], []
    for line in difflib.ndiff(b_lines, a_lines):
        if line.startswith("- "):
            removed.append(line[2:])
        elif line.startswith("+ "):
            added.append(line[2:])
    changes: list[Change] = []
    added_by_key = {}
    for line in added:
        key, value = _split(line)
        if key is not None and key not in added_by_key:
            added_by_key[key] = (line, value)
    used: set[str] = set()
    for line in removed:
        key, value = _split(line)
        if key is not None and key in added_by_key:
            used.add(key)
            changes.append(_change(key, value, added_by_key[key][1], secrets))
        else:
            changes.append(_change(header or "line", line, None, secrets))
    for line in added:
        key, _ = _split(line)
        if key is not None and key in used:
            continue
        changes.append(_change(header or "line", None, line, secrets))
    if not changes and (before or after) and _text(before) != _text(after):
        changes.append(_change(header or "content", _text(before).strip(), _text(after).strip(), secrets))
    return changes


def _split(line: str) -> tuple[str | None, str]:
    m = _KEYED.match(line)
    if m and len(m.group("key")) <= 60:
        return m.group("key").strip(), m.group("value").strip()
    words = line.strip().rsplit(None, 1)  # CLI lines: "qos trust L2" -> ("qos trust", "L2")
    if len(words) == 2:
        return words[0], words[1]
    return None, line


def _change(key: str, before: str | None, after: str | None, secrets) -> Change:
    if SECRET_KEY.search(key):
        return Change(key, None if before is None else REDACTED, None if after is None else REDACTED)
    return Change(
        redact(key, secrets),
        None if before is None else redact(before, secrets),
        None if after is None else redact(after, secrets),
    )


# --- renderers ----------------------------------------------------------------------------------


def _show(value: str | None) -> str:
    return "(absent)" if value is None else value


def terminal(report: DriftReport, title: str = "fabricops drift") -> str:
    lines = []
    mode = "check mode, nothing changed" if report.check_mode else "applied, not check mode"
    targeted = len(set(report.hosts) | set(report.targets or ()))
    lines.append(f"{title} ({mode}): {targeted} hosts/switches, "
                 f"{len(report.items)} drifted items on {len(report.drifted_hosts)}")
    by_host: dict[str, list[DriftItem]] = {}
    for item in report.items:
        by_host.setdefault(item.host, []).append(item)
    for host in sorted(by_host):
        lines.append(f"  {host}")
        for item in by_host[host]:
            lines.append(f"    {'DRIFT' if report.check_mode else 'FIXED'}  {item.title()}")
            for ch in item.changes:
                lines.append(f"             {ch.key}: {_show(ch.before)} -> {_show(ch.after)}")
            if item.note:
                lines.append(f"             {item.note}")
    for host, msg in sorted(report.unreachable.items()):
        lines.append(f"  {host}\n    UNREACHABLE  {msg}")
    for host, msg in sorted(report.failed.items()):
        lines.append(f"  {host}\n    FAILED  {msg}")
    clean = report.clean_hosts
    if clean:
        lines.append(f"  no drift: {', '.join(clean)}")
    not_checked = report.not_checked
    if not_checked:
        lines.append(f"  not checked: {', '.join(not_checked)}")
        for host, why in not_checked.items():
            if host not in report.unreachable and host not in report.failed:
                lines.append(f"    {host}: {why}")
    status = report.exit_status()
    if not report.check_mode:
        verdict = f"APPLIED {len(report.items)} changes" if status == EXIT_OK else "APPLY DID NOT COMPLETE"
    elif status == EXIT_OK:
        verdict = "NO DRIFT"
    elif status == EXIT_DRIFT:
        verdict = "DRIFT FOUND" + (f" (and {len(not_checked)} not checked)" if not_checked else "")
    elif not report.hosts and not report.targets:
        verdict = "NOTHING CHECKED: the playbook reported on no host"
    else:
        verdict = f"NOT CHECKED: {len(not_checked)} of {targeted}, drift unknown there"
    if not report.run_complete and not (report.failed or report.unreachable):
        verdict += f" (ansible-runner status {report.status}, rc {report.rc})"
    lines.append(f"{verdict} (exit {status})")
    return "\n".join(lines) + "\n"


def to_data(report: DriftReport) -> dict[str, Any]:
    return {
        "check_mode": report.check_mode,
        "exit_status": report.exit_status(),
        "status": report.status,
        "rc": report.rc,
        "hosts": report.hosts,
        "targets": report.targets,
        "drifted_hosts": report.drifted_hosts,
        "clean_hosts": report.clean_hosts,
        "not_checked": report.not_checked,
        "unreachable": report.unreachable,
        "failed": report.failed,
        "items": [asdict(i) for i in report.items],
    }


def to_json(report: DriftReport) -> str:
    return json.dumps(to_data(report), indent=2, sort_keys=True) + "\n"


def to_junit(report: DriftReport) -> str:
    """One test case per host or switch: failure = drift, error = failed or unreachable."""
    suite = ET.Element("testsuite", name="fabricops drift")
    failures = errors = 0
    by_host: dict[str, list[DriftItem]] = {}
    for item in report.items:
        by_host.setdefault(item.host, []).append(item)
    not_checked = report.not_checked
    for host in sorted(set(report.hosts) | set(report.targets or ())) or sorted(by_host):
        case = ET.SubElement(suite, "testcase", classname="fabricops.drift", name=host)
        if host in not_checked:
            errors += 1
            why = ("unreachable" if host in report.unreachable
                   else "failed" if host in report.failed else "not checked")
            el = ET.SubElement(case, "error", message=why)
            el.text = report.unreachable.get(host) or report.failed.get(host) or not_checked[host]
        if host in by_host:
            failures += 1
            el = ET.SubElement(case, "failure", message=f"{len(by_host[host])} drifted items")
            text = []
            for item in by_host[host]:
                text.append(item.title())
                text += [f"  {c.key}: {_show(c.before)} -> {_show(c.after)}" for c in item.changes]
                if item.note:
                    text.append(f"  {item.note}")
            el.text = "\n".join(text)
    if not report.run_complete and not (report.unreachable or report.failed):
        case = ET.SubElement(suite, "testcase", classname="fabricops.drift", name="ansible-playbook")
        ET.SubElement(case, "error", message=f"run {report.status}, rc {report.rc}")
        errors += 1
    elif not report.hosts:
        case = ET.SubElement(suite, "testcase", classname="fabricops.drift", name="ansible-playbook")
        ET.SubElement(case, "error", message="no host checked")
        errors += 1
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return ET.tostring(suite, encoding="unicode") + "\n"
