"""The verify report ``fabricops act`` acts on, and the rule that a stale verdict drives nothing.

A report is refused (:class:`~fabricops.errors.CouldNotRun`, exit 4, one sentence) when its schema
is not verify's, it reached no verdict (``exit_status`` 4), it holds no results, it is past its
``valid_until``, it carries no ``valid_until`` and ``--max-age`` was not given, it is older than
``--max-age`` (counted from ``generated_at``, else the file's modification time), or it says it was
generated in the future. A file that is not JSON, or results that are not records, are invalid
input (5).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fabricops import cliopts
from fabricops.errors import BadInput, CouldNotRun

#: the verify report schemas act knows how to read
SCHEMAS = ("fabricops.verify/1",)
#: how far in the future a report's generated_at may lie (clocks of two machines)
CLOCK_SKEW = timedelta(minutes=5)


@dataclass
class Verdict:
    path: str
    data: dict[str, Any]
    results: list[dict[str, Any]]
    generated_at: datetime  #: the report's own time, else the file's modification time
    generated_from: str  #: "report" | "file mtime"
    valid_until: datetime | None

    @property
    def hosts(self) -> list[str]:
        return [str(h) for h in self.data.get("hosts") or [] if isinstance(h, str)]

    @property
    def host_verdicts(self) -> dict[str, str]:
        hv = self.data.get("host_verdicts") or {}
        return {str(h): str(v.get("verdict")) for h, v in hv.items() if isinstance(v, dict)}


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any, what: str) -> datetime:
    """ISO-8601 with a UTC offset (``2026-12-06T12:00:00Z``); a time without a zone is refused."""
    if not isinstance(value, str) or not re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d", value):
        raise BadInput(f"{what} {value!r} is not an ISO-8601 time (2026-12-06T12:00:00Z)")
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        raise BadInput(f"{what} {value!r} is not an ISO-8601 time (2026-12-06T12:00:00Z)") from None
    if t.tzinfo is None:
        raise BadInput(f"{what} {value!r} has no time zone (write it in UTC: ...Z)")
    return t.astimezone(UTC)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d)?\s*$")


def parse_duration(text: str, flag: str) -> timedelta:
    """``90`` (seconds), ``30s``, ``30m``, ``2h``, ``1d``; a usage error otherwise."""
    from fabricops.errors import UsageError

    m = _DURATION.match(str(text))
    if not m:
        raise UsageError(f"{flag} {text!r}: expected a duration such as 30m, 2h, 90s or 1d")
    unit = {"s": 1, "sec": 1, None: 1, "m": 60, "min": 60, "h": 3600, "d": 86400}[m.group(2)]
    return timedelta(seconds=float(m.group(1)) * unit)


def _age(d: timedelta) -> str:
    """``2 h 5 min``, ``30 min``, ``45 s``."""
    s = int(d.total_seconds())
    parts = [(s // 3600, "h"), (s % 3600 // 60, "min"), (s % 60, "s")]
    return " ".join(f"{n} {u}" for n, u in parts if n) or "0 s"


def read_report(path: str | os.PathLike, now: datetime, max_age: timedelta | None = None) -> Verdict:
    label = f"report {path}"
    raw = cliopts.read_input(path, label)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInput(f"{label}: not a verify --json report (not UTF-8)") from None
    except RecursionError:
        raise BadInput(f"{label}: not a verify --json report (nested too deeply)") from None
    except ValueError as exc:
        raise BadInput(f"{label}: not a verify --json report ({exc})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{label}: not a verify --json report (expected a JSON object)")
    return check_report(data, str(path), now, max_age, mtime=_mtime(path))


def _mtime(path: str | os.PathLike) -> datetime | None:
    try:
        return datetime.fromtimestamp(Path(path).stat().st_mtime, UTC)
    except OSError:
        return None


def check_report(
    data: dict[str, Any],
    path: str,
    now: datetime,
    max_age: timedelta | None = None,
    mtime: datetime | None = None,
) -> Verdict:
    """The report as a :class:`Verdict`, or the one sentence that says why it drives nothing."""
    label = f"report {path}"
    schema = data.get("schema")
    if schema not in SCHEMAS:
        raise CouldNotRun(
            f"{label}: schema {schema!r} is not one act reads ({', '.join(SCHEMAS)}); nothing acted on"
        )
    if data.get("exit_status") == 4:
        raise CouldNotRun(f"{label}: verify reached no verdict there (exit status 4); nothing acted on")
    results = data.get("results")
    if not isinstance(results, list):
        raise BadInput(f"{label}: results is not a list")
    if not results:
        raise CouldNotRun(f"{label}: holds no results; nothing acted on")
    if not all(
        isinstance(r, dict) and isinstance(r.get("check"), str) and isinstance(r.get("status"), str)
        for r in results
    ):
        raise BadInput(f"{label}: a result is not a verify result (a record with check and status)")
    valid_until = (
        parse_time(data["valid_until"], f"{label}: valid_until") if data.get("valid_until") else None
    )
    if data.get("generated_at"):
        generated, source = parse_time(data["generated_at"], f"{label}: generated_at"), "report"
    elif mtime is not None:
        generated, source = mtime, "file mtime"
    else:
        generated, source = now, "file mtime"
    if generated > now + CLOCK_SKEW:
        raise CouldNotRun(
            f"{label}: generated_at {iso(generated)} lies in the future (now {iso(now)}); "
            "check the clocks; nothing acted on"
        )
    if valid_until is not None and now > valid_until:
        raise CouldNotRun(
            f"{label}: stale: valid until {iso(valid_until)}, now {iso(now)}; run verify "
            "again; nothing acted on"
        )
    if valid_until is None and max_age is None:
        raise CouldNotRun(
            f"{label}: carries no valid_until; give --max-age to say how old a report may "
            "be; nothing acted on"
        )
    if max_age is not None and now - generated > max_age:
        raise CouldNotRun(
            f"{label}: stale: {_age(now - generated)} old ({source} {iso(generated)}), "
            f"--max-age {_age(max_age)}; run verify again; nothing acted on"
        )
    return Verdict(path, data, results, generated, source, valid_until)
