"""``iblinkinfo`` (infiniband-diags): every port of every node and what it is cabled to.

Default output (``iblinkinfo.c``: ``print_node_header``, ``print_port``): a header per node, then
one line per port::

    Switch: 0x506b4b0300820910 MF0;SB7700:MSB7700/U1:
               2   17[  ] ==( 4X      25.78125 Gbps Active/  LinkUp)==>       4    1[  ] "n02 HCA-1" ( )
               2    1[  ] ==(                Down/ Polling)==>             [  ] "" ( )
    CA: n02 HCA-1:
          0xec0d9a03003d62be      4    1[  ] ==( 4X      25.78125 Gbps Active/  LinkUp)==>  ...
                 ... 2   17[  ] "MF0;SB7700:MSB7700/U1" ( )

Left of ``==(``: the CA port's GUID (CAs only), the LID (a switch's port-0 LID), the port number
and its external port in brackets. Inside ``( )``: width, per-lane speed (``25.78125 Gbps`` EDR,
``53.125`` HDR, ``106.25`` NDR, ``212.5`` XDR, ``10.0 Gbps (FDR10)``), ``State/PhysState``; a Down
port has only the states. Right of ``==>``: the peer's LID, port and NodeDescription, then the
"Could be ..." note in parentheses; an unconnected port prints ``[  ] "" ( )``. ``-l`` (line
mode) puts the node's GUID and description at the start of every line instead of a header:
that form is read too. Output filtered with ``grep`` (no node headers) is refused: a port line
could not be told apart from another node's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines

TOOL = "iblinkinfo"
EXPECTED = "'Switch: 0x<guid> <desc>:' / 'CA: <desc>:' headers over 'LID PORT[ ] ==( ... )==> ...' lines"

_HEADER = re.compile(r"^(Switch|CA|Router): (?:(0x[0-9a-fA-F]{1,16}) )?(.*):$")
_LEFT = re.compile(r"^(?:(0x[0-9a-fA-F]{1,16})\s+)?(\d+)\s+(\d+)\[([^\]]*)\]$")
_LINE_MODE = re.compile(r'^(0x[0-9a-fA-F]{1,16}) "([^"]*)"\s+(.*)$')
_PEER = re.compile(r"^(?:(0x[0-9a-fA-F]{1,16})\s+)?(\d+)\s+(\d+)\[([^\]]*)\]$")


@dataclass
class LinkPort:
    port: int
    lid: int
    state: str  #: Active, Down, Initialize, Armed
    phys_state: str  #: LinkUp, Polling, Disabled, ...
    width: str | None = None  #: "4X"
    lane_speed: str | None = None  #: "106.25 Gbps"
    port_guid: str | None = None  #: a CA's port GUID
    peer_lid: int | None = None
    peer_port: int | None = None
    peer_desc: str | None = None
    peer_guid: str | None = None  #: line mode only


@dataclass
class LinkNode:
    kind: str  #: Switch | CA | Router ("?" in line mode, which prints no node type)
    desc: str
    guid: str | None = None  #: a switch's port-0 GUID (header); a CA has one per port line
    ports: list[LinkPort] = field(default_factory=list)


@dataclass
class IbLinkInfo:
    nodes: list[LinkNode]
    warnings: list[str] = field(default_factory=list)


def _link(inside: str) -> tuple[str | None, str | None, str, str] | None:
    """' 4X      25.78125 Gbps Active/  LinkUp' -> ('4X', '25.78125 Gbps', 'Active', 'LinkUp')."""
    left, slash, phys = inside.rpartition("/")
    if not slash:
        return None
    words = left.split()
    if not words or not phys.strip():
        return None
    state = words[-1]
    width = words[0] if len(words) > 1 else None
    speed = " ".join(words[1:-1]) or None
    return width, speed, state, phys.strip()


def _port(body: str, lineno: int) -> LinkPort:
    start = body.find("==(")
    end = body.find(")==>", start + 3) if start >= 0 else -1
    if start < 0 or end < 0:
        raise _bad(lineno, "no '==( ... )==>' link field (cut?)")
    m = _LEFT.match(body[:start].strip())
    link = _link(body[start + 3 : end])
    if not m or link is None:
        raise _bad(lineno, f"port field {body[:60].strip()!r} does not parse")
    width, speed, state, phys = link
    p = LinkPort(
        port=int(m.group(3)),
        lid=int(m.group(2)),
        state=state,
        phys_state=phys,
        width=width,
        lane_speed=speed,
        port_guid=m.group(1).lower() if m.group(1) else None,
    )
    remote = body[end + 4 :].strip()
    q1 = remote.find('"')
    q2 = remote.rfind('"')
    if q1 < 0 or q2 <= q1:
        if remote.strip('"') == "Port not available":
            return p
        raise _bad(lineno, f"port {p.port}: peer description not quoted (cut?)")
    before = remote[:q1].strip()
    after = remote[q2 + 1 :].strip()
    if not (after.startswith("(") and after.endswith(")")):
        raise _bad(lineno, f"port {p.port}: no '( ... )' note after the peer (cut?)")
    desc = remote[q1 + 1 : q2]
    if before.replace(" ", "") == "[]":  # not connected
        return p
    pm = _PEER.match(before)
    if not pm:
        raise _bad(lineno, f"port {p.port}: peer {before[:40]!r} is not 'LID PORT[..]'")
    p.peer_guid = pm.group(1).lower() if pm.group(1) else None
    p.peer_lid, p.peer_port, p.peer_desc = int(pm.group(2)), int(pm.group(3)), desc
    return p


def _bad(lineno: int, what: str) -> ParseError:
    return ParseError(TOOL, EXPECTED, f"line {lineno}: {what}")


@bounded(TOOL, max_mb=8)
def parse(text: str) -> IbLinkInfo:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    nodes: list[LinkNode] = []
    warnings: list[str] = []
    node: LinkNode | None = None
    line_mode: dict[tuple[str, str], LinkNode] = {}
    for lineno, raw in enumerate(clean_lines(text), 1):
        line = raw.strip()
        if not line:
            continue
        first = line[0]
        if first in "iW" and line.startswith(("ibwarn:", "iblinkinfo:", "ibpanic:", "WARN:")):
            warnings.append(line)
            continue
        m = _HEADER.match(line) if first in "SCR" else None
        if m and "==(" not in line:
            kind, guid, desc = m.groups()
            node = LinkNode(kind, desc, guid.lower() if guid else None)
            nodes.append(node)
            continue
        lm = _LINE_MODE.match(line)
        if lm and "==(" in lm.group(3):
            key = (lm.group(1).lower(), lm.group(2).strip())
            p = _port(lm.group(3), lineno)
            target = line_mode.get(key)
            if target is None:
                # line mode prints no node type: the node's GUID and description only
                target = LinkNode(kind="?", desc=key[1], guid=key[0])
                line_mode[key] = target
                nodes.append(target)
            target.ports.append(p)
            continue
        if "==(" in line:
            if node is None:
                raise _bad(
                    lineno, "a port line before any 'Switch:'/'CA:' header (output filtered with grep?)"
                )
            node.ports.append(_port(line, lineno))
            continue
        raise _bad(lineno, f"{line[:60]!r} is not iblinkinfo output")
    if not nodes:
        raise ParseError(TOOL, EXPECTED, warnings[-1] if warnings else "no node header")
    return IbLinkInfo(nodes=nodes, warnings=warnings)
