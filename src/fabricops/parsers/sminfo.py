"""Parser for ``sminfo`` (infiniband-diags): the SMInfo attribute of the subnet's SM.

infiniband-diags prints one line (``src/sminfo.c``)::

    sminfo: sm lid 1 sm guid 0x248a0703009c0e6e, activity count 2307183 priority 15 state 3 SMINFO_MASTER

States (IBA 14.4.1): 0 SMINFO_NOTACT, 1 SMINFO_DISCOVER, 2 SMINFO_STANDBY, 3 SMINFO_MASTER.
The line may come wrapped (mail clients, terminals): whitespace, including line breaks, is
normalised before matching. ``ibwarn:`` lines on stderr merged into the text are ignored.
When no SM answers, sminfo prints ``sminfo: iberror: failed: query`` (exit 255): that raises
:class:`ParseError` with a detail saying no SM answered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded

TOOL = "sminfo"
EXPECTED = "a line 'sminfo: sm lid N sm guid 0x..., activity count N priority N state N SMINFO_...'"

STATE_NAMES = {0: "SMINFO_NOTACT", 1: "SMINFO_DISCOVER", 2: "SMINFO_STANDBY", 3: "SMINFO_MASTER"}

_LINE = re.compile(
    r"sminfo:\s+sm\s+lid\s+(?P<lid>\d+)\s+sm\s+guid\s+(?P<guid>0x[0-9a-fA-F]+),\s*"
    r"activity\s+count\s+(?P<act>\d+)\s+priority\s+(?P<prio>\d+)\s+state\s+(?P<state>\d+)"
    r"(?:\s+(?P<name>SMINFO_[A-Z]+))?"
)


@dataclass
class SmInfo:
    lid: int
    guid: str  # 16 hex digits, lower case, with 0x (as opensm.conf's guid takes it)
    activity_count: int
    priority: int
    state: int
    state_name: str

    @property
    def is_master(self) -> bool:
        return self.state == 3


def normalise_guid(raw: str) -> str:
    """'0x2c90200259201' / '2c90:2002:5920:1' / 'b83f:d203:00a0:0100' -> '0x0002c90200259201'."""
    digits = raw.lower().removeprefix("0x").replace(":", "")
    if not digits or any(c not in "0123456789abcdef" for c in digits) or len(digits) > 16:
        raise ValueError(f"{raw!r} is not a 64-bit GUID")
    return "0x" + digits.rjust(16, "0")


@bounded(TOOL, max_mb=1)
def parse(text: str) -> SmInfo:
    if text is None or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    lines = [ln for ln in text.replace("\r", "").split("\n") if not ln.lstrip().startswith("ibwarn:")]
    flat = " ".join(" ".join(lines).split())
    m = _LINE.search(flat)
    if not m:
        if "sminfo:" in flat and "iberror" in flat:
            raise ParseError(TOOL, EXPECTED, "no SMInfo answer (no subnet manager on this subnet?)")
        if flat.startswith("sminfo: sm lid"):
            raise ParseError(TOOL, EXPECTED, "truncated line")
        raise ParseError(TOOL, EXPECTED, f"got {flat[:60]!r}")
    state = int(m.group("state"))
    if state not in STATE_NAMES:
        raise ParseError(TOOL, EXPECTED, f"state {state} is not an SMInfo state (0..3)")
    name = m.group("name")
    if name is None:
        raise ParseError(TOOL, EXPECTED, "truncated line (no state name)")
    if name != STATE_NAMES[state]:
        raise ParseError(TOOL, EXPECTED, f"state {state} printed as {name}")
    prio = int(m.group("prio"))
    if prio > 15:
        raise ParseError(TOOL, EXPECTED, f"priority {prio} is outside 0..15")
    try:
        guid = normalise_guid(m.group("guid"))
    except ValueError as exc:
        raise ParseError(TOOL, EXPECTED, str(exc)) from None
    return SmInfo(
        lid=int(m.group("lid")),
        guid=guid,
        activity_count=int(m.group("act")),
        priority=prio,
        state=state,
        state_name=name,
    )
