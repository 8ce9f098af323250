"""``ofed_info -s`` / ``ofed_info -n`` / the first line of ``ofed_info``.

``installed`` is False only when the input is clearly the shell saying the command is missing
(``ofed_info: command not found`` / ``No such file or directory``); anything else that is not a
version raises :class:`ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines

TOOL = "ofed_info"
EXPECTED = "a version line such as 'MLNX_OFED_LINUX-23.10-1.1.9.0:' or '23.10-1.1.9.0'"

# MLNX_OFED_LINUX-5.8-1.0.1.1, OFED-internal-24.10-1.1.4, MLNX_OFED_LINUX-4.5-1.0.1.0 (OFED-4.5-1.0.1):
_FULL = re.compile(
    r"^(?P<name>(?:MLNX_OFED_LINUX|MLNX_EN|OFED-internal|OFED|DOCA[\w-]*?)-(?P<num>\d+\.\d+-[\w.-]*?\d))"
    r"(?:\s*\((?P<base>[^)]*)\))?\s*:?\s*$"
)
_NUM = re.compile(r"^(?P<num>\d+\.\d+-\d[\w.]*)$")
_MISSING = re.compile(r"ofed_info:?\s*(command not found|not found|No such file or directory)", re.I)


@dataclass
class OfedInfo:
    installed: bool
    version: str | None = None
    version_number: str | None = None
    major: int | None = None
    minor: int | None = None
    base: str | None = None


@bounded(TOOL, max_mb=1)
def parse(text: str) -> OfedInfo:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    lines = [ln.strip() for ln in clean_lines(text) if ln.strip()]
    first = lines[0]
    if len(first) > 200:  # the version line is ~50 characters; the version regex is not linear
        raise ParseError(TOOL, EXPECTED, f"first line is {len(first)} characters long, not a version")
    if _MISSING.search(first) and len(lines) <= 2:
        return OfedInfo(installed=False)
    m = _FULL.match(first)
    if m:
        num = m.group("num")
        major, minor = (int(x) for x in num.split("-")[0].split(".")[:2])
        return OfedInfo(installed=True, version=m.group("name"), version_number=num,
                        major=major, minor=minor, base=m.group("base"))
    m = _NUM.match(first)
    if m and len(lines) == 1:
        num = m.group("num")
        major, minor = (int(x) for x in num.split("-")[0].split(".")[:2])
        return OfedInfo(installed=True, version=None, version_number=num, major=major, minor=minor)
    raise ParseError(TOOL, EXPECTED, f"first line is {first[:80]!r}")
