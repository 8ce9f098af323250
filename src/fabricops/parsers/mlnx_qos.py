"""``mlnx_qos -i IF`` (MLNX_OFED / mlnx-tools): trust, DSCP map, PFC, buffers, ETS.

Versions differ: older ones print no ``dscp2prio mapping`` (trust pcp, or netlink without sysfs),
no ``Receive buffer size`` and no ``buffer`` row; newer ones add ``default priority:`` and
``max_buffer_size=``/``total_size=``. A priority's DSCP list wraps after 8 values onto another
``prio:N dscp:`` line. Warning lines (``****** WARNING: lldpad ...``, ``... not supported on your
system``) are collected in ``warnings``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines, to_int

TOOL = "mlnx_qos"
EXPECTED = "'Priority trust state:' and a 'PFC configuration:' table"

_TRUST = re.compile(r"^\s*(?:Priority\s+)?trust\s+(?:state|mode):\s*(\S+)", re.I)
_DCBX = re.compile(r"^\s*DCBX mode:\s*(.+)$", re.I)  # stripped in code: (.+?)\s*$ is quadratic
_D2P = re.compile(r"^\s*prio:(\d)\s+dscp:([\d,\s]*)$")
_BUF = re.compile(r"^\s*Receive buffer size \(bytes\):\s*(.*)$")
_CABLE = re.compile(r"^\s*Cable len:\s*(\d+)")
# One way to split the numbers: ((?:\d+\s*)+) backtracked exponentially on '0000...0x'.
_ROW = re.compile(r"^\s*(priority|enabled|buffer):?\s+(\d+(?:\s+\d+)*)\s*$")
_TC = re.compile(r"^\s*tc:\s*(\d+)\s+ratelimit:\s*([^,\s][^,]*),\s*tsa:\s*(\w+)(?:,\s*bw:\s*(\d+)%)?")
_TCPRIO = re.compile(r"^\s*(?:priority|up):\s*(\d)\s*$")


@dataclass
class MlnxQosTc:
    tc: int
    ratelimit: str
    tsa: str
    bw: int | None = None
    priorities: list[int] = field(default_factory=list)


@dataclass
class MlnxQos:
    trust: str | None
    pfc_enabled: list[int]
    dcbx_mode: str | None = None
    dscp2prio: dict[int, list[int]] | None = None
    default_priority: int | None = None
    receive_buffer_sizes: list[int] | None = None
    max_buffer_size: int | None = None
    total_buffer_size: int | None = None
    cable_len: int | None = None
    pfc_buffer: list[int] | None = None
    tcs: list[MlnxQosTc] = field(default_factory=list)
    prio_tc: list[int | None] = field(default_factory=lambda: [None] * 8)
    warnings: list[str] = field(default_factory=list)

    @property
    def pfc_priorities(self) -> list[int]:
        return [p for p, on in enumerate(self.pfc_enabled) if on]

    def prio_for_dscp(self, dscp: int) -> int | None:
        if not self.dscp2prio:
            return None
        return next((p for p, ds in self.dscp2prio.items() if dscp in ds), None)


@bounded(TOOL, max_mb=1)
def parse(text: str) -> MlnxQos:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    trust: str | None = None
    dcbx = None
    d2p: dict[int, list[int]] | None = None
    default_prio = None
    bufs = None
    max_buf = tot_buf = None
    cable = None
    rows: dict[str, list[int]] = {}
    tcs: list[MlnxQosTc] = []
    warnings: list[str] = []
    saw_pfc = False
    section = None
    for line in clean_lines(text):
        s = line.strip()
        if not s:
            continue
        if "not supported on your system" in s or s.startswith("*") or "Netlink error" in s:
            warnings.append(s)
            continue
        m = _DCBX.match(line)
        if m:
            dcbx = m.group(1).strip()
            continue
        m = _TRUST.match(line)
        if m:
            trust = m.group(1).lower()
            continue
        if s.startswith("dscp2prio mapping"):
            d2p = {}
            section = "dscp"
            continue
        m = _D2P.match(line)
        if m and d2p is not None:
            # mlnx_qos prints "dscp:07,06,...,": digits only between the commas. Joining digits
            # split by spaces would read "0 0 0" as one (possibly 20,000-digit) number.
            pieces = [v.strip() for v in m.group(2).split(",")]
            bad = next((v for v in pieces if v and not (v.isdigit() and len(v) <= 2)), None)
            if bad is not None:
                raise ParseError(TOOL, EXPECTED, f"dscp2prio value {bad[:20]!r} is not a DSCP number")
            vals = [int(v) for v in pieces if v]
            d2p.setdefault(int(m.group(1)), []).extend(vals)
            continue
        if s.startswith("default priority:"):
            rest = s.split(":", 1)[1].strip()
            default_prio = int(rest) if rest.isdecimal() else None
            section = "default"
            continue
        if section == "default" and s.isdecimal():
            default_prio = int(s)
            continue
        m = _BUF.match(line)
        if m:
            parts = [p.strip() for p in m.group(1).split(",") if p.strip()]
            bufs = [int(p) for p in parts if p.isdecimal()]
            for p in parts:
                if p.startswith("max_buffer_size="):
                    max_buf = to_int(p.split("=", 1)[1])
                elif p.startswith("total_size="):
                    tot_buf = to_int(p.split("=", 1)[1])
            continue
        m = _CABLE.match(line)
        if m:
            cable = int(m.group(1))
            continue
        if s.startswith("PFC configuration"):
            saw_pfc = True
            section = "pfc"
            continue
        m = _ROW.match(line)
        if m and section == "pfc":
            if m.group(1) in rows:
                raise ParseError(TOOL, EXPECTED, f"PFC table has two '{m.group(1)}' rows (damaged output)")
            rows[m.group(1)] = [int(v) for v in m.group(2).split()]
            continue
        if section == "pfc" and re.match(r"(?:priority|enabled|buffer)\b", s) and not _TCPRIO.match(line):
            raise ParseError(TOOL, EXPECTED, f"PFC table row {s[:60]!r} is not 8 numbers (cut or damaged)")
        m = _TC.match(line)
        if m:
            tcs.append(MlnxQosTc(tc=int(m.group(1)), ratelimit=m.group(2).strip(), tsa=m.group(3),
                                 bw=int(m.group(4)) if m.group(4) else None))
            section = "tc"
            continue
        m = _TCPRIO.match(line)
        if m and tcs:
            tcs[-1].priorities.append(int(m.group(1)))
            continue
    if not saw_pfc or "enabled" not in rows:
        detail = warnings[-1] if warnings else "no 'PFC configuration:' table (truncated?)"
        raise ParseError(TOOL, EXPECTED, detail)
    enabled = rows["enabled"]
    for name, values in rows.items():
        if len(values) != 8:
            raise ParseError(TOOL, EXPECTED, f"PFC '{name}' row has {len(values)} values, not 8")
    if any(v not in (0, 1) for v in enabled):
        raise ParseError(TOOL, EXPECTED, f"PFC 'enabled' row holds {enabled}, not 0/1 flags")
    if "priority" in rows and rows["priority"] != list(range(8)):
        raise ParseError(TOOL, EXPECTED, f"PFC 'priority' row is {rows['priority']}, not 0..7")
    if d2p is not None:
        bad = {p: ds for p, ds in d2p.items() if p > 7 or any(d > 63 for d in ds)}
        if bad:
            raise ParseError(TOOL, EXPECTED, f"dscp2prio holds values out of range: {bad}"[:160])
    if trust is None and not any("trust" in w.lower() for w in warnings):
        raise ParseError(TOOL, EXPECTED, "no 'Priority trust state:' line")
    prio_tc: list[int | None] = [None] * 8
    for tc in tcs:
        for p in tc.priorities:
            if 0 <= p < 8:
                prio_tc[p] = tc.tc
    return MlnxQos(trust=trust, pfc_enabled=enabled, dcbx_mode=dcbx, dscp2prio=d2p,
                   default_priority=default_prio, receive_buffer_sizes=bufs, max_buffer_size=max_buf,
                   total_buffer_size=tot_buf, cable_len=cable, pfc_buffer=rows.get("buffer"), tcs=tcs,
                   prio_tc=prio_tc, warnings=warnings)
