"""Emulated NVLink subnet manager (``nvlsm``) and the fabric manager's start step on HGX B200 (stdlib only).

docs/lab-fidelity.md, "HGX B200 (fabric manager + NVLink subnet manager)", cites each behaviour.

**NVSwitch management ports.** On HGX/DGX B200 the NVSwitches are reached through ConnectX-7 bridge
functions on the GPU baseboard ("LPF" devices, VPD ``SMDL=SW_MNG``); FM and NVLSM bind to one of their
port GUIDs. The lab lists them in ``hardware.json`` ``nvswitch_mgmt_ports``
(``[{"device", "port", "guid"}]``, written by ``fabric_services.prepare`` for NVLink-5 NVSwitch hosts);
they are not rendered in the emulated sysfs (ibstat does not show them).

**nvlsm** (``/opt/nvidia/nvlsm/sbin/nvlsm --config FILE --guid GUID --pid_file FILE --log_file FILE``):
refuses without its config or without a management port of that GUID; otherwise writes its pid file,
the FM<->SM socket ``/run/nvidia-fabricmanager/fm_sm_ipc.socket`` and ``/run/emulated-hw/nvlsm.json``
and runs until SIGTERM/SIGINT, removing all three.

**nv-fabricmanager** (the lab's fabric manager package runs this front-end): on a host with management
ports it first does what ``nvidia-fabricmanager-start.sh`` does: start nvlsm on the first management
port unless one runs, wait up to :data:`SOCKET_WAIT_S` for its socket; with no nvlsm installed or no
socket it fails with ``NV_WARN_NOTHING_TO_DO`` (no fabric state ``Completed``). Then the emulated fabric
manager of ``emul/services.py`` runs as on any NVSwitch host. Without management ports (HGX H100):
exactly ``emul/services.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from . import devstate, services
from .services import _err, _hw, _out  # the emulated tools' output and hardware helpers

MGMT_PORTS = "nvswitch_mgmt_ports"
NVLSM_BIN = "opt/nvidia/nvlsm/sbin/nvlsm"
NVLSM_CONF = "usr/share/nvidia/nvlsm/nvlsm.conf"
NVLSM_VERSION = "usr/share/nvidia/nvlsm/emulated-version"
NVLSM_PID = "var/run/nvlsm.pid"  # as the start step passes it (/var/run is /run on Debian)
NVLSM_LOG = "var/log/nvlsm.log"
SM_SOCKET = "run/nvidia-fabricmanager/fm_sm_ipc.socket"
NVLSM_STATE = "run/emulated-hw/nvlsm.json"
#: nvidia-fabricmanager-start.sh waits this long for NVLSM's socket before it starts FM
SOCKET_WAIT_S = 5.0
NOTHING_TO_DO = "NV_WARN_NOTHING_TO_DO"


def mgmt_ports(hw: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in hw.get(MGMT_PORTS) or [] if p.get("guid")]


def _norm_guid(value: str) -> str:
    try:
        return f"0x{int(value.replace(':', ''), 16):016x}"
    except ValueError:
        return ""


def running() -> dict[str, Any] | None:
    """nvlsm's state while it runs (its pid alive when the tools run inside a host), else None."""
    try:
        st = json.loads(devstate.path(NVLSM_STATE).read_text())
    except (OSError, ValueError):
        return None
    pid = int(st.get("pid") or 0)
    if str(devstate.root()) == "/" and pid and not os.path.exists(f"/proc/{pid}"):
        return None
    return st


def _log(log_file: str | None, msg: str) -> None:
    line = f"{time.strftime('%b %d %H:%M:%S')} nvlsm[{os.getpid()}]: {msg}"
    if log_file in (None, "stdout"):
        _out(line)
        return
    with contextlib.suppress(OSError):
        target = devstate.path(log_file)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a") as f:
            f.write(line + "\n")


OPTS = {"--config": "config", "-F": "config", "--guid": "guid", "-g": "guid", "--pid_file": "pid_file",
        "--log_file": "log_file", "-f": "log_file"}


def nvlsm(argv: list[str]) -> int:
    opts: dict[str, str] = {}
    it = iter(argv)
    for a in it:
        key, _, inline = a.partition("=")
        if key in OPTS:
            val = inline or next(it, None)
            if val is None:
                _err(f"nvlsm: option requires an argument -- '{key.lstrip('-')}'")
                return 1
            opts[OPTS[key]] = val
        elif a in ("-B", "--daemon"):
            continue
        else:
            _err(f"nvlsm: invalid option -- '{a.lstrip('-')}'")
            return 1
    conf = opts.get("config", "/" + NVLSM_CONF)
    log_file = opts.get("log_file")
    if not devstate.path(conf).is_file():
        _err(f"nvlsm: cannot open the configuration file {conf}")
        return 1
    ports = mgmt_ports(_hw())
    if not ports:
        _log(log_file, "No NVSwitch management port found (no LPF with SMDL=SW_MNG): nothing to manage")
        _err("nvlsm: no local NVSwitch management port")
        return 1
    want = _norm_guid(opts.get("guid", "")) if opts.get("guid") else _norm_guid(ports[0]["guid"])
    port = next((p for p in ports if _norm_guid(p["guid"]) == want), None)
    if port is None:
        _log(log_file, f"ERR 10C8: Bind to GUID {want} failed: not an NVSwitch management port")
        _err(f"nvlsm: bind to GUID {want} failed: not an NVSwitch management port")
        return 1
    if running():
        _err("nvlsm: another instance is already running")
        return 1
    try:
        version = devstate.path(NVLSM_VERSION).read_text().strip()
    except OSError:
        version = "unknown"
    stop = {"now": False}

    def _term(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    pid_file = devstate.path(opts.get("pid_file", "/" + NVLSM_PID))
    state = devstate.path(NVLSM_STATE)
    sock_path = devstate.path(SM_SOCKET)
    for p in (pid_file, state, sock_path):
        p.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{os.getpid()}\n")
    state.write_text(json.dumps({"pid": os.getpid(), "guid": want, "device": port.get("device"),
                                 "version": version, "started": time.time()}))
    _log(log_file, f"NVLSM {version} bound to port GUID {want} ({port.get('device')})")
    sock = None
    with contextlib.suppress(OSError):
        sock_path.unlink()
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(sock_path))
        sock.listen(1)
    except OSError:  # a path longer than sun_path (a test's root): the file stands for the socket
        sock = None
        sock_path.write_text("")
    _log(log_file, "SUBNET UP: NVSwitches configured, FM interface listening on " + "/" + SM_SOCKET)
    try:
        while not stop["now"]:
            time.sleep(0.2)
    finally:
        if sock is not None:
            sock.close()
        for p in (sock_path, state, pid_file):
            with contextlib.suppress(OSError):
                p.unlink()
        _log(log_file, "Exiting SM")
    return 0


# --- the fabric manager's start step ------------------------------------------------------------

def _start_nvlsm(guid: str) -> bool:
    """Start the installed nvlsm as nvidia-fabricmanager-start.sh does; True once its socket is there."""
    binary = devstate.path(NVLSM_BIN)
    if not binary.exists():
        return False
    args = ["--config", "/" + NVLSM_CONF, "--guid", guid, "--pid_file", "/" + NVLSM_PID,
            "--log_file", "/" + NVLSM_LOG]
    cmd = [str(binary), *args] if str(devstate.root()) == "/" else [
        sys.executable, "-c", "import sys; from fabricops_lab.emul.nvlsm import main; "
        "sys.exit(main('nvlsm', sys.argv[1:]))", *args]
    subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    deadline = time.monotonic() + SOCKET_WAIT_S
    while time.monotonic() < deadline:
        if devstate.path(SM_SOCKET).exists() and running():
            return True
        time.sleep(0.1)
    return False


def nv_fabricmanager(argv: list[str]) -> int:
    if "-v" in argv or "--version" in argv:
        return services.nv_fabricmanager(argv)
    ports = mgmt_ports(_hw())
    if ports:
        guid = _norm_guid(ports[0]["guid"])
        sm = running()
        if sm is None and not _start_nvlsm(guid):
            why = ("nvlsm is not installed" if not devstate.path(NVLSM_BIN).exists()
                   else f"no NVLSM socket at /{SM_SOCKET} after {SOCKET_WAIT_S:.0f} s")
            msg = (f"fabric manager failed to start: {NOTHING_TO_DO} (NVLink 5 NVSwitch system: the NVLink "
                   f"subnet manager is not running; {why})")
            services._fm_log(msg)
            _err(msg)
            return 1
        services._fm_log(f"using NVSwitch management port GUID {guid} (fm-sm-mgmt-port-guid)")
    return services.nv_fabricmanager(argv)


TOOLS = {"nvlsm": nvlsm, "nv-fabricmanager": nv_fabricmanager}


def main(tool: str, argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return int(TOOLS[tool](args) or 0)
