"""Link rates: InfiniBand generations and widths, Ethernet speeds (data: ``data/rates.yml``).

InfiniBand generation names are per-lane rates; a standard port is 4X, so an NDR port is 400 Gb/s
(``ib_port_rate("NDR", "4X") == 400``), an HDR port 200, an HDR100 port (HDR, 2 lanes) 100. All rates
are Gb/s in one direction.

>>> ib_port_rate("NDR", "4X")
400
>>> parse_sysfs_rate("400 Gb/sec (4X NDR)")
SysfsRate(rate_gbps=400, width='4X', speed='NDR')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabricops.model import _data

__all__ = [
    "ETHERNET",
    "IB",
    "IB_VARIANTS",
    "WIDTHS",
    "EthernetSpeed",
    "IBGeneration",
    "IBVariant",
    "SysfsRate",
    "eth_port_rate",
    "ethernet_from_mbps",
    "format_sysfs_rate",
    "ib_lane_rate",
    "ib_port_rate",
    "ibstat_rate",
    "parse_sysfs_rate",
    "port_rate",
]

#: Link widths InfiniBand defines, as the kernel and ibstat name them, and their lane counts.
WIDTHS: dict[str, int] = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}


@dataclass(frozen=True)
class IBGeneration:
    """One InfiniBand generation (a per-lane rate)."""

    name: str
    lane_gbps: float  #: nominal per-lane rate (what the kernel multiplies by the width)
    lane_signal_gbps: float | None  #: signalling rate on the wire, per lane
    lane_data_gbps: float  #: per-lane data rate after line encoding
    encoding: str
    ports: dict[str, float]  #: 1X/2X/4X port rates, Gb/s
    ibstat_rate: int  #: the number ``ibstat`` prints as ``Rate:`` for a 4X port
    source: str

    def port_rate(self, width: str = "4X") -> int | float:
        return _num(self.lane_gbps * WIDTHS[_width(width)])


@dataclass(frozen=True)
class IBVariant:
    """A marketing name for a narrower port: HDR100 = HDR x 2 lanes."""

    name: str
    generation: str
    width: str
    source: str


@dataclass(frozen=True)
class EthernetSpeed:
    name: str  #: e.g. "400GbE"
    gbps: int
    lanes: tuple[str, ...]  #: common lane configurations, e.g. "4x106.25G PAM4"
    source: str


@dataclass(frozen=True)
class SysfsRate:
    """``/sys/class/infiniband/DEV/ports/P/rate`` split up: ``400 Gb/sec (4X NDR)``."""

    rate_gbps: int | float
    width: str
    speed: str


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def _width(width: str | int) -> str:
    key = f"{width}X" if isinstance(width, int) else str(width).strip().upper()
    if key not in WIDTHS:
        raise ValueError(f"unknown InfiniBand link width {width!r}; expected one of {', '.join(WIDTHS)}")
    return key


def _load_ib() -> dict[str, IBGeneration]:
    out: dict[str, IBGeneration] = {}
    for row in _data.load("rates.yml")["infiniband"]:
        gen = IBGeneration(
            name=row["name"],
            lane_gbps=row["lane_gbps"],
            lane_signal_gbps=row["lane_signal_gbps"],
            lane_data_gbps=row["lane_data_gbps"],
            encoding=row["encoding"],
            ports={k: _num(v) for k, v in row["ports"].items()},
            ibstat_rate=row["ibstat_rate"],
            source=row["source"],
        )
        for width, rate in gen.ports.items():  # the table must agree with lane x width
            if abs(gen.lane_gbps * WIDTHS[width] - rate) > 1e-9:
                raise ValueError(f"rates.yml: {gen.name} {width} = {rate}, expected lane x width")
        if gen.ibstat_rate != gen.ports["4X"]:
            raise ValueError(f"rates.yml: {gen.name} ibstat_rate differs from the 4X port rate")
        out[gen.name] = gen
    return out


#: InfiniBand generations by name: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR, XDR.
IB: dict[str, IBGeneration] = _load_ib()

#: Narrow-port names: HDR100, NDR200.
IB_VARIANTS: dict[str, IBVariant] = {
    row["name"]: IBVariant(row["name"], row["generation"], row["width"], row["source"])
    for row in _data.load("rates.yml")["infiniband_variants"]
}

#: Ethernet speeds by name: 10GbE .. 800GbE.
ETHERNET: dict[str, EthernetSpeed] = {
    row["name"]: EthernetSpeed(row["name"], row["gbps"], tuple(row["lanes"]), row["source"])
    for row in _data.load("rates.yml")["ethernet"]
}


def _generation(speed: str) -> IBGeneration:
    key = str(speed).strip().upper()
    if key in IB:
        return IB[key]
    raise ValueError(f"unknown InfiniBand speed {speed!r}; expected one of {', '.join(IB)}")


def ib_lane_rate(speed: str) -> int | float:
    """Nominal per-lane rate in Gb/s: ``ib_lane_rate("HDR") == 50``."""
    return _num(_generation(speed).lane_gbps)


def ib_port_rate(speed: str, width: str | int | None = "4X") -> int | float:
    """Port rate in Gb/s for a generation and width, or a variant name (``"HDR100"`` -> 100).

    ``ib_port_rate("NDR", "4X") == 400``, ``ib_port_rate("HDR", "2X") == 100``.
    """
    key = str(speed).strip().upper()
    if key in IB_VARIANTS:
        variant = IB_VARIANTS[key]
        if width not in (None, "4X") and _width(width) != variant.width:
            raise ValueError(f"{variant.name} is a {variant.width} port, not {width}")
        return IB[variant.generation].port_rate(variant.width)
    return _generation(key).port_rate("4X" if width is None else width)


def ibstat_rate(speed: str, width: str | int | None = "4X") -> int | float:
    """The number ``ibstat`` prints as ``Rate:`` for such a port (the port rate: NDR 4X -> 400)."""
    return ib_port_rate(speed, width)


_SYSFS_RATE = re.compile(r"^\s*(\d+(?:\.5)?)\s+Gb/sec\s+\((\d+)X(?:\s+(\w+))?\)\s*$")


def parse_sysfs_rate(text: str) -> SysfsRate:
    """Parse the kernel's port rate string: ``"400 Gb/sec (4X NDR)"`` -> SysfsRate(400, "4X", "NDR").

    Old kernels print no name for SDR (``"10 Gb/sec (4X)"``); that reads as SDR. Raises ValueError
    when the text is not such a string or its rate disagrees with width x lane rate.
    """
    m = _SYSFS_RATE.match(text)
    if not m:
        raise ValueError(f"not a sysfs InfiniBand rate (like '400 Gb/sec (4X NDR)'): {text!r}")
    rate = _num(float(m.group(1)))
    width = _width(f"{m.group(2)}X")
    speed = (m.group(3) or "SDR").upper()
    gen = _generation(speed)
    if abs(gen.port_rate(width) - rate) > 0.51:  # the kernel rounds FDR's 14.0625 to 14
        raise ValueError(f"sysfs rate {text.strip()!r}: {width} {speed} is {gen.port_rate(width)} Gb/s")
    return SysfsRate(rate_gbps=rate, width=width, speed=speed)


def format_sysfs_rate(speed: str, width: str | int = "4X") -> str:
    """The string the kernel prints for such a port, without newline: ``"400 Gb/sec (4X NDR)"``."""
    gen = _generation(speed)
    w = _width(width)
    deci = round(gen.lane_gbps * 10) * WIDTHS[w]  # the kernel counts in deci-Gb/s
    return f"{deci // 10}{'.5' if deci % 10 else ''} Gb/sec ({w} {gen.name})"


def eth_port_rate(name: str) -> int:
    """Ethernet port rate in Gb/s: ``eth_port_rate("400GbE") == 400`` (also accepts ``"400G"``)."""
    key = str(name).strip()
    m = re.fullmatch(r"(\d+)\s*(?:G|GbE|Gbe|GBE|Gb/s|GbE/s)?", key, flags=re.IGNORECASE)
    if key in ETHERNET:
        return ETHERNET[key].gbps
    if m and f"{m.group(1)}GbE" in ETHERNET:
        return ETHERNET[f"{m.group(1)}GbE"].gbps
    raise ValueError(f"unknown Ethernet speed {name!r}; expected one of {', '.join(ETHERNET)}")


def ethernet_from_mbps(mbps: int | str) -> EthernetSpeed:
    """The Ethernet speed for ``/sys/class/net/IF/speed`` (Mb/s): 400000 -> 400GbE."""
    value = int(str(mbps).strip())
    for eth in ETHERNET.values():
        if eth.gbps * 1000 == value:
            return eth
    raise ValueError(f"{mbps} Mb/s is not a known Ethernet port speed")


def port_rate(link_layer: str, speed: str, width: str | int | None = "4X") -> int | float:
    """Port rate in Gb/s for either link layer: ``port_rate("InfiniBand", "NDR", "4X") == 400``,
    ``port_rate("Ethernet", "400GbE") == 400``."""
    layer = str(link_layer).strip().lower()
    if layer in {"infiniband", "ib"}:
        return ib_port_rate(speed, width)
    if layer in {"ethernet", "eth", "roce"}:
        return eth_port_rate(speed)
    raise ValueError(f"unknown link layer {link_layer!r}; expected InfiniBand or Ethernet")
