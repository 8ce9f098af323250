"""DOCA-Host decisions of the ``mlnx_ofed`` role (method ``doca``): pure functions, no Ansible.

- repository: NVIDIA publishes DOCA-Host as flat apt repositories
  ``https://linux.mellanox.com/public/repo/doca/<version>/<os>/<arch>/`` (``deb [signed-by=K] URL ./``;
  ``<os>`` ``debian12``, ``ubuntu22.04``; ``<arch>`` ``x86_64`` or ``arm64-sbsa``), signed with
  ``GPG-KEY-Mellanox.pub`` (NVIDIA "DOCA-Host Installation and Upgrade", "Upgrading Software on Host");
- a profile is a meta-package (``doca-ofed``, ``doca-roce``, ``doca-networking``, ``doca-all``;
  NVIDIA "DOCA Profiles"); the role installs it at the version the repository has, holds it, and
  is idempotent by that installed version;
- ``ofed_info -s`` of DOCA-OFED prints ``OFED-internal-<ver>:``, standalone MLNX_OFED
  ``MLNX_OFED_LINUX-<ver>:``; going from one to the other is a stack change (NVIDIA: uninstall the
  old stack first, ``/usr/sbin/ofed_uninstall.sh --force``), done only with consent;
- DOCA-Host's kernel modules are DKMS packages (``mlnx-ofed-kernel-dkms``, ...; NVIDIA "DOCA-Host
  Installation and DKMS Management Guide"): every kernel that can run (the running one and the one
  GRUB boots next) needs them built, which needs that kernel's headers;
- under Secure Boot a locally built module loads only when its signing key (dkms:
  ``/var/lib/dkms/mok.pub``) is enrolled as a MOK (``mokutil --import``, then a reboot and the
  confirmation at the console, MokManager).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from fabricops import platforms
from fabricops.parsers import ofed_info

PROFILES = ("doca-ofed", "doca-roce", "doca-networking", "doca-all")
NVIDIA_REPO = "https://linux.mellanox.com/public/repo/doca"
#: NVIDIA's signing key of the DOCA repositories (its sha256 must still be given: it is pinned).
NVIDIA_KEY_URL = f"{NVIDIA_REPO}/GPG-KEY-Mellanox.pub"
DEFAULT_KEYRING = "/etc/apt/keyrings/doca.gpg"
#: The uninstaller MLNX_OFED and DOCA-OFED ship (NVIDIA "Uninstalling Software from Host").
UNINSTALLER = "/usr/sbin/ofed_uninstall.sh"
#: The dkms signing key dkms 3 generates on its first build (and signs modules with).
MOK_KEY = "/var/lib/dkms/mok.pub"

#: DKMS modules of the stack as ``dkms status`` names them (DOCA-Host's ``<name>-dkms`` packages).
#: mlnx-ofed-kernel (mlx5_core, mlx5_ib, ib_core, ...) is always required; the others only once dkms
#: has them (an optional package that is installed).
REQUIRED_DKMS = ("mlnx-ofed-kernel",)
OPTIONAL_DKMS = frozenset(
    {"knem", "xpmem", "iser", "isert", "srp", "mlnx-nfsrdma", "mlnx-nvme", "kernel-mft-dkms"}
)

# DOCA releases are three numbers (2.9.1, 3.2.0). Whole-string match: it reaches a URL and apt.
_DOCA_VERSION = re.compile(r"\d+\.\d+\.\d+")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_URL = re.compile(r"(?:https?|file)://[A-Za-z0-9._~:/?#@!&+,=%-]+")
_KERNEL = re.compile(r"[0-9][A-Za-z0-9._+~-]{0,127}")



# --- input ----------------------------------------------------------------------------------------


def valid_version(version: Any) -> bool:
    return isinstance(version, str) and bool(_DOCA_VERSION.fullmatch(version))


def input_errors(
    version: Any,
    profile: Any,
    *,
    repo_url: Any = None,
    key_url: Any = None,
    key_sha256: Any = None,
    signed_by: Any = None,
    dkms_kernels: Any = ("running", "next"),
    secure_boot_enroll: bool = False,
    mok_password: Any = None,
) -> list[str]:
    """Rules of the ``doca`` method the argument spec cannot express; [] when usable."""
    errors: list[str] = []
    if not version:
        errors.append(
            "mlnx_ofed_doca_version is not set: choose the DOCA-Host release to install "
            "(e.g. 2.9.1); there is deliberately no default"
        )
    elif not valid_version(str(version)):
        errors.append(f"mlnx_ofed_doca_version {str(version)[:40]!r} is not a DOCA release like 2.9.1")
    if profile not in PROFILES:
        errors.append(f"mlnx_ofed_doca_profile {str(profile)[:40]!r} is not one of {', '.join(PROFILES)}")
    if repo_url:
        if not _URL.fullmatch(str(repo_url)):
            errors.append(
                f"mlnx_ofed_doca_repo_url {str(repo_url)[:80]!r} is not an http(s)/file URL "
                "without spaces or quotes"
            )
        elif version and valid_version(str(version)) and f"/{version}/" not in f"{repo_url}/":
            errors.append(
                f"mlnx_ofed_doca_repo_url does not name DOCA {version}: {repo_url} (a mirror "
                "of another release would install the wrong version)"
            )
    if not (signed_by or key_url):
        errors.append(
            "the DOCA repository needs its signing key: set mlnx_ofed_doca_repo_key_url and "
            "mlnx_ofed_doca_repo_key_sha256 (NVIDIA's key is "
            f"{NVIDIA_KEY_URL}), or mlnx_ofed_doca_repo_signed_by (a keyring on the host)"
        )
    if key_url:
        if not _URL.fullmatch(str(key_url)):
            errors.append(f"mlnx_ofed_doca_repo_key_url {str(key_url)[:80]!r} is not an http(s)/file URL")
        if not (key_sha256 and _SHA256.fullmatch(str(key_sha256))):
            errors.append(
                "mlnx_ofed_doca_repo_key_sha256 is not a sha256 (64 hexadecimal digits): the key "
                "from mlnx_ofed_doca_repo_key_url is installed only with its checksum"
            )
    kernels = [dkms_kernels] if isinstance(dkms_kernels, str) else list(dkms_kernels or [])
    for k in kernels:
        if k not in ("running", "next") and not _KERNEL.fullmatch(str(k)):
            errors.append(
                f"mlnx_ofed_dkms_kernels entry {str(k)[:40]!r} is not running, next or a "
                "kernel release like 6.1.0-18-amd64"
            )
    if secure_boot_enroll and not mok_password:
        errors.append(
            "mlnx_ofed_secure_boot_enroll: true needs mlnx_ofed_mok_password (the one-time "
            "password you type at the console to confirm the enrollment after the reboot)"
        )
    return errors


def repo_url(
    version: str, distribution: str, major: str, dist_version: str, arch: str, override: str | None = None
) -> str:
    """The apt source URL: the mirror when given, else NVIDIA's URL for this release, OS and arch (the
    ``<os>/<arch>`` part from :func:`fabricops.platforms.doca_repo_path`, the one table)."""
    if override:
        return str(override).rstrip("/") + "/"
    facts = {"distribution": distribution, "distribution_major_version": major,
             "distribution_version": dist_version, "architecture": arch}
    try:
        path = platforms.doca_repo_path(facts)
    except ValueError as exc:
        raise ValueError(
            f"NVIDIA publishes no DOCA-Host repository this role knows for {distribution} "
            f"{dist_version or major} {arch} ({exc}); set mlnx_ofed_doca_repo_url to a mirror"
        ) from None
    return f"{NVIDIA_REPO}/{version}/{path}/"


def keyring(signed_by: Any = None, key_url: Any = None) -> str:
    return str(signed_by) if signed_by else DEFAULT_KEYRING


def madison_version(text: str, url: str) -> str | None:
    """``apt-cache madison PROFILE`` -> the version published by ``url`` (None when that repository does not
    have it, e.g. before the source is written and the cache updated).
    Lines: `` pkg | version | URL ./ Packages``.
    """
    want = _uri(url)
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3:
            continue
        source = parts[2].split()
        if source and _uri(source[0]) == want:
            return parts[1]
    return None


def _uri(url: str) -> str:
    # apt prints the source URI without the trailing '/' and a file URL as file:/path (apt 2.6).
    u = str(url).strip().rstrip("/")
    return "file:/" + u[len("file:") :].lstrip("/") if u.startswith("file:") else u


# --- versions (Debian order) ----------------------------------------------------------------------


def _order(c: str) -> int:
    # dpkg's order(): '~' before everything (even the end), then the end, letters, other characters.
    if c == "~":
        return -1
    if c.isdigit():
        return 0
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def _verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i, j = i + 1, j + 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i, j = i + 1, j + 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _split(v: str) -> tuple[int, str, str]:
    epoch, _, rest = v.partition(":") if ":" in v else ("0", "", v)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return (int(epoch) if epoch.isdigit() else 0), upstream, revision


def debian_compare(a: str, b: str) -> int:
    """``dpkg --compare-versions`` as a number (<0, 0, >0): epoch, then upstream, then the revision
    after the last '-' (dpkg's verrevcmp)."""
    ea, ua, ra = _split(str(a).strip())
    eb, ub, rb = _split(str(b).strip())
    if ea != eb:
        return ea - eb
    return _verrevcmp(ua, ub) or _verrevcmp(ra, rb)


def install_action(installed: str | None, wanted: str | None) -> str:
    """Installed profile version vs the repository's: ``none``, ``install``, ``upgrade``, ``downgrade``, or
    ``update`` (the repository's version is not known yet: its source is not configured or the cache
    not updated)."""
    if not installed:
        return "install"
    if not wanted:
        return "update"
    c = debian_compare(installed, wanted)
    return "none" if c == 0 else ("upgrade" if c < 0 else "downgrade")


# --- the stack ------------------------------------------------------------------------------------


def stack_kind(ofed_info_stdout: str | None) -> str | None:
    """``MLNX_OFED_LINUX-...`` -> ``mlnx_ofed``; ``OFED-internal-...`` (DOCA-OFED) -> ``doca``; nothing
    installed
    or a bare version (which does not say) -> None. Unreadable output raises ParseError."""
    if not (ofed_info_stdout or "").strip():
        return None
    rec = ofed_info.parse(ofed_info_stdout)
    name = rec.version or ""
    if not rec.installed:
        return None
    if name.startswith("MLNX_OFED_LINUX-"):
        return "mlnx_ofed"
    if name.startswith("OFED-internal-"):
        return "doca"
    return None


def stack_change(
    kind: str | None, installed: str | None, *, doca_version: str, profile: str, allow: bool, host: str = ""
) -> dict[str, Any]:
    """What to do about the stack that is there -> ``{"action": "none"|"replace"|"refuse", "message"}``."""
    who = f"{host}: " if host else ""
    if kind != "mlnx_ofed":
        return {"action": "none", "message": ""}
    what = f"MLNX_OFED {installed or ''} with DOCA-Host {doca_version} ({profile})".replace("  ", " ")
    if not allow:
        return {
            "action": "refuse",
            "message": f"{who}this host runs standalone MLNX_OFED {installed or ''}; replacing it with "
            f"DOCA-Host {doca_version} uninstalls it ({UNINSTALLER} --force) and needs "
            "mlnx_ofed_allow_stack_change: true".replace("  ", " "),
        }
    return {"action": "replace", "message": f"{who}replacing {what}"}


# --- kernels and DKMS -----------------------------------------------------------------------------


def _kernel_of(name: str) -> str | None:
    base = str(name).rsplit("/", 1)[-1]
    if not base.startswith("vmlinuz-"):
        return None  # vmlinuz, vmlinuz.old: links to the same images
    k = base[len("vmlinuz-") :]
    return k or None


def next_boot_kernel(vmlinuz_names: Iterable[str], running: str) -> str:
    """The kernel the next boot starts: the newest ``/boot/vmlinuz-*`` by Debian version order.

    Debian's GRUB (grub-mkconfig's 10_linux, version_find_latest -> version_test_gt, which Debian
    patches to ``dpkg --compare-versions``) puts the newest kernel by that order first, and the default
    entry is the first one; so after a kernel upgrade the next boot runs the new kernel. No image
    found -> the running kernel (nothing else can boot)."""
    kernels = [k for k in (_kernel_of(n) for n in vmlinuz_names or []) if k]
    if not kernels:
        return running
    best = kernels[0]
    for k in kernels[1:]:
        if debian_compare(k, best) > 0:
            best = k
    return best


def dkms_kernels(wanted: Iterable[str] | str, running: str, next_boot: str) -> list[str]:
    """``mlnx_ofed_dkms_kernels`` (``running``, ``next`` or kernel releases) -> kernels, in order,
    once each."""
    items = [wanted] if isinstance(wanted, str) else list(wanted or [])
    out: list[str] = []
    for item in items:
        k = running if item == "running" else next_boot if item == "next" else str(item)
        if k and k not in out:
            out.append(k)
    return out


def stack_dkms_modules(status: Iterable[Mapping[str, Any]]) -> list[str]:
    """The stack's DKMS modules: mlnx-ofed-kernel, plus the optional ones dkms knows."""
    mods = list(REQUIRED_DKMS)
    for rec in status or []:
        m = rec.get("module")
        if m in OPTIONAL_DKMS and m not in mods:
            mods.append(m)
    return mods


def is_dkms_stack(status: Iterable[Mapping[str, Any]]) -> bool:
    return any(rec.get("module") in REQUIRED_DKMS for rec in status or [])


def dkms_gaps(
    status: Iterable[Mapping[str, Any]], modules: Iterable[str], kernels: Iterable[str]
) -> list[dict[str, Any]]:
    """Each (module, kernel) that ``dkms status`` does not show ``installed`` ->
    ``{"module", "kernel", "state"}``; state is what dkms says for that kernel (``built``, ``added``...)
    or ``missing`` when it lists nothing for it."""
    status = list(status or [])
    gaps = []
    for kernel in kernels:
        for module in modules:
            states = [
                str(r.get("state", ""))
                for r in status
                if r.get("module") == module and r.get("kernel") == kernel
            ]
            if "installed" in states:
                continue
            gaps.append({"module": module, "kernel": kernel, "state": states[0] if states else "missing"})
    return gaps


def dkms_messages(gaps: Iterable[Mapping[str, Any]], check_mode: bool = True) -> list[str]:
    """One line per kernel: ``kernel K has no mlnx-ofed-kernel DKMS modules: would build``."""
    by_kernel: dict[str, list[str]] = {}
    for g in gaps:
        by_kernel.setdefault(str(g["kernel"]), []).append(str(g["module"]))
    verb = "would build" if check_mode else "building"
    return [f"kernel {k} has no {', '.join(m)} DKMS modules: {verb}" for k, m in by_kernel.items()]


def dkms_restart_reason(gaps: Iterable[Mapping[str, Any]], running: str) -> str | None:
    """A build for the running kernel means the loaded driver is not the stack's: reload it."""
    mods = [str(g["module"]) for g in gaps if g.get("kernel") == running]
    if not mods:
        return None
    return (
        f"the {', '.join(mods)} DKMS modules of the running kernel {running} are missing: once they are "
        "built the driver must be (re)loaded by an openibd restart"
    )


def headers_package(kernel: str, facts: Mapping[str, Any] | None = None) -> str:
    """The headers package of a kernel release: Debian's ``linux-headers-<release>`` without facts,
    else what :func:`fabricops.platforms.kernel_headers_package` chooses for that host (EL:
    ``kernel-devel-``/``kernel-64k-devel-``)."""
    if not _KERNEL.fullmatch(str(kernel)):
        raise ValueError(f"{kernel!r} is not a kernel release")
    if facts is None:
        return f"linux-headers-{kernel}"
    return platforms.kernel_headers_package(facts, str(kernel))


# --- Secure Boot ----------------------------------------------------------------------------------


ENROLL_HOWTO = (
    f"enroll the dkms signing key: mokutil --import {MOK_KEY} (it asks for a one-time password), "
    "reboot, and confirm 'Enroll MOK' with that password at the console (MokManager); or let the "
    "role queue it with mlnx_ofed_secure_boot_enroll: true and mlnx_ofed_mok_password"
)


def secure_boot_plan(
    secure_boot: bool | None, key: str | None, *, enroll: bool = False, host: str = ""
) -> dict[str, Any]:
    """-> ``{"action": "none"|"enroll"|"pending"|"refuse", "message"}``.

    ``key``: ``enrolled``, ``queued``, ``not_enrolled`` or None (no key yet: dkms makes it on its
    first build). ``queued`` comes from the role's own marker (written when it queued the enrollment, valid
    in that boot): ``mokutil --test-key`` already says "is already enrolled" for a key in the pending
    request (fabricops.parsers.mokutil), although the kernel refuses its modules until the reboot.
    ``none``: Secure Boot off, or the key enrolled. ``pending``: enrollment queued, a reboot + console
    confirmation away (modules do not load before). ``enroll``: consent given, queue it. ``refuse``: before
    building or loading anything."""
    who = f"{host}: " if host else ""
    if not secure_boot or key == "enrolled":
        return {"action": "none", "message": ""}
    if key == "queued":
        return {
            "action": "pending",
            "message": f"{who}the dkms signing key {MOK_KEY} is queued for MOK enrollment: reboot and "
            "confirm it at the console; the DKMS modules do not load before that",
        }
    if enroll:
        return {
            "action": "enroll",
            "message": f"{who}Secure Boot is on and {MOK_KEY} is not enrolled: queueing its MOK enrollment",
        }
    state = "does not exist yet" if key is None else "is not enrolled"
    return {
        "action": "refuse",
        "message": f"{who}Secure Boot is on and the dkms signing key {MOK_KEY} {state}, so the DKMS-built "
        f"modules would be refused ('Key was rejected by service'); {ENROLL_HOWTO}",
    }


# --- what the role reads, decided in one place ----------------------------------------------------


def installed_package_version(stdout: str | None, rc: int | None = 0) -> str | None:
    """``dpkg-query -W -f='${db:Status-Abbrev}${Version}\\n' PKG`` -> the installed version or None.
    The abbreviation's second letter is the package state (``i`` installed; ``hi`` = held and installed)."""
    if rc not in (0, None):
        return None
    line = next((ln for ln in (stdout or "").splitlines() if ln.strip()), "")
    if len(line) < 4 or line[1] != "i":
        return None
    return line[3:].strip() or None


def profile_is_release(installed: str | None, release: str) -> bool:
    """Whether an installed profile package version belongs to the DOCA release: ``3.1.0-1`` (and
    NVIDIA's longer ``2.9.1-018000-24.10-...`` forms) is 3.1.0 / 2.9.1; ``2.9.10-1`` is not 2.9.1."""
    if not installed or not release:
        return False
    v = installed.split(":", 1)[-1]
    return v == release or v.startswith((f"{release}-", f"{release}+", f"{release}~"))


def state(
    ofed_info_stdout: str | None,
    ofed_info_rc: int | None,
    dpkg_stdout: str | None,
    dpkg_rc: int | None,
    madison_stdout: str | None,
    url: str,
    *,
    doca_version: str,
    profile: str,
    allow_stack_change: bool,
    host: str = "",
) -> dict[str, Any]:
    """The preflight decision of the ``doca`` method.

    -> ``{"stack", "stack_version", "installed", "available", "action", "stack_change": {action, message}}``:
    ``action`` is ``replace`` when standalone MLNX_OFED is there (consent decides in ``stack_change``), else
    :func:`install_action` of the installed profile version against the version ``url`` publishes."""
    text = ofed_info_stdout if ofed_info_rc in (0, None) else ""
    kind = stack_kind(text)
    stack_version = ofed_info.parse(text).version_number if (text or "").strip() else None
    installed = installed_package_version(dpkg_stdout, dpkg_rc)
    available = madison_version(madison_stdout or "", url)
    change = stack_change(
        kind, stack_version, doca_version=doca_version, profile=profile, allow=allow_stack_change, host=host
    )
    action = "replace" if change["action"] != "none" else install_action(installed, available)
    if action == "none" and kind != "doca":
        action = "install"  # the profile is there but ofed_info does not show DOCA-OFED: repair
    return {
        "stack": kind,
        "stack_version": stack_version,
        "installed": installed,
        "available": available,
        "action": action,
        "stack_change": change,
    }


def dkms_plan(
    status: Iterable[Mapping[str, Any]],
    vmlinuz_names: Iterable[str],
    running: str,
    wanted: Iterable[str] | str,
    with_headers: Iterable[str],
    *,
    method: str = "doca",
    check_mode: bool = False,
) -> dict[str, Any]:
    """Which kernels need the stack's DKMS modules built.

    -> ``{"dkms_stack", "next_boot", "kernels", "modules", "gaps", "missing": [{module, kernel}],
    "build": [kernel], "no_headers": [kernel], "messages", "restart_reason"}``. Not a DKMS stack
    (MLNX_OFED's prebuilt modules: dkms lists no mlnx-ofed-kernel) and not the doca method -> nothing
    to do."""
    status = list(status or [])
    nxt = next_boot_kernel(vmlinuz_names, running)
    dkms_stack = method == "doca" or is_dkms_stack(status)
    kernels = dkms_kernels(wanted, running, nxt)
    if not dkms_stack:
        return {
            "dkms_stack": False,
            "next_boot": nxt,
            "kernels": kernels,
            "modules": [],
            "gaps": [],
            "missing": [],
            "build": [],
            "no_headers": [],
            "messages": [],
            "restart_reason": None,
        }
    modules = stack_dkms_modules(status)
    gaps = dkms_gaps(status, modules, kernels)
    build = []
    for g in gaps:
        if g["kernel"] not in build:
            build.append(g["kernel"])
    have = set(with_headers or [])
    return {
        "dkms_stack": True,
        "next_boot": nxt,
        "kernels": kernels,
        "modules": modules,
        "gaps": gaps,
        "missing": [{"module": g["module"], "kernel": g["kernel"]} for g in gaps],
        "build": build,
        "no_headers": [k for k in build if k not in have],
        "messages": dkms_messages(gaps, check_mode),
        "restart_reason": dkms_restart_reason(gaps, running),
    }
