"""PCIe, ACS, IOMMU and GPUDirect-mechanism checks (issue 19; docs/verify.md "PCIe and GPUDirect").

Commands (run as root by verify's become; docs/verify.md lists them):

- ``lspci -D -vvv``: the tree (bridges' bus ranges), LnkCap/LnkSta and ACSCap/ACSCtl, read with
  ``fabricops.parsers.lspci`` (without root real lspci prints ``Capabilities: <access denied>``:
  ACS cannot be judged, the check is an ERROR naming become/root);
- ``grep -H`` of ``/sys/bus/pci/devices/*/{current,max}_link_{speed,width}`` (kernel ABI
  Documentation/ABI/testing/sysfs-bus-pci; speed ``32.0 GT/s PCIe``, older kernels ``32 GT/s``,
  ``Unknown`` without a link);
- ``grep -H`` of ``/sys/class/infiniband/*/device/uevent`` (``PCI_SLOT_NAME=0000:18:00.0``: the
  PCI function of each RDMA device);
- ``grep -H`` of ``/sys/kernel/iommu_groups/*/type`` and ``/sys/kernel/iommu_groups/*/devices/*/vendor``
  (group type and members; Documentation/ABI/testing/sysfs-kernel-iommu_groups), and
  ``/proc/cmdline`` as context only;
- ``lsmod`` (nvidia_peermem), ``uname -r`` and ``modinfo -F license nvidia`` (DMA-BUF needs Linux
  >= 5.12 and the open NVIDIA kernel module, whose license is ``Dual MIT/GPL``).

Pure functions; :func:`evaluate` adds :class:`~fabricops.verify.result.CheckResult` s to the host
checks' context. Missing or unreadable evidence is an ERROR, never a pass.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any

from fabricops.errors import ParseError
from fabricops.verify.result import ERROR, FAIL, PASS, SKIP

PCIE_CHECKS = ("pcie_link", "pcie_acs", "iommu", "gpudirect_mechanism")

LINK_SYSFS_CMD = (
    "grep -H '' /sys/bus/pci/devices/*/current_link_speed /sys/bus/pci/devices/*/current_link_width "
    "/sys/bus/pci/devices/*/max_link_speed /sys/bus/pci/devices/*/max_link_width "
    "/sys/class/infiniband/*/device/current_link_speed /sys/class/infiniband/*/device/current_link_width "
    "/sys/class/infiniband/*/device/max_link_speed /sys/class/infiniband/*/device/max_link_width "
    "2>/dev/null; true"
)
HCA_PCI_CMD = "grep -H '' /sys/class/infiniband/*/device/uevent 2>/dev/null; true"
IOMMU_CMD = (
    "grep -H '' /sys/kernel/iommu_groups/*/type /sys/kernel/iommu_groups/*/devices/*/vendor "
    "/sys/kernel/iommu_groups/*/devices/*/numa_node 2>/dev/null; true"
)
LSPCI_CMD = "lspci -D -vvv"

NCCL_ACS_DOC = (
    "NCCL docs, Troubleshooting: PCI Access Control Services (ACS) "
    "(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html); NVIDIA/nccl#1737"
)
NCCL_IOMMU_DOC = (
    "NCCL docs, Troubleshooting: IOMMU / GPU Direct RDMA (iommu=pt); Mellanox/nic-configuration-operator#102"
)
#: DMA-BUF for GPUDirect RDMA: Linux >= 5.12 and the open GPU kernel module (NVIDIA GPUDirect RDMA
#: docs, "Using DMA-BUF"; NVIDIA/nccl#1474).
DMABUF_KERNEL = (5, 12)
OPEN_LICENSE = "Dual MIT/GPL"

CAUSES = {
    "pcie_width": "{dev} ({bdf}) trained at PCIe x{got} instead of x{want}: a badly seated card or riser, "
    "a damaged slot or a lane fault; reseat or move it (bandwidth through it drops to the narrower link)",
    "pcie_speed": "{dev} ({bdf}) runs PCIe {got} GT/s instead of {want} GT/s: a riser/retimer of a lower "
    "generation, a BIOS slot setting or signal integrity; check the BIOS PCIe speed and reseat",
    "pcie_down": "{dev} ({bdf}) has no PCIe link (current_link_speed Unknown): the device fell off the bus",
    "acs": "ACS on bridge {bridge} between {pair} redirects peer-to-peer traffic (ACSCtl {bits}) through the "
    "root complex: GPUDirect RDMA runs slow or hangs; disable ACS on the PCIe switch ports (BIOS "
    "'ACS' / setpci) as the NCCL troubleshooting guide says",
    "iommu": "the IOMMU translates DMA (group type {types}) for {devs}: GPUDirect RDMA is slow or fails; "
    "boot with iommu=pt (intel_iommu=on iommu=pt / amd_iommu=on iommu=pt) so the devices' groups are "
    "identity (passthrough)",
    "iommu_other": "IOMMU group type {types} for {devs} is not passthrough (identity): check the kernel "
    "command line and whether a device is bound to vfio",
    "no_mechanism": "no GPUDirect RDMA mechanism: nvidia_peermem is not loaded and DMA-BUF is unavailable "
    "({why}); load nvidia_peermem (the gpudirect role) or use Linux >= 5.12 with the open NVIDIA kernel "
    "module; NCCL otherwise stages through host memory",
    "root": "run verify with become (root): without root lspci prints 'Capabilities: <access denied>' and "
    "ACS cannot be read",
}

_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_LINK_LINE = re.compile(
    r"^/sys/(?:bus/pci/devices/([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])|"
    r"class/infiniband/([^/]+)/device)/(current|max)_link_(speed|width):(.*)$"
)
_UEVENT_LINE = re.compile(r"^/sys/class/infiniband/([^/]+)/device/uevent:PCI_SLOT_NAME=(\S+)\s*$")
_IOMMU_TYPE = re.compile(r"^/sys/kernel/iommu_groups/(\d+)/type:(.*)$")
_IOMMU_DEV = re.compile(r"^/sys/kernel/iommu_groups/(\d+)/devices/([^/]+)/(?:vendor|numa_node):")
_SPEED = re.compile(r"^\s*([\d.]+)\s*GT/s")


# --- evidence parsing (pure) -------------------------------------------------------------------


def bdf(value: str) -> str:
    """``00000000:18:00.0`` (nvidia-smi) or ``0000:18:00.0`` -> ``0000:18:00.0`` (lower case): the
    collector's normalisation, so the controller and the hosts name a device alike."""
    from fabricops.monitor.collector import pci_address

    return pci_address(value)


def parse_speed(text: str) -> float | None:
    """``32.0 GT/s PCIe`` / ``32 GT/s`` / ``2.5 GT/s`` -> 32.0; ``Unknown`` (no link) -> None."""
    m = _SPEED.match(text or "")
    return float(m[1]) if m else None


def parse_link_sysfs(text: str) -> dict[str, dict[str, Any]]:
    """grep -H of the link files -> {bdf: {current_speed, current_width, max_speed, max_width, raw}};
    an RDMA device's own ``/sys/class/infiniband/DEV/device/*_link_*`` (the same PCI device seen
    from the RDMA side) is keyed by its name (``mlx5_0``)."""
    out: dict[str, dict[str, Any]] = {}
    for line in (text or "").replace("\r", "").splitlines():
        m = _LINK_LINE.match(line.strip())
        if not m:
            continue
        entry = out.setdefault(bdf(m[1]) if m[1] else m[2], {"raw": {}})
        value = m[5].strip()
        entry["raw"][f"{m[3]}_link_{m[4]}"] = value
        if m[4] == "speed":
            entry[f"{m[3]}_speed"] = parse_speed(value)
        else:
            entry[f"{m[3]}_width"] = int(value) if value.isdigit() else None
    return out


def parse_hca_pci(text: str) -> dict[str, str]:
    """grep -H of /sys/class/infiniband/*/device/uevent -> {mlx5_0: 0000:18:00.0}."""
    out = {}
    for line in (text or "").replace("\r", "").splitlines():
        m = _UEVENT_LINE.match(line.strip())
        if m and _BDF.match(m[2]):
            out[m[1]] = bdf(m[2])
    return out


def parse_iommu(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """grep -H of iommu_groups/*/type and */devices/*/vendor -> ({group: type}, {bdf: group})."""
    types: dict[str, str] = {}
    members: dict[str, str] = {}
    for line in (text or "").replace("\r", "").splitlines():
        line = line.strip()
        m = _IOMMU_TYPE.match(line)
        if m:
            types[m[1]] = m[2].strip()
            continue
        m = _IOMMU_DEV.match(line)
        if m and _BDF.match(m[2]):
            members[bdf(m[2])] = m[1]
    return types, members


#: systemd's path-based interface names (systemd.net-naming-scheme(7)): ``en``/``ib`` + optional
#: ``P<domain>`` + ``p<bus>s<slot>`` + optional ``f<function>`` (``ibp26s0``, ``enp170s0f1np1``).
_NETDEV_PATH = re.compile(r"^(?:en|ib)(?:P(\d+))?p(\d+)s(\d+)(?:f(\d+))?(?:n\S*|d\d+)?$")


def netdev_bdf(name: str | None) -> str | None:
    """The PCI function a path-based netdev name encodes (``ibp26s0`` -> ``0000:1a:00.0``), else None."""
    m = _NETDEV_PATH.match(name or "")
    if not m:
        return None
    dom, bus, slot, fn = int(m[1] or 0), int(m[2]), int(m[3]), int(m[4] or 0)
    if dom > 0xFFFF or bus > 0xFF or slot > 0x1F or fn > 7:
        return None
    return f"{dom:04x}:{bus:02x}:{slot:02x}.{fn}"


def kernel_version(release: str) -> tuple[int, int] | None:
    """``5.15.0-91-generic`` -> (5, 15)."""
    m = re.match(r"^\s*(\d+)\.(\d+)", release or "")
    return (int(m[1]), int(m[2])) if m else None


def acs_redirect_bits(ctl: Mapping[str, bool] | None) -> list[str]:
    """The ACSCtl bits that send peer-to-peer requests/completions up to the root complex
    (ReqRedir, CmpltRedir; SrcValid and DirectTrans do not redirect). SPEC-19 B, NCCL docs."""
    if not ctl:
        return []
    return [b for b in ("ReqRedir", "CmpltRedir") if ctl.get(b)]


def gpu_bdfs(rows: Any) -> dict[str, str]:
    """nvidia-smi --query-gpu rows -> {GPU0: 0000:18:00.0}."""
    out = {}
    for r in rows or []:
        bus = r.get("pci.bus_id")
        if r.get("index") is not None and isinstance(bus, str) and _BDF.match(bus):
            out[f"GPU{r['index']}"] = bdf(bus)
    return out


def nic_pairs(topo: Any, levels: tuple[str, ...]) -> list[tuple[str, str]]:
    """(GPU, HCA) pairs NCCL puts together: the topo matrix cells at ``levels`` (PIX/PXB)."""
    pairs = []
    for g in topo.gpus:
        for col in topo.nics:
            if topo.matrix.get(g, {}).get(col) in levels:
                pairs.append((g, topo.nic_name(col)))
    return pairs


def lspci_module() -> Any:
    """``fabricops.parsers.lspci`` (SPEC-19 B): parse, parents, path_between."""
    return importlib.import_module("fabricops.parsers.lspci")


# --- evaluation ---------------------------------------------------------------------------------


def _raw_ok(ctx: Any, key: str) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why it cannot be used)."""
    res = ctx.raw.get(key)
    if res is None:
        return None, f"{key} was not run (no data: failing closed)"
    if res.get("rc") not in (0, None):
        lines = (res.get("stderr") or res.get("stdout") or "").strip().splitlines()
        return None, f"`{key}` failed: {lines[-1] if lines else 'exit ' + str(res.get('rc'))}"
    return res.get("stdout") or "", None


def _lspci(ctx: Any, check: str) -> Any:
    text, why = _raw_ok(ctx, "lspci")
    if why:
        ctx.add("gpus", check, None, ERROR, f"{ctx.host}: {why}")
        return None
    try:
        mod = lspci_module()
        return mod.parse(text)["devices"]
    except ImportError:
        ctx.add(
            "gpus", check, None, ERROR, f"{ctx.host}: the lspci parser (fabricops.parsers.lspci) is missing"
        )
    except ParseError as exc:
        ctx.add("gpus", check, None, ERROR, f"{ctx.host}: {exc}")
    return None


def _devices(ctx: Any, gpus: Any, check: str, hca_optional: bool = False) -> dict[str, Any]:
    """{GPU0|mlx5_0: bdf} of the GPUs (nvidia-smi) and the planned HCAs (sysfs uevent).
    A planned HCA or a GPU without a PCI address is an ERROR result (``hca_optional``: the HCA maps
    to None and the caller decides)."""
    out = dict(gpu_bdfs(gpus))
    if ctx.expect.profile.gpu.count and gpus is None:
        ctx.add(
            "gpus",
            check,
            None,
            ERROR,
            f"{ctx.host}: no GPU PCI addresses (nvidia-smi --query-gpu unreadable): failing closed",
        )
    text, why = _raw_ok(ctx, "hca_pci")
    hcas = sorted({p.hca for p in ctx.expect.ports})
    pci = parse_hca_pci(text or "")
    for hca in hcas:
        named = {netdev_bdf(p.netdev) for p in ctx.expect.ports if p.hca == hca} - {None}
        if hca in pci:
            out[hca] = pci[hca]
        elif len(named) == 1:
            # no uevent: the path-based netdev name carries the address (systemd.net-naming-scheme)
            out[hca] = named.pop()
        elif hca_optional:
            out[hca] = None
        else:
            ctx.add(
                "gpus",
                check,
                hca,
                ERROR,
                f"{ctx.host} {hca}: no PCI address in /sys/class/infiniband/{hca}/device/uevent"
                + (f" ({why})" if why else "")
                + ": failing closed",
            )
    return out


def _lspci_link(devices: Any) -> dict[str, dict[str, Any]]:
    return {d["bdf"]: d for d in devices or []}


def _fmt_speed(v: float | None) -> str:
    return "Unknown" if v is None else f"{v:g}"


def pcie_link(ctx: Any, gpus: Any, devices: Any) -> None:
    """Every GPU and planned HCA: current width/speed == max (sysfs; lspci LnkSta/LnkCap confirms)."""
    names = _devices(ctx, gpus, "pcie_link", hca_optional=True)
    text, why = _raw_ok(ctx, "pcie_sysfs")
    if why:
        ctx.add("gpus", "pcie_link", None, ERROR, f"{ctx.host}: {why}")
        return
    sysfs = parse_link_sysfs(text or "")
    lsp = _lspci_link(devices)
    for dev, addr in sorted(names.items(), key=lambda kv: (not kv[0].startswith("GPU"), _natural(kv[0]))):
        s = sysfs.get(addr) if addr else None
        if s is None:
            s = sysfs.get(dev)  # an HCA's own class/infiniband/DEV/device/*_link_*
        lp = lsp.get(addr) or {}
        addr = addr or "PCI address unknown: no uevent PCI_SLOT_NAME"
        cap, sta = lp.get("lnkcap"), lp.get("lnksta")
        lspci_txt = (
            f"; lspci LnkSta {_fmt_speed(sta['speed_gts'])} GT/s x{sta['width']} of LnkCap "
            f"{_fmt_speed(cap['speed_gts'])} GT/s x{cap['width']}"
            if cap and sta
            else ""
        )
        if s is None or s.get("max_width") is None or s.get("max_speed") is None or "current_width" not in s:
            ctx.add(
                "gpus",
                "pcie_link",
                dev,
                ERROR,
                f"{ctx.host} {dev} ({addr}): no sysfs current_link_*/max_link_* for the device"
                f"{lspci_txt}: failing closed",
                details={"bdf": addr, "sysfs": (s or {}).get("raw")},
            )
            continue
        cw, mw, cs, ms = s.get("current_width"), s["max_width"], s.get("current_speed"), s["max_speed"]
        problems, cause = [], None
        gpu, idle_note = dev.startswith("GPU"), ""
        if cs is None or not cw:
            problems.append(f"no link (current_link_speed {s['raw'].get('current_link_speed')})")
            cause = CAUSES["pcie_down"].format(dev=dev, bdf=addr)
        else:
            if cw < mw:
                problems.append(f"width x{cw} of x{mw}")
                cause = CAUSES["pcie_width"].format(dev=dev, bdf=addr, got=cw, want=mw)
            if cs < ms and gpu:
                # NVIDIA GPUs lower their link speed while idle and raise it under load (nvidia-smi
                # --help-query-gpu, pcie.link.gen.current: "may be reduced when the GPU is not in use"):
                # an idle GPU's speed is no evidence of a bad link. Its width does not change with load.
                idle_note = f"; speed {cs:g} of {ms:g} GT/s not judged (GPUs lower it while idle)"
            elif cs < ms:
                problems.append(f"speed {cs:g} of {ms:g} GT/s")
                cause = cause or CAUSES["pcie_speed"].format(dev=dev, bdf=addr, got=f"{cs:g}", want=f"{ms:g}")
        if (
            not problems
            and cap
            and sta
            and (
                (sta.get("width") or 0) < (cap.get("width") or 0)
                or (not gpu and (sta.get("speed_gts") or 0) < (cap.get("speed_gts") or 0))
            )
        ):
            problems.append("lspci LnkSta below LnkCap")
            cause = CAUSES["pcie_width"].format(
                dev=dev, bdf=addr, got=sta.get("width"), want=cap.get("width")
            )
        msg = f"{ctx.host} {dev} ({addr}): PCIe " + (
            "; ".join(problems) + lspci_txt
            if problems
            else (f"x{cw} (its maximum){idle_note}" if idle_note else f"{cs:g} GT/s x{cw} (its maximum)")
            + lspci_txt
        )
        ctx.add(
            "gpus",
            "pcie_link",
            dev,
            FAIL if problems else PASS,
            msg,
            measured={"speed_gts": cs, "width": cw},
            threshold={"speed_gts": ms, "width": mw},
            op="==",
            cause=cause,
            source="sysfs current_link_* vs max_link_* (Documentation/ABI/testing/sysfs-bus-pci)",
            details={"bdf": addr, "lspci": {"lnkcap": cap, "lnksta": sta}},
        )


def pcie_acs(ctx: Any, gpus: Any, devices: Any, topo: Any) -> None:
    """ACSCtl on every bridge between a GPU and the HCA it is paired with (PIX/PXB in topo -m)."""
    if not ctx.expect.profile.gpu.count:
        ctx.add("gpus", "pcie_acs", None, SKIP, f"{ctx.host}: no GPUs (no GPU-NIC path)")
        return
    if topo is None:
        ctx.add(
            "gpus",
            "pcie_acs",
            None,
            ERROR,
            f"{ctx.host}: nvidia-smi topo -m unreadable: no GPU-NIC pairs (failing closed)",
        )
        return
    names = _devices(ctx, gpus, "pcie_acs")
    if devices is None:
        return
    denied = [d["bdf"] for d in devices if d.get("access_denied")]
    if denied:
        ctx.add(
            "gpus",
            "pcie_acs",
            None,
            ERROR,
            f"{ctx.host}: lspci printed 'Capabilities: <access denied>' for {len(denied)} devices "
            f"({', '.join(denied[:3])}): ACS unreadable; run verify with become (root)",
            cause=CAUSES["root"],
        )
        return
    pairs = nic_pairs(topo, ctx.expect.nic_gpu_levels)
    if not pairs:
        ctx.add(
            "gpus",
            "pcie_acs",
            None,
            ERROR,
            f"{ctx.host}: no GPU shares a PCIe switch ({'/'.join(ctx.expect.nic_gpu_levels)}) with a NIC "
            "in nvidia-smi topo -m: no path to judge (see nic_gpu_affinity)",
        )
        return
    mod = lspci_module()
    by_bdf = {d["bdf"]: d for d in devices}
    bridges: dict[str, list[str]] = {}
    for gpu, hca in pairs:
        a, b = names.get(gpu), names.get(hca)
        if a is None or b is None or a not in by_bdf or b not in by_bdf:
            missing = [f"{n} ({x or 'no address'})" for n, x in ((gpu, a), (hca, b)) if x not in by_bdf]
            ctx.add(
                "gpus",
                "pcie_acs",
                None,
                ERROR,
                f"{ctx.host}: {gpu}-{hca}: {', '.join(missing)} not in lspci -D -vvv: failing closed",
            )
            continue
        try:
            path = mod.path_between(devices, a, b)
        except (KeyError, ValueError) as exc:
            ctx.add(
                "gpus",
                "pcie_acs",
                None,
                ERROR,
                f"{ctx.host}: {gpu}-{hca}: no PCIe path between {a} and {b} in lspci ({exc})",
            )
            continue
        for br in path:
            bridges.setdefault(br, []).append(f"{gpu} ({a}) and {hca} ({b})")
    for br, between in sorted(bridges.items()):
        dev = by_bdf.get(br) or {}
        bits = acs_redirect_bits(dev.get("acs_ctl"))
        pair = "; ".join(between)
        ctl = dev.get("acs_ctl")
        state = (
            "no ACS capability"
            if ctl is None
            else ("ACSCtl " + " ".join(f"{k}{'+' if v else '-'}" for k, v in ctl.items()))
        )
        ctx.add(
            "gpus",
            "pcie_acs",
            br,
            FAIL if bits else PASS,
            f"{ctx.host} bridge {br} between {pair}: "
            + (f"ACS redirects P2P ({'+ '.join(bits)}+)" if bits else f"no P2P redirect ({state})"),
            measured=bits,
            threshold=[],
            op="==",
            cause=CAUSES["acs"].format(bridge=br, pair=pair, bits="+ ".join(bits) + "+") if bits else None,
            source=NCCL_ACS_DOC,
            details={"between": between, "acs_ctl": ctl, "port_type": dev.get("port_type")},
        )


def iommu(ctx: Any, gpus: Any) -> None:
    """IOMMU groups of the GPUs and HCAs are identity (or there is no IOMMU)."""
    names = _devices(ctx, gpus, "iommu")
    text, why = _raw_ok(ctx, "iommu")
    if why:
        ctx.add("gpus", "iommu", None, ERROR, f"{ctx.host}: {why}")
        return
    cmdline = ((ctx.raw.get("cmdline") or {}).get("stdout") or "").strip()
    ctx_txt = f" (/proc/cmdline: {cmdline[:200]})" if cmdline else ""
    types, members = parse_iommu(text or "")
    if not types:
        ctx.add(
            "gpus",
            "iommu",
            None,
            PASS,
            f"{ctx.host}: no IOMMU groups (IOMMU off: DMA is not translated){ctx_txt}",
            measured=None,
            threshold="identity",
            op="==",
            details={"cmdline": cmdline},
        )
        return
    got, unknown = {}, []
    for dev, addr in names.items():
        grp = members.get(addr)
        if grp is None or grp not in types:
            unknown.append(f"{dev} ({addr})")
        else:
            got[dev] = types[grp]
    if unknown:
        ctx.add(
            "gpus",
            "iommu",
            None,
            ERROR,
            f"{ctx.host}: the IOMMU is on but {', '.join(unknown)} is in no IOMMU group: failing closed"
            f"{ctx_txt}",
        )
        return
    bad = {d: t for d, t in got.items() if t != "identity"}
    translated = {d: t for d, t in bad.items() if t in ("DMA", "DMA-FQ")}
    devs = ", ".join(sorted(bad, key=_natural))
    kinds = "/".join(sorted(set(bad.values())))
    cause = None
    if bad:
        cause = (CAUSES["iommu"] if translated else CAUSES["iommu_other"]).format(types=kinds, devs=devs)
    ctx.add(
        "gpus",
        "iommu",
        None,
        FAIL if bad else PASS,
        f"{ctx.host}: "
        + (
            f"IOMMU groups {kinds} (not identity) for {devs}"
            if bad
            else f"IOMMU groups of {len(got)} GPUs/HCAs are identity (passthrough)"
        )
        + ctx_txt,
        measured=dict(sorted(got.items())),
        threshold="identity",
        op="==",
        cause=cause,
        source=NCCL_IOMMU_DOC if bad else None,
        details={"cmdline": cmdline, "groups": {d: members.get(a) for d, a in names.items()}},
    )


def gpudirect_mechanism(ctx: Any, applicable: bool) -> None:
    """nvidia_peermem loaded, or DMA-BUF (kernel >= 5.12 and the open nvidia module)."""
    from fabricops.services import lsmod_modules

    if not ctx.expect.gpudirect:
        ctx.add(
            "gpus",
            "gpudirect_mechanism",
            None,
            SKIP,
            f"{ctx.host}: fabricops_site_gpudirect is false (not planned)",
        )
        return
    if not applicable:
        ctx.add(
            "gpus",
            "gpudirect_mechanism",
            None,
            SKIP,
            f"{ctx.host}: GPUDirect RDMA needs GPUs and RDMA HCAs on one host (not applicable)",
        )
        return
    mechs, why_not, errors = [], [], []
    text, why = _raw_ok(ctx, "lsmod")
    if why:
        errors.append(why)
    elif not text.lstrip().startswith("Module"):
        errors.append("lsmod output unreadable (no 'Module  Size  Used by' header)")
    elif "nvidia_peermem" in lsmod_modules(text):
        mechs.append("peermem")
    else:
        why_not.append("nvidia_peermem not in lsmod")
    rel, why_u = _raw_ok(ctx, "uname")
    rel = rel or ""
    kver = kernel_version(rel or "")
    lic_res = ctx.raw.get("modinfo_nvidia") or {}
    lic = (lic_res.get("stdout") or "").strip()
    lic_err = ((lic_res.get("stderr") or "") + (lic_res.get("stdout") or "")).strip()
    if why_u or kver is None:
        errors.append(why_u or f"`uname -r` printed {rel.strip()[:40]!r}, not a kernel release")
    elif kver < DMABUF_KERNEL:
        why_not.append(f"kernel {rel.strip()} < 5.12")
    if not lic_res:
        errors.append("modinfo_nvidia was not run")
    elif lic_res.get("rc") not in (0, None):
        if "not found" in lic_err:
            why_not.append("no nvidia kernel module (modinfo: not found)")
        else:
            last = lic_err.splitlines()[-1] if lic_err else f"exit {lic_res.get('rc')}"
            errors.append(f"`modinfo -F license nvidia` failed: {last}")
    elif lic != OPEN_LICENSE:
        why_not.append(
            f"nvidia module license {lic or 'empty'!r} (DMA-BUF needs the open module, {OPEN_LICENSE})"
        )
    if kver is not None and kver >= DMABUF_KERNEL and lic_res.get("rc") in (0, None) and lic == OPEN_LICENSE:
        mechs.append("dmabuf")
    if mechs:
        what = {
            "peermem": "nvidia_peermem loaded",
            "dmabuf": f"DMA-BUF (kernel {rel.strip()}, open nvidia module)",
        }
        ctx.add(
            "gpus",
            "gpudirect_mechanism",
            None,
            PASS,
            f"{ctx.host}: GPUDirect RDMA via {' and '.join(what[m] for m in mechs)}",
            measured=mechs,
            threshold=["peermem", "dmabuf"],
            op="any of",
            details={"kernel": (rel or "").strip(), "nvidia_license": lic},
        )
        return
    if errors:
        ctx.add(
            "gpus",
            "gpudirect_mechanism",
            None,
            ERROR,
            f"{ctx.host}: cannot tell the GPUDirect mechanism: {'; '.join(errors)} (failing closed)",
        )
        return
    reason = "; ".join(why_not)
    ctx.add(
        "gpus",
        "gpudirect_mechanism",
        None,
        FAIL,
        f"{ctx.host}: no GPUDirect RDMA mechanism ({reason})",
        measured=[],
        threshold=["peermem", "dmabuf"],
        op="any of",
        cause=CAUSES["no_mechanism"].format(why=reason),
        details={"kernel": (rel or "").strip(), "nvidia_license": lic},
    )


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]
