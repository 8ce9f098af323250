"""The emulated silicon of each lab host, derived deterministically from the topology.

``hardware_json(topo, host)`` is the host's ``/var/lib/emulated-hw/hardware.json`` (schema in
docs/lab-device-contract.md); ``cabling_json`` and ``addresses_json`` are the fabric files bound
read-only into every host. Same topology in, byte-identical files out: GUIDs, LIDs, MACs, PCI
addresses and GPU UUIDs are functions of the host's position and the device's name, never random.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

DRIVER_VERSION = "550.54.15"
CUDA_VERSION = "12.4"

# HCA model -> (hca_type, vendor_part_id, fw_ver, board_id)
HCA_MODELS: dict[str, tuple[str, int, str, str]] = {
    "ConnectX-7": ("MT4129", 4129, "28.39.1002", "MT_0000000838"),
    "ConnectX-6": ("MT4123", 4123, "20.39.1002", "MT_0000000223"),
    "ConnectX-6 Dx": ("MT4125", 4125, "22.39.1002", "MT_0000000359"),
    "ConnectX-8": ("MT4131", 4131, "40.43.1014", "MT_0000001093"),
    "BlueField-3": ("MT41692", 41692, "32.39.1002", "MT_0000000884"),
}
GUID_PREFIX = (0xB8, 0x3F, 0xD2)  # Mellanox OUI b8:3f:d2; node GUID = OUI + 03:00 + 24 bits

# GPU PCI buses of a DGX/HGX H100 baseboard (8 GPUs), as nvidia-smi prints them.
HGX_GPU_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
SOCKETS = 2
CORES_PER_SOCKET = 56  # 2 x Xeon 8480C: 112 cores, 224 threads

NETDEV_PCI_RE = re.compile(r"^(?:ib|en|eth)p(\d+)s(\d+)(?:f(\d+))?")


def kernel_release() -> str:
    return os.uname().release


# --- identifiers --------------------------------------------------------------------------


def _low24(host_index: int, hca_index: int) -> int:
    return 0xA00000 + host_index * 0x100 + hca_index * 0x10


def node_guid(host_index: int, hca_index: int) -> str:
    low = _low24(host_index, hca_index)
    b = (*GUID_PREFIX, 0x03, 0x00, low >> 16, (low >> 8) & 0xFF, low & 0xFF)
    return ":".join(f"{b[i]:02x}{b[i + 1]:02x}" for i in range(0, 8, 2))


def guid_bytes(guid: str) -> list[int]:
    h = guid.replace(":", "")
    return [int(h[i : i + 2], 16) for i in range(0, 16, 2)]


def roce_mac(guid: str) -> str:
    """mlx5 Ethernet MAC from its node GUID (drop the 03:00 in the middle)."""
    b = guid_bytes(guid)
    return ":".join(f"{x:02x}" for x in (b[0], b[1], b[2], b[5], b[6], b[7]))


def ipoib_veth_mac(guid: str) -> str:
    """A 6-byte MAC for the veth that stands in for an IPoIB netdev (real ones have 20 bytes)."""
    b = guid_bytes(guid)
    return ":".join(f"{x:02x}" for x in (0x02, b[4], b[5], b[6], b[7], 0x01))


def mgmt_mac(host_index: int, side: str = "host") -> str:
    """Fixed MACs for a host's management veth (``host`` = eth0 inside, ``bridge`` = root side)."""
    kind = {"host": 0x00, "bridge": 0x01}[side]
    return f"02:fb:{kind:02x}:00:{host_index >> 8:02x}:{host_index & 0xFF:02x}"


def fabric_peer_mac(host_index: int, hca_index: int, port: int) -> str:
    """Fixed MAC of the switch-side end of a host port's veth (in the fo-fabric bridge)."""
    return f"02:fb:02:{host_index:02x}:{hca_index:02x}:{port:02x}"


def _hexdigest(*parts: object) -> str:
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()


def gpu_uuid(host: str, index: int) -> str:
    h = _hexdigest("gpu-uuid", host, index)
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpu_serial(host: str, index: int) -> str:
    return "1654" + str(int(_hexdigest("gpu-serial", host, index)[:12], 16))[:9].rjust(9, "0")


def machine_id(host: str) -> str:
    return _hexdigest("machine-id", host)[:32]


# --- PCI / NUMA ---------------------------------------------------------------------------


def numa_of_bus(bus: int) -> int:
    return 0 if bus < 0x80 else 1


def cpu_list(node: int) -> str:
    first = node * CORES_PER_SOCKET
    ht = SOCKETS * CORES_PER_SOCKET + first
    return f"{first}-{first + CORES_PER_SOCKET - 1},{ht}-{ht + CORES_PER_SOCKET - 1}"


def hca_pci(hca: dict[str, Any], hca_index: int) -> str:
    if hca.get("pci"):
        return hca["pci"]
    m = NETDEV_PCI_RE.match(hca["ports"][0]["netdev"])
    if m:
        bus, dev, fn = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        if bus < 256 and dev < 32:
            return f"0000:{bus:02x}:{dev:02x}.{fn}"
    return f"0000:{(0x20 + 0x20 * hca_index) & 0xFF:02x}:00.0"


def gpu_buses(count: int) -> list[int]:
    if count == len(HGX_GPU_BUSES):
        return list(HGX_GPU_BUSES)
    half = (count + 1) // 2
    return [(0x18 + 0x10 * i) if i < half else (0x98 + 0x10 * (i - half)) for i in range(count)]


# --- the host's hardware.json ---------------------------------------------------------------


def lids(topo: dict[str, Any]) -> dict[tuple[str, str, int], int]:
    """LID per (host, hca, port) for InfiniBand ports: the SM's switch has LID 1, hosts from 2."""
    out: dict[tuple[str, str, int], int] = {}
    nxt = 2
    for h in topo["hosts"]:
        for hca in h["hcas"]:
            for p in hca["ports"]:
                if p["link_layer"] == "InfiniBand":
                    out[(h["name"], hca["name"], p["port"])] = nxt
                    nxt += 1
    return out


def hardware_json(topo: dict[str, Any], host: dict[str, Any], kernel: str | None = None) -> dict[str, Any]:
    lid_map = lids(topo)
    hcas = []
    for k, hca in enumerate(host["hcas"]):
        hca_type, part, fw, board = HCA_MODELS.get(hca["model"], HCA_MODELS["ConnectX-7"])
        guid = hca.get("node_guid") or node_guid(host["index"], k)
        pci = hca_pci(hca, k)
        ports = []
        for p in hca["ports"]:
            ib = p["link_layer"] == "InfiniBand"
            pguid = p.get("port_guid") or (
                guid if p["port"] == 1 else node_guid(host["index"], k + 8 * p["port"])
            )
            ports.append(
                {
                    "port": p["port"],
                    "link_layer": p["link_layer"],
                    "netdev": p["netdev"],
                    "speed": p["speed"],
                    "width": p["width"],
                    "rate_gbps": p["rate_gbps"],
                    "state": "ACTIVE",
                    "phys_state": "LinkUp",
                    "lid": lid_map.get((host["name"], hca["name"], p["port"]), 0) if ib else 0,
                    "sm_lid": 1 if ib else 0,
                    "port_guid": pguid,
                    "active_mtu": 4096 if ib else 1024,
                    "max_mtu": 4096,
                    "mac": None if ib else (p.get("mac") or roce_mac(pguid)),
                    "link_flaps": 0,
                    "symbol_errors": 0,
                }
            )
        hcas.append(
            {
                "name": hca["name"],
                "hca_type": hca_type,
                "vendor_id": "0x02c9",
                "vendor_part_id": part,
                "fw_ver": hca.get("fw_ver", fw),
                "board_id": board,
                "psid": board,
                "node_guid": guid,
                "sys_image_guid": guid,
                "pci": pci,
                "numa_node": numa_of_bus(int(pci.split(":")[1], 16)),
                "node_desc": f"{host['name']} {hca['name']}",
                "ports": ports,
            }
        )
    g = host["gpus"]
    gpus = []
    for i, bus in enumerate(gpu_buses(g["count"])):
        node = numa_of_bus(bus)
        gpus.append(
            {
                "index": i,
                "name": g["model"],
                "uuid": gpu_uuid(host["name"], i),
                "serial": gpu_serial(host["name"], i),
                "pci_bus_id": f"00000000:{bus:02X}:00.0",
                "memory_mib": g["memory_mib"],
                "numa_node": node,
                "cpu_affinity": cpu_list(node),
                "nvlink_gen": g["nvlink_gen"],
                "nvlinks": g["nvlinks"],
                "inactive_nvlinks": [],
            }
        )
    out = {
        "host": host["name"],
        "kernel": kernel or kernel_release(),
        "hcas": hcas,
        "gpus": gpus,
        "gpu_topology": g["topology"],
        "driver_version": DRIVER_VERSION,
        "cuda_version": CUDA_VERSION,
        "nic_affinity": nic_affinity(hcas, gpus),
        # who sweeps the InfiniBand subnet: the managed switch, or OpenSM on hosts (emul/services.py)
        "subnet_manager": topo.get("subnet_manager", "switch"),
        # the PCIe tree lspci and sysfs show (docs/lab-device-contract.md, "The PCIe tree")
        "pcie": pcie_tree(hcas, gpus, nic_affinity(hcas, gpus)),
        # which NVIDIA kernel module the driver ships: `open` (modinfo license "Dual MIT/GPL",
        # DMA-BUF capable) or `proprietary` ("NVIDIA")
        "gpu_kernel_module": "open",
    }
    if host.get("nvlink_domain"):
        out["nvlink_domain"] = nvlink_domain(host["nvlink_domain"], host["mgmt_ip"])
    return out


def nvlink_domain(name: str, address: str) -> dict[str, Any]:
    """An NVL72 tray's NVLink domain as its GPUs report it (``nvidia-smi -q`` Fabric CliqueId and
    ClusterUUID, one pair for every tray of the domain) and the address its IMEX peers reach it on
    (the management address, ``ansible_host`` in the lab's inventory). Derived from the name: the
    real values come from the NVLink switch trays' fabric manager (GB200: leptonai/gpud#1106)."""
    h = _hexdigest("nvlink-domain", name)
    return {"name": name, "cluster_uuid": f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}",
            "clique_id": int(h[32:36], 16) % 32767 + 1, "address": address}


def nic_affinity(hcas: list[dict[str, Any]], gpus: list[dict[str, Any]]) -> dict[str, list[int]]:
    """GPUs closest to each HCA: those on its NUMA node, shared out in PCI order among the HCAs
    there (two HCAs and four GPUs on node 0 -> [0, 1] and [2, 3])."""
    out: dict[str, list[int]] = {}
    for node in sorted({h["numa_node"] for h in hcas}):
        on_node = sorted((h for h in hcas if h["numa_node"] == node), key=lambda h: (h["pci"], h["name"]))
        node_gpus = [gp["index"] for gp in gpus if gp["numa_node"] == node]
        n = len(on_node)
        for k, hca in enumerate(on_node):
            lo, hi = len(node_gpus) * k // n, len(node_gpus) * (k + 1) // n
            out[hca["name"]] = node_gpus[lo:hi]
    return {h["name"]: out.get(h["name"], []) for h in hcas}


# --- the PCIe tree --------------------------------------------------------------------------

# Healthy link of every device and bridge: Gen5 x16 (H100 SXM5 and ConnectX-7 are Gen5 x16; the
# HGX baseboard's PCIe switches are Broadcom PEX890xx Gen5 parts).
PCIE_GEN5 = {"speed_gts": 32.0, "width": 16}
#: ACS capability of a switch downstream port / root port as Broadcom/PLX switches report it
#: (lspci ACSCap on a PEX switch: every flag +, e.g. HeyMeco/Rockchip-pcie-devices#6) and the
#: control register as a GPUDirect-ready BIOS leaves it: all off (NCCL docs, "PCI Access Control
#: Services (ACS)").
ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")


def _bdf_bus(bdf: str) -> int:
    return int(bdf.split(":")[-2], 16)


def pcie_tree(hcas: list[dict[str, Any]], gpus: list[dict[str, Any]],
              affinity: dict[str, list[int]]) -> dict[str, Any]:
    """HGX-style tree: each HCA with the GPUs ``nic_affinity`` pairs it with (HCAs sharing a bus,
    i.e. the functions of one card, together) under one PCIe switch (upstream port on bus S,
    downstream ports on bus S+1, one per endpoint bus), below a root port on root bus S-1, where S
    is two below the group's lowest endpoint bus. Groups whose bus ranges would overlap share a
    switch. Endpoint BDFs are the ones hardware.json already has. Returns
    ``{"devices": [...], "iommu_groups": {"N": "identity", ...}}`` (schema in
    docs/lab-device-contract.md)."""
    ends: list[dict[str, Any]] = []
    for g in gpus:
        bdf = "0000:" + g["pci_bus_id"].split(":", 1)[1].lower()
        ends.append({"bdf": bdf, "kind": "gpu", "name": f"GPU{g['index']}"})
    for h in hcas:
        ends.append({"bdf": h["pci"].lower(), "kind": "hca", "name": h["name"]})
    # groups: union of (HCA, its GPUs) and of HCAs on one bus
    group_of: dict[str, int] = {}
    groups: list[set[str]] = []

    def join(members: list[str]) -> None:
        hit = sorted({group_of[m] for m in members if m in group_of})
        merged: set[str] = set(members)
        for k in hit:
            merged |= groups[k]
            groups[k] = set()
        groups.append(merged)
        for m in merged:
            group_of[m] = len(groups) - 1

    by_name = {e["name"]: e["bdf"] for e in ends}
    for h in hcas:
        same_bus = [x["pci"].lower() for x in hcas if _bdf_bus(x["pci"]) == _bdf_bus(h["pci"])]
        join([*same_bus, *(by_name[f"GPU{i}"] for i in affinity.get(h["name"], []) if f"GPU{i}" in by_name)])
    for e in ends:
        if e["bdf"] not in group_of:
            join([e["bdf"]])
    spans = []
    for members in groups:
        if members:
            buses = sorted({_bdf_bus(m) for m in members})
            spans.append([buses[0] - 2, buses[-1], set(members)])
    spans.sort(key=lambda s: s[0])
    merged_spans: list[list[Any]] = []
    for sp in spans:
        if merged_spans and sp[0] - 1 <= merged_spans[-1][1]:
            merged_spans[-1][1] = max(merged_spans[-1][1], sp[1])
            merged_spans[-1][2] |= sp[2]
        else:
            merged_spans.append(sp)
    acs_cap = dict.fromkeys(ACS_FLAGS, True)
    acs_off = dict.fromkeys(ACS_FLAGS, False)
    devices: list[dict[str, Any]] = []
    groups_out: dict[str, str] = {}
    ends_by_bdf = {e["bdf"]: e for e in ends}
    for n, (sec, sub, members) in enumerate(merged_spans):
        if sec < 1:  # no room for bridges below bus 1: endpoints straight on a root bus
            for m in sorted(members):
                gid = 100 + len(groups_out)
                groups_out[str(gid)] = "identity"
                devices.append({**ends_by_bdf[m], "lnkcap": dict(PCIE_GEN5), "lnksta": dict(PCIE_GEN5),
                                "iommu_group": gid})
            continue
        root_group, switch_group = 2 * n + 10, 2 * n + 11
        groups_out[str(root_group)] = "identity"
        groups_out[str(switch_group)] = "identity"
        link = {"lnkcap": dict(PCIE_GEN5), "lnksta": dict(PCIE_GEN5)}
        devices.append({"bdf": f"0000:{sec - 1:02x}:01.0", "kind": "root_port", "name": f"rp{n}",
                        "bus": {"primary": sec - 1, "secondary": sec, "subordinate": sub},
                        **link, "acs_cap": dict(acs_cap), "acs_ctl": dict(acs_off),
                        "iommu_group": root_group})
        devices.append({"bdf": f"0000:{sec:02x}:00.0", "kind": "upstream_port", "name": f"sw{n}",
                        "bus": {"primary": sec, "secondary": sec + 1, "subordinate": sub},
                        **{k: dict(v) for k, v in link.items()}, "iommu_group": switch_group})
        for slot, bus in enumerate(sorted({_bdf_bus(m) for m in members})):
            devices.append({"bdf": f"0000:{sec + 1:02x}:{slot:02x}.0", "kind": "downstream_port",
                            "name": f"sw{n}.{slot}",
                            "bus": {"primary": sec + 1, "secondary": bus, "subordinate": bus},
                            **{k: dict(v) for k, v in link.items()}, "acs_cap": dict(acs_cap),
                            "acs_ctl": dict(acs_off), "iommu_group": switch_group})
        for m in sorted(members):
            devices.append({**ends_by_bdf[m], "lnkcap": dict(PCIE_GEN5), "lnksta": dict(PCIE_GEN5),
                            "iommu_group": switch_group})
    devices.sort(key=lambda d: d["bdf"])
    return {"devices": devices, "iommu_groups": dict(sorted(groups_out.items(), key=lambda kv: int(kv[0])))}


# --- the fabric files -----------------------------------------------------------------------


def cabling_json(topo: dict[str, Any]) -> dict[str, Any]:
    """The rack's cables as the emulated tools see them (docs/lab-device-contract.md): ``links``
    host cables, ``isls`` the normalised inter-switch links (leaf first), ``switches`` each
    switch's OS and tier."""
    return {
        "links": [dict(c) for c in topo["cabling"]],
        "isls": [dict(link) for link in topo.get("links") or []],
        "switches": {
            s["name"]: {"os": s["os"], "tier": s.get("tier", "leaf")} for s in topo.get("switches") or []
        },
    }


def addresses_json(
    topo: dict[str, Any], host: dict[str, Any], hw: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Data-plane addresses the lab gave the host's netdevs (RoCE: 203.0.113.0/24 by rail;
    IPoIB: none, the ipoib role plans those)."""
    hw = hw or hardware_json(topo, host, kernel="-")
    netdevs = {}
    for hca_t, hca in zip(host["hcas"], hw["hcas"], strict=True):
        for p_t, p in zip(hca_t["ports"], hca["ports"], strict=True):
            netdevs[p["netdev"]] = {
                "hca": hca["name"],
                "port": p["port"],
                "link_layer": p["link_layer"],
                "mac": p["mac"] or ipoib_veth_mac(p["port_guid"]),
                "ipv4": p_t.get("address"),
                "prefix": p_t.get("prefix"),
                "rail": p_t.get("rail"),
            }
    return {"host": host["name"], "mgmt": {"eth0": host["mgmt_ip"]}, "netdevs": netdevs}
