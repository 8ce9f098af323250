"""``lspci -vvv`` (pciutils): devices, bridges and their bus ranges, PCIe link and ACS state.

Reads ``lspci -vvv`` and ``lspci -D -vvv`` (domain-qualified addresses; without ``-D`` the
domain is ``0000``), ``-nn`` (``3D controller [0302]``), tab or space indentation, and warning
lines such as ``lspci: Unable to load libkmod resources: error -2``. Run without root, lspci
prints ``Capabilities: <access denied>`` instead of the capability blocks: the device then has
``access_denied: True`` and no link or ACS data (callers must not read that as "ACS off").

Formats (pciutils ``ls-caps.c``): ``LnkCap:\tPort #0, Speed 32GT/s, Width x16, ...``;
``LnkSta:\tSpeed 32GT/s (ok), Width x16 (ok)`` (older pciutils print no ``(ok)``), a link that
trained below its capability prints ``(downgraded)`` after the value;
``ACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+``
and ``ACSCtl:`` with the same flags. The record is the dict of SPEC-19 section B (docs/parsers.md).
"""

from __future__ import annotations

import re
from typing import Any

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines

TOOL = "lspci"
EXPECTED = "lspci -vvv device blocks (a 'BB:DD.F Class: Description' line, then indented detail lines)"

ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
PORT_TYPES = ("Root Port", "Upstream Port", "Downstream Port", "Endpoint", "Legacy Endpoint")

_HEADER = re.compile(
    # the class starts at its first non-blank character, so the blanks before it have one reading
    # (no backtracking between the two on a long line that does not match)
    r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\s+([^:\s][^:]*?):\s+(.*)$"
)
_CLASS_ID = re.compile(r"\[[0-9a-fA-F]{4}\]$")
_BUS = re.compile(
    r"^Bus:\s+primary=([0-9a-fA-F]{2}),\s*secondary=([0-9a-fA-F]{2}),\s*"
    r"subordinate=([0-9a-fA-F]{2})"
)
_EXPRESS = re.compile(
    r"^Capabilities:\s+\[[0-9a-fA-F]+\]\s+Express\s+(?:\(v\d+\)\s+)?(.+?)"
    r"(?:\s+\(Slot[+-]\))?(?:,\s*(?:MSI|IntMsgNum)\s.*)?$"
)
_SPEED = re.compile(r"Speed\s+([\d.]+)\s*GT/s(\s*\(downgraded\))?")
_WIDTH = re.compile(r"Width\s+x(\d+)(\s*\(downgraded\))?")
_FLAG = re.compile(r"\b([A-Za-z]+)([+-])")


def _link(value: str, status: bool) -> dict[str, Any] | None:
    speed = _SPEED.search(value)
    width = _WIDTH.search(value)
    if not speed and not width:
        return None  # "Speed unknown, Width x0": no link to report
    out: dict[str, Any] = {
        "speed_gts": float(speed.group(1)) if speed else None,
        "width": int(width.group(1)) if width else None,
    }
    if status:
        out["downgraded"] = bool((speed and speed.group(2)) or (width and width.group(2)))
    return out


def _acs(value: str) -> dict[str, bool] | None:
    flags = {name: sign == "+" for name, sign in _FLAG.findall(value)}
    if not all(f in flags for f in ACS_FLAGS):
        return None
    return {f: flags[f] for f in ACS_FLAGS}


def _new_device(m: re.Match[str]) -> dict[str, Any]:
    domain = (m.group(1) or "0000").lower().rjust(4, "0")
    return {
        "bdf": f"{domain}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}",
        "class": _CLASS_ID.sub("", m.group(5).strip()).rstrip(),
        "description": m.group(6).strip(),
        "bridge": False,
        "bus": None,
        "port_type": None,
        "lnkcap": None,
        "lnksta": None,
        "acs_cap": None,
        "acs_ctl": None,
        "access_denied": False,
        "_details": 0,
    }


@bounded(TOOL, max_mb=8)
def parse(text: str) -> dict:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    devices: list[dict[str, Any]] = []
    dev: dict[str, Any] | None = None
    for line in clean_lines(text):
        if not line.strip():
            continue
        if not line[0].isspace():
            m = _HEADER.match(line)
            if m:
                dev = _new_device(m)
                devices.append(dev)
            else:
                dev = None  # "lspci: Unable to load libkmod resources: error -2", a shell prompt
            continue
        if dev is None:
            continue
        dev["_details"] += 1
        item = line.strip()
        if item[0] not in "BCLA":  # none of the lines read below: skip the six prefix tests
            continue
        if item.startswith("Bus:"):
            b = _BUS.match(item)
            if b:
                dev["bridge"] = True
                dev["bus"] = {
                    "primary": int(b.group(1), 16),
                    "secondary": int(b.group(2), 16),
                    "subordinate": int(b.group(3), 16),
                }
        elif item.startswith("Capabilities:"):
            if "<access denied>" in item:
                dev["access_denied"] = True
            elif dev["port_type"] is None:
                e = _EXPRESS.match(item)
                if e:
                    dev["port_type"] = e.group(1).strip()
        elif item.startswith("LnkCap:") and dev["lnkcap"] is None:
            dev["lnkcap"] = _link(item[len("LnkCap:") :], status=False)
        elif item.startswith("LnkSta:") and dev["lnksta"] is None:
            dev["lnksta"] = _link(item[len("LnkSta:") :], status=True)
        elif item.startswith("ACSCap:") and dev["acs_cap"] is None:
            dev["acs_cap"] = _acs(item[len("ACSCap:") :])
        elif item.startswith("ACSCtl:") and dev["acs_ctl"] is None:
            dev["acs_ctl"] = _acs(item[len("ACSCtl:") :])
    if not devices:
        raise ParseError(TOOL, EXPECTED, "no device line like '0000:18:00.0 3D controller: ...' found")
    if not any(d["_details"] for d in devices):
        raise ParseError(
            TOOL, EXPECTED, "device lines without any detail lines: that is plain `lspci`, run `lspci -vvv`"
        )
    seen: set[str] = set()
    for d in devices:
        if d["bdf"] in seen:
            raise ParseError(
                TOOL, EXPECTED, f"device {d['bdf']} is listed twice (two captures pasted together?)"
            )
        seen.add(d["bdf"])
        del d["_details"]
    return {"devices": devices}


def _domain(bdf: str) -> str:
    return bdf.split(":")[0]


def _bus(bdf: str) -> int:
    return int(bdf.split(":")[1], 16)


def parents(devices: list[dict[str, Any]]) -> dict[str, str | None]:
    """bdf -> the bridge it hangs off (the bridge of its domain whose secondary bus is the device's
    bus), or None for a device on a root bus."""
    by_secondary = {(_domain(d["bdf"]), d["bus"]["secondary"]): d["bdf"] for d in devices if d.get("bus")}
    return {d["bdf"]: by_secondary.get((_domain(d["bdf"]), _bus(d["bdf"]))) for d in devices}


def _chain(up: dict[str, str | None], bdf: str) -> list[str]:
    """bdf's ancestors, nearest first (stops at a loop, which only damaged input has)."""
    out: list[str] = []
    cur = up.get(bdf)
    while cur is not None and cur not in out and cur != bdf:
        out.append(cur)
        cur = up.get(cur)
    return out


def path_between(devices: list[dict[str, Any]], a: str, b: str) -> list[str]:
    """The bridges on the PCIe path from endpoint a to endpoint b: up from a to their common
    ancestor (included), then down to b. Empty when they share no bridge (different root buses:
    the path crosses the root complex)."""
    known = {d["bdf"] for d in devices}
    for x in (a, b):
        if x not in known:
            raise KeyError(f"{x} is not in the lspci listing")
    up = parents(devices)
    ca, cb = _chain(up, a), _chain(up, b)
    common = next((x for x in ca if x in cb), None)
    if common is None:
        return ca + list(reversed(cb))
    return ca[: ca.index(common) + 1] + list(reversed(cb[: cb.index(common)]))
