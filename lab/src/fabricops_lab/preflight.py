"""What the lab needs from this machine, checked before anything is changed.

``check()`` raises one :class:`FabricopsError` naming everything missing, in one line.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

from fabricops.errors import FabricopsError

TOOLS = {
    "systemd-nspawn": "systemd-nspawn (apt install systemd-container)",
    "debootstrap": "debootstrap (apt install debootstrap)",
    "ip": "ip (apt install iproute2)",
    "nsenter": "nsenter (util-linux)",
    "ssh": "ssh (apt install openssh-client)",
    "ssh-keygen": "ssh-keygen (apt install openssh-client)",
    "mount": "mount (util-linux)",
}


def _filesystems() -> set[str]:
    try:
        return {
            line.split()[-1] for line in Path("/proc/filesystems").read_text().splitlines() if line.strip()
        }
    except OSError:
        return set()


def _kernel_can(kind: str) -> bool:
    """Whether the kernel creates a link of KIND (veth, bridge): try in a throwaway netns."""
    if not shutil.which("ip") or not shutil.which("unshare"):
        return False
    peer = " peer name fo-pf1" if kind == "veth" else ""
    proc = subprocess.run(
        ["unshare", "--net", "sh", "-c", f"ip link add fo-pf0 type {kind}{peer}"], capture_output=True
    )
    return proc.returncode == 0


def problems() -> list[str]:
    missing: list[str] = []
    if os.geteuid() != 0:
        return ["root (run as root: the lab mounts overlays and creates namespaces)"]
    for tool, what in TOOLS.items():
        if shutil.which(tool) is None:
            missing.append(what)
    if importlib.util.find_spec("asyncssh") is None:
        # the emulated switches' SSH server: a dependency of fabricops-lab, not of the controller
        missing.append(
            "the Python package asyncssh (a dependency of fabricops-lab: pip install ./lab from a "
            "checkout, or bash scripts/setup.sh)"
        )
    fs = _filesystems()
    if "overlay" not in fs and subprocess.run(["modprobe", "overlay"], capture_output=True).returncode != 0:
        missing.append("the overlay filesystem (modprobe overlay)")
    if (
        not Path("/proc/self/ns/net").exists()
        or subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode != 0
    ):
        missing.append("network namespaces")
    else:
        for kind in ("veth", "bridge"):
            if not _kernel_can(kind):
                missing.append(f"{kind} links (modprobe {kind})")
    return missing


def check() -> None:
    missing = problems()
    if missing:
        raise FabricopsError("the lab cannot run on this machine; missing: " + "; ".join(missing))


INOTIFY_PER_HOST = 5  # measured: a booted host's systemd, journald, logind and dbus hold about 4.6


def inotify_in_use() -> int:
    n = 0
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in fd_dir.iterdir():
                try:
                    if os.readlink(fd) == "anon_inode:inotify":
                        n += 1
                except OSError:
                    continue
        except OSError:
            continue
    return n


def check_capacity(n_hosts: int) -> None:
    """Each host's systemd needs inotify instances; the kernel's per-user limit (128 by default)
    stops a host booting with "Failed to allocate manager object: Too many open files"."""
    try:
        limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    except (OSError, ValueError):
        return
    need = inotify_in_use() + INOTIFY_PER_HOST * n_hosts + 8
    if need > limit:
        want = 1 << max(need - 1, 1).bit_length()
        raise FabricopsError(
            f"{n_hosts} hosts need about {need} inotify instances but fs.inotify.max_user_instances is "
            f"{limit}; raise it first: sysctl -w fs.inotify.max_user_instances={want}"
        )
