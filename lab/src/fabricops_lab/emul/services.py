"""Emulated fabric services (stdlib only): OpenSM, sminfo, the NVSwitch fabric manager and the
kernel-module view (modprobe/lsmod) for nvidia_peermem. docs/fabric-services.md, "The lab".

**Subnet manager.** An InfiniBand port whose link is up stays ``INIT`` (LID 0, SM LID 0) until a
subnet manager sweeps its subnet, then it is ``ACTIVE`` with its LID and the master's LID as SM LID.
Which SM: ``hardware.json`` key ``subnet_manager``: ``"switch"`` (default, absent: the managed
switch runs the SM, ports are ACTIVE with SM LID 1 as before) or ``"hosts"`` (OpenSM on hosts).
With ``hosts``, the emulated ``opensm`` daemon registers itself on the shared wire,
``/var/lib/emulated-fabric/sm/<subnet>.json`` (subnet = the InfiniBand switch its port is cabled
to): ``{"subnet", "swept", "master_lid", "routing_engine", "sms": {GUID: {"host", "hca", "port",
"guid", "priority", "lid", "routing_engine", "state", "started", "pid"}}}``, rewritten only when
something changes. Every SM touches ``sm/heartbeat/<subnet>-<GUID>`` every second; an SM whose
heartbeat is older than :data:`STALE_S` seconds is dead (a killed daemon). The master
is the live SM with the highest priority, then the lowest GUID (IBA 14.4.1.1). Once a master has
swept the subnet, ``swept`` stays true: ports stay ACTIVE when the SM stops, as on a real fabric.
:func:`effective_port` is the rule hwctl applies; :func:`apply` writes it into the live sysfs.

**Fabric manager.** With ``hardware.json`` ``"fabric_manager": {"required": true}`` the fabric
state ``nvidia-smi -q`` shows comes from the running ``nv-fabricmanager``
(``/run/emulated-hw/fabricmanager.json``): ``Completed``/``Success`` while one runs whose version
equals ``driver_version``, ``Not Started``/``N/A`` otherwise (:func:`fabric_state`).

**Kernel modules.** Containers share the controller's kernel, so modules are emulated: the lab
installs ``modprobe``/``lsmod``/``rmmod`` front-ends in ``/usr/local/sbin`` (ahead of kmod in
PATH) that handle the modules in :data:`EMULATED_MODULES` and hand every other name to kmod.
Loaded emulated modules are listed in ``/run/emulated-hw/modules.json`` (volatile, like the
kernel's). ``nvidia_peermem`` loads only while the RDMA stack (MLNX_OFED's ib_core) is loaded;
stopping openibd unloads it (it depends on ib_core).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from typing import Any

from . import devstate

SM_DIR = "var/lib/emulated-fabric/sm"
FM_STATE = "run/emulated-hw/fabricmanager.json"
FM_VERSION = "usr/share/nvidia/nvswitch/emulated-version"
FM_LOG = "var/log/fabricmanager.log"
MODULES = "run/emulated-hw/modules.json"
DRIVER_STOPPED = "run/emulated-hw/driver-stopped"
STALE_S = 10.0
OPENSM_VERSION = "5.18.0.MLNX20240128.3f266a48"
SWITCH_SM_PRIORITY = 15

STATE_NAMES = {0: "SMINFO_NOTACT", 1: "SMINFO_DISCOVER", 2: "SMINFO_STANDBY", 3: "SMINFO_MASTER"}


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _hw() -> dict[str, Any]:
    try:
        return devstate.load_hardware()
    except (OSError, ValueError):
        return {}


# --- the subnet -------------------------------------------------------------------------------

def sm_mode(hw: dict[str, Any]) -> str:
    return "hosts" if hw.get("subnet_manager") == "hosts" else "switch"


def subnet_of(hw: dict[str, Any], hca: str, port: int) -> str:
    """The InfiniBand subnet of a host port: the switch it is cabled to (one subnet per switch), or
    for switches joined by inter-switch links (cabling.json ``isls``, a two-tier fabric) the first
    switch name of that fabric, so every host of one fat tree sees one subnet; 'default' if none."""
    cabling = devstate.fabric_json("cabling.json") or {}
    for ln in cabling.get("links", []):
        if ln.get("host") == hw.get("host") and ln.get("hca") == hca and int(ln.get("port", 1)) == int(port):
            return _fabric_name(str(ln.get("switch")), cabling.get("isls") or [])
    return "default"


def _fabric_name(switch: str, isls: list[dict[str, Any]]) -> str:
    seen, todo = {switch}, [switch]
    while todo:
        sw = todo.pop()
        for ln in isls:
            for me, other in (("switch_a", "switch_b"), ("switch_b", "switch_a")):
                if ln.get(me) == sw and ln.get(other) not in seen:
                    seen.add(str(ln.get(other)))
                    todo.append(str(ln.get(other)))
    return min(seen)


def _subnet_path(subnet: str):
    return devstate.path(f"{SM_DIR}/{subnet}.json")


def read_subnet(subnet: str) -> dict[str, Any]:
    try:
        data = json.loads(_subnet_path(subnet).read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault("subnet", subnet)
    data.setdefault("swept", False)
    data.setdefault("sms", {})
    return data


@contextlib.contextmanager
def _locked_subnet(subnet: str):
    path = _subnet_path(subnet)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = read_subnet(subnet)
        yield data
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)


def _heartbeat(subnet: str, guid: str):
    return devstate.path(f"{SM_DIR}/heartbeat/{subnet}-{guid}")


def live_sms(data: dict[str, Any], now: float | None = None) -> list[dict[str, Any]]:
    """SMs whose heartbeat (``sm/heartbeat/<subnet>-<guid>``, touched every second; a subdirectory
    so that heartbeats do not wake every host's path unit) is younger than STALE_S."""
    now = time.time() if now is None else now
    out = []
    for sm in data.get("sms", {}).values():
        try:
            seen = _heartbeat(data["subnet"], sm["guid"]).stat().st_mtime
        except OSError:
            continue
        if now - seen <= STALE_S:
            out.append(sm)
    return out


def elect(sms: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Highest priority wins, then the lowest port GUID (IBA 14.4.1.1)."""
    if not sms:
        return None
    return sorted(sms, key=lambda s: (-int(s["priority"]), int(str(s["guid"]), 16)))[0]


def effective_port(hw: dict[str, Any], hca: dict[str, Any], port: dict[str, Any]) -> dict[str, Any]:
    """The port as the subnet leaves it. Unchanged unless ``subnet_manager`` is ``hosts`` and the
    port is an InfiniBand port with a physical link that the silicon would bring to ACTIVE."""
    if sm_mode(hw) != "hosts" or port.get("link_layer") == "Ethernet":
        return port
    if port.get("phys_state", "LinkUp") != "LinkUp" or port.get("state", "ACTIVE") != "ACTIVE":
        return port
    data = read_subnet(subnet_of(hw, hca["name"], port["port"]))
    out = dict(port)
    if data.get("swept"):
        out["sm_lid"] = int(data.get("master_lid") or 0)
        return out
    out.update(state="INIT", lid=0, sm_lid=0)
    return out


def apply() -> str:
    """Write the SM-dependent port attributes (state, lid, sm_lid) into the live sysfs."""
    hw = _hw()
    changed = []
    for hca in hw.get("hcas", []):
        for port in hca.get("ports", []):
            if port.get("link_layer") == "Ethernet":
                continue
            eff = effective_port(hw, hca, port)
            pd = devstate.port_dir(hca["name"], port["port"])
            st = eff.get("state", "ACTIVE")
            num = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4}.get(st, 1)
            want = {"state": f"{num}: {st}", "lid": hex(int(eff.get("lid") or 0)),
                    "sm_lid": hex(int(eff.get("sm_lid") or 0))}
            for attr, val in want.items():
                if devstate.read_sysfs(f"{pd}/{attr}") != val and devstate.sysfs(pd).is_dir():
                    devstate.write_sysfs(f"{pd}/{attr}", val)
                    changed.append(f"{hca['name']}/{port['port']} {attr}={val}")
    return "; ".join(changed) or "unchanged"


def sm_sync(argv: list[str]) -> int:
    """``emulated-hw-sm-sync``: hwctl sync, then the SM rule (run by emulated-hw-sm.path)."""
    from . import hwctl
    try:
        hwctl.sync()
        _out(apply())
    except (OSError, ValueError) as exc:
        _err(f"emulated-hw-sm-sync: {exc}")
        return 1
    return 0


# --- opensm -----------------------------------------------------------------------------------

def _local_ib_ports(hw: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    out = []
    for hca in hw.get("hcas", []):
        for port in hca.get("ports", []):
            if port.get("link_layer") != "Ethernet":
                raw = port.get("port_guid") or hca.get("node_guid") or ""
                guid = "0x" + raw.replace(":", "").lower().rjust(16, "0")
                out.append((hca, port, guid))
    return out


def _parse_conf(path: str) -> dict[str, str]:
    conf: dict[str, str] = {}
    with open(path) as f:
        for raw in f:
            line = raw.strip()
            if line and not line.startswith("#"):
                k, _, v = line.partition(" ")
                conf[k] = v.strip()
    return conf


OPENSM_USAGE = """
Usage: opensm [options]
  -F, --config <file>       the OpenSM config file (default /etc/opensm/opensm.conf)
  -c, --create-config <file>  dump the configuration to <file> and exit
  -g, --guid <GUID>         the local port GUID to bind to
  -p, --priority <0-15>     SM priority
  -R, --routing_engine <engine>  routing engine
  -B, --daemon              run in the background
  --version                 print the version and exit"""


def opensm(argv: list[str]) -> int:
    opts: dict[str, str] = {}
    conf_file = "/etc/opensm/opensm.conf"
    create = None
    it = iter(argv)
    for a in it:
        if a == "--version":
            _out("-------------------------------------------------")
            _out(f"OpenSM {OPENSM_VERSION}")
            return 0
        if a in ("-h", "--help", "-?"):
            _out(OPENSM_USAGE)
            return 0
        if a in ("-F", "--config", "-c", "--create-config", "-g", "--guid", "-p", "--priority",
                 "-R", "--routing_engine", "-f", "--log_file", "-s", "--sweep"):
            val = next(it, None)
            if val is None:
                _err(f"opensm: option requires an argument -- '{a.lstrip('-')}'")
                return 1
            if a in ("-F", "--config"):
                conf_file = val
            elif a in ("-c", "--create-config"):
                create = val
            else:
                opts[{"-g": "guid", "--guid": "guid", "-p": "sm_priority", "--priority": "sm_priority",
                      "-R": "routing_engine", "--routing_engine": "routing_engine", "-f": "log_file",
                      "--log_file": "log_file", "-s": "sweep_interval", "--sweep": "sweep_interval"}[a]] = val
        elif a in ("-B", "--daemon", "-e", "--erase_log_file"):
            continue
        else:
            _err(f"opensm: invalid option -- '{a.lstrip('-')}'")
            _out(OPENSM_USAGE)
            return 1
    conf: dict[str, str] = {}
    if os.path.exists(str(devstate.path(conf_file))):
        conf = _parse_conf(str(devstate.path(conf_file)))
    conf.update(opts)
    _out("-------------------------------------------------")
    _out(f"OpenSM {OPENSM_VERSION}")
    if create:
        with open(str(devstate.path(create)), "w") as f:
            for k, v in sorted(conf.items()):
                f.write(f"{k} {v}\n")
        return 0
    prio = int(conf.get("sm_priority", "0"))
    if not 0 <= prio <= 15:
        _err(f"opensm: invalid priority {prio} (0..15)")
        return 1
    _out(f" Priority = {prio}")
    hw = _hw()
    ports = _local_ib_ports(hw)
    if not ports or not devstate.hcas() or devstate.path(DRIVER_STOPPED).exists():
        _out("No local ports detected!")
        return 0
    want = (conf.get("guid") or "").lower()
    chosen = None
    if want and int(want, 16) != 0:
        want = "0x" + want.removeprefix("0x").rjust(16, "0")
        chosen = next((p for p in ports if p[2] == want), None)
        if chosen is None:
            _err(f"ERR 10C8: Bind to GUID {want} failed: no local port with this GUID")
            return 1
    else:
        chosen = next((p for p in ports if p[1].get("phys_state") == "LinkUp"), ports[0])
        _out(f"Using default GUID {chosen[2]}")
    hca, port, guid = chosen
    if port.get("phys_state", "LinkUp") != "LinkUp":
        _err(f"ERR 10C8: the port {guid} has no physical link (phys_state {port.get('phys_state')})")
        return 1
    subnet = subnet_of(hw, hca["name"], port["port"])
    me = {"host": hw.get("host"), "hca": hca["name"], "port": port["port"], "guid": guid, "priority": prio,
          "lid": int(port.get("lid") or 0), "routing_engine": conf.get("routing_engine", "minhop"),
          "started": time.time(), "state": "DISCOVERING", "pid": os.getpid()}
    stop = {"now": False}

    def _term(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    _out("Entering DISCOVERING state")
    last = None
    beat = _heartbeat(subnet, guid)
    beat.parent.mkdir(parents=True, exist_ok=True)
    try:
        while not stop["now"]:
            beat.touch()
            data = read_subnet(subnet)
            master = elect([*(m for m in live_sms(data) if m["guid"] != guid), me])
            state = "MASTER" if master and master["guid"] == guid else "STANDBY"
            mine = data["sms"].get(guid) or {}
            if state != last or mine.get("state") != state or (state == "MASTER" and not data.get("swept")):
                with _locked_subnet(subnet) as fresh:
                    me["state"] = state
                    fresh["sms"][guid] = dict(me)
                    if state == "MASTER":
                        fresh["swept"] = True
                        fresh["master_lid"] = me["lid"]
                        fresh["routing_engine"] = me["routing_engine"]
            if state != last:
                _out(f"Entering {state} state")
                if state == "MASTER":
                    _out(f"Using routing engine {me['routing_engine']}")
                    _out("SUBNET UP")
                with contextlib.suppress(OSError, ValueError):
                    apply()
                last = state
            for _ in range(10):
                if stop["now"]:
                    break
                time.sleep(0.1)
    finally:
        with _locked_subnet(subnet) as data:
            data["sms"].pop(guid, None)
        with contextlib.suppress(OSError):
            beat.unlink()
        _out("Exiting SM")
    return 0


# --- sminfo -----------------------------------------------------------------------------------

def _switch_guid(name: str) -> str:
    h = 0
    for ch in name:
        h = (h * 131 + ord(ch)) & 0xFFFFFF
    return f"0xfc6a1c0300{h:06x}"


def sminfo(argv: list[str]) -> int:
    ca, portnum = None, None
    it = iter(argv)
    for a in it:
        if a in ("-C", "--Ca"):
            ca = next(it, None)
        elif a in ("-P", "--Port"):
            portnum = int(next(it, "1"))
        elif a in ("-h", "--help"):
            _out("Usage: sminfo [options] <sm_lid|sm_dr_path> [modifier]")
            return 0
    hw = _hw()
    if devstate.path(DRIVER_STOPPED).exists() or not devstate.sysfs("class/infiniband").is_dir():
        _err(f"ibwarn: [{os.getpid()}] mad_rpc_open_port: can't open UMAD port ((null):0)")
        _err("sminfo: iberror: failed: Failed to open '(null)' port '0'")
        return 255
    ports = [(h, p) for h, p, _ in _local_ib_ports(hw)
             if (ca is None or h["name"] == ca) and (portnum is None or p["port"] == portnum)]
    if not ports:
        _err(f"sminfo: iberror: failed: Failed to open '{ca}' port '{portnum or 0}'")
        return 255
    hca, port = next(((h, p) for h, p in ports if p.get("phys_state") == "LinkUp"), ports[0])
    if port.get("phys_state", "LinkUp") != "LinkUp":
        _err(f"ibwarn: [{os.getpid()}] _do_madrpc: send failed; Invalid argument")
        _err("sminfo: iberror: failed: query")
        return 255
    subnet = subnet_of(hw, hca["name"], port["port"])
    if sm_mode(hw) == "switch":
        act = int(time.time()) % 100000000
        _out(f"sminfo: sm lid 1 sm guid {_switch_guid(subnet)}, activity count {act} "
             f"priority {SWITCH_SM_PRIORITY} state 3 SMINFO_MASTER")
        return 0
    data = read_subnet(subnet)
    master = elect(live_sms(data))
    if master is None:
        _err(f"ibwarn: [{os.getpid()}] mad_rpc: _do_madrpc failed; dport (Lid 0)")
        _err("sminfo: iberror: failed: query")
        return 255
    act = int((time.time() - float(master.get("started", time.time()))) * 52)
    _out(f"sminfo: sm lid {master['lid']} sm guid {master['guid']}, activity count {act} "
         f"priority {master['priority']} state 3 SMINFO_MASTER")
    return 0


# --- fabric manager ---------------------------------------------------------------------------

def fm_running() -> dict[str, Any] | None:
    try:
        st = json.loads(devstate.path(FM_STATE).read_text())
    except (OSError, ValueError):
        return None
    pid = int(st.get("pid") or 0)
    if str(devstate.root()) == "/" and pid and not os.path.exists(f"/proc/{pid}"):
        return None
    return st


def fabric_state(hw: dict[str, Any]) -> tuple[str, str] | None:
    """(State, Status) for ``nvidia-smi -q`` when hardware.json requires a fabric manager, else None
    (nvidia-smi keeps its own rule)."""
    fm = hw.get("fabric_manager") or {}
    if not fm.get("required"):
        return None
    st = fm_running()
    if st and st.get("version") == hw.get("driver_version"):
        return "Completed", "Success"
    if hw.get("nvswitch_mgmt_ports"):
        # an NVLink 5 board (HGX B200/B300): its GPUs wait for registration until the fabric manager
        # and NVLSM run: "An `In Progress` state indicates that the GPU is being registered and
        # FabricManager is likely not running or missing the NVLSM dependency" (siderolabs/extensions#717)
        return "In Progress", "N/A"
    return "Not Started", "N/A"


def _fm_log(msg: str) -> None:
    target = devstate.path(FM_LOG)
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a") as f:
            f.write(f"[{time.strftime('%b %d %Y %H:%M:%S')}] [INFO] [tid {os.getpid()}] {msg}\n")


def nv_fabricmanager(argv: list[str]) -> int:
    if "-v" in argv or "--version" in argv:
        try:
            _out(f"Fabric Manager version is : {devstate.path(FM_VERSION).read_text().strip()}")
        except OSError:
            _out("Fabric Manager version is : unknown")
        return 0
    hw = _hw()
    try:
        version = devstate.path(FM_VERSION).read_text().strip()
    except OSError:
        _err("nv-fabricmanager: installation is incomplete (no version file)")
        return 1
    driver = hw.get("driver_version", "")
    if hw.get("gpu_topology") != "nvswitch":
        msg = "No NVSwitch devices found; fabric manager is not needed on this system"
        _fm_log(msg)
        _err(msg)
        return 1
    if version != driver:
        msg = (f"fabric manager NVIDIA GPU driver interface version {version} don't match with driver "
               f"version {driver}. Please update with matching NVIDIA driver package.")
        _fm_log(msg)
        _err(msg)
        return 1
    foreground = "--foreground" in argv
    if not foreground:
        if os.fork() > 0:
            time.sleep(0.2)
            return 0
        os.setsid()
    st_path = devstate.path(FM_STATE)
    st_path.parent.mkdir(parents=True, exist_ok=True)
    st_path.write_text(json.dumps({"pid": os.getpid(), "version": version, "started": time.time()}))
    pidfile = devstate.path("run/nvidia-fabricmanager/nv-fabricmanager.pid")
    with contextlib.suppress(OSError):
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        pidfile.write_text(f"{os.getpid()}\n")
    _fm_log(f"Fabric Manager version {version} is running; successfully configured all the available "
            "NVSwitches to route GPU NVLink traffic")
    stop = {"now": False}

    def _term(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, _term)
    while not stop["now"]:
        time.sleep(0.2)
    with contextlib.suppress(OSError):
        st_path.unlink()
    _fm_log("Fabric Manager stopped")
    if not foreground:
        os._exit(0)
    return 0


# --- kernel modules ---------------------------------------------------------------------------

#: name -> (size, depends); the RDMA stack's modules come and go with openibd.
EMULATED_MODULES: dict[str, tuple[int, tuple[str, ...]]] = {
    "nvidia": (56823808, ()),
    "nvidia_uvm": (4653056, ("nvidia",)),
    "nvidia_modeset": (1355776, ("nvidia",)),
    "nvidia_peermem": (16384, ("nvidia", "ib_core")),
    "ib_core": (434176, ()),
    "mlx5_ib": (462848, ("ib_core",)),
    "mlx5_core": (2043904, ()),
    "ib_uverbs": (163840, ("ib_core",)),
    "ib_ipoib": (135168, ("ib_core",)),
    "rdma_cm": (126976, ("ib_core",)),
}
RDMA_STACK = ("ib_core", "mlx5_ib", "mlx5_core", "ib_uverbs", "ib_ipoib", "rdma_cm")
DRIVER_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset")


def _rdma_loaded() -> bool:
    if devstate.ofed_release() is None or devstate.path(DRIVER_STOPPED).exists():
        return False
    from . import dkms  # a DKMS stack loads only with its modules built (and trusted) for uname -r
    return dkms.stack_refusal() is None


def _extra_loaded() -> list[str]:
    try:
        data = json.loads(devstate.path(MODULES).read_text())
        return list(data.get("loaded", []))
    except (OSError, ValueError):
        return []


def _save_extra(names: list[str]) -> None:
    target = devstate.path(MODULES)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"loaded": sorted(set(names))}))


def loaded_modules() -> list[str]:
    """Emulated modules loaded now: the driver's (with GPUs), the RDMA stack (OFED installed and
    openibd not stopped), and what modprobe loaded and whose dependencies are still loaded."""
    hw = _hw()
    base: list[str] = []
    if hw.get("gpus"):
        base += list(DRIVER_MODULES)
    if _rdma_loaded():
        base += list(RDMA_STACK)
    extra = [m for m in _extra_loaded() if all(d in base for d in EMULATED_MODULES.get(m, ((), ()))[1])]
    return base + [m for m in extra if m not in base]


def unload_dependents() -> None:
    """What stopping the RDMA stack does to modules on top of it (openibd stop)."""
    _save_extra([m for m in _extra_loaded() if "ib_core" not in EMULATED_MODULES.get(m, (0, ()))[1]])


def _norm(name: str) -> str:
    return name.replace("-", "_")


def _kmod(tool: str, argv: list[str]) -> int:
    real = {"modprobe": "/usr/sbin/modprobe", "lsmod": "/usr/sbin/lsmod", "rmmod": "/usr/sbin/rmmod",
            "modinfo": "/usr/sbin/modinfo"}[tool]
    if str(devstate.root()) != "/" or not os.path.exists(real):
        name = argv[-1] if argv else ""
        _err(f"{tool}: FATAL: Module {name} not found in directory /lib/modules/{os.uname().release}")
        return 1
    os.execv(real, [tool, *argv])
    return 1  # pragma: no cover


def modprobe(argv: list[str]) -> int:
    flags = [a for a in argv if a.startswith("-")]
    names = [a for a in argv if not a.startswith("-")]
    if not names or not any(_norm(n) in EMULATED_MODULES for n in names[:1]):
        return _kmod("modprobe", argv)
    name = _norm(names[0])
    remove = "-r" in flags or "--remove" in flags
    dry = "-n" in flags or "--dry-run" in flags
    loaded = loaded_modules()
    if remove:
        if name in RDMA_STACK or name in DRIVER_MODULES:
            users = [m for m in loaded if name in EMULATED_MODULES.get(m, (0, ()))[1]]
            if users:
                _err(f"modprobe: FATAL: Module {name} is in use.")
                return 1
        if not dry:
            _save_extra([m for m in _extra_loaded() if m != name])
        return 0
    if name in loaded:
        return 0
    from . import dkms  # DKMS stack: the .ko for uname -r, and Secure Boot (emul/dkms.py refusal)
    why = dkms.refusal(name)
    if why:
        _err(why)
        return 1
    missing = [d for d in EMULATED_MODULES[name][1] if d not in loaded]
    if missing:
        _err(f"modprobe: ERROR: could not insert '{name}': Invalid argument")
        return 1
    if not dry:
        _save_extra([*_extra_loaded(), name])
    return 0


def lsmod(argv: list[str]) -> int:
    real = "/usr/sbin/lsmod"
    lines: list[str] = []
    if str(devstate.root()) == "/" and os.path.exists(real):
        import subprocess
        proc = subprocess.run([real], capture_output=True, text=True, check=False)
        lines = proc.stdout.splitlines()[1:]
    loaded = loaded_modules()
    _out("Module                  Size  Used by")
    for name in reversed(loaded):
        users = [m for m in loaded if name in EMULATED_MODULES[m][1]]
        used = f" {','.join(users)}" if users else ""
        _out(f"{name:<19} {EMULATED_MODULES[name][0]:>8}  {len(users)}{used}")
    for ln in lines:
        if ln.split()[:1] and ln.split()[0] not in EMULATED_MODULES:
            _out(ln)
    return 0


def rmmod(argv: list[str]) -> int:
    names = [a for a in argv if not a.startswith("-")]
    if names and _norm(names[0]) in EMULATED_MODULES:
        return modprobe(["-r", *names])
    return _kmod("rmmod", argv)


# modinfo (kmod): the emulated modules' fields. License strings are the MODULE_LICENSE of each
# source: the NVIDIA open kernel modules (open-gpu-kernel-modules, kernel-open/nvidia/nv.c) say
# "Dual MIT/GPL", the proprietary ones "NVIDIA"; nvidia-peermem.c and the mlx5/ib drivers say
# "Dual BSD/GPL". Output layout: kmod's modinfo prints "%-16s%s" per field ("license:        X").
NVIDIA_LICENSE = {"open": "Dual MIT/GPL", "proprietary": "NVIDIA"}


def _modinfo_fields(name: str, hw: dict[str, Any]) -> dict[str, str] | None:
    kernel = hw.get("kernel") or os.uname().release
    if name in DRIVER_MODULES or name == "nvidia_peermem":
        if not hw.get("gpus") and not (hw.get("pcie") or {}).get("devices"):
            return None
        flavour = str(hw.get("gpu_kernel_module") or "open")
        lic = "Dual BSD/GPL" if name == "nvidia_peermem" else NVIDIA_LICENSE.get(flavour, "NVIDIA")
        return {"filename": f"/lib/modules/{kernel}/updates/dkms/{name.replace('_', '-')}.ko",
                "version": str(hw.get("driver_version") or ""), "license": lic,
                "description": "NVIDIA GPU driver" if name == "nvidia" else name,
                "depends": ",".join(EMULATED_MODULES[name][1])}
    if name in RDMA_STACK:
        from . import dkms
        via_dkms = dkms.modinfo_fields(name)
        if via_dkms is not False:
            return via_dkms or None
        if devstate.ofed_release() is None:
            return None
        return {"filename": f"/lib/modules/{kernel}/updates/dkms/{name}.ko", "license": "Dual BSD/GPL",
                "depends": ",".join(EMULATED_MODULES[name][1])}
    return None


def modinfo(argv: list[str]) -> int:
    field = None
    names: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("-F", "--field"):
            field = next(it, None)
        elif a.startswith("--field="):
            field = a.split("=", 1)[1]
        elif a.startswith("-"):
            return _kmod("modinfo", argv)  # other options: the real modinfo's business
        else:
            names.append(a)
    if len(names) != 1 or _norm(names[0]) not in EMULATED_MODULES:
        return _kmod("modinfo", argv)
    fields = _modinfo_fields(_norm(names[0]), _hw())
    if fields is None:
        _err(f"modinfo: ERROR: Module {names[0]} not found.")
        return 1
    if field is not None:
        if field in fields:
            _out(fields[field])
        return 0
    for key, value in fields.items():
        _out(f"{key + ':':<16}{value}")
    return 0


# --- dispatch ---------------------------------------------------------------------------------

TOOLS = {
    "opensm": opensm,
    "sminfo": sminfo,
    "nv-fabricmanager": nv_fabricmanager,
    "modprobe": modprobe,
    "lsmod": lsmod,
    "rmmod": rmmod,
    "modinfo": modinfo,
    "emulated-hw-sm-sync": sm_sync,
}


def main(tool: str, argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if tool not in TOOLS:
        from . import imex  # nvidia-imex, nvidia-imex-ctl, the driver's boot step (emul/imex.py)
        return int(imex.TOOLS[tool](args) or 0)
    return int(TOOLS[tool](args) or 0)
