"""Diagnose's rules: evidence -> findings, each a :class:`fabricops.result.Result` (the one verdict type).

A finding is ``Result(category="diagnose", check=KIND, host, device, status=FAIL, message=SYMPTOM,
cause=..., evidence=[...], action=REMEDY, details={"likelihood": RANK})``: the kinds, symptoms,
causes and remedies are the troubleshooting table of docs/troubleshooting.md. :func:`analyse` is
pure: it orders the findings by likelihood (a hard fault before the misconfiguration it would mask).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricops.diagnose.collect import ETHTOOL_GAP_S, ContextError, DiagnoseError, Raw, netdev_for, output
from fabricops.errors import ParseError
from fabricops.evidence.errors import SourceError
from fabricops.evidence.hostfiles import (
    parse_ecn_points,
    parse_nccl_conf,
    parse_rate,
    parse_state,
    parse_sysfs,
)
from fabricops.evidence.tools import parse_gpu_addresses, parse_pfc_samples
from fabricops.monitor.collector import PFC_STATS
from fabricops.result import FAIL, Result
from fabricops.verify import firmware as fw_checks  # NIC firmware / DKMS: verify's rules

CATEGORY = "diagnose"

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


def _finding(
    host: str,
    kind: str,
    symptom: str,
    cause: str,
    evidence: list[str],
    remedy: str,
    device: str | None = None,
    rank: str | None = None,
) -> Result:
    """One finding: a failed result of category diagnose whose check is the finding's kind, message
    its symptom and action its remedy; ``rank`` names the LIKELIHOOD entry when it is not ``kind``'s."""
    return Result(
        CATEGORY,
        kind,
        host,
        device,
        FAIL,
        symptom,
        cause=cause,
        evidence=list(evidence),
        action=remedy,
        details={"likelihood": LIKELIHOOD[rank or kind]},
    )


def likelihood(finding: Result) -> int:
    """The rank a finding is ordered by (docs/troubleshooting.md); 0 for a result of no rank."""
    return int(finding.details.get("likelihood", 0))


def analyse_host(host: str, raw: Raw, ctx: Context) -> list[Result]:
    """Findings of one host from its evidence."""
    out: list[Result] = []
    sysfs = parse_sysfs(output(raw, "sysfs") or "")
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
        netdev = netdev_for(p, sysfs["netdevs"])
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
                    "Reseat or replace the cable/transceiver; watch FabricopsSymbolErrorsRising.",
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


def _firmware_findings(host: str, raw: Raw, ctx: Context) -> list[Result]:
    """NIC firmware reset pending / non-compliant, DKMS modules missing (running or next-boot kernel),
    Secure Boot key not enrolled: verify's rules (fabricops.verify.firmware) on the same probe."""
    if ctx.firmware is None:
        return []
    out = []
    for item in fw_checks.problems(host, ctx.firmware, raw.get(fw_checks.PROBE_KEY)):
        kind = item.details.get("kind") or "nic_fw_noncompliant"
        rank = kind
        if kind == "dkms_modules_missing" and "running" not in str(item.details.get("boot", "")):
            rank = "dkms_modules_missing_next"
        out.append(_finding(host, kind, _FW_SYMPTOM[kind], item.cause or item.message, [item.message],
                            _sentence(item.action) + f", then re-run fabricops verify ({item.check}).",
                            item.device, rank))
    return out


def _sentence(text: str | None) -> str:
    text = text or "fix it as the evidence says"
    return text[:1].upper() + text[1:]


def _pcie_devices(raw: Raw) -> tuple[dict[str, str], dict[str, str]]:
    """({GPU0: bdf}, {mlx5_0: bdf}) from nvidia-smi and /sys/class/infiniband/*/device/uevent."""
    from fabricops.verify.pcie import netdev_bdf, parse_hca_pci

    try:
        gpus = parse_gpu_addresses(output(raw, "gpu_pci") or "")
    except SourceError:
        gpus = {}
    hcas = parse_hca_pci(output(raw, "hca_pci") or "")
    # no uevent: the path-based netdev name carries the address (systemd.net-naming-scheme)
    for dev, names in parse_sysfs(output(raw, "sysfs") or "")["netdevs"].items():
        found = {netdev_bdf(n) for n in names} - {None}
        if dev not in hcas and len(found) == 1:
            hcas[dev] = found.pop()
    return gpus, hcas


def _pcie_findings(host: str, raw: Raw) -> list[Result]:
    """Downtrained PCIe links, ACS redirect between a GPU and its NIC, translated IOMMU groups, and no
    GPUDirect mechanism (docs/troubleshooting.md, "The GPU path")."""
    from fabricops.parsers import lspci as lspci_parser
    from fabricops.services import lsmod_modules
    from fabricops.verify import pcie

    out: list[Result] = []
    gpus, hcas = _pcie_devices(raw)
    names = {**hcas, **gpus}
    links = pcie.parse_link_sysfs(output(raw, "pcie_sysfs") or "")
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
    text = output(raw, "lspci")
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
    types, members = pcie.parse_iommu(output(raw, "iommu") or "")
    translated = sorted(
        (d for d, a in names.items() if types.get(members.get(a, "")) in ("DMA", "DMA-FQ")), key=str
    )
    if translated:
        kinds = sorted({types[members[names[d]]] for d in translated})
        cmdline = (output(raw, "cmdline") or "").strip()
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
    lsmod = output(raw, "lsmod")
    rel = (output(raw, "uname") or "").strip()
    lic = (output(raw, "modinfo_nvidia") or "").strip()
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


def _roce_findings(host: str, raw: Raw, ctx: Context, sysfs: Mapping[str, Any]) -> list[Result]:
    out: list[Result] = []
    ecn = parse_ecn_points(output(raw, "ecn") or "")
    prio = ctx.lossless_priority
    for key, p in sorted(sysfs["ports"].items()):
        if p.get("link_layer") != "Ethernet":
            continue
        netdev = netdev_for(p, sysfs["netdevs"])
        if not netdev:
            continue
        samples = parse_pfc_samples(output(raw, f"ethtool:{netdev}") or "")
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
        qos_text = output(raw, f"mlnx_qos:{netdev}")
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


def _nvlink_findings(host: str, raw: Raw) -> list[Result]:
    text = output(raw, "nvlink")
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


def _gid_findings(host: str, raw: Raw, sysfs: Mapping[str, Any]) -> list[Result]:
    conf = parse_nccl_conf(output(raw, "nccl") or "")
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


def analyse_fabric(evidence: Mapping[str, Raw], ctx: Context) -> list[Result]:
    """Cross-host findings: MTU mismatch on one link layer, IPoIB reachability."""
    out: list[Result] = []
    from fabricops.parsers.ibv_devinfo import parse as parse_devinfo

    # per rail (the same HCA port on every host, as verify's rail_consistency): the hosts whose
    # active MTU differs from the rest of the rail (NVIDIA/nccl#1524: NCCL hangs at connection setup)
    rails: dict[tuple[str, str], dict[str, int]] = {}
    for host, raw in evidence.items():
        text = output(raw, "ibv_devinfo")
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


def ctx_pings(evidence: Mapping[str, Raw]) -> list[Result]:
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


def analyse(evidence: Mapping[str, Raw], ctx: Context) -> list[Result]:
    """Every finding of the hosts' evidence, most likely first (then by host, then by device)."""
    findings: list[Result] = []
    for host in sorted(evidence):
        findings += analyse_host(host, evidence[host], ctx)
    findings += analyse_fabric(evidence, ctx)
    order = {h: i for i, h in enumerate(sorted(evidence))}
    findings.sort(key=lambda f: (-likelihood(f), order.get(f.host, 0), f.device or ""))
    return findings


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
