"""MLNX_OFED / DOCA-OFED installation decisions: pure functions, no Ansible.

The ``mlnx_ofed`` role calls them through its filter plugin (roles/mlnx_ofed/filter_plugins/) and
does only what they decide. See docs/ofed.md for the rules and the shapes returned.

- versions: ``24.10-1.1.4.0`` as NVIDIA names releases; ``ofed_info -s`` prints
  ``MLNX_OFED_LINUX-24.10-1.1.4.0:`` (DOCA-OFED: ``OFED-internal-24.10-1.1.4:``);
- the install is skipped when the installed version *is* the wanted one (string equality after
  normalisation), an upgrade when it is older, a downgrade (refused unless allowed) when newer;
- the kernel the modules are built for is recorded by the distribution itself: the
  ``mlnx-ofed-kernel-modules_<ver>.kver.<kernel>_<arch>.deb`` name in ``DEBS/`` (tarball, ISO) or the
  ``Depends`` of ``mlnx-ofed-all`` (apt repository);
- ``mlnxofedinstall`` exit codes (NVIDIA's table): 0 ok, 1 failure (distro, dpkg), 22 invalid
  parameter, 172 prerequisites not met (no drivers for the running kernel);
- ``openibd restart`` is refused while modules outside the driver stack hold it (``/proc/modules``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricops import doca as _doca
from fabricops.errors import FabricopsError, ParseError
from fabricops.parsers import ofed_info

METHODS = ("tarball", "iso", "repo", "doca")
RESTART_METHODS = ("openibd", "reboot")

#: 24.10-1.1.4.0 (MLNX_OFED), 24.10-1.1.4 (DOCA-OFED's OFED-internal numbering), 5.8-1.0.1.1.
# Whole-string matches (fullmatch, no strip): the version and digest reach apt, get_url and
# file names; "$" would also accept them with a trailing newline.
_VERSION = re.compile(r"(?P<major>\d+)\.(?P<minor>\d+)-(?P<rest>\d+(?:\.\d+)*)")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_MODULES_DEB = re.compile(
    r"^mlnx-ofed-kernel-modules_(?P<version>.+?)\.kver\.(?P<kernel>.+)_(?P<arch>[A-Za-z0-9]+)\.deb$"
)
_KVER_DEP = re.compile(
    r"mlnx-ofed-kernel-modules\s*\(\s*=\s*(?P<version>[^)\s]+?)\.kver\.(?P<kernel>[^)\s]+)\s*\)"
)

#: Exit codes of mlnxofedinstall (NVIDIA, "Installing MLNX_OFED", return codes).
RC_OK = 0
RC_FAILED = 1
RC_INVALID_PARAMETER = 22
RC_PREREQUISITES = 172

#: What ``mlnxofedinstall`` prints when the installed packages need the driver reloaded.
RESTART_MARK = "To load the new driver"

#: The driver stack that ``openibd stop`` unloads itself (MLNX_OFED's openibd unload list: the
#: verbs core, the connection managers, the user-space access modules, IPoIB and the mlx4/mlx5
#: drivers with their compat/firmware helpers). A loaded module *outside* this set that uses one
#: of them holds the stack: openibd cannot unload it, and stopping it cuts its users.
STACK_MODULES = frozenset({
    "ib_core", "ib_cm", "iw_cm", "rdma_cm", "ib_uverbs", "ib_umad", "rdma_ucm", "ib_ucm", "ib_sa",
    "ib_mad", "ib_addr", "ib_ipoib", "ib_ipath", "ib_qib",
    "mlx5_core", "mlx5_ib", "mlx4_core", "mlx4_ib", "mlx4_en", "mlx_compat", "mlxfw", "mlxdevm",
    "memtrack", "mlx5_fpga_tools", "eth_ipoib", "mlx5_dpll",
})

#: Upper-layer modules commonly found holding the stack, with what they are (for messages).
KNOWN_HOLDERS: Mapping[str, str] = {
    "nvme_rdma": "NVMe over Fabrics (RDMA) initiator",
    "nvmet_rdma": "NVMe over Fabrics (RDMA) target",
    "rpcrdma": "NFS over RDMA",
    "svcrdma": "NFS over RDMA (server)",
    "xprtrdma": "NFS over RDMA (client)",
    "ib_srp": "SCSI RDMA Protocol initiator",
    "ib_srpt": "SCSI RDMA Protocol target",
    "ib_iser": "iSCSI Extensions for RDMA initiator",
    "ib_isert": "iSCSI Extensions for RDMA target",
    "nvidia_peermem": "GPUDirect RDMA (NVIDIA driver)",
    "nv_peer_mem": "GPUDirect RDMA (legacy nv_peer_mem)",
    "ko2iblnd": "Lustre LNet o2ib",
    "rds_rdma": "RDS over RDMA",
    "smc": "SMC-R sockets",
    "9pnet_rdma": "9P over RDMA",
    "cifs": "SMB Direct",
    "ksmbd": "SMB Direct server",
    "mlx5_vdpa": "vDPA on mlx5",
    "mlx5_vfio_pci": "VFIO live migration on mlx5",
}


class OfedInputError(FabricopsError, ValueError):
    """Role input that cannot be acted on; str() is one sentence that says what to fix."""


# --- versions -----------------------------------------------------------------------------------

def valid_version(version: Any) -> bool:
    return isinstance(version, str) and bool(_VERSION.fullmatch(version))


def version_key(version: str) -> tuple[int, ...]:
    """``24.10-1.1.4.0`` -> (24, 10, 1, 1, 4, 0): orders releases."""
    m = _VERSION.fullmatch(version.strip())
    if not m:
        raise OfedInputError(f"{version!r} is not an MLNX_OFED version like 24.10-1.1.4.0")
    return (int(m["major"]), int(m["minor"]), *(int(x) for x in m["rest"].split(".")))


def installed_version(stdout: str | None, rc: int | None = 0) -> str | None:
    """``ofed_info -s`` output (and exit status) -> ``24.10-1.1.4.0`` or None when not installed.

    A missing tool (rc 127 / 2 from the command module, 'command not found') is "not installed";
    output that is not a version raises :class:`ParseError` (never guessed).
    """
    if rc not in (0, None) or not (stdout or "").strip():
        return None
    record = ofed_info.parse(stdout)
    return record.version_number if record.installed else None


def install_action(installed: str | None, wanted: str) -> str:
    """``none`` (wanted is installed), ``install`` (nothing installed), ``upgrade`` or ``downgrade``."""
    if installed is None:
        return "install"
    if installed.strip() == wanted.strip():
        return "none"
    try:
        return "upgrade" if version_key(installed) < version_key(wanted) else "downgrade"
    except OfedInputError:
        return "upgrade"  # an unreadable installed version is replaced, not compared


def dist_dir(url: str) -> str:
    """The distribution directory from an artifact URL: ``.../MLNX_OFED_LINUX-V-debian12.1-x86_64.tgz``
    -> ``MLNX_OFED_LINUX-V-debian12.1-x86_64`` (the tarball's top directory, NVIDIA's naming)."""
    name = url.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
    for suffix in (".tgz", ".tar.gz", ".iso"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


# --- input ----------------------------------------------------------------------------------------

def input_errors(
    version: Any,
    method: Any,
    *,
    tarball_url: Any = None,
    tarball_sha256: Any = None,
    iso_url: Any = None,
    iso_sha256: Any = None,
    repo_url: Any = None,
    add_kernel_support: bool = False,
    distro: Any = None,
    skip_distro_check: bool = False,
    restart_method: Any = "openibd",
    repo_trusted: bool = False,
    repo_signed_by: Any = None,
    repo_key_url: Any = None,
    repo_key_sha256: Any = None,
    doca: Mapping[str, Any] | None = None,
) -> list[str]:
    """Cross-field rules the argument spec cannot express; [] when the input is usable.

    Each entry is one sentence naming the variable to fix. A download (tarball, ISO) needs both a
    URL and its sha256: a pinned version without a checksum is refused. The apt mirror is signed:
    its source names a keyring (``repo_signed_by``, or the key downloaded from ``repo_key_url``
    with its sha256); ``repo_trusted`` (no signature check) is an explicit opt-in, not both.
    """
    errors: list[str] = []
    if method == "doca":
        # DOCA-Host is pinned by its release (mlnx_ofed_doca_version); mlnx_ofed_version is not used.
        d = dict(doca or {})
        errors += _doca.input_errors(d.get("version"), d.get("profile", "doca-ofed"), **{
            k: d[k] for k in ("repo_url", "key_url", "key_sha256", "signed_by", "dkms_kernels",
                              "secure_boot_enroll", "mok_password") if k in d})
        if restart_method not in RESTART_METHODS:
            errors.append(f"mlnx_ofed_restart_method {restart_method!r} is not one of "
                          f"{', '.join(RESTART_METHODS)}")
        return errors
    if not version:
        errors.append("mlnx_ofed_version is not set: choose the MLNX_OFED release to install "
                      "(e.g. 24.10-1.1.4.0); there is deliberately no default")
    elif not valid_version(str(version)):
        errors.append(f"mlnx_ofed_version {version!r} is not an MLNX_OFED version like 24.10-1.1.4.0")
    if method not in METHODS:
        errors.append(f"mlnx_ofed_install_method {method!r} is not one of {', '.join(METHODS)}")
    downloads = {"tarball": (tarball_url, tarball_sha256), "iso": (iso_url, iso_sha256)}
    if method in downloads:
        url, digest = downloads[method]
        if not url:
            errors.append(f"mlnx_ofed_{method}_url is not set: the {method} install needs the URL of the "
                          f"MLNX_OFED {version or ''} {method}".replace("  ", " "))
        if not digest:
            errors.append(f"mlnx_ofed_{method}_sha256 is not set: a pinned MLNX_OFED version needs the "
                          f"sha256 of its {method} (from SHA256SUMS next to the download)")
        elif not _SHA256.fullmatch(str(digest)):
            errors.append(f"mlnx_ofed_{method}_sha256 {str(digest)[:80]!r} is not a sha256 "
                          "(64 hexadecimal digits)")
        if url and version and valid_version(str(version)) and str(version) not in str(url):
            errors.append(f"mlnx_ofed_{method}_url does not name version {version}: "
                          f"{url} (a URL of another release would install the wrong version)")
    if method == "repo":
        if not repo_url:
            errors.append("mlnx_ofed_repo_url is not set: the repo install needs the apt source URL "
                          "of the local MLNX_OFED mirror")
        if add_kernel_support:
            errors.append("mlnx_ofed_add_kernel_support needs the tarball or iso method: an apt "
                          "repository ships modules built for one kernel only")
    if distro and skip_distro_check:
        errors.append("set either mlnx_ofed_distro or mlnx_ofed_skip_distro_check, not both")
    if restart_method not in RESTART_METHODS:
        errors.append(f"mlnx_ofed_restart_method {restart_method!r} is not one of "
                      f"{', '.join(RESTART_METHODS)}")
    if method == "repo":
        if repo_trusted and (repo_signed_by or repo_key_url):
            errors.append("set either mlnx_ofed_repo_trusted (no signature check) or a signing key "
                          "(mlnx_ofed_repo_signed_by / mlnx_ofed_repo_key_url), not both")
        elif not repo_trusted and not (repo_signed_by or repo_key_url):
            errors.append("the MLNX_OFED mirror needs its signing key: set mlnx_ofed_repo_key_url and "
                          "mlnx_ofed_repo_key_sha256, or mlnx_ofed_repo_signed_by (a keyring on the host); "
                          "only an unsigned mirror takes mlnx_ofed_repo_trusted: true")
        if repo_key_url and not (repo_key_sha256 and _SHA256.fullmatch(str(repo_key_sha256))):
            errors.append("mlnx_ofed_repo_key_sha256 is not a sha256 (64 hexadecimal digits): the key "
                          "from mlnx_ofed_repo_key_url is installed only with its checksum")
    return errors


#: Where the key from ``mlnx_ofed_repo_key_url`` goes when ``mlnx_ofed_repo_signed_by`` is empty.
DEFAULT_KEYRING = "/etc/apt/keyrings/mlnx_ofed.gpg"


def repo_keyring(signed_by: Any = None, key_url: Any = None) -> str | None:
    """The keyring the apt source names in ``signed-by`` (None: no key, the trusted opt-in)."""
    if signed_by:
        return str(signed_by)
    return DEFAULT_KEYRING if key_url else None


# --- kernel and distro ----------------------------------------------------------------------------

def _kernel_norm(kernel: str) -> str:
    # Debian versions cannot hold '_': NVIDIA's package names write the kernel with '-'.
    return kernel.strip().replace("_", "-")


def kernels_from_debs(names: Iterable[str]) -> list[str]:
    """File names (or paths) in ``DEBS/`` -> the kernels ``mlnx-ofed-kernel-modules`` is built for."""
    kernels = []
    for name in names:
        m = _MODULES_DEB.match(str(name).rsplit("/", 1)[-1])
        if m and m["kernel"] not in kernels:
            kernels.append(m["kernel"])
    return kernels


def kernels_from_depends(text: str) -> list[str]:
    """``apt-cache show mlnx-ofed-all=V`` (its Depends) -> the kernels of the binary modules package."""
    kernels = []
    for m in _KVER_DEP.finditer(text or ""):
        if m["kernel"] not in kernels:
            kernels.append(m["kernel"])
    return kernels


def kernel_check(running: str, built_for: Iterable[str], add_kernel_support: bool,
                 method: str = "tarball", version: str = "") -> dict[str, Any]:
    """Is the distribution usable on the running kernel?

    -> ``{"ok": bool, "add_kernel_support": bool (pass --add-kernel-support), "error": str|None}``.
    """
    built = [k for k in built_for if k]
    if not built:
        return {"ok": False, "add_kernel_support": False,
                "error": f"MLNX_OFED {version} records no kernel it is built for (no "
                         "mlnx-ofed-kernel-modules_*.kver.<kernel>_*.deb / Depends); is this an MLNX_OFED "
                         "distribution?".replace("  ", " ")}
    if _kernel_norm(running) in {_kernel_norm(k) for k in built}:
        return {"ok": True, "add_kernel_support": False, "error": None}
    if add_kernel_support and method != "repo":
        return {"ok": True, "add_kernel_support": True, "error": None}
    hint = ("use the tarball or iso method with mlnx_ofed_add_kernel_support: true"
            if method == "repo" else
            "set mlnx_ofed_add_kernel_support: true to rebuild its kernel modules for this kernel, or "
            "boot the kernel it is built for")
    return {"ok": False, "add_kernel_support": False,
            "error": f"MLNX_OFED {version} is built for kernel {', '.join(built)} but this host runs "
                     f"{running}; {hint}".replace("  ", " ")}


_DISTRO = re.compile(r"^(?P<os>[a-z]+?)(?P<ver>\d[\w.]*)$")


def distro_check(host: str, build: str, user_distro: str | None = None, skip: bool = False) -> dict[str, Any]:
    """The installer's distro check, made explicit.

    ``host`` is what ``mlnxofedinstall --print-distro`` prints (``debian12.11``), ``build`` the
    distribution's ``distro`` file (``debian12.1``). -> ``{"args": [...], "error": str|None}``.

    - equal: no option;
    - ``skip``: ``--skip-distro-check`` (the operator's deliberate choice);
    - ``user_distro`` (``mlnx_ofed_distro``): ``--distro NAME``; NAME must be the build's distro
      and the same OS and major release as the host (a newer point release, as NVIDIA's Debian
      builds need: debian12.1 on a debian12.11 host);
    - anything else: refused, before the installer's ``Error: The current MLNX_OFED_LINUX is intended
      for ...``.
    """
    host, build = (host or "").strip().lower(), (build or "").strip().lower()
    if build == "skip-distro-check":  # an -ext tree made with --distro
        return {"args": [], "error": None}
    if skip:
        return {"args": ["--skip-distro-check"], "error": None}
    if user_distro:
        want = str(user_distro).strip().lower()
        if want != build:
            return {"args": [], "error": f"mlnx_ofed_distro {want} is not the distro this MLNX_OFED is "
                                         f"built for ({build})"}
        hm, bm = _DISTRO.match(host), _DISTRO.match(build)
        if not (hm and bm and hm["os"] == bm["os"] and hm["ver"].split(".")[0] == bm["ver"].split(".")[0]):
            return {"args": [], "error": f"mlnx_ofed_distro {want} does not fit this host ({host}): it "
                                         "only bridges point releases of the same OS and major version; "
                                         "use mlnx_ofed_skip_distro_check: true to override deliberately"}
        return {"args": ["--distro", want], "error": None}
    if host == build:
        return {"args": [], "error": None}
    return {"args": [], "error": f"this MLNX_OFED is built for {build} but the host is {host} (the installer "
                                 f"would stop with 'Error: The current MLNX_OFED_LINUX is intended for "
                                 f"{build}'); set mlnx_ofed_distro: {build} to accept a newer point release "
                                 "of the same OS, or mlnx_ofed_skip_distro_check: true"}


# --- the installer --------------------------------------------------------------------------------

def installer_args(
    *,
    distro_args: Iterable[str] = (),
    add_kernel_support: bool = False,
    fw_update: bool = False,
    tmpdir: str | None = None,
    extra: Iterable[str] = (),
) -> list[str]:
    """Options for ``mlnxofedinstall``: ``--force`` is its own non-interactive mode (no ``yes |``)."""
    args = ["--force"]
    if not fw_update:
        args.append("--without-fw-update")
    args += list(distro_args)
    if add_kernel_support:
        args.append("--add-kernel-support")
        if tmpdir:
            args += ["--tmpdir", tmpdir]
    for a in extra:
        if a in ("--force", "--without-fw-update") or a in args:
            continue
        args.append(str(a))
    return args


def installer_result(rc: int, stdout: str = "", stderr: str = "") -> dict[str, Any]:
    """mlnxofedinstall's exit status and output -> ``{"ok", "restart_needed", "error"}``."""
    text = f"{stdout or ''}\n{stderr or ''}"
    if rc == RC_OK:
        return {"ok": True, "restart_needed": RESTART_MARK in text, "error": None}
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if rc == RC_PREREQUISITES:
        first = next((ln for ln in lines if "kernel is installed" in ln), "prerequisites are not met")
        error = (f"mlnxofedinstall exit 172 (prerequisites not met): {first}; set "
                 "mlnx_ofed_add_kernel_support: true to build for the running kernel")
    elif rc == RC_INVALID_PARAMETER:
        first = next((ln for ln in lines if ln.startswith("Unsupported option")), "invalid parameter")
        error = f"mlnxofedinstall exit 22 (invalid parameter): {first}; check mlnx_ofed_installer_extra_args"
    else:
        distro = next((ln for ln in lines if "is intended for" in ln), None)
        if distro:
            error = (f"mlnxofedinstall exit {rc}: {distro}; set mlnx_ofed_distro or "
                     "mlnx_ofed_skip_distro_check")
        else:
            last = next((ln for ln in reversed(lines) if "Failed" in ln or "Error" in ln),
                        lines[-1] if lines else "no output")
            log = next((ln.split(":", 1)[1].strip() for ln in lines
                        if ln.startswith("General log file:")), None)
            error = f"mlnxofedinstall exit {rc}: {last}" + (f" (log: {log})" if log else "")
    return {"ok": False, "restart_needed": False, "error": error}


# --- who holds the RDMA stack ---------------------------------------------------------------------

@dataclass
class Module:
    name: str
    size: int
    refcount: int
    used_by: list[str] = field(default_factory=list)
    state: str = "Live"


def parse_proc_modules(text: str) -> dict[str, Module]:
    """``/proc/modules`` -> {name: Module}. Lines: ``name size refcount used_by|- state address [taint]``."""
    mods: dict[str, Module] = {}
    for raw in (text or "").splitlines():
        parts = raw.split()
        if not parts:
            continue
        if len(parts) < 5 or not parts[1].isdigit():
            raise ParseError("/proc/modules", "lines 'name size refcount used_by state address'",
                             f"line {raw[:80]!r}")
        used = [] if parts[3] in ("-", "[permanent]") else [u for u in parts[3].split(",") if u]
        refs = int(parts[2]) if parts[2].lstrip("-").isdigit() else 0
        mods[parts[0]] = Module(parts[0], int(parts[1]), refs, used, parts[4])
    return mods


def stack_holders(text: str, stack: Iterable[str] = STACK_MODULES) -> list[str]:
    """Loaded modules outside the driver stack that use it (directly or through another holder),
    in the order they must be unloaded (users first). Empty ``text`` (no ``/proc/modules``, a kernel
    without loadable modules) -> []."""
    mods = parse_proc_modules(text)
    stack = set(stack)
    holders: set[str] = set()
    frontier = [m for m in mods if m in stack]
    seen = set(frontier)
    while frontier:
        name = frontier.pop()
        for user in mods[name].used_by if name in mods else []:
            if user in seen:
                continue
            seen.add(user)
            if user not in stack:
                holders.add(user)
            frontier.append(user)
    # unload order: a module before the modules it uses (its used_by list empty among holders first)
    order: list[str] = []
    remaining = set(holders)
    while remaining:
        ready = sorted(h for h in remaining
                       if not any(u in remaining for u in (mods[h].used_by if h in mods else [])))
        if not ready:  # a cycle cannot happen in the kernel; keep going deterministically
            ready = sorted(remaining)
        for h in ready:
            order.append(h)
            remaining.discard(h)
    return order


def describe_holders(holders: Iterable[str]) -> str:
    """['nvme_rdma', 'x'] -> 'nvme_rdma (NVMe over Fabrics (RDMA) initiator), x'."""
    return ", ".join(f"{h} ({KNOWN_HOLDERS[h]})" if h in KNOWN_HOLDERS else h for h in holders)


# --- restart --------------------------------------------------------------------------------------

def pending_from_marker(marker: str | None, boot_id: str | None) -> str | None:
    """The restart-pending marker (``boot_id<TAB>reason``) -> the reason while the same boot is running,
    None when there is no marker or the host has rebooted since (a reboot loads the new driver)."""
    if not marker or not marker.strip():
        return None
    first = marker.strip().splitlines()[0]
    boot, _, reason = first.partition("\t")
    if boot_id is not None and boot.strip() != str(boot_id).strip():
        return None
    return reason.strip() or "an openibd restart is pending"


def restart_reasons(installer_restart: bool, action: str, version: str, conf_changed: Iterable[str],
                    pending: str | None, method: str = "tarball", dkms: str | None = None) -> list[str]:
    """Why the driver must be restarted now; [] when nothing asks for it.

    ``dkms``: the reason from :func:`fabricops.doca.dkms_restart_reason` (the running kernel's DKMS
    modules were missing and are built now)."""
    reasons = []
    if pending:
        reasons.append(pending)
    if installer_restart and method == "doca":
        reasons.append(f"DOCA-Host {version} packages were installed ({action}); the running driver is "
                       "the previous one until openibd restarts")
    elif installer_restart and method == "repo":
        reasons.append(f"MLNX_OFED {version} packages were installed from the mirror ({action}); the "
                       "running driver is the previous one until openibd restarts")
    elif installer_restart:
        reasons.append(f"MLNX_OFED {version} was installed ({action}) and the installer says "
                       "'To load the new driver, run: /etc/init.d/openibd restart'")
    keys = [k for k in conf_changed if k not in BOOT_ONLY_KEYS]
    if keys:
        reasons.append(f"openib.conf changed ({', '.join(keys)}): openibd reads it when it starts")
    if dkms and dkms not in reasons:
        reasons.append(dkms)
    return reasons


#: openib.conf keys read only at boot: changing them needs no restart now.
BOOT_ONLY_KEYS = frozenset({"ONBOOT", "RUN_FW_UPDATER_ONBOOT"})


def restart_plan(
    reasons: Iterable[str],
    *,
    holders: Iterable[str] = (),
    allow_restart: bool = False,
    allow_unload_users: bool = False,
    allow_reboot: bool = False,
    method: str = "openibd",
    host: str = "",
    blocked: str | None = None,
) -> dict[str, Any]:
    """What to do about the driver -> ``{"action", "unload": [...], "message"}``.

    action: ``none`` (nothing asks for a restart), ``pending`` (no consent: report, change nothing),
    ``openibd`` (restart now, unloading ``unload`` first), ``reboot``, ``refuse`` (consent given but
    modules outside the stack hold it and neither unloading them nor a reboot is allowed).
    """
    reasons = [r for r in reasons if r]
    holders = list(holders)
    who = f"{host}: " if host else ""
    if not reasons:
        return {"action": "none", "unload": [], "message": ""}
    why = "; ".join(reasons)
    if blocked:
        # e.g. a MOK enrollment waiting for a reboot: loading the new modules now would be refused
        return {"action": "pending", "unload": [], "message": f"{who}a driver restart is pending ({why}) "
                f"but cannot load the new modules yet: {blocked}"}
    if method == "reboot":
        if allow_reboot:
            return {"action": "reboot", "unload": [],
                    "message": f"{who}rebooting to load the new driver ({why})"}
        return {"action": "pending", "unload": [],
                "message": f"{who}a reboot is pending ({why}); rerun with mlnx_ofed_allow_reboot: true or "
                           "reboot in a maintenance window"}
    if not allow_restart:
        extra = ("" if allow_reboot else
                 " or mlnx_ofed_allow_reboot: true with mlnx_ofed_restart_method: reboot")
        held = f"; note: {describe_holders(holders)} hold the RDMA stack" if holders else ""
        return {"action": "pending", "unload": [],
                "message": f"{who}an openibd restart is pending ({why}); rerun with "
                           f"mlnx_ofed_allow_restart: true{extra}, or reboot{held}"}
    if holders and not allow_unload_users:
        if allow_reboot:
            return {"action": "reboot", "unload": [],
                    "message": f"{who}rebooting instead of restarting openibd: {describe_holders(holders)} "
                               f"hold the RDMA stack ({why})"}
        return {"action": "refuse", "unload": holders,
                "message": f"{who}openibd restart refused: {describe_holders(holders)} hold the RDMA stack "
                           "and would be cut off; stop their users and unload them, or set "
                           "mlnx_ofed_allow_unload_users: true (or mlnx_ofed_allow_reboot: true)"}
    unload = holders if allow_unload_users else []
    msg = f"{who}restarting openibd ({why})"
    if unload:
        msg += f" after unloading {', '.join(unload)}"
    return {"action": "openibd", "unload": unload, "message": msg}
