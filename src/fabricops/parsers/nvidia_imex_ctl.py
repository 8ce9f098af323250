"""``nvidia-imex-ctl -N -j`` (JSON) and ``nvidia-imex-ctl -N`` (text): the status of a whole IMEX domain.

The IMEX guide (docs.nvidia.com/multi-node-nvlink-systems/imex-guide/, ``cmdservice.html``) documents
``-N`` ("the full status of the entire IMEX domain", read through the local command service) and
``-j`` ("output of the -n/-N command will be in JSON"), but prints no example. What the output holds:

- JSON: ``{"nodes": {"<index>": {"status", "host", "hostName", "version", "changed", "connections":
  {"<index>": {"host", "status", "changed"}}}}, "timestamp", "status"}``. The top ``status`` is the
  domain state (UP, DEGRADED, DOWN: NVIDIA/DCGM DcgmImexManager reads these three); a node's ``status``
  its daemon state (READY, UNAVAILABLE, ... as ``nvidia-imex-ctl -q`` prints them); a connection's
  ``status`` what that node sees of the other (CONNECTED, INVALID, ...). Every node of nodes_config.cfg
  has an entry, those whose daemon did not answer as UNAVAILABLE with INVALID connections
  (NVIDIA/ai-cloud-validation, confirmed on a live domain). A ``-H`` run adds ``hostName``.
- Text: a legend (``C - Connected - Ready for operation`` ...), a timestamp, ``Nodes:`` with one
  ``Node #N - IP - STATE [- Version: V]`` line each, the matrix ``Nodes From\\To 0 1 ...`` of legend
  letters, and ``Domain State: UP`` (AWS ParallelCluster's p6e-gb200 guide, k8s-dra-driver-gpu). The
  letters are turned into the JSON's words (:data:`LETTERS`), so both forms give the same record.

Both raise ParseError for anything else (a message such as ``Failed to read node configuration
file``, which ``nvidia-imex-ctl`` prints with exit 255 when IMEX is not configured, included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines, load_json

JSON_TOOL = "nvidia-imex-ctl-json"
JSON_EXPECTED = 'nvidia-imex-ctl -N -j output (a JSON object with "nodes" and the domain "status")'
TEXT_TOOL = "nvidia-imex-ctl"
TEXT_EXPECTED = "nvidia-imex-ctl -N output (a 'Nodes:' list, the connectivity table, 'Domain State:')"

#: what a connection that works reads as (JSON word; text letter C)
CONNECTED = "CONNECTED"
#: the node state of a daemon that is up and serving
READY = "READY"
#: the domain state when every node is connected to every other
UP = "UP"
#: the letters of the text form's connectivity table (its legend) -> the word used in records
LETTERS = {
    "C": CONNECTED,
    "I": "INVALID",
    "N": "NEVER_CONNECTED",
    "R": "RECOVERING",
    "D": "DISCONNECTED",
    "A": "AUTHENTICATING",
    "!V!": "VERSION_MISMATCH",
    "!M!": "NODE_MAP_MISMATCH",
}


@dataclass(frozen=True)
class ImexConnection:
    """What one node sees of another (its own entry included)."""

    index: int  #: the other node's index (its line in nodes_config.cfg, from 0)
    host: str | None  #: the other node's address; None where the output does not say it
    status: str  #: CONNECTED, INVALID, ... (upper case, as the JSON prints it)


@dataclass(frozen=True)
class ImexNode:
    index: int
    host: str | None  #: the address nodes_config.cfg lists
    status: str  #: the node's daemon state: READY, UNAVAILABLE, ...
    hostname: str | None = None  #: ``-H`` only; None when absent, empty or N/A
    version: str | None = None  #: the IMEX / driver version the node reports
    connections: tuple[ImexConnection, ...] = ()


@dataclass(frozen=True)
class ImexDomainStatus:
    status: str  #: the domain state: UP, DEGRADED, DOWN (upper case)
    nodes: tuple[ImexNode, ...]  #: by index
    timestamp: str | None = None  #: as printed (``5/22/2025 19:46:40.891``)
    form: str = "json"  #: "json" (-j) or "text"

    def node(self, host: str) -> ImexNode | None:
        """The entry whose address is ``host``."""
        return next((n for n in self.nodes if n.host == host), None)


def _word(value: object) -> str | None:
    return value.strip().upper() if isinstance(value, str) and value.strip() else None


def _index(key: str, where: str) -> int:
    if not key.isdecimal() or len(key) > 6:
        raise ParseError(JSON_TOOL, JSON_EXPECTED, f"{where} key {key[:40]!r} is not a node index")
    return int(key)


def _text(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value if value and value.upper() != "N/A" else None


@bounded(JSON_TOOL, max_mb=1)
def parse_json(text: str) -> ImexDomainStatus:
    """``nvidia-imex-ctl -N -j [-H]`` -> :class:`ImexDomainStatus`."""
    if not (text or "").strip().startswith("{"):
        first = (text or "").strip().splitlines()[:1]
        raise ParseError(JSON_TOOL, JSON_EXPECTED, f"no JSON object ({first[0][:80]!r})" if first else "")
    doc = load_json(text, JSON_TOOL, JSON_EXPECTED, max_depth=8)
    if not isinstance(doc, dict):
        raise ParseError(JSON_TOOL, JSON_EXPECTED, f"a JSON {type(doc).__name__}, not an object")
    state = _word(doc.get("status"))
    nodes = doc.get("nodes")
    if state is None or not isinstance(nodes, dict):
        raise ParseError(JSON_TOOL, JSON_EXPECTED, 'no domain "status" string or no "nodes" object')
    out = []
    for key, entry in nodes.items():
        index = _index(key, "nodes")
        if not isinstance(entry, dict) or _word(entry.get("status")) is None:
            raise ParseError(JSON_TOOL, JSON_EXPECTED, f"node {index} has no status")
        conns = entry.get("connections") or {}
        if not isinstance(conns, dict):
            raise ParseError(JSON_TOOL, JSON_EXPECTED, f"node {index}: connections is not an object")
        seen = []
        for ckey, conn in conns.items():
            cindex = _index(ckey, f"node {index} connections")
            if not isinstance(conn, dict) or _word(conn.get("status")) is None:
                raise ParseError(JSON_TOOL, JSON_EXPECTED, f"node {index}: connection {cindex} has no status")
            seen.append(ImexConnection(cindex, _text(conn.get("host")), str(_word(conn.get("status")))))
        version = entry.get("version")
        out.append(
            ImexNode(
                index,
                _text(entry.get("host")),
                str(_word(entry.get("status"))),
                _text(entry.get("hostName")),
                _text(version) if isinstance(version, str) else None,
                tuple(sorted(seen, key=lambda c: c.index)),
            )
        )
    return ImexDomainStatus(
        state, tuple(sorted(out, key=lambda n: n.index)), _text(doc.get("timestamp")), "json"
    )


_NODE = re.compile(r"^Node\s+#(\d{1,6})\s+-\s+(\S+)\s+-\s+(.*)$")
_STATE = re.compile(r"^[A-Z][A-Z_]*$")
_DOMAIN = re.compile(r"^Domain State:\s*(\S+)\s*$")
_TIMESTAMP = re.compile(r"^\d{1,2}/\d{1,2}/\d{4} \d{1,2}:\d{2}:\d{2}(?:\.\d+)?$")
_HEADER = re.compile(r"^Nodes From\\To((?:\s+\d{1,6})+)\s*$")
_ROW = re.compile(r"^(\d{1,6})((?:\s+\S+)+)$")


@bounded(TEXT_TOOL, max_mb=1)
def parse_text(text: str) -> ImexDomainStatus:
    """``nvidia-imex-ctl -N [-H]`` -> :class:`ImexDomainStatus` (the letters as :data:`LETTERS` words)."""
    lines = [ln.strip() for ln in clean_lines(text or "")]
    if "Nodes:" not in lines:
        raise ParseError(TEXT_TOOL, TEXT_EXPECTED, "no 'Nodes:' line")
    start = lines.index("Nodes:")
    timestamp = next((ln for ln in lines[:start] if _TIMESTAMP.match(ln)), None)
    nodes: dict[int, dict] = {}
    columns: list[int] | None = None
    table: dict[int, list[str]] = {}
    state = None
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if not line:
            continue
        m = _NODE.match(line)
        if m and columns is None:
            fields = [f.strip() for f in re.split(r"\s+-\s+", m.group(3)) if f.strip()]
            states = [f for f in fields if _STATE.match(f)]
            if not states:
                raise ParseError(TEXT_TOOL, TEXT_EXPECTED, f"node line {number} names no state")
            version = next((f.split(":", 1)[1].strip() for f in fields if f.startswith("Version:")), None)
            names = [f for f in fields if f not in states and not f.startswith("Version:")]
            if int(m.group(1)) in nodes:
                raise ParseError(TEXT_TOOL, TEXT_EXPECTED, f"node {m.group(1)} listed twice (line {number})")
            nodes[int(m.group(1))] = {
                "host": m.group(2),
                "status": states[0],
                "version": version or None,
                "hostname": names[0] if names else None,
            }
            continue
        m = _HEADER.match(line)
        if m:
            columns = [int(c) for c in m.group(1).split()]
            continue
        m = _DOMAIN.match(line)
        if m:
            state = m.group(1).upper()
            break
        m = _ROW.match(line)
        if m and columns is not None:
            cells = m.group(2).split()
            if len(cells) != len(columns) or any(c not in LETTERS for c in cells) or int(m.group(1)) in table:
                raise ParseError(TEXT_TOOL, TEXT_EXPECTED, f"connectivity row on line {number} is damaged")
            table[int(m.group(1))] = cells
            continue
        raise ParseError(TEXT_TOOL, TEXT_EXPECTED, f"line {number} is not a node, table or domain line")
    if state is None:
        raise ParseError(TEXT_TOOL, TEXT_EXPECTED, "no 'Domain State:' line")
    if not nodes:
        raise ParseError(TEXT_TOOL, TEXT_EXPECTED, "no 'Node #N - ADDRESS - STATE' line")
    if columns is None or sorted(table) != sorted(nodes) or sorted(columns) != sorted(nodes):
        raise ParseError(TEXT_TOOL, TEXT_EXPECTED, "the connectivity table does not list every node once")
    out = []
    for index in sorted(nodes):
        n = nodes[index]
        conns = tuple(
            ImexConnection(col, nodes[col]["host"], LETTERS[cell])
            for col, cell in sorted(zip(columns, table[index], strict=True))
        )
        out.append(ImexNode(index, n["host"], n["status"], n["hostname"], n["version"], conns))
    return ImexDomainStatus(state, tuple(out), timestamp, "text")
