"""NCCL profiles: a named profile + the host's fabric facts + user overrides -> NCCL environment.

Pure functions, no Ansible: the ``nccl_profile`` role calls them through the filter plugin
``fabricops.fabric.nccl_env`` / ``nccl_profile_errors`` (plugins/filter/fabricops.py) and renders
the result into ``/etc/nccl.conf`` and ``/etc/profile.d/nccl.sh``. ``facts`` is what
:func:`fabricops.facts.build_facts` returns (``ansible_facts.fabric``). See docs/nccl.md.

Profiles:

- ``ib``: NCCL's IB transport over the InfiniBand ports that are ACTIVE (``NCCL_IB_HCA=`` exact
  list), ``NCCL_IB_DISABLE=0``.
- ``roce``: the IB transport over the ACTIVE RoCE (Ethernet link layer) ports, with the IPv4 RoCE v2
  GID index read from the GID table and the traffic class of the fabric's lossless class.
- ``socket``: TCP sockets only, ``NCCL_IB_DISABLE=1``.

With ``gpudirect`` (the nccl_profile role: ``lsmod`` lists ``nvidia_peermem`` or ``nv_peer_mem``),
the ``ib`` and ``roce`` profiles also set ``NCCL_NET_GDR_LEVEL=PHB``: GPUDirect RDMA between a GPU
and a NIC under the same PCIe host bridge (CPU socket), not across the inter-socket link.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fabricops.errors import FabricopsError
from fabricops.model import roce as roce_model

PROFILES: dict[str, dict[str, Any]] = {
    "ib": {"link_layer": "InfiniBand", "ports_fact": "ib_ports_up", "env": {"NCCL_IB_DISABLE": "0"}},
    "roce": {"link_layer": "Ethernet", "ports_fact": "roce_ports_up", "env": {"NCCL_IB_DISABLE": "0"}},
    "socket": {"link_layer": None, "ports_fact": None, "env": {"NCCL_IB_DISABLE": "1"}},
}

#: Settings that force an algorithm or protocol: right for a benchmark run, wrong as a
#: fleet-wide default (REFERENCE.md "NCCL environment").
BENCHMARK_ONLY = ("NCCL_ALGO", "NCCL_PROTO")

#: NCCL_NET_GDR_LEVEL when GPUDirect RDMA is usable: GPU and NIC under one PCIe host bridge.
GDR_LEVEL = "PHB"

#: ECN field "ECN-capable transport (0)" in the low two bits of the ToS byte (RFC 3168).
ECT0 = 0b10

# Whole-string matches (fullmatch): ``$`` also matches before a trailing newline, which would let
# "NCCL_X\n" through into nccl.conf / nccl.sh.
_NAME = re.compile(r"NCCL_[A-Z0-9_]+")
_IFNAME = re.compile(r"[=^]?[A-Za-z0-9_.:@-]+(,[A-Za-z0-9_.:@-]+)*")


class NcclProfileError(FabricopsError, ValueError):
    """A profile that cannot be built; str() is one line that says what to fix."""


def _natural(key: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key)]


def roce_tos(roce: Mapping[str, Any]) -> int:
    """ToS byte of the lossless RoCE class, from the one fabric-wide definition (DSCP 26 -> 106).

    fabricops.model.roce derives it (DSCP in the upper six bits, ECN field ECT(0)), so NCCL_IB_TC
    cannot disagree with what roce_host writes to the traffic class.
    """
    try:
        return roce_model.validate(roce).tos
    except roce_model.RoceConfigError as exc:
        raise NcclProfileError(str(exc)) from None


def _value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, str)):
        text = str(value)
        if not re.fullmatch(r"[\x20-\x7e]*", text):
            raise NcclProfileError(
                f"nccl_profile_overrides.{name}: the value must be one line of printable ASCII "
                "(no newline, NUL or control character)"
            )
        return text
    raise NcclProfileError(
        f"nccl_profile_overrides.{name}: the value must be a string, integer or boolean, "
        f"got {type(value).__name__}"
    )


def _check_overrides(overrides: Mapping[str, Any], allow_benchmark: bool) -> None:
    for name in overrides:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise NcclProfileError(
                f"nccl_profile_overrides: {name!r} is not an NCCL variable name (NCCL_ in capitals)"
            )
    if not allow_benchmark:
        for name in BENCHMARK_ONLY:
            if overrides.get(name) is not None:
                raise NcclProfileError(
                    f"nccl_profile_overrides sets {name}, a benchmarking-only setting: remove it or "
                    f"set nccl_profile_allow_benchmark_settings: true"
                )


def _active_ports(facts: Mapping[str, Any], profile: str) -> list[str]:
    spec = PROFILES[profile]
    if spec["ports_fact"] not in facts:
        raise NcclProfileError(
            f"fabric facts lack {spec['ports_fact']}: run fabricops.fabric.fabric_facts before nccl_profile"
        )
    ports = list(facts.get(spec["ports_fact"]) or [])
    if not ports:
        raise NcclProfileError(
            f"profile {profile}: no {spec['link_layer']} port is ACTIVE on this host "
            f"(fabric.{spec['ports_fact']} is empty); bring a port up or choose another profile"
        )
    return sorted(ports, key=_natural)


def _gid_index(facts: Mapping[str, Any], ports: list[str]) -> int:
    by_port = {
        f"{hca['name']}:{port['port']}": port
        for hca in facts.get("hcas") or []
        for port in hca.get("ports") or []
    }
    indexes: dict[int, list[str]] = {}
    for name in ports:
        port = by_port.get(name)
        if port is None:
            raise NcclProfileError(f"profile roce: {name} is listed as up but absent from fabric.hcas")
        index = port.get("roce_v2_ipv4_gid_index")
        if index is None:
            raise NcclProfileError(
                f"profile roce: {name} ({port.get('netdev') or 'no netdev'}) has no IPv4 RoCE v2 GID; "
                f"give the netdev its IPv4 address first (roce_host / network config)"
            )
        indexes.setdefault(int(index), []).append(name)
    if len(indexes) > 1:
        detail = "; ".join(f"{i}: {', '.join(p)}" for i, p in sorted(indexes.items()))
        raise NcclProfileError(
            f"profile roce: the RoCE ports have different IPv4 RoCE v2 GID indexes ({detail}) but "
            f"NCCL_IB_GID_INDEX is one value; make them agree or set it in nccl_profile_overrides"
        )
    return next(iter(indexes))


def socket_ifname_default(ansible_facts: Mapping[str, Any] | None) -> str | None:
    """The interface of the default IPv4 route, exact-match form (``=eno1``), or None."""
    iface = ((ansible_facts or {}).get("default_ipv4") or {}).get("interface")
    return f"={iface}" if iface else None


def nccl_env(
    profile: str,
    facts: Mapping[str, Any],
    *,
    roce: Mapping[str, Any] | None = None,
    socket_ifname: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    allow_benchmark: bool = False,
    gpudirect: bool = False,
) -> dict[str, str]:
    """The NCCL environment of ``profile`` on a host with ``facts``, sorted by name.

    ``socket_ifname`` is used as given (NCCL syntax: prefix list, ``=`` exact, ``^`` exclude);
    ``overrides`` are merged last, a ``None`` value removes a derived setting. ``gpudirect``:
    GPUDirect RDMA is usable (``nvidia_peermem`` loaded), so the IB transport profiles set
    ``NCCL_NET_GDR_LEVEL`` to :data:`GDR_LEVEL`.
    """
    if profile not in PROFILES:
        raise NcclProfileError(
            f"unknown NCCL profile {profile!r}: choose one of {', '.join(sorted(PROFILES))}"
        )
    overrides = dict(overrides or {})
    _check_overrides(overrides, allow_benchmark)
    env: dict[str, str] = dict(PROFILES[profile]["env"])

    if profile in ("ib", "roce"):
        ports = _active_ports(facts, profile)
        env["NCCL_IB_HCA"] = "=" + ",".join(ports)
        if gpudirect:
            env["NCCL_NET_GDR_LEVEL"] = GDR_LEVEL
    if profile == "roce":
        if overrides.get("NCCL_IB_GID_INDEX") is None:
            env["NCCL_IB_GID_INDEX"] = str(_gid_index(facts, ports))
        if overrides.get("NCCL_IB_TC") is None:
            if not roce:
                raise NcclProfileError(
                    "profile roce needs fabricops_roce (the fabric-wide RoCE definition, dscp) "
                    "for NCCL_IB_TC"
                )
            env["NCCL_IB_TC"] = str(roce_tos(roce))

    if socket_ifname:
        if not _IFNAME.fullmatch(socket_ifname):
            raise NcclProfileError(
                f"nccl_profile_socket_ifname {socket_ifname!r} is not an NCCL interface list "
                f"(e.g. '=eth0', 'ib', '^docker')"
            )
        env["NCCL_SOCKET_IFNAME"] = socket_ifname
    elif profile == "socket" and overrides.get("NCCL_SOCKET_IFNAME") is None:
        raise NcclProfileError(
            "profile socket needs an interface: set nccl_profile_socket_ifname "
            "(no default IPv4 route was found to default to)"
        )

    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = _value(name, value)
    return dict(sorted(env.items()))


def nccl_errors(profile: str, facts: Mapping[str, Any], **kwargs: Any) -> list[str]:
    """[] when :func:`nccl_env` would succeed, else its one-line reason (for preflight asserts)."""
    try:
        nccl_env(profile, facts, **kwargs)
    except NcclProfileError as exc:
        return [str(exc)]
    return []
