"""The lab hosts' root filesystem: debootstrap once, cache by the recipe's sha256.

``ensure_image()`` returns the cached rootfs for the current recipe, building it first when the
recipe changed. The build runs in a temporary directory next to the cache and is renamed into
place when complete, so an interrupted build never leaves a half image behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from fabricops.errors import FabricopsError
from fabricops.lab import paths

log = logging.getLogger(__name__)

RECIPE = paths.DATA_DIR / "image-recipe.yml"
# Bump when the customisation below changes what ends up in the image.
CUSTOMISE_VERSION = "1"

SSHD_CONFIG = """\
# fabricops lab: key-only root login, no DNS lookups (hosts have no resolver)
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
GSSAPIAuthentication no
MaxStartups 100:30:200
MaxSessions 50
"""


def load_recipe(path: Path = RECIPE) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def recipe_sha(path: Path = RECIPE) -> str:
    digest = hashlib.sha256(path.read_bytes())
    digest.update(f"\ncustomise={CUSTOMISE_VERSION}".encode())
    return digest.hexdigest()[:16]


def image_dir(sha: str | None = None) -> Path:
    return paths.IMAGE_CACHE / (sha or recipe_sha())


def rootfs(sha: str | None = None) -> Path:
    return image_dir(sha) / "rootfs"


def apt_mirror(suite: str = "bookworm") -> str:
    """The first Debian mirror serving SUITE main in this machine's apt sources."""
    candidates: list[Path] = [Path("/etc/apt/sources.list")]
    d = Path("/etc/apt/sources.list.d")
    if d.is_dir():
        candidates += sorted(d.glob("*.sources")) + sorted(d.glob("*.list"))
    for f in candidates:
        try:
            text = f.read_text()
        except OSError:
            continue
        if f.suffix == ".sources" or "URIs:" in text:
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(
                    (m.group(1).lower(), m.group(2).strip())
                    for m in re.finditer(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M)
                )
                if (
                    "deb" in fields.get("types", "").split()
                    and suite in fields.get("suites", "").split()
                    and "main" in fields.get("components", "").split()
                    and fields.get("enabled", "yes").lower() != "no"
                ):
                    return fields["uris"].split()[0]
        for line in text.splitlines():
            parts = re.sub(r"\[[^]]*\]", "", line).split()
            if len(parts) >= 4 and parts[0] == "deb" and parts[2] == suite and "main" in parts[3:]:
                return parts[1]
    return "http://deb.debian.org/debian"


def image_info(sha: str | None = None) -> dict[str, Any] | None:
    try:
        return json.loads((image_dir(sha) / "image.json").read_text())
    except (OSError, ValueError):
        return None


def ensure_image(force: bool = False) -> Path:
    """The cached rootfs for the current recipe (built first when missing)."""
    sha = recipe_sha()
    target = image_dir(sha)
    if not force and (target / "image.json").exists():
        return target / "rootfs"
    paths.IMAGE_CACHE.mkdir(parents=True, exist_ok=True)
    with open(paths.IMAGE_CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (target / "image.json").exists():
            return target / "rootfs"
        build(sha, target)
    return target / "rootfs"


def build(sha: str, target: Path) -> None:
    recipe = load_recipe()
    mirror = recipe.get("mirror") or apt_mirror(recipe["suite"])
    tmp = paths.IMAGE_CACHE / f".build-{sha}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    root = tmp / "rootfs"
    log.warning(
        "building the lab image %s (debootstrap %s from %s; about a minute)", sha, recipe["suite"], mirror
    )
    started = time.monotonic()
    cmd = [
        "debootstrap",
        f"--variant={recipe.get('variant', 'minbase')}",
        "--include=" + ",".join(recipe["packages"]),
        recipe["suite"],
        str(root),
        mirror,
    ]
    logfile = tmp / "debootstrap.log"
    with open(logfile, "w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = logfile.read_text().splitlines()[-5:]
        raise FabricopsError(
            f"debootstrap failed (exit {proc.returncode}), see {logfile}: " + " | ".join(tail)
        )
    customise(root, recipe)
    info = {
        "sha": sha,
        "suite": recipe["suite"],
        "mirror": mirror,
        "packages": recipe["packages"],
        "build_seconds": round(time.monotonic() - started, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "size_mb": round(_du(root) / 1e6),
    }
    (tmp / "image.json").write_text(json.dumps(info, indent=2) + "\n")
    if target.exists():
        old = target.with_name(target.name + f".old-{os.getpid()}")
        target.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    tmp.rename(target)
    log.warning("lab image %s built in %.0f s (%d MB)", sha, info["build_seconds"], info["size_mb"])


def _du(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


def customise(root: Path, recipe: dict[str, Any]) -> None:
    """Make the debootstrapped tree a lab host image (host-specific files come at `up`)."""
    etc = root / "etc"
    # No resolver on the lab networks: an empty resolv.conf fails lookups at once instead of
    # waiting for the build machine's nameservers (LAB-NOTES).
    (etc / "resolv.conf").unlink(missing_ok=True)
    (etc / "resolv.conf").write_text("# fabricops lab: no nameserver (names are in /etc/hosts)\n")
    (etc / "hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    # Every host gets its own host keys and machine-id at `up`.
    for key in (etc / "ssh").glob("ssh_host_*"):
        key.unlink()
    (etc / "machine-id").write_text("")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    conf_d = etc / "ssh/sshd_config.d"
    conf_d.mkdir(parents=True, exist_ok=True)
    (conf_d / "fabricops-lab.conf").write_text(SSHD_CONFIG)
    # No package network: apt sources would only make `apt update` fail.
    for src in [etc / "apt/sources.list", *(etc / "apt/sources.list.d").glob("*")]:
        src.unlink(missing_ok=True)
    (etc / "apt/sources.list").write_text(
        "# fabricops lab: no package network; repositories are added by roles\n"
    )
    (etc / "fstab").write_text("# fabricops lab: no filesystems to mount\n")
    unit_dir = etc / "systemd/system"
    unit_dir.mkdir(parents=True, exist_ok=True)
    for unit in recipe.get("mask", []):
        link = unit_dir / unit
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to("/dev/null")
    # ssh.service is enabled by the package; make sure (key-only sshd at boot).
    wants = unit_dir / "multi-user.target.wants"
    wants.mkdir(exist_ok=True)
    ssh_link = wants / "ssh.service"
    if not ssh_link.exists():
        ssh_link.symlink_to("/lib/systemd/system/ssh.service")
    (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
    subprocess.run(["chroot", str(root), "apt-get", "clean"], check=False, capture_output=True)
