"""``perfquery`` and ``perfquery -x`` (infiniband-diags): one or more counter blocks.

Each block starts with ``# Port counters: Lid L port P`` or ``# Port extended counters: ...``
(optionally ``(CapMask: ...)``) followed by ``Name:......value`` lines. Counter values are ints
(``0x`` values such as CounterSelect are decoded too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines

TOOL = "perfquery"
EXPECTED = "'# Port counters: Lid L port P' followed by 'Name:....value' lines"

_HDR = re.compile(
    r"^#\s*Port\s+(?P<ext>extended\s+)?counters:\s*Lid\s+(?P<lid>\d+)\s+port\s+(?P<port>\S+)"
    r"(?:\s*\(CapMask:\s*(?P<cap>0x[0-9a-fA-F]+)(?:\s+CapMask2:\s*(?P<cap2>0x[0-9a-fA-F]+))?\))?"
)
_COUNTER = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*):\.*\s*(0x[0-9a-fA-F]+|\d+)\s*$")


@dataclass
class PerfqueryBlock:
    lid: int | None
    port: str | None
    extended: bool
    cap_mask: str | None = None
    cap_mask2: str | None = None
    port_select: int | None = None
    counters: dict[str, int] = field(default_factory=dict)

    def get(self, name: str, default: int | None = None) -> int | None:
        return self.counters.get(name, default)


@dataclass
class Perfquery:
    blocks: list[PerfqueryBlock]

    @property
    def counters(self) -> dict[str, int]:
        """Counters of the first block (the usual single-port query)."""
        return self.blocks[0].counters

    @property
    def extended(self) -> bool:
        return self.blocks[0].extended


@bounded(TOOL, max_mb=4)
def parse(text: str) -> Perfquery:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    blocks: list[PerfqueryBlock] = []
    cur: PerfqueryBlock | None = None
    for line in clean_lines(text):
        m = _HDR.match(line.strip())
        if m:
            cur = PerfqueryBlock(lid=int(m.group("lid")), port=m.group("port"), extended=bool(m.group("ext")),
                                 cap_mask=m.group("cap"), cap_mask2=m.group("cap2"))
            blocks.append(cur)
            continue
        c = _COUNTER.match(line)
        if not c:
            continue
        if cur is None:  # some versions/wrappers drop the header line
            cur = PerfqueryBlock(lid=None, port=None, extended=False)
            blocks.append(cur)
        name, raw = c.group(1), c.group(2)
        value = int(raw, 16) if raw.startswith("0x") else int(raw)
        if name == "PortSelect":
            cur.port_select = value
        cur.counters[name] = value
    if not blocks or not any(b.counters for b in blocks):
        raise ParseError(TOOL, EXPECTED, "no counter lines found")
    for b in blocks:
        if not b.counters:
            raise ParseError(TOOL, EXPECTED, f"lid {b.lid} port {b.port}: no counters (truncated?)")
        if "PortXmitData" not in b.counters and "SymbolErrorCounter" not in b.counters:
            raise ParseError(TOOL, EXPECTED, "no PortXmitData or SymbolErrorCounter (truncated?)")
    return Perfquery(blocks=blocks)
