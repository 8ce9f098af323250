"""Host and GPU checks: the commands to run on a host, and their evaluation on the controller.

:func:`commands` says what to run for a :class:`~fabricops.verify.expect.HostExpect`;
:func:`evaluate` turns what came back (``{key: {"rc", "stdout", "stderr"}}``) into
:class:`~fabricops.verify.result.CheckResult` s. Tool output is read with ``fabricops.parsers``;
anything missing or unreadable is an ``error`` result (fails closed), never a pass.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

from fabricops.errors import FabricopsError, ParseError
from fabricops.evidence.hostfiles import parse_nccl_conf, parse_sysfs
from fabricops.evidence.probes import PROBES
from fabricops.model import rates
from fabricops.model.nvlink import NVLINK
from fabricops.model.profiles import threshold_for
from fabricops.parsers import parse
from fabricops.verify import counters as error_counters
from fabricops.verify import firmware, imex_domain, pcie
from fabricops.verify.expect import HostExpect, PortExpect
from fabricops.verify.pcie import PCIE_CHECKS
from fabricops.verify.result import ERROR, FAIL, PASS, SKIP, CheckResult

Raw = Mapping[str, Mapping[str, Any]]

HOST_CHECKS = (
    "ofed_version", "hca_port", "error_counters", "subnet_manager", "gpudirect",
    "ipoib", "roce_qos", "nccl_profile", *firmware.FW_CHECKS,
)
GPU_CHECKS = (
    "gpu_count", "gpu_model", "nvlink", "gpu_topology", "nic_gpu_affinity", "fabric_manager",
    "imex_channel", "imex_domain", *PCIE_CHECKS,
)
#: IMEX channel0 (NVIDIA IMEX guide, imexchannels.html): type, major, minor (hex) and mode, or "absent"
IMEX_CHANNEL = "/dev/nvidia-caps-imex-channels/channel0"
IMEX_CHANNEL_CMD = (
    f"if [ -e {IMEX_CHANNEL} ]; then stat -c '%F|%t|%T|%a' {IMEX_CHANNEL}; else echo absent; fi"
)
#: The kernel module of GPUDirect RDMA (the gpudirect role's gpudirect_module default).
PEERMEM = "nvidia_peermem"

CAUSES = {
    "down": "link down: cable pulled or dead, transceiver failed, or the switch port disabled",
    "polling": "no link partner: check the cable, the transceiver and the switch port",
    "init": "port is up but not activated: no subnet manager has configured it (check opensm / the SM)",
    "missing_hca": "HCA not visible: not seated, failed, or its driver is not loaded",
    "width": "link trained at {got} instead of {want}: lanes lost to a damaged cable or dirty connector",
    "speed": "link negotiated {got} instead of {want}: a cable or switch port of a lower generation",
    "symbol": "bit errors on the link: marginal cable or transceiver",
    "downed": "the link went down and retrained (flapping): marginal cable or transceiver",
    "nvlink": "NVLink inactive: a failed NVLink/NVSwitch lane or a GPU that trained without it; "
    "NCCL falls back from NVLink",
    "gpu_count": "a GPU fell off the bus (Xid 79) or is not seen by the BIOS/driver",
    "gpu_model": "the host has other GPUs than its hardware profile says",
    "ofed": "MLNX_OFED installed or updated out of band; run the mlnx_ofed role",
    "no_ofed": "MLNX_OFED is not installed; run the mlnx_ofed role",
    "affinity": "no GPU shares a PCIe switch with this HCA: wrong slot, "
    "or the profile expects another layout",
    "roce": "RoCE QoS differs from fabricops_roce: run the roce_host role (settings are lost on openibd "
    "restart or reboot unless persisted)",
    "nccl": "NCCL profile out of date with the HCAs that are up: run the nccl_profile role",
    "ipoib": "IPoIB interface differs from the plan: run the ipoib role",
    "no_sm": "no subnet manager answers on the subnet: the switch's SM is off, or OpenSM is not running "
    "on the hosts of subnet_manager_hosts (run the subnet_manager role); new links stay INIT",
    "sm_not_master": "the SM that answers is not master: the subnet is still electing or the master died",
    "sm_priority": "another SM than the planned master won the election (a switch or host SM with a higher "
    "priority, or a lower GUID at equal priority)",
    "fabric": "the NVSwitch fabric is not configured: nvidia-fabricmanager is not running or not at the "
    "driver's exact version (run the nvidia_fabric_manager role)",
    "peermem": "nvidia_peermem is not loaded: GPUDirect RDMA is off and NCCL stages through host memory "
    "(run the gpudirect role; an openibd restart unloads it unless the nvidia-peermem unit reloads it)",
}


# --- commands -------------------------------------------------------------------------------


def _ib_candidates(expect: HostExpect) -> list[PortExpect]:
    return [p for p in expect.ports if p.link_layer in (None, "InfiniBand")]


def _roce_ports(expect: HostExpect) -> list[PortExpect]:
    return [p for p in expect.ports if p.link_layer in (None, "Ethernet") and p.netdev]


def roce_port_states(expect: HostExpect) -> list[dict[str, Any]]:
    """Desired RoCE state per candidate port (``fabricops.hostqos.plan.port_state``)."""
    from fabricops.roce.desired import validated
    from fabricops.roce.platforms import platform

    cfg = validated(expect.roce, expect.roce_source, expect.host)
    host = platform("host")
    return [host.port_state(cfg, p.netdev, p.hca, p.port) for p in _roce_ports(expect)]


def _knobs(state: Mapping[str, Any]) -> list[Any]:
    from fabricops.hostqos.knobs import knobs_for

    return knobs_for(state["netdev"], state["device"], state["port"], state["sysfs"])


def ipoib_interfaces(expect: HostExpect) -> list[dict[str, Any]]:
    from fabricops.ipoib import host_interfaces

    plan = expect.ipoib or {}
    facts = {
        "hcas": [
            {"name": p.hca, "ports": [{"port": p.port, "link_layer": "InfiniBand", "netdev": p.netdev}]}
            for p in _ib_candidates(expect)
            if p.netdev
        ]
    }
    return host_interfaces(
        expect.host,
        plan=plan.get("plan"),
        host_index=plan.get("host_index"),
        addresses=plan.get("addresses"),
        interfaces=plan.get("interfaces"),
        facts=facts,
        defaults=plan.get("defaults"),
        check_devices=False,
    )


def commands(expect: HostExpect, only: str | None = None) -> dict[str, str]:
    """key -> shell command. ``only``: ``hosts`` or ``gpus`` (None: both)."""
    cmds: dict[str, str] = {}
    want = _wanted(expect, only)
    if want & {"ofed_version"}:
        cmds["ofed_info"] = "ofed_info -s"
        if expect.doca:
            # the profile meta-package's state and version (fabricops.doca.installed_package_version)
            fmt = "${db:Status-Abbrev}${Version}\\n"
            profile = shlex.quote(expect.doca["profile"])
            cmds["doca_profile"] = f"dpkg-query -W -f={shlex.quote(fmt)} {profile}"
    # ibstat is read by the port checks and (link layers) by affinity, NCCL and pair planning.
    cmds["ibstat"] = "ibstat"
    if "hca_port" in want:
        cmds["ib_rates"] = PROBES["ib_rates"].command()
    if "error_counters" in want:
        for p in _ib_candidates(expect):
            cmds[f"perfquery:{p.device}"] = f"perfquery -C {shlex.quote(p.hca)} -P {p.port}"
    if want & {"gpu_count", "gpu_model", *PCIE_CHECKS}:
        cmds["nvidia_query"] = "nvidia-smi --query-gpu=index,name,uuid,pci.bus_id --format=csv"
    if "nvlink" in want:
        cmds["nvlink"] = "nvidia-smi nvlink --status"
    if want & {"gpu_topology", "nic_gpu_affinity", "pcie_acs"}:
        cmds["topo"] = "nvidia-smi topo -m"
    cmds.update(pcie_commands(expect, want))
    if want & set(firmware.FW_CHECKS):
        probe = firmware.probe_command(expect.firmware)
        if probe:
            cmds[firmware.PROBE_KEY] = probe
    if "roce_qos" in want and expect.roce is not None:
        try:
            states = roce_port_states(expect)
        except FabricopsError:
            states = []  # reported by evaluate()
        for st in states:
            nd = st["netdev"]
            cmds[f"mlnx_qos:{nd}"] = f"mlnx_qos -i {shlex.quote(nd)}"
            knobs = _knobs(st)
            files = [k.path for k in knobs if k.path]
            if files:
                cmds[f"knobfiles:{nd}"] = "grep -H '' " + " ".join(shlex.quote(f) for f in files)
            for k in knobs:
                if k.read_argv:
                    cmds[f"knobcmd:{' '.join(k.read_argv)}"] = shlex.join(k.read_argv)
    if "subnet_manager" in want and expect.subnet_manager and _ib_candidates(expect):
        cmds["sminfo"] = "sminfo"
    if "gpudirect" in want and expect.gpudirect and _gpudirect_applicable(expect):
        cmds["lsmod"] = "lsmod"
    if "fabric_manager" in want and _nvswitch(expect):
        cmds["nvidia_q"] = "nvidia-smi -q"
    if expect.imex:
        # the domain's status as this tray sees it, judged across the domain (fabricops.verify.imex_domain)
        if "imex_domain" in want:
            cmds[imex_domain.KEY] = imex_domain.command(expect.imex.get("config_path", ""))
        if "imex_channel" in want:
            cmds["imex_channel"] = IMEX_CHANNEL_CMD
            cmds["proc_devices"] = "cat /proc/devices"
    if only in (None, "pairs"):
        cmds.update(pair_commands(expect))
    if "nccl_profile" in want and expect.nccl_profile:
        cmds["nccl_conf"] = PROBES["nccl_conf"].command(path=expect.nccl_conf_path)
        if expect.nccl_profile == "roce":
            cmds["nccl_libs"] = nccl_libs_command()
            cmds.update(pair_commands(expect))  # the GID tables NCCL_IB_GID_INDEX must match
    if "ipoib" in want and expect.ipoib:
        try:
            ifaces = ipoib_interfaces(expect)
        except FabricopsError:
            ifaces = []
        for i in ifaces:
            name = shlex.quote(i["name"])
            cmds[f"ipoib_addr:{i['name']}"] = f"ip -j addr show dev {name}"
            cmds[f"ipoib_mode:{i['name']}"] = f"cat /sys/class/net/{name}/mode"
    return cmds


def pcie_commands(expect: HostExpect, want: set[str]) -> dict[str, str]:
    """What the PCIe / IOMMU / GPUDirect-mechanism checks read (fabricops.verify.pcie)."""
    cmds: dict[str, str] = {}
    if want & {"pcie_link", "pcie_acs", "iommu"}:
        cmds["hca_pci"] = pcie.HCA_PCI_CMD
    if want & {"pcie_link", "pcie_acs"}:
        cmds["lspci"] = pcie.LSPCI_CMD
    if "pcie_link" in want:
        cmds["pcie_sysfs"] = pcie.LINK_SYSFS_CMD
    if "iommu" in want:
        cmds["iommu"] = pcie.IOMMU_CMD
        cmds["cmdline"] = "cat /proc/cmdline"
    if "gpudirect_mechanism" in want and expect.gpudirect and _gpudirect_applicable(expect):
        cmds["lsmod"] = "lsmod"
        cmds["uname"] = "uname -r"
        cmds["modinfo_nvidia"] = "modinfo -F license nvidia"
    return cmds


def _gpudirect_applicable(expect: HostExpect) -> bool:
    """GPUs and RDMA HCAs on one host (fabricops.services.gpudirect_applicable, from the plan)."""
    return expect.profile.gpu.count > 0 and bool(expect.ports)


def _nvswitch(expect: HostExpect) -> bool:
    return expect.profile.gpu.count > 0 and expect.profile.gpu.topology == "nvswitch"


def gid_command(p: PortExpect) -> str:
    """The port's GID table with each entry's type (errors of unset entries dropped)."""
    base = f"/sys/class/infiniband/{shlex.quote(p.hca)}/ports/{p.port}"
    return f"grep -H '' {base}/gids/* {base}/gid_attrs/types/* 2>/dev/null; true"


def nccl_libs_command() -> str:
    """The NCCL library files of the host (its version: the newest libnccl.so.2.X.Y, SPEC-19 E)."""
    from fabricops.nccl import LIB_DIRS

    return "ls -1d " + " ".join(f"{d}/libnccl.so.2.*" for d in LIB_DIRS) + " 2>/dev/null; true"


def pair_commands(expect: HostExpect) -> dict[str, str]:
    """What pair planning reads besides ibstat: the GID table of every RoCE candidate port."""
    return {f"gids:{p.device}": gid_command(p) for p in expect.ports if p.link_layer in (None, "Ethernet")}


_GID_LINE = re.compile(r"^/sys/class/infiniband/[^/]+/ports/\d+/(gids|gid_attrs/types)/(\d+):(.*)$")


def parse_gids(text: str) -> list[dict[str, Any]]:
    """``grep -H`` of ``gids/N`` and ``gid_attrs/types/N`` -> [{index, gid, type, ipv4}] with a
    non-zero GID, by index. ``ipv4`` is the address of an IPv4-mapped GID (RoCE v2 / v1 over IPv4)."""
    from fabricops.facts import gid_to_ipv4

    gids: dict[int, str] = {}
    types: dict[int, str] = {}
    for line in (text or "").replace("\r\n", "\n").splitlines():
        m = _GID_LINE.match(line.strip())
        if not m:
            continue
        (gids if m[1] == "gids" else types)[int(m[2])] = m[3].strip()
    out = []
    for idx in sorted(gids):
        gid = gids[idx].lower()
        if not gid or set(gid.replace(":", "")) <= {"0"}:
            continue
        out.append({"index": idx, "gid": gid, "type": types.get(idx), "ipv4": gid_to_ipv4(gid)})
    return out


def roce_v2_gid(entries: list[dict[str, Any]], ipv4: str | None = None) -> dict[str, Any] | None:
    """The RoCE v2 IPv4 entry (the one NCCL_IB_GID_INDEX names): for ``ipv4`` when given, else the
    first. None when there is none (no IPv4 address on the netdev, or RoCE v2 disabled)."""
    for e in entries:
        if e["type"] == "RoCE v2" and e["ipv4"] and (ipv4 is None or e["ipv4"] == ipv4):
            return e
    return None


def _wanted(expect: HostExpect, only: str | None) -> set[str]:
    names = set()
    if only in (None, "hosts"):
        names |= set(HOST_CHECKS)
    if only in (None, "gpus"):
        names |= set(GPU_CHECKS)
    if only == "nccl":  # the NVLink domain's IMEX status gates its MNNVL runs (engine._verify)
        names.add("imex_domain")
    return names - set(expect.skip)


# --- evaluation -----------------------------------------------------------------------------


class _Ctx:
    def __init__(self, expect: HostExpect, raw: Raw):
        self.expect = expect
        self.raw = raw
        self.out: list[CheckResult] = []

    @property
    def host(self) -> str:
        return self.expect.host

    def add(self, category: str, check: str, device: str | None, status: str, message: str, **kw: Any):
        self.out.append(CheckResult(category, check, self.host, device, status, message, **kw))

    def tool(self, key: str, tool: str, category: str, check: str, device: str | None = None) -> Any:
        """Parsed output of ``key``, or None after adding an error result."""
        res = self.raw.get(key)
        where = f"{self.host}" + (f" {device}" if device else "")
        if res is None:
            self.add(category, check, device, ERROR, f"{where}: {key} was not run (no data: failing closed)")
            return None
        text = res.get("stdout") or ""
        if res.get("rc") not in (0, None):
            err = (res.get("stderr") or text or "").strip().splitlines()
            detail = err[-1] if err else f"exit {res.get('rc')}"
            self.add(
                category,
                check,
                device,
                ERROR,
                f"{where}: `{key.split(':')[0]}` failed: {detail}",
                details={"rc": res.get("rc")},
            )
            return None
        try:
            return parse(tool, text)
        except ParseError as exc:
            self.add(category, check, device, ERROR, f"{where}: {exc}")
            return None


def observed_link_layers(raw: Raw) -> dict[str, str]:
    """``hca/port`` -> link layer from ibstat (empty when ibstat is missing or unreadable)."""
    res = raw.get("ibstat")
    if not res or res.get("rc") not in (0, None):
        return {}
    try:
        rec = parse("ibstat", res.get("stdout") or "")
    except ParseError:
        return {}
    return {f"{ca.name}/{p.port}": p.link_layer for ca in rec.cas for p in ca.ports if p.link_layer}


def evaluate(expect: HostExpect, raw: Raw, only: str | None = None) -> list[CheckResult]:
    ctx = _Ctx(expect, raw)
    want = _wanted(expect, only)
    ibstat = None
    if want & {"hca_port", "error_counters", "nic_gpu_affinity", "nccl_profile", "roce_qos"}:
        ibstat = ctx.tool("ibstat", "ibstat", "hosts", "hca_port") if "hca_port" in want else _quiet(raw)
    if "ofed_version" in want:
        _ofed(ctx)
    if "hca_port" in want and ibstat is not None:
        _ports(ctx, ibstat)
    layers = observed_link_layers(raw)
    if "error_counters" in want:
        _counters(ctx, layers)
    gpus = None
    if want & {"gpu_count", "gpu_model"}:
        gpus = _gpus(ctx, want)
    elif want & set(PCIE_CHECKS):
        gpus = _quiet_tool(raw, "nvidia_query", "nvidia-smi-query", "rows")
    if "nvlink" in want:
        _nvlink(ctx)
    if want & {"gpu_topology", "nic_gpu_affinity"}:
        _topo(ctx, want, layers, gpus)
    _pcie(ctx, want, gpus)
    if "fabric_manager" in want:
        _fabric_manager(ctx)
    if "imex_channel" in want and expect.imex:
        _imex_channel(ctx)
    if "subnet_manager" in want:
        _subnet_manager(ctx, layers)
    if "gpudirect" in want:
        _gpudirect(ctx)
    if "roce_qos" in want:
        _roce(ctx, layers)
    if "nccl_profile" in want:
        _nccl(ctx, ibstat)
    if "ipoib" in want:
        _ipoib(ctx)
    firmware.evaluate(ctx, want)
    _consequences(ctx)
    return ctx.out


#: what follows from a link that is down: the IPoIB interface on it is down, NCCL's HCA list names a
#: port that is not up. Their own remedies (run the ipoib / nccl_profile role) cannot fix a cable.
_CONSEQUENCE = (
    "consequence of {what}: fix the link (cable, transceiver, switch port) and this clears with it; "
    "running the {role} role will not fix it"
)


def _consequences(ctx: _Ctx) -> None:
    """A finding that follows from another names that cause instead of a remedy of its own: an IPoIB
    interface that is only "not up" over a port that is down, an NCCL profile whose only problem is
    listing ports that are not up, when those ports are down (issue 35: one pulled cable read as three
    faults with three remedies)."""
    down = {
        r.device: r for r in ctx.out
        if r.check == "hca_port" and r.status == FAIL and r.threshold == "Active/LinkUp" and r.device
    }
    if not down:
        return
    by_netdev = {p.netdev: p.device for p in ctx.expect.ports if p.netdev and p.device in down}
    by_hca_port = {f"{p.hca}:{p.port}": p.device for p in ctx.expect.ports if p.device in down}
    ifaces: dict[str, str] = {}
    if by_netdev:
        try:
            ifaces = {i["name"]: i["device"] for i in ipoib_interfaces(ctx.expect)}
        except FabricopsError:
            ifaces = {}
    for r in ctx.out:
        if r.status != FAIL:
            continue
        cause_dev = None
        if r.check == "ipoib" and r.device in ifaces and ifaces[r.device] in by_netdev:
            problems = r.message.split(": ", 1)[-1].split("; ")
            if all(x.startswith("not up (") for x in problems):
                cause_dev, role = by_netdev[ifaces[r.device]], "ipoib"
        elif r.check == "nccl_profile":
            problems = r.message.split(": ", 1)[-1].split("; ")
            m = [re.fullmatch(r"NCCL_IB_HCA lists ports that are not up: (.+)", x) for x in problems]
            if problems and all(m):
                ports = {y for x in m if x for y in x[1].split(", ")}
                if ports <= set(by_hca_port):
                    cause_dev, role = by_hca_port[sorted(ports)[0]], "nccl_profile"
        if cause_dev is None:
            continue
        what = f"{ctx.host} {cause_dev} link down"
        r.cause = _CONSEQUENCE.format(what=what, role=role)
        r.caused_by = f"hca_port {ctx.host} {cause_dev}"
        r.action = f"none of its own: fix {ctx.host} {cause_dev}'s link"
        r.details["caused_by"] = r.caused_by


def _quiet_tool(raw: Raw, key: str, tool: str, attr: str | None = None) -> Any:
    """Parsed output of ``key`` (``attr`` of it), or None without adding a result."""
    res = raw.get(key)
    if not res or res.get("rc") not in (0, None):
        return None
    try:
        rec = parse(tool, res.get("stdout") or "")
    except ParseError:
        return None
    return getattr(rec, attr) if attr else rec


def _pcie(ctx: _Ctx, want: set[str], gpus: Any) -> None:
    """pcie_link, pcie_acs, iommu, gpudirect_mechanism (fabricops.verify.pcie)."""
    if not want & set(PCIE_CHECKS):
        return
    devices = None
    if want & {"pcie_link", "pcie_acs"}:
        sub = _Ctx(ctx.expect, ctx.raw)
        devices = pcie._lspci(sub, "pcie_acs")
        if "pcie_acs" in want:
            ctx.out += sub.out  # pcie_link judges on sysfs; lspci only confirms
    if "pcie_link" in want:
        pcie.pcie_link(ctx, gpus, devices)
    if "pcie_acs" in want and devices is not None:
        topo = _quiet_tool(ctx.raw, "topo", "nvidia-smi-topo")
        pcie.pcie_acs(ctx, gpus, devices, topo)
    if "iommu" in want:
        pcie.iommu(ctx, gpus)
    if "gpudirect_mechanism" in want:
        pcie.gpudirect_mechanism(ctx, _gpudirect_applicable(ctx.expect))


def _quiet(raw: Raw) -> Any:
    res = raw.get("ibstat")
    if not res or res.get("rc") not in (0, None):
        return None
    try:
        return parse("ibstat", res.get("stdout") or "")
    except ParseError:
        return None


def _ofed(ctx: _Ctx) -> None:
    want = ctx.expect.ofed_version
    res = ctx.raw.get("ofed_info")
    if (res is not None and res.get("rc") == 127) or (
        res is not None and "command not found" in ((res.get("stderr") or "") + (res.get("stdout") or ""))
    ):
        ctx.add(
            "hosts",
            "ofed_version",
            None,
            FAIL,
            f"{ctx.host}: MLNX_OFED is not installed (no ofed_info)",
            measured=None,
            threshold=want,
            op="==",
            cause=CAUSES["no_ofed"],
        )
        return
    rec = ctx.tool("ofed_info", "ofed_info", "hosts", "ofed_version")
    if rec is None:
        return
    got = rec.version_number or (rec.version or "").removeprefix("MLNX_OFED_LINUX-")
    if ctx.expect.doca and not want:
        _doca(ctx, rec, got)
        return
    if not want:
        ctx.add(
            "hosts",
            "ofed_version",
            None,
            ERROR,
            f"{ctx.host}: no pinned MLNX_OFED version in the inventory (set mlnx_ofed_version, "
            f"fabricops_verify_ofed_version or fabricops_verify_ofed_version_var); installed {got}",
            measured=got,
        )
        return
    ok = got == want
    ctx.add(
        "hosts",
        "ofed_version",
        None,
        PASS if ok else FAIL,
        f"{ctx.host}: MLNX_OFED {got}" + ("" if ok else f", pinned {want} ({ctx.expect.ofed_version_var})"),
        measured=got,
        threshold=want,
        op="==",
        cause=None if ok else CAUSES["ofed"],
        source=ctx.expect.ofed_version_var,
    )


def _doca(ctx: _Ctx, rec: Any, got: str) -> None:
    """DOCA-Host declared: ofed_info must show DOCA-OFED (``OFED-internal-``) and the profile
    meta-package must be installed at the declared DOCA release (fabricops.doca, the role's rules)."""
    from fabricops import doca

    want = ctx.expect.doca or {}
    release, profile = want.get("version", ""), want.get("profile", "doca-ofed")
    res = ctx.raw.get("doca_profile") or {}
    installed = doca.installed_package_version(res.get("stdout"), res.get("rc"))
    kind = "doca" if (rec.version or "").startswith("OFED-internal-") else (
        "mlnx_ofed" if (rec.version or "").startswith("MLNX_OFED_LINUX-") else None)
    ok = kind == "doca" and doca.profile_is_release(installed, release)
    if kind == "mlnx_ofed":
        detail = (f"standalone MLNX_OFED {got}, declared DOCA-Host {release} ({profile}); run the mlnx_ofed "
                  "role with mlnx_ofed_allow_stack_change: true")
    elif kind != "doca":
        detail = f"ofed_info -s shows no DOCA-OFED ({rec.version or 'nothing'}), declared DOCA-Host {release}"
    elif installed is None:
        detail = f"DOCA-OFED {got} but {profile} is not installed, declared DOCA-Host {release}"
    elif not ok:
        detail = f"DOCA-Host {profile} {installed}, declared {release} (mlnx_ofed_doca_version)"
    else:
        detail = f"DOCA-Host {release} ({profile} {installed}, DOCA-OFED {got})"
    ctx.add(
        "hosts",
        "ofed_version",
        None,
        PASS if ok else FAIL,
        f"{ctx.host}: {detail}",
        measured=installed or got,
        threshold=release,
        op="==",
        cause=None if ok else CAUSES["ofed"],
        source="mlnx_ofed_doca_version",
    )


def _sysfs_rates(raw: Raw) -> dict[str, Any]:
    """``ib_rates`` (``grep -H`` of every port's sysfs rate, read by fabricops.evidence) ->
    {"mlx5_0/1": SysfsRate}; a port whose rate does not read is left out."""
    res = raw.get("ib_rates") or {}
    out = {}
    for key, port in parse_sysfs(res.get("stdout") or "")["ports"].items():
        try:
            out[key] = rates.parse_sysfs_rate(port.get("rate", ""))
        except ValueError:
            continue
    return out


def _ports(ctx: _Ctx, ibstat: Any) -> None:
    exp = ctx.expect
    cas = {ca.name: ca for ca in ibstat.cas}
    sysfs = _sysfs_rates(ctx.raw)
    if not exp.ports:
        ctx.add(
            "hosts",
            "hca_port",
            None,
            ERROR,
            f"{ctx.host}: no expected HCA ports (fabricops_cabling or fabricops_verify_ports): "
            "failing closed",
        )
        return
    prof = exp.profile.hca
    for pe in exp.ports:
        dev = pe.device
        ca = cas.get(pe.hca)
        if ca is None:
            ctx.add(
                "hosts",
                "hca_port",
                dev,
                FAIL,
                f"{ctx.host} {pe.hca}: HCA not found (ibstat lists {', '.join(cas) or 'none'})",
                cause=CAUSES["missing_hca"],
            )
            continue
        port = next((p for p in ca.ports if p.port == pe.port), None)
        if port is None:
            ctx.add(
                "hosts",
                "hca_port",
                dev,
                FAIL,
                f"{ctx.host} {dev}: port not found on {pe.hca}",
                cause=CAUSES["missing_hca"],
            )
            continue
        layer = port.link_layer
        if pe.link_layer and layer and layer != pe.link_layer:
            ctx.add(
                "hosts",
                "hca_port",
                dev,
                FAIL,
                f"{ctx.host} {dev}: link layer {layer}, expected {pe.link_layer}",
                cause="port configured for the other link layer (mlxconfig LINK_TYPE_P1)",
            )
            continue
        state, phys = port.state or "?", port.physical_state or "?"
        nd = f" ({pe.netdev})" if pe.netdev else ""
        if state != "Active" or phys != "LinkUp":
            cause = CAUSES["down"]
            if phys == "Polling":
                cause = CAUSES["polling"]
            elif phys == "LinkUp" and state in ("Initializing", "Init", "Armed"):
                cause = CAUSES["init"]
            ctx.add(
                "hosts",
                "hca_port",
                dev,
                FAIL,
                f"{ctx.host} {dev}{nd}: state {state}, physical state {phys} (expected Active/LinkUp)",
                measured=f"{state}/{phys}",
                threshold="Active/LinkUp",
                op="==",
                cause=cause,
            )
            continue
        if layer != prof.link_layer:
            ctx.add(
                "hosts",
                "hca_port",
                dev,
                PASS,
                f"{ctx.host} {dev}{nd}: Active/LinkUp, {layer} {port.rate} Gb/s (not the compute fabric)",
                measured=port.rate,
                unit="Gb/s",
            )
            continue
        want_rate = exp.rate_gbps
        got = sysfs.get(dev)
        got_rate = got.rate_gbps if got else port.rate
        problems, cause = [], None
        if got_rate is None or float(got_rate) != float(want_rate):
            problems.append(f"rate {got_rate} Gb/s, expected {want_rate}")
        if layer == "InfiniBand" and got is not None:
            want_width = prof.width or "4X"
            want_speed = (
                rates.IB_VARIANTS[prof.speed].speed if prof.speed in rates.IB_VARIANTS else prof.speed
            )
            if got.width != want_width:
                problems.append(f"width {got.width}, expected {want_width}")
                cause = CAUSES["width"].format(got=got.width, want=want_width)
            if got.speed != want_speed:
                problems.append(f"speed {got.speed}, expected {want_speed}")
                cause = cause or CAUSES["speed"].format(got=got.speed, want=want_speed)
        elif layer == "InfiniBand" and got is None:
            problems.append("no sysfs rate (width/speed unknown)")
        status = FAIL if problems else PASS
        if problems and cause is None:
            cause = "port runs below the profile's rate"
        extra = f" {got.width} {got.speed}" if got else ""
        msg = f"{ctx.host} {dev}{nd}: Active/LinkUp, {got_rate} Gb/s{extra}"
        if problems:
            msg += ": " + "; ".join(problems)
        ctx.add(
            "hosts",
            "hca_port",
            dev,
            status,
            msg,
            measured=got_rate,
            threshold=want_rate,
            op="==",
            unit="Gb/s",
            cause=cause,
            details={"width": got.width if got else None, "speed": got.speed if got else None},
        )


def _counters(ctx: _Ctx, layers: Mapping[str, str]) -> None:
    """Error counters per InfiniBand port: absolute values since the last counter reset, or, with a
    baseline (a previous report), the increase since then -- unless the counters were reset since
    the baseline (one went below it): then the absolute values, and the message says so."""
    prof = ctx.expect.profile
    flaps = threshold_for(prof, "link_flaps_24h")
    limits = {
        "SymbolErrorCounter": (threshold_for(prof, "symbol_error"), CAUSES["symbol"]),
        "LinkDownedCounter": (threshold_for(prof, "link_downed"), CAUSES["downed"]),
    }
    baseline = ctx.expect.counter_baseline
    ports = [p for p in _ib_candidates(ctx.expect) if layers.get(p.device, p.link_layer) == "InfiniBand"]
    for pe in ports:
        rec = ctx.tool(f"perfquery:{pe.device}", "perfquery", "hosts", "error_counters", pe.device)
        if rec is None:
            continue
        counters = rec.blocks[0].counters if rec.blocks else {}
        base = (baseline or {}).get(pe.device)
        absolute = {name: counters.get(name) for name in limits}
        # a counter below its baseline: reset since the baseline, judged by its absolute value
        increase, reset = error_counters.increase_since(absolute, base)
        bad, measured, causes = [], {}, []
        for name, (thr, cause) in limits.items():
            value = increase[name]
            if value is None:
                bad.append(f"{name} not reported")
                causes.append("perfquery did not print the counter")
                continue
            measured[name] = value
            if not thr.passes(value):
                word = "+" if base is not None and not reset else ""
                bad.append(f"{name} {word}{value} (limit {thr.value})")
                causes.append(cause)
        status = FAIL if bad else PASS
        window = "since the baseline" if base is not None else "since the last counter reset"
        if reset:
            window = "counters reset since the baseline: judged by their values since that reset"
        msg = (
            f"{ctx.host} {pe.device}: "
            + ("; ".join(bad) if bad else ", ".join(f"{k} {v}" for k, v in measured.items()))
            + f" ({window})"
        )
        downed = measured.get("LinkDownedCounter")
        ctx.add(
            "hosts",
            "error_counters",
            pe.device,
            status,
            msg,
            measured=measured,
            threshold={k: v[0].value for k, v in limits.items()},
            op="<=",
            unit="count",
            cause="; ".join(dict.fromkeys(causes)) or None,
            source=limits["SymbolErrorCounter"][0].source,
            details={
                "absolute": absolute,
                "baseline": base,
                "counters_reset_since_baseline": reset,
                "flapping": downed is not None and not flaps.passes(downed),
            },
        )


def _gpus(ctx: _Ctx, want: set[str]) -> Any:
    prof = ctx.expect.profile.gpu
    rec = ctx.tool("nvidia_query", "nvidia-smi-query", "gpus", "gpu_count")
    if rec is None:
        return None
    rows = rec.rows
    if "gpu_count" in want:
        ok = len(rows) == prof.count
        ctx.add(
            "gpus",
            "gpu_count",
            None,
            PASS if ok else FAIL,
            f"{ctx.host}: {len(rows)} GPUs" + ("" if ok else f", expected {prof.count}"),
            measured=len(rows),
            threshold=prof.count,
            op="==",
            cause=None if ok else CAUSES["gpu_count"],
        )
    if "gpu_model" in want:
        wrong = [f"GPU{r.get('index')} {r.get('name')}" for r in rows if r.get("name") != prof.model]
        ctx.add(
            "gpus",
            "gpu_model",
            None,
            FAIL if wrong or not rows else PASS,
            f"{ctx.host}: "
            + (
                f"expected {prof.model}, found {', '.join(wrong)}" if wrong else f"{len(rows)} x {prof.model}"
            ),
            measured=sorted({r.get("name") for r in rows}),
            threshold=prof.model,
            op="==",
            cause=CAUSES["gpu_model"] if wrong else None,
        )
    return rows


def _nvlink(ctx: _Ctx) -> None:
    prof = ctx.expect.profile.gpu
    gen = NVLINK[prof.nvlink]
    rec = ctx.tool("nvlink", "nvidia-smi-nvlink", "gpus", "nvlink")
    if rec is None:
        return
    speed = gen.smi_link_gbs
    for g in rec.gpus:
        dev = f"GPU{g.index}"
        problems = []
        if g.inactive_links:
            problems.append(f"link(s) {', '.join(map(str, g.inactive_links))} inactive")
        if g.message and not g.links:
            problems.append(g.message)
        if g.active_links != gen.links:
            problems.append(f"{g.active_links} of {gen.links} links active")
        slow = [
            link.link
            for link in g.links
            if link.active and speed and abs(float(link.speed_gb_s or 0) - float(speed)) > 0.01 * float(speed)
        ]
        if slow:
            problems.append(f"link(s) {', '.join(map(str, slow))} not at {speed} GB/s")
        ctx.add(
            "gpus",
            "nvlink",
            dev,
            FAIL if problems else PASS,
            f"{ctx.host} {dev}: "
            + (
                "; ".join(problems)
                if problems
                else f"{g.active_links} links at {speed} GB/s (NVLink {gen.version})"
            ),
            measured=g.active_links,
            threshold=gen.links,
            op="==",
            unit="links",
            cause=CAUSES["nvlink"] if problems else None,
        )
    if not rec.gpus:
        ctx.add("gpus", "nvlink", None, ERROR, f"{ctx.host}: nvidia-smi nvlink printed no GPU")


def _topo(ctx: _Ctx, want: set[str], layers: Mapping[str, str], rows: Any) -> None:
    prof = ctx.expect.profile.gpu
    rec = ctx.tool("topo", "nvidia-smi-topo", "gpus", "gpu_topology")
    if rec is None:
        return
    if "gpu_topology" in want and prof.topology == "nvswitch":
        links = NVLINK[prof.nvlink].links
        bad = []
        for i, a in enumerate(rec.gpus):
            for b in rec.gpus[i + 1 :]:
                cell = rec.matrix.get(a, {}).get(b, "?")
                n = rec.nvlinks(a, b)
                if n is None or n < links:
                    bad.append(f"{a}-{b} {cell}")
        ok = not bad and len(rec.gpus) >= 2
        msg = (
            f"{ctx.host}: NV{links} between every pair of {len(rec.gpus)} GPUs"
            if ok
            else (
                f"{ctx.host}: not NV{links}: {', '.join(bad[:8])}"
                + (f" (+{len(bad) - 8} more)" if len(bad) > 8 else "")
            )
        )
        ctx.add(
            "gpus",
            "gpu_topology",
            None,
            PASS if ok else FAIL,
            msg,
            measured=len(bad),
            threshold=0,
            op="==",
            unit="GPU pairs without full NVLink",
            cause=None if ok else CAUSES["nvlink"],
            details={"bad_pairs": bad},
        )
    if "nic_gpu_affinity" in want:
        rails = ctx.expect.rails(layers)
        names = {rec.nic_name(c): c for c in rec.nics}
        for pe in rails:
            col = names.get(pe.hca)
            if col is None:
                ctx.add(
                    "gpus",
                    "nic_gpu_affinity",
                    pe.hca,
                    FAIL,
                    f"{ctx.host} {pe.hca}: not in the nvidia-smi topology "
                    f"(NICs: {', '.join(names) or 'none'})",
                    cause=CAUSES["missing_hca"],
                )
                continue
            close = [g for g in rec.gpus if rec.matrix.get(g, {}).get(col) in ctx.expect.nic_gpu_levels]
            levels = sorted({rec.matrix.get(g, {}).get(col, "?") for g in rec.gpus})
            ok = bool(close)
            ctx.add(
                "gpus",
                "nic_gpu_affinity",
                pe.hca,
                PASS if ok else FAIL,
                f"{ctx.host} {pe.hca}: "
                + (
                    f"{'/'.join(ctx.expect.nic_gpu_levels)} to {', '.join(close)}"
                    if ok
                    else f"no GPU at {'/'.join(ctx.expect.nic_gpu_levels)} (levels {', '.join(levels)})"
                ),
                measured=close,
                threshold=list(ctx.expect.nic_gpu_levels),
                op="in",
                cause=None if ok else CAUSES["affinity"],
            )


def _subnet_manager(ctx: _Ctx, layers: Mapping[str, str]) -> None:
    """sminfo: a MASTER SM answers (the ports' ACTIVE state is hca_port's); in mode hosts, with the
    priority of the plan's master (the highest in subnet_manager_hosts)."""
    plan = ctx.expect.subnet_manager
    if not plan:
        ctx.add("hosts", "subnet_manager", None, SKIP,
                f"{ctx.host}: no subnet_manager_mode in the inventory (not planned)")
        return
    ib = [p for p in _ib_candidates(ctx.expect) if layers.get(p.device, p.link_layer) in (None, "InfiniBand")]
    if not ib:
        ctx.add("hosts", "subnet_manager", None, SKIP, f"{ctx.host}: no InfiniBand ports")
        return
    res = ctx.raw.get("sminfo")
    text = ((res or {}).get("stdout") or "") + ((res or {}).get("stderr") or "")
    if res is not None and res.get("rc") not in (0, None, 127) and "iberror: failed: query" in text:
        ctx.add("hosts", "subnet_manager", None, FAIL,
                f"{ctx.host}: no subnet manager answers (sminfo: iberror: failed: query; "
                f"subnet_manager_mode {plan['mode']})",
                measured=None, threshold="SMINFO_MASTER", op="==", cause=CAUSES["no_sm"])
        return
    rec = ctx.tool("sminfo", "sminfo", "hosts", "subnet_manager")
    if rec is None:
        return
    problems, cause = [], None
    if rec.state != 3:
        problems.append(f"the SM that answers is in state {rec.state} {rec.state_name}, not SMINFO_MASTER")
        cause = CAUSES["sm_not_master"]
    want = plan.get("priority")
    if want is not None and rec.priority != want:
        problems.append(f"master priority {rec.priority}, the plan's master has {want}")
        cause = cause or CAUSES["sm_priority"]
    where = "the switch" if plan["mode"] == "switch" else "hosts"
    ctx.add(
        "hosts",
        "subnet_manager",
        None,
        FAIL if problems else PASS,
        f"{ctx.host}: "
        + ("; ".join(problems) if problems
           else f"master SM lid {rec.lid} guid {rec.guid} priority {rec.priority} (SM on {where})"),
        measured={"state": rec.state_name, "priority": rec.priority, "lid": rec.lid, "guid": rec.guid},
        threshold={"state": "SMINFO_MASTER", "priority": want},
        op="==",
        cause=cause,
        details={"mode": plan["mode"]},
    )


def _fabric_manager(ctx: _Ctx) -> None:
    """nvidia-smi -q: every GPU's Fabric State Completed, Status Success (NVSwitch systems)."""
    from fabricops.services import fabric_errors

    prof = ctx.expect.profile.gpu
    if not _nvswitch(ctx.expect):
        ctx.add("gpus", "fabric_manager", None, SKIP,
                f"{ctx.host}: not an NVSwitch system (profile GPU topology {prof.topology}): "
                "no fabric manager")
        return
    rec = ctx.tool("nvidia_q", "nvidia-smi-q", "gpus", "fabric_manager")
    if rec is None:
        return
    # the parser reads "N/A" as None; the message says what nvidia-smi printed
    gpus = [{"pci_bus_id": g.pci_bus_id, "fabric_state": g.fabric_state,
             "fabric_status": g.fabric_status if g.fabric_status is not None else "N/A"} for g in rec.gpus]
    if not any(g["fabric_state"] for g in gpus):
        ctx.add("gpus", "fabric_manager", None, SKIP,
                f"{ctx.host}: nvidia-smi -q reports no GPU fabric state ({len(gpus)} GPUs; only Hopper and "
                "later report it)")
        return
    bad = fabric_errors(gpus)
    ctx.add(
        "gpus",
        "fabric_manager",
        None,
        FAIL if bad else PASS,
        f"{ctx.host}: "
        + ("; ".join(bad[:4]) + (f" (+{len(bad) - 4} more)" if len(bad) > 4 else "") if bad
           else f"{len(gpus)} GPUs Fabric State Completed, Status Success (driver {rec.driver_version})"),
        measured=len(bad),
        threshold=0,
        op="==",
        unit="GPUs without a configured fabric",
        cause=CAUSES["fabric"] if bad else None,
        details={"driver_version": rec.driver_version, "gpus": gpus},
    )


def _imex_channel(ctx: _Ctx) -> None:
    """IMEX channel0 is the driver's character device (fabricops.imex.channel_plan, as the nvidia_imex
    role creates it): CUDA fabric memory across the NVLink domain needs it, in DRA mode too."""
    from fabricops import imex

    got = {}
    for key, what in (("imex_channel", f"stat {IMEX_CHANNEL}"), ("proc_devices", "cat /proc/devices")):
        res = ctx.raw.get(key)
        text = (res or {}).get("stdout") or ""
        if res is None or res.get("rc") not in (0, None) or not text.strip():
            lines = [] if res is None else (res.get("stderr") or text or "").strip().splitlines()
            why = "not run" if res is None else (lines[-1] if lines else f"exit {res.get('rc')}, no output")
            ctx.add("gpus", "imex_channel", "channel0", ERROR,
                    f"{ctx.host}: `{what}` failed: {why} (could not run: failing closed)")
            return
        got[key] = text
    if "devices:" not in got["proc_devices"]:
        ctx.add("gpus", "imex_channel", "channel0", ERROR,
                f"{ctx.host}: /proc/devices unreadable (no 'Character devices:' section): failing closed")
        return
    stat = got["imex_channel"].strip()
    have = {"rc": 1} if stat == "absent" else {"rc": 0, "stdout": stat}
    plan = imex.channel_plan(got["proc_devices"], have)
    major = plan["major"]
    remedy = (
        "re-run the nvidia_imex role: it sets the nvidia module option NVreg_CreateImexChannel0=1 (the "
        f"channel at each load of the driver) and creates it now with mknod {IMEX_CHANNEL} c "
        f"{major if major is not None else '<major>'} 0 (the major of {imex.CHANNEL_DEVICE} in "
        "/proc/devices), mode 0666"
    )
    message, cause, action = plan["msg"], None, None
    if major is None:
        cause, action = plan["msg"], "load the NVIDIA open kernel module of a driver with IMEX support"
    elif plan["action"] != "none":
        message, action = f"{plan['msg']}: {remedy}", remedy
        cause = (
            "IMEX channels are not created by default and do not survive a reboot unless the driver "
            "creates them"
        )
    ok = major is not None and plan["action"] == "none"
    ctx.add(
        "gpus",
        "imex_channel",
        "channel0",
        PASS if ok else FAIL,
        f"{ctx.host}: {IMEX_CHANNEL}: {message}",
        measured=None if stat == "absent" else stat,
        threshold=f"character special file ({major}, 0) mode 0666" if major is not None else None,
        op="==",
        cause=cause,
        action=action,
        details={"major": major, "action": plan["action"], "managed_by": ctx.expect.imex.get("managed_by")},
    )


def _gpudirect(ctx: _Ctx) -> None:
    """lsmod: nvidia_peermem loaded where GPUs and RDMA HCAs share the host."""
    from fabricops.services import lsmod_modules

    if not ctx.expect.gpudirect:
        ctx.add("hosts", "gpudirect", None, SKIP,
                f"{ctx.host}: fabricops_site_gpudirect is false (not planned)")
        return
    if not _gpudirect_applicable(ctx.expect):
        ctx.add("hosts", "gpudirect", None, SKIP,
                f"{ctx.host}: GPUDirect RDMA needs GPUs and RDMA HCAs on one host (not applicable)")
        return
    res = ctx.raw.get("lsmod")
    if res is None or res.get("rc") not in (0, None):
        lines = [] if res is None else (res.get("stderr") or res.get("stdout") or "").strip().splitlines()
        detail = "not run" if res is None else (lines[-1] if lines else f"exit {res.get('rc')}")
        ctx.add("hosts", "gpudirect", None, ERROR, f"{ctx.host}: `lsmod` failed: {detail} (failing closed)")
        return
    text = res.get("stdout") or ""
    if not text.lstrip().startswith("Module"):
        ctx.add("hosts", "gpudirect", None, ERROR,
                f"{ctx.host}: lsmod output unreadable (no 'Module  Size  Used by' header)")
        return
    loaded = PEERMEM in lsmod_modules(text)
    ctx.add(
        "hosts",
        "gpudirect",
        PEERMEM,
        PASS if loaded else FAIL,
        f"{ctx.host}: {PEERMEM} " + ("loaded (GPUDirect RDMA usable)" if loaded else "is not loaded"),
        measured=loaded,
        threshold=True,
        op="==",
        cause=None if loaded else CAUSES["peermem"],
    )


def _grep_files(text: str) -> dict[str, str]:
    out = {}
    for line in (text or "").splitlines():
        path, sep, value = line.partition(":")
        if sep:
            out[path] = value
    return out


def _definition_error(exc: BaseException, source: str, host: str) -> str:
    """``SOURCE does not validate: ...`` (the caller names the host)."""
    detail = getattr(exc, "detail", None)
    return detail if detail else f"{source} does not validate: {exc}"


def _roce(ctx: _Ctx, layers: Mapping[str, str]) -> None:
    from fabricops.hostqos import knobs as knobs_mod
    from fabricops.hostqos import mlnx_qos as qos_mod

    exp = ctx.expect
    if exp.roce is None:
        ctx.add(
            "hosts", "roce_qos", None, SKIP, f"{ctx.host}: no fabricops_roce in the inventory (not planned)"
        )
        return
    try:
        states = roce_port_states(exp)
    except FabricopsError as exc:
        ctx.add(
            "hosts",
            "roce_qos",
            None,
            ERROR,
            f"{ctx.host}: {_definition_error(exc, exp.roce_source, ctx.host)}",
            cause=f"fix {exp.roce_source} in the inventory (docs/roce.md)",
        )
        return
    states = [s for s in states if layers.get(f"{s['device']}/{s['port']}", "Ethernet") == "Ethernet"]
    if not states:
        ctx.add("hosts", "roce_qos", None, SKIP, f"{ctx.host}: no RoCE ports")
        return
    for st in states:
        nd = st["netdev"]
        dev = f"{st['device']}/{st['port']}"
        rec = ctx.tool(f"mlnx_qos:{nd}", "mlnx_qos", "hosts", "roce_qos", nd)
        if rec is None:
            continue
        diffs = qos_mod.verify(qos_mod.want_from(st["mlnx_qos"]), qos_mod.have_from(rec))
        knobs = knobs_mod.knobs_for(nd, st["device"], st["port"], st["sysfs"])
        files_res = ctx.raw.get(f"knobfiles:{nd}") or {}
        read = {
            "files": _grep_files(files_res.get("stdout") or ""),
            "commands": [
                {
                    "argv": list(k.read_argv),
                    **dict(ctx.raw.get(f"knobcmd:{' '.join(k.read_argv)}") or {"rc": None}),
                }
                for k in knobs
                if k.read_argv
            ],
        }
        try:
            values, _warn = knobs_mod.values_from(nd, knobs, read)
            diffs += [d.split(": ", 1)[1] for d in knobs_mod.verify(nd, knobs, values)]
        except knobs_mod.KnobError as exc:
            ctx.add("hosts", "roce_qos", nd, ERROR, f"{ctx.host} {nd} ({dev}): {exc}")
            continue
        ctx.add(
            "hosts",
            "roce_qos",
            nd,
            FAIL if diffs else PASS,
            f"{ctx.host} {nd} ({dev}): "
            + ("; ".join(diffs) if diffs else "trust, PFC, DSCP map, ECN, ToS and RoCE mode as declared"),
            measured=diffs,
            threshold=[],
            op="==",
            cause=CAUSES["roce"] if diffs else None,
            details={"desired": {"mlnx_qos": st["mlnx_qos"], "sysfs": st["sysfs"]}},
        )


def _nccl(ctx: _Ctx, ibstat: Any) -> None:
    """/etc/nccl.conf against the rules of fabricops.nccl (docs/nccl.md): NCCL_IB_HCA = the ACTIVE
    ports of the planned rails, NCCL_CROSS_NIC on a rail-optimised host, and on RoCE either one
    NCCL_IB_GID_INDEX that is every listed port's IPv4 RoCE v2 index, or none where the host's NCCL
    (>= 2.21.5) selects the GID per HCA."""
    from fabricops import nccl

    exp = ctx.expect
    if not exp.nccl_profile:
        ctx.add("hosts", "nccl_profile", None, SKIP, f"{ctx.host}: no nccl_profile_name in the inventory")
        return
    res = ctx.raw.get("nccl_conf")
    if res is None or res.get("rc") != 0:
        ctx.add(
            "hosts",
            "nccl_profile",
            exp.nccl_conf_path,
            FAIL,
            f"{ctx.host}: {exp.nccl_conf_path} is missing",
            cause=CAUSES["nccl"],
        )
        return
    env = parse_nccl_conf(res.get("stdout") or "")
    problems: list[str] = []
    if exp.nccl_profile == "socket":
        if env.get("NCCL_IB_DISABLE") != "1":
            problems.append("NCCL_IB_DISABLE is not 1")
    else:
        layer = "InfiniBand" if exp.nccl_profile == "ib" else "Ethernet"
        if ibstat is None:
            ctx.add(
                "hosts",
                "nccl_profile",
                exp.nccl_conf_path,
                ERROR,
                f"{ctx.host}: cannot tell which HCAs are up (ibstat unreadable)",
            )
            return
        up = {
            f"{ca.name}:{p.port}"
            for ca in ibstat.cas
            for p in ca.ports
            if p.link_layer == layer and p.state == "Active"
        }
        observed = observed_link_layers(ctx.raw)
        planned = {
            f"{p.hca}:{p.port}": p.switch
            for p in exp.ports
            if (p.link_layer or observed.get(p.device)) == layer
        }
        want = up & set(planned) if planned else up
        listed_raw = env.get("NCCL_IB_HCA", "")
        listed = {x if ":" in x else f"{x}:1" for x in listed_raw.lstrip("=^").split(",") if x}
        if env.get("NCCL_IB_DISABLE") == "1":
            problems.append("NCCL_IB_DISABLE=1 in an IB/RoCE profile")
        if not listed:
            problems.append("NCCL_IB_HCA is not set")
        if listed - up:
            problems.append(f"NCCL_IB_HCA lists ports that are not up: {', '.join(sorted(listed - up))}")
        if want - listed:
            where = "of the planned rails " if planned else ""
            problems.append(f"ports {where}up but not in NCCL_IB_HCA: {', '.join(sorted(want - listed))}")
        if planned:
            optimised, why = nccl.rail_optimised(planned)
            if optimised and "NCCL_CROSS_NIC" not in env:
                problems.append(f"NCCL_CROSS_NIC is not set on a {why} host (want 0)")
        if layer == "Ethernet":
            problems += _nccl_gid(ctx, env, sorted(listed & up))
            try:
                from fabricops.roce.desired import validated

                tos = validated(exp.roce, exp.roce_source, exp.host).tos if exp.roce is not None else None
            except FabricopsError:
                tos = None
            if tos is not None and env.get("NCCL_IB_TC") != str(tos):
                problems.append(f"NCCL_IB_TC is {env.get('NCCL_IB_TC')}, want {tos}")
    ctx.add(
        "hosts",
        "nccl_profile",
        exp.nccl_conf_path,
        FAIL if problems else PASS,
        f"{ctx.host} {exp.nccl_conf_path}: "
        + ("; ".join(problems) if problems else f"profile {exp.nccl_profile} matches the HCAs that are up"),
        measured=env,
        cause=CAUSES["nccl"] if problems else None,
    )


def _nccl_gid(ctx: _Ctx, env: Mapping[str, str], ports: list[str]) -> list[str]:
    """The GID rule of fabricops.nccl on what the host shows: its NCCL version and GID tables."""
    from fabricops import nccl

    libs = ctx.raw.get("nccl_libs") or {}
    version = nccl.installed_version((libs.get("stdout") or "").split())
    index = env.get("NCCL_IB_GID_INDEX")
    if index is None:
        if not nccl.selects_gid_itself(nccl.parse_version(version)):
            found = f"NCCL {version}" if version else "no libnccl.so.2.X.Y in " + ", ".join(nccl.LIB_DIRS)
            return [
                f"NCCL_IB_GID_INDEX is not set but {found}: NCCL selects the GID per HCA only from "
                f"{nccl.version_text(nccl.DYNAMIC_GID_SINCE)} on"
            ]
        wrong = [
            f"{k}={env[k]} (want {v})" for k, v in nccl.DYNAMIC_GID_ENV.items() if env.get(k, v) != v
        ]
        return [f"NCCL {version} selects the GID, but {', '.join(wrong)}"] if wrong else []
    if not index.strip().isdigit():
        return [f"NCCL_IB_GID_INDEX={index} is not an index"]
    out = []
    for name in ports:
        hca, _, port = name.partition(":")
        table = ctx.raw.get(f"gids:{hca}/{port}")
        gid = roce_v2_gid(parse_gids((table or {}).get("stdout")))
        if table is None:
            out.append(f"the GID table of {name} was not read (not a planned port): GID index unchecked")
        elif gid is None:
            out.append(f"{name} has no IPv4 RoCE v2 GID (NCCL_IB_GID_INDEX={index} cannot be checked)")
        elif int(gid["index"]) != int(index):
            out.append(f"NCCL_IB_GID_INDEX={index} but {name}'s IPv4 RoCE v2 GID is index {gid['index']}")
    return out


def _ipoib(ctx: _Ctx) -> None:
    exp = ctx.expect
    if not exp.ipoib:
        ctx.add("hosts", "ipoib", None, SKIP, f"{ctx.host}: no IPoIB plan in the inventory")
        return
    try:
        ifaces = ipoib_interfaces(exp)
    except FabricopsError as exc:
        ctx.add("hosts", "ipoib", None, ERROR, f"{ctx.host}: IPoIB plan does not resolve: {exc}")
        return
    for i in ifaces:
        name = i["name"]
        res = ctx.raw.get(f"ipoib_addr:{name}") or {}
        if res.get("rc") != 0:
            ctx.add(
                "hosts",
                "ipoib",
                name,
                FAIL,
                f"{ctx.host} {name}: interface does not exist",
                cause=CAUSES["ipoib"],
            )
            continue
        try:
            data = json.loads(res.get("stdout") or "")[0]
        except (ValueError, IndexError, TypeError, RecursionError):
            ctx.add("hosts", "ipoib", name, ERROR, f"{ctx.host} {name}: `ip -j addr` output unreadable")
            continue
        problems = []
        flags = data.get("flags") or []
        if "UP" not in flags or data.get("operstate") not in ("UP", "UNKNOWN"):
            problems.append(f"not up (operstate {data.get('operstate')})")
        addrs = {
            f"{a.get('local')}/{a.get('prefixlen')}"
            for a in data.get("addr_info") or []
            if a.get("family") == "inet"
        }
        if i.get("address") and i["address"] not in addrs:
            problems.append(f"address {', '.join(sorted(addrs)) or 'none'}, planned {i['address']}")
        if i.get("mtu") and data.get("mtu") != i["mtu"]:
            problems.append(f"MTU {data.get('mtu')}, planned {i['mtu']}")
        mode = ((ctx.raw.get(f"ipoib_mode:{name}") or {}).get("stdout") or "").strip()
        if i.get("mode") and mode != i["mode"]:
            problems.append(f"mode {mode or 'unknown'}, planned {i['mode']}")
        ctx.add(
            "hosts",
            "ipoib",
            name,
            FAIL if problems else PASS,
            f"{ctx.host} {name}: "
            + (
                "; ".join(problems)
                if problems
                else f"up, {i.get('address')}, {i.get('mode')}, MTU {i.get('mtu')}"
            ),
            cause=CAUSES["ipoib"] if problems else None,
        )
