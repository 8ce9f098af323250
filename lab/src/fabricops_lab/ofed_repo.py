"""The lab's emulated MLNX_OFED distribution and the HTTP server that hands it to lab hosts.

For every version in :data:`VERSIONS` this builds what NVIDIA ships (docs/lab-ofed.md):

- the tree ``MLNX_OFED_LINUX-<ver>-<distro>-<arch>/`` with ``mlnxofedinstall``, ``uninstall.sh``,
  ``mlnx_add_kernel_support.sh``, ``.mlnx``, ``.arch``, ``distro``, ``src/`` and ``DEBS/*.deb``
  (real Debian packages made with ``dpkg-deb``; their tools are wrappers around the lab's emulated
  tools), with a ``Packages`` index in ``DEBS/`` as the real tarball has;
- the tarball ``MLNX_OFED_LINUX-<ver>-<distro>-<arch>.tgz`` and the ISO image (same name, ``.iso``;
  the tree's content is the ISO's root, as on the real image), with ``SHA256SUMS``;
- an apt repository ``repo/<ver>/`` (flat: ``Packages``, ``Packages.gz``, ``Release``) for
  ``deb [trusted=yes] http://198.51.100.1:8080/repo/<ver> ./``.

Artifacts are cached by a content hash of the inputs (templates in ``data/ofed``, this module, the
emulated tool list, versions, kernel, distro); :func:`prepare` rebuilds only when that changes.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from typing import Any

from fabricops.errors import FabricopsError
from fabricops_lab import paths, procs
from fabricops_lab.emul import tools as emul_tools

TEMPLATE_DIR = Path(__file__).resolve().parent / "data" / "ofed"
#: The opensm package's files (fabric_services.opensm_deb); part of the cache key.
FABRIC_SERVICES_DIR = Path(__file__).resolve().parent / "data" / "fabric_services"

#: The versions the lab serves: an older one and a newer one, so upgrades can be tested.
VERSIONS: tuple[str, ...] = ("23.10-1.1.9.0", "24.10-1.1.4.0")
DEFAULT_VERSION = "24.10-1.1.4.0"
#: NVIDIA's Debian 12 builds are named for the point release they were made on.
DISTRO = "debian12.1"

CONTROLLER_IP = "198.51.100.1"
HTTP_PORT = 8080

MAINTAINER = "Mellanox Technologies <support@mellanox.com>"
EMULATED_NOTE = (" Emulated by the fabricops lab: the tools are wrappers around the lab's emulated\n"
                 " device tools.")

# rdma-core's upstream version as shipped in each MLNX_OFED release ("2307mlnx47" = rdma-core 47).
_RDMA_CORE = {"23.10": "2307mlnx47", "24.10": "2410mlnx54"}

#: Which package installs which emulated tool (others from emul/tools.py land in mlnx-tools).
TOOL_PACKAGE: dict[str, str] = {
    "ofed_info": "ofed-scripts",
    "openibd": "mlnx-ofed-kernel-utils",
    "ibv_devinfo": "ibverbs-utils",
    "ibv_devices": "ibverbs-utils",
    "ibstat": "infiniband-diags",
    "ibstatus": "infiniband-diags",
    "ibqueryerrors": "infiniband-diags",
    "perfquery": "infiniband-diags",
    "sminfo": "infiniband-diags",
    "ibnetdiscover": "infiniband-diags",
    "iblinkinfo": "infiniband-diags",
    "opensm": "opensm",
    "mlnx_qos": "mlnx-tools",
    "cma_roce_tos": "mlnx-tools",
    "cma_roce_mode": "mlnx-tools",
    # NVIDIA MFT, bundled with MLNX_OFED as the `mft` package (emul/firmware.py)
    "mlxconfig": "mft",
    "mlxfwmanager": "mft",
    "mlxfwreset": "mft",
}
#: The MFT release each MLNX_OFED release bundles (its release notes' "MFT" line), as the deb names it.
_MFT = {"23.10": "4.26.1-3", "24.10": "4.30.0-139"}
#: Emulated tools that are not MLNX_OFED's: the NVIDIA driver's, lldpd's, pciutils' (the image's
#: pciutils owns /usr/bin/lspci: dpkg refuses a package that overwrites it), nccl-tests and Open MPI
#: (hosts.install_nccl puts them where a site's build does).
NOT_OFED = re.compile(r"^(nvidia|nv-|dcgm|lldp|lspci$|mpirun$|nccl-|all_reduce_perf$|all_gather_perf$"
                      r"|reduce_scatter_perf$|dkms$|mokutil$)")

#: Install order (mlnxofedinstall lists and installs in this order; the meta package last).
PACKAGE_ORDER = (
    "ofed-scripts", "mlnx-tools", "mlnx-ofed-kernel-utils", "mlnx-ofed-kernel-dkms",
    "mlnx-ofed-kernel-modules", "rdma-core", "ibverbs-utils", "infiniband-diags", "perftest",
    "opensm", "mft", "mlnx-fw-updater", "mlnx-ofed-all",
)


# --- names and versions -------------------------------------------------------------------------

def _split(version: str) -> tuple[str, str]:
    m = re.fullmatch(r"(\d+\.\d+)-(\d+(?:\.\d+)+)", version)
    if not m:
        raise FabricopsError(f"{version!r} is not an MLNX_OFED version like 24.10-1.1.4.0")
    return m.group(1), m.group(2)


#: dpkg architecture -> MLNX_OFED's name for it (the tarball's ``-<arch>`` suffix and ``.arch``)
MLNX_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}


def machine_arch(darch: str | None = None) -> str:
    """``x86_64`` / ``aarch64`` as MLNX_OFED names them: the controller's, or dpkg arch ``darch``'s."""
    if darch is not None:
        return MLNX_ARCH.get(darch, darch)
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine(), platform.machine())


def deb_arch() -> str:
    try:
        out = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True)
        return out.stdout.strip() or "amd64"
    except (OSError, subprocess.CalledProcessError):
        return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), "amd64")


def topology_arches(topo: dict[str, Any] | None) -> tuple[str, ...]:
    """The dpkg architectures the lab's repositories are built for: the controller's, then every other
    one a topology host names (``arch: arm64``). The default rack is amd64 only: it builds nothing more.

    >>> topology_arches({"hosts": [{"name": "a"}, {"name": "b", "arch": "arm64"}]})[1:]
    ('arm64',)
    """
    primary = deb_arch()
    out = [primary]
    for h in (topo or {}).get("hosts") or []:
        a = h.get("arch") or primary
        if a not in out:
            out.append(a)
    return tuple(out)


def repo_rel(version: str, darch: str | None = None) -> str:
    """The apt repository's directory under the served root: ``repo/<ver>`` for the controller's
    architecture (as before there was another), ``repo-<darch>/<ver>`` for another one."""
    if darch is None or darch == deb_arch():
        return f"repo/{version}"
    return f"repo-{darch}/{version}"


def default_kernel() -> str:
    """The kernel lab hosts run: they share the controller's kernel, so ``uname -r`` there is this."""
    return os.uname().release


def dist_name(version: str, distro: str = DISTRO, arch: str | None = None) -> str:
    return f"MLNX_OFED_LINUX-{version}-{distro}-{arch or machine_arch()}"


def package_versions(version: str, kernel: str) -> dict[str, str]:
    """Debian versions of each package in an MLNX_OFED release, in the style NVIDIA uses.

    >>> package_versions("24.10-1.1.4.0", "6.1.0-18-amd64")["ofed-scripts"]
    '24.10.OFED.24.10.1.1.4'
    """
    from fabricops_lab import fabric_services  # imports this module: not at the top

    major, rest = _split(version)
    kver = f"{major}.OFED.{major}.{rest}"
    rdma = _RDMA_CORE.get(major, f"{major.replace('.', '')}mlnx1")
    rdma_deb = f"{rdma}-1.{major.replace('.', '')}{rest.replace('.', '')}"
    return {
        "ofed-scripts": f"{major}.OFED.{major}.{rest.rsplit('.', 1)[0]}",
        "mlnx-tools": f"{major}.0",
        "mlnx-ofed-kernel-utils": kver,
        "mlnx-ofed-kernel-dkms": kver,
        "mlnx-ofed-kernel-modules": f"{kver}.kver.{kernel.replace('_', '-')}",
        "rdma-core": rdma_deb,
        "ibverbs-utils": rdma_deb,
        "infiniband-diags": rdma_deb,
        "perftest": f"{major}.0",
        "opensm": fabric_services.opensm_deb(version).version,
        "mft": _MFT.get(major, "4.30.0-139"),
        "mlnx-fw-updater": version,
        "mlnx-ofed-all": version,
    }


# --- building packages --------------------------------------------------------------------------

@dataclass
class Deb:
    package: str
    version: str
    depends: str
    description: str
    files: dict[str, tuple[bytes, int]]  # path in the package -> (content, mode)
    scripts: dict[str, bytes]  # postinst, prerm, ...
    conffiles: tuple[str, ...] = ()
    section: str = "net"


def _template(name: str) -> bytes:
    return (TEMPLATE_DIR / name).read_bytes()


def _wrapper(tool: str) -> bytes:
    return _template("wrapper.py").replace(b"@TOOL@", tool.encode())


def ofed_tools() -> dict[str, list[str]]:
    """package -> emulated tool names it installs (from emul/tools.py)."""
    out: dict[str, list[str]] = {}
    for tool in emul_tools.TOOLS:
        if NOT_OFED.match(tool):
            continue
        if tool.startswith(("ib_write_", "ib_read_", "ib_send_", "ib_atomic_")):
            pkg = "perftest"
        else:
            pkg = TOOL_PACKAGE.get(tool, "mlnx-tools")
        out.setdefault(pkg, []).append(tool)
    return out


def packages(version: str, kernel: str) -> list[Deb]:
    from fabricops_lab import fabric_services  # imports this module: not at the top

    vers = package_versions(version, kernel)
    tools = ofed_tools()
    major, _ = _split(version)

    def bins(pkg: str) -> dict[str, tuple[bytes, int]]:
        files: dict[str, tuple[bytes, int]] = {}
        for tool in tools.get(pkg, []):
            target = "etc/init.d/openibd" if tool == "openibd" else f"usr/bin/{tool}"
            files[target] = (_wrapper(tool), 0o755)
        return files

    listing = "".join(f"{p} {vers[p]}\n" for p in PACKAGE_ORDER).encode()
    ofed_scripts = bins("ofed-scripts") | {
        "usr/share/emulated-ofed/release": (f"MLNX_OFED_LINUX-{version}\n".encode(), 0o644),
        "usr/share/emulated-ofed/packages": (listing, 0o644),
        # the installed uninstaller (real MLNX_OFED: ofed-scripts' /usr/sbin/ofed_uninstall.sh), what an
        # MLNX_OFED -> DOCA-Host migration runs first (docs/lab-ofed.md, DOCA-Host mirror)
        "usr/sbin/ofed_uninstall.sh": (_template("uninstall.sh"), 0o755),
    }
    utils = bins("mlnx-ofed-kernel-utils") | {
        "lib/systemd/system/openibd.service": (_template("openibd.service"), 0o644),
        "etc/infiniband/openib.conf": (_template("openib.conf"), 0o644),
    }
    dkms_conf = (
        f'PACKAGE_NAME="mlnx-ofed-kernel"\nPACKAGE_VERSION="{major}"\n'
        "# emulated: the lab's kernel modules are not built\n"
    ).encode()
    eq = {p: f"{p} (= {v})" for p, v in vers.items()}
    debs = [
        Deb("ofed-scripts", vers["ofed-scripts"], "", "MLNX_OFED utilities (ofed_info)", ofed_scripts, {}),
        Deb("mlnx-tools", vers["mlnx-tools"], "python3",
            "Userspace tools to configure Mellanox devices (mlnx_qos, cma_roce_tos, cma_roce_mode)",
            bins("mlnx-tools"), {}),
        Deb("mlnx-ofed-kernel-utils", vers["mlnx-ofed-kernel-utils"], f"mlnx-tools (>= {vers['mlnx-tools']})",
            "Userspace tools to restart and tune mlnx-ofed kernel modules (openibd)", utils,
            {"postinst": _template("kernel-utils.postinst"), "prerm": _template("kernel-utils.prerm")},
            conffiles=("/etc/infiniband/openib.conf",)),
        Deb("mlnx-ofed-kernel-dkms", vers["mlnx-ofed-kernel-dkms"], "mlnx-ofed-kernel-utils",
            "DKMS support for mlnx-ofed kernel modules",
            {f"usr/src/mlnx-ofed-kernel-{major}/dkms.conf": (dkms_conf, 0o644)}, {}, section="kernel"),
        Deb("mlnx-ofed-kernel-modules", vers["mlnx-ofed-kernel-modules"], "mlnx-ofed-kernel-utils",
            f"mlnx-ofed kernel modules (built for kernel {kernel})",
            {"usr/share/emulated-ofed/kernel": (f"{kernel}\n".encode(), 0o644)}, {}, section="kernel"),
        Deb("rdma-core", vers["rdma-core"], "", "RDMA core userspace infrastructure and documentation",
            {"usr/share/doc/rdma-core/README.emulated": (b"Emulated by the fabricops lab.\n", 0o644)}, {}),
        Deb("ibverbs-utils", vers["ibverbs-utils"], eq["rdma-core"],
            "Examples for the libibverbs library (ibv_devinfo, ibv_devices)", bins("ibverbs-utils"), {}),
        Deb("infiniband-diags", vers["infiniband-diags"], eq["rdma-core"],
            "InfiniBand diagnostic programs (ibstat, ibstatus, ibqueryerrors, perfquery, ibnetdiscover, "
            "iblinkinfo)",
            bins("infiniband-diags"), {}),
        Deb("perftest", vers["perftest"], "", "Infiniband verbs performance tests (ib_*_bw, ib_*_lat)",
            bins("perftest"), {}),
        fabric_services.opensm_deb(version),
        Deb("mft", vers["mft"], "python3",
            "NVIDIA firmware tools (mlxconfig, mlxfwmanager, mlxfwreset)", bins("mft"), {}),
        Deb("mlnx-fw-updater", vers["mlnx-fw-updater"], "", "Mellanox firmware updater",
            {}, {"postinst": _template("fw-updater.postinst")}),
    ]
    meta_deps = [eq[p] for p in ("ofed-scripts", "mlnx-tools", "mlnx-ofed-kernel-utils")]
    meta_deps.append(f"{eq['mlnx-ofed-kernel-modules']} | {eq['mlnx-ofed-kernel-dkms']}")
    meta_deps += [eq[p] for p in ("rdma-core", "ibverbs-utils", "infiniband-diags", "perftest", "opensm",
                                  "mft")]
    debs.append(Deb("mlnx-ofed-all", version, ", ".join(meta_deps), "MLNX_OFED all packages (meta package)",
                    {}, {}, section="metapackages"))
    return debs


def build_deb(deb: Deb, out_dir: Path, arch: str) -> Path:
    """Build one .deb with dpkg-deb (owner root:root) and return its path."""
    if shutil.which("dpkg-deb") is None:
        raise FabricopsError("dpkg-deb is not installed; install dpkg (it builds the emulated MLNX_OFED)")
    with tempfile.TemporaryDirectory(prefix="fo-deb-") as tmp:
        root = Path(tmp) / "root"
        (root / "DEBIAN").mkdir(parents=True)
        control = [
            f"Package: {deb.package}",
            f"Version: {deb.version}",
            f"Architecture: {arch}",
            f"Maintainer: {MAINTAINER}",
            f"Section: {deb.section}",
            "Priority: optional",
        ]
        if deb.depends:
            control.append(f"Depends: {deb.depends}")
        control.append(f"Description: {deb.description}\n{EMULATED_NOTE}")
        (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        for name, body in deb.scripts.items():
            p = root / "DEBIAN" / name
            p.write_bytes(body)
            p.chmod(0o755)
        if deb.conffiles:
            (root / "DEBIAN" / "conffiles").write_text("".join(f"{c}\n" for c in deb.conffiles))
        for rel, (content, mode) in deb.files.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content)
            p.chmod(mode)
        for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
            d.chmod(0o755)
        target = out_dir / f"{deb.package}_{deb.version}_{arch}.deb"
        env = dict(os.environ, SOURCE_DATE_EPOCH=os.environ.get("SOURCE_DATE_EPOCH", "1700000000"))
        proc = subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(target)],
            capture_output=True, text=True, env=env,
        )
        if proc.returncode != 0:
            raise FabricopsError(f"dpkg-deb could not build {deb.package}: {proc.stderr.strip()}")
    return target


# --- apt index ----------------------------------------------------------------------------------

def _digest(path: Path, algo: str) -> str:
    h = hashlib.new(algo)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256(path: Path) -> str:
    return _digest(path, "sha256")


def _packages_python(deb_dir: Path) -> str:
    """The Packages index, as dpkg-scanpackages writes it, without dpkg-dev."""
    stanzas = []
    for deb in sorted(deb_dir.glob("*.deb")):
        control = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True,
                                 check=True).stdout
        lines = control.rstrip("\n").split("\n")
        desc_at = next((i for i, ln in enumerate(lines) if ln.startswith("Description:")), len(lines))
        extra = [
            f"Filename: ./{deb.name}",
            f"Size: {deb.stat().st_size}",
            f"MD5sum: {_digest(deb, 'md5')}",
            f"SHA1: {_digest(deb, 'sha1')}",
            f"SHA256: {_digest(deb, 'sha256')}",
        ]
        stanzas.append("\n".join(lines[:desc_at] + extra + lines[desc_at:]) + "\n")
    return "\n".join(stanzas)


def write_index(deb_dir: Path, *, label: str, arch: str | None = None) -> None:
    """Write Packages, Packages.gz and Release for a flat repository (``deb URL ./``) of dpkg
    architecture ``arch`` (default: the controller's)."""
    text = None
    if shutil.which("dpkg-scanpackages"):
        proc = subprocess.run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=deb_dir,
                              capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            text = proc.stdout
    if text is None:
        text = _packages_python(deb_dir)
    (deb_dir / "Packages").write_text(text)
    with gzip.GzipFile(deb_dir / "Packages.gz", "wb", mtime=0) as gz:
        gz.write(text.encode())
    files = [deb_dir / "Packages", deb_dir / "Packages.gz"]
    release = [
        f"Origin: {label}",
        f"Label: {label}",
        "Suite: ./",
        f"Date: {formatdate(usegmt=True)}",
        f"Architectures: {arch or deb_arch()} all",
        "MD5Sum:",
        *[f" {_digest(f, 'md5')} {f.stat().st_size} {f.name}" for f in files],
        "SHA256:",
        *[f" {sha256(f)} {f.stat().st_size} {f.name}" for f in files],
    ]
    (deb_dir / "Release").write_text("\n".join(release) + "\n")


# --- signing -------------------------------------------------------------------------------------
# The roles write apt sources with signed-by (issue 15), so the lab's mirrors are signed the way a
# real flat repository is: an InRelease (clear-signed Release) and a detached Release.gpg next to
# Release (apt-secure(8); Debian wiki "DebianRepository/Format", "Flat Repository Format"), with a
# key the lab generates once and serves as KEY_FILE (a binary OpenPGP keyring, what
# sources.list(5) signed-by takes).

KEY_FILE = "fabricops-lab-repo.gpg"
KEY_UID = "fabricops lab repository <lab-repo@fabricops.invalid>"


def signing_home() -> Path:
    return paths.STATE_DIR / "repo-signing"


_SHORT_HOMES: dict[str, Path] = {}


def _short(home: Path) -> Path:
    """HOME, or a short private alias of it: gpg-agent puts its socket in the home directory and a
    Unix socket path holds at most 108 bytes, so a deep state dir (a test's tmp_path) fails with
    'No agent running'. The alias is a link in a fresh 0700 directory, removed at exit."""
    if len(str(home)) <= 60:
        return home
    key = str(home)
    if key not in _SHORT_HOMES:
        import atexit
        import tempfile

        base = Path(tempfile.mkdtemp(prefix="fo-gpg-"))
        (base / "h").symlink_to(home)
        atexit.register(shutil.rmtree, base, True)
        _SHORT_HOMES[key] = base / "h"
    return _SHORT_HOMES[key]


def _gpg(home: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess:
    home = _short(home)
    gpg = shutil.which("gpg")
    if gpg is None:
        raise FabricopsError("gpg is not installed on the lab controller: install the gnupg package "
                             "(the lab signs its apt mirrors)")
    return subprocess.run([gpg, "--homedir", str(home), "--batch", "--yes", "--pinentry-mode", "loopback",
                           "--passphrase", "", *args], capture_output=True, check=False, **kw)


#: home -> how many _agent blocks are open on it (nested blocks share one agent)
_AGENT_DEPTH: dict[str, int] = {}
_AGENT_LOCK = threading.Lock()
#: how long a killed agent may take to go (its socket is removed when it has)
AGENT_EXIT_S = 5.0


@contextlib.contextmanager
def _agent(home: Path):
    """Stop the gpg-agent gpg starts for ``home`` afterwards: nothing of the lab keeps running.

    Nested blocks on one home share the agent; the outermost stops it and waits until it is gone
    (its socket removed). A gpg started while the previous block's agent was still exiting
    connected to the dying agent and failed with "End of file ... No agent running" (a loaded CI
    machine: signing_key's block ended, sign_repo's began)."""
    key = str(home)
    with _AGENT_LOCK:
        _AGENT_DEPTH[key] = _AGENT_DEPTH.get(key, 0) + 1
    try:
        yield
    finally:
        with _AGENT_LOCK:
            _AGENT_DEPTH[key] -= 1
            last = _AGENT_DEPTH[key] == 0
            if last:
                del _AGENT_DEPTH[key]
        if last:
            _stop_agent(home)


def _stop_agent(home: Path) -> None:
    gpgconf = shutil.which("gpgconf")
    if not gpgconf:
        return
    short = str(_short(home))
    listed = subprocess.run([gpgconf, "--homedir", short, "--list-dirs", "agent-socket"],
                            capture_output=True, text=True, check=False)
    socket_path = Path(listed.stdout.strip()) if listed.returncode == 0 and listed.stdout.strip() else None
    subprocess.run([gpgconf, "--homedir", short, "--kill", "gpg-agent"], capture_output=True, check=False)
    deadline = time.monotonic() + AGENT_EXIT_S
    while socket_path is not None and socket_path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def signing_key(home: Path | None = None) -> tuple[Path, str]:
    """Create the lab's repository signing key once (no passphrase: a lab key); return
    (its GnuPG home, its fingerprint)."""
    home = home or signing_home()
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)

    def fingerprint() -> str | None:
        proc = _gpg(home, "--with-colons", "--list-secret-keys", KEY_UID, text=True)
        for line in proc.stdout.splitlines():
            if line.startswith("fpr:"):
                return line.split(":")[9]
        return None

    with _agent(home):
        fpr = fingerprint()
        if fpr is None:
            proc = _gpg(home, "--quick-generate-key", KEY_UID, "ed25519", "sign", "never", text=True)
            fpr = fingerprint()
            if proc.returncode != 0 or fpr is None:
                raise FabricopsError(
                    f"gpg could not create the lab's repository key: {proc.stderr.strip()[-300:]}"
                )
    return home, fpr


def export_key(dest: Path, home: Path | None = None) -> str:
    """Write the public key to ``dest`` (binary keyring); return its sha256."""
    home = home or signing_home()
    with _agent(home):
        home, fpr = signing_key(home)
        proc = _gpg(home, "--export", fpr)
    if proc.returncode != 0 or not proc.stdout:
        raise FabricopsError(f"gpg could not export the lab's repository key: {proc.stderr.decode()[-300:]}")
    dest.write_bytes(proc.stdout)
    return sha256(dest)


def sign_repo(deb_dir: Path, home: Path | None = None) -> None:
    """InRelease and Release.gpg for ``deb_dir``'s Release (written by :func:`write_index`)."""
    home = home or signing_home()
    release = deb_dir / "Release"
    with _agent(home):  # one agent for the key lookup and both signatures
        home, fpr = signing_key(home)
        for args in (("--clearsign", "-o", str(deb_dir / "InRelease")),
                     ("--armor", "--detach-sign", "-o", str(deb_dir / "Release.gpg"))):
            proc = _gpg(home, "--local-user", fpr, "--digest-algo", "SHA256", *args, str(release), text=True)
            if proc.returncode != 0:
                raise FabricopsError(f"gpg could not sign {release}: {proc.stderr.strip()[-300:]}")


# --- the tree, tarball and ISO ------------------------------------------------------------------

def build_tree(parent: Path, version: str, kernel: str, distro: str = DISTRO,
               darch: str | None = None) -> Path:
    """Make ``parent/MLNX_OFED_LINUX-<ver>-<distro>-<arch>/`` for dpkg architecture ``darch`` (default:
    the controller's) and return it. The packages hold scripts only (Python wrappers, shell, unit
    files, text): an arm64 build is the same files labelled ``Architecture: arm64``."""
    darch = darch or deb_arch()
    arch = machine_arch(darch)
    top = parent / dist_name(version, distro, arch)
    debs = top / "DEBS"
    debs.mkdir(parents=True)
    for deb in packages(version, kernel):
        build_deb(deb, debs, darch)
    write_index(debs, label=f"MLNX_OFED_LINUX-{version}", arch=darch)
    for script in ("mlnxofedinstall", "uninstall.sh", "mlnx_add_kernel_support.sh"):
        (top / script).write_bytes(_template(script))
        (top / script).chmod(0o755)
    (top / ".mlnx").write_text(f"{version}\n")
    (top / ".arch").write_text(f"{arch}\n")
    (top / "distro").write_text(f"{distro}\n")
    (top / "LICENSE").write_text(
        "The fabricops lab's emulated MLNX_OFED: no NVIDIA software is included.\n"
        "The packages hold wrappers around the lab's emulated device tools.\n"
    )
    src = top / "src"
    src.mkdir()
    readme = b"Emulated MLNX_OFED sources: nothing to build.\n"
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        info = tarfile.TarInfo(f"MLNX_OFED_SRC-{version}/README")
        info.size, info.mtime, info.mode = len(readme), 0, 0o644
        tar.addfile(info, io.BytesIO(readme))
    (src / f"MLNX_OFED_SRC-debian-{version}.tgz").write_bytes(buf.getvalue())
    return top


def make_tgz(tree: Path, target: Path) -> None:
    """A gzip'd tarball whose one top directory is the tree (as NVIDIA's .tgz)."""
    def norm(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 1700000000
        return info

    with target.open("wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
        tar.add(str(tree), arcname=tree.name, recursive=False, filter=norm)
        for p in sorted(tree.rglob("*")):
            tar.add(str(p), arcname=f"{tree.name}/{p.relative_to(tree)}", recursive=False, filter=norm)


def iso_tool() -> str | None:
    for tool in ("xorriso", "genisoimage", "mkisofs"):
        if shutil.which(tool):
            return tool
    return None


def make_iso(tree: Path, target: Path, volume: str) -> None:
    """An ISO 9660 image with Rock Ridge whose root is the tree's content (as NVIDIA's .iso)."""
    tool = iso_tool()
    if tool is None:
        raise FabricopsError("neither xorriso nor genisoimage is installed; run scripts/setup.sh "
                             "(apt-get install xorriso) to build the emulated MLNX_OFED ISO")
    volid = volume[:32]
    if tool == "xorriso":
        argv = ["xorriso", "-as", "mkisofs", "-quiet", "-r", "-V", volid, "-o", str(target), str(tree)]
    else:
        argv = [tool, "-quiet", "-r", "-V", volid, "-o", str(target), str(tree)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise FabricopsError(f"{tool} could not build {target.name}: {proc.stderr.strip()[-300:]}")


# --- the whole repository, cached ---------------------------------------------------------------

def cache_key(versions: tuple[str, ...], kernel: str, distro: str) -> str:
    h = hashlib.sha256()
    for top in (TEMPLATE_DIR, FABRIC_SERVICES_DIR):
        for p in sorted(top.rglob("*")):
            if p.is_file():
                rel = p.relative_to(TEMPLATE_DIR.parent).as_posix()
                h.update(rel.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(Path(__file__).read_bytes())
    h.update((Path(__file__).with_name("fabric_services.py")).read_bytes())
    h.update(json.dumps(emul_tools.TOOLS, sort_keys=True).encode())
    h.update(json.dumps([list(versions), kernel, distro, machine_arch()]).encode())
    return h.hexdigest()


def _artifacts_present(out: Path, manifest: dict[str, Any]) -> bool:
    every = [manifest.get("versions", {}), *(manifest.get("by_arch") or {}).values()]
    for facts in (f for versions in every for f in versions.values()):
        for key in ("iso", "tgz"):
            if not (out / facts[key]).is_file():
                return False
        if not (out / facts["repo"] / "Packages").is_file():
            return False
    return True


def build(out: Path, versions: tuple[str, ...] = VERSIONS, kernel: str | None = None,
          distro: str = DISTRO, *, force: bool = False, arches: tuple[str, ...] = ()) -> dict[str, Any]:
    """Build (or reuse) every version's artifacts under ``out``; return the manifest.

    The manifest (also ``out/manifest.json``) maps each version to relative paths and checksums:
    ``{"key", "kernel", "distro", "versions": {VER: {"dir", "iso", "iso_sha256", "tgz",
    "tgz_sha256", "repo", "built_for_kernel"}}}`` for the controller's architecture, and the same per
    version for each other dpkg architecture in ``arches`` under ``"by_arch": {DARCH: {VER: ...}}``
    (present only when there is one). A cached build that holds every asked architecture is reused
    (one built for more is too); else all of them are rebuilt, the cached ones with the asked ones.
    """
    kernel = kernel or default_kernel()
    for v in versions:
        _split(v)
    primary = deb_arch()
    foreign = [a for a in dict.fromkeys(arches) if a != primary]
    key = cache_key(tuple(versions), kernel, distro)
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    if not force and manifest_path.is_file():
        try:
            manifest = json.loads(manifest_path.read_text())
        except ValueError:
            manifest = {}
        cached = list(manifest.get("by_arch") or {})
        if (manifest.get("key") == key and set(foreign) <= set(cached)
                and _artifacts_present(out, manifest)):
            return manifest
        if manifest.get("key") == key:
            foreign = list(dict.fromkeys([*cached, *foreign]))

    # Rebuild everything into a staging dir, then swap it in.
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=out))
    try:
        result: dict[str, Any] = {"key": key, "kernel": kernel, "distro": distro, "versions": {}}
        if foreign:
            result["by_arch"] = {a: {} for a in foreign}
        for v in versions:
            rel_dir = f"MLNX_OFED-{v}"
            dist = staging / rel_dir
            dist.mkdir()
            sums: dict[str, str] = {}
            for darch in (primary, *foreign):
                work = staging / "work" / darch / v
                work.mkdir(parents=True)
                tree = build_tree(work, v, kernel, distro, darch)
                tgz = dist / f"{tree.name}.tgz"
                iso = dist / f"{tree.name}.iso"
                make_tgz(tree, tgz)
                make_iso(tree, iso, f"MLNX_OFED_LINUX-{v}")
                sums.update({p.name: sha256(p) for p in (iso, tgz)})
                repo = staging / repo_rel(v, darch)
                repo.parent.mkdir(parents=True, exist_ok=True)
                shutil.copytree(tree / "DEBS", repo)
                facts = {
                    "dir": tree.name,
                    "iso": f"{rel_dir}/{iso.name}",
                    "iso_sha256": sums[iso.name],
                    "tgz": f"{rel_dir}/{tgz.name}",
                    "tgz_sha256": sums[tgz.name],
                    "repo": repo_rel(v, darch),
                    "built_for_kernel": kernel,
                }
                if darch == primary:
                    result["versions"][v] = facts
                else:
                    result["by_arch"][darch][v] = facts
            (dist / "SHA256SUMS").write_text("".join(f"{s}  {n}\n" for n, s in sums.items()))
        shutil.rmtree(staging / "work")
        (staging / "manifest.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        # swap: remove the old artifacts, move the new ones in
        for old in list(out.iterdir()):
            if old == staging or old.name.startswith(".build-"):
                continue
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
        for new in staging.iterdir():
            new.rename(out / new.name)
        return result
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --- serving ------------------------------------------------------------------------------------

def _pid_file() -> Path:
    return paths.STATE_DIR / "repo-http.pid"


def _log_file() -> Path:
    return paths.STATE_DIR / "repo-http.log"


def _is_our_server(pid: int, directory: Path) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"http.server" in argv and str(directory).encode() in argv


def _terminate(pid: int, timeout: float = 5.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not procs.alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def wait_port(host: str, port: int, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def serve(directory: Path, bind: str = CONTROLLER_IP, port: int = HTTP_PORT) -> int:
    """Start ``python3 -m http.server`` on bind:port for directory in the background; return its pid."""
    log = _log_file()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", bind, "--directory", str(directory)],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
        )
    if not wait_port(bind, port, 15.0, proc):
        if proc.poll() is None:
            _terminate(proc.pid)
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        raise FabricopsError(
            f"the MLNX_OFED HTTP server did not start on {bind}:{port}"
            + (f" ({tail[0]})" if tail else "") + "; is the management bridge up and the port free?"
        )
    _pid_file().write_text(f"{proc.pid}\n")
    return proc.pid


def prepare(lab: dict[str, Any], *, bind: str = CONTROLLER_IP, port: int = HTTP_PORT) -> dict[str, Any]:
    """Build or reuse the artifacts in ``repo_dir()``, start the HTTP server, return group_vars facts.

    ``lab.get("ofed_build")`` may override ``versions``, ``default_version``, ``built_for_kernel``
    and ``distro`` (``lab["ofed"]`` is where the lab stores the facts this returns). Returns
    ``{"base_url", "repo_key_url", "repo_key_sha256", "pid", "versions": {VER: {"iso_url",
    "iso_sha256", "tgz_url", "tgz_sha256", "repo_url", "dir", "built_for_kernel"}}, "default_version",
    "distro"}`` (docs/lab-ofed.md), the versions for the controller's architecture; a topology with
    hosts of another one (``arch: arm64``) adds ``"by_arch": {DARCH: {VER: {...the same keys}}}``
    (:func:`topology_arches`). The apt mirrors are signed with the lab's key (:func:`sign_repo`),
    served at ``repo_key_url``.
    """
    cfg = lab.get("ofed_build") or {}
    versions = tuple(cfg.get("versions") or VERSIONS)
    default = cfg.get("default_version") or (DEFAULT_VERSION if DEFAULT_VERSION in versions else versions[-1])
    if default not in versions:
        raise FabricopsError(f"ofed default_version {default} is not one of {', '.join(versions)}")
    distro = cfg.get("distro") or DISTRO
    out = paths.repo_dir()
    arches = topology_arches(lab.get("topology"))
    manifest = build(out, versions, cfg.get("built_for_kernel") or default_kernel(), distro, arches=arches)
    key_sha256 = export_key(out / KEY_FILE)
    by_arch = {a: manifest["by_arch"][a] for a in arches[1:]}
    for builds in (manifest["versions"], *by_arch.values()):
        for f in builds.values():
            sign_repo(out / f["repo"])
    stop(lab)
    pid = serve(out, bind, port)
    base = f"http://{bind}:{port}"

    def urls(builds: dict[str, Any]) -> dict[str, Any]:
        return {
            v: {
                "iso_url": f"{base}/{f['iso']}",
                "iso_sha256": f["iso_sha256"],
                "tgz_url": f"{base}/{f['tgz']}",
                "tgz_sha256": f["tgz_sha256"],
                "repo_url": f"{base}/{f['repo']}",
                "dir": f["dir"],
                "built_for_kernel": f["built_for_kernel"],
            }
            for v, f in builds.items()
        }

    extra = {"by_arch": {a: urls(b) for a, b in by_arch.items()}} if by_arch else {}
    return {
        "base_url": f"{base}/",
        "repo_key_url": f"{base}/{KEY_FILE}",
        "repo_key_sha256": key_sha256,
        "pid": pid,
        "distro": distro,
        "default_version": default,
        "versions": urls(manifest["versions"]),
        **extra,
    }


def stop(lab: dict[str, Any] | None = None) -> None:
    """Stop the HTTP server (the pid in lab.json's ``repo`` or the pid file); only if it is ours."""
    out = paths.repo_dir()
    pids: set[int] = set()
    recorded = ((lab or {}).get("repo") or {}).get("pid")
    if recorded:
        pids.add(int(recorded))
    with contextlib.suppress(OSError, ValueError):
        pids.add(int(_pid_file().read_text().strip()))
    for pid in pids:
        if _is_our_server(pid, out):
            _terminate(pid)
    _pid_file().unlink(missing_ok=True)
