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
from fabricops_lab import foreign_arch, paths

log = logging.getLogger(__name__)

RECIPE = paths.DATA_DIR / "image-recipe.yml"

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


def recipe_sha(path: Path = RECIPE, arch: str = "amd64") -> str:
    """The image's cache key: the recipe, the code that builds and customises the image, and ARCH.

    A hand-bumped version number hid changes to ``customise`` behind a warm cache; hashing this
    module's own source makes any change to the build rebuild the image. The default architecture
    (amd64) hashes nothing more; any other one adds its name, so each architecture has its own
    image and an arm64 image never replaces amd64's."""
    if arch not in foreign_arch.ARCHES:
        raise FabricopsError(
            f"the lab knows no architecture {arch!r} (architectures: {', '.join(foreign_arch.ARCHES)})"
        )
    digest = hashlib.sha256(path.read_bytes())
    digest.update(b"\0")
    digest.update(Path(__file__).read_bytes())
    if arch != "amd64":
        digest.update(b"\0arch=" + arch.encode())
    return digest.hexdigest()[:16]


def image_dir(sha: str | None = None, arch: str = "amd64") -> Path:
    return paths.IMAGE_CACHE / (sha or recipe_sha(arch=arch))


def rootfs(sha: str | None = None, arch: str = "amd64") -> Path:
    return image_dir(sha, arch) / "rootfs"


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


def variants(recipe: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The host variants a topology may name: ``default`` (the image) and the recipe's layers."""
    return ("default", *sorted((recipe or load_recipe()).get("variants") or {}))


def lowerdir(variant: str = "default", arch: str = "amd64") -> str:
    """The overlay ``lowerdir`` of a host of VARIANT and ARCH: ARCH's image, under the variant's layer
    (built first when missing)."""
    base = ensure_image(arch=arch)
    if variant in (None, "", "default"):
        return str(base)
    return f"{ensure_variant(variant, arch=arch)}:{base}"


def variant_dir(variant: str, sha: str | None = None, arch: str = "amd64") -> Path:
    return image_dir(sha, arch) / "variants" / variant


def ensure_variant(variant: str, force: bool = False, arch: str = "amd64") -> Path:
    """The cached layer of VARIANT (an overlay upper directory over ARCH's image), built when missing."""
    recipe = load_recipe()
    spec = (recipe.get("variants") or {}).get(variant)
    if spec is None:
        raise FabricopsError(
            f"the lab has no host variant {variant!r} (variants: {', '.join(variants(recipe))}): "
            "fix the topology's hosts[].variant"
        )
    base = ensure_image(arch=arch)
    sha = recipe_sha(arch=arch)
    target = variant_dir(variant, sha)
    if not force and (target / "variant.json").exists():
        return target / "layer"
    with open(_lock_file(arch), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (target / "variant.json").exists():
            return target / "layer"
        build_variant(variant, spec, recipe, base, target)
    return target / "layer"


def build_variant(
    variant: str, spec: dict[str, Any], recipe: dict[str, Any], base: Path, target: Path
) -> None:
    """apt in a chroot on an overlay over the image; the overlay's upper directory is the layer.

    The chroot gets the build machine's resolver and one apt source (the image's mirror) for the
    build only: both are put back to the image's text before the layer is kept, and the package
    lists are removed, so a lab host has no package network, as on the image."""
    mirror = recipe.get("mirror") or apt_mirror(recipe["suite"])
    tmp = target.with_name(f".build-{variant}-{os.getpid()}")
    if tmp.exists():
        _umount(tmp / "mnt" / "proc")  # an interrupted build's mounts, innermost first
        _umount(tmp / "mnt")
        shutil.rmtree(tmp)
    layer, work, mnt = tmp / "layer", tmp / "work", tmp / "mnt"
    for d in (layer, work, mnt):
        d.mkdir(parents=True)
    started = time.monotonic()
    log.warning("building the lab host variant %s (apt: %s)", variant, ", ".join(spec.get("install") or []))
    subprocess.run(["mount", "-t", "overlay", f"fo-variant-{variant}", "-o",
                    f"lowerdir={base},upperdir={layer},workdir={work}", str(mnt)], check=True)
    logfile = tmp / "apt.log"
    try:
        subprocess.run(["mount", "-t", "proc", "proc", str(mnt / "proc")], check=True)
        keep = {rel: _in_root(mnt, rel).read_text() for rel in ("etc/resolv.conf", "etc/apt/sources.list")}
        _write(mnt, "etc/resolv.conf", Path("/etc/resolv.conf").read_text())
        _write(mnt, "etc/apt/sources.list", f"deb {mirror} {recipe['suite']} main\n")
        # no daemon starts in the chroot (invoke-rc.d asks policy-rc.d)
        _write(mnt, "usr/sbin/policy-rc.d", "#!/bin/sh\nexit 101\n")
        os.chmod(_in_root(mnt, "usr/sbin/policy-rc.d"), 0o755)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
        steps = [["apt-get", "-q", "update"]]
        if spec.get("install"):
            steps.append(["apt-get", "-q", "-y", "--no-install-recommends", "install", *spec["install"]])
        if spec.get("purge"):
            steps.append(["apt-get", "-q", "-y", "purge", *spec["purge"]])
        steps.append(["apt-get", "clean"])
        with open(logfile, "w") as out:
            for step in steps:
                proc = subprocess.run(["chroot", str(mnt), *step], stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=env)
                if proc.returncode != 0:
                    tail = logfile.read_text().splitlines()[-5:]
                    raise FabricopsError(
                        f"building the lab host variant {variant} failed ({' '.join(step)}: exit "
                        f"{proc.returncode}), see {logfile}: " + " | ".join(tail)
                    )
        for rel, text in keep.items():
            _write(mnt, rel, text)
        _in_root(mnt, "usr/sbin/policy-rc.d").unlink()
        for rel in spec.get("remove") or []:  # what the purged package left that the OS has not
            _in_root(mnt, rel).unlink(missing_ok=True)
        write_files(mnt, spec)
        lists = _in_root(mnt, "var/lib/apt/lists")
        for f in lists.iterdir() if lists.is_dir() else []:
            if f.is_file() and f.name != "lock":
                f.unlink()
        # a purged package's units leave their enablement links behind, dangling: gone, as
        # `deb-systemd-helper purge` leaves them on a real system
        for link in _in_root(mnt, "etc/systemd/system").glob("*.wants/*"):
            if link.is_symlink() and not _exists_in_root(mnt, os.readlink(link)):
                link.unlink()
        for unit in spec.get("enable") or []:
            unit_file = next((d for d in ("lib/systemd/system", "usr/lib/systemd/system")
                              if _exists_in_root(mnt, f"{d}/{unit}")), None)
            if unit_file is None:
                raise FabricopsError(f"the lab host variant {variant} has no unit {unit} after its packages")
            _link(mnt, f"etc/systemd/system/multi-user.target.wants/{unit}", f"/{unit_file}/{unit}")
    finally:
        _umount(mnt / "proc")
        _umount(mnt)
    info = {"variant": variant, "spec": spec, "mirror": mirror,
            "build_seconds": round(time.monotonic() - started, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "size_mb": round(_du(layer) / 1e6)}
    (tmp / "variant.json").write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(target)
    log.warning(
        "lab host variant %s built in %.0f s (%d MB)", variant, info["build_seconds"], info["size_mb"]
    )


def write_files(root: Path, spec: dict[str, Any]) -> None:
    """A variant's own files, after its packages: ``mkdir`` (directories, mode 0755), ``write`` (path ->
    text, mode 0644, replacing a link there rather than writing through it) and then ``link`` (path ->
    target, as ``ln -sf`` makes it; a relative target is relative to the link's directory, as the
    distribution ships it). Paths are relative to the root and resolved inside it; a path that leaves
    the root is refused."""
    for key in ("mkdir", "write", "link"):
        for rel in spec.get(key) or ():
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise FabricopsError(f"a host variant's {key}: path must be relative, inside the root: "
                                     f"{rel!r}")
    for rel in spec.get("mkdir") or ():
        _in_root(root, rel).mkdir(parents=True, exist_ok=True)
        os.chmod(_in_root(root, rel), 0o755)
    for rel, text in (spec.get("write") or {}).items():
        _write(root, rel, text)
        os.chmod(_in_root(root, rel), 0o644)
    for rel, target in (spec.get("link") or {}).items():
        _link(root, rel, target)


def _umount(path: Path) -> None:
    with open("/proc/self/mountinfo") as f:
        mounted = any(line.split()[4] == str(path) for line in f)
    if mounted:
        subprocess.run(["umount", str(path)], check=False, capture_output=True)


def _lock_file(arch: str = "amd64") -> Path:
    """The build lock of ARCH's image and layers: an arm64 build (many minutes under qemu) never
    holds up the amd64 image's."""
    return paths.IMAGE_CACHE / (".lock" if arch == "amd64" else f".lock-{arch}")


def ensure_image(force: bool = False, arch: str = "amd64") -> Path:
    """The cached rootfs of ARCH for the current recipe (built first when missing).

    A foreign ARCH (arm64 here) needs its qemu-user interpreter registered with binfmt_misc, to
    build the image and to boot hosts from it: checked (and registered) on every call, since a
    reboot of the controller forgets the registration while the cache stays."""
    foreign_arch.ensure_binfmt(arch)
    sha = recipe_sha(arch=arch)
    target = image_dir(sha)
    if not force and (target / "image.json").exists():
        return target / "rootfs"
    paths.IMAGE_CACHE.mkdir(parents=True, exist_ok=True)
    with open(_lock_file(arch), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (target / "image.json").exists():
            return target / "rootfs"
        build(sha, target, arch=arch)
    return target / "rootfs"


def debootstrap_command(recipe: dict[str, Any], root: Path, mirror: str, arch: str = "amd64") -> list[str]:
    """debootstrap's command line for RECIPE into ROOT. A foreign ARCH is one stage as well: with
    qemu registered (``F``), the chroot in debootstrap's second half runs the arm64 maintainer
    scripts through the kernel, no ``--foreign`` / ``--second-stage`` split needed."""
    cmd = ["debootstrap"]
    if arch != "amd64":
        cmd.append(f"--arch={arch}")
    return [
        *cmd,
        f"--variant={recipe.get('variant', 'minbase')}",
        "--include=" + ",".join(recipe["packages"]),
        recipe["suite"],
        str(root),
        mirror,
    ]


def build(sha: str, target: Path, arch: str = "amd64") -> None:
    recipe = load_recipe()
    mirror = recipe.get("mirror") or apt_mirror(recipe["suite"])
    tmp = paths.IMAGE_CACHE / f".build-{sha}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    root = tmp / "rootfs"
    log.warning(
        "building the lab image %s (debootstrap %s %s from %s; %s)", sha, recipe["suite"], arch, mirror,
        "about a minute" if arch == "amd64" else "several minutes under qemu-user",
    )
    started = time.monotonic()
    cmd = debootstrap_command(recipe, root, mirror, arch)
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
        "arch": arch,
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


def _in_root(root: Path, rel: str) -> Path:
    """ROOT/REL with every symlink on the way resolved *inside* ROOT, as the booted host sees it.

    ``Path.exists()``, ``write_text()`` and friends follow an absolute link such as
    ``/lib/systemd/system/ssh.service`` on the *build machine*; an image build must never do that.
    The result is a path under ROOT whose parents are real directories (the last component may be
    a link, which callers replace, never follow)."""
    root = Path(root)
    parts = [p for p in Path(rel).parts if p not in ("/", "")]
    current = root
    hops = 0
    while parts:
        name = parts.pop(0)
        if name == "..":
            current = current.parent if current != root else root
            continue
        candidate = current / name
        if parts and candidate.is_symlink():
            hops += 1
            if hops > 40:
                raise FabricopsError(f"symlink loop under {root} at {candidate}")
            target = os.readlink(candidate)
            parts = list(Path(target).parts) + parts
            if target.startswith("/"):
                current = root
                parts = [p for p in parts if p != "/"]
            continue
        current = candidate
    return current


def _exists_in_root(root: Path, rel: str) -> bool:
    """Whether REL exists in the image, following its links inside ROOT (never the build machine's)."""
    path = _in_root(root, rel)
    for _ in range(40):
        if not path.is_symlink():
            return path.exists()
        target = os.readlink(path)
        path = _in_root(root, target) if target.startswith("/") else _in_root(
            root, str((path.parent / target).relative_to(root))
        )
    return False


def _write(root: Path, rel: str, text: str) -> None:
    """Write ROOT/REL, replacing a link there rather than writing through it."""
    target = _in_root(root, rel)
    if target.is_symlink():
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def _link(root: Path, rel: str, to: str) -> None:
    """Make ROOT/REL a symlink to TO (an absolute path as the image sees it), replacing what is there."""
    link = _in_root(root, rel)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(to)


def customise(root: Path, recipe: dict[str, Any]) -> None:
    """Make the debootstrapped tree a lab host image (host-specific files come at `up`).

    Every path is resolved inside ROOT: nothing here reads or writes the build machine's files,
    whatever links the packages left in the tree (issue: a dangling ``ssh.service`` link, judged by
    the build machine's /lib, crashed the build on a machine without openssh-server)."""
    root = Path(root)
    # No resolver on the lab networks: an empty resolv.conf fails lookups at once instead of
    # waiting for the build machine's nameservers (LAB-NOTES).
    _write(root, "etc/resolv.conf", "# fabricops lab: no nameserver (names are in /etc/hosts)\n")
    _write(root, "etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    # Every host gets its own host keys and machine-id at `up`.
    for key in _in_root(root, "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    _write(root, "etc/machine-id", "")
    _in_root(root, "var/lib/dbus/machine-id").unlink(missing_ok=True)
    _write(root, "etc/ssh/sshd_config.d/fabricops-lab.conf", SSHD_CONFIG)
    # No package network: apt sources would only make `apt update` fail.
    sources_d = _in_root(root, "etc/apt/sources.list.d")
    for src in sorted(sources_d.glob("*")) if sources_d.is_dir() else []:
        src.unlink()
    _write(root, "etc/apt/sources.list",
           "# fabricops lab: no package network; repositories are added by roles\n")
    _write(root, "etc/fstab", "# fabricops lab: no filesystems to mount\n")
    for unit in recipe.get("mask", []):
        _link(root, f"etc/systemd/system/{unit}", "/dev/null")
    # ssh.service is enabled by the package; make sure (key-only sshd at boot). The unit must be in
    # the image: judged inside ROOT, not on the build machine.
    if not _exists_in_root(root, "lib/systemd/system/ssh.service"):
        raise FabricopsError(
            f"the lab image at {root} has no /lib/systemd/system/ssh.service: openssh-server did not "
            "install; check the recipe's packages and the debootstrap log, then run `fabricops lab up` again"
        )
    wants = "etc/systemd/system/multi-user.target.wants/ssh.service"
    link = _in_root(root, wants)
    if not (link.is_symlink() and os.readlink(link) == "/lib/systemd/system/ssh.service"):
        _link(root, wants, "/lib/systemd/system/ssh.service")
    _in_root(root, "root/.ssh").mkdir(mode=0o700, parents=True, exist_ok=True)
    # Slurm (docs/lab.md, "Slurm"): no MUNGE key in the image (munge's postinst made one with
    # `mungekey -c`; the lab writes one key per lab into every container before boot), and neither
    # Slurm daemon enabled (their postinsts enable both): the lab enables slurmd on the GPU hosts
    # and slurmctld on its controller container (fabricops_lab.slurm).
    _in_root(root, "etc/munge/munge.key").unlink(missing_ok=True)
    for unit in ("slurmd.service", "slurmctld.service"):
        _in_root(root, f"etc/systemd/system/multi-user.target.wants/{unit}").unlink(missing_ok=True)
    subprocess.run(["chroot", str(root), "apt-get", "clean"], check=False, capture_output=True)
