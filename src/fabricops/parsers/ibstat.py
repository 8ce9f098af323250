"""``ibstat`` (infiniband-diags): CAs and their ports.

Handles the full listing (``ibstat``, ``ibstat DEV``), the single-port form (``ibstat DEV PORT``:
``CA: 'mlx5_0'`` then an unindented ``Port 1:`` block), tabs or spaces, and ``ibpanic``/``ibwarn``
lines mixed into the output. ``Rate: 40 (FDR10)`` gives ``rate=40`` and ``rate_note="FDR10"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines, to_int, to_number

TOOL = "ibstat"
EXPECTED = "\"CA 'mlx5_0'\" blocks with Port N: sections"

_CA = re.compile(r"^\s*CA:?\s+'([^']+)'\s*$")
_PORT = re.compile(r"^\s*Port\s+(\d+):\s*$")
_KV = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?):\s*(.*)$")  # value stripped in code ((.*?)\s*$ is quadratic)
_RATE = re.compile(r"^([\d.]+)(?:\s*\((\w+)\))?$")


@dataclass
class IbstatPort:
    port: int
    state: str | None = None
    physical_state: str | None = None
    rate: int | float | None = None
    rate_note: str | None = None
    base_lid: int | None = None
    lmc: int | None = None
    sm_lid: int | None = None
    capability_mask: str | None = None
    port_guid: str | None = None
    link_layer: str | None = None


@dataclass
class IbstatCa:
    name: str
    ca_type: str | None = None
    number_of_ports: int | None = None
    firmware_version: str | None = None
    hardware_version: str | None = None
    node_guid: str | None = None
    system_image_guid: str | None = None
    ports: list[IbstatPort] = field(default_factory=list)


@dataclass
class Ibstat:
    cas: list[IbstatCa]
    warnings: list[str] = field(default_factory=list)

    def port(self, ca: str, port: int = 1) -> IbstatPort | None:
        for c in self.cas:
            if c.name == ca:
                return next((p for p in c.ports if p.port == port), None)
        return None


_CA_KEYS = {
    "CA type": ("ca_type", str),
    "Number of ports": ("number_of_ports", int),
    "Firmware version": ("firmware_version", str),
    "Hardware version": ("hardware_version", str),
    "Node GUID": ("node_guid", str),
    "System image GUID": ("system_image_guid", str),
}
_PORT_KEYS = {
    "State": ("state", str),
    "Physical state": ("physical_state", str),
    "Base lid": ("base_lid", int),
    "LMC": ("lmc", int),
    "SM lid": ("sm_lid", int),
    "Capability mask": ("capability_mask", str),
    "Port GUID": ("port_guid", str),
    "Link layer": ("link_layer", str),
}


def _conv(kind, value: str):
    if kind is int:
        return to_int(value, 0)
    return value


@bounded(TOOL, max_mb=1)
def parse(text: str) -> Ibstat:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input (ibstat prints nothing when no RDMA device exists)")
    cas: list[IbstatCa] = []
    warnings: list[str] = []
    ca: IbstatCa | None = None
    port: IbstatPort | None = None
    for line in clean_lines(text):
        if not line.strip():
            continue
        stripped = line.strip()
        if stripped.startswith(("ibpanic:", "ibwarn:", "ibstat:")):
            warnings.append(stripped)
            continue
        m = _CA.match(line)
        if m:
            ca = IbstatCa(name=m.group(1))
            cas.append(ca)
            port = None
            continue
        m = _PORT.match(line)
        if m and ca is not None:
            port = IbstatPort(port=int(m.group(1)))
            ca.ports.append(port)
            continue
        m = _KV.match(line)
        if not m or ca is None:
            continue
        key, value = m.group(1), m.group(2).strip()
        if port is not None and key == "Rate":
            rm = _RATE.match(value)
            if rm:
                port.rate = to_number(rm.group(1))
                port.rate_note = rm.group(2)
            continue
        if port is not None and key in _PORT_KEYS:
            attr, kind = _PORT_KEYS[key]
            setattr(port, attr, _conv(kind, value))
        elif key in _CA_KEYS:
            attr, kind = _CA_KEYS[key]
            setattr(ca, attr, _conv(kind, value))
    if not cas:
        detail = warnings[0] if warnings else "no \"CA '...'\" line found"
        raise ParseError(TOOL, EXPECTED, detail)
    for c in cas:
        if not c.ports:
            if c.number_of_ports is None and c.ca_type is None:
                detail = f"CA {c.name} has neither header fields nor ports (truncated?)"
                raise ParseError(TOOL, EXPECTED, detail)
            raise ParseError(TOOL, EXPECTED, f"CA {c.name} lists no ports (truncated output?)")
        for p in c.ports:
            if p.state is None:
                raise ParseError(TOOL, EXPECTED, f"{c.name} port {p.port} has no State line (truncated?)")
    return Ibstat(cas=cas, warnings=warnings)
