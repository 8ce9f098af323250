"""``mlxfwmanager --query`` (NVIDIA MFT; ``mlxup`` prints the same query format).

One block per device: ``Device #N:`` and a dashed line, then ``Key:  value`` lines (``Device
Type``, ``Part Number``, ``Description``, ``PSID``, ``PCI Device Name``, ``Base GUID``, ``Base
MAC``, older cards ``Port1 GUID``...), a ``Versions:  Current  Available`` header with one row per
image part (``FW``, ``PXE``, ``UEFI``, ``CLP``, ``UEFI Virtio blk``...; the last two columns are
the current and available versions, ``N/A`` when none), and ``Status:``. When a burned image is
not yet active, MFT adds a ``FW (Running)`` row with the running version (mstflint
``mlxfwops``/``img_version`` ``"FW (Running)"`` is added only when running != burned). The record
is the list of SPEC-20 A2 (docs/parsers.md, "NIC firmware").

Refused: no ``Device #`` block (``-E- No devices found``, another tool), a block without a PSID or
without an ``FW`` version row (cut output), a version row without its two columns.
"""

from __future__ import annotations

import re
from typing import Any

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines

TOOL = "mlxfwmanager"
EXPECTED = (
    "mlxfwmanager --query output ('Device #N:' blocks with PSID, 'Versions: Current Available' "
    "rows, Status)"
)

_FIELDS = {
    "Device Type": "device_type", "Part Number": "part_number", "Description": "description",
    "PSID": "psid", "PCI Device Name": "device_name", "Base GUID": "base_guid", "Base MAC": "base_mac",
    "Status": "status",
}
_BDF = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
_VERSION = re.compile(r"^[0-9][0-9.]{0,40}$")


def _pci(name: str | None) -> str | None:
    m = _BDF.match(name or "")
    if not m:
        return None
    domain = (m.group(1) or "0000").lower().rjust(4, "0")
    return f"{domain}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def _new() -> dict[str, Any]:
    rec: dict[str, Any] = dict.fromkeys(_FIELDS.values())
    rec["versions"] = {}
    rec["pci"] = None
    return rec


def _na(v: str) -> str | None:
    return None if v in ("N/A", "-", "") else v


@bounded(TOOL, max_mb=4)
def parse_query(text: str) -> list:
    """list[dict]: one record per device, in printed order."""
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    records: list[dict[str, Any]] = []
    rec: dict[str, Any] | None = None
    in_versions = False
    for raw in clean_lines(text):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("Device #") and line.endswith(":"):
            rec = _new()
            records.append(rec)
            in_versions = False
            continue
        if rec is None or set(line) == {"-"}:
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if key == "Versions" and sep:
            if value.split() != ["Current", "Available"]:
                raise ParseError(TOOL, EXPECTED, f"unknown versions header: {line[:120]!r}")
            in_versions = True
            continue
        if sep and (key in _FIELDS or key.endswith("GUID") or key.endswith("MAC")):
            in_versions = False
            if key in _FIELDS:
                rec[_FIELDS[key]] = _na(value.strip())
            continue
        if in_versions:
            tokens = line.split()
            if len(tokens) < 3:
                raise ParseError(TOOL, EXPECTED, f"version row without its two columns: {line[:120]!r}")
            part, current, available = " ".join(tokens[:-2]), tokens[-2], tokens[-1]
            if part == "FW (Running)":
                rec["versions"].setdefault("FW", {"current": None, "available": None, "running": None})
                rec["versions"]["FW"]["running"] = _na(current)
                continue
            if part in rec["versions"] and rec["versions"][part].get("current") is not None:
                raise ParseError(TOOL, EXPECTED, f"version row {part!r} twice in one device block")
            entry = rec["versions"].setdefault(part, {"current": None, "available": None, "running": None})
            entry["current"] = _na(current)
            entry["available"] = _na(available)
            continue
        # 'All listed device(s) ...', 'Log File: ...', a shell prompt: outside the record
    if not records:
        raise ParseError(TOOL, EXPECTED, "no 'Device #1:' block found")
    for r in records:
        fw = r["versions"].get("FW")
        if not r["psid"]:
            raise ParseError(TOOL, EXPECTED, "a device block without a PSID line (cut output?)")
        if not fw or not fw.get("current") or not _VERSION.match(fw["current"]):
            raise ParseError(TOOL, EXPECTED, f"device {r['psid']} has no FW version row (cut output?)")
        for part, v in r["versions"].items():
            if part != "FW":
                v.pop("running", None)
        r["pci"] = _pci(r["device_name"])
    return records


def fw_burned(rec: dict) -> str:
    """The firmware version in flash (the FW row's Current column)."""
    return rec["versions"]["FW"]["current"]


def fw_running(rec: dict) -> str:
    """The firmware version the device runs: the FW (Running) row when printed, else the burned one."""
    fw = rec["versions"]["FW"]
    return fw.get("running") or fw["current"]
