"""Parsers of host tool output: ``ethtool -S``, ``nvidia-smi nvlink``, ``nvidia-smi --query-gpu``,
``lspci -D -vvv`` (ACS), ``mlxconfig -e q``, ``mlxfwmanager --query``, ``dkms status`` and
``mokutil --sb-state``.

Stdlib-only and Python 3.8: shipped to hosts with the monitor collector (fabricops.hostside.ship).
These are the light readings a host can make; the controller's full, typed parsers of the same
tools are fabricops.parsers (mlxconfig, mlxfwmanager, dkms, lspci, nvidia_smi). Each raises
:class:`~fabricops.evidence.errors.SourceError` for text that is not its tool's output.
"""

from __future__ import annotations

import re

from fabricops.evidence.errors import SourceError

__all__ = [
    "NVLINK_ERROR_KINDS",
    "parse_dkms_status",
    "parse_ethtool_stats",
    "parse_gpu_addresses",
    "parse_lspci_acs",
    "parse_mlxconfig_pending",
    "parse_mlxfwmanager",
    "parse_nvlink_errors",
    "parse_nvlink_status",
    "parse_pfc_samples",
    "parse_sb_state",
    "pci_address",
]

# --- ethtool -S ------------------------------------------------------------------------------

ETHTOOL_LINE = re.compile(r"^\s+([^:]+?):\s+(-?\d{1,20})\s*$")
#: what separates two ``ethtool -S`` samples in one evidence text (diagnose's two reads)
SAMPLE_SEPARATOR = "\n===\n"


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """``ethtool -S IF`` -> {name: value}. Lines that are not ``name: integer`` are skipped."""
    lines = (text or "").replace("\r\n", "\n").split("\n")
    if not any(line.strip() == "NIC statistics:" for line in lines):
        raise SourceError("no 'NIC statistics:' header: not ethtool -S output")
    stats = {}
    for line in lines:
        m = ETHTOOL_LINE.match(line)
        if m:
            stats[m.group(1).strip()] = int(m.group(2))
    return stats


def parse_pfc_samples(text: str) -> tuple[dict[str, int], dict[str, int]] | None:
    """Two ``ethtool -S`` samples joined by a ``===`` line -> (first, second); one sample -> (it,
    it); None when a sample is not ``ethtool -S`` output."""
    first, sep, second = (text or "").partition(SAMPLE_SEPARATOR)
    try:
        a = parse_ethtool_stats(first)
        b = parse_ethtool_stats(second) if sep else a
    except SourceError:
        return None
    return a, b


# --- nvidia-smi ------------------------------------------------------------------------------

GPU_RE = re.compile(r"^GPU (\d+): (.*?) \(UUID: ([^)]*)\)\s*$")
LINK_STATUS_RE = re.compile(r"^\s*Link (\d+): (?:([\d.]+) GB/s|<inactive>)\s*$")
LINK_ERROR_RE = re.compile(r"^\s*Link (\d+): ([A-Za-z ]+?) Errors?: (\d+)\s*$")
#: the error counters of ``nvidia-smi nvlink -e`` that are kept (``Data CRC`` / ``Flit CRC`` -> crc)
NVLINK_ERROR_KINDS = ("replay", "recovery", "crc")


def parse_nvlink_status(text: str) -> list[dict]:
    """``nvidia-smi nvlink --status`` -> [{"gpu", "name", "link", "up", "speed_gbs"}]."""
    links, gpu = [], None
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        m = GPU_RE.match(line.strip())
        if m:
            gpu = (int(m.group(1)), m.group(2))
            continue
        m = LINK_STATUS_RE.match(line)
        if m and gpu is not None:
            speed = float(m.group(2)) if m.group(2) else None
            links.append(
                {
                    "gpu": gpu[0],
                    "name": gpu[1],
                    "link": int(m.group(1)),
                    "up": speed is not None,
                    "speed_gbs": speed,
                }
            )
    if gpu is None:
        raise SourceError("no 'GPU N: ... (UUID: ...)' line: not nvidia-smi nvlink output")
    return links


def parse_nvlink_errors(text: str) -> list[dict]:
    """``nvidia-smi nvlink -e`` -> [{"gpu", "link", "kind", "value"}] (kind: replay/recovery/crc)."""
    out, gpu = [], None
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        m = GPU_RE.match(line.strip())
        if m:
            gpu = int(m.group(1))
            continue
        m = LINK_ERROR_RE.match(line)
        if m and gpu is not None:
            kind = m.group(2).strip().lower().split()[-1]  # "Data CRC" / "Flit CRC" -> crc
            if kind in NVLINK_ERROR_KINDS:
                out.append({"gpu": gpu, "link": int(m.group(1)), "kind": kind, "value": int(m.group(3))})
    if gpu is None:
        raise SourceError("no 'GPU N: ... (UUID: ...)' line: not nvidia-smi nvlink -e output")
    return out


# --- PCIe --------------------------------------------------------------------------------------

BDF_RE = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
LSPCI_DEV_RE = re.compile(r"^([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) ")
LSPCI_BUS_RE = re.compile(r"^\s+Bus: primary=([0-9a-fA-F]+), secondary=([0-9a-fA-F]+), subordinate=")
LSPCI_ACSCTL_RE = re.compile(r"^\s+ACSCtl:\s+(.*)$")


def pci_address(value: str) -> str:
    """``00000000:18:00.0`` (nvidia-smi) -> ``0000:18:00.0``."""
    v = value.strip().lower()
    dom, _, rest = v.partition(":")
    return f"{int(dom, 16):04x}:{rest}" if rest and len(dom) >= 4 else v


def parse_gpu_addresses(text: str) -> dict[str, str]:
    """``nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader`` -> {GPU0: 0000:18:00.0}."""
    out = {}
    for line in text.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and BDF_RE.match(parts[1]):
            out["GPU" + parts[0]] = pci_address(parts[1])
    if text.strip() and not out:
        raise SourceError("not nvidia-smi --query-gpu=index,pci.bus_id CSV")
    return out


def parse_lspci_acs(text: str) -> dict[str, dict]:
    """``lspci -D -vvv`` -> {bdf: {"secondary": int|None, "redirect": bool|None}} (the controller's
    full parser is fabricops.parsers.lspci). ``redirect`` None: no ACS capability."""
    devs: dict[str, dict] = {}
    cur = None
    denied = False
    for line in text.splitlines():
        m = LSPCI_DEV_RE.match(line)
        if m:
            cur = devs.setdefault(m.group(1).lower(), {"secondary": None, "redirect": None})
            continue
        if cur is None:
            continue
        if line.strip() == "Capabilities: <access denied>":
            denied = True
        m = LSPCI_BUS_RE.match(line)
        if m:
            cur["secondary"] = int(m.group(2), 16)
        m = LSPCI_ACSCTL_RE.match(line)
        if m:
            bits = m.group(1).split()
            cur["redirect"] = "ReqRedir+" in bits or "CmpltRedir+" in bits
    if not devs:
        raise SourceError("not lspci -D -vvv output")
    if denied:
        raise SourceError("lspci: Capabilities: <access denied> (the collector needs root)")
    return devs


# --- NIC firmware, DKMS, Secure Boot (issue 20) ----------------------------------------------------

MLXCONFIG_ROW_RE = re.compile(r"^\s*(\*)?\s+([A-Za-z0-9_.\[\]]+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")
FW_LINE_RE = re.compile(r"^\s+FW(\s+\(Running\))?\s+(\S+)")
DKMS3_RE = re.compile(r"^([^/,\s]+)/([^,\s]+),\s*([^,\s]+),\s*([^:,\s]+):\s*([a-z]+)")
DKMS2_RE = re.compile(r"^([^/,\s]+),\s*([^,\s]+),\s*([^,\s]+),\s*([^:,\s]+):\s*([a-z]+)")
DKMS_NOKERNEL_RE = re.compile(r"^([^/,\s]+)[/,]\s*([^,:\s]+):\s*([a-z]+)")


def _mlx_value(v: str) -> str:
    """``True(1)`` -> ``1``; ``44`` -> ``44``; ``0x10`` -> ``16``; else the upper-cased name."""
    m = re.search(r"\((\d+)\)$", v)
    if m:
        return str(int(m.group(1)))
    try:
        return str(int(v, 0))
    except ValueError:
        return v.upper()


def parse_mlxconfig_pending(text: str) -> list[str]:
    """``mlxconfig -d DEV -e q`` -> the settings whose Next Boot differs from Current (the
    controller's parser is fabricops.parsers.mlxconfig)."""
    lines = text.replace("\r", "").splitlines()
    head = next((i for i, ln in enumerate(lines) if ln.startswith("Configurations:")), None)
    if head is None or not re.search(r"Default\s+Current\s+Next Boot", lines[head]):
        raise SourceError("not mlxconfig -e q output (no Default/Current/Next Boot header)")
    pending = []
    for ln in lines[head + 1 :]:
        m = MLXCONFIG_ROW_RE.match(ln)
        if m and _mlx_value(m.group(4)) != _mlx_value(m.group(5)):
            pending.append(m.group(2))
    return pending


def parse_mlxfwmanager(text: str) -> list[dict]:
    """``mlxfwmanager --query`` -> [{pci, psid, burned, running}] (the controller's parser is
    fabricops.parsers.mlxfwmanager). ``running`` is the burned version unless ``FW (Running)`` says
    otherwise."""
    out: list[dict] = []
    cur: dict | None = None
    for ln in text.replace("\r", "").splitlines():
        if re.match(r"^Device #\d+:", ln):
            cur = {"pci": None, "psid": None, "burned": None, "running": None}
            out.append(cur)
        elif cur is not None:
            m = re.match(r"^\s+(PSID|PCI Device Name):\s+(\S+)", ln)
            if m:
                cur["psid" if m.group(1) == "PSID" else "pci"] = m.group(2)
                continue
            m = FW_LINE_RE.match(ln)
            if m:
                cur["running" if m.group(1) else "burned"] = m.group(2)
    if not out or not all(r["psid"] and r["burned"] for r in out):
        raise SourceError("not mlxfwmanager --query output (no Device/PSID/FW lines)")
    for r in out:
        r["running"] = r["running"] or r["burned"]
        r["pci"] = pci_address(r["pci"]) if r["pci"] and BDF_RE.match(r["pci"]) else r["pci"]
    return out


def parse_dkms_status(text: str) -> list[dict]:
    """``dkms status`` (3.x ``mod/ver, kver, arch: state``, 2.x ``mod, ver, kver, arch: state``;
    ``added`` lines have no kernel) -> [{module, kernel, state}]."""
    out = []
    for ln in text.replace("\r", "").splitlines():
        ln = ln.strip()
        if not ln:
            continue
        m = DKMS3_RE.match(ln) or DKMS2_RE.match(ln)
        if m:
            out.append({"module": m.group(1), "kernel": m.group(3), "state": m.group(5)})
            continue
        m = DKMS_NOKERNEL_RE.match(ln)
        if not m:
            raise SourceError(f"not dkms status output: {ln[:60]!r}")
        out.append({"module": m.group(1), "kernel": None, "state": m.group(3)})
    return out


def parse_sb_state(text: str) -> bool | None:
    """``mokutil --sb-state``: True enabled, False disabled, None not EFI."""
    if "SecureBoot enabled" in text:
        return True
    if "SecureBoot disabled" in text:
        return False
    if "EFI variables are not supported" in text:
        return None
    raise SourceError("not mokutil --sb-state output")
