"""Lab hosts of another CPU architecture (arm64 on an x86_64 controller) through qemu-user.

A topology host with ``arch: arm64`` boots a Debian arm64 root on the controller's x86_64 kernel:
every aarch64 program in it runs under ``qemu-aarch64-static`` (Debian's qemu-user-static), which
the kernel starts through binfmt_misc. The lab registers that interpreter itself, only when a
topology has such a host, with the ``F`` ("fix binary") flag: the kernel opens the interpreter at
registration, so it works in chroots and nspawn containers whose root has no qemu in it.

The register line is the one QEMU's own ``scripts/qemu-binfmt-conf.sh`` writes for aarch64 (its
``aarch64_magic`` / ``aarch64_mask``: an ELF64 little-endian header whose e_machine is 0xb7, EM_AARCH64;
Debian's /usr/share/binfmts/qemu-aarch64 carries the same two strings).
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import subprocess
from pathlib import Path

from fabricops.errors import FabricopsError

log = logging.getLogger(__name__)

ARCHES = ("amd64", "arm64")
"""The architectures a topology host may name (Debian's names; ``amd64`` is the default)."""

MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}
"""Debian architecture -> ``uname -m`` / Ansible's ``ansible_architecture``."""

MULTIARCH = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
"""Debian architecture -> multiarch triplet under /usr/lib (``dpkg-architecture -qDEB_HOST_MULTIARCH``)."""

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
QEMU_PACKAGE = "qemu-user-static"
SETUP_HINT = "scripts/setup.sh --arm64"

# From QEMU's scripts/qemu-binfmt-conf.sh (aarch64_magic, aarch64_mask), as binfmt_misc reads them:
# the kernel decodes the \xNN escapes itself, so these are the literal backslash strings.
QEMU_BINFMT = {
    "arm64": {
        "name": "qemu-aarch64",
        "magic": r"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00",
        "mask": r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff",
        "interpreter": "/usr/bin/qemu-aarch64-static",
    },
}
FLAGS = "F"


def host_arch() -> str:
    """The controller's Debian architecture (``amd64`` on an x86_64 machine)."""
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def is_foreign(arch: str) -> bool:
    return arch != host_arch()


def multiarch_lib(arch: str) -> str:
    """``usr/lib/<triplet>`` of ARCH, relative to a root (where a distribution's shared libraries go)."""
    try:
        return f"usr/lib/{MULTIARCH[arch]}"
    except KeyError:
        raise FabricopsError(
            f"the lab knows no architecture {arch!r} (architectures: {', '.join(ARCHES)})"
        ) from None


def register_line(arch: str, interpreter: str | None = None) -> str:
    """The string written to /proc/sys/fs/binfmt_misc/register for ARCH's qemu interpreter."""
    spec = QEMU_BINFMT.get(arch)
    if spec is None:
        raise FabricopsError(
            f"the lab has no qemu-user binfmt entry for {arch!r} (it has: {', '.join(QEMU_BINFMT)})"
        )
    return f":{spec['name']}:M::{spec['magic']}:{spec['mask']}:{interpreter or spec['interpreter']}:{FLAGS}"


def _mount_binfmt(binfmt_dir: Path) -> None:
    if (binfmt_dir / "register").exists():
        return
    proc = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt_dir)],
                          capture_output=True, text=True)
    if proc.returncode != 0 or not (binfmt_dir / "register").exists():
        raise FabricopsError(
            f"an arm64 lab host needs binfmt_misc, and mounting it on {binfmt_dir} failed "
            f"({proc.stderr.strip() or 'no register file'}): this machine's kernel has no binfmt_misc "
            "(CONFIG_BINFMT_MISC) or the lab may not mount it; use amd64 hosts only on this machine"
        )


def _installed(package: str) -> bool:
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return proc.returncode == 0 and "install ok installed" in proc.stdout


def _entry(binfmt_dir: Path, name: str) -> dict[str, str] | None:
    """The fields of binfmt_misc entry NAME (``enabled``, ``interpreter``, ``flags``...), or None."""
    try:
        text = (binfmt_dir / name).read_text()
    except FileNotFoundError:
        return None
    fields: dict[str, str] = {"state": text.splitlines()[0].strip() if text else ""}
    for line in text.splitlines()[1:]:
        key, _, value = line.partition(" ")
        fields[key.rstrip(":")] = value.strip()
    return fields


def ensure_binfmt(arch: str, binfmt_dir: Path = BINFMT_DIR) -> str | None:
    """Make the kernel run ARCH's binaries through qemu-user; returns the interpreter (None: native).

    Checks that qemu-user-static is installed (the lab never installs Debian packages itself), mounts
    binfmt_misc when it is not, and registers ``qemu-aarch64`` with the ``F`` flag unless an enabled
    entry with that flag is there already (Debian's own, from systemd-binfmt or update-binfmts, is
    kept). An entry without ``F`` cannot work in a container root that lacks the interpreter: it is
    replaced, and the log says so."""
    if arch not in ARCHES:
        raise FabricopsError(f"the lab knows no architecture {arch!r} (architectures: {', '.join(ARCHES)})")
    if not is_foreign(arch):
        return None
    spec = QEMU_BINFMT.get(arch)
    if spec is None:
        raise FabricopsError(
            f"the lab cannot run {arch} hosts on this {host_arch()} machine (qemu-user entries: "
            f"{', '.join(QEMU_BINFMT)})"
        )
    if not _installed(QEMU_PACKAGE) or not os.access(spec["interpreter"], os.X_OK):
        raise FabricopsError(
            f"an {arch} lab host runs under qemu-user, and this machine has no {spec['interpreter']}: "
            f"install the Debian package {QEMU_PACKAGE} (as root: `{SETUP_HINT}`, or "
            f"`apt-get install {QEMU_PACKAGE}`), then run `fabricops lab up` again"
        )
    _mount_binfmt(binfmt_dir)
    name = spec["name"]
    current = _entry(binfmt_dir, name)
    if current is not None:
        if "F" in current.get("flags", "") and os.access(current.get("interpreter", ""), os.X_OK):
            if current["state"] != "enabled":
                (binfmt_dir / name).write_text("1")
                log.warning("binfmt_misc: enabled %s (%s)", name, current.get("interpreter"))
            return current.get("interpreter")
        log.warning("binfmt_misc: %s has flags %r (no F, fix binary): replacing it with the lab's entry",
                    name, current.get("flags", ""))
        (binfmt_dir / name).write_text("-1")
    interpreter = shutil.which(spec["interpreter"]) or spec["interpreter"]
    (binfmt_dir / "register").write_text(register_line(arch, interpreter))
    log.warning("binfmt_misc: registered %s -> %s (flags %s)", name, interpreter, FLAGS)
    return interpreter
