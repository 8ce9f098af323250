"""Emulated ``nvidia-smi`` (stdlib only): renders what the real tool prints from hardware.json.

Supported forms (docs/parsers.md): ``nvidia-smi``, ``-L``, ``-q [-i ID]``,
``topo -m`` / ``topo --matrix``, ``nvlink --status|-s [-i ID]``,
``--query-gpu=FIELDS --format=csv[,noheader][,nounits] [-i ID]``.

Layouts follow real captures of driver 550/560 (tests/fixtures/nvidia-smi-*). The GPUs listed are
the ones present in ``hardware.json``; like the real driver, they are enumerated 0..n-1 in order of
their ``index`` (a GPU that fell off the bus disappears and the ones after it move up).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from . import devstate, services

INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
NO_DEVICES = "No devices were found"

# Per-link rate that `nvidia-smi nvlink --status` prints, by NVLink generation (REFERENCE.md).
LINK_GB_S = {1: 20.0, 2: 25.781, 3: 25.0, 4: 26.562, 5: 53.125}

LEGEND = [
    "Legend:",
    "",
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges"
    " within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "  PIX  = Connection traversing at most a single PCIe bridge",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
]


def _out(text: str) -> None:
    sys.stdout.write(text)


# --- the silicon, as the driver enumerates it ----------------------------------------------

class _Gpu:
    def __init__(self, enum_index: int, raw: dict[str, Any]):
        self.i = enum_index
        self.raw = raw
        self.name: str = raw.get("name", "NVIDIA H100 80GB HBM3")
        self.uuid: str = raw.get("uuid", f"GPU-00000000-0000-0000-0000-{enum_index:012d}")
        self.serial: str = str(raw.get("serial", "N/A"))
        self.bus_id: str = raw.get("pci_bus_id", f"00000000:{0x18 + enum_index:02X}:00.0")
        self.memory_mib: int = int(raw.get("memory_mib", 81559))
        self.numa: int | None = raw.get("numa_node")
        self.cpu_affinity: str = raw.get("cpu_affinity", "N/A")
        self.gen: int = int(raw.get("nvlink_gen", 4))
        self.nvlinks: int = int(raw.get("nvlinks", 0))
        self.inactive: set[int] = set(raw.get("inactive_nvlinks", []))

    @property
    def active_links(self) -> int:
        return sum(1 for link in range(self.nvlinks) if link not in self.inactive)

    @property
    def arch(self) -> str:
        n = self.name
        if any(k in n for k in ("H100", "H200", "H800", "H20")):
            return "Hopper"
        if any(k in n for k in ("A100", "A800", "A30", "A10", "A40", "A6000")):
            return "Ampere"
        if "B200" in n or "B100" in n or "GB200" in n or "GB300" in n:
            return "Blackwell"
        return "N/A"

    @property
    def power_limit(self) -> int:
        n = self.name
        if "GB200" in n or "GB300" in n:
            # 1200 W: real GB200 trays' `nvidia-smi` (Pwr:Usage/Cap "... / 1200W", drivers 580/590);
            # GB300: no capture in our sources, GB200's figure is used (docs/lab-fidelity.md)
            return 1200
        if any(k in n for k in ("H100 80GB", "H200", "H800", "B200")):
            return 1000 if "B200" in n else 700
        if "A100" in n or "A800" in n:
            return 400
        return 300

    @property
    def clocks(self) -> tuple[int, int, int, int, int, int, int]:
        """current graphics/sm, memory, video; max graphics/sm, memory, video."""
        if self.arch == "Hopper":
            return 345, 2619, 765, 1980, 2619, 1545, 1980
        if self.arch == "Ampere":
            return 1155, 1593, 1050, 1410, 1593, 1290, 1410
        return 210, 405, 555, 1980, 1215, 1950, 1980


def _hw() -> dict[str, Any]:
    return devstate.load_hardware()


def _gpus(hw: dict[str, Any]) -> list[_Gpu]:
    raw = sorted(hw.get("gpus", []), key=lambda g: g.get("index", 0))
    return [_Gpu(i, g) for i, g in enumerate(raw)]


def _select(gpus: list[_Gpu], ident: str | None) -> list[_Gpu] | None:
    if ident is None:
        return gpus
    chosen = []
    for part in ident.split(","):
        part = part.strip()
        match = [
            g for g in gpus
            if part == str(g.i) or part == g.uuid or part.upper() == g.bus_id.upper()
            or part.upper() == g.bus_id.upper()[4:]
        ]
        if not match:
            return None
        chosen.extend(match)
    return chosen


def _fmt_rate(gb_s: float) -> str:
    return f"{gb_s:.3f}".rstrip("0").rstrip(".")


# --- nvidia-smi (summary table) -------------------------------------------------------------

def _summary(hw: dict[str, Any], gpus: list[_Gpu]) -> str:
    dv, cuda = hw.get("driver_version", "550.54.15"), hw.get("cuda_version", "12.4")
    bar = "+" + "-" * 89 + "+"
    sep = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    lines = [
        time.ctime() + "       ",
        bar,
        f"| NVIDIA-SMI {dv:<23}Driver Version: {dv:<15}CUDA Version: {cuda:<9}|",
        "|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
    ]
    for g in gpus:
        name = g.name if len(g.name) <= 28 else g.name[:25] + "..."
        left = f"{g.i:>4}  {name}"
        c1 = left + " " * (41 - len(left) - 4) + "On  "
        c2 = f"   {g.bus_id} Off "
        c3 = f"{0:>21} "
        lines.append(f"|{c1}|{c2:>24}|{c3}|")
        temp = int(g.raw.get("temperature_c", 31))
        draw = int(g.raw.get("power_draw_w", 70))
        l1 = f" N/A   {temp:>2}C    P0"
        r1 = f"{draw}W / {g.power_limit:>4}W "
        c1 = l1 + " " * (41 - len(l1) - len(r1)) + r1
        c2 = f"{0}MiB / {g.memory_mib:>6}MiB "
        c3 = f"{0:>7}%{'Default':>13} "
        lines.append(f"|{c1}|{c2:>24}|{c3}|")
        lines.append("|" + " " * 41 + "|" + " " * 24 + "|" + f"{'Disabled':>21} " + "|")
        lines.append(sep)
    lines += [
        " " * 91,
        bar,
        "| Processes:" + " " * 78 + "|",
        "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|" + "=" * 89 + "|",
        "|  No running processes found" + " " * 61 + "|",
        bar,
    ]
    return "\n".join(lines) + "\n"


# --- nvidia-smi -L --------------------------------------------------------------------------

def _list(gpus: list[_Gpu]) -> str:
    return "".join(f"GPU {g.i}: {g.name} (UUID: {g.uuid})\n" for g in gpus)


# --- nvidia-smi -q --------------------------------------------------------------------------

def _kv(indent: int, key: str, value: Any) -> str:
    pad = 42 - indent
    return f"{' ' * indent}{key:<{pad}}: {value}" if len(key) < pad else f"{' ' * indent}{key} : {value}"


def _sec(indent: int, key: str) -> str:
    return " " * indent + key


def _clique(hw: dict[str, Any], state: str) -> tuple[Any, str]:
    """(CliqueId, ClusterUUID) of ``nvidia-smi -q``'s Fabric block. An NVL72 tray in an NVLink domain
    (hardware.json ``nvlink_domain``) reports the domain's: leptonai/gpud#1106 shows a GB200 tray's GPUs
    with one clique_id (4026) and one cluster_uuid, state Completed / status Success; an HGX baseboard
    reports clique 0 and an all-zero cluster UUID (meta-pytorch/torchcomms#1385, H100)."""
    dom = hw.get("nvlink_domain") or {}
    if state == "N/A":
        return "N/A", "N/A"
    if dom.get("cluster_uuid"):
        return int(dom.get("clique_id", 0)), str(dom["cluster_uuid"])
    return 0, "00000000-0000-0000-0000-000000000000"


def _fabric(hw: dict[str, Any], g: _Gpu) -> tuple[str, str]:
    if hw.get("nvlink_domain") and g.arch == "Blackwell":
        # MNNVL: the NVLink switch trays' fabric manager (NMX) configures the fabric, not the host;
        # the host sees Completed / Success once its tray is in the domain (leptonai/gpud#1106)
        return "Completed", "Success"
    if hw.get("gpu_topology") != "nvswitch" or g.arch not in ("Hopper", "Blackwell"):
        return "N/A", "N/A"
    fs = services.fabric_state(hw)  # a fabric manager the host must run (hardware.json fabric_manager)
    if fs:
        return fs
    fm = hw.get("fabric_manager") or {}
    state = fm.get("state", "Completed")
    if state == "Completed":
        return "Completed", fm.get("status", "Success")
    return state, fm.get("status", "N/A")


def _q_gpu(hw: dict[str, Any], g: _Gpu) -> list[str]:
    dv = hw.get("driver_version", "550.54.15")
    bus = g.bus_id.split(":")
    reserved, used = 450, 1
    temp = int(g.raw.get("temperature_c", 34))
    draw = float(g.raw.get("power_draw_w", 71.53))
    cur_g, mem, video, max_g, max_mem, max_video, boost = g.clocks
    state, status = _fabric(hw, g)
    clique, cluster = _clique(hw, state)
    atomic = "FETCHADD_32 FETCHADD_64 SWAP_32 SWAP_64 CAS_32 CAS_64 "
    s, k = _sec, _kv
    out = [
        f"GPU {g.bus_id}",
        k(4, "Product Name", g.name), k(4, "Product Brand", "NVIDIA"),
        k(4, "Product Architecture", g.arch), k(4, "Display Mode", "Enabled"),
        k(4, "Display Active", "Disabled"), k(4, "Persistence Mode", "Enabled"),
        k(4, "Addressing Mode", "None"),
        s(4, "MIG Mode"), k(8, "Current", "Disabled"), k(8, "Pending", "Disabled"),
        k(4, "Accounting Mode", "Disabled"), k(4, "Accounting Mode Buffer Size", 4000),
        s(4, "Driver Model"), k(8, "Current", "N/A"), k(8, "Pending", "N/A"),
        k(4, "Serial Number", g.serial), k(4, "GPU UUID", g.uuid), k(4, "Minor Number", g.i),
        k(4, "VBIOS Version", "96.00.A5.00.01"), k(4, "MultiGPU Board", "No"),
        k(4, "Board ID", f"0x{int(bus[1], 16):x}00"), k(4, "Board Part Number", "692-2G520-0200-000"),
        k(4, "GPU Part Number", "2330-885-A1"), k(4, "FRU Part Number", "N/A"),
        k(4, "Module ID", g.i + 1),
        s(4, "Inforom Version"), k(8, "Image Version", "G520.0200.00.05"), k(8, "OEM Object", "2.1"),
        k(8, "ECC Object", "7.16"), k(8, "Power Management Object", "N/A"),
        s(4, "Inforom BBX Object Flush"), k(8, "Latest Timestamp", "N/A"), k(8, "Latest Duration", "N/A"),
        s(4, "GPU Operation Mode"), k(8, "Current", "N/A"), k(8, "Pending", "N/A"),
        k(4, "GPU C2C Mode", "Disabled"),
        s(4, "GPU Virtualization Mode"), k(8, "Virtualization Mode", "None"), k(8, "Host VGPU Mode", "N/A"),
        k(8, "vGPU Heterogeneous Mode", "N/A"),
        s(4, "GPU Reset Status"), k(8, "Reset Required", "No"), k(8, "Drain and Reset Recommended", "No"),
        k(4, "GSP Firmware Version", dv),
        s(4, "IBMNPU"), k(8, "Relaxed Ordering Mode", "N/A"),
        s(4, "PCI"), k(8, "Bus", f"0x{bus[1].upper()}"), k(8, "Device", f"0x{bus[2].split('.')[0].upper()}"),
        k(8, "Domain", f"0x{bus[0][-4:]}"), k(8, "Base Classcode", "0x3"), k(8, "Sub Classcode", "0x2"),
        k(8, "Device Id", "0x233010DE"), k(8, "Bus Id", g.bus_id), k(8, "Sub System Id", "0x16C110DE"),
        s(8, "GPU Link Info"), s(12, "PCIe Generation"), k(16, "Max", 5), k(16, "Current", 5),
        k(16, "Device Current", 5), k(16, "Device Max", 5), k(16, "Host Max", 5),
        s(12, "Link Width"), k(16, "Max", "16x"), k(16, "Current", "16x"),
        s(8, "Bridge Chip"), k(12, "Type", "N/A"), k(12, "Firmware", "N/A"),
        k(8, "Replays Since Reset", 0), k(8, "Replay Number Rollovers", 0),
        k(8, "Tx Throughput", "0 KB/s"), k(8, "Rx Throughput", "0 KB/s"),
        k(8, "Atomic Caps Outbound", atomic), k(8, "Atomic Caps Inbound", atomic),
        k(4, "Fan Speed", "N/A"), k(4, "Performance State", "P0"),
        s(4, "Clocks Event Reasons"), k(8, "Idle", "Active"),
        k(8, "Applications Clocks Setting", "Not Active"),
        k(8, "SW Power Cap", "Not Active"), k(8, "HW Slowdown", "Not Active"),
        k(12, "HW Thermal Slowdown", "Not Active"), k(12, "HW Power Brake Slowdown", "Not Active"),
        k(8, "Sync Boost", "Not Active"), k(8, "SW Thermal Slowdown", "Not Active"),
        k(8, "Display Clock Setting", "Not Active"),
        k(4, "Sparse Operation Mode", "Disabled"),
        s(4, "FB Memory Usage"), k(8, "Total", f"{g.memory_mib} MiB"), k(8, "Reserved", f"{reserved} MiB"),
        k(8, "Used", f"{used} MiB"), k(8, "Free", f"{g.memory_mib - reserved - used} MiB"),
        s(4, "BAR1 Memory Usage"), k(8, "Total", "131072 MiB"), k(8, "Used", "1 MiB"),
        k(8, "Free", "131071 MiB"),
        s(4, "Conf Compute Protected Memory Usage"), k(8, "Total", "0 MiB"), k(8, "Used", "0 MiB"),
        k(8, "Free", "0 MiB"),
        k(4, "Compute Mode", "Default"),
        s(4, "Utilization"), k(8, "Gpu", "0 %"), k(8, "Memory", "0 %"), k(8, "Encoder", "0 %"),
        k(8, "Decoder", "0 %"), k(8, "JPEG", "0 %"), k(8, "OFA", "0 %"),
        s(4, "Encoder Stats"), k(8, "Active Sessions", 0), k(8, "Average FPS", 0), k(8, "Average Latency", 0),
        s(4, "FBC Stats"), k(8, "Active Sessions", 0), k(8, "Average FPS", 0), k(8, "Average Latency", 0),
        s(4, "ECC Mode"), k(8, "Current", "Enabled"), k(8, "Pending", "Enabled"),
        s(4, "ECC Errors"),
    ]
    for scope in ("Volatile", "Aggregate"):
        out += [
            s(8, scope), k(12, "SRAM Correctable", 0), k(12, "SRAM Uncorrectable Parity", 0),
            k(12, "SRAM Uncorrectable SEC-DED", 0), k(12, "DRAM Correctable", 0),
            k(12, "DRAM Uncorrectable", 0),
        ]
    out += [
        k(12, "SRAM Threshold Exceeded", "No"),
        s(8, "Aggregate Uncorrectable SRAM Sources"), k(12, "SRAM L2", 0), k(12, "SRAM SM", 0),
        k(12, "SRAM Microcontroller", 0), k(12, "SRAM PCIE", 0), k(12, "SRAM Other", 0),
        s(4, "Retired Pages"), k(8, "Single Bit ECC", "N/A"), k(8, "Double Bit ECC", "N/A"),
        k(8, "Pending Page Blacklist", "N/A"),
        s(4, "Remapped Rows"), k(8, "Correctable Error", 0), k(8, "Uncorrectable Error", 0),
        k(8, "Pending", "No"), k(8, "Remapping Failure Occurred", "No"),
        s(8, "Bank Remap Availability Histogram"), k(12, "Max", "2560 bank(s)"), k(12, "High", "0 bank(s)"),
        k(12, "Partial", "0 bank(s)"), k(12, "Low", "0 bank(s)"), k(12, "None", "0 bank(s)"),
        s(4, "Temperature"), k(8, "GPU Current Temp", f"{temp} C"),
        k(8, "GPU T.Limit Temp", f"{87 - temp} C"),
        k(8, "GPU Shutdown T.Limit Temp", "-8 C"), k(8, "GPU Slowdown T.Limit Temp", "-2 C"),
        k(8, "GPU Max Operating T.Limit Temp", "0 C"), k(8, "GPU Target Temperature", "N/A"),
        k(8, "Memory Current Temp", f"{temp + 6} C"), k(8, "Memory Max Operating T.Limit Temp", "0 C"),
        s(4, "GPU Power Readings"), k(8, "Power Draw", f"{draw:.2f} W"),
        k(8, "Current Power Limit", f"{g.power_limit:.2f} W"),
        k(8, "Requested Power Limit", f"{g.power_limit:.2f} W"),
        k(8, "Default Power Limit", f"{g.power_limit:.2f} W"), k(8, "Min Power Limit", "200.00 W"),
        k(8, "Max Power Limit", f"{g.power_limit:.2f} W"),
        s(4, "GPU Memory Power Readings "), k(8, "Power Draw", "30.79 W"),
        s(4, "Module Power Readings"), k(8, "Power Draw", "N/A"), k(8, "Current Power Limit", "N/A"),
        k(8, "Requested Power Limit", "N/A"), k(8, "Default Power Limit", "N/A"),
        k(8, "Min Power Limit", "N/A"), k(8, "Max Power Limit", "N/A"),
        s(4, "Clocks"), k(8, "Graphics", f"{cur_g} MHz"), k(8, "SM", f"{cur_g} MHz"),
        k(8, "Memory", f"{mem} MHz"), k(8, "Video", f"{video} MHz"),
        s(4, "Applications Clocks"), k(8, "Graphics", f"{max_g} MHz"), k(8, "Memory", f"{max_mem} MHz"),
        s(4, "Default Applications Clocks"), k(8, "Graphics", f"{max_g} MHz"),
        k(8, "Memory", f"{max_mem} MHz"),
        s(4, "Deferred Clocks"), k(8, "Memory", "N/A"),
        s(4, "Max Clocks"), k(8, "Graphics", f"{max_g} MHz"), k(8, "SM", f"{max_g} MHz"),
        k(8, "Memory", f"{max_mem} MHz"), k(8, "Video", f"{max_video} MHz"),
        s(4, "Max Customer Boost Clocks"), k(8, "Graphics", f"{boost} MHz"),
        s(4, "Clock Policy"), k(8, "Auto Boost", "N/A"), k(8, "Auto Boost Default", "N/A"),
        s(4, "Voltage"), k(8, "Graphics", "685.000 mV"),
        s(4, "Fabric"), k(8, "State", state), k(8, "Status", status),
        k(8, "CliqueId", clique),
        k(8, "ClusterUUID", cluster),
        s(8, "Health"), k(12, "Bandwidth", "N/A"),
        k(4, "Processes", "None"),
        s(4, "Capabilities"), k(8, "EGM", "disabled"),
    ]
    return out


def _query_full(hw: dict[str, Any], all_gpus: list[_Gpu], shown: list[_Gpu]) -> str:
    lines = [
        "",
        "==============NVSMI LOG==============",
        "",
        _kv(0, "Timestamp", time.ctime()),
        _kv(0, "Driver Version", hw.get("driver_version", "550.54.15")),
        _kv(0, "CUDA Version", hw.get("cuda_version", "12.4")),
        "",
        _kv(0, "Attached GPUs", len(all_gpus)),
    ]
    for n, g in enumerate(shown):
        if n:
            lines.append("")
        lines += _q_gpu(hw, g)
    return "\n".join(lines) + "\n\n"


# --- nvidia-smi topo -m ---------------------------------------------------------------------

def _topo(hw: dict[str, Any], gpus: list[_Gpu]) -> str:
    hcas = hw.get("hcas", [])
    affinity = {name: set(idx) for name, idx in (hw.get("nic_affinity") or {}).items()}
    by_raw_index = {g.raw.get("index", g.i): g for g in gpus}
    nic_gpus = {h["name"]: {by_raw_index[i].i for i in affinity.get(h["name"], ()) if i in by_raw_index}
                for h in hcas}
    nvswitch = hw.get("gpu_topology") == "nvswitch"

    def pcie(numa_a: Any, numa_b: Any) -> str:
        return "NODE" if numa_a is not None and numa_a == numa_b else "SYS"

    def gpu_gpu(a: _Gpu, b: _Gpu) -> str:
        links = min(a.active_links, b.active_links)
        bridged = nvswitch or (a.i // 2 == b.i // 2)  # direct: NVLink bridges join pairs 0-1, 2-3, ...
        return f"NV{links}" if bridged and links > 0 else pcie(a.numa, b.numa)

    def gpu_nic(g: _Gpu, h: dict[str, Any]) -> str:
        return "PIX" if g.i in nic_gpus[h["name"]] else pcie(g.numa, h.get("numa_node"))

    def nic_nic(a: dict[str, Any], b: dict[str, Any]) -> str:
        if nic_gpus[a["name"]] & nic_gpus[b["name"]]:
            return "PIX"
        return pcie(a.get("numa_node"), b.get("numa_node"))

    nics = [f"NIC{i}" for i in range(len(hcas))]
    header = [""] + [f"GPU{g.i}" for g in gpus] + nics + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    lines = ["\t".join(header)]
    for g in gpus:
        cells = [" X " if o is g else gpu_gpu(g, o) for o in gpus] + [gpu_nic(g, h) for h in hcas]
        numa = "N/A" if g.numa is None else str(g.numa)
        lines.append("\t".join([f"GPU{g.i}", *cells, g.cpu_affinity, numa, "", "N/A"]))
    for n, h in enumerate(hcas):
        cells = [gpu_nic(g, h) for g in gpus] + [" X " if o is h else nic_nic(h, o) for o in hcas]
        lines.append("\t".join([f"NIC{n}", *cells, "", "", "", ""]))
    lines += ["", *LEGEND]
    if hcas:
        lines += ["", "NIC Legend:", ""] + [f"  NIC{n}: {h['name']}" for n, h in enumerate(hcas)]
    return "\n".join(lines) + "\n\n"


# --- nvidia-smi nvlink --status -------------------------------------------------------------

def _nvlink_status(gpus: list[_Gpu]) -> str:
    lines = []
    for g in gpus:
        lines.append(f"GPU {g.i}: {g.name} (UUID: {g.uuid})")
        if g.active_links == 0:
            lines.append("NVML: Unable to retrieve NVLink information as all links are inActive")
            continue
        rate = _fmt_rate(LINK_GB_S.get(g.gen, 26.562))
        for link in range(g.nvlinks):
            lines.append(f"\t Link {link}: " + ("<inactive>" if link in g.inactive else f"{rate} GB/s"))
    return "\n".join(lines) + "\n"


# --- nvidia-smi nvlink -e -----------------------------------------------------------------
# Format of a real H100's `nvidia-smi nvlink -e` (stas00/ml-engineering compute/accelerator/nvidia/
# debug.md, "How to check error counters of NVLink links"; tests/fixtures/nvidia-smi-nvlink-errors/):
# per GPU its header line, then per link three counter lines, a blank line between links. The counts come from
# the GPU's "nvlink_errors" ({"LINK": {"replay": n, "recovery": n, "crc": n}}; absent: 0).

def _nvlink_errors(gpus: list[_Gpu]) -> str:
    lines = []
    for g in gpus:
        lines.append(f"GPU {g.i}: {g.name} (UUID: {g.uuid})")
        if g.active_links == 0:
            lines.append("NVML: Unable to retrieve NVLink information as all links are inActive")
            continue
        counts = g.raw.get("nvlink_errors", {})
        for link in range(g.nvlinks):
            c = counts.get(str(link), {})
            if link:
                lines.append("")
            lines.append(f"\t Link {link}: Replay Errors: {int(c.get('replay', 0))}")
            lines.append(f"\t Link {link}: Recovery Errors: {int(c.get('recovery', 0))}")
            lines.append(f"\t Link {link}: CRC Errors: {int(c.get('crc', 0))}")
    return "\n".join(lines) + "\n"


# --- nvidia-smi --query-gpu -----------------------------------------------------------------

_UNITS = {"memory": "MiB", "power": "W", "utilization": "%", "clocks": "MHz"}


def _query_value(
    hw: dict[str, Any], all_gpus: list[_Gpu], g: _Gpu, name: str
) -> tuple[str, str | None] | None:
    cur_g, mem, _video, max_g, max_mem, _mv, _b = g.clocks
    table: dict[str, tuple[Any, str | None]] = {
        "index": (g.i, None),
        "name": (g.name, None), "gpu_name": (g.name, None),
        "uuid": (g.uuid, None), "gpu_uuid": (g.uuid, None),
        "serial": (g.serial, None), "gpu_serial": (g.serial, None),
        "pci.bus_id": (g.bus_id, None), "gpu_bus_id": (g.bus_id, None),
        "driver_version": (hw.get("driver_version", "550.54.15"), None),
        "count": (len(all_gpus), None),
        "memory.total": (g.memory_mib, "MiB"), "memory.used": (1, "MiB"),
        "memory.reserved": (450, "MiB"), "memory.free": (g.memory_mib - 451, "MiB"),
        "temperature.gpu": (int(g.raw.get("temperature_c", 34)), None),
        "temperature.memory": (int(g.raw.get("temperature_c", 34)) + 6, None),
        "power.draw": (f"{float(g.raw.get('power_draw_w', 71.53)):.2f}", "W"),
        "power.limit": (f"{g.power_limit:.2f}", "W"),
        "utilization.gpu": (0, "%"), "utilization.memory": (0, "%"),
        "clocks.sm": (cur_g, "MHz"), "clocks.current.sm": (cur_g, "MHz"),
        "clocks.gr": (cur_g, "MHz"), "clocks.current.graphics": (cur_g, "MHz"),
        "clocks.mem": (mem, "MHz"), "clocks.current.memory": (mem, "MHz"),
        "clocks.max.sm": (max_g, "MHz"), "clocks.max.graphics": (max_g, "MHz"),
        "clocks.max.memory": (max_mem, "MHz"),
        "pstate": ("P0", None),
        "persistence_mode": ("Enabled", None),
        "compute_mode": ("Default", None),
        "ecc.mode.current": ("Enabled", None),
        "ecc.errors.uncorrected.volatile.total": (0, None),
        "ecc.errors.corrected.volatile.total": (0, None),
        "pcie.link.gen.current": (5, None), "pcie.link.width.current": (16, None),
        "timestamp": (time.strftime("%Y/%m/%d %H:%M:%S.000"), None),
    }
    if name not in table:
        return None
    value, unit = table[name]
    return str(value), unit


def _query_gpu(
    hw: dict[str, Any], all_gpus: list[_Gpu], shown: list[_Gpu], fields: list[str], fmt: str
) -> int:
    opts = [o.strip() for o in fmt.split(",")]
    if not opts or opts[0] != "csv" or any(o not in ("csv", "noheader", "nounits") for o in opts):
        _out(f'"{fmt}" is not a valid format.\n')
        return 2
    probe = all_gpus[0] if all_gpus else None
    for name in fields:
        if probe is None:
            break
        if _query_value(hw, all_gpus, probe, name) is None:
            _out(f'Field "{name}" is not a valid field to query.\n\n')
            return 2
    nounits, noheader = "nounits" in opts, "noheader" in opts
    lines = []
    if not noheader:
        heads = []
        for name in fields:
            unit = _query_value(hw, all_gpus, probe, name)[1] if probe else None
            heads.append(f"{name} [{unit}]" if unit and not nounits else name)
        lines.append(", ".join(heads))
    for g in shown:
        cells = []
        for name in fields:
            value, unit = _query_value(hw, all_gpus, g, name)
            cells.append(f"{value} {unit}" if unit and not nounits else value)
        lines.append(", ".join(cells))
    _out("\n".join(lines) + "\n")
    return 0


# --- argv -----------------------------------------------------------------------------------

def nvidia_smi(argv: list[str]) -> int:
    args = list(argv)
    ident: str | None = None
    query_fields: str | None = None
    fmt: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-i", "--id") and i + 1 < len(args):
            ident, i = args[i + 1], i + 2
            continue
        if a.startswith("--id="):
            ident = a.split("=", 1)[1]
        elif a.startswith("--query-gpu="):
            query_fields = a.split("=", 1)[1]
        elif a == "--query-gpu" and i + 1 < len(args):
            query_fields, i = args[i + 1], i + 1
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
        elif a == "--format" and i + 1 < len(args):
            fmt, i = args[i + 1], i + 1
        else:
            rest.append(a)
        i += 1

    hw = _hw()
    gpus = _gpus(hw)
    if not gpus:
        _out(NO_DEVICES + "\n")
        return 6
    shown = _select(gpus, ident)
    if shown is None:
        _out(NO_DEVICES + "\n")
        return 6

    if query_fields is not None:
        if fmt is None or rest:
            _out(INVALID + "\n")
            return 2
        fields = [f.strip() for f in query_fields.split(",") if f.strip()]
        return _query_gpu(hw, gpus, shown, fields, fmt)
    if not rest:
        _out(_summary(hw, shown))
        return 0
    if rest in (["-L"], ["--list-gpus"]):
        _out(_list(shown))
        return 0
    if rest in (["-q"], ["--query"], ["-a"]):
        _out(_query_full(hw, gpus, shown))
        return 0
    if rest[0] == "topo" and rest[1:] in (["-m"], ["--matrix"]):
        _out(_topo(hw, gpus))
        return 0
    if rest[0] == "nvlink" and rest[1:] in (["-s"], ["--status"]):
        _out(_nvlink_status(shown))
        return 0
    if rest[0] == "nvlink" and rest[1:] in (["-e"], ["--error-counters"]):
        _out(_nvlink_errors(shown))
        return 0
    _out(INVALID + "\n")
    return 2
