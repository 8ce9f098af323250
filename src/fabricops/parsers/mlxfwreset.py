"""``mlxfwreset -d DEV query`` (NVIDIA MFT; mstflint's ``mstfwreset``).

Sections, each a title line ending in ``:`` (``Reset-levels:``, ``Reset-types (relevant only for
reset-levels 1,3,4):``, ``Reset-sync (relevant only for reset-level 3):``, and on newer MFT a
``Reset-method`` section), then rows ``N: description  -Supported  (default)`` or ``-Not
Supported`` (some rows print ``-Not supported``, some add ``(Reason: ...)``). The record is the dict
of SPEC-20 A3: ``levels``, ``types``, ``syncs``, ``methods`` (lists of ``{"level"/"type"/...:
int as "id", "description", "supported", "default"}``) and ``raw`` (the lines as printed).

Refused: no ``Reset-levels`` section or no level row (another tool, ``| grep`` output), a row
without its ``-Supported``/``-Not Supported`` mark (cut output).
"""

from __future__ import annotations

import re
from typing import Any

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines

TOOL = "mlxfwreset"
EXPECTED = "mlxfwreset query output (a 'Reset-levels:' section of 'N: description -Supported' rows)"

_SECTIONS = (
    ("Reset-level", "levels"), ("Reset-type", "types"), ("Reset-sync", "syncs"), ("Reset-method", "methods"),
)
_ROW = re.compile(r"^(\d{1,3}):\s")
_MARK = re.compile(r"\s-(Supported|Not [Ss]upported)\b")


@bounded(TOOL, max_mb=1)
def parse_query(text: str) -> dict:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    record: dict[str, Any] = {"levels": [], "types": [], "syncs": [], "methods": [], "raw": []}
    section: str | None = None
    seen_levels = False
    for raw in clean_lines(text):
        line = raw.strip()
        if not line:
            continue
        record["raw"].append(line)
        if line.endswith(":") and line.startswith("Reset-"):
            section = next((key for prefix, key in _SECTIONS if line.startswith(prefix)), None)
            seen_levels = seen_levels or section == "levels"
            continue
        m = _ROW.match(line)
        if not m:
            section = None if line.startswith("-E-") else section
            continue
        if section is None:
            continue
        mark = _MARK.search(line)
        if not mark:
            raise ParseError(
                TOOL, EXPECTED, f"row without its -Supported/-Not Supported mark: {line[:120]!r}"
            )
        tail = line[mark.end() :]
        record[section].append({
            "id": int(m.group(1)),
            "description": line[m.end() : mark.start()].strip(),
            "supported": mark.group(1) == "Supported",
            "default": "(default)" in tail,
        })
    if not seen_levels or not record["levels"]:
        raise ParseError(TOOL, EXPECTED, "no 'Reset-levels:' section with level rows found")
    for lv in record["levels"]:
        lv["level"] = lv["id"]
    return record


def supported_levels(record: dict) -> list[int]:
    """The reset levels the device supports, in printed order."""
    return [lv["level"] for lv in record["levels"] if lv["supported"]]
