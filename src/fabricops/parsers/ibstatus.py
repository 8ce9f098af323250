"""``ibstatus`` (infiniband-diags shell script reading sysfs): one block per device port.

``rate: 400 Gb/sec (4X NDR)`` gives ``rate=400``, ``width="4X"``, ``speed="NDR"``; ``10 Gb/sec (4X)``
(old kernels print no speed name for SDR) gives ``speed=None``. ``Fatal error:  No devices`` raises
:class:`ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines, to_int, to_number

TOOL = "ibstatus"
EXPECTED = "\"Infiniband device 'DEV' port N status:\" blocks"

_HDR = re.compile(r"^\s*Infiniband device '([^']+)' port (\d+) status:\s*$")
# The key starts with a letter: '^\s+([a-z_ ]+?):' (spaces on both sides) was quadratic on a long
# run of leading blanks; the value is stripped in code ((.*?)\s*$ is quadratic too).
_KV = re.compile(r"^\s+([a-z_][a-z_ ]*?):\s*(.*)$")
_NUMSTATE = re.compile(r"^(\d+):\s*(\S.*)$")
_RATE = re.compile(r"^([\d.]+)\s*Gb/sec(?:\s*\((\d+X)\s*([A-Za-z0-9]*)\))?")


@dataclass
class IbstatusPort:
    device: str
    port: int
    default_gid: str | None = None
    base_lid: int | None = None
    sm_lid: int | None = None
    state: str | None = None
    state_num: int | None = None
    phys_state: str | None = None
    phys_state_num: int | None = None
    rate: int | float | None = None
    width: str | None = None
    speed: str | None = None
    rate_text: str | None = None
    link_layer: str | None = None


@dataclass
class Ibstatus:
    ports: list[IbstatusPort] = field(default_factory=list)

    @property
    def devices(self) -> list[str]:
        seen: list[str] = []
        for p in self.ports:
            if p.device not in seen:
                seen.append(p.device)
        return seen


def _num_state(value: str) -> tuple[int | None, str]:
    m = _NUMSTATE.match(value)
    return (int(m.group(1)), m.group(2).strip()) if m else (None, value)


@bounded(TOOL, max_mb=1)
def parse(text: str) -> Ibstatus:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    if "Fatal error" in text and "No devices" in text:
        raise ParseError(TOOL, EXPECTED, "ibstatus found no RDMA devices ('Fatal error:  No devices')")
    ports: list[IbstatusPort] = []
    cur: IbstatusPort | None = None
    for line in clean_lines(text):
        m = _HDR.match(line)
        if m:
            cur = IbstatusPort(device=m.group(1), port=int(m.group(2)))
            ports.append(cur)
            continue
        m = _KV.match(line)
        if not m or cur is None:
            continue
        key, value = m.group(1).strip(), m.group(2).strip()
        if key == "default gid":
            cur.default_gid = None if value == "unknown" else value
        elif key in ("base lid", "sm lid"):
            setattr(cur, key.replace(" ", "_"), to_int(value, 0))
        elif key == "state":
            cur.state_num, cur.state = _num_state(value)
        elif key == "phys state":
            cur.phys_state_num, cur.phys_state = _num_state(value)
        elif key == "rate":
            cur.rate_text = value
            rm = _RATE.match(value)
            if rm:
                cur.rate = to_number(rm.group(1))
                cur.width = rm.group(2)
                cur.speed = rm.group(3) or None
        elif key == "link_layer":
            cur.link_layer = value
    if not ports:
        raise ParseError(TOOL, EXPECTED, "no \"Infiniband device '...' port N status:\" header found")
    for p in ports:
        if p.state is None or p.rate is None:
            raise ParseError(TOOL, EXPECTED, f"{p.device} port {p.port} lacks state or rate (truncated?)")
    return Ibstatus(ports=ports)
