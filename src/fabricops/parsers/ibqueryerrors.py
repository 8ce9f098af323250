"""``ibqueryerrors`` (infiniband-diags): ports whose error counters exceed thresholds.

``Errors for "NAME"`` (CA) or ``Errors for 0xGUID "NAME"`` (switch), then per-port lines
``GUID 0x... port N: [Counter == value] ...`` (``port ALL`` is the switch aggregate; with
``--data`` the values carry a human readable suffix like ``(1.234GB)``), then the summary.
A clean fabric prints only the summary; that parses to ``nodes == []``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines

TOOL = "ibqueryerrors"
EXPECTED = "'Errors for ...' blocks and/or the '## Summary:' lines"

# Possessive blanks: backtracking into them before the optional parts was quadratic on long runs.
_NODE = re.compile(r'^\s*Errors for\s++(?:(0x[0-9a-fA-F]+)\s*+)?(?:"(.*)")?\s*$')
_PORT = re.compile(r"^\s*GUID\s+(0x[0-9a-fA-F]+)\s+port\s+(\w+):\s*(.*)$")
# The `--data` suffix holds no bracket or parenthesis: `\(([^)]*)\)` ran from every '[' of a line of
# '[a==1(' repeated to the line's end (quadratic).
_CTR = re.compile(r"\[(\w+)\s*==\s*(\d+)(?:\s*\(([^()\[\]]*+)\))?\]")
# The three summary lines in one pattern: one match per '##' line, not three.
_SUMMARY = re.compile(
    r"^##\s*+(?:Summary:\s*(?P<nodes>\d+)\s+nodes checked,\s*(?P<bad_nodes>\d+)\s+bad nodes found"
    r"|(?P<ports>\d+)\s+ports checked,\s*(?P<bad_ports>\d+)\s+ports have errors beyond threshold"
    r"|(?P<pma>\d+)\s+PMA query failures)"
)
# A threshold starts at a word start and takes the whole word (possessive): `(\w+)\s*=` tried the
# word's every suffix, each scanned to its end (quadratic: 50 KB of one word took 73 s).
_THRESHOLD = re.compile(r"(?<!\w)(\w++)\s*+=\s*+(\d+)")


@dataclass
class IbqePort:
    guid: str
    port: str
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def port_number(self) -> int | None:
        return int(self.port) if self.port.isdecimal() else None


@dataclass
class IbqeNode:
    name: str | None
    guid: str | None
    is_switch: bool
    ports: list[IbqePort] = field(default_factory=list)


@dataclass
class Ibqueryerrors:
    nodes: list[IbqeNode]
    nodes_checked: int | None = None
    bad_nodes: int | None = None
    ports_checked: int | None = None
    bad_ports: int | None = None
    pma_query_failures: int | None = None
    thresholds: dict[str, int] = field(default_factory=dict)
    suppressed: list[str] = field(default_factory=list)


@bounded(TOOL, max_mb=4)
def parse(text: str) -> Ibqueryerrors:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    nodes: list[IbqeNode] = []
    rec = Ibqueryerrors(nodes=nodes)
    saw_summary = False
    for line in clean_lines(text):
        s = line.strip()
        if not s:
            continue
        first = s[0]  # each pattern is tried only on lines starting with its first letter
        if first not in "EG#":
            continue
        m = _NODE.match(line) if first == "E" else None
        if m and (m.group(1) or m.group(2) is not None):
            nodes.append(IbqeNode(name=m.group(2), guid=m.group(1), is_switch=m.group(1) is not None))
            continue
        m = _PORT.match(line) if first == "G" else None
        if m:
            if not nodes:
                nodes.append(IbqeNode(name=None, guid=None, is_switch=False))
            port = IbqePort(guid=m.group(1), port=m.group(2))
            for c in _CTR.finditer(m.group(3)):
                port.counters[c.group(1)] = int(c.group(2))
            rest = _CTR.sub("", m.group(3)).strip()
            if rest:  # a cut line ('[PortXmitWait == 42') or damage: never half a port's counters
                raise ParseError(TOOL, EXPECTED, f"port line ends in {rest[:40]!r}, not '[Counter == N]' "
                                 "(cut or damaged output)")
            nodes[-1].ports.append(port)
            continue
        if first != "#" or not s.startswith("##"):
            continue
        m = _SUMMARY.match(s)
        if m and m.group("nodes"):
            rec.nodes_checked, rec.bad_nodes = int(m.group("nodes")), int(m.group("bad_nodes"))
            saw_summary = True
            continue
        if m and m.group("ports"):
            rec.ports_checked, rec.bad_ports = int(m.group("ports")), int(m.group("bad_ports"))
            continue
        if m:
            rec.pma_query_failures = int(m.group("pma"))
            continue
        if s.startswith("## Thresholds:"):
            for k, v in _THRESHOLD.findall(s.split(":", 1)[1]):
                rec.thresholds[k] = int(v)
            continue
        if s.startswith("## Suppressed:"):
            rec.suppressed = s.split(":", 1)[1].split()
            continue
    if not nodes and not saw_summary:
        raise ParseError(TOOL, EXPECTED, "neither 'Errors for' blocks nor a '## Summary:' line")
    for n in nodes:
        if not n.ports:
            detail = f"'Errors for {n.name or n.guid}' has no port lines (truncated?)"
            raise ParseError(TOOL, EXPECTED, detail)
    return rec
