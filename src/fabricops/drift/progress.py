"""Live progress of a drift run, per host and phase, from ansible-runner's events as they arrive.

A phase is a role (``mlnx_ofed``, ``roce_host``, ...). When a host moves on from a phase (or the
play ends) one line says what that phase found on it; an unreachable or failed host gets its line
at once. On a terminal one more line, rewritten in place, names the task running now.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabricops.cliopts import Progress
from fabricops.drift.report import redact


class DriftProgress:
    """``on_event`` for :func:`fabricops.drift.runner.run_playbook`."""

    def __init__(self, out: Progress, check_mode: bool = True, label: str = "check"):
        self.out = out
        self.check_mode = check_mode
        self.label = label
        self.play = 0
        self.play_name = ""
        self.task = ""
        self.seen: set[str] = set()
        self.phase: dict[str, str] = {}  #: host -> the phase it is in
        self.count: dict[str, list[int]] = {}  #: host -> [tasks, changed] in that phase
        self.lines: list[str] = []  #: what was said (tests read it)

    def _say(self, msg: str) -> None:
        self.lines.append(msg)
        self.out.line(msg)

    def _close(self, host: str) -> None:
        phase = self.phase.pop(host, None)
        tasks, changed = self.count.pop(host, [0, 0])
        if phase is None or (phase == "-" and not changed):
            return  # the play's own bookkeeping tasks: a line only when they would change something
        name = phase if phase != "-" else "play tasks"
        verb = "would change" if self.check_mode else "changed"
        self._say(f"{host}: {name} {'checked' if self.check_mode else 'applied'} "
                  f"({tasks} tasks, {changed} {verb})")

    def _close_all(self) -> None:
        for host in sorted(self.phase):
            self._close(host)

    def __call__(self, event: Mapping[str, Any]) -> None:
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self._close_all()
            self.play += 1
            self.play_name = str(data.get("name") or data.get("play") or "")
            self._say(f"{self.label}: play {self.play}: {self.play_name}")
        elif kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            role = data.get("role")
            name = data.get("task") or data.get("name") or "?"
            self.task = f"{role} : {name}" if role else str(name)
            self.out.status(f"{self.label}: play {self.play}, {len(self.seen)} hosts so far: {self.task}")
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped"):
            host = str(data.get("host") or "?")
            self.seen.add(host)
            phase = str(data.get("role") or "-")
            if self.phase.get(host) not in (None, phase):
                self._close(host)
            self.phase[host] = phase
            counts = self.count.setdefault(host, [0, 0])
            counts[0] += 1
            res = data.get("res") or {}
            if kind == "runner_on_ok" and (res.get("changed") or any(
                isinstance(r, Mapping) and r.get("changed") for r in res.get("results") or []
            )):
                counts[1] += 1
            if kind == "runner_on_unreachable":
                msg = redact(" ".join(str(res.get("msg", "unreachable")).split())[:160])
                self._say(f"{host}: UNREACHABLE ({msg})")
            elif kind == "runner_on_failed" and not data.get("ignore_errors"):
                self._say(f"{host}: FAILED in {self.task or data.get('task') or '?'}")
        elif kind == "playbook_on_stats":
            self._close_all()
            self._say(f"{self.label}: done, {len(self.seen)} hosts reported")
            self.out.done()
