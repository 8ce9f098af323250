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

Rules that follow the host and the plan (docs/nccl.md, "Rules and their sources"):

- **GID** (``roce``): NCCL 2.21.5 added dynamic GID detection (NVIDIA/nccl commit ab2b89c
  "Net/IB: add support for dynamic GID detection"; ``NCCL_IB_GID_INDEX`` defaults to -1 from then
  on, src/transport/net_ib.cc): per HCA, NCCL takes the GID of ``NCCL_IB_ADDR_FAMILY``
  (AF_INET), ``NCCL_IB_ROCE_VERSION_NUM`` (2) and, when set, ``NCCL_IB_ADDR_RANGE``. From that
  release on the profile leaves ``NCCL_IB_GID_INDEX`` unset and writes those two explicitly, so
  HCAs with different indexes (NVIDIA/nccl#718, #890) each get their own. Older or unknown NCCL:
  one ``NCCL_IB_GID_INDEX`` for all HCAs, refused when their indexes differ.
- **NCCL_IB_HCA** lists the ACTIVE ports of the host's planned rails (``fabricops_cabling``);
  a planned port that is not ACTIVE is left out *and reported* in the notes.
- **NCCL_CROSS_NIC=0** on a rail-optimised plan (each of the host's compute ports on its own
  switch; a switch that also carries another NIC index is warned about): rings stay on one rail
  (NVIDIA/nccl#1933, NCCL env docs "NCCL_CROSS_NIC"); otherwise NCCL's default is kept.
- **NCCL_NET_PLUGIN** is written explicitly (default ``none``: NCCL's internal IB/socket transport,
  never a stray ``libnccl-net.so``; coreweave/nccl-tests#84).
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


#: First NCCL release that selects the RoCE GID per HCA itself (2.21.5-1, "Net/IB: add support for
#: dynamic GID detection"); there was no earlier 2.21 release.
DYNAMIC_GID_SINCE = (2, 21, 5)
#: What the profile writes instead of NCCL_IB_GID_INDEX from that release on (NCCL's defaults,
#: written so the choice is visible and a site-wide environment cannot change it unseen).
DYNAMIC_GID_ENV = {"NCCL_IB_ADDR_FAMILY": "AF_INET", "NCCL_IB_ROCE_VERSION_NUM": "2"}
#: NCCL_NET_PLUGIN default: no external net plugin. NCCL >= 2.28.3 reads "none" as "no plugin"
#: (src/plugin/net.cc); 2.11-2.27 try to dlopen "none" and "libnccl-net-none.so", find neither
#: and use the internal transport, so the value has the same effect on every release with the
#: variable (since 2.11, NCCL env docs).
NET_PLUGIN_DEFAULT = "none"
#: Where the NCCL library is installed (SPEC-19 E): distribution packages, CUDA, local builds.
LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/local/cuda/lib64",
    "/usr/local/lib",
    "/opt/nccl/lib",
)
_LIBNCCL = re.compile(r"(?:^|/)libnccl\.so\.(\d+)\.(\d+)\.(\d+)$")
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:-\d+)?")
_PLUGIN = re.compile(r"[A-Za-z0-9_.+-]+")


class NcclProfileError(FabricopsError, ValueError):
    """A profile that cannot be built; str() is one line that says what to fix."""


def _natural(key: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key)]


def parse_version(text: Any) -> tuple[int, int, int] | None:
    """'2.23.4' or '2.23.4-1' -> (2, 23, 4); '' / None -> None; anything else is refused."""
    if text is None or str(text).strip() == "":
        return None
    m = _VERSION.fullmatch(str(text).strip())
    if not m:
        raise NcclProfileError(
            f"nccl_profile_nccl_version {text!r} is not an NCCL version (like 2.23.4); "
            "leave it empty to read it from the host"
        )
    return int(m[1]), int(m[2]), int(m[3])


def installed_version(paths: Any) -> str | None:
    """The newest ``libnccl.so.2.X.Y`` among file names or paths (SPEC-19 E), as '2.X.Y', or None."""
    found = []
    for path in paths or []:
        m = _LIBNCCL.search(str(path).strip())
        if m:
            found.append((int(m[1]), int(m[2]), int(m[3])))
    return ".".join(map(str, max(found))) if found else None


def version_text(version: tuple[int, int, int] | None) -> str:
    return ".".join(map(str, version)) if version else "unknown"


def selects_gid_itself(version: tuple[int, int, int] | None) -> bool:
    """NCCL picks each HCA's RoCE GID itself (2.21.5 and later); False when the version is unknown."""
    return version is not None and version >= DYNAMIC_GID_SINCE


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


def _by_port(facts: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {
        f"{hca['name']}:{port['port']}": port
        for hca in facts.get("hcas") or []
        for port in hca.get("ports") or []
    }


def gid_indexes(facts: Mapping[str, Any], ports: list[str]) -> dict[str, int]:
    """Port -> its IPv4 RoCE v2 GID index; refused when a port has none."""
    by_port = _by_port(facts)
    out: dict[str, int] = {}
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
        out[name] = int(index)
    return out


def _gid_index(indexes: Mapping[str, int], version: tuple[int, int, int] | None) -> int:
    """The one NCCL_IB_GID_INDEX an NCCL that cannot choose per HCA needs; refused when they differ."""
    groups: dict[int, list[str]] = {}
    for name, index in indexes.items():
        groups.setdefault(index, []).append(name)
    if len(groups) > 1:
        detail = "; ".join(f"{i}: {', '.join(p)}" for i, p in sorted(groups.items()))
        who = f"NCCL {version_text(version)}" if version else "the NCCL version is unknown, so NCCL"
        raise NcclProfileError(
            f"profile roce: the RoCE ports have different IPv4 RoCE v2 GID indexes ({detail}) but "
            f"{who} takes one NCCL_IB_GID_INDEX for every HCA; upgrade NCCL to "
            f"{version_text(DYNAMIC_GID_SINCE)} or later (it selects the GID per HCA), make the indexes "
            "agree, or set NCCL_IB_GID_INDEX in nccl_profile_overrides"
        )
    return next(iter(groups))


def _planned(
    facts: Mapping[str, Any], profile: str, cabling: Any, host: str | None
) -> tuple[dict[str, str | None] | None, list[str]]:
    """The host's planned ports of the profile's link layer (``hca:port`` -> switch), or None when
    the plan has no cable of this host; and a note per planned port that is not on this host."""
    if not cabling or not host:
        return None, []
    if not isinstance(cabling, list) or not all(isinstance(c, Mapping) for c in cabling):
        raise NcclProfileError("fabricops_cabling must be a list of {host, hca, port, switch, ...} entries")
    mine = [c for c in cabling if str(c.get("host")) == str(host)]
    if not mine:
        return None, []
    by_port = _by_port(facts)
    by_netdev = {p.get("netdev"): name for name, p in by_port.items() if p.get("netdev")}
    layer = PROFILES[profile]["link_layer"]
    planned: dict[str, str | None] = {}
    notes: list[str] = []
    for c in mine:
        if c.get("hca"):
            name = f"{c['hca']}:{int(c.get('port', 1))}"
        elif c.get("netdev") in by_netdev:
            name = by_netdev[c["netdev"]]
        else:
            notes.append(
                f"WARNING: planned port {c.get('netdev') or c}"
                f" (cabled to {c.get('switch') or 'an unnamed switch'}) is not on this host: "
                "not in NCCL_IB_HCA; check the HCA and its driver"
            )
            continue
        port = by_port.get(name)
        if port is None:
            notes.append(
                f"WARNING: planned port {name} (cabled to {c.get('switch') or 'an unnamed switch'}) is not "
                "on this host: not in NCCL_IB_HCA; check the HCA and its driver"
            )
            continue
        if port.get("link_layer") == layer:
            planned[name] = None if c.get("switch") is None else str(c["switch"])
    return planned, notes


def rail_optimised(planned: Mapping[str, str | None]) -> tuple[bool, str]:
    """Whether the host's planned compute ports form a rail-optimised plan, and why in words.

    Rail-optimised: at least two compute ports, each cabled to its own switch (NCCL env docs,
    NCCL_CROSS_NIC: "networks with per NIC switches (rails)"). The same rule runs in verify's
    ``nccl_profile`` check, which sees one host."""
    if len(planned) < 2:
        return False, f"{len(planned)} planned compute port(s): nothing to keep apart"
    if any(sw is None for sw in planned.values()):
        return False, "the plan names no switch for some compute port"
    switches: dict[str, list[str]] = {}
    for name, sw in planned.items():
        switches.setdefault(str(sw), []).append(name)
    shared = {sw: names for sw, names in switches.items() if len(names) > 1}
    if shared:
        detail = "; ".join(
            f"{', '.join(sorted(n, key=_natural))} on {sw}" for sw, n in sorted(shared.items())
        )
        return False, f"not rail-optimised ({detail})"
    detail = ", ".join(f"{n} on {planned[n]}" for n in sorted(planned, key=_natural))
    return True, f"rail-optimised ({detail})"


def rail_crossings(planned: Mapping[str, str | None], cabling: Any) -> list[str]:
    """Warnings for a rail-optimised host whose switches also carry other NIC indexes of other hosts
    (cabling that does not follow the rails: NCCL_CROSS_NIC=0 then sends that rail over the spine)."""
    out = []
    for name, sw in sorted(planned.items(), key=lambda kv: _natural(kv[0])):
        others = sorted({
            f"{c.get('hca')}:{int(c.get('port', 1))}"
            for c in cabling or []
            if isinstance(c, Mapping) and str(c.get("switch")) == str(sw) and c.get("hca")
        } - {name}, key=_natural)
        if others:
            out.append(
                f"WARNING: {sw} (rail of {name}) also carries {', '.join(others)} of other hosts: the "
                "cabling does not follow the rails; check it with fabricops verify --only cabling"
            )
    return out


def route_interface(route_get: str | None) -> str | None:
    """The interface of ``ip -4 route get ADDR``'s output (``8.8.8.8 via 10.0.0.1 dev eno1 src ...``),
    or None: no output (no route: the command fails and prints nothing on stdout) or no ``dev``."""
    tokens = (route_get or "").split()
    if "dev" in tokens[:-1]:
        return tokens[tokens.index("dev") + 1]
    return None


def socket_ifname_default(ansible_facts: Mapping[str, Any] | None, route: str | None = None) -> str | None:
    """The interface of the default IPv4 route, exact-match form (``=eno1``), or None.

    ``route``: the stdout of ``ip -4 route get 8.8.8.8`` read on the host (what Ansible's own
    ``default_ipv4`` fact reads); when given, it is used instead of ``ansible_facts``.
    """
    if route is not None:
        iface = route_interface(route)
    else:
        iface = ((ansible_facts or {}).get("default_ipv4") or {}).get("interface")
    return f"={iface}" if iface else None


def build(
    profile: str,
    facts: Mapping[str, Any],
    *,
    roce: Mapping[str, Any] | None = None,
    socket_ifname: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    allow_benchmark: bool = False,
    gpudirect: bool = False,
    nccl_version: str | None = None,
    cabling: Any = None,
    host: str | None = None,
    cross_nic: Any = "auto",
    net_plugin: str | None = None,
) -> tuple[dict[str, str], list[str]]:
    """(environment, notes): :func:`nccl_env` and, one sentence each, what was chosen and why.

    ``nccl_version``: the host's NCCL (``2.23.4``; None/empty = unknown: the conservative GID rule).
    ``cabling`` + ``host``: the rail plan (``fabricops_cabling``) and this host's name in it.
    ``cross_nic``: ``auto`` (from the plan), or 0/1/2 written as given, or None (never written).
    ``net_plugin``: NCCL_NET_PLUGIN (``none``: the internal transport; the role passes
    :data:`NET_PLUGIN_DEFAULT` unless told otherwise), empty/None: not written."""
    if profile not in PROFILES:
        raise NcclProfileError(
            f"unknown NCCL profile {profile!r}: choose one of {', '.join(sorted(PROFILES))}"
        )
    overrides = dict(overrides or {})
    _check_overrides(overrides, allow_benchmark)
    version = parse_version(nccl_version)
    env: dict[str, str] = dict(PROFILES[profile]["env"])
    notes: list[str] = []

    if profile in ("ib", "roce"):
        active = _active_ports(facts, profile)
        planned, missing = _planned(facts, profile, cabling, host)
        notes.extend(missing)
        if planned is None:
            ports = active
            notes.append(
                f"NCCL_IB_HCA: every ACTIVE {PROFILES[profile]['link_layer']} port "
                "(fabricops_cabling plans no port of this host)"
            )
        else:
            ports = [p for p in active if p in planned]
            down = sorted(set(planned) - set(active), key=_natural)
            for name in down:
                notes.append(
                    f"WARNING: planned port {name} (rail on {planned[name] or 'an unnamed switch'}) is not "
                    "ACTIVE: left out of NCCL_IB_HCA; bring it up and run the role again"
                )
            unplanned = sorted(set(active) - set(planned), key=_natural)
            if unplanned:
                notes.append(
                    f"NCCL_IB_HCA: {', '.join(unplanned)} ACTIVE but on no planned rail: left out"
                )
            if not ports:
                raise NcclProfileError(
                    f"profile {profile}: no port of the planned rails is ACTIVE on this host "
                    f"(planned: {', '.join(sorted(planned, key=_natural)) or 'none of this link layer'}); "
                    "bring a planned port up or fix fabricops_cabling"
                )
            notes.append(f"NCCL_IB_HCA: the ACTIVE ports of the planned rails ({', '.join(ports)})")
        env["NCCL_IB_HCA"] = "=" + ",".join(ports)
        if gpudirect:
            env["NCCL_NET_GDR_LEVEL"] = GDR_LEVEL
        if cross_nic == "auto" or cross_nic == "":
            if planned is None:
                notes.append("NCCL_CROSS_NIC: NCCL's default (no rail plan for this host)")
            else:
                optimised, why = rail_optimised(planned)
                if optimised:
                    env["NCCL_CROSS_NIC"] = "0"
                    notes.append(f"NCCL_CROSS_NIC=0: {why}: rings stay on one rail")
                    notes.extend(rail_crossings(planned, cabling))
                else:
                    notes.append(f"NCCL_CROSS_NIC: NCCL's default, {why}")
        elif cross_nic is not None:
            if str(cross_nic) not in ("0", "1", "2"):
                raise NcclProfileError(
                    f"nccl_profile_cross_nic {cross_nic!r} must be auto, 0, 1 or 2 (NCCL_CROSS_NIC)"
                )
            env["NCCL_CROSS_NIC"] = str(cross_nic)
            notes.append(f"NCCL_CROSS_NIC={cross_nic}: set by nccl_profile_cross_nic")
    if profile == "roce":
        indexes = gid_indexes(facts, ports)
        shown = ", ".join(f"{p} {i}" for p, i in indexes.items())
        if overrides.get("NCCL_IB_GID_INDEX") is not None:
            notes.append("NCCL_IB_GID_INDEX: from nccl_profile_overrides")
        elif selects_gid_itself(version):
            env.update(DYNAMIC_GID_ENV)
            notes.append(
                f"GID: NCCL {version_text(version)} selects each HCA's IPv4 RoCE v2 GID itself (since "
                f"{version_text(DYNAMIC_GID_SINCE)}): NCCL_IB_GID_INDEX left unset (indexes {shown})"
            )
        else:
            env["NCCL_IB_GID_INDEX"] = str(_gid_index(indexes, version))
            why = (
                f"NCCL {version_text(version)} is older than {version_text(DYNAMIC_GID_SINCE)}"
                if version
                else "the NCCL version is unknown (no libnccl.so.2.X.Y found): the conservative rule"
            )
            notes.append(f"GID: {why}: one NCCL_IB_GID_INDEX={env['NCCL_IB_GID_INDEX']} (indexes {shown})")
        if overrides.get("NCCL_IB_TC") is None:
            if not roce:
                raise NcclProfileError(
                    "profile roce needs fabricops_roce (the fabric-wide RoCE definition, dscp) "
                    "for NCCL_IB_TC"
                )
            env["NCCL_IB_TC"] = str(roce_tos(roce))

    if net_plugin:
        if not _PLUGIN.fullmatch(str(net_plugin)):
            raise NcclProfileError(
                f"nccl_profile_net_plugin {net_plugin!r} is not a plugin suffix or library name "
                "(e.g. none, aws-ofi, libnccl-net-sharp.so)"
            )
        env["NCCL_NET_PLUGIN"] = str(net_plugin)
        notes.append(
            "NCCL_NET_PLUGIN=none: NCCL's internal IB/socket transport, no external net plugin"
            if str(net_plugin).lower() == "none"
            else f"NCCL_NET_PLUGIN={net_plugin}: set by nccl_profile_net_plugin"
        )

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
    return dict(sorted(env.items())), notes


def nccl_env(profile: str, facts: Mapping[str, Any], **kwargs: Any) -> dict[str, str]:
    """The NCCL environment of ``profile`` on a host with ``facts``, sorted by name.

    Keyword arguments as :func:`build`. ``socket_ifname`` is used as given (NCCL syntax: prefix
    list, ``=`` exact, ``^`` exclude); ``overrides`` are merged last, a ``None`` value removes a
    derived setting. ``gpudirect``: GPUDirect RDMA is usable (``nvidia_peermem`` loaded), so the
    IB transport profiles set ``NCCL_NET_GDR_LEVEL`` to :data:`GDR_LEVEL`.
    """
    return build(profile, facts, **kwargs)[0]


def nccl_notes(profile: str, facts: Mapping[str, Any], **kwargs: Any) -> list[str]:
    """What :func:`nccl_env` chose and why, one sentence each (the role prints them); [] on error."""
    try:
        return build(profile, facts, **kwargs)[1]
    except NcclProfileError:
        return []


def nccl_errors(profile: str, facts: Mapping[str, Any], **kwargs: Any) -> list[str]:
    """[] when :func:`nccl_env` would succeed, else its one-line reason (for preflight asserts)."""
    try:
        nccl_env(profile, facts, **kwargs)
    except NcclProfileError as exc:
        return [str(exc)]
    return []
