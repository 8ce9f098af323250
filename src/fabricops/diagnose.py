"""``fabricops diagnose``: collect the fabric evidence of hosts and name the likely cause.

Evidence (per host, over the inventory's SSH, read-only commands): ``ibv_devinfo -v``, ``ibstat``,
the port state, rate and error counters in sysfs, the RoCE hw_counters, ``mlnx_qos`` and
``ethtool -S`` (two samples) per RoCE netdev, the DCQCN (ECN) switches in sysfs,
``nvidia-smi nvlink --status``, ``ip -j addr``, ``/etc/nccl.conf``; the GPU path (PCIe link
width/speed in sysfs, ``lspci -D -vvv`` ACS control, IOMMU group types, ``lsmod``/``uname -r``/
``modinfo -F license nvidia`` for the GPUDirect mechanism); IPoIB reachability between
the hosts diagnosed; and, for switches in the inventory, their PFC/ECN state.

Analysis (:func:`analyse`, pure, unit-tested) maps the evidence to the troubleshooting table in
docs/troubleshooting.md. Each :class:`Finding` has a symptom, evidence, cause and remedy; findings
are ordered by likelihood (a hard fault before the misconfiguration it would mask). A healthy
fabric gives no finding. Exit status (docs/cli.md): 0 every host gave evidence and none shows a
fault; 1 a fault was found; 4 could not run: no evidence (no host, every command failed, an
unreachable host and no fault elsewhere: such hosts are listed, never called healthy), a missing
file or inventory; 5 the evidence or its context is malformed; 2 usage error.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fabricops import cliopts
from fabricops.errors import (
    EXIT_FAILED,
    EXIT_NORUN,
    EXIT_OK,
    BadInput,
    CouldNotRun,
    FabricopsError,
    ParseError,
    UsageError,
)
from fabricops.monitor.collector import (
    PFC_STATS,
    SourceError,
    parse_ethtool_stats,
    parse_rate,
    parse_state,
)
from fabricops.verify import firmware as fw_checks  # NIC firmware / DKMS: verify's probe and rules
from fabricops.verify import pcie as pcie_cmds  # the GPU-path commands verify runs too

Raw = Mapping[str, Mapping[str, Any]]
Run = Callable[[str, str, float], Mapping[str, Any]]

SYMPTOM_HANG = "NCCL timeout / hang"
SYMPTOM_SLOW = "bandwidth too low"
SYMPTOM_STORM = "PFC storm (lossless priority stalled)"
SYMPTOM_NVLINK = "NVLink failure (intra-node bandwidth drop)"

# likelihood rank of each cause: a hard fault ranks above what it would also disturb
LIKELIHOOD = {
    "port_down": 100,
    "nvlink_inactive": 95,
    "port_degraded": 90,
    "link_flapping": 85,
    "symbol_errors": 80,
    "pfc_storm": 75,
    "connectivity": 72,
    "ecn_one_side": 70,
    "pfc_mismatch": 68,
    "pcie_downtrained": 88,
    "acs_redirect": 78,
    "iommu_translated": 66,
    "no_gpudirect": 64,
    "gid_index": 60,
    "mtu_mismatch": 55,
    "numa_affinity": 30,
    # issue 20 (fabricops.verify.firmware judges; diagnose only words the finding)
    "dkms_modules_missing": 92,  # for the running kernel: the RDMA driver is not loaded at all
    "secure_boot_key_not_enrolled": 91,  # the kernel rejects the DKMS-built driver
    "nic_fw_noncompliant": 52,
    "nic_fw_reset_pending": 50,
    "dkms_modules_missing_next": 40,  # for the next-boot kernel: latent until the reboot
}

SYSFS_CMD = (
    "cd /sys/class/infiniband 2>/dev/null && grep -H '' */ports/*/state */ports/*/phys_state "
    "*/ports/*/rate */ports/*/link_layer */ports/*/counters/symbol_error */ports/*/counters/link_downed "
    "*/ports/*/counters/link_error_recovery */ports/*/counters/port_rcv_errors "
    "*/ports/*/counters/port_xmit_discards */ports/*/hw_counters/np_cnp_sent "
    "*/ports/*/hw_counters/rp_cnp_handled */ports/*/hw_counters/np_ecn_marked_roce_packets "
    "*/ports/*/gid_attrs/types/* */device/numa_node 2>/dev/null; "
    'for d in */device/net/*; do [ -e "$d" ] && echo "netdev:$d"; done; true'
)
BASE_COMMANDS = {
    "sysfs": SYSFS_CMD,
    "ibstat": "ibstat",
    "ibv_devinfo": "ibv_devinfo -v",
    "ip": "ip -j addr show",
    "ecn": "grep -H '' /sys/class/net/*/ecn/roce_np/enable/* /sys/class/net/*/ecn/roce_rp/enable/* "
    "2>/dev/null; true",
    "nvlink": "nvidia-smi nvlink --status",
    "nccl": "cat /etc/nccl.conf 2>/dev/null; true",
    # the GPU path (issue 19; the same evidence as verify's pcie checks, fabricops.verify.pcie)
    "pcie_sysfs": pcie_cmds.LINK_SYSFS_CMD,
    "hca_pci": pcie_cmds.HCA_PCI_CMD,
    "gpu_pci": "nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader",
    "lspci": pcie_cmds.LSPCI_CMD,
    "iommu": pcie_cmds.IOMMU_CMD,
    "cmdline": "cat /proc/cmdline",
    "lsmod": "lsmod",
    "uname": "uname -r",
    "modinfo_nvidia": "modinfo -F license nvidia",
    # NIC firmware, DKMS and Secure Boot (issue 20): verify's one probe, every section
    fw_checks.PROBE_KEY: fw_checks.probe_command(None, full=True),
}
ETHTOOL_GAP_S = 2.0


class DiagnoseError(FabricopsError):
    """Evidence or context that cannot be used (exit status 5: invalid input data)."""

    exit_status = 5


class ContextError(DiagnoseError):
    """The inventory's RoCE definition does not validate (one sentence naming the variable)."""


@dataclass
class Finding:
    host: str
    kind: str
    symptom: str
    cause: str
    evidence: list[str]
    remedy: str
    device: str | None = None
    likelihood: int = 0


@dataclass
class Context:
    """What the hosts should look like (from the inventory)."""

    expected_rate_gbps: dict[str, float] = field(default_factory=dict)  # link layer -> Gb/s
    lossless_priority: int | None = None
    lossless: bool = True  # False: lossy RoCE, PFC must be off everywhere (fabricops_roce.lossless)
    flaps_fail_at: int = 5
    flaps_source: str = "Azure/azurehpc-health-checks customTests/azure_ib_link_flapping.nhc"
    storm_share: float = 0.5
    cabling: list[dict[str, Any]] = field(default_factory=list)
    switches: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> normalised PFC/ECN state
    #: nic_firmware_* / mlnx_ofed DKMS expectations (fabricops.verify.firmware.FirmwareExpect); None: none
    firmware: Any = None


# --- evidence parsing --------------------------------------------------------------------------


def _ok(raw: Raw, key: str) -> str | None:
    item = raw.get(key)
    if not item or item.get("rc", 1) != 0:
        return None
    return str(item.get("stdout") or "")


def parse_sysfs(text: str) -> dict[str, Any]:
    """The ``sysfs`` evidence -> {"ports": {"mlx5_0/1": {...}}, "netdevs": {dev: [names]}, "numa": {}}."""
    ports: dict[str, dict[str, Any]] = {}
    netdevs: dict[str, list[str]] = {}
    numa: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("netdev:"):
            parts = line[len("netdev:") :].split("/")
            if len(parts) >= 4:
                netdevs.setdefault(parts[0], []).append(parts[-1])
            continue
        path, sep, value = line.partition(":")
        if not sep:
            continue
        parts = path.split("/")
        if len(parts) == 3 and parts[1:] == ["device", "numa_node"]:
            with contextlib.suppress(ValueError):
                numa[parts[0]] = int(value)
            continue
        if len(parts) < 4 or parts[1] != "ports":
            continue
        key = f"{parts[0]}/{parts[2]}"
        port = ports.setdefault(
            key, {"device": parts[0], "port": int(parts[2]), "counters": {}, "gid_types": {}}
        )
        rest = parts[3:]
        if len(rest) == 1:
            port[rest[0]] = value.strip()
        elif rest[0] in ("counters", "hw_counters") and value.strip().isdigit():
            port["counters"][rest[1]] = int(value)
        elif rest[:2] == ["gid_attrs", "types"] and len(rest) == 3:
            port["gid_types"][int(rest[2])] = value.strip()
    return {"ports": ports, "netdevs": netdevs, "numa": numa}


def _netdev_for(port: Mapping[str, Any], netdevs: Mapping[str, list[str]]) -> str | None:
    names = netdevs.get(port["device"]) or []
    return names[0] if len(names) == 1 else (names[port["port"] - 1] if len(names) >= port["port"] else None)


def parse_nccl_conf(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def _ecn_points(text: str) -> dict[tuple[str, str, int], bool]:
    """``/sys/class/net/IF/ecn/roce_np/enable/3:1`` lines -> {(IF, "roce_np", 3): True}."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^/sys/class/net/([^/]+)/ecn/(roce_np|roce_rp)/enable/(\d):\s*(\d)", line.strip())
        if m:
            out[(m.group(1), m.group(2), int(m.group(3)))] = m.group(4) == "1"
    return out


def _ipv4(ip_json: str) -> dict[str, list[str]]:
    try:
        data = json.loads(ip_json or "[]")
    except (ValueError, RecursionError):
        return {}
    return {
        d.get("ifname", ""): [a["local"] for a in d.get("addr_info", []) if a.get("family") == "inet"]
        for d in data
        if isinstance(d, dict)
    }


def _mtus(ip_json: str) -> dict[str, int]:
    try:
        data = json.loads(ip_json or "[]")
    except (ValueError, RecursionError):
        return {}
    return {d.get("ifname", ""): int(d.get("mtu") or 0) for d in data if isinstance(d, dict)}


def _pfc_samples(text: str) -> tuple[dict[str, int], dict[str, int]] | None:
    first, sep, second = text.partition("\n===\n")
    try:
        a = parse_ethtool_stats(first)
        b = parse_ethtool_stats(second) if sep else a
    except SourceError:
        return None
    return a, b


# --- analysis ----------------------------------------------------------------------------------


def _finding(
    host: str,
    kind: str,
    symptom: str,
    cause: str,
    evidence: list[str],
    remedy: str,
    device: str | None = None,
) -> Finding:
    return Finding(host, kind, symptom, cause, evidence, remedy, device, LIKELIHOOD[kind])


def analyse_host(host: str, raw: Raw, ctx: Context) -> list[Finding]:
    """Findings of one host from its evidence."""
    out: list[Finding] = []
    sysfs = parse_sysfs(_ok(raw, "sysfs") or "")
    ports = sysfs["ports"]
    for key, p in sorted(ports.items()):
        dev = key
        layer = p.get("link_layer", "InfiniBand")
        try:
            _, state = parse_state(p.get("state", ""))
            _, phys = parse_state(p.get("phys_state", ""))
            rate, lanes, speed = parse_rate(p.get("rate", ""))
        except SourceError:
            continue
        netdev = _netdev_for(p, sysfs["netdevs"])
        if state != "ACTIVE" or phys != "LinkUp":
            out.append(
                _finding(
                    host,
                    "port_down",
                    f"{SYMPTOM_HANG}; {SYMPTOM_SLOW}",
                    f"{dev} ({netdev or layer}) is down: cable pulled or dead, transceiver failed, or the "
                    "switch "
                    "port disabled; NCCL rings over this HCA hang or NCCL drops the HCA",
                    [
                        f"sysfs {dev}: state {p.get('state')}, phys_state {p.get('phys_state')}, rate "
                        f"{p.get('rate')}"
                    ],
                    f"Check the cable and transceiver of {dev} and its switch port (`ibstat "
                    f"{p['device']}`); reseat "
                    "or replace; exclude the HCA from NCCL_IB_HCA until it is fixed.",
                    dev,
                )
            )
            continue
        want = ctx.expected_rate_gbps.get(layer)
        if want and rate / 1e9 < want:
            cause = (
                f"{dev} trained at {lanes}X instead of 4X: lanes lost to a damaged cable or dirty connector"
                if lanes < 4
                else f"{dev} negotiated {speed} ({rate / 1e9:g} Gb/s): "
                "a cable or switch port of a lower generation"
            )
            out.append(
                _finding(
                    host,
                    "port_degraded",
                    SYMPTOM_SLOW,
                    cause,
                    [f"sysfs {dev}: rate {p.get('rate')}; profile expects {want:g} Gb/s"],
                    "Replace or clean the cable/connector, check the switch port speed, then re-run "
                    "fabricops verify.",
                    dev,
                )
            )
        downed = p["counters"].get("link_downed", 0)
        if downed >= ctx.flaps_fail_at:
            out.append(
                _finding(
                    host,
                    "link_flapping",
                    f"{SYMPTOM_HANG}; {SYMPTOM_SLOW}",
                    f"{dev} link is flapping: marginal cable or transceiver (the link drops and retrains)",
                    [
                        f"sysfs {dev}: link_downed {downed} (fail at >= {ctx.flaps_fail_at}, "
                        f"{ctx.flaps_source})",
                        f"symbol_error {p['counters'].get('symbol_error', 0)}",
                    ],
                    "Drain the node, replace the cable or transceiver, then reset the counters "
                    "(perfquery -R).",
                    dev,
                )
            )
        elif p["counters"].get("symbol_error", 0) > 0:
            out.append(
                _finding(
                    host,
                    "symbol_errors",
                    SYMPTOM_SLOW,
                    f"{dev}: bit errors on the link: marginal cable or transceiver",
                    [
                        f"sysfs {dev}: symbol_error {p['counters']['symbol_error']} (threshold 0, "
                        "ibqueryerrors)"
                    ],
                    "Reseat or replace the cable/transceiver; watch FabricSymbolErrorsRising.",
                    dev,
                )
            )

    out += _roce_findings(host, raw, ctx, sysfs)
    out += _nvlink_findings(host, raw)
    out += _gid_findings(host, raw, sysfs)
    out += _pcie_findings(host, raw)
    out += _firmware_findings(host, raw, ctx)
    return out


#: what a host sees when the finding's fault is there (the symptom), per finding kind
_FW_SYMPTOM = {
    "nic_fw_reset_pending": "NIC firmware settings or image not active (behaviour changes at the "
    "next reset/reboot)",
    "nic_fw_noncompliant": "NIC firmware differs from the inventory (ATS/PCI/RoCE settings or version)",
    "dkms_modules_missing": "RDMA driver missing for a kernel (ports absent now, or after the next boot)",
    "secure_boot_key_not_enrolled": "RDMA driver rejected by Secure Boot ('Key was rejected by service')",
}


def _firmware_findings(host: str, raw: Raw, ctx: Context) -> list[Finding]:
    """NIC firmware reset pending / non-compliant, DKMS modules missing (running or next-boot kernel),
    Secure Boot key not enrolled: verify's rules (fabricops.verify.firmware) on the same probe."""
    if ctx.firmware is None:
        return []
    out = []
    for item in fw_checks.problems(host, ctx.firmware, raw.get(fw_checks.PROBE_KEY)):
        kind = item.kind or "nic_fw_noncompliant"
        rank = kind
        if kind == "dkms_modules_missing" and "running" not in str(item.details.get("boot", "")):
            rank = "dkms_modules_missing_next"
        f = Finding(host, kind, _FW_SYMPTOM[kind], item.cause or item.message, [item.message],
                    _sentence(item.remedy) + f", then re-run fabricops verify ({item.check}).",
                    item.device, LIKELIHOOD[rank])
        out.append(f)
    return out


def _sentence(text: str | None) -> str:
    text = text or "fix it as the evidence says"
    return text[:1].upper() + text[1:]


def _pcie_devices(raw: Raw) -> tuple[dict[str, str], dict[str, str]]:
    """({GPU0: bdf}, {mlx5_0: bdf}) from nvidia-smi and /sys/class/infiniband/*/device/uevent."""
    from fabricops.monitor.collector import parse_gpu_addresses
    from fabricops.verify.pcie import netdev_bdf, parse_hca_pci

    try:
        gpus = parse_gpu_addresses(_ok(raw, "gpu_pci") or "")
    except SourceError:
        gpus = {}
    hcas = parse_hca_pci(_ok(raw, "hca_pci") or "")
    # no uevent: the path-based netdev name carries the address (systemd.net-naming-scheme)
    for dev, names in parse_sysfs(_ok(raw, "sysfs") or "")["netdevs"].items():
        found = {netdev_bdf(n) for n in names} - {None}
        if dev not in hcas and len(found) == 1:
            hcas[dev] = found.pop()
    return gpus, hcas


def _pcie_findings(host: str, raw: Raw) -> list[Finding]:
    """Downtrained PCIe links, ACS redirect between a GPU and its NIC, translated IOMMU groups, and no
    GPUDirect mechanism (docs/troubleshooting.md, "The GPU path")."""
    from fabricops.parsers import lspci as lspci_parser
    from fabricops.services import lsmod_modules
    from fabricops.verify import pcie

    out: list[Finding] = []
    gpus, hcas = _pcie_devices(raw)
    names = {**hcas, **gpus}
    links = pcie.parse_link_sysfs(_ok(raw, "pcie_sysfs") or "")
    for dev, addr in sorted(names.items()):
        ln = links.get(addr) or {}
        cw, mw, cs, ms = (ln.get(k) for k in ("current_width", "max_width", "current_speed", "max_speed"))
        if not (mw and ms and cw is not None):
            continue
        if cs is not None and cw >= mw and (cs >= ms or dev in gpus):
            continue  # a GPU's speed alone is no finding: NVIDIA GPUs lower it while idle (verify pcie_link)
        what = f"x{cw} {cs or 0:g} GT/s of x{mw} {ms:g} GT/s"
        why = (
            "lanes lost to a badly seated card or riser, a damaged slot or a lane fault"
            if cw < mw
            else "a riser/retimer of a lower generation, a BIOS slot speed setting or signal integrity"
        )
        out.append(_finding(
            host, "pcie_downtrained", SYMPTOM_SLOW,
            f"{dev} ({addr}) PCIe link trained at {what}: {why}; every byte NCCL moves through it "
            "is capped by the narrower link",
            [f"sysfs {addr}: current_link_width {cw}, current_link_speed "
             f"{ln['raw'].get('current_link_speed')}, max_link_width {mw}, max_link_speed "
             f"{ln['raw'].get('max_link_speed')}"],
            f"Reseat {dev} (and its riser), check the BIOS PCIe slot speed, compare `lspci -s {addr} -vvv` "
            "LnkSta with LnkCap.",
            dev,
        ))
    text = _ok(raw, "lspci")
    if text and gpus and hcas:
        # the controller's lspci parser and verify's redirect rule (pcie.acs_redirect_bits): diagnose
        # and verify pcie_acs judge ACS alike
        try:
            devices = lspci_parser.parse(text)["devices"]
        except ParseError:
            devices = []
        by_bdf = {d["bdf"]: d for d in devices}
        parent = lspci_parser.parents(devices) if devices else {}

        def upstream(addr: str) -> list[str]:
            chain = []
            while parent.get(addr):
                addr = parent[addr]
                chain.append(addr)
            return chain

        bad: dict[str, list[str]] = {}
        for g, ga in sorted(gpus.items()):
            for h, ha in sorted(hcas.items()):
                if ga not in by_bdf or ha not in by_bdf:
                    continue
                up_h = upstream(ha)
                if not any(b in up_h for b in upstream(ga)):
                    continue  # they meet only at the host bridge (PHB/NODE/SYS): no P2P path
                for bridge in lspci_parser.path_between(devices, ga, ha):
                    if pcie.acs_redirect_bits(by_bdf[bridge].get("acs_ctl")):
                        bad.setdefault(bridge, []).append(f"{g}-{h}")
        for bridge, pairs in sorted(bad.items()):
            out.append(_finding(
                host, "acs_redirect", f"{SYMPTOM_HANG}; {SYMPTOM_SLOW}",
                f"ACS on PCIe bridge {bridge} between {', '.join(pairs)} redirects peer-to-peer traffic to "
                "the root complex: GPUDirect RDMA is slow or hangs (NCCL troubleshooting, PCI Access Control "
                "Services; NVIDIA/nccl#1737)",
                [f"lspci -vvv {bridge}: ACSCtl ReqRedir+ or CmpltRedir+"],
                f"Disable ACS on the PCIe switch ports (BIOS 'ACS' option, or `setpci -s {bridge} "
                "ECAP_ACS+0x6.w=0000` at boot), then re-run fabricops verify (pcie_acs).",
                bridge,
            ))
    types, members = pcie.parse_iommu(_ok(raw, "iommu") or "")
    translated = sorted(
        (d for d, a in names.items() if types.get(members.get(a, "")) in ("DMA", "DMA-FQ")), key=str
    )
    if translated:
        kinds = sorted({types[members[names[d]]] for d in translated})
        cmdline = (_ok(raw, "cmdline") or "").strip()
        out.append(_finding(
            host, "iommu_translated", f"{SYMPTOM_SLOW}; {SYMPTOM_HANG}",
            f"the IOMMU translates DMA ({'/'.join(kinds)}) for {', '.join(translated)}: GPUDirect RDMA "
            "is slow or fails (NCCL troubleshooting; Mellanox/nic-configuration-operator#102)",
            ["/sys/kernel/iommu_groups: "
             + ", ".join(f"{d} group {members[names[d]]}" for d in translated[:4])
             + f" type {'/'.join(kinds)}", f"/proc/cmdline: {cmdline[:200] or 'unreadable'}"],
            "Boot with iommu=pt (intel_iommu=on iommu=pt or amd_iommu=on iommu=pt) so the groups are "
            "identity, or disable the IOMMU; then re-run fabricops verify (iommu).",
            None,
        ))
    lsmod = _ok(raw, "lsmod")
    rel = (_ok(raw, "uname") or "").strip()
    lic = (_ok(raw, "modinfo_nvidia") or "").strip()
    kver = pcie.kernel_version(rel)
    if gpus and hcas and lsmod is not None and lsmod.lstrip().startswith("Module") and kver and (
        lic or raw.get("modinfo_nvidia")
    ):
        peermem = "nvidia_peermem" in lsmod_modules(lsmod)
        dmabuf = kver >= pcie.DMABUF_KERNEL and lic == pcie.OPEN_LICENSE
        if not peermem and not dmabuf:
            out.append(_finding(
                host, "no_gpudirect", SYMPTOM_SLOW,
                "no GPUDirect RDMA mechanism: nvidia_peermem is not loaded and DMA-BUF is unavailable "
                f"(kernel {rel}, nvidia module license {lic or 'unknown'}): NCCL stages every transfer "
                "through host memory ('GPU Direct RDMA Disabled' in NCCL_DEBUG=INFO)",
                [f"lsmod: no nvidia_peermem; uname -r {rel}; modinfo -F license nvidia: {lic or 'failed'}"],
                "Load nvidia_peermem (the gpudirect role; an openibd restart unloads it) or use Linux "
                ">= 5.12 with the open NVIDIA kernel module (DMA-BUF).",
                None,
            ))
    return out


def _roce_findings(host: str, raw: Raw, ctx: Context, sysfs: Mapping[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    ecn = _ecn_points(_ok(raw, "ecn") or "")
    prio = ctx.lossless_priority
    for key, p in sorted(sysfs["ports"].items()):
        if p.get("link_layer") != "Ethernet":
            continue
        netdev = _netdev_for(p, sysfs["netdevs"])
        if not netdev:
            continue
        samples = _pfc_samples(_ok(raw, f"ethtool:{netdev}") or "")
        if samples:
            a, b = samples
            storm = []
            for pr in range(8):
                for pattern, (_metric, scale) in PFC_STATS.items():
                    if "duration" not in pattern:
                        continue
                    name = pattern.format(p=pr)
                    if name in a and name in b:
                        share = (b[name] - a[name]) * scale / ETHTOOL_GAP_S
                        if share > ctx.storm_share:
                            storm.append(
                                f"ethtool -S {netdev}: {name} +{b[name] - a[name]} us in "
                                f"{ETHTOOL_GAP_S:g} s ({share:.0%} of the time paused)"
                            )
            for name in ("tx_pause_storm_error_events", "tx_pause_storm_warning_events"):
                if b.get(name, 0) > 0:
                    storm.append(f"ethtool -S {netdev}: {name} {b[name]}")
            if storm:
                out.append(
                    _finding(
                        host,
                        "pfc_storm",
                        SYMPTOM_STORM,
                        f"PFC pause storm on {netdev} ({key}): a stuck receiver or a congestion loop "
                        "keeps the "
                        "lossless priority paused; traffic on it stalls",
                        storm,
                        "Find the device sending the pauses (tx_prioN_pause), drain it; keep "
                        "pfc_stall_prevention "
                        "and the switch PFC watchdog enabled.",
                        key,
                    )
                )
        qos_text = _ok(raw, f"mlnx_qos:{netdev}")
        host_pfc: list[int] | None = None
        if qos_text:
            try:
                from fabricops.parsers.mlnx_qos import parse as parse_qos

                host_pfc = [i for i, v in enumerate(parse_qos(qos_text).pfc_enabled) if v]
            except ParseError:
                host_pfc = None
        sw = _switch_port(ctx, host, netdev)
        if prio is not None and host_pfc is not None:
            sw_pfc = sw.get("pfc_priorities") if sw else None
            problems = []
            want_pfc = [prio] if ctx.lossless else []
            if host_pfc != want_pfc:
                wanted = f"priority {prio}" if ctx.lossless else "no PFC (lossy RoCE)"
                problems.append(
                    f"mlnx_qos -i {netdev}: PFC on {host_pfc or 'no priority'}, RoCE definition "
                    f"wants {wanted}"
                )
            if sw_pfc is not None and sorted(sw_pfc) != sorted(host_pfc):
                problems.append(f"switch {sw['switch']} {sw['port']}: PFC on {sw_pfc}, host on {host_pfc}")
            if problems:
                out.append(
                    _finding(
                        host,
                        "pfc_mismatch",
                        SYMPTOM_SLOW,
                        (
                            f"PFC differs between {netdev} and the fabric: RoCE traffic is lossy, drops "
                            "trigger go-back-N retransmissions ('Transport retry count exceeded' under load)"
                            if ctx.lossless
                            else f"PFC is on at {netdev} in a lossy RoCE fabric: its pauses stall the "
                            "priority while the switches drop instead of pausing"
                        ),
                        problems,
                        "Run the roce_host role (and roce_switch for the switch side).",
                        key,
                    )
                )
        marked = p["counters"].get("np_ecn_marked_roce_packets", 0)
        cnp = p["counters"].get("np_cnp_sent", 0)
        np_on = ecn.get((netdev, "roce_np", prio)) if prio is not None else None
        sw_ecn = sw.get("ecn") if sw else None
        evid = []
        if marked > 0 and cnp == 0:
            evid.append(f"hw_counters {key}: np_ecn_marked_roce_packets {marked}, np_cnp_sent 0")
        if np_on is False and (sw_ecn or marked > 0):
            evid.append(
                f"/sys/class/net/{netdev}/ecn/roce_np/enable/{prio} = 0"
                + (f"; switch {sw['switch']} {sw['port']} marks ECN" if sw_ecn else "")
            )
        if sw is not None and sw_ecn is False and np_on:
            evid.append(
                f"switch {sw['switch']} {sw['port']}: no ECN on the lossless traffic class; host DCQCN on"
            )
        if evid:
            out.append(
                _finding(
                    host,
                    "ecn_one_side",
                    SYMPTOM_SLOW,
                    f"ECN configured on one side only for {netdev}: marked packets are not answered by CNPs, "
                    "DCQCN never slows the senders and PFC does all the work",
                    evid,
                    "Make host DCQCN (roce_host role) and switch ECN (roce_switch role) agree.",
                    key,
                )
            )
    return out


def _switch_port(ctx: Context, host: str, netdev: str) -> dict[str, Any] | None:
    for link in ctx.cabling:
        if link.get("host") == host and link.get("netdev") == netdev:
            state = ctx.switches.get(str(link.get("switch")))
            if not state:
                return None
            port = state.get("ports", {}).get(str(link.get("switch_port")), {})
            return {
                "switch": link["switch"],
                "port": link["switch_port"],
                "pfc_priorities": port.get("pfc_priorities", state.get("pfc_priorities")),
                "ecn": port.get("ecn", state.get("ecn")),
            }
    return None


def _nvlink_findings(host: str, raw: Raw) -> list[Finding]:
    text = _ok(raw, "nvlink")
    if not text:
        return []
    from fabricops.parsers.nvidia_smi import parse_nvlink

    try:
        status = parse_nvlink(text)
    except ParseError:
        return []
    out = []
    for gpu in status.gpus:
        inactive = gpu.inactive_links
        if inactive or (gpu.message and not gpu.links):
            what = f"links {', '.join(map(str, inactive))}" if inactive else "all links"
            out.append(
                _finding(
                    host,
                    "nvlink_inactive",
                    SYMPTOM_NVLINK,
                    f"GPU {gpu.index} NVLink {what} inactive: a failed NVLink/NVSwitch lane or a GPU that "
                    "trained "
                    "without it; NCCL falls back from NVLink (intra-node bandwidth drops)",
                    [
                        f"nvidia-smi nvlink --status: GPU {gpu.index} {what} <inactive> "
                        f"({gpu.active_links} active)"
                    ],
                    "Check nvidia-fabricmanager and Xid errors (dmesg); reset the GPU or RMA it; drain "
                    "the node.",
                    f"GPU{gpu.index}",
                )
            )
    return out


def _gid_findings(host: str, raw: Raw, sysfs: Mapping[str, Any]) -> list[Finding]:
    conf = parse_nccl_conf(_ok(raw, "nccl") or "")
    idx = conf.get("NCCL_IB_GID_INDEX")
    if idx is None or not idx.strip().lstrip("-").isdigit():
        return []
    n = int(idx)
    out = []
    for key, p in sorted(sysfs["ports"].items()):
        if p.get("link_layer") != "Ethernet":
            continue
        gtype = p["gid_types"].get(n)
        ipv4_v2 = [i for i, t in sorted(p["gid_types"].items()) if t == "RoCE v2" and i >= 2]
        if gtype != "RoCE v2" or (ipv4_v2 and n not in ipv4_v2):
            out.append(
                _finding(
                    host,
                    "gid_index",
                    SYMPTOM_HANG,
                    f"NCCL_IB_GID_INDEX={n} does not select the RoCE v2 IPv4 GID of {key}: NCCL connects "
                    "with the "
                    "wrong GID (RoCE v1 or link-local), the connection times out",
                    [
                        f"/etc/nccl.conf NCCL_IB_GID_INDEX={n}; {key} GID {n} type {gtype or 'absent'}; "
                        f"RoCE v2 IPv4 GIDs at {ipv4_v2 or 'none'}"
                    ],
                    "Set NCCL_IB_GID_INDEX to the RoCE v2 IPv4 index (show_gids; often 3) with the "
                    "nccl_profile role.",
                    key,
                )
            )
    return out


def analyse_fabric(evidence: Mapping[str, Raw], ctx: Context) -> list[Finding]:
    """Cross-host findings: MTU mismatch on one link layer, IPoIB reachability."""
    out: list[Finding] = []
    from fabricops.parsers.ibv_devinfo import parse as parse_devinfo

    # per rail (the same HCA port on every host, as verify's rail_consistency): the hosts whose
    # active MTU differs from the rest of the rail (NVIDIA/nccl#1524: NCCL hangs at connection setup)
    rails: dict[tuple[str, str], dict[str, int]] = {}
    for host, raw in evidence.items():
        text = _ok(raw, "ibv_devinfo")
        if not text:
            continue
        try:
            info = parse_devinfo(text)
        except ParseError:
            continue
        for dev in info.devices:
            for port in dev.ports:
                if port.state and "ACTIVE" in port.state and port.active_mtu:
                    key = (port.link_layer or "InfiniBand", f"{dev.hca_id}/{port.port}")
                    rails.setdefault(key, {})[host] = port.active_mtu
    for (layer, rail), by_host in sorted(rails.items()):
        values = list(by_host.values())
        if len(set(values)) <= 1:
            continue
        common = max(sorted(set(values), reverse=True), key=values.count)
        for host, mtu in sorted(by_host.items()):
            if mtu == common:
                continue
            out.append(
                _finding(
                    host,
                    "mtu_mismatch",
                    SYMPTOM_HANG,
                    f"{layer} rail {rail}: active MTU {mtu} on {host} where the other hosts of the rail have "
                    f"{common}: queue pairs between them fail or stall, so NCCL hangs at connection setup "
                    "(NVIDIA/nccl#1524)",
                    [f"{rail} active_mtu {mtu}", f"most hosts on {rail}: active_mtu {common}"],
                    f"Set the same MTU on every host and switch port of rail {rail} (RoCE: netdev MTU 4200 "
                    "or more for a 4096 path MTU; InfiniBand: the switch / subnet manager MTU), then re-run "
                    "fabricops verify (rail_consistency).",
                    rail,
                )
            )
    for item in ctx_pings(evidence):
        out.append(item)
    return out


def ctx_pings(evidence: Mapping[str, Raw]) -> list[Finding]:
    out = []
    for host, raw in evidence.items():
        for key, item in raw.items():
            if not key.startswith("ping:") or item.get("rc", 0) == 0:
                continue
            _, peer, addr = key.split(":", 2)
            out.append(
                _finding(
                    host,
                    "connectivity",
                    SYMPTOM_HANG,
                    f"{host} cannot reach {peer} over IPoIB ({addr}): a port down, a partition (P_Key) or "
                    "subnet "
                    "manager problem, or a wrong address; NCCL's bootstrap or IB connections hang",
                    [
                        f"ping {addr} from {host}: rc {item.get('rc')} "
                        f"{str(item.get('stdout', ''))[-120:].strip()}"
                    ],
                    "Check both ports (ibstat), the SM (sminfo), the P_Key and the ipoib role's addresses.",
                    None,
                )
            )
    return out


def analyse(evidence: Mapping[str, Raw], ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    for host in sorted(evidence):
        findings += analyse_host(host, evidence[host], ctx)
    findings += analyse_fabric(evidence, ctx)
    order = {h: i for i, h in enumerate(sorted(evidence))}
    findings.sort(key=lambda f: (-f.likelihood, order.get(f.host, 0), f.device or ""))
    return findings


# --- collecting --------------------------------------------------------------------------------


def host_commands(first: Raw) -> dict[str, str]:
    """Second-round commands from the first round's evidence: mlnx_qos and ethtool per RoCE netdev."""
    sysfs = parse_sysfs(_ok(first, "sysfs") or "")
    cmds = {}
    for p in sysfs["ports"].values():
        if p.get("link_layer") != "Ethernet":
            continue
        netdev = _netdev_for(p, sysfs["netdevs"])
        if netdev:
            q = shlex.quote(netdev)
            cmds[f"mlnx_qos:{netdev}"] = f"mlnx_qos -i {q}"
            cmds[f"ethtool:{netdev}"] = f"ethtool -S {q}; echo ===; sleep {ETHTOOL_GAP_S:g}; ethtool -S {q}"
    return cmds


def _ipoib_addrs(raw: Raw) -> dict[str, list[str]]:
    sysfs = parse_sysfs(_ok(raw, "sysfs") or "")
    ib_netdevs = {
        _netdev_for(p, sysfs["netdevs"])
        for p in sysfs["ports"].values()
        if p.get("link_layer", "InfiniBand") == "InfiniBand"
    }
    return {n: a for n, a in _ipv4(_ok(raw, "ip") or "").items() if n in ib_netdevs and a}


def collect(run: Run, hosts: Sequence[str], progress: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Evidence per host: {host: {key: {"rc", "stdout", "stderr"}}}."""

    def one(host: str) -> dict[str, Any]:
        raw: dict[str, Any] = {k: dict(run(host, c, 60)) for k, c in BASE_COMMANDS.items()}
        for k, c in host_commands(raw).items():
            raw[k] = dict(run(host, c, 60))
        return raw

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
        evidence = dict(zip(hosts, pool.map(one, hosts), strict=True))
    if progress:
        progress(f"evidence from {len(evidence)} hosts")
    addrs = {h: _ipoib_addrs(r) for h, r in evidence.items()}
    for host in hosts:
        for peer in hosts:
            if peer == host:
                continue
            for netdev, peer_addrs in addrs[peer].items():
                if netdev not in addrs[host]:
                    continue
                for a in peer_addrs[:1]:
                    cmd = f"ping -c 2 -W 1 -I {shlex.quote(netdev)} {shlex.quote(a)}"
                    evidence[host][f"ping:{peer}:{a}"] = dict(run(host, cmd, 15))
    return evidence


def _file_lookup(value: Any) -> Any:
    """Resolve ``{{ lookup('ansible.builtin.file', 'PATH') }}`` (the inventory is read untemplated)."""
    if isinstance(value, str) and "{{" in value:
        m = re.search(r"lookup\(\s*'(?:ansible\.builtin\.)?file'\s*,\s*'([^']+)'\s*\)", value)
        if m and Path(m.group(1)).is_file():
            return Path(m.group(1)).read_text().strip()
    return value


def switch_states(
    fabric: Any, cabling: Sequence[Mapping[str, Any]], hosts: Sequence[str], lossless: int | None
) -> tuple[dict[str, dict], list[str]]:
    """Normalised PFC/ECN state of the Ethernet switches cabled to ``hosts``; notes for those unread.

    A switch is reached as the roce_switch role reaches it: ``fabricops.switch.access.switch_connection``
    over its inventory variables (Vault, inline vault, $FABRICOPS_SWITCH_PASSWORD, keys, agent,
    ``roce_switch_known_hosts``, ``ansible_network_os``), the same errors as verify's."""
    from fabricops.roce.platforms import switch_platform
    from fabricops.switch import resource, transport
    from fabricops.switch.access import switch_connection, switch_os

    states: dict[str, dict] = {}
    notes: list[str] = []
    wanted: dict[str, list[str]] = {}
    for link in cabling:
        if link.get("host") in hosts:
            wanted.setdefault(str(link.get("switch")), []).append(str(link.get("switch_port")))
    for name, ports in sorted(wanted.items()):
        try:
            hv = fabric.hostvars(name)
        except Exception:
            continue
        if hv.get("fabricops_switch_reachable") is False:
            continue
        os_name = switch_os(hv)
        if os_name is None:
            continue  # not an Ethernet switch fabricops reads (an InfiniBand switch, a host)
        plat = switch_platform(os_name)
        try:
            read_ports = plat.read_ports(plat.normalize_ports(ports))
            conn = transport.connect(switch_connection(hv, switch=name, os_name=os_name, inventory=True))
            try:
                data = transport.get_roce_data(conn, os_name, read_ports)
            finally:
                conn.disconnect()
            _facts, oper = resource.gather(os_name, data, read_ports)
            states[name] = plat.oper_state(oper, ports, lossless)
        except Exception as exc:  # a switch we cannot read is a note, not a crash
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            notes.append(f"switch {name}: state not read ({first})")
    return states, notes


def _normalise_switch(
    os_name: str, oper: Mapping[str, Any], ports: Sequence[str], lossless: int | None
) -> dict[str, Any]:
    """The operational view as diagnose compares it (the platform's ``oper_state``)."""
    from fabricops.roce.platforms import switch_platform

    return switch_platform(os_name).oper_state(oper, ports, lossless)


def context_from_hostvars(hostvars: Mapping[str, Any], profile: str | None = None) -> Context:
    from fabricops.model.profiles import ProfileError, load_profile, threshold_for

    ctx = Context()
    name = profile or hostvars.get("fabricops_hardware_profile")
    if name:
        try:
            prof = load_profile(str(name))
        except ProfileError as exc:
            raise DiagnoseError(str(exc)) from None
        ctx.expected_rate_gbps = {prof.hca.link_layer: float(prof.hca.rate_gbps)}
        try:
            t = threshold_for(prof, "link_flaps_24h")
            ctx.flaps_fail_at, ctx.flaps_source = int(t.value), t.source
        except Exception:
            pass
    # the lossless priority the roce_host role applied: roce_host_roce over fabricops_roce,
    # validated with its defaults ({dscp: 26} -> 3); a definition that does not validate is an error
    from fabricops.roce.desired import DesiredStateError, desired_state

    try:
        roce = desired_state(hostvars).roce
        ctx.lossless_priority = roce.lossless_priority if roce is not None else None
        ctx.lossless = roce.lossless if roce is not None else True
    except DesiredStateError as exc:
        raise ContextError(f"malformed context ({exc.detail})") from None
    ctx.firmware = fw_checks.expect_from_hostvars(hostvars)
    cabling = hostvars.get("fabricops_cabling") or []
    ctx.cabling = [dict(c) for c in cabling if isinstance(c, Mapping)]
    return ctx


# --- output ------------------------------------------------------------------------------------


#: Evidence without which no port/link verdict can be given: a host without any of these readable
#: (rc 0 and some output) was not examined, whatever else it answered.
CORE_EVIDENCE = ("sysfs", "ibstat", "ibv_devinfo")


def no_evidence(evidence: Mapping[str, Raw]) -> dict[str, str]:
    """host -> why it gave no usable evidence (unreachable, or every core command failed)."""
    out = {}
    for host, raw in evidence.items():
        items = [v for v in raw.values() if isinstance(v, Mapping)]
        if any((raw.get(k) or {}).get("rc") == 0 and str((raw.get(k) or {}).get("stdout") or "").strip()
               for k in CORE_EVIDENCE):
            continue
        if items and all(v.get("rc") == 255 and not str(v.get("stdout") or "").strip() for v in items):
            out[host] = "unreachable over SSH, no evidence"
        elif not items:
            out[host] = "no evidence in the file"
        else:
            out[host] = f"no readable {'/'.join(CORE_EVIDENCE)} (every one failed or was empty)"
    return dict(sorted(out.items()))


def exit_status(findings: Sequence[Finding], hosts: Sequence[str], missing: Mapping[str, str]) -> int:
    """1 a fault found; 4 no host, or a host without evidence and no fault elsewhere; 0 healthy."""
    if findings:
        return EXIT_FAILED
    if not hosts or missing:
        return EXIT_NORUN
    return EXIT_OK


def to_json(
    findings: Sequence[Finding], hosts: Sequence[str], notes: Sequence[str] = (),
    missing: Mapping[str, str] | None = None,
) -> str:
    missing = dict(missing or {})
    status = exit_status(findings, hosts, missing)
    return (
        json.dumps(
            {
                "hosts": list(hosts),
                "healthy": status == EXIT_OK,
                "exit_status": status,
                "not_checked": missing,
                "notes": list(notes),
                "findings": [asdict(f) for f in findings],
            },
            indent=2,
        )
        + "\n"
    )


def to_junit(
    findings: Sequence[Finding], hosts: Sequence[str], missing: Mapping[str, str] | None = None
) -> str:
    """One test case per host: a failure per finding, an error for a host without evidence."""
    import xml.etree.ElementTree as ET

    missing = dict(missing or {})
    suite = ET.Element("testsuite", name="fabricops diagnose")
    by_host: dict[str, list[Finding]] = {}
    for f in findings:
        by_host.setdefault(f.host, []).append(f)
    failures = errors = 0
    for host in sorted(set(hosts) | set(by_host)) or ["-"]:
        case = ET.SubElement(suite, "testcase", classname="fabricops.diagnose", name=host)
        if host in missing or host == "-":
            errors += 1
            ET.SubElement(case, "error", message="not checked").text = missing.get(host, "no hosts")
        for f in by_host.get(host, []):
            failures += 1
            el = ET.SubElement(case, "failure", message=f.cause, type=f.kind)
            el.text = "\n".join([f"symptom: {f.symptom}", *(f"evidence: {e}" for e in f.evidence),
                                 f"remedy: {f.remedy}"])
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return ET.tostring(suite, encoding="unicode") + "\n"


def terminal(
    findings: Sequence[Finding], hosts: Sequence[str], notes: Sequence[str] = (),
    missing: Mapping[str, str] | None = None,
) -> str:
    missing = dict(missing or {})
    lines = []
    examined = [h for h in hosts if h not in missing]
    if not findings and examined and not missing:
        lines.append(f"no finding on {', '.join(hosts)}: the evidence matches a healthy fabric")
    elif not findings and examined:
        lines.append(f"no finding on {', '.join(examined)}; the other hosts gave no evidence, so no verdict")
    elif not findings:
        lines.append("no evidence from any host: no verdict")
    for n, f in enumerate(findings, 1):
        lines.append(f"{n}. [{f.host}{' ' + f.device if f.device else ''}] {f.cause}")
        lines.append(f"   symptom:  {f.symptom}")
        for e in f.evidence:
            lines.append(f"   evidence: {e}")
        lines.append(f"   remedy:   {f.remedy}")
    for host, why in missing.items():
        lines.append(f"NOT CHECKED: {host}: {why}")
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines) + "\n"


# --- CLI -----------------------------------------------------------------------------------------


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "diagnose",
        help="collect fabric evidence from hosts and name the likely cause",
        description="Collect ibv_devinfo, ibstat, port counters, mlnx_qos, ethtool PFC counters, DCQCN, "
        "NVLink status, NCCL profile, IPoIB reachability and switch PFC/ECN state, and map them to the "
        "troubleshooting table (docs/troubleshooting.md). Exit 0: every host gave evidence, no finding; "
        "1: findings; 4: no evidence (no verdict); 5: malformed evidence; 2: usage error (docs/cli.md).",
    )
    p.add_argument(
        "hosts", nargs="*", metavar="HOST",
        help="deprecated: hosts to diagnose; use -l/--limit (default: every gpu_hosts host)",
    )
    cliopts.add_common(p, limit_default=None,
                       limit_help="host pattern or group to diagnose (default: gpu_hosts)")
    p.add_argument("--profile", help="hardware profile (default: the inventory's fabricops_hardware_profile)")
    p.add_argument("--no-switches", action="store_true", help="do not read the switches' PFC/ECN state")
    p.add_argument(
        "--from-evidence",
        type=Path,
        metavar="DIR",
        help="analyse evidence collected by playbooks/diagnose.yml (DIR/HOST.json, DIR/context.json)",
    )
    p.set_defaults(func=cmd_diagnose)


def from_ansible(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Evidence from playbooks/diagnose.yml (registered results) or already ``{key: {rc, stdout}}``."""
    if "ansible" not in doc:
        return dict(doc)
    raw: dict[str, Any] = {}
    for item in doc["ansible"]["base"]:
        raw[item["diagnose_cmd"]["key"]] = {k: item.get(k, "") for k in ("rc", "stdout", "stderr")}
    for item in doc["ansible"].get("roce") or []:
        netdev, out = item["diagnose_netdev"], str(item.get("stdout") or "")
        qos, _, eth = out.partition("#####\n")
        m = re.match(r"qos_rc=(\d+)\n", qos)
        raw[f"mlnx_qos:{netdev}"] = {
            "rc": int(m.group(1)) if m else 1,
            "stdout": qos[m.end() :] if m else qos,
        }
        raw[f"ethtool:{netdev}"] = {"rc": 0 if eth.strip() else 1, "stdout": eth}
    return raw


def _check_raw(path: Path, raw: Any) -> dict[str, Any]:
    """Evidence is {key: {"rc": int|None, "stdout": str, ...}}; anything else is malformed."""
    if not isinstance(raw, Mapping):
        raise DiagnoseError(f"{path}: not evidence JSON (expected an object of command results)")
    for key, item in raw.items():
        if not isinstance(item, Mapping):
            raise DiagnoseError(f"{path}: not evidence JSON ({key!r} is not a command result object)")
        rc, out = item.get("rc"), item.get("stdout", "")
        if (rc is not None and not isinstance(rc, int)) or not isinstance(out, str | type(None)):
            raise DiagnoseError(f"{path}: not evidence JSON ({key!r}: rc must be a number, stdout text)")
    return dict(raw)


def _read_json(path: Path) -> Any:
    try:
        # a regular file only, size-capped: a FIFO would hang the run, /dev/zero never ends
        return json.loads(cliopts.read_input(path, str(path)).decode("utf-8"))
    except RecursionError:
        raise DiagnoseError(f"{path}: not evidence JSON (nested too deeply)") from None
    except OSError as exc:
        raise CouldNotRun(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise DiagnoseError(f"{path}: not JSON ({str(exc).splitlines()[0]})") from None


def context_from_file(path: Path, profile: str | None = None) -> Context:
    """context.json (written by playbooks/diagnose.yml): one sentence when it is malformed."""
    hostvars = _read_json(path) if path.is_file() else {}
    if not isinstance(hostvars, Mapping):
        raise DiagnoseError(f"{path}: not a context object (expected the hosts' variables as a mapping)")
    try:
        ctx = context_from_hostvars(hostvars, profile)
        states = hostvars.get("switch_states") or {}
        if not isinstance(states, Mapping) or not all(isinstance(v, Mapping) for v in states.values()):
            raise TypeError("switch_states must map switch names to their state")
        for name, state in states.items():
            ctx.switches[str(name)] = dict(state)
    except DiagnoseError as exc:
        raise DiagnoseError(f"{path}: {exc}") from None
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise DiagnoseError(f"{path}: malformed context ({exc})") from None
    return ctx


def _load_evidence_dir(
    directory: Path, profile: str | None = None
) -> tuple[dict[str, Raw], Context, list[str]]:
    if not directory.is_dir():
        raise CouldNotRun(f"{directory}: no such directory (give --from-evidence the directory "
                          "playbooks/diagnose.yml wrote)")
    evidence = {}
    for f in sorted(directory.glob("*.json")):
        if f.name == "context.json":
            continue
        doc = _read_json(f)
        try:
            evidence[f.stem] = _check_raw(f, from_ansible(doc) if isinstance(doc, Mapping) else doc)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DiagnoseError(f"{f}: not evidence JSON ({type(exc).__name__}: {exc})") from None
    ctx = context_from_file(directory / "context.json", profile)
    if not evidence:
        raise CouldNotRun(f"{directory}: no HOST.json evidence files: nothing to diagnose")
    return evidence, ctx, []


def _hosts_pattern(args) -> str:
    if args.hosts and args.limit:
        raise UsageError("give the hosts either with -l/--limit or as arguments (deprecated), not both")
    if args.hosts:
        print("fabricops diagnose: HOST arguments are deprecated; use -l/--limit "
              f"{':'.join(args.hosts)}", file=sys.stderr)
        return ":".join(args.hosts)
    return args.limit or "gpu_hosts"


def cmd_diagnose(args) -> int:
    from fabricops.verify.cli import check_profile

    cliopts.check_outputs(args)
    check_profile(args.profile)
    pattern = _hosts_pattern(args)
    extra = cliopts.extra_vars(args.extra_vars)
    out = cliopts.Progress(cliopts.progress_wanted(args))

    if args.from_evidence:
        evidence, ctx, notes = _load_evidence_dir(args.from_evidence, args.profile)
        hosts = sorted(evidence)
    else:
        from fabricops.verify.transport import Fabric

        cliopts.read_inventory(args.inventory)
        try:
            fabric = Fabric(args.inventory, pattern)
        except FabricopsError as exc:
            raise CouldNotRun(str(exc)) from None
        hosts = list(fabric.hosts)
        hostvars = {**fabric.hostvars(hosts[0]), **extra}
        try:
            ctx = context_from_hostvars(hostvars, args.profile)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            raise BadInput(f"malformed fabricops_roce or fabricops_cabling ({exc})") from None
        notes = []
        started = time.monotonic()
        out.line(f"collecting evidence from {len(hosts)} hosts: {', '.join(hosts)}")
        evidence = collect(fabric.run, hosts, out.line)
        if not args.no_switches and ctx.cabling:
            ctx.switches, notes = switch_states(fabric, ctx.cabling, hosts, ctx.lossless_priority)
        out.line(f"collected in {time.monotonic() - started:.1f} s")
        out.done()
    missing = no_evidence(evidence)
    findings = analyse(evidence, ctx)
    status = exit_status(findings, hosts, missing)
    text = terminal(findings, hosts, notes, missing)
    if status == EXIT_NORUN and not args.quiet:
        print(f"fabricops diagnose: no verdict: no evidence from {', '.join(missing) or 'any host'}",
              file=sys.stderr)
    cliopts.emit_report(args, text, lambda: to_json(findings, hosts, notes, missing),
                        lambda: to_junit(findings, hosts, missing))
    return status
