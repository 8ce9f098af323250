"""Emulated installed kernels of a lab host (SPEC-20 C), stdlib only.

Lab hosts are containers running the controller's kernel, so ``uname -r`` is fixed; what a host
*has installed* is files, laid out as Debian's ``linux-image-K`` and ``linux-headers-K`` lay them out:

- image: ``/boot/vmlinuz-K``, ``/boot/config-K`` (``CONFIG_MODULE_SIG_HASH="sha512"``), ``/lib/modules/K/``
  (``kernel/``, ``modules.dep``);
- headers: ``/usr/src/linux-headers-K/`` (``include/``, ``Makefile``, ``scripts/sign-file``) with
  ``/lib/modules/K/build`` pointing there, and Debian's kbuild sign-file
  ``/usr/lib/linux-kbuild-<major.minor>/scripts/sign-file`` (what dkms 3.0.10 signs with on Debian).

The next boot kernel is the newest ``/boot/vmlinuz-*`` (what update-grub puts first). Used by
``hosts.prepare_host`` for the running kernel and by the ``kernel-upgrade`` fault (inside the host:
``python3 -c ... kernels.main(["install", K, "--no-headers"])``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

SIGN_FILE = "#!/bin/sh\n# emulated scripts/sign-file (fabricops lab): dkms signs modules itself\nexit 0\n"


def _w(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def kbuild_dir(kernel: str) -> str:
    return f"usr/lib/linux-kbuild-{kernel.rsplit('.', 1)[0] if '.' in kernel else kernel}"


def install(root: Path, kernel: str, headers: bool = True) -> None:
    """linux-image-K (and linux-headers-K) in ``root``; existing files are kept."""
    _w(root / f"boot/vmlinuz-{kernel}", f"emulated Linux kernel image {kernel} (fabricops lab)\n")
    _w(root / f"boot/config-{kernel}", "CONFIG_MODULES=y\nCONFIG_MODULE_SIG=y\n"
       'CONFIG_MODULE_SIG_HASH="sha512"\n')
    mods = root / f"lib/modules/{kernel}"
    (mods / "kernel").mkdir(parents=True, exist_ok=True)
    if not (mods / "modules.dep").exists():
        _w(mods / "modules.dep", "")
    if headers:
        install_headers(root, kernel)


def install_headers(root: Path, kernel: str) -> None:
    hdr = root / f"usr/src/linux-headers-{kernel}"
    (hdr / "include").mkdir(parents=True, exist_ok=True)
    _w(hdr / "Makefile", f"# emulated linux-headers-{kernel}\n")
    _w(hdr / "scripts/sign-file", SIGN_FILE, 0o755)
    _w(root / kbuild_dir(kernel) / "scripts/sign-file", SIGN_FILE, 0o755)
    link = root / f"lib/modules/{kernel}/build"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        if link.is_symlink() or link.is_file():
            link.unlink()
        else:
            shutil.rmtree(link)
    os.symlink(f"/usr/src/linux-headers-{kernel}", link)


def remove_headers(root: Path, kernel: str) -> None:
    link = root / f"lib/modules/{kernel}/build"
    if link.is_symlink() or link.is_file():
        link.unlink()
    shutil.rmtree(root / f"usr/src/linux-headers-{kernel}", ignore_errors=True)


def remove(root: Path, kernel: str) -> None:
    """apt purge linux-image-K linux-headers-K (the DKMS-built copies under updates/ go with it, and
    Debian's /etc/kernel/prerm.d/dkms drops the kernel's builds from the DKMS tree)."""
    remove_headers(root, kernel)
    tree = root / "var/lib/dkms"
    for built in tree.glob(f"*/*/{kernel}"):
        if built.is_dir() and not built.is_symlink():
            shutil.rmtree(built)
    for link in tree.glob(f"*/kernel-{kernel}-*"):
        link.unlink()
    for rel in (f"boot/vmlinuz-{kernel}", f"boot/config-{kernel}"):
        (root / rel).unlink(missing_ok=True)
    shutil.rmtree(root / f"lib/modules/{kernel}", ignore_errors=True)


def main(argv: list[str]) -> int:
    """``install K [--no-headers]`` | ``remove K`` | ``remove-headers K`` under EMUL_ROOT (default /)."""
    root = Path(os.environ.get("EMUL_ROOT", "/"))
    if len(argv) < 2 or argv[0] not in ("install", "remove", "remove-headers"):
        sys.stderr.write("usage: kernels install K [--no-headers] | remove K | remove-headers K\n")
        return 2
    action, kernel = argv[0], argv[1]
    if action == "install":
        install(root, kernel, headers="--no-headers" not in argv[2:])
    elif action == "remove":
        remove(root, kernel)
    else:
        remove_headers(root, kernel)
    return 0
