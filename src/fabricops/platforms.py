"""The operating systems and architectures each host role supports: one table, read by the first
task of every role (the ``fabricops.fabric.platform_refusal`` filter) and by the tests that keep
each role's ``meta/main.yml`` platforms equal to it.

"Supported" is what the tests run, per role (:data:`SUPPORT`): every host role on Debian 12 x86_64
(the lab's default hosts), the roles :data:`AARCH64_ROLES` names on Debian 12 aarch64 (the arm64 host
gh01, under qemu-user) and the fabric manager and IMEX on Rocky 9 x86_64 (the ``rpm`` hosts: real dnf
and rpm); docs/lab-fidelity.md says what each lab host is. A host of a family or architecture a role does not
implement (SLES, or RHEL for a role with apt steps only) would fail deep inside it, after changing
things, so it is refused before anything changes. A system of an implemented family and architecture
the tests do not run (Ubuntu 22.04 / 24.04, Alma) is refused too, unless the operator opts in with
``fabricops_allow_untested_platform: true``: the steps exist for it, nobody has proven them there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: the host roles (roce_switch runs against switches, which check their own OS)
HOST_ROLES = (
    "fabric_monitor",
    "gpudirect",
    "ipoib",
    "mlnx_ofed",
    "nccl_profile",
    "nic_firmware",
    "nvidia_fabric_manager",
    "nvidia_imex",
    "roce_host",
    "subnet_manager",
)

#: (distribution, major version, architecture) -> (meta/main.yml name, meta/main.yml version)
META_NAMES = {("Debian", "12"): ("Debian", "bookworm"), ("Rocky", "9"): ("EL", "9")}
DEBIAN12_X86 = ("Debian", "12", "x86_64")


@dataclass(frozen=True)
class RoleSupport:
    """What one host role implements (``families`` x ``arches``: its package, repository and
    network steps exist there) and what the tests run (``tested``: (distribution, major,
    architecture) rows, each proven on a lab host)."""

    tested: tuple[tuple[str, str, str], ...] = (DEBIAN12_X86,)
    families: tuple[str, ...] = ("Debian",)
    arches: tuple[str, ...] = ("x86_64",)

    @property
    def text(self) -> str:
        """``Debian 12 on x86_64`` / ``Debian 12 on x86_64 and aarch64, Rocky 9 on x86_64``."""
        seen: dict[tuple[str, str], list[str]] = {}
        for dist, major, arch in self.tested:
            seen.setdefault((dist, major), []).append(arch)
        return ", ".join(f"{d} {m} on {' and '.join(a)}" for (d, m), a in seen.items())


DEBIAN12_ARM = ("Debian", "12", "aarch64")
ROCKY9_X86 = ("Rocky", "9", "x86_64")
_ARM = RoleSupport(tested=(DEBIAN12_X86, DEBIAN12_ARM), arches=("x86_64", "aarch64"))

#: per host role, what it supports. Widen a row only with the lab test that runs it:
#:
#: - aarch64 (issue 37 point 4): site.yml converges on the lab's arm64 host gh01 (a GH200 server:
#:   MLNX_OFED from its -aarch64 tarball, firmware, the subnet manager check, GPUDirect, IPoIB, NCCL),
#:   a second run and check mode change nothing, verify passes and drift names a hand edit
#:   (tests/lab_arm64/test_arm64_host.py). roce_host, the fabric manager, IMEX and the monitor stay
#:   x86_64: gh01 has no RoCE port, no NVSwitch, no NVL72 tray and runs no monitoring play.
#: - the RHEL family (issue 37 point 3): the fabric manager converges on the lab's ``rpm`` host (real
#:   dnf / rpm with Rocky 9.4's identity) from the lab's signed RPM repository, version-locked with
#:   dnf versionlock; a second run and check mode change nothing; drift sees a removal and an unlock
#:   (tests/lab_rpm/).
#: - IMEX on the RHEL family: nvidia_imex converges on the lab's ``rpm`` GB200 tray (topology
#:   ``gb200-rpm``, one NVLink domain with a Debian tray) from the dnf source its driver came from,
#:   version-locked with dnf versionlock, its IMEX daemon connected to the Debian tray's; a second run and
#:   check mode change nothing; drift sees a removal and an unlock (tests/lab_rpm_imex/).
SUPPORT: dict[str, RoleSupport] = {
    "fabric_monitor": RoleSupport(),
    "gpudirect": _ARM,
    "ipoib": _ARM,
    "mlnx_ofed": _ARM,
    "nccl_profile": _ARM,
    "nic_firmware": _ARM,
    "nvidia_fabric_manager": RoleSupport(tested=(DEBIAN12_X86, ROCKY9_X86), families=("Debian", "RedHat")),
    "nvidia_imex": RoleSupport(tested=(DEBIAN12_X86, ROCKY9_X86), families=("Debian", "RedHat")),
    "roce_host": RoleSupport(),
    "subnet_manager": _ARM,
}
#: the roles proven on aarch64 (docs, tests)
AARCH64_ROLES = tuple(r for r in HOST_ROLES if "aarch64" in SUPPORT[r].arches)

#: kept for callers that ask for the default row's words
TESTED: tuple[tuple[str, str, str, str], ...] = (("Debian", "12", "Debian", "bookworm"),)
SUPPORTED_TEXT = "Debian 12 on x86_64"


def _found(facts: Mapping[str, Any]) -> str:
    dist = str(facts.get("distribution") or "an unknown distribution")
    ver = str(facts.get("distribution_version") or facts.get("distribution_major_version") or "").strip()
    arch = str(facts.get("architecture") or "an unknown architecture")
    family = str(facts.get("os_family") or "")
    fam = f", {family} family" if family and family != dist else ""
    return f"{dist}{' ' + ver if ver else ''} ({arch}{fam})"


def refusal(role: str, facts: Mapping[str, Any] | None, allow_untested: bool = False) -> str:
    """'' when ``role`` may run on a host with these ``ansible_facts``; else one sentence naming
    what the host is, what the role supports and what to do."""
    if role not in HOST_ROLES:
        raise ValueError(f"unknown host role {role!r} (fabricops.platforms.HOST_ROLES)")
    facts = facts or {}
    who = f"fabricops.fabric.{role}"
    if not facts.get("distribution") or not facts.get("architecture"):
        return (
            f"{who} could not read the host's operating system (ansible_facts distribution and "
            "architecture are missing): gather facts (gather_subset: min) before the role; nothing was "
            "changed."
        )
    support = SUPPORT[role]
    dist, major = str(facts["distribution"]), str(facts.get("distribution_major_version") or "")
    arch = ARCH_ALIASES.get(str(facts["architecture"]), str(facts["architecture"]))
    family = str(facts.get("os_family") or "")
    if (dist, major, arch) in support.tested:
        return ""
    found = _found(facts)
    if family in support.families and arch in support.arches:
        if allow_untested:
            return ""
        kind = {"Debian": "an apt-family", "RedHat": "a dnf-family"}.get(family, f"a {family}-family")
        return (
            f"{who} supports {support.text}; this host is {found}, {kind} system the tests do "
            "not run: nothing was changed. Set fabricops_allow_untested_platform: true to run the "
            "role on it anyway."
        )
    return (
        f"{who} supports {support.text}; this host is {found}, whose package manager or "
        "architecture the role does not implement: nothing was changed."
    )


def meta_platforms(role: str | None = None) -> list[dict[str, Any]]:
    """What a host role's ``meta/main.yml`` ``galaxy_info.platforms`` says: exactly its tested
    rows (Galaxy names carry no architecture)."""
    tested = SUPPORT[role].tested if role else (DEBIAN12_X86,)
    out: dict[str, list[str]] = {}
    for dist, major, _arch in tested:
        name, version = META_NAMES[(dist, major)]
        if version not in out.setdefault(name, []):
            out[name].append(version)
    return [{"name": n, "versions": v} for n, v in out.items()]


# --- repository paths and package choices chosen from facts (issue 37 point 4) --------------------
#
# One row per (OS release, architecture), linux-system-roles style: what NVIDIA's DOCA-Host and CUDA
# repositories call the host, the Debian package architecture and how the kernel headers package is
# named. The table holds more rows than the roles' gate (``refusal`` above) admits: a row means
# "chosen from facts, proven at unit level only" unless ``proven`` says the lab runs it. Sources
# (each value checked in a public file that builds or uses such a URL / package):
#
# - DOCA-Host ``https://linux.mellanox.com/public/repo/doca/<ver>/<os>/<arch>/``: ``debian12/x86_64``
#   (the lab, tests/integration), ``ubuntu22.04/x86_64`` (mwiget/f5bnk-kubespray
#   ``dpu/install-doca.sh``: ``doca/2.9.2/ubuntu22.04/x86_64/``), ``ubuntu22.04/arm64-sbsa`` (HPCCM
#   generated Dockerfiles and holoscan docs: ``doca/3.2.0/ubuntu22.04/arm64-sbsa/``,
#   ``doca/2.8.0/ubuntu22.04/arm64-sbsa/``), ``ubuntu24.04/arm64-sbsa`` (``doca/2.9.1/ubuntu24.04/
#   arm64-sbsa/mlnx-fw-updater_24.10-1.1.4.0_arm64.deb`` linked from public BlueField notes),
#   ``ubuntu24.04/x86_64`` (docs/ofed.md, Dockerfiles ``doca/3.3.0/ubuntu24.04/$ARCH``),
#   ``rhel<major>.<minor>/x86_64`` (NVIDIA DOCA-Host install guide, ``rhel9.4/x86_64``; shared
#   REFERENCE.md) and ``rhel<N>/arm64-sbsa`` (a repo_manager config: ``doca/3.2.1/rhel10/arm64-sbsa/``
#   with ``repodata/repomd.xml.key``). ``arm64-sbsa`` is NVIDIA's spelling for every aarch64 row.
# - CUDA ``https://developer.download.nvidia.com/compute/cuda/repos/<os>/<arch>/``: ``ubuntu2204/
#   x86_64`` (sagarsrc/quantization ``setup.sh``), ``ubuntu2204/sbsa`` and ``ubuntu2404/sbsa``
#   (install scripts choosing ``sbsa`` when ``uname -m`` is not x86_64), ``ubuntu2404/x86_64``
#   (GoogleCloudPlatform/compute-image-tools ``build_ubuntu_2404_accelerated.sh``), ``debian12/
#   x86_64`` (topazape/dotfiles ``debian/nvidia-cuda.bash``: ``$ID$VERSION_ID/x86_64``), ``rhel9/
#   x86_64`` / ``rhel9/sbsa`` (issue 37; ``rhel10/sbsa`` in the same repo_manager config).
# - Kernel headers: Debian/Ubuntu ``linux-headers-<uname -r>``, a 64k kernel included (Ubuntu
#   publishes ``linux-headers-6.17.0-1004-nvidia-64k`` beside ``linux-image-...-nvidia-64k``; GB10 /
#   GH200 notes: "Matching headers: linux-headers-7.0.0-1019-nvidia-64k"); EL ``kernel-devel-<uname
#   -r>``, and for the 64k kernel (``uname -r`` ends ``+64k``, package ``kernel-64k-core``: leapp's
#   tests ``('64k', 'aarch64', 'kernel-core'...'5.14.0-100.el9.aarch64+64k')``)
#   ``kernel-64k-devel-<uname -r without +64k>`` (Mellanox/network-operator#1415).

#: ``ansible_facts.architecture`` spellings -> the canonical one (Debian's dpkg names accepted too)
ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
#: per architecture: DOCA-Host path part, CUDA path part, Debian package architecture
ARCH_PARTS = {
    "x86_64": ("x86_64", "x86_64", "amd64"),
    "aarch64": ("arm64-sbsa", "sbsa", "arm64"),
}
EL_DISTRIBUTIONS = ("RedHat", "Rocky", "AlmaLinux")


@dataclass(frozen=True)
class HostPlatform:
    """What the repositories and packages are called on one OS release and architecture."""

    name: str  #: e.g. "Ubuntu 24.04 aarch64"
    os_family: str  #: "Debian" or "RedHat"
    doca_os: str  #: DOCA-Host ``<os>`` directory (``ubuntu24.04``, ``rhel9.4``)
    doca_arch: str  #: DOCA-Host ``<arch>`` directory (``x86_64``, ``arm64-sbsa``)
    cuda_path: str | None  #: CUDA ``<os>/<arch>`` (``ubuntu2404/sbsa``); None where not cited
    deb_arch: str | None  #: dpkg architecture (``amd64``, ``arm64``); None on EL
    proven: str  #: "lab" (the integration suite runs it) or "unit" (facts captures only)

    @property
    def doca_path(self) -> str:
        return f"{self.doca_os}/{self.doca_arch}"


#: (distributions, major version, architecture, proven, DOCA os (``{version}``: distribution_version),
#: CUDA os (None: none cited)); the one table. The lab runs Debian 12 x86_64 and aarch64 (gh01, the
#: arm64 host: its DOCA mirror is the lab's ``debian12/arm64-sbsa``, NVIDIA's spelling for aarch64; no
#: public source cites a Debian 12 sbsa CUDA repository, hence None).
_ROWS: tuple[tuple[tuple[str, ...], str, str, str, str, str | None], ...] = (
    (("Debian",), "12", "x86_64", "lab", "debian12", "debian12"),
    (("Debian",), "12", "aarch64", "lab", "debian12", None),
    (("Ubuntu",), "22", "x86_64", "unit", "ubuntu22.04", "ubuntu2204"),
    (("Ubuntu",), "22", "aarch64", "unit", "ubuntu22.04", "ubuntu2204"),
    (("Ubuntu",), "24", "x86_64", "unit", "ubuntu24.04", "ubuntu2404"),
    (("Ubuntu",), "24", "aarch64", "unit", "ubuntu24.04", "ubuntu2404"),
    (EL_DISTRIBUTIONS, "9", "x86_64", "unit", "rhel{version}", "rhel9"),
    (EL_DISTRIBUTIONS, "9", "aarch64", "unit", "rhel{version}", "rhel9"),
)


def platform_rows() -> list[dict[str, Any]]:
    """The table as rows (docs, tests): distributions, major, arch, DOCA/CUDA paths, dpkg arch, proven."""
    out = []
    for dists, major, arch, proven, doca_os, cuda_os in _ROWS:
        doca_arch, cuda_arch, deb_arch = ARCH_PARTS[arch]
        el = dists == EL_DISTRIBUTIONS
        out.append({
            "distributions": list(dists), "major": major, "architecture": arch, "proven": proven,
            "doca": f"{doca_os.replace('{version}', major + '.<minor>')}/{doca_arch}",
            "cuda": f"{cuda_os}/{cuda_arch}" if cuda_os else None,
            "deb_arch": None if el else deb_arch,
            "headers": "kernel-devel-K (kernel-64k-devel- for +64k)" if el else "linux-headers-K",
        })
    return out


def _supported_rows() -> str:
    names = []
    for dists, major, arch, _p, _d, _c in _ROWS:
        dist = "RHEL/Rocky/Alma" if dists == EL_DISTRIBUTIONS else dists[0]
        ver = {"22": "22.04", "24": "24.04"}.get(major, major) if dist == "Ubuntu" else major
        names.append(f"{dist} {ver} {arch}")
    return ", ".join(names)


def host_platform(facts: Mapping[str, Any] | None) -> HostPlatform:
    """The row of :data:`_ROWS` these ``ansible_facts`` (distribution, distribution_major_version,
    distribution_version, architecture) fall in; ValueError, one sentence, for a host the table
    does not hold."""
    facts = facts or {}
    dist = str(facts.get("distribution") or "")
    major = str(facts.get("distribution_major_version") or "").strip()
    version = str(facts.get("distribution_version") or "").strip()
    if not major and re.fullmatch(r"\d+(\.\d+)*", version):
        major = version.split(".")[0]
    arch = ARCH_ALIASES.get(str(facts.get("architecture") or ""))
    for dists, row_major, row_arch, proven, doca_os, cuda_os in _ROWS:
        if dist not in dists or major != row_major or arch != row_arch:
            continue
        el = dists == EL_DISTRIBUTIONS
        if el and not re.fullmatch(rf"{major}\.\d+", version):
            break  # NVIDIA's EL directories name the minor release: without it there is no path
        if dist == "Ubuntu" and version != f"{major}.04":
            break
        doca_arch, cuda_arch, deb_arch = ARCH_PARTS[arch]
        return HostPlatform(
            name=f"{dist} {version or major} {arch}", os_family="RedHat" if el else "Debian",
            doca_os=doca_os.format(version=version), doca_arch=doca_arch,
            cuda_path=f"{cuda_os}/{cuda_arch}" if cuda_os else None,
            deb_arch=None if el else deb_arch, proven=proven,
        )
    raise ValueError(
        f"fabricops chooses repository paths and packages from facts only for {_supported_rows()}; "
        f"this host is {_found(facts)}"
    )


def doca_repo_path(facts: Mapping[str, Any] | None) -> str:
    """NVIDIA's DOCA-Host ``<os>/<arch>`` for this host (``ubuntu24.04/arm64-sbsa``)."""
    return host_platform(facts).doca_path


def cuda_repo_path(facts: Mapping[str, Any] | None) -> str:
    """NVIDIA's CUDA repository ``<os>/<arch>`` for this host (``ubuntu2404/sbsa``)."""
    plat = host_platform(facts)
    if not plat.cuda_path:  # Debian 12 aarch64: none cited
        raise ValueError(f"fabricops knows no CUDA repository path for {plat.name}")
    return plat.cuda_path


def deb_arch(facts: Mapping[str, Any] | None) -> str:
    """The dpkg architecture (``amd64``, ``arm64``) of a Debian-family host."""
    plat = host_platform(facts)
    if plat.deb_arch is None:
        raise ValueError(f"{plat.name} is not a Debian-family system: it has no dpkg architecture")
    return plat.deb_arch


_KERNEL_RELEASE = re.compile(r"[0-9][A-Za-z0-9._+~-]{0,127}")


def kernel_headers_package(facts: Mapping[str, Any] | None, kernel: str | None = None) -> str:
    """The package holding the headers of ``kernel`` (default: the running one, ``facts.kernel``):
    Debian/Ubuntu ``linux-headers-<release>`` (``6.8.0-1010-nvidia-64k`` included), EL
    ``kernel-devel-<release>``, EL 64k (release ending ``+64k``) ``kernel-64k-devel-<release
    without +64k>``."""
    facts = facts or {}
    release = str(kernel if kernel is not None else facts.get("kernel") or "")
    if not _KERNEL_RELEASE.fullmatch(release):
        raise ValueError(f"{release[:40]!r} is not a kernel release")
    plat = host_platform(facts)
    if plat.os_family == "Debian":
        return f"linux-headers-{release}"
    if release.endswith("+64k"):
        return f"kernel-64k-devel-{release[: -len('+64k')]}"
    return f"kernel-devel-{release}"


# --- the support table as the docs show it (docs/platforms.md, between its BEGIN/END markers) ------

_FAMILY_WORDS = {"Debian": "apt-family", "RedHat": "dnf-family (RHEL, Rocky, Alma)"}


def support_markdown() -> str:
    """One row per host role: what the lab runs it on, and what it implements but no test runs
    (accepted with ``fabricops_allow_untested_platform: true``). tests/unit/test_host_platforms.py
    keeps docs/platforms.md equal to it."""
    lines = ["| role | tested on a lab host | implemented, not tested (opt-in) |", "|---|---|---|"]
    for role in HOST_ROLES:
        support = SUPPORT[role]
        rest = ", ".join(_FAMILY_WORDS.get(f, f) for f in support.families)
        arches = " and ".join(support.arches)
        lines.append(f"| `{role}` | {support.text} | other {rest} releases on {arches} |")
    return "\n".join(lines)


_BEGIN = "<!-- BEGIN fabricops.platforms.support_markdown -->"
_END = "<!-- END fabricops.platforms.support_markdown -->"


def render_docs(text: str) -> str:
    """``text`` (docs/platforms.md) with its generated region rewritten from :data:`SUPPORT`."""
    head, sep, rest = text.partition(_BEGIN)
    _old, sep2, tail = rest.partition(_END)
    if not sep or not sep2:
        raise ValueError(f"the page has no {_BEGIN} ... {_END} region")
    return f"{head}{_BEGIN}\n{support_markdown()}\n{_END}{tail}"


if __name__ == "__main__":  # python -m fabricops.platforms docs/platforms.md: rewrite its table
    import sys
    from pathlib import Path

    for name in sys.argv[1:]:
        page = Path(name)
        page.write_text(render_docs(page.read_text()))
