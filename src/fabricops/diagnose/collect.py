"""Collecting diagnose's evidence: the commands, running them on hosts, reading switch state, and
reading the evidence playbooks/diagnose.yml wrote.

Evidence is ``{host: {key: {"rc": int | None, "stdout": str, "stderr": str}}}``: the key names the
command (:data:`BASE_COMMANDS`, then per RoCE netdev ``mlnx_qos:IF`` and ``ethtool:IF``, then
``ping:PEER:ADDR`` between the hosts diagnosed). Host files are parsed by fabricops.evidence (the one
copy of each parser), never here.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fabricops import cliopts
from fabricops.errors import CouldNotRun, FabricopsError
from fabricops.evidence.collect import collect as collect_host
from fabricops.evidence.hostfiles import parse_ipv4, parse_sysfs
from fabricops.verify import firmware as fw_checks  # NIC firmware / DKMS: verify's probe and rules
from fabricops.verify import pcie as pcie_cmds  # the GPU-path commands verify runs too

Raw = Mapping[str, Mapping[str, Any]]
Run = Callable[[str, str, float], Mapping[str, Any]]

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


def output(raw: Raw, key: str) -> str | None:
    """The stdout of command ``key`` when it ran and exited 0, else None."""
    item = raw.get(key)
    if not item or item.get("rc", 1) != 0:
        return None
    return str(item.get("stdout") or "")


def netdev_for(port: Mapping[str, Any], netdevs: Mapping[str, list[str]]) -> str | None:
    """The netdev of a port of fabricops.evidence.hostfiles.parse_sysfs (one per HCA, else by port)."""
    names = netdevs.get(port["device"]) or []
    return names[0] if len(names) == 1 else (names[port["port"] - 1] if len(names) >= port["port"] else None)


def host_commands(first: Raw) -> dict[str, str]:
    """Second-round commands from the first round's evidence: mlnx_qos and ethtool per RoCE netdev."""
    sysfs = parse_sysfs(output(first, "sysfs") or "")
    cmds = {}
    for p in sysfs["ports"].values():
        if p.get("link_layer") != "Ethernet":
            continue
        netdev = netdev_for(p, sysfs["netdevs"])
        if netdev:
            q = shlex.quote(netdev)
            cmds[f"mlnx_qos:{netdev}"] = f"mlnx_qos -i {q}"
            cmds[f"ethtool:{netdev}"] = f"ethtool -S {q}; echo ===; sleep {ETHTOOL_GAP_S:g}; ethtool -S {q}"
    return cmds


def _ipoib_addrs(raw: Raw) -> dict[str, list[str]]:
    sysfs = parse_sysfs(output(raw, "sysfs") or "")
    ib_netdevs = {
        netdev_for(p, sysfs["netdevs"])
        for p in sysfs["ports"].values()
        if p.get("link_layer", "InfiniBand") == "InfiniBand"
    }
    return {n: a for n, a in parse_ipv4(output(raw, "ip") or "").items() if n in ib_netdevs and a}


def collect(run: Run, hosts: Sequence[str], progress: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Evidence per host: {host: {key: {"rc", "stdout", "stderr"}}}.

    Per host one batched run (fabricops.evidence.collect) per round: the base commands, then the
    commands the first round's sysfs asks for (each ethtool command keeps its own ETHTOOL_GAP_S sleep
    between its two samples), then the pings to the other hosts' IPoIB addresses."""

    def one(host: str) -> dict[str, Any]:
        raw: dict[str, Any] = collect_host(run, host, BASE_COMMANDS, 60)
        raw.update(collect_host(run, host, host_commands(raw), 60))
        return raw

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
        evidence = dict(zip(hosts, pool.map(one, hosts), strict=True))
    if progress:
        progress(f"evidence from {len(evidence)} hosts")
    addrs = {h: _ipoib_addrs(r) for h, r in evidence.items()}
    for host in hosts:
        pings: dict[str, str] = {}
        for peer in hosts:
            if peer == host:
                continue
            for netdev, peer_addrs in addrs[peer].items():
                if netdev not in addrs[host]:
                    continue
                for a in peer_addrs[:1]:
                    pings[f"ping:{peer}:{a}"] = f"ping -c 2 -W 1 -I {shlex.quote(netdev)} {shlex.quote(a)}"
        evidence[host].update(collect_host(run, host, pings, 15))
    return evidence


def switch_states(
    fabric: Any, cabling: Sequence[Mapping[str, Any]], hosts: Sequence[str], lossless: int | None
) -> tuple[dict[str, dict], list[str]]:
    """Normalised PFC/ECN state of the Ethernet switches cabled to ``hosts``; notes for those unread.

    A switch is reached as the roce_switch role reaches it: ``fabricops.switch.access.switch_connection``
    over its inventory variables (Vault, inline vault, $FABRICOPS_SWITCH_PASSWORD, keys, agent,
    ``roce_switch_known_hosts``, ``ansible_network_os``), the same errors as verify's."""
    from fabricops.roce import platforms, resource
    from fabricops.roce.platforms import switch_platform
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
            conn = platforms.connect(switch_connection(hv, switch=name, os_name=os_name, inventory=True))
            try:
                data = resource.get_roce_data(conn, os_name, read_ports)
            finally:
                conn.disconnect()
            _facts, oper = resource.gather(os_name, data, read_ports)
            states[name] = plat.oper_state(oper, ports, lossless)
        except Exception as exc:  # a switch we cannot read is a note, not a crash
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            notes.append(f"switch {name}: state not read ({first})")
    return states, notes


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


def read_json(path: Path) -> Any:
    """A JSON file playbooks/diagnose.yml wrote (evidence or context.json), one sentence when it is bad."""
    try:
        # a regular file only, size-capped: a FIFO would hang the run, /dev/zero never ends
        return json.loads(cliopts.read_input(path, str(path)).decode("utf-8"))
    except RecursionError:
        raise DiagnoseError(f"{path}: not evidence JSON (nested too deeply)") from None
    except OSError as exc:
        raise CouldNotRun(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise DiagnoseError(f"{path}: not JSON ({str(exc).splitlines()[0]})") from None


def load_evidence_dir(directory: Path) -> dict[str, dict[str, Any]]:
    """The evidence files playbooks/diagnose.yml wrote in ``directory`` (``HOST.json``, context.json
    aside): {host: evidence}; empty when there is none (the caller says so, after reading the context)."""
    if not directory.is_dir():
        raise CouldNotRun(f"{directory}: no such directory (give --from-evidence the directory "
                          "playbooks/diagnose.yml wrote)")
    evidence = {}
    for f in sorted(directory.glob("*.json")):
        if f.name == "context.json":
            continue
        doc = read_json(f)
        try:
            evidence[f.stem] = _check_raw(f, from_ansible(doc) if isinstance(doc, Mapping) else doc)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DiagnoseError(f"{f}: not evidence JSON ({type(exc).__name__}: {exc})") from None
    return evidence
