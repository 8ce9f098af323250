"""Parsers for perftest output: ib_{write,read,send}_bw and ib_{write,read,send}_lat.

``parse_bw(text)`` and ``parse_lat(text)`` read what one side (client or server) prints: the
dashed header block with the test title and ``Key : value`` pairs (two per line on some lines,
separated by tabs or spaces), the ``local address:`` / ``remote address:`` lines (one per QP, each
optionally followed by a ``GID:`` line) and the result table. Tolerated: "Conflicting CPU frequency"
warnings inside the table, ``WARNING: BW peak won't be measured in this run.``, driver warnings
between dashed lines, headers that differ between perftest versions, rst/markdown indentation,
tabs, CRLF. Schemas: docs/parsers.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines, to_number

__all__ = ["Address", "BwResult", "LatResult", "PerftestBw", "PerftestLat", "parse_bw", "parse_lat"]

_DASHES = re.compile(r"^\s*-{20,}\s*$")
_TITLE = re.compile(r"^\s*((?:[A-Za-z_]+ )+?(?:BW|Latency) Test)\s*$")
_LETTER = re.compile(r"[A-Za-z]")
_ADDR = re.compile(r"^\s*(?P<side>local|remote) address:\s*(?P<rest>.*)$")
_GID = re.compile(r"^\s*GID:\s*(?P<gid>\S+)\s*$")
_CPU_WARN = re.compile(r"Conflicting CPU frequency values detected")
_PEAK_WARN = re.compile(r"BW peak won't be measured")
_SERVER = re.compile(r"Waiting for client (?:to connect|rdma_cm QP to connect)")
_BW_UNITS = re.compile(r"BW peak\[(?P<units>[^\]]+)\]")
# A '[unit]' of a header; '[' excluded inside too: `\[[^\]]*\]` ran from every '[' of a long run of
# them to the line's end (quadratic: 100 KB of '[' took 7 s). Same count: each match ends at the
# same ']' as before, it only starts at the last '[' before it.
_UNIT = re.compile(r"\[[^\[\]]*+\]")
_NUMERIC_ROW = re.compile(r"^\s*\d+(?:\s+[-\d.]+)++\s*$")  # possessive: no backtracking into the groups

_LAT_COLUMNS = {
    "#bytes": "bytes",
    "#iterations": "iterations",
    "t_min[usec]": "t_min_us",
    "t_max[usec]": "t_max_us",
    "t_typical[usec]": "t_typical_us",
    "t_avg[usec]": "t_avg_us",
    "t_stdev[usec]": "t_stdev_us",
    "99% percentile[usec]": "p99_us",
    "99.9% percentile[usec]": "p99_9_us",
    "tps average": "tps_average",
}


@dataclass
class Address:
    """One ``local address:`` or ``remote address:`` line (one per QP)."""

    lid: str
    qpn: str
    psn: str
    out: str | None = None
    rkey: str | None = None
    vaddr: str | None = None
    gid: str | None = None


@dataclass
class BwResult:
    bytes: int
    iterations: int
    bw_peak: float
    bw_average: float
    msg_rate_mpps: float


@dataclass
class LatResult:
    bytes: int
    iterations: int
    t_min_us: float | None = None
    t_max_us: float | None = None
    t_typical_us: float | None = None
    t_avg_us: float | None = None
    t_stdev_us: float | None = None
    p99_us: float | None = None
    p99_9_us: float | None = None
    tps_average: float | None = None


@dataclass
class _Common:
    test: str
    device: str | None
    link_type: str | None
    side: str
    transport_type: str | None = None
    connection_type: str | None = None
    qps: int | None = None
    mtu: int | None = None
    gid_index: int | None = None
    tx_depth: int | None = None
    max_inline_data: int | None = None
    rdma_cm: bool | None = None
    data_exchange_method: str | None = None
    mode: str = "iterations"
    cpu_freq_warning: bool = False
    local_addresses: list[Address] = field(default_factory=list)
    remote_addresses: list[Address] = field(default_factory=list)
    header: dict[str, str] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)


@dataclass
class PerftestBw(_Common):
    units: str = "MB/sec"
    bidirectional: bool = False
    peak_measured: bool = True
    cq_moderation: int | None = None
    post_list: int | None = None
    outstanding_reads: int | None = None
    results: list[BwResult] = field(default_factory=list)


@dataclass
class PerftestLat(_Common):
    results: list[LatResult] = field(default_factory=list)


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    m = re.match(r"^(\d+)", value)
    return int(m.group(1)) if m else None


def _pairs(line: str) -> list[tuple[str, str]]:
    """'Key : value<tab>Key2 : value2' -> [('Key', 'value'), ('Key2', 'value2')], in linear time.

    Matches what ``finditer(r"([A-Za-z][^:\\t]*?)\\s*:\\s*(\\S+)")`` finds (a key starts with a
    letter and holds no tab or colon; the value is the next word), but that regex was quadratic:
    on a long line without a colon it rescanned the rest of the line from every letter.
    """
    pairs = []
    pos, n = 0, len(line)
    while pos < n:
        colon = line.find(":", pos)
        if colon < 0:
            break
        key_end = colon
        while key_end > pos and line[key_end - 1].isspace():
            key_end -= 1
        tab = line.rfind("\t", pos, key_end)
        letter = _LETTER.search(line, max(pos, tab + 1), key_end)
        value_start = colon + 1
        while value_start < n and line[value_start].isspace():
            value_start += 1
        if letter is None or value_start >= n:
            pos = colon + 1
            continue
        value_end = value_start
        while value_end < n and not line[value_end].isspace():
            value_end += 1
        pairs.append((line[letter.start() : key_end].strip(), line[value_start:value_end]))
        pos = value_end
    return pairs


def _onoff(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.upper() == "ON"


def _parse_address(rest: str) -> Address:
    tokens = rest.split()
    values: dict[str, str] = {}
    i = 0
    while i < len(tokens) - 1:
        key = tokens[i].upper()
        if key in {"LID", "QPN", "PSN", "OUT", "RKEY", "VADDR"}:
            values[key] = tokens[i + 1]
            i += 2
        else:
            i += 1
    return Address(
        lid=values.get("LID", ""),
        qpn=values.get("QPN", ""),
        psn=values.get("PSN", ""),
        out=values.get("OUT"),
        rkey=values.get("RKEY"),
        vaddr=values.get("VADDR"),
    )


def _scan(text: str, tool: str) -> dict:
    """Split perftest output into title, header pairs, addresses, table header and rows."""
    if not text or not text.strip():
        raise ParseError(tool, "perftest output with a '... Test' title", "empty input")
    lines = clean_lines(text)
    out: dict = {
        "title": None, "pairs": {}, "local": [], "remote": [], "table_header": None, "rows": [],
        "cpu_warn": False, "peak_warn": False, "server": False, "messages": [],
    }
    state = "pre"  # pre -> header -> addresses -> table -> done
    last_addr: Address | None = None
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if _CPU_WARN.search(stripped):
            out["cpu_warn"] = True
            continue
        if _PEAK_WARN.search(stripped):
            out["peak_warn"] = True
            continue
        if _SERVER.search(stripped):
            out["server"] = True
            continue
        if stripped.startswith("*") and stripped.endswith("*"):
            continue
        if _DASHES.match(line):
            if state == "header":
                state = "addresses"
            elif state == "table" and out["rows"]:
                state = "done"
            continue
        if state == "done":
            continue
        title = _TITLE.match(line)
        if title and out["title"] is None:
            out["title"] = title.group(1).strip()
            state = "header"
            continue
        addr = _ADDR.match(line)
        if addr:
            last_addr = _parse_address(addr.group("rest"))
            out[addr.group("side")].append(last_addr)
            continue
        gid = _GID.match(line)
        if gid and last_addr is not None:
            last_addr.gid = gid.group("gid")
            continue
        if stripped.startswith("#bytes"):
            out["table_header"] = stripped
            state = "table"
            continue
        if state == "table" and _NUMERIC_ROW.match(line):
            out["rows"].append(stripped.split())
            continue
        if state == "header":
            for key, val in _pairs(line):
                out["pairs"][key] = val
            continue
        out["messages"].append(stripped)
    if out["title"] is None:
        raise ParseError(tool, "perftest output with a '... BW Test' or '... Latency Test' title",
                         "no test title line found")
    return out


def _common_kwargs(scan: dict) -> dict:
    p = scan["pairs"]
    return {
        "test": scan["title"],
        "device": p.get("Device"),
        "link_type": p.get("Link type"),
        "side": "server" if scan["server"] else "client",
        "transport_type": p.get("Transport type"),
        "connection_type": p.get("Connection type"),
        "qps": _int(p.get("Number of qps")),
        "mtu": _int(p.get("Mtu")),
        "gid_index": _int(p.get("GID index")),
        "tx_depth": _int(p.get("TX depth")),
        "max_inline_data": _int(p.get("Max inline data")),
        "rdma_cm": _onoff(p.get("rdma_cm QPs")),
        "data_exchange_method": p.get("Data ex. method"),
        "cpu_freq_warning": scan["cpu_warn"],
        "local_addresses": scan["local"],
        "remote_addresses": scan["remote"],
        "header": dict(p),
        "messages": scan["messages"],
    }


def _number(token: str, tool: str, row: list[str]) -> float:
    value = to_number(token)
    if value is None or value < 0:
        shown = " ".join(row)[:120]
        raise ParseError(tool, "numeric result columns", f"bad value {token[:40]!r} in row {shown!r}")
    return float(value)


def _decimals(token: str) -> int:
    return len(token.partition(".")[2]) if "." in token else 0


def _columns(header: str | None) -> int | None:
    """Columns of a '#bytes #iterations BW peak[MB/sec] ...' header: the two '#' ones and each 'x[unit]'."""
    if not header:
        return None
    return 2 + len(_UNIT.findall(header)) + header.count("tps average")


@bounded("perftest-bw", max_mb=1)
def parse_bw(text: str) -> PerftestBw:
    """Parse the output of ib_write_bw / ib_read_bw / ib_send_bw (client or server side)."""
    tool = "perftest-bw"
    scan = _scan(text, tool)
    if " BW Test" not in scan["title"]:
        raise ParseError(tool, "a '... BW Test' title", f"found {scan['title']!r} (use perftest-lat)")
    units = "MB/sec"
    if scan["table_header"]:
        m = _BW_UNITS.search(scan["table_header"])
        if not m:
            raise ParseError(tool, "a '#bytes ... BW peak[units]' table header",
                             f"got {scan['table_header']!r}")
        units = m.group("units")
    results = []
    # perftest prints 5 columns, a 6th with --cpu_util (CPU_Util[%]); a header without its complete
    # 'MsgRate[Mpps]' was cut (a terminal's width).
    width = _columns(scan["table_header"]) or 5
    if scan["table_header"] and (width not in (5, 6) or "MsgRate[Mpps]" not in scan["table_header"]):
        raise ParseError(tool, "a '#bytes #iterations BW peak[..] BW average[..] MsgRate[Mpps]' header",
                         f"got {scan['table_header'][:100]!r} (cut or damaged output)")
    for row in scan["rows"]:
        if len(row) != width:
            raise ParseError(tool, "rows of #bytes #iterations peak average msgrate",
                             f"row {' '.join(row)[:80]!r} has {len(row)} values for {width} columns")
        # REPORT_FMT prints BW with %.2lf (%.6lf in the extended format) and MsgRate with %.6lf:
        # fewer decimals mean the line was cut inside the value.
        if not (_decimals(row[2]) in (2, 6) and _decimals(row[3]) in (2, 6) and _decimals(row[4]) == 6):
            raise ParseError(tool, "BW values with 2 decimals and MsgRate with 6 (perftest's format)",
                             f"row {' '.join(row)[:80]!r} (cut or damaged output)")
        results.append(BwResult(
            bytes=int(row[0]), iterations=int(_number(row[1], tool, row)),
            bw_peak=_number(row[2], tool, row), bw_average=_number(row[3], tool, row),
            msg_rate_mpps=_number(row[4], tool, row),
        ))
    side = "server" if scan["server"] else "client"
    if not results and side != "server":
        raise ParseError(tool, "at least one result row under the '#bytes' table header",
                         "truncated output: no results")
    p = scan["pairs"]
    record = PerftestBw(
        **_common_kwargs(scan),
        units=units,
        bidirectional="Bidirectional" in scan["title"],
        peak_measured=not scan["peak_warn"],
        cq_moderation=_int(p.get("CQ Moderation")),
        post_list=_int(p.get("Post List")),
        outstanding_reads=_int(p.get("Outstand reads")),
        results=results,
    )
    if scan["peak_warn"]:
        record.mode = "duration"
    return record


def _lat_columns(header: str) -> list[str]:
    tokens = re.findall(r"\d+(?:\.\d+)?% percentile\[usec\]|tps average|\S+", header)
    return [_LAT_COLUMNS.get(tok, tok) for tok in tokens]


@bounded("perftest-lat", max_mb=1)
def parse_lat(text: str) -> PerftestLat:
    """Parse the output of ib_write_lat / ib_read_lat / ib_send_lat (client or server side)."""
    tool = "perftest-lat"
    scan = _scan(text, tool)
    if " Latency Test" not in scan["title"]:
        raise ParseError(tool, "a '... Latency Test' title", f"found {scan['title']!r} (use perftest-bw)")
    results = []
    columns = _lat_columns(scan["table_header"]) if scan["table_header"] else []
    if columns and ("t_min_us" not in columns and "t_avg_us" not in columns):
        raise ParseError(tool, "a '#bytes #iterations t_min[usec] ...' table header",
                         f"got {scan['table_header']!r}")
    unknown = [c for c in columns if c not in _LAT_COLUMNS.values()]
    if unknown or (columns and columns[-1] in ("t_min_us", "t_max_us")):
        raise ParseError(tool, "a complete '#bytes #iterations t_min[usec] ... t_typical[usec] ...' header",
                         f"got {scan['table_header'][:100]!r} (cut or damaged output)")
    for row in scan["rows"]:
        if len(row) < 3 or (columns and len(row) != len(columns)):
            raise ParseError(tool, "latency rows matching the '#bytes ...' header",
                             f"row {' '.join(row)[:80]!r} has {len(row)} values for {len(columns)} columns")
        values: dict = {}
        for name, token in zip(columns, row, strict=False):
            if name in {"bytes", "iterations"}:
                values[name] = int(_number(token, tool, row))
            elif name in _LAT_COLUMNS.values():
                if name != "tps_average" and _decimals(token) != 2:  # REPORT_FMT_LAT: %-7.2f
                    raise ParseError(tool, "latency values with 2 decimals (perftest's format)",
                                     f"row {' '.join(row)[:80]!r} (cut or damaged output)")
                values[name] = _number(token, tool, row)
        if "bytes" not in values or "iterations" not in values:
            raise ParseError(tool, "#bytes and #iterations columns", f"row {row}")
        results.append(LatResult(**values))
    side = "server" if scan["server"] else "client"
    if not results and side != "server":
        raise ParseError(tool, "at least one result row under the '#bytes' table header",
                         "truncated output: no results")
    record = PerftestLat(**_common_kwargs(scan), results=results)
    if "tps_average" in columns:
        record.mode = "duration"
    return record
