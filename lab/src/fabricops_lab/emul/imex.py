"""Emulated NVIDIA IMEX (stdlib only): ``nvidia-imex``, ``nvidia-imex-ctl`` and the IMEX channel
device of the emulated NVIDIA driver. docs/lab-fidelity.md, "GB200 / GB300 NVL72 compute trays".

Sources:

- [GUIDE] NVIDIA IMEX guide, docs.nvidia.com/multi-node-nvlink-systems/imex-guide/: ``config.html``
  (config.cfg keys, IMEX_NODE_CONFIG_FILE, SERVER_PORT, BIND_INTERFACE_IP, IMEX_CMD_ENABLED/PORT),
  ``cmdservice.html`` (``nvidia-imex-ctl`` usage: ``-c``, ``-N``, ``-n``, ``-q``, ``-j``, ``-H``),
  ``imexchannels.html`` (channels are not created by default and do not persist across a reboot;
  ``NVreg_CreateImexChannel0=1`` makes the driver create channel0 when it loads; ``mknod`` with the
  major of ``nvidia-caps-imex-channels`` in ``/proc/devices``).
- [PC] the ``nvidia-imex-ctl -N`` capture of an 18-node GB200 domain in AWS ParallelCluster's
  P6e-GB200 IMEX documentation (driver 570.172): the legend, the timestamp line, ``Node #N - IP -
  STATUS - Version: X.Y`` with its column widths, the ``Nodes From\\To`` matrix and
  ``Domain State: UP``; the one-node capture in a kubernetes-sigs/dra-driver-nvidia-gpu issue (legend
  without the ``!V!``/``!M!`` lines, ``nvidia-imex-ctl -q`` printing ``READY``).
- [JSON] NVIDIA/ai-cloud-validation's IMEX domain test (``_imex_up_payload``, "schema confirmed live
  against nvidia-imex-ctl -N -j -H"): ``{"nodes": {"0": {"status", "host", "hostName",
  "connections": {"0": {"host", "status", "changed"}}}}, "timestamp", "status"}``; statuses READY /
  UNAVAILABLE, connection statuses CONNECTED / INVALID, domain UP / DOWN.
- [DCGM] NVIDIA DCGM ``dcgm_fields.h`` (DCGM_FI_IMEX_DOMAIN_STATUS "UP, DOWN, DEGRADED";
  DCGM_FI_IMEX_DAEMON_STATUS INITIALIZING ... READY, SHUTTING_DOWN, UNAVAILABLE).
- [KTI] NVIDIA/k8s-test-infra nvml-mock: a container's ``/proc/devices`` is the host kernel's, so the
  mock bind-mounts a rendered one that lists ``nvidia-caps-imex-channels`` (the lab does the same).
- Linux ``fs/char_dev.c`` (``find_dynamic_major``): a dynamic character major is the highest free
  one from 254 down to 234.

**Peers.** Every running ``nvidia-imex`` writes ``/var/lib/emulated-fabric/imex/<IP>.json``
(``{"ip", "host", "version", "nodes", "state", "started", "stopped"}``; the directory is shared and
writable in every lab host) and touches ``imex/heartbeat/<IP>`` every second; a node whose heartbeat
is older than :data:`STALE_S` is not running (a killed daemon). ``nvidia-imex-ctl -N`` on one node
reads the node list *its* daemon read at start (IMEX reads its files only at start) and the peers'
records.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from . import devstate
from .services import _err, _hw, _out  # the emulated tools' output and hardware helpers

CONFIG = "/etc/nvidia-imex/config.cfg"
DEFAULT_NODES = "/etc/nvidia-imex/nodes_config.cfg"
VERSION_FILE = "usr/share/nvidia-imex/emulated-version"
PEER_DIR = "var/lib/emulated-fabric/imex"
LOCAL_STATE = "run/emulated-hw/imex.json"
LOG = "var/log/nvidia-imex.log"
PROC_DEVICES = "proc/devices"
#: the kernel's own /proc/devices, kept at the first driver load of a boot (run/ is a tmpfs)
KERNEL_DEVICES = "run/emulated-hw/proc-devices.kernel"
RENDERED_DEVICES = "run/emulated-hw/proc-devices"
CHANNEL_DEVICE = "nvidia-caps-imex-channels"
CHANNEL_DIR = "dev/nvidia-caps-imex-channels"
CHANNEL_MODE = 0o666
MODPROBE_DIRS = ("etc/modprobe.d", "run/modprobe.d", "lib/modprobe.d")
STALE_S = 10.0
#: the models of NVL72 compute trays (4 GPUs each, one NVLink domain of up to 18 trays)
NVL72_MODELS = ("NVIDIA GB200", "NVIDIA GB300")

LEGEND = [
    "Connectivity Table Legend:",
    "I - Invalid - Node wasn't reachable, no connection status available",
    "N - Never Connected",
    "R - Recovering - Connection was lost, but clean up has not yet been triggered.",
    "D - Disconnected - Connection was lost, and clean up has been triggreed.",
    "A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.",
    "!V! - Version mismatch, communication disabled.",
    "!M! - Node map mismatch, communication disabled.",
    "C - Connected - Ready for operation",
]
#: matrix letter -> the JSON connection status ([JSON] has CONNECTED and INVALID; the others are the
#: legend's words in the same form, not from a capture)
CONN_JSON = {
    "C": "CONNECTED",
    "I": "INVALID",
    "N": "NEVER_CONNECTED",
    "D": "DISCONNECTED",
    "!V!": "VERSION_MISMATCH",
    "!M!": "NODE_MAP_MISMATCH",
}
USAGE = (
    "Usage: nvidia-imex-ctl [-i <IP> <PORT>|-u <unix domain socket path>|-c <nvidia-imex config.cfg path>] "
    "<-n|-N|-q|-s|-d|-m> [-t <timeout>]"
)


# --- the driver: /proc/devices and the channel device --------------------------------------------


def registers_channels(hw: dict[str, Any]) -> bool:
    """The loaded driver registers ``nvidia-caps-imex-channels``: GPUs present and the open kernel
    module (what fabricops.imex.channel_plan asks for)."""
    return bool(hw.get("gpus")) and str(hw.get("gpu_kernel_module") or "open") == "open"


def _kernel_devices() -> str:
    kept = devstate.path(KERNEL_DEVICES)
    if kept.is_file():
        return kept.read_text()
    try:
        text = devstate.path(PROC_DEVICES).read_text()
    except OSError:
        text = "Character devices:\n  1 mem\n  4 tty\n\nBlock devices:\n  8 sd\n"
    text = "".join(ln + "\n" for ln in text.splitlines() if not ln.strip().endswith(CHANNEL_DEVICE))
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(text)
    return text


def _char_majors(text: str) -> set[int]:
    majors, section = set(), None
    for ln in text.splitlines():
        s = ln.strip()
        if s.endswith("devices:"):
            section = s.split()[0].lower()
        elif section == "character" and s.split()[:1] and s.split()[0].isdigit():
            majors.add(int(s.split()[0]))
    return majors


def dynamic_major(text: str) -> int:
    """The highest free character major from 254 down to 234 (fs/char_dev.c find_dynamic_major)."""
    used = _char_majors(text)
    for major in range(254, 233, -1):
        if major not in used:
            return major
    raise OSError("no free dynamic character major")


def render_devices(text: str, major: int) -> str:
    """``/proc/devices`` with ``MAJOR nvidia-caps-imex-channels`` among the character devices, in
    number order (the kernel lists them sorted by major)."""
    lines = text.splitlines()
    entry = f"{major:>3} {CHANNEL_DEVICE}"
    start = next(
        (i for i, ln in enumerate(lines) if ln.strip().lower().startswith("character devices")), None
    )
    if start is None:
        return "\n".join(["Character devices:", entry, "", *lines]) + "\n"
    at = start + 1
    while at < len(lines) and lines[at].strip() and not lines[at].strip().endswith("devices:"):
        first = lines[at].split()[0]
        if first.isdigit() and int(first) > major:
            break
        at += 1
    return "\n".join([*lines[:at], entry, *lines[at:]]) + "\n"


def channel_option() -> bool:
    """``options nvidia ... NVreg_CreateImexChannel0=1`` in modprobe.d (the last value wins, as the
    kernel takes the last of a repeated module parameter)."""
    value = None
    files: dict[str, Path] = {}
    for d in reversed(MODPROBE_DIRS):  # /etc overrides a same-named file in /run and /lib
        base = devstate.path(d)
        if base.is_dir():
            for f in base.glob("*.conf"):
                files[f.name] = f
    for name in sorted(files):
        try:
            lines = files[name].read_text().splitlines()
        except OSError:
            continue
        for ln in lines:
            words = ln.split("#", 1)[0].split()
            if len(words) >= 3 and words[0] == "options" and words[1] in ("nvidia",):
                for w in words[2:]:
                    key, _, val = w.partition("=")
                    if key == "NVreg_CreateImexChannel0":
                        value = val.strip()
    return value == "1"


def channel_path() -> Path:
    return devstate.path(CHANNEL_DIR) / "channel0"


def create_channel(major: int) -> None:
    """What the driver does at load with NVreg_CreateImexChannel0=1: channel0 (c MAJOR 0)."""
    d = devstate.path(CHANNEL_DIR)
    d.mkdir(parents=True, exist_ok=True)
    target = d / "channel0"
    if not target.exists():
        os.mknod(target, CHANNEL_MODE | 0o020000, os.makedev(major, 0))
    os.chmod(target, CHANNEL_MODE)


def driver_load(mount: bool | None = None) -> str:
    """The emulated NVIDIA driver loading at boot (``emulated-nvidia-driver.service``): register the
    IMEX channel major in /proc/devices (bind-mounted over the kernel's in a lab host) and create
    channel0 only if modprobe.d asks for it ([GUIDE] imexchannels.html). /dev and /run are fresh
    at every boot of a lab host, so a channel made by hand is gone after a restart."""
    hw = _hw()
    do_mount = (str(devstate.root()) == "/") if mount is None else mount
    if not registers_channels(hw):
        return "no IMEX channel device (no GPU or not the open kernel module)"
    if not hw.get("nvlink_domain"):
        # The real driver registers the channel device on any GPU host with the open module; the lab
        # renders it only on NVL72 trays (the hosts IMEX runs on), so an HGX host's /proc/devices stays
        # the kernel's own, unmounted (docs/lab-fidelity.md, "Known to differ").
        return "no IMEX channel device rendered (not an NVLink domain tray in the lab)"
    kernel = _kernel_devices()
    major = dynamic_major(kernel)
    rendered = render_devices(kernel, major)
    if do_mount:
        target = devstate.path(RENDERED_DEVICES)
        target.write_text(rendered)
        import subprocess

        with open("/proc/self/mounts") as f:
            bound = any(ln.split()[1:2] == ["/proc/devices"] for ln in f)
        if not bound:
            subprocess.run(["mount", "--bind", str(target), "/proc/devices"], check=True)
    else:
        devstate.path(PROC_DEVICES).parent.mkdir(parents=True, exist_ok=True)
        devstate.path(PROC_DEVICES).write_text(rendered)
    if channel_option():
        create_channel(major)
        return f"{CHANNEL_DEVICE} major {major}; channel0 created (NVreg_CreateImexChannel0=1)"
    return f"{CHANNEL_DEVICE} major {major}; no channel created"


def current_major() -> int | None:
    """The major /proc/devices lists for the channel device (None: not registered)."""
    try:
        text = devstate.path(PROC_DEVICES).read_text()
    except OSError:
        return None
    section = None
    for ln in text.splitlines():
        s = ln.strip()
        if s.endswith("devices:"):
            section = s.split()[0].lower()
        elif section == "character" and s.endswith(" " + CHANNEL_DEVICE) and s.split()[0].isdigit():
            return int(s.split()[0])
    return None


def driver_main(argv: list[str]) -> int:
    """``emulated-nvidia-driver-load [mknod-channel0]``: the boot step, or (fault undo) channel0 now."""
    try:
        if argv[:1] == ["mknod-channel0"]:
            major = current_major()
            if major is None:
                _err(f"{CHANNEL_DEVICE} is not registered")
                return 1
            create_channel(major)
            _out(f"channel0 ({major}, 0)")
            return 0
        _out(driver_load())
    except OSError as exc:
        _err(f"emulated-nvidia-driver-load: {exc}")
        return 1
    return 0


# --- configuration --------------------------------------------------------------------------------


def parse_config(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def read_config(path: str) -> dict[str, str]:
    return parse_config(devstate.path(path).read_text())


def read_nodes(path: str) -> list[str]:
    """The node file: one address a line ([GUIDE] config.html IMEX_NODE_CONFIG_FILE)."""
    nodes = []
    for raw in devstate.path(path).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            nodes.append(line)
    return nodes


def local_addresses(hw: dict[str, Any]) -> set[str]:
    out = set()
    dom = hw.get("nvlink_domain") or {}
    if dom.get("address"):
        out.add(str(dom["address"]))
    host = hw.get("host")
    try:
        data = json.loads(devstate.path(f"var/lib/emulated-fabric/hosts/{host}/addresses.json").read_text())
        out.update(str(v) for v in (data.get("mgmt") or {}).values())
    except (OSError, ValueError, AttributeError):
        pass
    return out


def _version() -> str | None:
    try:
        return devstate.path(VERSION_FILE).read_text().strip()
    except OSError:
        return None


def _log(msg: str, level: str = "INFO") -> None:
    with contextlib.suppress(OSError):
        target = devstate.path(LOG)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a") as f:
            f.write(f"[{time.strftime('%b %d %Y %H:%M:%S')}] [{level}] [tid {os.getpid()}] {msg}\n")


# --- peers ----------------------------------------------------------------------------------------


def _peer_path(ip: str) -> Path:
    return devstate.path(f"{PEER_DIR}/{ip}.json")


def _heartbeat(ip: str) -> Path:
    return devstate.path(f"{PEER_DIR}/heartbeat/{ip}")


def read_peer(ip: str) -> dict[str, Any] | None:
    try:
        return json.loads(_peer_path(ip).read_text())
    except (OSError, ValueError):
        return None


def _write_peer(rec: dict[str, Any]) -> None:
    path = _peer_path(rec["ip"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(rec, sort_keys=True) + "\n")
    tmp.replace(path)


def peer_alive(ip: str, now: float | None = None) -> bool:
    rec = read_peer(ip)
    if not rec or rec.get("state") != "READY":
        return False
    try:
        seen = _heartbeat(ip).stat().st_mtime
    except OSError:
        return False
    return (time.time() if now is None else now) - seen <= STALE_S


def local_daemon() -> dict[str, Any] | None:
    """This host's running nvidia-imex (its run state; the pid checked in a real host)."""
    try:
        st = json.loads(devstate.path(LOCAL_STATE).read_text())
    except (OSError, ValueError):
        return None
    pid = int(st.get("pid") or 0)
    if str(devstate.root()) == "/" and pid and not os.path.exists(f"/proc/{pid}"):
        return None
    if not peer_alive(str(st.get("ip"))):
        return None
    return st


# --- nvidia-imex ----------------------------------------------------------------------------------


def nvidia_imex(argv: list[str]) -> int:
    config = CONFIG
    foreground = False
    it = iter(argv)
    for a in it:
        if a == "-c":
            config = next(it, CONFIG)
        elif a in ("-v", "--version"):
            _out(f"IMEX version is: {_version() or 'unknown'}")
            return 0
        elif a == "--foreground":
            foreground = True
        else:
            _err(f"nvidia-imex: unknown option {a}")
            return 1
    hw = _hw()
    version = _version()
    if version is None:
        _err("nvidia-imex: installation is incomplete (no version file)")
        return 1
    if version != hw.get("driver_version"):
        msg = (
            f"IMEX version {version} does not match the NVIDIA driver version {hw.get('driver_version')}; "
            "install the nvidia-imex package of the driver's version"
        )
        _log(msg, "ERROR")
        _err(msg)
        return 1
    try:
        cfg = read_config(config)
    except OSError:
        _err(f"nvidia-imex: failed to open config file {config}")
        return 1
    node_file = cfg.get("IMEX_NODE_CONFIG_FILE", DEFAULT_NODES)
    try:
        nodes = read_nodes(node_file)
    except OSError:
        msg = f"failed to open node config file {node_file}"
        _log(msg, "ERROR")
        _err(f"nvidia-imex: {msg}")
        return 1
    for n in nodes:
        try:
            ipaddress.ip_address(n)
        except ValueError:
            msg = f"node config entry '{n}' is not an IP address (the lab has no name resolution for peers)"
            _log(msg, "ERROR")
            _err(f"nvidia-imex: {msg}")
            return 1
    bind = cfg.get("BIND_INTERFACE_IP", "")
    mine = [bind] if bind else [n for n in nodes if n in local_addresses(hw)]
    if not mine or mine[0] not in nodes:
        msg = f"none of this node's addresses is in {node_file}"
        _log(msg, "ERROR")
        _err(f"nvidia-imex: {msg}")
        return 1
    ip = mine[0]
    if not foreground:
        if os.fork() > 0:
            time.sleep(0.2)
            return 0
        os.setsid()
    now = time.time()
    rec = {
        "ip": ip,
        "host": hw.get("host"),
        "version": version,
        "nodes": nodes,
        "state": "READY",
        "started": now,
        "stopped": None,
        "server_port": cfg.get("SERVER_PORT", "50000"),
    }
    beat = _heartbeat(ip)
    beat.parent.mkdir(parents=True, exist_ok=True)
    beat.touch()
    _write_peer(rec)
    local = devstate.path(LOCAL_STATE)
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "ip": ip,
                "nodes": nodes,
                "version": version,
                "config": config,
                "cmd_enabled": cfg.get("IMEX_CMD_ENABLED", "1"),
                "started": now,
            }
        )
    )
    _log(f"IMEX version {version} is running with the following configuration options:")
    _log(f"IMEX Library communication bind interface = {bind}")
    _log(f"IMEX library communication bind port = {rec['server_port']}")
    stop = {"now": False}

    def _term(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    try:
        while not stop["now"]:
            beat.touch()
            for _ in range(5):
                if stop["now"]:
                    break
                time.sleep(0.2)
    finally:
        rec.update(state="STOPPED", stopped=time.time())
        _write_peer(rec)
        with contextlib.suppress(OSError):
            beat.unlink()
        with contextlib.suppress(OSError):
            local.unlink()
        _log("IMEX shutting down")
    if not foreground:
        os._exit(0)
    return 0


# --- nvidia-imex-ctl ------------------------------------------------------------------------------


def _two(version: str | None) -> str:
    return ".".join(str(version or "").split(".")[:2]) or "N/A"


def domain_view(daemon: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """What the local daemon knows of its domain: per node its status, version and host, and the
    connection matrix (letters of the legend)."""
    nodes = list(daemon["nodes"])
    recs = {ip: read_peer(ip) for ip in nodes}
    alive = {ip: peer_alive(ip, now) for ip in nodes}
    matrix: list[list[str]] = []
    for a in nodes:
        row = []
        for b in nodes:
            if not alive[a]:
                row.append("I")
            elif a == b:
                row.append("C")
            elif alive[b]:
                ra, rb = recs[a] or {}, recs[b] or {}
                if ra.get("version") != rb.get("version"):
                    row.append("!V!")
                elif list(ra.get("nodes") or []) != list(rb.get("nodes") or []):
                    row.append("!M!")
                else:
                    row.append("C")
            else:
                row.append("D" if recs[b] else "N")
        matrix.append(row)
    up = all(alive.values()) and all(c == "C" for row in matrix for c in row)
    return {
        "nodes": [
            {
                "ip": ip,
                "status": "READY" if alive[ip] else "UNAVAILABLE",
                "version": (recs[ip] or {}).get("version") if alive[ip] else None,
                "host": (recs[ip] or {}).get("host"),
            }
            for ip in nodes
        ],
        "matrix": matrix,
        "state": "UP" if up else "DEGRADED",
    }


def _timestamp(t: float) -> str:
    lt = time.localtime(t)
    return f"{lt.tm_mon}/{lt.tm_mday}/{lt.tm_year} {time.strftime('%H:%M:%S', lt)}.{int((t % 1) * 1000):03d}"


def render_text(view: dict[str, Any], t: float) -> str:
    lines = [*LEGEND, "", _timestamp(t), "Nodes:"]
    for i, n in enumerate(view["nodes"]):
        version = _two(n["version"]) if n["version"] else "N/A"
        lines.append(f"Node #{i:<4}- {n['ip']:<16}- {n['status']:<21}- Version: {version}")
    lines.append("")
    lines.append((" Nodes From\\To  " + "".join(f"{j:<4}" for j in range(len(view["nodes"])))).rstrip())
    for i, row in enumerate(view["matrix"]):
        lines.append((f"{i:>8}        " + "".join(f"{c:<4}" for c in row)).rstrip())
    lines += ["", f"Domain State: {view['state']}"]
    return "\n".join(lines) + "\n"


def render_json(view: dict[str, Any], t: float, hostnames: bool) -> str:
    nodes: dict[str, Any] = {}
    ips = [n["ip"] for n in view["nodes"]]
    for i, n in enumerate(view["nodes"]):
        entry: dict[str, Any] = {
            "status": n["status"],
            "host": n["ip"],
            "connections": {
                str(j): {"host": ips[j], "status": CONN_JSON[c], "changed": c != "I"}
                for j, c in enumerate(view["matrix"][i])
            },
        }
        if hostnames:
            entry["hostName"] = n["host"] if n["status"] == "READY" and n["host"] else "N/A"
        nodes[str(i)] = entry
    return json.dumps({"nodes": nodes, "timestamp": _timestamp(t), "status": view["state"]}) + "\n"


def nvidia_imex_ctl(argv: list[str]) -> int:
    config = CONFIG
    action = None
    as_json = hostnames = False
    it = iter(argv)
    for a in it:
        if a == "-c":
            config = next(it, CONFIG)
        elif a in ("-N", "-q"):
            action = a
        elif a == "-j":
            as_json = True
        elif a == "-H":
            hostnames = True
        elif a in ("-h", "--help"):
            _out(USAGE)
            return 0
        else:  # -n (continuous), -i, -u, -s, -d, -m: not emulated
            _err(USAGE)
            return 1
    if action is None:
        _err(USAGE)
        return 1
    try:
        cfg = read_config(config)
    except OSError:
        _err(f"Failed to open config file {config}")
        return 1
    daemon = local_daemon()
    if cfg.get("IMEX_CMD_ENABLED", "1") != "1" or daemon is None or daemon.get("cmd_enabled", "1") != "1":
        port = cfg.get("IMEX_CMD_PORT", "50005")
        _err(f"Connection to the IMEX command service on 127.0.0.1:{port} failed: Connection refused")
        return 1
    if action == "-q":
        _out("READY")
        return 0
    t = time.time()
    view = domain_view(daemon, t)
    sys.stdout.write(render_json(view, t, hostnames) if as_json else render_text(view, t))
    return 0


TOOLS = {
    "nvidia-imex": nvidia_imex,
    "nvidia-imex-ctl": nvidia_imex_ctl,
    "emulated-nvidia-driver-load": driver_main,
}
