"""Render the emulated sysfs from hardware.json and keep it live (docs/lab-device-contract.md).

Runs inside lab hosts as ``python3 /usr/lib/emulated-hw/hwctl.py sync`` (and ``sync --gids``,
``status``); imports as ``fabricops_lab.emul.hwctl`` on the controller. Stdlib only.

First ``sync``: the whole tree (silicon attributes, writable knobs at their defaults, counters at
0) is rendered into ``/run/emulated-hw/sysfs-lower`` and an overlay is mounted on ``/sys``
(``lowerdir=sysfs-lower:/sys``, upper/work under ``/run/emulated-hw/``). Later ``sync`` runs
write only what comes from the silicon (state, rate, fw_ver, ...) through ``/sys``; knobs and
counters that live in the upper layer are kept, except the counters a fault sets
(``link_flaps`` -> ``link_downed``, ``symbol_errors`` -> ``symbol_error``), whose increase since the
last sync is *added*. With ``EMUL_ROOT`` other than ``/`` (unit tests) nothing is mounted: the
tree is rendered into ``EMUL_ROOT/sys`` directly with the same keep/overwrite rules.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

if __package__ in (None, ""):
    _here = os.path.dirname(os.path.abspath(__file__))
    # emul/hwctl.py (parent holds emul/) or a copy next to emul/ (/usr/lib/emulated-hw/hwctl.py)
    sys.path.insert(0, _here if os.path.isdir(os.path.join(_here, "emul")) else os.path.dirname(_here))
    from emul import devstate, pci, services  # type: ignore[no-redef]
else:
    from . import devstate, pci, services

LOWER = "run/emulated-hw/sysfs-lower"
UPPER = "run/emulated-hw/sysfs-upper"
WORK = "run/emulated-hw/sysfs-work"
APPLIED = "run/emulated-hw/applied-faults.json"
#: sysfs directories that show only emulated entries once mounted (bind mounts over the overlay)
PCI_OWN_DIRS = ("bus/pci/devices", "kernel/iommu_groups")

# per-lane Gb/s -> IB speed name, ibv_devinfo active_speed text and code (rdma-core devinfo.c)
SPEEDS = {
    "SDR": (2.5, "2.5 Gbps", 1), "DDR": (5, "5.0 Gbps", 2), "QDR": (10, "10.0 Gbps", 4),
    "FDR10": (10, "10.0 Gbps", 8), "FDR": (14, "14.0 Gbps", 16), "EDR": (25, "25.0 Gbps", 32),
    "HDR": (50, "50.0 Gbps", 64), "NDR": (100, "100.0 Gbps", 128), "XDR": (200, "200.0 Gbps", 256),
}
WIDTHS = {"1X": (1, 1), "2X": (2, 16), "4X": (4, 2), "8X": (8, 4), "12X": (12, 8)}
STATES = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4}
PHYS = {"Sleep": 1, "Polling": 2, "Disabled": 3, "PortConfigurationTraining": 4, "LinkUp": 5,
        "LinkErrorRecovery": 6, "PhyTest": 7}

COUNTERS = [
    "symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
    "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
    "excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_data", "port_rcv_data",
    "port_xmit_packets", "port_rcv_packets", "port_unicast_xmit_packets", "port_unicast_rcv_packets",
    "port_multicast_xmit_packets", "port_multicast_rcv_packets", "port_xmit_wait",
]
HW_COUNTERS = [
    "out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "np_cnp_sent", "rp_cnp_handled",
    "np_ecn_marked_roce_packets", "roce_adp_retrans", "duplicate_request", "rnr_nak_retry_err",
    "implied_nak_seq_err",
]
# fault key in hardware.json -> counter it adds to
FAULT_COUNTERS = {"link_flaps": "link_downed", "symbol_errors": "symbol_error"}

# mlx5 defaults (see docs/parsers.md): DCQCN enabled on every priority, CNP DSCP 48 / prio 6
ECN_DEFAULT = "1"
KNOB_DEFAULTS = {"ecn/roce_np/cnp_dscp": "48", "ecn/roce_np/cnp_802p_prio": "6"}
ROCE_MODE_DEFAULT = "RoCE v2"


# --- derived values ------------------------------------------------------------------------

def speed_name(port: dict) -> str:
    """IB speed name of a port (RoCE ports get the IB name of their per-lane rate, as mlx5 shows)."""
    speed = str(port.get("speed") or "")
    if speed.upper() in SPEEDS:
        return speed.upper()
    lanes = WIDTHS.get(port.get("width") or "4X", (4, 2))[0]
    per_lane = (port.get("rate_gbps") or 0) / lanes
    for name in ("XDR", "NDR", "HDR", "EDR", "FDR", "QDR", "DDR", "SDR"):
        if per_lane >= SPEEDS[name][0]:
            return name
    return "SDR"


def is_up(port: dict) -> bool:
    return port.get("state", "ACTIVE") in ("ACTIVE", "INIT", "ARMED") and port.get("phys_state") == "LinkUp"


def effective_link(port: dict) -> tuple[int | float, str, str]:
    """(rate Gb/s, width, speed name) as the kernel reports them; a link that is not up shows
    the minimum: 10 Gb/sec 4X SDR on InfiniBand, 40 Gb/sec 4X QDR on Ethernet (real mlx5 captures)."""
    if is_up(port):
        return port.get("rate_gbps") or 0, port.get("width") or "4X", speed_name(port)
    if port.get("link_layer") == "Ethernet":
        return 40, "4X", "QDR"
    return 10, "4X", "SDR"


def rate_text(port: dict) -> str:
    rate, width, name = effective_link(port)
    return f"{rate:g} Gb/sec ({width} {name})"


def _guid_hex(guid: str | None) -> str:
    return (guid or "0000:0000:0000:0000").replace(":", "").lower().rjust(16, "0")


def guid_colon(hex16: str) -> str:
    return ":".join(hex16[i:i + 4] for i in range(0, 16, 4))


def mac_to_guid(mac: str) -> str:
    """EUI-64 interface id of a MAC (U/L bit flipped), 16 hex digits."""
    b = [int(x, 16) for x in mac.split(":")]
    b[0] ^= 0x02
    return "".join(f"{x:02x}" for x in [*b[:3], 0xFF, 0xFE, *b[3:]])


def port_guid(port: dict, hca: dict) -> str:
    if port.get("link_layer") == "Ethernet" and port.get("mac"):
        return mac_to_guid(port["mac"])
    return _guid_hex(port.get("port_guid") or hca.get("node_guid"))


def gid_full(hexstr: str) -> str:
    return ":".join(hexstr[i:i + 4] for i in range(0, 32, 4))


def link_local_gid(port: dict, hca: dict) -> str:
    return gid_full("fe80000000000000" + port_guid(port, hca))


def ipv4_gid(addr: str) -> str:
    return gid_full("00000000000000000000ffff" + ipaddress.IPv4Address(addr).packed.hex())


# --- addresses of netdevs --------------------------------------------------------------------

def netdev_ipv4(netdev: str, hw: dict | None = None) -> list[str]:
    """IPv4 addresses of a netdev: `ip -j addr` on a real host, the lab's addresses.json otherwise."""
    if str(devstate.root()) == "/":
        try:
            out = subprocess.run(["ip", "-j", "-4", "addr", "show", "dev", netdev], capture_output=True,
                                 text=True, timeout=5, check=False)
            data = json.loads(out.stdout or "[]")
            return [a["local"] for d in data for a in d.get("addr_info", []) if a.get("family") == "inet"]
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    host = (hw or {}).get("host") or ""
    data = devstate.fabric_json(f"hosts/{host}/addresses.json") or {}
    val = data.get(netdev) or []
    if isinstance(val, str):
        val = [val]
    return [str(v).split("/")[0] for v in val if ":" not in str(v)]


def netdev_path(netdev: str) -> str | None:
    """The real sysfs directory of a netdev (relative to /sys), following class/net symlinks."""
    link = devstate.sysfs(f"class/net/{netdev}")
    if not os.path.lexists(link):
        return None
    real = os.path.realpath(link)
    base = os.path.realpath(devstate.path("sys"))
    rel = os.path.relpath(real, base)
    return None if rel.startswith("..") else rel


# --- the tree -------------------------------------------------------------------------------

def port_entries(hca: dict, port: dict, hw: dict) -> tuple[dict, dict, dict]:
    """(silicon, knobs, counters) for one port: rel path -> content."""
    port = services.effective_port(hw, hca, port)  # INIT until a subnet manager swept the subnet
    dev, p = hca["name"], port["port"]
    pd = devstate.port_dir(dev, p)
    state = port.get("state", "ACTIVE")
    phys = port.get("phys_state", "LinkUp")
    eth = port.get("link_layer") == "Ethernet"
    silicon = {
        f"{pd}/state": f"{STATES.get(state, 1)}: {state}",
        f"{pd}/phys_state": f"{PHYS.get(phys, 3)}: {phys}",
        f"{pd}/rate": rate_text(port),
        f"{pd}/link_layer": port.get("link_layer", "InfiniBand"),
        f"{pd}/lid": hex(0 if eth else int(port.get("lid") or 0)),
        f"{pd}/sm_lid": hex(0 if eth else int(port.get("sm_lid") or 0)),
        f"{pd}/lid_mask_count": "0",
        f"{pd}/cap_mask": "0x00010000" if eth else "0xa751e848",
    }
    silicon.update(gid_entries(hca, port, hw))
    counters = {f"{pd}/counters/{c}": "0" for c in COUNTERS}
    counters.update({f"{pd}/hw_counters/{c}": "0" for c in HW_COUNTERS})
    return silicon, {}, counters


def gid_entries(hca: dict, port: dict, hw: dict) -> dict:
    pd = devstate.port_dir(hca["name"], port["port"])
    out: dict[str, str | None] = {}
    ll = link_local_gid(port, hca)
    if port.get("link_layer") != "Ethernet":
        out[f"{pd}/gids/0"] = ll
        out[f"{pd}/gid_attrs/types/0"] = "IB/RoCE v1"
        return out
    netdev = port.get("netdev") or ""
    entries = [(ll, "IB/RoCE v1"), (ll, "RoCE v2")]
    for addr in netdev_ipv4(netdev, hw)[:1] if netdev else []:
        g = ipv4_gid(addr)
        entries += [(g, "IB/RoCE v1"), (g, "RoCE v2")]
    for i in range(4):
        if i < len(entries):
            out[f"{pd}/gids/{i}"] = entries[i][0]
            out[f"{pd}/gid_attrs/types/{i}"] = entries[i][1]
            out[f"{pd}/gid_attrs/ndevs/{i}"] = netdev
        else:  # an empty slot reads as the zero GID; its attrs do not exist
            out[f"{pd}/gids/{i}"] = gid_full("0" * 32)
            out[f"{pd}/gid_attrs/types/{i}"] = None
            out[f"{pd}/gid_attrs/ndevs/{i}"] = None
    return out


def hca_entries(hca: dict, hw: dict) -> tuple[dict, dict, dict, list[str]]:
    dev = hca["name"]
    base = f"class/infiniband/{dev}"
    silicon = {
        f"{base}/node_guid": guid_colon(_guid_hex(hca.get("node_guid"))),
        f"{base}/sys_image_guid": guid_colon(_guid_hex(hca.get("sys_image_guid") or hca.get("node_guid"))),
        f"{base}/fw_ver": devstate.fw_running(hca),
        f"{base}/hca_type": hca.get("hca_type", ""),
        f"{base}/board_id": hca.get("board_id", ""),
        f"{base}/hw_rev": "0x0",
        f"{base}/node_type": "1: CA",
        f"{base}/node_desc": hca.get("node_desc") or f"{hw.get('host', '')} {dev}",
        f"{base}/device/vendor": hca.get("vendor_id", "0x15b3"),
        f"{base}/device/numa_node": str(hca.get("numa_node", -1)),
    }
    knobs = {f"{base}/tc/1/traffic_class": ""}
    counters: dict[str, str] = {}
    dirs = []
    for port in hca.get("ports", []):
        s, k, c = port_entries(hca, port, hw)
        silicon.update(s)
        knobs.update(k)
        counters.update(c)
        if port.get("netdev"):
            dirs.append(f"{base}/device/net/{port['netdev']}")
        cm = f"kernel/config/rdma_cm/{dev}/ports/{port['port']}"
        knobs[f"{cm}/default_roce_mode"] = ROCE_MODE_DEFAULT
        knobs[f"{cm}/default_roce_tos"] = "0"
    return silicon, knobs, counters, dirs


def netdev_knobs(hw: dict) -> dict:
    knobs: dict[str, str] = {}
    for hca in hw.get("hcas", []):
        for port in hca.get("ports", []):
            nd = port.get("netdev")
            if not nd:
                continue
            real = netdev_path(nd)
            if real is None:
                continue
            if port.get("link_layer") == "Ethernet":
                for point in ("roce_np", "roce_rp"):
                    for prio in range(8):
                        knobs[f"{real}/ecn/{point}/enable/{prio}"] = ECN_DEFAULT
                for rel, val in KNOB_DEFAULTS.items():
                    knobs[f"{real}/{rel}"] = val
            else:
                knobs[f"{real}/mode"] = "datagram"
    return knobs


def tree(hw: dict) -> tuple[dict, dict, dict, list[str]]:
    silicon: dict = {}
    knobs: dict = {}
    counters: dict = {}
    dirs: list[str] = []
    for hca in hw.get("hcas", []):
        s, k, c, d = hca_entries(hca, hw)
        silicon.update(s)
        knobs.update(k)
        counters.update(c)
        dirs += d
    knobs.update(netdev_knobs(hw))
    silicon.update(pci.sysfs_entries(hw))  # the PCIe tree: link state, IOMMU groups (emul/pci.py)
    return silicon, knobs, counters, dirs


# --- writing --------------------------------------------------------------------------------

def _write(base: str, rel: str, value: str | None) -> None:
    target = os.path.join(base, rel)
    if value is None:
        if os.path.lexists(target):
            os.unlink(target)
        return
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if isinstance(value, pci.Link):  # iommu_group and iommu_groups/N/devices/BDF are symlinks
        if os.path.islink(target) and os.readlink(target) == str(value):
            return
        if os.path.lexists(target):
            os.unlink(target)
        os.symlink(str(value), target)
        return
    tmp = target + ".hwctl-tmp"
    try:
        with open(tmp, "w") as f:
            f.write(f"{value}\n")
        os.replace(tmp, target)
    except OSError:
        with open(target, "w") as f:  # overlay merged dirs may refuse rename over lower files
            f.write(f"{value}\n")


def mounted() -> bool:
    try:
        with open("/proc/self/mounts") as f:
            return any(ln.split()[0] == "emulated-hw" and ln.split()[1].startswith("/sys") for ln in f)
    except OSError:
        return False


def _mount_overlays(lower: str) -> None:
    """One overlay per top-level directory of the rendered tree (/sys/class, /sys/devices,
    /sys/kernel), never on /sys itself: an overlay does not show the mounts below its lower
    directory, so one on /sys would hide /sys/fs/cgroup (systemd can then start no unit and
    cannot halt) and, where /sys is a tmpfs with bind mounts (systemd-nspawn), all of the real
    sysfs (/sys/class/net)."""
    for top in sorted(os.listdir(lower)):
        if not os.path.isdir(os.path.join(lower, top)) or not os.path.isdir(os.path.join("/sys", top)):
            continue
        upper, work = devstate.path(UPPER) / top, devstate.path(WORK) / top
        upper.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        opts = f"lowerdir={os.path.join(lower, top)}:/sys/{top},upperdir={upper},workdir={work}"
        subprocess.run(["mount", "-t", "overlay", "emulated-hw", "-o", opts, f"/sys/{top}"], check=True)
    # The PCI device list and the IOMMU groups must be the emulated ones only: merged with the
    # build machine's real /sys/bus/pci/devices and /sys/kernel/iommu_groups, lspci, the sysfs
    # link files and the IOMMU mode would mix the lab's tree with the real machine's. Bind the
    # rendered directories over them (emul/pci.py; docs/lab-device-contract.md).
    for sub in PCI_OWN_DIRS:
        src = os.path.join(lower, sub)
        if os.path.isdir(src) and os.path.isdir(f"/sys/{sub}"):
            subprocess.run(["mount", "--bind", src, f"/sys/{sub}"], check=True)


def _live_base() -> str:
    return str(devstate.path("sys"))


def _apply_faults(hw: dict, base: str) -> None:
    """Add the increase of fault-set counters since the last sync to the live counters."""
    try:
        applied = json.loads(devstate.path(APPLIED).read_text())
    except (OSError, ValueError):
        applied = {}
    for hca in hw.get("hcas", []):
        for port in hca.get("ports", []):
            for key, counter in FAULT_COUNTERS.items():
                ident = f"{hca['name']}/{port['port']}/{key}"
                want = int(port.get(key) or 0)
                delta = want - int(applied.get(ident, 0))
                if delta > 0:
                    rel = f"{devstate.port_dir(hca['name'], port['port'])}/counters/{counter}"
                    try:
                        with open(os.path.join(base, rel)) as f:
                            cur = int(f.read().strip() or 0)
                    except (OSError, ValueError):
                        cur = 0
                    _write(base, rel, str(cur + delta))
                applied[ident] = want
    target = devstate.path(APPLIED)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(applied, sort_keys=True))


def _prune_pci(hw: dict, base: str) -> None:
    """Drop PCI devices and IOMMU group entries that hardware.json no longer has (a GPU that fell
    off the bus, gpu-missing) from the emulated-only directories (PCI_OWN_DIRS)."""
    want = set(pci.sysfs_entries(hw))
    for sub in PCI_OWN_DIRS:
        top = os.path.join(base, sub)
        if not os.path.isdir(top):
            continue
        for dirpath, dirnames, filenames in os.walk(top, topdown=False):
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                path = os.path.join(dirpath, name)
                if os.path.relpath(path, base) not in want:
                    os.unlink(path)
            if dirpath != top and not os.listdir(dirpath):
                os.rmdir(dirpath)


def sync(gids_only: bool = False, mount: bool | None = None) -> str:
    """Bring the live sysfs in line with hardware.json. Returns what was done (one line)."""
    hw = devstate.load_hardware()
    do_mount = (str(devstate.root()) == "/") if mount is None else mount
    live = _live_base()
    if gids_only:
        for hca in hw.get("hcas", []):
            for port in hca.get("ports", []):
                for rel, val in gid_entries(hca, port, hw).items():
                    _write(live, rel, val)
        return "gids refreshed"
    silicon, knobs, counters, dirs = tree(hw)
    first = not (mounted() if do_mount else devstate.path(LOWER).is_dir())
    if first:
        lower = str(devstate.path(LOWER))
        for rel, val in {**silicon, **knobs, **counters}.items():
            _write(lower, rel, val)
        for d in dirs:
            os.makedirs(os.path.join(lower, d), exist_ok=True)
        if do_mount:
            _mount_overlays(lower)
            # netdev knobs need the netdev's real directory, which is only known with /sys visible
            for rel, val in netdev_knobs(hw).items():
                if not os.path.exists(os.path.join(live, rel)):
                    _write(live, rel, val)
        else:
            for rel, val in {**silicon, **knobs, **counters}.items():
                if rel in silicon or not os.path.exists(os.path.join(live, rel)):
                    _write(live, rel, val)
            for d in dirs:
                os.makedirs(os.path.join(live, d), exist_ok=True)
        _apply_faults(hw, live)
        return "rendered" + (" and mounted" if do_mount else "")
    for rel, val in silicon.items():
        _write(live, rel, val)
    for rel, val in {**knobs, **counters}.items():
        if not os.path.exists(os.path.join(live, rel)):
            _write(live, rel, val)
    for d in dirs:
        os.makedirs(os.path.join(live, d), exist_ok=True)
    if not do_mount or mounted():
        _prune_pci(hw, live)
    _apply_faults(hw, live)
    return "re-synced"


def reset_knobs() -> None:
    """What a driver restart does to the knobs: ECN, traffic class, rdma_cm and IPoIB mode back to
    defaults (counters stay: they live in the firmware)."""
    hw = devstate.load_hardware()
    _, knobs, _, _ = tree(hw)
    live = _live_base()
    for rel, val in knobs.items():
        _write(live, rel, val)


def status() -> str:
    lines = []
    lower = devstate.path(LOWER)
    lines.append(f"sysfs lower: {lower} ({'rendered' if lower.is_dir() else 'not rendered'})")
    lines.append(f"overlay on /sys: {'mounted' if mounted() else 'not mounted'}")
    try:
        hw = devstate.load_hardware()
        for hca in hw.get("hcas", []):
            for port in hca.get("ports", []):
                st = devstate.read_sysfs(f"{devstate.port_dir(hca['name'], port['port'])}/state", "-")
                lines.append(f"{hca['name']} port {port['port']}: {st} ({port.get('netdev') or '-'})")
    except (OSError, ValueError) as exc:
        lines.append(f"hardware.json unreadable: {exc}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("sync", "status"):
        print("usage: hwctl.py sync [--gids] | status", file=sys.stderr)
        return 2
    if argv[0] == "status":
        print(status())
        return 0
    try:
        print(sync(gids_only="--gids" in argv))
    except (OSError, ValueError, subprocess.CalledProcessError) as exc:
        print(f"hwctl: sync failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
