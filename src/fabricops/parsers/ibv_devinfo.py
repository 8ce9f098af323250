"""``ibv_devinfo`` and ``ibv_devinfo -v`` (rdma-core / MLNX_OFED libibverbs examples).

Key/value lines separated by tabs or spaces (GitHub often expands the tabs); MLNX_OFED's extra
``Device ports:`` line; ``-v`` capability lists (ignored) and the GID table
(``GID[  3]:  ::ffff:10.0.0.1, RoCE v2``). "No IB devices found" and "Failed to get IB devices list"
raise :class:`ParseError` (no devices is not a record).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines, to_int

TOOL = "ibv_devinfo"
EXPECTED = "'hca_id: DEV' blocks with 'port: N' sections"

# Values are stripped in code: a lazy (.*?)\s*$ is quadratic on a long run of inner spaces.
_KV = re.compile(r"^\s*([A-Za-z_][\w ]*?):\s*(.*)$")
_GID = re.compile(r"^\s*GID\[\s*(\d+)\]:\s*([^\s,]+)(?:,\s*(.+))?$")
_CODE = re.compile(r"-?\d+")
# `ibv_devinfo -l`'s count line. Blanks other than newlines only: `^\s*` under re.M ran from every
# line start across all the blank lines below it (quadratic: 100 KB of blank lines took 9 s).
_LIST = re.compile(r"^[^\S\n]*+\d++ HCAs? found:", re.M)


@dataclass
class IbvGid:
    index: int
    gid: str
    type: str | None = None


@dataclass
class IbvPort:
    port: int
    state: str | None = None
    max_mtu: int | None = None
    active_mtu: int | None = None
    sm_lid: int | None = None
    lid: int | None = None
    lmc: int | None = None
    link_layer: str | None = None
    phys_state: str | None = None
    active_width: str | None = None
    active_speed: str | None = None
    gid_tbl_len: int | None = None
    gids: list[IbvGid] = field(default_factory=list)


@dataclass
class IbvDevice:
    hca_id: str
    transport: str | None = None
    fw_ver: str | None = None
    node_guid: str | None = None
    sys_image_guid: str | None = None
    vendor_id: str | None = None
    vendor_part_id: int | None = None
    hw_ver: str | None = None
    board_id: str | None = None
    phys_port_cnt: int | None = None
    ports: list[IbvPort] = field(default_factory=list)


@dataclass
class IbvDevinfo:
    devices: list[IbvDevice]
    verbose: bool = False

    def device(self, hca_id: str) -> IbvDevice | None:
        return next((d for d in self.devices if d.hca_id == hca_id), None)


def _strip_code(value: str) -> str:
    """'PORT_ACTIVE (4)' -> 'PORT_ACTIVE'; 'InfiniBand (0)' -> 'InfiniBand'."""
    value = value.strip()
    opening = value.rfind("(")
    if value.endswith(")") and opening >= 0 and _CODE.fullmatch(value[opening + 1 : -1].strip()):
        return value[:opening].rstrip()
    return value


def _int(value: str) -> int | None:
    token = _strip_code(value).split()[0] if _strip_code(value) else ""
    return to_int(token, 0)


_DEV_STR = {"transport", "fw_ver", "node_guid", "sys_image_guid", "vendor_id", "hw_ver", "board_id"}
_DEV_INT = {"vendor_part_id", "phys_port_cnt"}


@bounded(TOOL, max_mb=4)
def parse(text: str) -> IbvDevinfo:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    if "No IB devices found" in text:
        raise ParseError(TOOL, EXPECTED, "ibv_devinfo found no RDMA devices ('No IB devices found')")
    if "Failed to get IB devices list" in text:
        raise ParseError(TOOL, EXPECTED, "the verbs library found no RDMA stack "
                         "('Failed to get IB devices list'): driver not loaded or no device")
    if _LIST.search(text) and "hca_id" not in text:
        raise ParseError(TOOL, EXPECTED, "this is `ibv_devinfo -l` (names only)")
    devices: list[IbvDevice] = []
    dev: IbvDevice | None = None
    port: IbvPort | None = None
    verbose = False
    for line in clean_lines(text):
        if not line.strip():
            continue
        g = _GID.match(line)
        if g and port is not None:
            kind = g.group(3).strip() if g.group(3) else None
            port.gids.append(IbvGid(int(g.group(1)), g.group(2), kind or None))
            verbose = True
            continue
        m = _KV.match(line)
        if not m:
            continue
        key, value = m.group(1).strip(), m.group(2).strip()
        if key == "hca_id":
            dev = IbvDevice(hca_id=value)
            devices.append(dev)
            port = None
            continue
        if dev is None:
            continue
        if key == "port":
            port = IbvPort(port=int(value)) if value.isdecimal() else None
            if port is not None:
                dev.ports.append(port)
            continue
        if port is None:
            if key in _DEV_STR:
                setattr(dev, key, _strip_code(value) if key == "transport" else value)
            elif key in _DEV_INT:
                setattr(dev, key, _int(value))
            elif key in ("max_mr_size", "max_qp"):
                verbose = True
            continue
        if key == "state":
            port.state = _strip_code(value)
        elif key in ("max_mtu", "active_mtu", "sm_lid", "gid_tbl_len"):
            setattr(port, key, _int(value))
        elif key == "port_lid":
            port.lid = _int(value)
        elif key == "port_lmc":
            port.lmc = _int(value)
        elif key == "link_layer":
            port.link_layer = value
        elif key == "phys_state":
            port.phys_state = _strip_code(value)
        elif key == "active_width":
            port.active_width = _strip_code(value)
        elif key == "active_speed":
            port.active_speed = _strip_code(value)
    if not devices:
        raise ParseError(TOOL, EXPECTED, "no 'hca_id:' line found")
    for d in devices:
        if not d.ports:
            raise ParseError(TOOL, EXPECTED, f"{d.hca_id} has no 'port:' section (truncated output?)")
        for p in d.ports:
            if p.state is None:
                raise ParseError(TOOL, EXPECTED, f"{d.hca_id} port {p.port} has no state (truncated?)")
    return IbvDevinfo(devices=devices, verbose=verbose)
