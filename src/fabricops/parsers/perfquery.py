"""``perfquery`` (infiniband-diags) in the counter-group forms operators use: one or more blocks.

Each block starts with a header line and is followed by ``Name:......value`` lines. The headers,
as rdma-core's infiniband-diags/perfquery.c prints them:

- ``# Port counters: Lid L port P (CapMask: 0x..)`` -- plain ``perfquery`` (PortCounters);
- ``# Port extended counters: Lid L port P (CapMask: 0x.. CapMask2: 0x..)`` -- ``-x``;
- ``# <Attribute> counters: Lid L port P`` -- the optional attributes, printed by
  ``common_func``: ``-E`` PortRcvErrorDetails, ``-D`` PortXmitDiscardDetails, ``-X``
  PortXmitDataSL, ``-S`` PortRcvDataSL (and the other optional groups, same shape).

With ``-a`` (all ports aggregated) the port is ``255`` (ALL_PORTS) and PortSelect is 255; ``-l``
prints one block per port; ``-r`` (reset after read) prints what was read, ``-R`` prints nothing.
Field names are libibmad's (fields.c): e.g. ``PortMalformedPktErrors`` (the IB spec's
PortMalformedPacketErrors). Counter values are ints (``0x`` values such as CounterSelect are
decoded too). PortXmitData/PortRcvData are in units of 4 octets (perfquery(8)); see
:attr:`PerfqueryBlock.xmit_bytes`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines

TOOL = "perfquery"
EXPECTED = (
    "'# Port counters: Lid L port P' (or '# PortRcvErrorDetails counters: ...') "
    "followed by 'Name:....value' lines"
)

#: perfquery.c's ALL_PORTS: the port number printed (and PortSelect) for ``-a``.
ALL_PORTS = 255

#: Counter group -> the counters a block of it must carry (any one of them) to count as complete.
GROUPS: dict[str, tuple[str, ...]] = {
    "PortCounters": ("PortXmitData", "SymbolErrorCounter"),
    "PortCountersExtended": ("PortXmitData", "SymbolErrorCounter"),
    # libibmad fields.c, PortRcvErrorDetails fields (IB spec 16.1.4.2)
    "PortRcvErrorDetails": ("PortLocalPhysicalErrors", "PortMalformedPktErrors", "PortBufferOverrunErrors",
                            "PortDLIDMappingErrors", "PortVLMappingErrors", "PortLoopingErrors"),
    # libibmad fields.c, PortXmitDiscardDetails fields (IB spec 16.1.4.3)
    "PortXmitDiscardDetails": ("PortInactiveDiscards", "PortNeighborMTUDiscards",
                               "PortSwLifetimeLimitDiscards", "PortSwHOQLifetimeLimitDiscards"),
    "PortXmitDataSL": tuple(f"XmtDataSL{i}" for i in range(16)),
    "PortRcvDataSL": tuple(f"RcvDataSL{i}" for i in range(16)),
}

_HDR = re.compile(
    r"^#\s*(?P<group>Port\s+extended|Port|Port[A-Za-z]+|Sw[A-Za-z]+)\s+counters:\s*"
    r"Lid\s+(?P<lid>\d+)\s+port\s+(?P<port>\S+)"
    r"(?:\s*\(CapMask:\s*(?P<cap>0x[0-9a-fA-F]+)(?:\s+CapMask2:\s*(?P<cap2>0x[0-9a-fA-F]+))?\))?"
)
_COUNTER = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*):\.*\s*(0x[0-9a-fA-F]+|\d+)\s*$")


def _group(raw: str) -> str:
    words = raw.split()
    if words == ["Port"]:
        return "PortCounters"
    if words == ["Port", "extended"]:
        return "PortCountersExtended"
    return raw


@dataclass
class PerfqueryBlock:
    lid: int | None
    port: str | None
    extended: bool
    cap_mask: str | None = None
    cap_mask2: str | None = None
    port_select: int | None = None
    counters: dict[str, int] = field(default_factory=dict)
    #: PortCounters | PortCountersExtended | PortRcvErrorDetails | PortXmitDiscardDetails | ...
    group: str = "PortCounters"

    def get(self, name: str, default: int | None = None) -> int | None:
        return self.counters.get(name, default)

    @property
    def all_ports(self) -> bool:
        """``perfquery -a``: the counters of all ports of the node, summed (port 255)."""
        return self.port == str(ALL_PORTS) or self.port_select == ALL_PORTS

    @property
    def xmit_bytes(self) -> int | None:
        """PortXmitData in octets (the counter counts 4-octet words, perfquery(8) and IB spec 16.1.3.5)."""
        v = self.counters.get("PortXmitData")
        return None if v is None else v * 4

    @property
    def rcv_bytes(self) -> int | None:
        v = self.counters.get("PortRcvData")
        return None if v is None else v * 4


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

    def group(self, name: str) -> list[PerfqueryBlock]:
        """The blocks of one counter group (e.g. ``PortRcvErrorDetails``), in output order."""
        return [b for b in self.blocks if b.group == name]


@bounded(TOOL, max_mb=4)
def parse(text: str) -> Perfquery:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    blocks: list[PerfqueryBlock] = []
    cur: PerfqueryBlock | None = None
    for line in clean_lines(text):
        m = _HDR.match(line.strip())
        if m:
            group = _group(m.group("group"))
            cur = PerfqueryBlock(lid=int(m.group("lid")), port=m.group("port"),
                                 extended=group == "PortCountersExtended",
                                 cap_mask=m.group("cap"), cap_mask2=m.group("cap2"), group=group)
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
        want = GROUPS.get(b.group)
        if want is None:  # another optional group: at least one counter besides the selects
            if not set(b.counters) - {"PortSelect", "CounterSelect"}:
                raise ParseError(TOOL, EXPECTED, f"{b.group}: no counters (truncated?)")
            continue
        if not any(w in b.counters for w in want):
            raise ParseError(TOOL, EXPECTED, f"{b.group}: no {' or '.join(want[:2])} (truncated?)")
    return Perfquery(blocks=blocks)
