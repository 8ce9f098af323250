"""The action log: an append-only JSON-lines file, one record per action, the memory of the rails.

Where: ``--state-dir DIR``, else ``$XDG_STATE_HOME/fabricops``, else ``~/.local/state/fabricops``;
the file ``act.log`` in it. The directory is made 0700, the file 0600; the file is opened with
``O_NOFOLLOW`` (a link planted in its place is refused, never written through) and ``O_APPEND``,
and each record is one ``write`` of one line. Text from hosts (a result's message) has
credential-looking values masked before it is written.

Record (docs/act.md, "Action log")::

    {"time": "2026-12-06T12:00:05Z", "action": "drain", "node": "gpu03", "host": "gpu03",
     "port": null, "mode": "executed" | "dry-run" | "refused" | "failed", "outcome": "...",
     "reason": "fabricops: hca_port gpu03 mlx5_0/1",
     "evidence": [{"category", "check", "component", "message"}],
     "report": "verify.json", "report_generated_at": "2026-12-06T11:58:00Z"}

The per-hour cap and the cooldown read only the records with ``mode: executed``. A log that cannot
be read, or a line that is not a record, stops the run (exit 4): a rail that cannot count does not
let actions through.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from fabricops.act.verdict import parse_time
from fabricops.cliopts import redact_text
from fabricops.errors import BadInput, CouldNotRun

LOG_NAME = "act.log"
EXECUTED = "executed"
MAX_LOG_BYTES = 64 * 2**20


def state_dir(explicit: str | os.PathLike | None = None) -> Path:
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fabricops"


@dataclass(frozen=True)
class Record:
    time: datetime
    action: str
    node: str | None
    mode: str
    data: dict[str, Any]


class ActionLog:
    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        self.path = self.dir / LOG_NAME

    def _check_dir(self, create: bool) -> bool:
        try:
            st = os.lstat(self.dir)
        except FileNotFoundError:
            if not create:
                return False
            try:
                self.dir.mkdir(mode=0o700, parents=True)
            except OSError as exc:
                raise CouldNotRun(
                    f"action log directory {self.dir}: cannot create ({exc.strerror or exc})"
                ) from None
            return True
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise CouldNotRun(
                f"action log directory {self.dir}: not a directory (a link or a file); "
                "give --state-dir a real directory"
            )
        return True

    def records(self) -> list[Record]:
        """Every record so far; [] when there is no log yet."""
        if not self._check_dir(create=False):
            return []
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CouldNotRun(
                f"action log {self.path}: cannot read ({exc.strerror or exc}; a link is "
                "refused); the rails cannot count, nothing acted on"
            ) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise CouldNotRun(f"action log {self.path}: not a regular file; nothing acted on")
            if st.st_size > MAX_LOG_BYTES:
                raise CouldNotRun(
                    f"action log {self.path}: larger than {MAX_LOG_BYTES:,} bytes; rotate it "
                    "(move it aside keeping its last hour); nothing acted on"
                )
            with os.fdopen(fd, "rb", closefd=False) as fh:
                raw = fh.read()
        finally:
            os.close(fd)
        return parse_records(raw.decode("utf-8", "replace").splitlines(), str(self.path))

    def append(self, entries: Iterable[dict[str, Any]]) -> None:
        lines = [json.dumps(_masked(e), sort_keys=True, default=str) + "\n" for e in entries]
        if not lines:
            return
        self._check_dir(create=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise CouldNotRun(
                f"action log {self.path}: cannot write ({exc.strerror or exc}; a link is refused)"
            ) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CouldNotRun(f"action log {self.path}: not a regular file")
            for line in lines:
                data = line.encode("utf-8", "backslashreplace")
                os.write(fd, data)
        finally:
            os.close(fd)


def _masked(entry: dict[str, Any]) -> dict[str, Any]:
    out = dict(entry)
    out["evidence"] = [
        {**e, "message": redact_text(str(e.get("message") or ""))} for e in entry.get("evidence") or []
    ]
    return out


def parse_records(lines: list[str], where: str) -> list[Record]:
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            if not isinstance(d, dict):
                raise ValueError("not an object")
            t = parse_time(d.get("time"), "time")
        except (ValueError, BadInput, RecursionError) as exc:
            raise CouldNotRun(
                f"action log {where} line {n} is not a record ({exc}); the rails cannot "
                "count: fix or move that line; nothing acted on"
            ) from None
        node = d.get("node") if isinstance(d.get("node"), str) else None
        out.append(Record(t, str(d.get("action")), node, str(d.get("mode")), d))
    return out
