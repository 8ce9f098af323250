"""Emulated ``lspci`` (pciutils) and the PCIe part of the emulated sysfs, from hardware.json ``pcie``.

The tree (root ports, PCIe switch ports, GPUs, HCAs) is ``hardware.json["pcie"]["devices"]``
(docs/lab-device-contract.md, "The PCIe tree"). Output follows pciutils 3.x ``lspci -vvv``
(lib/names, ls-caps.c), checked against real captures (tests/fixtures/lspci/ and the ConnectX-7 /
H100 captures quoted in docs/lab-device-contract.md):

- ``LnkSta:\tSpeed 32GT/s (ok), Width x16 (ok)``; ``(downgraded)`` when below LnkCap. Root and
  downstream ports print no ``(ok)``/``(downgraded)`` (ls-caps.c ``link_compare``: the partner's
  capability decides there).
- ``ACSCap:``/``ACSCtl:`` lines with the seven flags, on root and switch downstream ports.
- Run by a non-root user, every capability list is ``Capabilities: <access denied>`` (real lspci
  cannot read config space past 64 bytes without root; capture rockspring/sand-mark lspci.md).
- An unknown option prints ``lspci: invalid option -- 'X'`` and the usage text on stderr, exit 1
  (getopt and lspci.c ``bad:``); options real lspci has but the lab does not emulate say so.

Stdlib only.
"""

from __future__ import annotations

import os
import sys
from typing import Any

if __package__ in (None, ""):  # pragma: no cover - run as a script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from emul import devstate  # type: ignore[no-redef]
else:
    from . import devstate

ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")

# (class name, class id, vendor text, device text, vendor:device, rev, driver) per kind; names as
# in pci.ids (Broadcom PEX890xx 1000:c030, ConnectX-7 15b3:1021, GH100 10de:2330 ...)
BRIDGE_INTEL = ("PCI bridge", "0604", "Intel Corporation", "Device 352a", "8086:352a", "04", "pcieport")
BRIDGE_PEX = (
    "PCI bridge",
    "0604",
    "Broadcom / LSI",
    "PEX890xx PCIe Gen 5 Switch",
    "1000:c030",
    "b0",
    "pcieport",
)
GPU_NAMES = (  # substring of hardware.json gpus[].name -> (device text, id)
    ("H200", "GH100 [H200 SXM 141GB]", "2335"),
    ("H100", "GH100 [H100 SXM5 80GB]", "2330"),
    ("A100", "GA100 [A100 SXM4 80GB]", "20b2"),
)
HCA_NAMES = {  # hardware.json hcas[].hca_type -> (device text, id)
    "MT4129": ("MT2910 Family [ConnectX-7]", "1021"),
    "MT4123": ("MT28908 Family [ConnectX-6]", "101b"),
    "MT4125": ("MT2892 Family [ConnectX-6 Dx]", "101d"),
    "MT4131": ("CX8 Family [ConnectX-8]", "1023"),
    "MT41692": ("MT43244 BlueField-3 integrated ConnectX-7 network controller", "a2dc"),
}
PORT_TYPE = {
    "root_port": "Root Port (Slot+)",
    "upstream_port": "Upstream Port",
    "downstream_port": "Downstream Port (Slot+)",
    "gpu": "Endpoint",
    "hca": "Endpoint",
}

USAGE = """Usage: lspci [<switches>]

Basic display modes:
-mm\t\tProduce machine-readable output (single -m for an obsolete format)
-t\t\tShow bus tree

Display options:
-v\t\tBe verbose (-vv or -vvv for higher verbosity)
-k\t\tShow kernel drivers handling each device
-x\t\tShow hex-dump of the standard part of the config space
-xxx\t\tShow hex-dump of the whole config space (dangerous; root only)
-xxxx\t\tShow hex-dump of the 4096-byte extended config space (root only)
-b\t\tBus-centric view (addresses and IRQ's as seen by the bus)
-D\t\tAlways show domain numbers
-P\t\tDisplay bridge path in addition to bus and device number
-PP\t\tDisplay bus path in addition to bus and device number

Resolving of device ID's to names:
-n\t\tShow numeric ID's
-nn\t\tShow both textual and numeric ID's (names & numbers)

Selection of devices:
-s [[[[<domain>]:]<bus>]:][<device>][.[<func>]]\tShow only devices in selected slots
-d [<vendor>]:[<device>][:<class>]\t\tShow only devices with specified ID's
"""
KNOWN_NOT_EMULATED = set("mtxbPdiApHFOGqQM")


# --- the tree ---------------------------------------------------------------------------------


def devices(hw: dict[str, Any]) -> list[dict[str, Any]]:
    """The PCIe devices of hardware.json, sorted by address; a GPU that fell off the bus
    (``gpu-missing``) is gone from lspci too."""
    present_gpus = {f"GPU{g['index']}" for g in hw.get("gpus", [])}
    out = []
    for d in (hw.get("pcie") or {}).get("devices", []):
        if d.get("kind") == "gpu" and d.get("name") not in present_gpus:
            continue
        out.append(d)
    return sorted(out, key=lambda d: d["bdf"])


def find(hw: dict[str, Any], name: str) -> dict[str, Any] | None:
    """A device by name (``mlx5_0``, ``GPU0``) or address."""
    return next((d for d in devices(hw) if name in (d.get("name"), d.get("bdf"))), None)


def parents(devs: list[dict[str, Any]]) -> dict[str, str | None]:
    by_sec = {d["bus"]["secondary"]: d["bdf"] for d in devs if d.get("bus")}
    return {d["bdf"]: by_sec.get(int(d["bdf"].split(":")[1], 16)) for d in devs}


def bridges_above(hw: dict[str, Any], bdf: str) -> list[dict[str, Any]]:
    """The bridges from a device up to its root port, nearest first."""
    devs = devices(hw)
    by_bdf = {d["bdf"]: d for d in devs}
    up = parents(devs)
    out = []
    cur = up.get(bdf)
    while cur is not None and cur in by_bdf and by_bdf[cur] not in out:
        out.append(by_bdf[cur])
        cur = up.get(cur)
    return out


def _ident(hw: dict[str, Any], d: dict[str, Any]) -> tuple[str, str, str, str, str, str, str]:
    kind = d.get("kind")
    if kind == "root_port":
        return BRIDGE_INTEL
    if kind in ("upstream_port", "downstream_port"):
        return BRIDGE_PEX
    if kind == "gpu":
        gpu = next((g for g in hw.get("gpus", []) if f"GPU{g['index']}" == d.get("name")), {})
        name = str(gpu.get("name", ""))
        text, dev_id = next(((t, i) for key, t, i in GPU_NAMES if key in name), ("Device 2330", "2330"))
        return ("3D controller", "0302", "NVIDIA Corporation", text, f"10de:{dev_id}", "a1", "nvidia")
    hca = next((h for h in hw.get("hcas", []) if h["name"] == d.get("name")), {})
    text, dev_id = HCA_NAMES.get(str(hca.get("hca_type", "")), ("Device 1021", "1021"))
    eth = all(p.get("link_layer") == "Ethernet" for p in hca.get("ports", [])) and hca.get("ports")
    cls = ("Ethernet controller", "0200") if eth else ("Infiniband controller", "0207")
    return (*cls, "Mellanox Technologies", text, f"15b3:{dev_id}", "00", "mlx5_core")


def _numa(hw: dict[str, Any], d: dict[str, Any]) -> int:
    return 0 if int(d["bdf"].split(":")[1], 16) < 0x80 else 1


# --- lspci text -----------------------------------------------------------------------------


def _speed(gts: float) -> str:
    return f"{gts:g}GT/s"


def _cmp(kind: str, sta: float | int, cap: float | int) -> str:
    if kind in ("root_port", "downstream_port"):
        return ""
    if sta > cap:
        return " (overdriven)"
    return " (ok)" if sta == cap else " (downgraded)"


def _acs_line(flags: dict[str, bool]) -> str:
    return " ".join(f"{f}{'+' if flags.get(f) else '-'}" for f in ACS_FLAGS)


def header(hw: dict[str, Any], d: dict[str, Any], numeric: int, domain: bool) -> str:
    cls, cls_id, vendor, text, ids, rev, _ = _ident(hw, d)
    addr = d["bdf"] if domain or not d["bdf"].startswith("0000:") else d["bdf"][5:]
    progif = " (prog-if 00 [Normal decode])" if cls == "PCI bridge" else ""
    if numeric == 1:
        return f"{addr} {cls_id}: {ids} (rev {rev})"
    if numeric >= 2:
        return f"{addr} {cls} [{cls_id}]: {vendor} {text} [{ids}] (rev {rev}){progif}"
    return f"{addr} {cls}: {vendor} {text} (rev {rev}){progif}"


def block(hw: dict[str, Any], d: dict[str, Any], verbose: int, root: bool) -> list[str]:
    kind = d.get("kind", "")
    _, _, vendor, text, _, _, driver = _ident(hw, d)
    lines = [
        f"\tSubsystem: {vendor} {text}" if kind != "gpu" else "\tSubsystem: NVIDIA Corporation Device 16c1",
        "\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- "
        "FastB2B- DisINTx+",
        "\tStatus: Cap+ 66MHz- UDF- FastB2B- ParErr- DEVSEL=fast >TAbort- <TAbort- <MAbort- >SERR- "
        "<PERR- INTx-",
        "\tLatency: 0, Cache Line Size: 64 bytes",
        f"\tNUMA node: {_numa(hw, d)}",
    ]
    if d.get("iommu_group") is not None and (hw.get("pcie") or {}).get("iommu_groups"):
        lines.append(f"\tIOMMU group: {d['iommu_group']}")
    if d.get("bus"):
        b = d["bus"]
        lines += [
            f"\tBus: primary={b['primary']:02x}, secondary={b['secondary']:02x}, "
            f"subordinate={b['subordinate']:02x}, sec-latency=0",
            "\tI/O behind bridge: [disabled] [16-bit]",
            "\tMemory behind bridge: [disabled] [32-bit]",
            "\tSecondary status: 66MHz- FastB2B- ParErr- DEVSEL=fast >TAbort- <TAbort- <MAbort- "
            "<SERR- <PERR-",
        ]
    if not root:
        lines.append("\tCapabilities: <access denied>")
    else:
        lines.append(f"\tCapabilities: [68] Express (v2) {PORT_TYPE.get(kind, 'Endpoint')}, MSI 00")
        cap, sta = d.get("lnkcap") or {}, d.get("lnksta") or d.get("lnkcap") or {}
        if verbose >= 2 and cap:
            lines += [
                f"\t\tLnkCap:\tPort #0, Speed {_speed(cap['speed_gts'])}, Width x{cap['width']}, "
                "ASPM not supported",
                "\t\t\tClockPM- Surprise- LLActRep+ BwNot+ ASPMOptComp+",
                "\t\tLnkCtl:\tASPM Disabled; RCB 64 bytes, Disabled- CommClk+",
                "\t\t\tExtSynch- ClockPM- AutWidDis- BWInt- AutBWInt-",
                f"\t\tLnkSta:\tSpeed {_speed(sta['speed_gts'])}"
                f"{_cmp(kind, sta['speed_gts'], cap['speed_gts'])}, Width x{sta['width']}"
                f"{_cmp(kind, sta['width'], cap['width'])}",
                "\t\t\tTrErr- Train- SlotClk+ DLActive+ BWMgmt- ABWMgmt-",
                f"\t\tLnkCap2: Supported Link Speeds: 2.5-{_speed(cap['speed_gts'])}, Crosslink- "
                "Retimer+ 2Retimers+ DRS-",
            ]
        if d.get("acs_cap") is not None:
            lines.append("\tCapabilities: [1f0 v1] Access Control Services")
            if verbose >= 2:
                lines += [
                    f"\t\tACSCap:\t{_acs_line(d['acs_cap'])}",
                    f"\t\tACSCtl:\t{_acs_line(d.get('acs_ctl') or {})}",
                ]
    lines.append(f"\tKernel driver in use: {driver}")
    lines.append(f"\tKernel modules: {driver}")
    return lines


def _slot_filter(spec: str) -> tuple[int | None, int | None, int | None, int | None] | None:
    """``-s [[[[<domain>]:]<bus>]:][<device>][.[<func>]]`` -> (domain, bus, dev, func); None: malformed."""
    func = None
    if "." in spec:
        spec, f = spec.rsplit(".", 1)
        if f:
            if not all(c in "0123456789abcdefABCDEF" for c in f):
                return None
            func = int(f, 16)
    parts = spec.split(":")
    if len(parts) > 3:
        return None
    vals: list[int | None] = []
    for p in parts:
        if p in ("", "*"):
            vals.append(None)
        elif all(c in "0123456789abcdefABCDEF" for c in p):
            vals.append(int(p, 16))
        else:
            return None
    vals = [None] * (3 - len(vals)) + vals
    return vals[0], vals[1], vals[2], func


def _matches(bdf: str, f: tuple[int | None, int | None, int | None, int | None]) -> bool:
    dom, rest = bdf.split(":", 1)
    bus, devfn = rest.split(":")
    dev, fn = devfn.split(".")
    have = (int(dom, 16), int(bus, 16), int(dev, 16), int(fn, 16))
    return all(want is None or want == got for want, got in zip(f, have, strict=True))


def lspci(argv: list[str]) -> int:
    verbose, numeric, domain = 0, 0, False
    slot: tuple[int | None, int | None, int | None, int | None] | None = None
    it = iter(argv)
    for arg in it:
        if not arg.startswith("-") or arg == "-":
            print(USAGE, end="", file=sys.stderr)
            return 1
        opts = arg[1:]
        k = 0
        while k < len(opts):
            c = opts[k]
            if c == "v":
                verbose += 1
            elif c == "n":
                numeric += 1
            elif c == "D":
                domain = True
            elif c == "k":
                pass  # kernel driver lines are printed with -v anyway
            elif c == "s":
                value = opts[k + 1 :] or next(it, None)
                if value is None:
                    print("lspci: option requires an argument -- 's'", file=sys.stderr)
                    print(USAGE, end="", file=sys.stderr)
                    return 1
                slot = _slot_filter(value)
                if slot is None:
                    print("lspci: -s: Invalid slot number", file=sys.stderr)
                    return 1
                break
            elif c in KNOWN_NOT_EMULATED:
                print(
                    f"lspci: option -{c} is not emulated in the fabricops lab (docs/lab-device-contract.md)",
                    file=sys.stderr,
                )
                return 1
            else:
                print(f"lspci: invalid option -- '{c}'", file=sys.stderr)
                print(USAGE, end="", file=sys.stderr)
                return 1
            k += 1
    try:
        hw = devstate.load_hardware()
    except (OSError, ValueError):
        return 0  # no emulated silicon: nothing on the bus
    root = os.geteuid() == 0
    out: list[str] = []
    for d in devices(hw):
        if slot is not None and not _matches(d["bdf"], slot):
            continue
        out.append(header(hw, d, numeric, domain))
        if verbose:
            out += block(hw, d, verbose, root)
            out.append("")
    if out:
        sys.stdout.write("\n".join(out) + "\n")
    return 0


# --- sysfs ------------------------------------------------------------------------------------


class Link(str):
    """A sysfs entry that is a symlink (hwctl writes it with os.symlink)."""


def sysfs_speed(gts: float) -> str:
    """The kernel's PCIE_SPEED2STR text: ``32.0 GT/s PCIe`` (drivers/pci/pci.h, kernel >= 5.x)."""
    return f"{gts:.1f} GT/s PCIe"


def device_path(devs: list[dict[str, Any]], bdf: str) -> str:
    """The device's directory under /sys as the kernel lays it out: the chain of bridges from its
    root bus down (``devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:1a:00.0``)."""
    up = parents(devs)
    chain = [bdf]
    while up.get(chain[-1]) is not None and up[chain[-1]] not in chain:
        chain.append(up[chain[-1]])  # type: ignore[arg-type]
    top = chain[-1]
    return "/".join([f"devices/pci{top[:4]}:{top[5:7]}", *reversed(chain)])


def hca_uevent(hw: dict[str, Any], d: dict[str, Any]) -> str:
    """The HCA's PCI ``uevent`` as the kernel writes it (drivers/pci/pci-driver.c pci_uevent:
    PCI_CLASS, PCI_ID, PCI_SUBSYS_ID, PCI_SLOT_NAME, MODALIAS; DRIVER from the bound driver).
    ConnectX in InfiniBand mode is class 0x0207 (network, InfiniBand), in Ethernet mode 0x0200."""
    hca = next((h for h in hw.get("hcas", []) if h.get("name") == d.get("name")), {})
    ib = any(p.get("link_layer") == "InfiniBand" for p in hca.get("ports", []))
    cls = 0x020700 if ib else 0x020000
    vendor = 0x15B3  # the PCI vendor (hardware.json vendor_id is the IB OUI ibv_devinfo prints)
    device = int(hca.get("vendor_part_id") or 4129)
    return (f"DRIVER=mlx5_core\nPCI_CLASS={cls:X}\nPCI_ID={vendor:04X}:{device:04X}\n"
            f"PCI_SUBSYS_ID={vendor:04X}:0041\nPCI_SLOT_NAME={d['bdf']}\n"
            f"MODALIAS=pci:v{vendor:08X}d{device:08X}sv{vendor:08X}sd00000041bc{cls >> 16:02X}"
            f"sc{(cls >> 8) & 0xff:02X}i00")


def sysfs_entries(hw: dict[str, Any]) -> dict[str, str | Link]:
    """rel path -> content for the PCIe tree, laid out as the kernel does: the device directories
    under ``devices/pciDDDD:BB/...`` with ``{current,max}_link_{speed,width}``, ``numa_node`` and
    the ``iommu_group`` symlink; ``bus/pci/devices/BDF`` symlinks to them;
    ``kernel/iommu_groups/N/{type,devices/BDF}``; and the HCAs'
    ``class/infiniband/DEV/device/*_link_*`` (the same device seen from the RDMA side)."""
    out: dict[str, str | Link] = {}
    groups = (hw.get("pcie") or {}).get("iommu_groups") or {}
    devs = devices(hw)
    for d in devs:
        base = device_path(devs, d["bdf"])
        up_to_sys = "../" * len(base.split("/"))
        out[f"bus/pci/devices/{d['bdf']}"] = Link(f"../../../{base}")
        cap = d.get("lnkcap") or {}
        sta = d.get("lnksta") or cap
        files = {}
        if cap:
            files = {
                "max_link_speed": sysfs_speed(cap["speed_gts"]),
                "max_link_width": str(cap["width"]),
                "current_link_speed": sysfs_speed(sta["speed_gts"]),
                "current_link_width": str(sta["width"]),
            }
        if d.get("kind") == "hca":
            files["uevent"] = hca_uevent(hw, d)
        for name, val in files.items():
            out[f"{base}/{name}"] = val
            if d.get("kind") == "hca":
                out[f"class/infiniband/{d['name']}/device/{name}"] = val
        out[f"{base}/numa_node"] = str(_numa(hw, d))
        group = d.get("iommu_group")
        if group is not None and str(group) in groups:
            out[f"{base}/iommu_group"] = Link(f"{up_to_sys}kernel/iommu_groups/{group}")
            out[f"kernel/iommu_groups/{group}/devices/{d['bdf']}"] = Link(f"../../../../{base}")
    for group, gtype in groups.items():
        out[f"kernel/iommu_groups/{group}/type"] = str(gtype)
    return out


# --- the perftest hook --------------------------------------------------------------------------


#: PCIe line code: 128b/130b from 8 GT/s (Gen3) on, 8b/10b below (PCIe base spec 3.0 §4.2).
def pcie_gbps(speed_gts: float, width: int) -> float:
    """Usable data rate of a PCIe link in Gb/s after line coding (x8 16 GT/s: 126 Gb/s)."""
    coding = 128 / 130 if speed_gts >= 8 else 8 / 10
    return speed_gts * width * coding


def hca_pcie_limit_gbps(hw: dict[str, Any], hca_name: str) -> float | None:
    """What the HCA's PCIe link carries now, or None when there is no PCIe data for it."""
    d = find(hw, hca_name)
    if d is None or d.get("kind") != "hca":
        return None
    sta = d.get("lnksta") or d.get("lnkcap")
    if not sta:
        return None
    return pcie_gbps(float(sta["speed_gts"]), int(sta["width"]))
