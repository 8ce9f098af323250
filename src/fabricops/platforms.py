"""The operating systems and architectures each host role supports: one table, read by the first
task of every role (the ``fabricops.fabric.platform_refusal`` filter) and by the tests that keep
each role's ``meta/main.yml`` platforms equal to it.

"Supported" is what the tests run: the lab's hosts are Debian 12 on x86_64 (docs/lab-fidelity.md).
The roles' package, repository and network steps are written for the apt family (apt, dpkg,
``/etc/apt/sources.list.d``, ifupdown or NetworkManager); a host of another family (RHEL, Rocky,
SLES: dnf or zypper) would fail deep inside a role, after changing things, so it is refused before
anything changes. An apt-family system the tests do not run (Ubuntu 22.04 / 24.04, another Debian)
is refused too, unless the operator opts in with ``fabricops_allow_untested_platform: true``: the
steps exist for it, nobody has proven them there.
"""

from __future__ import annotations

from collections.abc import Mapping
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

#: (distribution, major version, meta/main.yml name, meta/main.yml version) the tests run
TESTED: tuple[tuple[str, str, str, str], ...] = (("Debian", "12", "Debian", "bookworm"),)
#: architectures the tests run (``ansible_facts.architecture``)
TESTED_ARCH = ("x86_64",)
#: the ``os_family`` whose package and network steps the roles implement
IMPLEMENTED_FAMILIES = ("Debian",)
#: architectures the roles' repository and package choices know (aarch64: issue 37, not yet)
IMPLEMENTED_ARCH = ("x86_64",)

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
    dist, major = str(facts["distribution"]), str(facts.get("distribution_major_version") or "")
    arch, family = str(facts["architecture"]), str(facts.get("os_family") or "")
    if any(dist == d and major == m for d, m, _n, _v in TESTED) and arch in TESTED_ARCH:
        return ""
    found = _found(facts)
    if family in IMPLEMENTED_FAMILIES and arch in IMPLEMENTED_ARCH:
        if allow_untested:
            return ""
        return (
            f"{who} supports {SUPPORTED_TEXT}; this host is {found}, an apt-family system the tests do "
            "not run: nothing was changed. Set fabricops_allow_untested_platform: true to run the "
            "role on it anyway."
        )
    return (
        f"{who} supports {SUPPORTED_TEXT}; this host is {found}, whose package manager or "
        "architecture the role does not implement: nothing was changed."
    )


def meta_platforms() -> list[dict[str, Any]]:
    """What each host role's ``meta/main.yml`` ``galaxy_info.platforms`` says: exactly :data:`TESTED`."""
    out: dict[str, list[str]] = {}
    for _d, _m, name, version in TESTED:
        out.setdefault(name, []).append(version)
    return [{"name": n, "versions": v} for n, v in out.items()]
