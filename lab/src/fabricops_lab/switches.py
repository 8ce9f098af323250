"""The emulated switches' processes: one network namespace and one switchd per Spectrum switch.

For every switch with ``os`` onyx or cumulus in ``lab["topology"]`` :func:`start` creates a netns
``fo-sw-<name>``, a veth with a fixed MAC whose outer end joins the ``fo-mgmt`` bridge and whose inner
end (``mgmt0`` on Onyx, ``eth0`` on Cumulus) carries the switch's management address, an ed25519
host key and a random password (0600, in the switch's state dir), a known_hosts line, and then runs
``python -m fabricops_lab.switchd`` inside the netns, waiting until port 22 answers with an SSH
banner. InfiniBand switches (``os: ib``) run nothing: their ports are written ``link: up`` to
``fabric/switches/NAME.json`` for the physics. :func:`stop` undoes all of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricops.errors import FabricopsError
from fabricops_lab import paths, procs

SSH_OS = ("onyx", "cumulus")
MGMT_BRIDGE = "fo-mgmt"
IFNAME_MAX = 15
START_TIMEOUT = 20.0
STOP_TIMEOUT = 5.0
#: The login user of each emulated OS (the emulator's own table when it is importable).
DEFAULT_USERS = {"onyx": "admin", "cumulus": "cumulus"}
#: how the lab inventory logs in to each switch: both access paths of fabricops.switch.access are
#: exercised by every converge (Onyx by password, Cumulus by the controller's key, no password)
LOGIN = {"onyx": "password", "cumulus": "publickey"}
NVUE_API_PORT = 8765  #: the NVUE REST API's HTTPS port on a Cumulus switch
#: The management interface's name inside the switch, as each OS names it.
MGMT_IFNAME = {"onyx": "mgmt0", "cumulus": "eth0"}


@dataclass
class Net:
    """Names and the command line; tests swap in fo-test-* names and a stand-in server."""

    bridge: str = MGMT_BRIDGE
    netns_prefix: str = "fo-sw-"
    veth_prefix: str = "fosw-"
    peer_prefix: str = "fot-"  # the inner end's name until it moves into the netns
    command: Callable[[dict[str, Any], dict[str, Any]], list[str]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def short_name(prefix: str, name: str, limit: int = IFNAME_MAX) -> str:
    """prefix+name if it fits in an interface/netns name, else prefix + name head + 4 hex of its hash."""
    full = prefix + name
    if len(full) <= limit:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:4]
    keep = limit - len(prefix) - len(digest)
    if keep < 1:
        raise ValueError(f"prefix {prefix!r} leaves no room for a name")
    return f"{prefix}{name[:keep]}{digest}"


def mac_for(name: str, role: str) -> str:
    """A fixed, locally administered unicast MAC derived from the switch name (stale ARP otherwise)."""
    h = hashlib.sha256(f"fabricops-switch:{role}:{name}".encode()).digest()
    return "02:53:" + ":".join(f"{b:02x}" for b in h[:4])


def _switches(lab: dict[str, Any]) -> list[dict[str, Any]]:
    topo = lab.get("topology") or {}
    sws = topo.get("switches") or []
    if isinstance(sws, dict):
        sws = [{"name": n, **s} for n, s in sws.items()]
    return list(sws)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise FabricopsError(f"ip {' '.join(args)} failed: {proc.stderr.strip() or proc.returncode}")
    return proc


def _netns_exists(ns: str) -> bool:
    return Path("/run/netns", ns).exists()


def _link_exists(dev: str) -> bool:
    return Path("/sys/class/net", dev).exists()


# --- keys, passwords, known_hosts ---------------------------------------------------------------

def _write_secret(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(data)
    path.chmod(0o600)


def ensure_host_key(sdir: Path, name: str) -> tuple[Path, str]:
    """The switch's ed25519 host key and its public ``TYPE BASE64`` (kept across restarts, so
    known_hosts stays valid)."""
    key = sdir / "host_key"
    pub = sdir / "host_key.pub"
    if not key.is_file() or not pub.is_file():
        key.unlink(missing_ok=True)
        pub.unlink(missing_ok=True)
        sdir.mkdir(parents=True, exist_ok=True)
        if shutil.which("ssh-keygen"):
            proc = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}",
                                   "-f", str(key)], capture_output=True, text=True)
            if proc.returncode != 0:
                raise FabricopsError(f"ssh-keygen could not make a host key for {name}: "
                                     f"{proc.stderr.strip()}")
        else:  # asyncssh is a dependency of the lab's switch emulator
            import asyncssh

            k = asyncssh.generate_private_key("ssh-ed25519", comment=f"root@{name}")
            _write_secret(key, k.export_private_key().decode())
            pub.write_text(k.export_public_key().decode())
    key.chmod(0o600)
    fields = pub.read_text().split()
    return key, f"{fields[0]} {fields[1]}"


def ensure_client_key() -> tuple[Path, str]:
    """The controller's key for switch logins (``ssh_dir()/switch_ed25519``) and its public line."""
    key = paths.ssh_dir() / "switch_ed25519"
    pub = key.with_name(key.name + ".pub")
    if not key.is_file() or not pub.is_file():
        import asyncssh

        k = asyncssh.generate_private_key("ssh-ed25519", comment="fabricops-controller@switches")
        _write_secret(key, k.export_private_key().decode())
        pub.write_text(k.export_public_key().decode())
    key.chmod(0o600)
    return key, pub.read_text().strip()


def write_authorized_keys(sdir: Path, pub: str) -> Path:
    """The switch user's authorized_keys (sshd's AUTHORIZED_KEYS FILE FORMAT: one key a line)."""
    path = sdir / "authorized_keys"
    _write_secret(path, pub + "\n")
    return path


def ensure_password(sdir: Path) -> Path:
    pw = sdir / "password"
    if not pw.is_file() or not pw.read_text().strip():
        _write_secret(pw, secrets.token_urlsafe(18) + "\n")
    pw.chmod(0o600)
    return pw


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def update_known_hosts(path: Path, entries: dict[tuple[str, ...], str | None]) -> None:
    """Replace the lines for each set of names (drop them when the key is None); keep other lines."""
    with _locked(path):
        lines = path.read_text().splitlines() if path.exists() else []
        names = {n for key in entries for n in key}
        kept = [ln for ln in lines if not (ln.split() and set(ln.split()[0].split(",")) & names)]
        for hostnames, key in entries.items():
            if key:
                kept.append(f"{','.join(hostnames)} {key}")
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(f"{ln}\n" for ln in kept))
        tmp.chmod(0o644)
        tmp.replace(path)


# --- InfiniBand switches ------------------------------------------------------------------------

def write_ib_switch(sw: dict[str, Any]) -> Path:
    target = paths.fabric_dir() / "switches" / f"{sw['name']}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    data = {"name": sw["name"], "os": "ib", "ports": {str(p): {"link": "up"} for p in sw.get("ports", [])}}
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(target)
    return target


# --- processes ----------------------------------------------------------------------------------

def switchd_command(sw: dict[str, Any], info: dict[str, Any]) -> list[str]:
    return [
        sys.executable, "-m", "fabricops_lab.switchd",
        "--name", sw["name"], "--os", sw["os"],
        "--listen", info["mgmt_ip"], "--port", "22",
        "--host-key", info["host_key"], "--password-file", info["password_file"],
        "--state-dir", info["state_dir"], "--fabric-file", info["fabric_file"],
        "--ports", ",".join(str(p) for p in sw.get("ports", [])),
    ] + (["--authorized-keys", info["authorized_keys"]] if info.get("authorized_keys") else []) + (
        # Cumulus: the NVUE REST API on 8765 of the switch's address (docs/lab-fidelity.md, NVUE)
        ["--api-port", str(NVUE_API_PORT)] if sw["os"] == "cumulus" else []
    ) + (["--release", str(sw["release"])] if sw.get("release") else [])


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    except OSError:
        return []


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def terminate(pids: list[int], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM, wait, then SIGKILL what is left (only the given pids)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in pids:
            _reap(pid)
        if not any(procs.alive(p) for p in pids):
            return
        time.sleep(0.05)
    for pid in pids:
        if procs.alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)


def _banner(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=1.0) as s:
            s.settimeout(2.0)
            return s.recv(256).startswith(b"SSH-")
    except OSError:
        return False


def _plumb(sw: dict[str, Any], net: Net, ns: str, veth: str) -> None:
    name = sw["name"]
    peer = short_name(net.peer_prefix, hashlib.sha256(name.encode()).hexdigest()[:6])
    _teardown_net(ns, veth)
    if _link_exists(peer):
        _ip("link", "del", peer, check=False)
    _ip("netns", "add", ns)
    _ip("link", "add", veth, "address", mac_for(name, "outer"), "type", "veth",
        "peer", "name", peer, "address", mac_for(name, "mgmt"))
    _ip("link", "set", peer, "netns", ns)
    ifname = MGMT_IFNAME.get(sw["os"], "mgmt0")
    _ip("-n", ns, "link", "set", peer, "name", ifname)
    _ip("-n", ns, "link", "set", "lo", "up")
    _ip("-n", ns, "addr", "add", f"{sw['mgmt_ip']}/{sw.get('prefix', 24)}", "dev", ifname)
    _ip("-n", ns, "link", "set", ifname, "up")
    _ip("link", "set", veth, "master", net.bridge)
    _ip("link", "set", veth, "up")


def _teardown_net(ns: str, veth: str) -> None:
    if _link_exists(veth):
        _ip("link", "del", veth, check=False)
    if _netns_exists(ns):
        pids = _ip("netns", "pids", ns, check=False).stdout.split()
        terminate([int(p) for p in pids if p.isdigit()])
        _ip("netns", "del", ns, check=False)


def start(lab: dict[str, Any], net: Net | None = None) -> dict[str, dict[str, Any]]:
    """Start every switch of the topology; return name -> {mgmt_ip, netns, pid, port, password_file, ...}."""
    net = net or Net()
    if not _link_exists(net.bridge):
        raise FabricopsError(f"the management bridge {net.bridge} does not exist; start the lab with "
                             "fabricops lab up")
    command = net.command or switchd_command
    result: dict[str, dict[str, Any]] = {}
    procs: dict[str, subprocess.Popen] = {}
    known: dict[tuple[str, ...], str | None] = {}
    try:
        for sw in _switches(lab):
            name = sw["name"]
            if sw["os"] == "ib":
                fabric_file = write_ib_switch(sw)
                result[name] = {"os": "ib", "mgmt_ip": None, "netns": None, "pid": None, "port": None,
                                "fabric_file": str(fabric_file)}
                continue
            if sw["os"] not in SSH_OS:
                raise FabricopsError(f"switch {name}: os {sw['os']!r} is not one of onyx, cumulus, ib")
            sdir = paths.switch_dir(name)
            sdir.mkdir(parents=True, exist_ok=True)
            sdir.chmod(0o700)
            key, pub = ensure_host_key(sdir, name)
            pw = ensure_password(sdir)
            client_key, client_pub = ensure_client_key()
            ns = short_name(net.netns_prefix, name)
            veth = short_name(net.veth_prefix, name)
            fabric_file = paths.fabric_dir() / "switches" / f"{name}.json"
            fabric_file.parent.mkdir(parents=True, exist_ok=True)
            info = {
                "user": _users().get(sw["os"]),
                "host_key_pub": str(sdir / "host_key.pub"),
                "os": sw["os"], "mgmt_ip": sw["mgmt_ip"], "netns": ns, "veth": veth, "port": 22,
                "password_file": str(pw), "host_key": str(key), "state_dir": str(sdir),
                "fabric_file": str(fabric_file), "pid": None,
                # both logins are served (as sshd does); the lab inventory logs in with LOGIN[os]
                "authorized_keys": str(write_authorized_keys(sdir, client_pub)),
                "client_key": str(client_key), "login": LOGIN[sw["os"]],
            }
            if sw["os"] == "cumulus":  # the API's self-signed certificate (switchd makes it at start)
                info["api_ca"] = str(sdir / "nvue-api.crt")
            _plumb(sw, net, ns, veth)
            known[(name, sw["mgmt_ip"])] = pub
            log = (sdir / "switchd.log").open("ab")
            try:
                proc = subprocess.Popen(["ip", "netns", "exec", ns, *command(sw, info)],
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
            finally:
                log.close()
            info["pid"] = proc.pid
            procs[name] = proc
            result[name] = info
        update_known_hosts(paths.ssh_dir() / "known_hosts", known)

        waiting = dict(procs)
        deadline = time.monotonic() + START_TIMEOUT
        while waiting and time.monotonic() < deadline:
            for name, proc in list(waiting.items()):
                if proc.poll() is not None:
                    tail = _log_tail(paths.switch_dir(name) / "switchd.log")
                    raise FabricopsError(f"switch {name}'s emulator exited with status {proc.returncode}"
                                         + (f" ({tail})" if tail else ""))
                if _banner(result[name]["mgmt_ip"], 22):
                    del waiting[name]
            if waiting:
                time.sleep(0.1)
        if waiting:
            first = sorted(waiting)[0]
            raise FabricopsError(f"switch {', '.join(sorted(waiting))} did not answer SSH on port 22 within "
                                 f"{START_TIMEOUT:.0f} s; see {paths.switch_dir(first)}/switchd.log")
    except BaseException:
        stop({"switches": result, "topology": lab.get("topology")}, net)
        raise
    return result


def _users() -> dict[str, str]:
    try:
        from fabricops_lab.switchd.server import USERS
    except ImportError:
        return dict(DEFAULT_USERS)
    return dict(USERS)


def _log_tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def stop(lab: dict[str, Any], net: Net | None = None) -> None:
    """Stop every switch emulator (SIGTERM, then SIGKILL), delete its netns and veth. Idempotent."""
    net = net or Net()
    recorded = lab.get("switches") or {}
    names = {sw["name"]: sw.get("os") for sw in _switches(lab)}
    for name, info in recorded.items():
        names.setdefault(name, (info or {}).get("os"))
    for name, os_ in names.items():
        if os_ == "ib":
            continue
        info = recorded.get(name) or {}
        ns = info.get("netns") or short_name(net.netns_prefix, name)
        veth = info.get("veth") or short_name(net.veth_prefix, name)
        pid = info.get("pid")
        if pid and procs.alive(int(pid)):
            argv = _cmdline(int(pid))
            # only our process: the emulator (or `ip netns exec` before it exec'd) for this switch
            if argv and (name in argv or ns in argv):
                terminate([int(pid)])
        _teardown_net(ns, veth)
