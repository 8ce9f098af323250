"""``fabricops lab fault``: inject faults into the emulated rack, list them, clear them.

``fabricops lab fault TARGET KIND [ARGS...]`` injects one fault; ``fabricops lab fault clear
[TARGET]`` undoes every fault on TARGET (or all), restoring the original bytes of each file it
changed; ``fabricops lab fault list`` shows what is active (also ``STATE_DIR/faults.json``).

Host faults change the host's silicon (``hosts/NAME/hw/hardware.json``, then ``hwctl sync`` in the
host) or its running system (through ``host_exec``); switch faults write the switch emulator's
``faults.json`` (or, for an InfiniBand switch, its fabric file). What each fault changes and how the
real fault looks: docs/lab-faults.md. An unknown target, kind or argument is one sentence and exit
status 2, with nothing changed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fabricops.errors import FabricopsError
from fabricops.model import rates
from fabricops_lab import paths
from fabricops_lab.emul import devstate

#: What a link that flaps leaves in the counters (added to the live counters by hwctl sync).
FLAPS = 8
SYMBOL_ERRORS = 500
QOS_DIR = "/" + devstate.QOS_DIR
OFED_RELEASE = "/" + devstate.OFED_RELEASE


class FaultError(FabricopsError):
    """A fault request that names no such target, kind or device: exit status 2, nothing changed."""

    exit_status = 2


# --- seams to the running hosts (tests replace these two) ---------------------------------------

def _host_exec(name: str, argv: list[str], check: bool = True):
    from fabricops_lab import hosts

    return hosts.host_exec(name, argv, check=check)


def _resync(name: str) -> None:
    from fabricops_lab import hosts

    hosts.resync_hardware(name)


# --- state files --------------------------------------------------------------------------------

def faults_file() -> Path:
    return paths.STATE_DIR / "faults.json"


def backup_dir() -> Path:
    return paths.STATE_DIR / "fault-backups"


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One fault change at a time on this lab: ``inject`` and ``clear`` read faults.json, change
    files and write it back, so two at once (two operators, or test files running side by side on
    different hosts) would lose one's record and leave its fault armed for ever. The lock is a
    flock on the lab's state directory itself (root's, made by ``lab up``): no file is created, so a
    refused request still changes nothing."""
    paths.STATE_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.STATE_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def active() -> list[dict[str, Any]]:
    """The active faults, oldest first (what ``fabricops lab status`` shows)."""
    try:
        data = json.loads(faults_file().read_text())
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else []


def _save(records: list[dict[str, Any]]) -> None:
    target = faults_file()
    if not records:
        target.unlink(missing_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(records, indent=2) + "\n")
    tmp.replace(target)


def _backup_path(path: Path) -> Path:
    return backup_dir() / (hashlib.sha256(str(path).encode()).hexdigest()[:16] + ".orig")


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".fault-tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


# --- planning -----------------------------------------------------------------------------------

@dataclass
class Plan:
    """What one fault does: new file contents, commands in the host, and their undo."""

    summary: str
    files: dict[Path, bytes] = field(default_factory=dict)
    do: list[list[str]] = field(default_factory=list)
    undo: list[list[str]] = field(default_factory=list)
    resync: bool = False


@dataclass
class Target:
    name: str
    kind: str  # "host" | "switch"
    os: str | None = None
    ports: list[str] = field(default_factory=list)
    #: switch port -> what is cabled there: {"link_layer", "speed", "width", "gbps", "peer"}
    cabled: dict[str, dict[str, Any]] = field(default_factory=dict)


def _switch_cables(topo: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """switch -> port -> the link trained on it: host cables (the host port's speed and width) and
    inter-switch links (the topology's normalised ``links``)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    hosts = topo.get("hosts") or []
    ports = {(h["name"], p["netdev"]): p for h in hosts for hca in h["hcas"] for p in hca["ports"]}
    ib = {s["name"] for s in topo.get("switches") or [] if s.get("os") == "ib"}
    for c in topo.get("cabling") or []:
        p = ports.get((c["host"], c["netdev"]))
        if p is not None:
            out.setdefault(c["switch"], {})[str(c["switch_port"])] = {
                "link_layer": p["link_layer"], "speed": p["speed"], "width": p["width"],
                "gbps": p["rate_gbps"], "peer": f"{c['host']} {c['netdev']}",
            }
    for ln in topo.get("links") or []:
        ll = "InfiniBand" if ln["switch_a"] in ib else "Ethernet"
        for me, port, other, oport in (("switch_a", "port_a", "switch_b", "port_b"),
                                       ("switch_b", "port_b", "switch_a", "port_a")):
            out.setdefault(ln[me], {})[str(ln[port])] = {
                "link_layer": ll, "speed": ln["speed"], "width": ln["width"], "gbps": ln["gbps"],
                "peer": f"{ln[other]} {ln[oport]}", "peer_switch": (ln[other], str(ln[oport])),
            }
    return out


def _targets(lab: dict[str, Any]) -> dict[str, Target]:
    topo = lab.get("topology") or {}
    out: dict[str, Target] = {}
    for h in topo.get("hosts") or []:
        out[h["name"]] = Target(h["name"], "host")
    for name in lab.get("hosts") or {}:
        out.setdefault(name, Target(name, "host"))
    cables = _switch_cables(topo)
    for s in topo.get("switches") or []:
        out[s["name"]] = Target(s["name"], "switch", s.get("os"), [str(p) for p in s.get("ports", [])],
                                cables.get(s["name"], {}))
    for t in out.values():  # an inter-switch link's other end: the peer switch's Target and port
        for link in t.cabled.values():
            peer = link.get("peer_switch")
            if peer and peer[0] in out:
                link["peer_target"] = out[peer[0]]
    return out


def _hw_path(host: str) -> Path:
    return paths.host_dir(host) / "hw" / "hardware.json"


def _load_hw(host: str) -> dict[str, Any]:
    path = _hw_path(host)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FabricopsError(f"{path} does not exist; is {host} up (fabricops lab status)?") from None
    except ValueError as exc:
        raise FabricopsError(f"{path} is not valid JSON ({exc})") from None


def _hw_bytes(hw: dict[str, Any]) -> bytes:
    return (json.dumps(hw, indent=2) + "\n").encode()


def _nargs(kind: str, args: list[str], lo: int, hi: int, usage: str) -> None:
    if not lo <= len(args) <= hi:
        raise FaultError(f"{kind} takes {usage}")


def _select_ports(hw: dict[str, Any], spec: str) -> list[tuple[dict, dict]]:
    """DEV, DEV/PORT or a netdev name -> [(hca, port), ...] in hw (which the caller then mutates)."""
    dev, _, pnum = spec.partition("/")
    for hca in hw.get("hcas", []):
        for port in hca.get("ports", []):
            if not pnum and port.get("netdev") == spec:
                return [(hca, port)]
    hca = next((h for h in hw.get("hcas", []) if h["name"] == dev), None)
    if hca is None:
        names = [h["name"] for h in hw.get("hcas", [])]
        raise FaultError(f"{hw.get('host', 'the host')} has no device {dev!r} (devices: {', '.join(names)})")
    if not pnum:
        return [(hca, p) for p in hca["ports"]]
    chosen = [p for p in hca["ports"] if str(p["port"]) == pnum]
    if not chosen:
        have = ", ".join(str(p["port"]) for p in hca["ports"])
        raise FaultError(f"{dev} has no port {pnum!r} (ports: {have})")
    return [(hca, chosen[0])]


def _where(hca: dict, port: dict) -> str:
    return f"{hca['name']} port {port['port']}"


def _gpu(hw: dict[str, Any], spec: str) -> dict[str, Any]:
    if not spec.isdigit():
        raise FaultError(f"GPU must be an index like 0, not {spec!r}")
    gpu = next((g for g in hw.get("gpus", []) if int(g["index"]) == int(spec)), None)
    if gpu is None:
        have = ", ".join(str(g["index"]) for g in hw.get("gpus", [])) or "none"
        raise FaultError(f"{hw.get('host', 'the host')} has no GPU {spec} (GPUs: {have})")
    return gpu


def _netdevs(hw: dict[str, Any]) -> list[str]:
    return [p["netdev"] for h in hw.get("hcas", []) for p in h.get("ports", []) if p.get("netdev")]


def _hw_plan(host: str, hw: dict[str, Any], summary: str, **kw: Any) -> Plan:
    return Plan(summary=summary, files={_hw_path(host): _hw_bytes(hw)}, resync=True, **kw)


def plan_port_down(host: str, args: list[str]) -> Plan:
    _nargs("port-down", args, 1, 1, "DEV[/PORT] (e.g. mlx5_0 or mlx5_0/1)")
    hw = _load_hw(host)
    chosen = _select_ports(hw, args[0])
    do, undo, what = [], [], []
    for hca, port in chosen:
        port["state"] = "DOWN"
        port["phys_state"] = "Disabled"
        if port.get("link_layer") == "InfiniBand":
            # a disabled IB port reports the base rate and no LIDs (ibstat: "Rate: 10", "Base lid: 0")
            port.update({"speed": "SDR", "width": "4X", "rate_gbps": 10, "lid": 0, "sm_lid": 0})
        else:
            port["rate_gbps"] = 40  # an mlx5 Ethernet port that is down reports 40 (4X QDR)
        what.append(_where(hca, port))
        if port.get("netdev"):
            do.append(["ip", "link", "set", "dev", port["netdev"], "down"])
            undo.append(["ip", "link", "set", "dev", port["netdev"], "up"])
    return _hw_plan(host, hw, f"{', '.join(what)} DOWN/Disabled", do=do, undo=undo)


def plan_port_width(host: str, args: list[str]) -> Plan:
    _nargs("port-width", args, 2, 2, "DEV[/PORT] WIDTH (e.g. mlx5_0 2X)")
    width = args[1].upper()
    if width not in rates.WIDTHS:
        raise FaultError(f"{args[1]!r} is not a link width (one of {', '.join(rates.WIDTHS)})")
    hw = _load_hw(host)
    what = []
    for hca, port in _select_ports(hw, args[0]):
        old_lanes = rates.WIDTHS.get(str(port.get("width", "4X")).upper(), 4)
        if port.get("link_layer") == "InfiniBand":
            port["rate_gbps"] = int(rates.ib_port_rate(port["speed"], width))
        else:
            port["rate_gbps"] = int(port["rate_gbps"] * rates.WIDTHS[width] // old_lanes)
        port["width"] = width
        what.append(f"{_where(hca, port)} at {width}: {port['rate_gbps']} Gb/s")
    return _hw_plan(host, hw, "; ".join(what))


def plan_port_speed(host: str, args: list[str]) -> Plan:
    _nargs("port-speed", args, 2, 2, "DEV[/PORT] SPEED (e.g. mlx5_0 HDR or mlx5_2 200GbE)")
    spec = args[1]
    hw = _load_hw(host)
    what = []
    for hca, port in _select_ports(hw, args[0]):
        if port.get("link_layer") == "InfiniBand":
            key = spec.upper()
            if key in rates.IB_VARIANTS:
                variant = rates.IB_VARIANTS[key]
                port["speed"], port["width"] = variant.generation, variant.width
            elif key in rates.IB:
                port["speed"] = key
            else:
                raise FaultError(f"{spec!r} is not an InfiniBand speed (one of {', '.join(rates.IB)})")
            port["rate_gbps"] = int(rates.ib_port_rate(port["speed"], port.get("width", "4X")))
        else:
            try:
                gbps = rates.eth_port_rate(spec)
            except ValueError:
                raise FaultError(f"{spec!r} is not an Ethernet speed like 200GbE "
                                 f"({_where(hca, port)} is a RoCE port)") from None
            port["speed"], port["rate_gbps"] = f"{gbps}GbE", gbps
        what.append(f"{_where(hca, port)} at {port['speed']}: {port['rate_gbps']} Gb/s")
    return _hw_plan(host, hw, "; ".join(what))


def plan_flapping(host: str, args: list[str]) -> Plan:
    _nargs("flapping", args, 1, 2, "DEV[/PORT] [FLAPS]")
    flaps = FLAPS
    if len(args) == 2:
        if not args[1].isdigit() or int(args[1]) < 1:
            raise FaultError(f"FLAPS must be a positive number, not {args[1]!r}")
        flaps = int(args[1])
    hw = _load_hw(host)
    what = []
    for hca, port in _select_ports(hw, args[0]):
        port["link_flaps"] = int(port.get("link_flaps", 0)) + flaps
        port["symbol_errors"] = int(port.get("symbol_errors", 0)) + SYMBOL_ERRORS
        what.append(f"{_where(hca, port)} flapped {port['link_flaps']} times, "
                    f"{port['symbol_errors']} symbol errors")
    return _hw_plan(host, hw, "; ".join(what))


def plan_nvlink_inactive(host: str, args: list[str]) -> Plan:
    _nargs("nvlink-inactive", args, 1, 2, "GPU [LINK]")
    hw = _load_hw(host)
    gpu = _gpu(hw, args[0])
    nlinks = int(gpu.get("nvlinks", 0))
    if nlinks == 0:
        raise FaultError(f"GPU {gpu['index']} of {host} has no NVLinks")
    if len(args) == 2:
        if not args[1].isdigit() or int(args[1]) >= nlinks:
            raise FaultError(f"LINK must be 0..{nlinks - 1}, not {args[1]!r}")
        links = [int(args[1])]
    else:
        links = list(range(nlinks))
    gpu["inactive_nvlinks"] = sorted(set(gpu.get("inactive_nvlinks", [])) | set(links))
    desc = f"link {links[0]}" if len(links) == 1 else f"all {nlinks} links"
    return _hw_plan(host, hw, f"GPU {gpu['index']} NVLink {desc} inactive")


def plan_gpu_missing(host: str, args: list[str]) -> Plan:
    _nargs("gpu-missing", args, 1, 1, "GPU (an index)")
    hw = _load_hw(host)
    gpu = _gpu(hw, args[0])
    hw["gpus"] = [g for g in hw["gpus"] if g is not gpu]
    return _hw_plan(host, hw, f"GPU {gpu['index']} ({gpu.get('pci_bus_id', '?')}) fell off the bus")


def plan_wrong_firmware(host: str, args: list[str]) -> Plan:
    _nargs("wrong-firmware", args, 2, 2, "DEV VERSION (e.g. mlx5_0 28.38.1002)")
    if not re.fullmatch(r"\d+\.\d+\.\d+", args[1]):
        raise FaultError(f"{args[1]!r} is not a firmware version like 28.39.1002")
    hw = _load_hw(host)
    hca = next((h for h in hw.get("hcas", []) if h["name"] == args[0]), None)
    if hca is None:
        raise FaultError(f"{host} has no device {args[0]!r} "
                         f"(devices: {', '.join(h['name'] for h in hw.get('hcas', []))})")
    old, hca["fw_ver"] = hca["fw_ver"], args[1]
    return _hw_plan(host, hw, f"{hca['name']} firmware {args[1]} (was {old})")


# --- NIC firmware (emul/firmware.py state; docs/lab-faults.md) -----------------------------------

def _fw_device(host: str, kind: str, spec: str) -> tuple[dict[str, Any], Path, dict[str, Any]]:
    """(hca, its firmware state file on the controller, the state) for DEV (mlx5_0 or a PCI address)."""
    from fabricops_lab.emul import firmware

    hw = _load_hw(host)
    s = spec.lower()
    hca = next((h for h in hw.get("hcas", [])
                if s in (h["name"].lower(), str(h.get("pci", "")).lower(),
                         str(h.get("pci", "")).lower().removeprefix("0000:"))), None)
    if hca is None:
        names = ", ".join(h["name"] for h in hw.get("hcas", []))
        raise FaultError(f"{kind}: {host} has no device {spec!r} (devices: {names})")
    path = paths.host_dir(host) / "hw" / "firmware" / f"{hca['pci']}.json"
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        state = None
    return hca, path, firmware.follow_hardware(state, hca)


def _fw_setting(host: str, kind: str, args: list[str], current_too: bool) -> Plan:
    from fabricops_lab.emul import firmware

    _nargs(kind, args, 3, 3, "DEV KEY VALUE (e.g. mlx5_0 ATS_ENABLED 1)")
    hca, path, state = _fw_device(host, kind, args[0])
    table = firmware.params_for(hca)
    if args[1] not in table:
        raise FaultError(f"{kind}: {hca['name']} has no firmware setting {args[1]!r} "
                         f"(settings: {', '.join(table)})")
    try:
        value = firmware.parse_value(table[args[1]], args[2])
    except firmware.ToolError:
        raise FaultError(f"{kind}: {args[2]!r} is not a value {args[1]} takes") from None
    old = firmware.render(table[args[1]], state["next"][args[1]])
    state["next"][args[1]] = value
    if current_too:
        state["current"][args[1]] = value
    new = firmware.render(table[args[1]], value)
    what = "next boot and current" if current_too else "next boot only (reset pending)"
    return Plan(summary=f"{hca['name']} {args[1]}={new} (was {old}), {what}",
                files={path: (json.dumps(state, sort_keys=True) + "\n").encode()})


def plan_fw_setting_drift(host: str, args: list[str]) -> Plan:
    """Someone set a firmware setting and reset the NIC: next and current both changed."""
    return _fw_setting(host, "fw-setting-drift", args, current_too=True)


def plan_reset_required(host: str, args: list[str]) -> Plan:
    """A firmware setting was set and the NIC not reset yet: next changed, current not."""
    return _fw_setting(host, "reset-required", args, current_too=False)


def plan_fw_version_mismatch(host: str, args: list[str]) -> Plan:
    """The NIC was flashed and reset to another release: burned = running = VERSION."""
    _nargs("fw-version-mismatch", args, 2, 2, "DEV VERSION (e.g. mlx5_0 28.36.1010)")
    if not re.fullmatch(r"\d+\.\d+\.\d+", args[1]):
        raise FaultError(f"fw-version-mismatch: {args[1]!r} is not a firmware version like 28.39.1002")
    hca, path, state = _fw_device(host, "fw-version-mismatch", args[0])
    old = state["running"]
    state["burned"] = state["running"] = args[1]
    return Plan(summary=f"{hca['name']} runs firmware {args[1]} (burned and running; was {old})",
                files={path: (json.dumps(state, sort_keys=True) + "\n").encode()}, resync=True)


def plan_driver_version(host: str, args: list[str]) -> Plan:
    """The NVIDIA driver was updated and the fabric manager repository lags (docs/fabric-services.md):
    hardware.json ``driver_version`` (what ``nvidia-smi`` reports and what ``nv-fabricmanager``
    must match), as ``fabric_services.set_driver_version`` sets it; clear restores the bytes."""
    _nargs("driver-version", args, 1, 1, "VERSION (e.g. 550.90.07)")
    if not re.fullmatch(r"\d{3,4}\.\d+(\.\d+)?", args[0]):
        raise FaultError(f"{args[0]!r} is not an NVIDIA driver version like 550.90.07")
    hw = _load_hw(host)
    old, hw["driver_version"] = hw.get("driver_version"), args[0]
    return _hw_plan(host, hw, f"NVIDIA driver {args[0]} (was {old}); the fabric manager must match it")


# --- GB200 / GB300 NVL72 (IMEX, NVLink switch trays; docs/lab-faults.md, docs/lab-fidelity.md) -------

IMEX_CHANNEL = "/dev/nvidia-caps-imex-channels/channel0"
#: the emulated driver's helper in every host (fabric_services.install_into_root)
DRIVER_LOAD = "/usr/local/sbin/emulated-nvidia-driver-load"
#: NVLink switch trays of an NVL72 rack: 9 trays of 2 NVSwitch chips, every GPU one link to each of
#: the 18 chips (NVIDIA GB200 NVL72: 9 switch trays, 18 NVLinks per Blackwell GPU)
NVL72_SWITCH_TRAYS = 9


def _nvl72(host: str, kind: str) -> dict[str, Any]:
    hw = _load_hw(host)
    if not hw.get("nvlink_domain"):
        raise FaultError(f"{kind}: {host} is not an NVL72 compute tray in an NVLink domain "
                         "(topology hosts[].nvlink_domain)")
    return hw


def plan_imex_peer_down(host: str, args: list[str]) -> Plan:
    """HOST's IMEX stops (killed, so it cannot say goodbye): every other node of its domain shows it
    UNAVAILABLE and not connected in ``nvidia-imex-ctl -N``; clear starts it again."""
    _nargs("imex-peer-down", args, 0, 0, "no arguments")
    _nvl72(host, "imex-peer-down")
    proc = _host_exec(host, ["systemctl", "is-active", "nvidia-imex"], check=False)
    if proc.returncode != 0:
        raise FaultError(f"imex-peer-down: nvidia-imex is not running on {host} "
                         "(run the nvidia_imex role first)")
    return Plan(summary="nvidia-imex killed (its peers see it UNAVAILABLE, connections lost)",
                # the daemon by name, not `systemctl kill`: in a lab host on a cgroup v1 machine systemd
                # can neither walk the unit's cgroup ("Input/output error") nor always guess its main PID
                do=[["pkill", "--signal", "KILL", "-x", "nvidia-imex"]],
                undo=[["systemctl", "restart", "nvidia-imex"]])


def plan_imex_channel_missing(host: str, args: list[str]) -> Plan:
    """IMEX channel0 is gone, as after a reboot without NVreg_CreateImexChannel0=1 (NVIDIA IMEX
    guide, imexchannels.html: channels do not persist across a reboot)."""
    _nargs("imex-channel-missing", args, 0, 0, "no arguments")
    _nvl72(host, "imex-channel-missing")
    had = _host_exec(host, ["test", "-c", IMEX_CHANNEL], check=False).returncode == 0
    return Plan(summary=f"{IMEX_CHANNEL} removed (as after a reboot without the module option)",
                do=[["rm", "-f", IMEX_CHANNEL]], undo=[[DRIVER_LOAD, "mknod-channel0"]] if had else [])


def plan_nvlink_tray_down(host: str, args: list[str]) -> Plan:
    """The NVLinks between this compute tray and NVLink switch tray TRAY (1..9) are down: on every GPU
    the two links to that tray's NVSwitch chips (links 2(TRAY-1) and 2(TRAY-1)+1, the emulator's
    numbering) are inactive in ``nvidia-smi nvlink -s``."""
    _nargs("nvlink-tray-down", args, 1, 1, f"TRAY (an NVLink switch tray, 1..{NVL72_SWITCH_TRAYS})")
    if not args[0].isdigit() or not 1 <= int(args[0]) <= NVL72_SWITCH_TRAYS:
        raise FaultError(f"TRAY must be 1..{NVL72_SWITCH_TRAYS}, not {args[0]!r}")
    hw = _nvl72(host, "nvlink-tray-down")
    tray = int(args[0])
    links = [2 * (tray - 1), 2 * (tray - 1) + 1]
    for gpu in hw.get("gpus", []):
        gpu["inactive_nvlinks"] = sorted(set(gpu.get("inactive_nvlinks", [])) | set(links))
    return _hw_plan(host, hw, f"NVLink switch tray {tray} unreachable: links {links[0]} and {links[1]} "
                              f"inactive on all {len(hw.get('gpus', []))} GPUs")


# --- PCIe faults (SPEC-19 C; hardware.json "pcie", docs/lab-faults.md) -------------------------

PCIE_SPEEDS = (2.5, 5.0, 8.0, 16.0, 32.0, 64.0)  # GT/s of PCIe Gen1..Gen6
PCIE_WIDTHS = (1, 2, 4, 8, 16, 32)


def _pcie_device(hw: dict[str, Any], spec: str) -> dict[str, Any]:
    """An HCA name, ``GPU<N>`` or a BDF -> its entry in hardware.json pcie.devices."""
    devs = (hw.get("pcie") or {}).get("devices") or []
    if not devs:
        raise FaultError(f"{hw.get('host', 'the host')} has no emulated PCIe tree "
                         "(hardware.json has no 'pcie'; "
                         "re-create the lab with this version)")
    for d in devs:
        if spec in (d.get("name"), d.get("bdf")) and d.get("kind") in ("gpu", "hca"):
            return d
    names = [d["name"] for d in devs if d.get("kind") in ("gpu", "hca")]
    raise FaultError(f"{hw.get('host', 'the host')} has no GPU or HCA {spec!r} on its PCIe tree "
                     f"(one of {', '.join(names)})")


def _pcie_parent(hw: dict[str, Any], dev: dict[str, Any]) -> dict[str, Any] | None:
    bus = int(dev["bdf"].split(":")[1], 16)
    return next((d for d in hw["pcie"]["devices"] if (d.get("bus") or {}).get("secondary") == bus), None)


def plan_pcie_downtrained(host: str, args: list[str]) -> Plan:
    """The link of an HCA or GPU trained below its capability: LnkSta / current_link_* drop (on the
    device and on the switch port at the other end of that link), LnkCap / max_link_* stay."""
    _nargs("pcie-downtrained", args, 1, 3, "DEV|GPU<N> [WIDTH] [SPEED] (e.g. mlx5_0 8 16)")
    width, speed = 8, 16.0
    if len(args) >= 2:
        token = args[1].lower().removeprefix("x")
        if not token.isdigit() or int(token) not in PCIE_WIDTHS:
            widths = ", ".join(map(str, PCIE_WIDTHS))
            raise FaultError(f"WIDTH must be a PCIe width like 8 or x8 (one of {widths}), "
                             f"not {args[1]!r}")
        width = int(token)
    if len(args) == 3:
        token = args[2].lower().replace(" ", "").removesuffix("gt/s")
        try:
            speed = float(token)
        except ValueError:
            speed = -1.0
        if speed not in PCIE_SPEEDS:
            speeds = ", ".join(f"{v:g}" for v in PCIE_SPEEDS)
            raise FaultError(f"SPEED must be a PCIe speed in GT/s (one of {speeds}), "
                             f"not {args[2]!r}")
    hw = _load_hw(host)
    dev = _pcie_device(hw, args[0])
    cap = dev.get("lnkcap") or {}
    if width > int(cap.get("width", 0)) or speed > float(cap.get("speed_gts", 0)):
        raise FaultError(f"{dev['name']} is capable of x{cap.get('width')} {cap.get('speed_gts'):g} GT/s; "
                         f"x{width} {speed:g} GT/s is not below that")
    if width == int(cap["width"]) and speed == float(cap["speed_gts"]):
        raise FaultError(f"x{width} {speed:g} GT/s is {dev['name']}'s full capability, "
                         "not a downtrained link")
    # one link: the device's functions (a dual-port card's mlx5_2 and mlx5_3 at aa:00.0/.1) and
    # the downstream port at its other end all report it
    slot = dev["bdf"].rsplit(".", 1)[0]
    same_link = [d for d in hw["pcie"]["devices"] if d["bdf"].rsplit(".", 1)[0] == slot]
    for d in [*same_link, _pcie_parent(hw, dev)]:
        if d is not None:
            d["lnksta"] = {"speed_gts": speed, "width": width}
    return _hw_plan(host, hw, f"{dev['name']} ({dev['bdf']}) PCIe link trained at x{width} {speed:g} GT/s "
                              f"(capable of x{cap['width']} {cap['speed_gts']:g} GT/s)")


def plan_acs_enabled(host: str, args: list[str]) -> Plan:
    """ACS redirect on: ReqRedir+ CmpltRedir+ SrcValid+ in ACSCtl of the switch downstream ports
    above DEV (all of the host's downstream ports without an argument), as a BIOS with ACS
    enabled or a kernel booted with pci=config_acs leaves them (NCCL docs, "PCI Access Control
    Services (ACS)"; NVIDIA/nccl#304: ``SrcValid+ TransBlk- ReqRedir+ CmpltRedir+``)."""
    _nargs("acs-enabled", args, 0, 1, "[DEV|GPU<N>]")
    hw = _load_hw(host)
    devs = (hw.get("pcie") or {}).get("devices") or []
    if args:
        dev = _pcie_device(hw, args[0])
        by_sec = {d["bus"]["secondary"]: d for d in devs if d.get("bus")}
        chosen, cur = [], by_sec.get(int(dev["bdf"].split(":")[1], 16))
        while cur is not None and cur not in chosen:
            chosen.append(cur)
            cur = by_sec.get(cur["bus"]["primary"])
        ports = [d for d in chosen if d.get("kind") == "downstream_port"]
        where = f"above {dev['name']}"
    else:
        ports = [d for d in devs if d.get("kind") == "downstream_port"]
        where = "on every switch downstream port"
    if not ports:
        raise FaultError(f"{host} has no PCIe switch downstream port {where}")
    for d in ports:
        d["acs_ctl"] = {**(d.get("acs_ctl") or {}), "SrcValid": True, "ReqRedir": True, "CmpltRedir": True}
    return _hw_plan(host, hw, f"ACS ReqRedir+ CmpltRedir+ {where}: {', '.join(d['bdf'] for d in ports)}")


def plan_iommu_translated(host: str, args: list[str]) -> Plan:
    """The IOMMU translates DMA (iommu.passthrough=0 / a default-domain change): every IOMMU group's
    type is DMA-FQ (kernel ABI sysfs-kernel-iommu_groups)."""
    _nargs("iommu-translated", args, 0, 0, "no arguments")
    hw = _load_hw(host)
    groups = (hw.get("pcie") or {}).get("iommu_groups") or {}
    if not groups:
        raise FaultError(f"{host} has no emulated IOMMU groups (hardware.json has no pcie.iommu_groups)")
    hw["pcie"]["iommu_groups"] = dict.fromkeys(groups, "DMA-FQ")
    return _hw_plan(host, hw, f"all {len(groups)} IOMMU groups translated (type DMA-FQ)")


def _write_file_argv(path: str, content: str) -> list[str]:
    return ["sh", "-c", 'mkdir -p "$(dirname "$1")" && printf "%s\\n" "$2" > "$1"', "sh", path, content]


def plan_wrong_ofed(host: str, args: list[str]) -> Plan:
    _nargs("wrong-ofed", args, 1, 1, "VERSION (e.g. 5.8-3.0.7.0)")
    version = args[0].removeprefix("MLNX_OFED_LINUX-")
    if not re.fullmatch(r"\d+\.\d+-\d+(\.\d+)+", version):
        raise FaultError(f"{args[0]!r} is not an MLNX_OFED version like 24.10-1.1.4.0")
    proc = _host_exec(host, ["cat", OFED_RELEASE], check=False)
    previous = proc.stdout if isinstance(proc.stdout, str) else (proc.stdout or b"").decode()
    if proc.returncode == 0:
        undo = [_write_file_argv(OFED_RELEASE, previous.rstrip("\n"))]
    else:
        undo = [["rm", "-f", OFED_RELEASE]]
    return Plan(summary=f"ofed_info reports MLNX_OFED_LINUX-{version}",
                do=[_write_file_argv(OFED_RELEASE, f"MLNX_OFED_LINUX-{version}")], undo=undo)


SSHD_STOP = (
    'if [ -d /run/systemd/system ]; then systemctl stop ssh.socket ssh.service 2>/dev/null; fi; '
    'for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = 1 ] && continue; '
    '[ "$(cat "$d/comm" 2>/dev/null)" = sshd ] && kill "$p" 2>/dev/null; done; true'
)
SSHD_START = "if [ -d /run/systemd/system ]; then systemctl start ssh.service; else /usr/sbin/sshd; fi"


def plan_host_unreachable(host: str, args: list[str]) -> Plan:
    _nargs("host-unreachable", args, 0, 0, "no arguments")
    return Plan(summary="sshd stopped (SSH sessions dropped, connections refused)",
                do=[["sh", "-c", SSHD_STOP]], undo=[["sh", "-c", SSHD_START]])


def plan_qos_reset(host: str, args: list[str]) -> Plan:
    _nargs("qos-reset", args, 1, 1, "NETDEV")
    hw = _load_hw(host)
    if args[0] not in _netdevs(hw):
        raise FaultError(f"{host} has no netdev {args[0]!r} (netdevs: {', '.join(_netdevs(hw))})")
    return Plan(summary=f"{args[0]} QoS back to firmware defaults (as after a driver reload)",
                do=[["rm", "-f", f"{QOS_DIR}/{args[0]}.json"]])


#: The wrong-device fault's state, next to hardware.json in the host's emulated hardware dir
#: (/var/lib/emulated-hw/wrong-device.json inside the host): {"DEV": "OTHER", ...}.
WRONG_DEVICE = "wrong-device.json"


def wrong_device_path(host: str) -> Path:
    return _hw_path(host).parent / WRONG_DEVICE


def plan_wrong_device(host: str, args: list[str]) -> Plan:
    """A test asked for DEV but its traffic went through OTHER, and it still printed DEV
    (awslabs/awsome-distributed-ai#1221: a per-device perftest silently used the default device
    and passed with a device name that did not exist). The lab's perftest reads the mapping from
    wrong-device.json; only the port counters of OTHER move, so the negative control catches it."""
    _nargs("wrong-device", args, 2, 2, "DEV OTHER (e.g. mlx5_2 mlx5_0)")
    hw = _load_hw(host)
    names = [h["name"] for h in hw.get("hcas", [])]
    for dev in args:
        if dev not in names:
            raise FaultError(f"{host} has no device {dev!r} (devices: {', '.join(names)})")
    dev, other = args
    if dev == other:
        raise FaultError(f"wrong-device needs two different devices, not {dev} twice")
    path = wrong_device_path(host)
    try:
        mapping = json.loads(path.read_text()) if path.exists() else {}
    except ValueError as exc:
        raise FabricopsError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(mapping, dict):
        mapping = {}
    mapping[dev] = other
    data = (json.dumps(mapping, indent=2, sort_keys=True) + "\n").encode()
    return Plan(summary=f"tests that ask for {dev} run on {other} (and still say {dev})", files={path: data})


def _switch_faults_plan(t: Target, update: Callable[[dict[str, Any]], str]) -> Plan:
    path = paths.switch_dir(t.name) / "faults.json"
    try:
        current = json.loads(path.read_text())
    except (OSError, ValueError):
        current = {}
    summary = update(current)
    data = (json.dumps(current, indent=2, sort_keys=True) + "\n").encode()
    return Plan(summary=summary, files={path: data})


def plan_session_drop(t: Target, args: list[str]) -> Plan:
    _nargs("session-drop", args, 1, 1, "N (configuration commands before the session drops)")
    if t.os == "ib":
        raise FaultError(f"{t.name} is an InfiniBand switch: it has no management session to drop")
    if not args[0].isdigit() or int(args[0]) < 1:
        raise FaultError(f"N must be a positive number, not {args[0]!r}")
    n = int(args[0])

    def update(cur: dict[str, Any]) -> str:
        cur["drop_after_commands"] = n
        return f"the next session drops after {n} configuration commands"

    return _switch_faults_plan(t, update)


def _switch_port(t: Target, port: str) -> str:
    if port not in t.ports:
        sample = ", ".join(t.ports[:3]) + (", ..." if len(t.ports) > 3 else "")
        raise FaultError(f"{t.name} has no port {port!r} (ports: {sample})")
    return port


def _ib_switch_plan(t: Target, port: str, update: Callable[[dict[str, Any]], str]) -> Plan:
    """An InfiniBand switch's fault: its fabric file's port entry (no management session runs)."""
    path = paths.fabric_dir() / "switches" / f"{t.name}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {"name": t.name, "os": "ib", "ports": {p: {"link": "up"} for p in t.ports}}
    summary = update(data.setdefault("ports", {}).setdefault(port, {}))
    return Plan(summary=summary, files={path: (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()})


def _switch_link_plan(t: Target, kind: str, port: str, update: Callable[[dict[str, Any], dict], str]) -> Plan:
    """A fault on the link trained at a switch port (host-facing or inter-switch alike): UPDATE gets
    the port's fault entry (the fabric file's port on an InfiniBand switch, ``port_faults.PORT`` of
    the emulator's faults.json on Onyx/Cumulus, which the emulator merges into its fabric file) and
    what is cabled there."""
    _switch_port(t, port)
    link = t.cabled.get(port)
    if link is None:
        raise FaultError(f"{t.name} port {port} is not cabled (no host cable or link uses it): {kind} "
                         "needs a link to degrade")

    def one_end(t: Target, port: str) -> Plan:
        if t.os == "ib":
            return _ib_switch_plan(t, port, lambda entry: update(entry, link))

        def faults(cur: dict[str, Any]) -> str:
            return update(cur.setdefault("port_faults", {}).setdefault(port, {}), link)

        return _switch_faults_plan(t, faults)

    return _both_ends(t, port, one_end)


def _both_ends(t: Target, port: str, one_end: Callable[[Target, str], Plan]) -> Plan:
    """ONE_END's plan for PORT, and for an inter-switch link the same on the peer's port: a link
    trains (and goes down, and flaps) at both ends alike. A host cable's host side stays as it is
    (the host faults change that)."""
    plan = one_end(t, port)
    peer = (t.cabled.get(port) or {}).get("peer_target")
    if peer is not None:
        pport = t.cabled[port]["peer_switch"][1]
        other = one_end(peer, pport)
        plan.files.update(other.files)
        plan.summary += f"; the link's other end {peer.name} port {pport} too"
    return plan


def _lanes(width: str) -> int:
    return rates.WIDTHS.get(str(width).upper(), 4)


def _link_rate(link: dict[str, Any], speed: str, width: str) -> int:
    """Gb/s of the link at SPEED and WIDTH: InfiniBand from the rate table; Ethernet SPEED's rate
    scaled by lanes (as the host port-width fault does: 400GbE at 2X = 200)."""
    if link["link_layer"] == "InfiniBand":
        return int(rates.ib_port_rate(speed, width))
    return int(rates.eth_port_rate(speed) * _lanes(width) // _lanes(link["width"]))


def plan_switch_port_width(t: Target, args: list[str]) -> Plan:
    _nargs("port-width", args, 2, 2, "PORT WIDTH (e.g. swp31 2X)")
    width = args[1].upper()
    if width not in rates.WIDTHS:
        raise FaultError(f"{args[1]!r} is not a link width (one of {', '.join(rates.WIDTHS)})")

    def update(entry: dict[str, Any], link: dict[str, Any]) -> str:
        speed = str(entry.get("speed", link["speed"]))
        entry.update({"speed": speed, "width": width, "gbps": _link_rate(link, speed, width)})
        return f"port {args[0]} ({link['peer']}) at {width}: {entry['gbps']} Gb/s"

    return _switch_link_plan(t, "port-width", args[0], update)


def plan_switch_port_speed(t: Target, args: list[str]) -> Plan:
    _nargs("port-speed", args, 2, 2, "PORT SPEED (e.g. 33 HDR or swp31 200GbE)")
    spec = args[1]
    port = _switch_port(t, args[0])
    link = t.cabled.get(port)
    if link is not None and link["link_layer"] == "InfiniBand":
        key = spec.upper()
        if key not in rates.IB and key not in rates.IB_VARIANTS:
            raise FaultError(f"{spec!r} is not an InfiniBand speed (one of {', '.join(rates.IB)})")
    elif link is not None:
        try:
            rates.eth_port_rate(spec)
        except ValueError:
            raise FaultError(f"{spec!r} is not an Ethernet speed like 200GbE ({t.name} port {port} is an "
                             "Ethernet port)") from None

    def update(entry: dict[str, Any], link: dict[str, Any]) -> str:
        width = str(entry.get("width", link["width"]))
        if link["link_layer"] == "InfiniBand":
            key = spec.upper()
            variant = rates.IB_VARIANTS.get(key)
            speed, width = (variant.generation, variant.width) if variant else (key, width)
            entry.update({"speed": speed, "width": width, "gbps": _link_rate(link, speed, width)})
        else:
            speed = f"{rates.eth_port_rate(spec)}GbE"
            entry.update({"speed": speed, "width": width, "gbps": int(rates.eth_port_rate(spec))})
        return f"port {port} ({link['peer']}) at {entry['speed']}: {entry['gbps']} Gb/s"

    return _switch_link_plan(t, "port-speed", port, update)


def plan_switch_flapping(t: Target, args: list[str]) -> Plan:
    _nargs("flapping", args, 1, 2, "PORT [FLAPS]")
    flaps = FLAPS
    if len(args) == 2:
        if not args[1].isdigit() or int(args[1]) < 1:
            raise FaultError(f"FLAPS must be a positive number, not {args[1]!r}")
        flaps = int(args[1])

    def update(entry: dict[str, Any], link: dict[str, Any]) -> str:
        entry["flaps"] = int(entry.get("flaps", 0)) + flaps
        entry["symbol_errors"] = int(entry.get("symbol_errors", 0)) + SYMBOL_ERRORS
        return (f"port {args[0]} ({link['peer']}) flapped {entry['flaps']} times, "
                f"{entry['symbol_errors']} symbol errors")

    return _switch_link_plan(t, "flapping", args[0], update)


def plan_switch_pfc_off(t: Target, args: list[str]) -> Plan:
    _nargs("pfc-off", args, 1, 1, "PORT")
    if t.os == "ib":
        raise FaultError(f"{t.name} is an InfiniBand switch: PFC is an Ethernet (RoCE) setting")
    port = _switch_port(t, args[0])

    def update(cur: dict[str, Any]) -> str:
        off = [str(p) for p in cur.get("pfc_off", [])]
        if port not in off:
            off.append(port)
        cur["pfc_off"] = off
        return f"port {port} PFC off (running configuration, as an operator would)"

    return _switch_faults_plan(t, update)


def plan_switch_port_down(t: Target, args: list[str]) -> Plan:
    _nargs("port-down", args, 1, 1, "PORT")
    return _both_ends(t, _switch_port(t, args[0]), _port_down_one_end)


def _port_down_one_end(t: Target, port: str) -> Plan:
    if t.os == "ib":

        def down(entry: dict[str, Any]) -> str:
            entry["link"] = "down"
            return f"port {port} link down"

        return _ib_switch_plan(t, port, down)

    def update(cur: dict[str, Any]) -> str:
        down = [str(p) for p in cur.get("ports_down", [])]
        if port not in down:
            down.append(port)
        cur["ports_down"] = down
        return f"port {port} link down"

    return _switch_faults_plan(t, update)


def plan_swapped_cable(host: str, args: list[str]) -> Plan:
    """Two cables swapped at the switch end: NETDEV_A of HOST now lands on NETDEV_B's switch port
    and the other way round (NETDEV_B may be another host's, ``gpu02:enp170s0f0np0``: a two-tier
    rack has one port per fabric on a host). Written to ``fabric/cabling-override.json`` on the
    controller side (the fabric directory is read-only in the hosts), which the emulated discovery
    tools lay over cabling.json (emul/fabricdisc.py)."""
    from fabricops_lab.emul import fabricdisc

    _nargs("swapped-cable", args, 2, 2, "NETDEV_A [HOST_B:]NETDEV_B (e.g. ibp26s0 ibp60s0)")
    host_b, _, nd_b = args[1].rpartition(":")
    host_b = host_b or host
    built = fabricdisc.as_built(paths.fabric_dir())
    if not built["links"]:
        raise FabricopsError(f"{paths.fabric_dir() / 'cabling.json'} lists no cables; is the lab up?")

    def cable(h: str, nd: str) -> dict[str, Any]:
        found = next((ln for ln in built["links"] if ln.get("host") == h and ln.get("netdev") == nd), None)
        if found is None:
            have = [ln["netdev"] for ln in built["links"] if ln.get("host") == h]
            raise FaultError(f"{h} has no cabled netdev {nd!r} (cabled: {', '.join(have) or 'none'})")
        return found

    a, b = cable(host, args[0]), cable(host_b, nd_b)
    if a is b:
        raise FaultError("swapped-cable needs two different ports")
    oses = {ln["switch"]: (built["switches"].get(ln["switch"]) or {}).get("os") for ln in (a, b)}
    if (oses[a["switch"]] == "ib") != (oses[b["switch"]] == "ib"):
        raise FaultError(f"{host} {args[0]} and {host_b} {nd_b} are on different fabrics (InfiniBand and "
                         "Ethernet): such cables cannot be swapped")
    new_a = dict(a, switch=b["switch"], switch_port=b["switch_port"])
    new_b = dict(b, switch=a["switch"], switch_port=a["switch_port"])
    path = paths.fabric_dir() / fabricdisc.OVERRIDE
    try:
        current = json.loads(path.read_text())
    except (OSError, ValueError):
        current = {}
    keep = [o for o in current.get("links") or []
            if (o.get("host"), o.get("netdev")) not in {(host, args[0]), (host_b, nd_b)}]
    data = {"links": [*keep, new_a, new_b]}
    return Plan(
        summary=f"{host} {a['hca']} now on {new_a['switch']} {new_a['switch_port']}, "
                f"{host_b} {b['hca']} now on {new_b['switch']} {new_b['switch_port']} (cables swapped)",
        files={path: (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()},
    )


# --- kernels, DKMS, Secure Boot (SPEC-20 C; docs/lab-faults.md) -----------------------------------

#: runs emul/kernels.py inside the host (the emul package is in /usr/lib/emulated-hw)
_KERNELS_PY = ("import sys; sys.path.insert(0, '/usr/lib/emulated-hw'); from emul import kernels; "
               "sys.exit(kernels.main(sys.argv[1:]))")
_KERNEL_RE = re.compile(r"[0-9][A-Za-z0-9.+~_-]{0,63}")


def _kernel_key(k: str) -> list[tuple[int, Any]]:
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"[.\-+~_]", k)]


def _next_kernel(running: str) -> str:
    """6.1.0-18-amd64 -> 6.1.0-19-amd64 (Debian's ABI number, the part a point release bumps)."""
    m = re.fullmatch(r"(\d+\.\d+\.\d+-)(\d+)(.*)", running)
    if m:
        return f"{m.group(1)}{int(m.group(2)) + 1}{m.group(3)}"
    # Other kernels (the lab hosts run the controller's: 6.18.44-fc-v1098, 6.8.0-1015-aws): the
    # next stable patch level of the same upstream release, the suffix kept.
    m = re.fullmatch(r"(\d+\.\d+\.)(\d+)(.*)", running)
    if not m:
        raise FaultError(f"cannot derive a newer kernel from {running!r}: give VERSION")
    return f"{m.group(1)}{int(m.group(2)) + 1}{m.group(3)}"


def plan_kernel_upgrade(host: str, args: list[str]) -> Plan:
    no_headers = "--no-headers" in args
    rest = [a for a in args if a != "--no-headers"]
    _nargs("kernel-upgrade", rest, 0, 1, "[VERSION] [--no-headers]")
    running = str(_load_hw(host).get("kernel") or "")
    version = rest[0] if rest else _next_kernel(running)
    if not _KERNEL_RE.fullmatch(version):
        raise FaultError(f"{version!r} is not a kernel release like 6.1.0-19-amd64")
    if running and _kernel_key(version) <= _kernel_key(running):
        raise FaultError(f"{version} is not newer than the running kernel {running}: it would not be "
                         "the next boot kernel")
    install = ["python3", "-c", _KERNELS_PY, "install", version, *(["--no-headers"] if no_headers else [])]
    what = "without headers" if no_headers else "with headers"
    return Plan(summary=f"kernel {version} installed ({what}) as the next boot kernel; DKMS modules not "
                        "built for it",
                do=[install], undo=[["python3", "-c", _KERNELS_PY, "remove", version]])


def plan_dkms_missing(host: str, args: list[str]) -> Plan:
    _nargs("dkms-missing", args, 0, 0, "no arguments")
    from fabricops.errors import ParseError
    from fabricops.parsers import dkms as dkms_parser

    running = str(_load_hw(host).get("kernel") or "")
    proc = _host_exec(host, ["dkms", "status"], check=False)
    try:
        status = dkms_parser.parse_status(proc.stdout or "") if proc.returncode == 0 else []
    except ParseError:
        status = []
    mine = [r for r in status if r["kernel"] == running and r["state"] == "installed"]
    if not mine:
        raise FaultError(f"{host} has no DKMS module installed for its running kernel {running} "
                         "(install the DOCA-Host stack first)")
    do = [["dkms", "unbuild", "-m", r["module"], "-v", r["version"], "-k", running] for r in mine]
    undo = [["dkms", "install", "-m", r["module"], "-v", r["version"], "-k", running] for r in mine]
    names = ", ".join(f"{r['module']}/{r['version']}" for r in mine)
    return Plan(summary=f"DKMS {names} removed for the running kernel {running} (still added)",
                do=do, undo=undo)


def plan_secure_boot(host: str, args: list[str]) -> Plan:
    _nargs("secure-boot", args, 0, 1, "[--enrolled]")
    if args and args[0] != "--enrolled":
        raise FaultError(f"secure-boot takes [--enrolled], not {args[0]!r}")
    from fabricops_lab.emul import mokutil

    state_path = paths.host_dir(host) / "hw" / "secureboot.json"
    state = mokutil.load(state_path)  # absent: the default (EFI, Secure Boot off, nothing enrolled)
    state.update({"efi": True, "enabled": True})
    summary = "Secure Boot on; the DKMS signing key is not enrolled"
    if args:
        key = paths.host_dir(host) / "root" / "var/lib/dkms/mok.pub"
        try:
            sha1 = mokutil.key_sha1(key.read_bytes())
        except OSError:
            raise FaultError(f"{host} has no DKMS signing key /var/lib/dkms/mok.pub yet (dkms makes it on "
                             "the first build: install the DOCA-Host stack first)") from None
        state["enrolled"] = sorted(set(state["enrolled"]) | {sha1})
        summary = "Secure Boot on; the DKMS signing key is enrolled"
    data = (json.dumps(state, indent=2, sort_keys=True) + "\n").encode()
    return Plan(summary=summary, files={state_path: data})


HOST_KINDS: dict[str, tuple[Callable[[str, list[str]], Plan], str]] = {
    "port-down": (plan_port_down, "DEV[/PORT]"),
    "port-width": (plan_port_width, "DEV[/PORT] WIDTH"),
    "port-speed": (plan_port_speed, "DEV[/PORT] SPEED"),
    "flapping": (plan_flapping, "DEV[/PORT] [FLAPS]"),
    "nvlink-inactive": (plan_nvlink_inactive, "GPU [LINK]"),
    "gpu-missing": (plan_gpu_missing, "GPU"),
    "wrong-firmware": (plan_wrong_firmware, "DEV VERSION"),
    "fw-setting-drift": (plan_fw_setting_drift, "DEV KEY VALUE"),
    "reset-required": (plan_reset_required, "DEV KEY VALUE"),
    "fw-version-mismatch": (plan_fw_version_mismatch, "DEV VERSION"),
    "wrong-ofed": (plan_wrong_ofed, "VERSION"),
    "driver-version": (plan_driver_version, "VERSION"),
    "host-unreachable": (plan_host_unreachable, ""),
    "qos-reset": (plan_qos_reset, "NETDEV"),
    "wrong-device": (plan_wrong_device, "DEV OTHER"),
    "swapped-cable": (plan_swapped_cable, "NETDEV_A [HOST_B:]NETDEV_B"),
    "pcie-downtrained": (plan_pcie_downtrained, "DEV|GPU<N> [WIDTH] [SPEED]"),
    "acs-enabled": (plan_acs_enabled, "[DEV|GPU<N>]"),
    "iommu-translated": (plan_iommu_translated, ""),
    "kernel-upgrade": (plan_kernel_upgrade, "[VERSION] [--no-headers]"),
    "dkms-missing": (plan_dkms_missing, ""),
    "secure-boot": (plan_secure_boot, "[--enrolled]"),
    "imex-peer-down": (plan_imex_peer_down, ""),
    "imex-channel-missing": (plan_imex_channel_missing, ""),
    "nvlink-tray-down": (plan_nvlink_tray_down, "TRAY"),
}
SWITCH_KINDS: dict[str, tuple[Callable[[Target, list[str]], Plan], str]] = {
    "session-drop": (plan_session_drop, "N"),
    "port-down": (plan_switch_port_down, "PORT"),
    "port-width": (plan_switch_port_width, "PORT WIDTH"),
    "port-speed": (plan_switch_port_speed, "PORT SPEED"),
    "flapping": (plan_switch_flapping, "PORT [FLAPS]"),
    "pfc-off": (plan_switch_pfc_off, "PORT"),
}


# --- inject, clear ------------------------------------------------------------------------------

def _target(lab: dict[str, Any], name: str) -> Target:
    targets = _targets(lab)
    if name not in targets:
        hosts = [n for n, t in targets.items() if t.kind == "host"]
        sws = [n for n, t in targets.items() if t.kind == "switch"]
        raise FaultError(f"no host or switch named {name!r} in the lab (hosts: {', '.join(hosts) or 'none'}; "
                         f"switches: {', '.join(sws) or 'none'})")
    return targets[name]


def inject(target: str, kind: str, args: list[str], lab: dict[str, Any] | None = None) -> dict[str, Any]:
    """Inject one fault; returns its record (also appended to faults.json)."""
    with _locked():
        return _inject(target, kind, args, lab)


def _inject(target: str, kind: str, args: list[str], lab: dict[str, Any] | None) -> dict[str, Any]:
    lab = lab if lab is not None else paths.load_lab()
    t = _target(lab, target)
    if t.kind == "host":
        if kind not in HOST_KINDS:
            raise FaultError(f"{kind!r} is not a host fault (one of {', '.join(HOST_KINDS)})")
        plan = HOST_KINDS[kind][0](t.name, list(args))
    else:
        if kind not in SWITCH_KINDS:
            raise FaultError(f"{kind!r} is not a switch fault (one of {', '.join(SWITCH_KINDS)})")
        plan = SWITCH_KINDS[kind][0](t, list(args))

    records = active()
    backed_up = {f["path"] for r in records for f in r.get("files", [])}
    files = []
    for path, data in plan.files.items():
        if str(path) not in backed_up:
            backup = _backup_path(path)
            backup.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                backup.write_bytes(path.read_bytes())
                files.append({"path": str(path), "backup": str(backup)})
            else:
                files.append({"path": str(path), "backup": None})
        else:
            files.append({"path": str(path), "backup": "shared"})
        _write(path, data)
    record = {
        "target": t.name,
        "target_type": t.kind,
        "kind": kind,
        "args": list(args),
        "summary": plan.summary,
        "since": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": files,
        "resync": plan.resync,
        "undo": plan.undo,
    }
    records.append(record)
    _save(records)
    if plan.resync:
        _resync(t.name)
    for argv in plan.do:
        _host_exec(t.name, argv)
    return record


def clear(target: str | None = None, lab: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Undo every fault on target (all when None), newest first; restore original file bytes."""
    with _locked():
        return _clear(target, lab)


def _clear(target: str | None, lab: dict[str, Any] | None) -> list[dict[str, Any]]:
    records = active()
    if target is not None:
        try:
            lab = lab if lab is not None else paths.load_lab()
        except FabricopsError:
            lab = {}
        known = set(_targets(lab)) | {r["target"] for r in records}
        if target not in known:
            _target(lab, target)  # raises the one-sentence error
    mine = [r for r in records if target is None or r["target"] == target]
    keep = [r for r in records if not (target is None or r["target"] == target)]
    errors = []
    resync: set[str] = set()
    for rec in reversed(mine):
        for argv in rec.get("undo", []):
            try:
                _host_exec(rec["target"], argv)
            except (FabricopsError, OSError) as exc:
                errors.append(f"{rec['target']}: {exc}")
        if rec.get("resync"):
            resync.add(rec["target"])
    for rec in mine:
        for f in rec.get("files", []):
            if f["backup"] == "shared":
                continue
            path = Path(f["path"])
            if f["backup"] is None:
                path.unlink(missing_ok=True)
            else:
                backup = Path(f["backup"])
                _write(path, backup.read_bytes())
                backup.unlink(missing_ok=True)
    _save(keep)
    for host in sorted(resync):
        try:
            _resync(host)
        except (FabricopsError, OSError) as exc:
            errors.append(f"{host}: hwctl sync: {exc}")
    if errors:
        raise FabricopsError("cleared, but some undo steps failed: " + "; ".join(errors))
    return mine


# --- the command --------------------------------------------------------------------------------

KINDS_HELP = "host faults:\n" + "".join(
    f"  fabricops lab fault HOST {k} {u}".rstrip() + "\n" for k, (_, u) in HOST_KINDS.items()
) + "switch faults:\n" + "".join(
    f"  fabricops lab fault SWITCH {k} {u}\n" for k, (_, u) in SWITCH_KINDS.items()
) + "  fabricops lab fault clear [TARGET]\n  fabricops lab fault list [--json]\n"


def register(lab_subparsers) -> None:
    p = lab_subparsers.add_parser(
        "fault", help="inject, list or clear faults (link down, degraded rate, missing GPU, ...)",
        usage="fabricops lab fault TARGET KIND [ARGS ...] | clear [TARGET] | list [--json]",
        description="Inject a fault into the emulated rack, list active faults, or clear them "
                    "(docs/lab-faults.md).",
        epilog=KINDS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="list: print the records as JSON")
    # the options of the kernel-upgrade and secure-boot faults (SPEC-20 C), handed back to the kind
    for flag in ("--no-headers", "--enrolled"):
        p.add_argument(flag, dest="fault_flags", action="append_const", const=flag, help=argparse.SUPPRESS)
    p.add_argument("words", nargs="+", metavar="WORD", help="TARGET KIND [ARGS ...], clear [TARGET] or list")
    p.set_defaults(func=cmd_fault)


def _fmt(rec: dict[str, Any]) -> str:
    args = " ".join(shlex.quote(a) for a in rec["args"])
    head = f"{rec['target']}: {rec['kind']}{' ' + args if args else ''}"
    return f"{head} ({rec['summary']}) since {rec['since']}"


def cmd_fault(args) -> int:
    words = list(args.words) + list(getattr(args, "fault_flags", None) or [])
    if words[0] == "list":
        if len(words) > 1:
            raise FaultError("list takes no arguments")
        records = active()
        if args.json:
            print(json.dumps(records, indent=2))
        elif not records:
            print("no active faults")
        else:
            for rec in records:
                print(_fmt(rec))
        return 0
    if words[0] == "clear":
        if len(words) > 2:
            raise FaultError("clear takes at most one TARGET")
        cleared = clear(words[1] if len(words) == 2 else None)
        where = f" on {words[1]}" if len(words) == 2 else ""
        if not cleared:
            print(f"no active faults{where}")
        for rec in cleared:
            print(f"cleared {_fmt(rec)}")
        return 0
    if len(words) < 2:
        raise FaultError(f"give a fault kind after {words[0]} (see fabricops lab fault --help)")
    rec = inject(words[0], words[1], words[2:])
    print(_fmt(rec))
    return 0
