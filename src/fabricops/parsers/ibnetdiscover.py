"""``ibnetdiscover`` (infiniband-diags): the subnet's nodes and the cables between them.

The default output is the topology file that ``ibnetdiscover.c`` prints (``out_switch``,
``out_switch_port``, ``out_ca``, ``out_ca_port``; format in the man page's "TOPOLOGY FILE FORMAT")::

    switchguid=0x5442ba00003080(5442ba00003080)
    Switch  24 "S-005442ba00003080"   # "ISR9024 Voltaire" base port 0 lid 6 lmc 0
    [22]    "H-0008f10403961354"[1](8f10403961355)   # "MT23108 InfiniHost Mellanox Technologies" lid 4 4xSDR
    [10]    "S-0008f10400410015"[1]   # "SW-6IB4 Voltaire" lid 3 4xSDR

    caguid=0x8f10403960984
    Ca      2 "H-0008f10403960984"    # "MT23108 InfiniHost Mellanox Technologies"
    [1](8f10403960985)  "S-0008f10400410015"[6]   # lid 16 lmc 1 "SW-6IB4 Voltaire" lid 3 4xSDR

A node line names the node type, its port count, ``"S-|H-|R-<16 hex node GUID>"`` and, after
``#``, its NodeDescription (and for a switch: base/enhanced port 0, its LID and LMC). Each port
line below it is one cable: local port (a CA's port GUID in parentheses), the peer node and port
(the peer CA port's GUID), then after ``#`` (for a CA port, its own LID and LMC first) the peer's
NodeDescription, the peer's LID and the link's width and speed (``4xNDR``; ``dump_linkwidth_compat``
/ ``dump_linkspeedext_compat``). ``-g`` grouping lines (``Chassis N``, ``# Spine Nodes``,
``[ext N]``) and the ``vendid=``/``devid=``/``*guid=`` lines are read past; ``ibwarn:`` lines are
kept as warnings. A port line that does not parse is refused (a cut line would drop a cable).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines

TOOL = "ibnetdiscover"
EXPECTED = "a topology file: 'Switch N \"S-<guid>\"' / 'Ca N \"H-<guid>\"' node lines over '[port] ...' lines"

KINDS = {"S": "Switch", "H": "Ca", "R": "Router", "?": "Unknown"}

# Left of the first '#' (stripped): fixed tokens, one quantifier between them (linear time).
_NODE = re.compile(r'^(Switch|Ca|Rt|Router)\s+(\d+)\s+"([SHR?])-([0-9a-fA-F]{1,16})"$')
_PORT = re.compile(
    r'^\[(\d+)\](?:\[ext \d+\])?(?:\(([0-9a-fA-F]{1,16})\))?\s+"([SHR?])-([0-9a-fA-F]{1,16})"\[(\d+)\]'
    r"(?:\[ext \d+\])?(?:\s*\(([0-9a-fA-F]{1,16})\))?$"
)
_SW_TAIL = re.compile(r"^(base|enhanced) port 0 lid (\d+) lmc (\d+)")
_CA_PREFIX = re.compile(r"^lid (\d+) lmc (\d+) ")
_PEER_TAIL = re.compile(r"^lid (\d+) (\d{1,2}x)?(\S*)")


def guid(raw: str) -> str:
    """'8f10403960985' -> '0x0008f10403960985' (16 hex digits, lower case)."""
    return "0x" + raw.lower().rjust(16, "0")


@dataclass
class IbCable:
    """One port line: a cable from ``port`` of the node it is listed under."""

    port: int
    peer_kind: str  #: Switch | Ca | Router | Unknown
    peer_guid: str  #: node GUID of the peer
    peer_port: int
    peer_desc: str | None = None
    peer_lid: int | None = None
    width: str | None = None  #: "4x", "2x", "1x" (ibnetdiscover's lower-case x)
    speed: str | None = None  #: "NDR", "HDR", "EDR", "FDR", "FDR10", "QDR", "DDR", "SDR", "???"
    port_guid: str | None = None  #: a CA or router's own port GUID
    peer_port_guid: str | None = None
    lid: int | None = None  #: a CA or router port's own LID


@dataclass
class IbNode:
    kind: str  #: Switch | Ca | Router
    guid: str
    num_ports: int
    desc: str
    lid: int | None = None  #: a switch's port-0 LID
    cables: list[IbCable] = field(default_factory=list)


@dataclass
class IbTopology:
    nodes: list[IbNode]
    initiated_from: str | None = None
    warnings: list[str] = field(default_factory=list)

    def node(self, guid_: str) -> IbNode | None:
        g = guid_.lower()
        return next((n for n in self.nodes if n.guid == g), None)


def _desc_and_tail(comment: str) -> tuple[str, str] | None:
    """'"desc" rest' -> (desc, rest); the description runs to the last '"'."""
    if not comment.startswith('"'):
        return None
    end = comment.rfind('"')
    if end <= 0:
        return None
    return comment[1:end], comment[end + 1 :].strip()


def _cable(line: str, lineno: int, node_kind: str) -> IbCable:
    left, sep, comment = line.partition("#")
    m = _PORT.match(left.strip())
    if not m:
        raise _bad(lineno, f"port line {line.strip()[:60]!r} does not parse (cut?)")
    cable = IbCable(
        port=int(m.group(1)),
        peer_kind=KINDS[m.group(3)],
        peer_guid=guid(m.group(4)),
        peer_port=int(m.group(5)),
        port_guid=guid(m.group(2)) if m.group(2) else None,
        peer_port_guid=guid(m.group(6)) if m.group(6) else None,
    )
    comment = comment.strip()
    if not sep or not comment:
        raise _bad(lineno, f"port {cable.port} has no '# \"desc\" lid N' part (cut?)")
    if node_kind != "Switch":
        pm = _CA_PREFIX.match(comment)
        if pm:
            cable.lid = int(pm.group(1))
            comment = comment[pm.end() :]
    parts = _desc_and_tail(comment)
    if parts is None:
        raise _bad(lineno, f"port {cable.port}: peer description not quoted (cut?)")
    cable.peer_desc, tail = parts
    tm = _PEER_TAIL.match(tail)
    if not tm:
        raise _bad(lineno, f"port {cable.port}: no peer 'lid N' after the description")
    cable.peer_lid = int(tm.group(1))
    cable.width = tm.group(2)
    cable.speed = tm.group(3) or None
    return cable


def _bad(lineno: int, what: str) -> ParseError:
    return ParseError(TOOL, EXPECTED, f"line {lineno}: {what}")


@bounded(TOOL, max_mb=8)
def parse(text: str) -> IbTopology:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    nodes: list[IbNode] = []
    warnings: list[str] = []
    started: str | None = None
    node: IbNode | None = None
    for lineno, raw in enumerate(clean_lines(text), 1):
        line = raw.strip()
        if not line:
            continue
        first = line[0]  # the kinds of line start with different characters: test those first
        if first == "#":
            if line.startswith("# Initiated from node "):
                started = line.split()[4] if len(line.split()) > 4 else None
            continue
        if first == "[":
            if node is None:
                raise _bad(lineno, "a port line before any Switch/Ca line")
            node.cables.append(_cable(line, lineno, node.kind))
            continue
        if first == "i" and line.startswith(("ibwarn:", "ibnetdiscover:", "ibpanic:")):
            warnings.append(line)
            continue
        if first not in "SCR" and "=" in line:  # vendid=, devid=, sysimgguid=, switchguid=, ...
            continue
        head = line.split(None, 1)[0]
        if head in ("Switch", "Ca", "Rt", "Router"):
            left, _, comment = line.partition("#")
            m = _NODE.match(left.strip())
            parts = _desc_and_tail(comment.strip())
            if not m or parts is None:
                raise _bad(lineno, f"node line {line[:60]!r} does not parse (cut?)")
            kind = {"Rt": "Router"}.get(m.group(1), m.group(1))
            node = IbNode(kind=kind, guid=guid(m.group(4)), num_ports=int(m.group(2)), desc=parts[0])
            if kind == "Switch":
                sm = _SW_TAIL.match(parts[1])
                if not sm:
                    raise _bad(lineno, f"switch {node.guid} lacks 'port 0 lid N'")
                node.lid = int(sm.group(2))
            nodes.append(node)
            continue
        # vendid=, devid=, sysimgguid=, switchguid=, caguid=, rtguid=, Chassis N, Non-Chassis Nodes
        if "=" in line or head in ("Chassis", "Non-Chassis", "Hostname:"):
            continue
        raise _bad(lineno, f"{line[:60]!r} is not topology-file text")
    if not nodes:
        detail = warnings[-1] if warnings else "no 'Switch' or 'Ca' node line"
        raise ParseError(TOOL, EXPECTED, detail)
    return IbTopology(nodes=nodes, initiated_from=started, warnings=warnings)
