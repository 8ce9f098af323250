"""IPoIB address plans: inventory variables + fabric facts -> the interfaces of one host.

Pure functions, no Ansible: the ``ipoib`` role calls them through the filter plugin
(plugins/filter/fabricops.py) in its preflight, and templates render the resulting interface
dicts as NetworkManager keyfiles or ifupdown stanzas; :func:`netplan_yaml` renders them as the one
netplan file of the netplan backend. :func:`choose_backend` picks the backend from the host's reads.
See docs/ipoib.md for the schemas.

Rules (REFERENCE.md and the kernel's IPoIB documentation):

- datagram mode: MTU <= IB link MTU - 4 (the 4-byte IPoIB header), so 4092 on a 4096 IB MTU;
- connected mode: MTU <= 65520;
- P_Key: partition number 0x0001-0x7fff; bit 0x8000 is full membership. A child interface is
  named ``<parent>.<pkey as 4 hex digits, membership bit included>`` (``ib0.8010``) -- the name
  the kernel's ``create_child`` and NetworkManager both give it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from fabricops import validate
from fabricops.errors import FabricopsError

MODES = ("datagram", "connected")
CONNECTED_MAX_MTU = 65520
IPOIB_HEADER = 4
MIN_MTU = 68  # IPv4 minimum
FULL_MEMBERSHIP = 0x8000


class IpoibPlanError(FabricopsError, ValueError):
    """A plan that cannot be applied; str() names the host and interface and says what to fix."""


def _safe(host: str, check: validate.Validator, var: str, value: Any) -> None:
    """Names and devices end up in ifupdown stanzas and NetworkManager keyfiles (and in commands
    the ifupdown hooks run as root): only the narrow allow-lists of fabricops.validate pass."""
    try:
        check(var, value)
    except validate.UnsafeValue as exc:
        raise IpoibPlanError(f"{host} {exc}") from None


def max_mtu(mode: str, ib_mtu: int = 4096) -> int:
    """The largest IPoIB MTU for ``mode`` on an IB link MTU of ``ib_mtu``."""
    if mode == "datagram":
        return ib_mtu - IPOIB_HEADER
    if mode == "connected":
        return CONNECTED_MAX_MTU
    raise IpoibPlanError(f"IPoIB mode {mode!r} is not one of {', '.join(MODES)}")


def parse_pkey(value: Any, full_membership: bool | None = True) -> int | None:
    """The P_Key as the kernel and NetworkManager take it (membership bit included), or None.

    ``value`` is an int or a string (``"0x10"``, ``"0x8010"``, ``"16"``). A value with the
    0x8000 bit set is already a full-membership key; ``full_membership: false`` with such a value
    is a contradiction.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise IpoibPlanError(f"P_Key {value!r} is not a number")
    try:
        key = value if isinstance(value, int) else int(str(value).strip(), 0)
    except ValueError:
        raise IpoibPlanError(f"P_Key {value!r} is not a number (use 0x0001-0x7fff)") from None
    if not 0 <= key <= 0xFFFF:
        raise IpoibPlanError(f"P_Key {value!r} is out of range: the partition is 0x0001-0x7fff")
    partition = key & 0x7FFF
    if partition == 0:
        raise IpoibPlanError(f"P_Key {value!r} is out of range: the partition is 0x0001-0x7fff")
    if key & FULL_MEMBERSHIP and full_membership is False:
        raise IpoibPlanError(
            f"P_Key {value!r} has the full-membership bit 0x8000 set but full_membership is false"
        )
    return partition | FULL_MEMBERSHIP if (full_membership or key & FULL_MEMBERSHIP) else partition


def child_name(parent: str, pkey: int) -> str:
    return f"{parent}.{pkey:04x}"


def ib_netdevs(facts: Mapping[str, Any] | None) -> dict[str, str]:
    """{'mlx5_0': 'ibp26s0', 'mlx5_0:1': 'ibp26s0', ...} for the InfiniBand ports in fabric facts."""
    out: dict[str, str] = {}
    for hca in (facts or {}).get("hcas") or []:
        for port in hca.get("ports") or []:
            if port.get("link_layer") != "InfiniBand" or not port.get("netdev"):
                continue
            out.setdefault(hca["name"], port["netdev"])
            out[f"{hca['name']}:{port['port']}"] = port["netdev"]
    return out


def _address(host: str, name: str, value: Any, network: ipaddress.IPv4Network | None) -> str:
    text = str(value)
    try:
        with_prefix = text if "/" in text or network is None else f"{text}/{network.prefixlen}"
        iface = ipaddress.ip_interface(with_prefix)
    except ValueError:
        raise IpoibPlanError(f"{host} {name}: {text!r} is not an IPv4 address") from None
    if iface.version != 4:
        raise IpoibPlanError(f"{host} {name}: {text!r} is not an IPv4 address")
    if "/" not in text and network is None:
        raise IpoibPlanError(f"{host} {name}: address {text!r} needs a prefix length (e.g. /16)")
    if network is not None:
        if iface.ip not in network:
            raise IpoibPlanError(f"{host} {name}: address {iface.ip} is outside its network {network}")
        if iface.network != network:
            raise IpoibPlanError(
                f"{host} {name}: address {iface} has another prefix length than its network {network}"
            )
    net = iface.network
    if net.prefixlen <= 30 and iface.ip in (net.network_address, net.broadcast_address):
        raise IpoibPlanError(f"{host} {name}: {iface.ip} is the network or broadcast address of {net}")
    return str(iface)


def _from_index(host: str, name: str, network: ipaddress.IPv4Network, index: Any) -> str:
    if isinstance(index, str) and index.strip().isdigit():  # -e / INI inventories give strings
        index = int(index)
    if isinstance(index, bool) or not isinstance(index, int):
        raise IpoibPlanError(
            f"{host} {name}: no address: set ipoib_host_index (an integer) or ipoib_addresses.{name}"
        )
    usable = network.num_addresses - (2 if network.prefixlen <= 30 else 0)
    if not 1 <= index <= usable:
        raise IpoibPlanError(
            f"{host} {name}: ipoib_host_index {index} does not fit in {network} (1-{usable})"
        )
    return _address(host, name, network.network_address + index, network)


def _interface(
    host: str,
    name: str,
    spec: Mapping[str, Any],
    *,
    device: str,
    address: str | None,
    defaults: Mapping[str, Any],
) -> dict[str, Any]:
    mode = spec.get("mode") or defaults.get("mode") or "datagram"
    if mode not in MODES:
        raise IpoibPlanError(f"{host} {name}: mode {mode!r} is not one of {', '.join(MODES)}")
    ib_mtu = int(spec.get("ib_mtu") or defaults.get("ib_mtu") or 4096)
    limit = max_mtu(mode, ib_mtu)
    mtu = spec.get("mtu") or defaults.get("mtu") or limit
    if isinstance(mtu, str) and mtu.strip().isdigit():  # -e / INI inventories give strings
        mtu = int(mtu)
    if isinstance(mtu, bool) or not isinstance(mtu, int):
        raise IpoibPlanError(f"{host} {name}: MTU {mtu!r} is not an integer")
    if mtu > limit:
        why = f"IB MTU {ib_mtu} - 4" if mode == "datagram" else "the connected-mode limit"
        raise IpoibPlanError(
            f"{host} {name}: MTU {mtu} is too big for {mode} mode (at most {limit}, {why}); "
            f"lower the MTU or use connected mode"
        )
    if mtu < MIN_MTU:
        raise IpoibPlanError(f"{host} {name}: MTU {mtu} is below the IPv4 minimum {MIN_MTU}")
    try:
        pkey = parse_pkey(spec.get("pkey"), spec.get("full_membership", True))
    except IpoibPlanError as exc:
        raise IpoibPlanError(f"{host} {name}: {exc}") from None
    ifname = child_name(device, pkey) if pkey is not None else device
    _safe(host, validate.netdev, f"{name}: interface name", ifname)
    return {
        "name": ifname,
        "network": name,
        "device": device,
        "parent": device if pkey is not None else None,
        "pkey": pkey,
        "pkey_hex": f"0x{pkey:04x}" if pkey is not None else None,
        "mode": mode,
        "mtu": mtu,
        "address": address,
        "connection": f"fabricops-ipoib-{ifname}",
    }


def host_interfaces(
    host: str,
    *,
    plan: Mapping[str, Any] | None = None,
    host_index: Any = None,
    addresses: Mapping[str, Any] | None = None,
    interfaces: Iterable[Mapping[str, Any]] | None = None,
    facts: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
    check_devices: bool = True,
) -> list[dict[str, Any]]:
    """The IPoIB interfaces ``host`` should have, sorted by name.

    ``interfaces`` (explicit, per host) wins over ``plan``. A plan's ``networks`` maps a name to a
    CIDR (the name is then the device) or to ``{prefix, device, mode, mtu, pkey, full_membership}``;
    a device is a netdev or an HCA (``mlx5_0`` / ``mlx5_0:1``) resolved through the fabric facts.
    ``defaults`` holds ``mode``, ``mtu`` and ``ib_mtu``. Raises :class:`IpoibPlanError`.
    """
    defaults = defaults or {}
    addresses = dict(addresses or {})
    known = ib_netdevs(facts)
    netdevs = sorted(set(known.values()))
    result: list[dict[str, Any]] = []

    def resolve(name: str, device: Any) -> str:
        if not device or not isinstance(device, str):
            raise IpoibPlanError(f"{host} {name}: no device given")
        _safe(host, validate.hca_or_netdev, f"{name}: device", device)
        if device in known:
            return known[device]
        if check_devices and device not in netdevs:
            have = ", ".join(netdevs) or "none (no InfiniBand port with a netdev in fabric facts)"
            raise IpoibPlanError(
                f"{host} {name}: {device} is not an InfiniBand netdev or HCA on this host (have: {have})"
            )
        return device

    if interfaces:
        for entry in interfaces:
            device = entry.get("device")
            if entry.get("name") is not None:
                _safe(host, validate.label, "ipoib_interfaces name", entry["name"])
            name = str(entry.get("name") or device)
            dev = resolve(name, device)
            address = _address(host, name, entry["address"], None) if entry.get("address") else None
            result.append(_interface(host, name, entry, device=dev, address=address, defaults=defaults))
    else:
        for name, spec in sorted(((plan or {}).get("networks") or {}).items()):
            _safe(host, validate.label, "ipoib_plan network name", name)
            spec = {"prefix": spec} if isinstance(spec, str) else dict(spec or {})
            try:
                network = ipaddress.IPv4Network(str(spec.get("prefix")), strict=True)
            except ValueError:
                raise IpoibPlanError(
                    f"{host} {name}: prefix {spec.get('prefix')!r} is not an IPv4 network "
                    f"(e.g. 198.18.0.0/16)"
                ) from None
            dev = resolve(name, spec.get("device") or name)
            if addresses.get(name):
                address = _address(host, name, addresses.pop(name), network)
            else:
                address = _from_index(host, name, network, host_index)
            result.append(_interface(host, name, spec, device=dev, address=address, defaults=defaults))
        if addresses:
            raise IpoibPlanError(
                f"{host} ipoib_addresses: {', '.join(sorted(addresses))} is not a network of ipoib_plan"
            )

    seen: dict[str, str] = {}
    for iface in result:
        if iface["name"] in seen:
            raise IpoibPlanError(
                f"{host} {iface['network']}: interface {iface['name']} is also planned by "
                f"{seen[iface['name']]}"
            )
        seen[iface["name"]] = iface["network"]
    nets = [(i, ipaddress.ip_interface(i["address"]).network) for i in result if i["address"]]
    for n, (a, net_a) in enumerate(nets):
        for b, net_b in nets[n + 1 :]:
            if net_a.overlaps(net_b):
                raise IpoibPlanError(
                    f"{host} {a['name']}: network {net_a} overlaps {net_b} of {b['name']} on the same host"
                )
    return sorted(result, key=lambda i: i["name"])


def plan_errors(host: str, **kwargs: Any) -> list[str]:
    """[] when :func:`host_interfaces` succeeds, else its one-line reason (for preflight asserts)."""
    try:
        host_interfaces(host, **kwargs)
    except IpoibPlanError as exc:
        return [str(exc)]
    return []


def address_conflicts(plans: Mapping[str, Iterable[Mapping[str, Any]]], host: str | None = None) -> list[str]:
    """Addresses planned on more than one interface across hosts: one line per clash.

    ``plans`` maps a host to its interfaces (``host_interfaces`` output). With ``host``, only the
    clashes that involve that host are returned, so each host can fail on its own.
    """
    owners: dict[str, list[tuple[str, str]]] = {}
    for name, ifaces in sorted(plans.items()):
        for iface in ifaces or []:
            if iface.get("address"):
                ip = str(ipaddress.ip_interface(iface["address"]).ip)
                owners.setdefault(ip, []).append((name, iface["name"]))
    errors = []
    for ip, users in sorted(owners.items()):
        if len(users) < 2 or (host is not None and host not in {u[0] for u in users}):
            continue
        first, *others = users if host is None else sorted(users, key=lambda u: u[0] != host)
        errors.append(
            f"{first[0]} {first[1]}: address {ip} is also planned for "
            + ", ".join(f"{h} {i}" for h, i in others)
        )
    return errors


def primary_ipv4(ip_addr_json: str) -> dict[str, str | None]:
    """``ip -j addr show`` output -> {ifname: primary IPv4 "a.b.c.d/p", or None when it has none}.

    The primary address is the link's first ``inet`` entry not flagged secondary: the one
    Ansible's network facts report as ``ipv4``. Raises ParseError on output that is not that
    command's JSON (never an empty mapping, which would read as "no addresses anywhere").
    """
    from fabricops.parsers import ip_addr

    record = ip_addr.parse(ip_addr_json)
    return {lk.ifname: (lk.ipv4_primary.cidr if lk.ipv4_primary else None) for lk in record.links}


def pending_changes(
    interfaces: Iterable[Mapping[str, Any]],
    netdevs: Mapping[str, Any] | None,
    ansible_facts: Mapping[str, Any] | None = None,
    addresses: Mapping[str, str | None] | None = None,
) -> list[dict[str, Any]]:
    """Interfaces whose live state differs from the plan, with the reasons.

    ``netdevs`` is ``fabric.netdevs`` (mode, mtu). The live IPv4 address comes from
    ``addresses`` ({ifname: "a.b.c.d/p" or None}, :func:`primary_ipv4` of ``ip -j addr show``)
    or, without it, from ``ansible_facts`` (network subset) when gathered. A missing netdev (a
    P_Key child not created yet) is pending too. Bringing these in line re-activates the
    interface, which is the ipoib role's disruptive step.
    """
    netdevs = netdevs or {}
    ansible_facts = ansible_facts or {}
    if addresses is not None:
        ansible_facts = {
            name.replace("-", "_").replace(".", "_"): {"ipv4": _facts_ipv4(cidr)}
            for name, cidr in addresses.items()
        }
    out = []
    for iface in interfaces:
        live = netdevs.get(iface["name"])
        reasons = []
        if live is None:
            reasons.append("absent")
        else:
            if live.get("mode") and live["mode"] != iface["mode"]:
                reasons.append(f"mode {live['mode']} -> {iface['mode']}")
            if live.get("mtu") is not None and int(live["mtu"]) != int(iface["mtu"]):
                reasons.append(f"mtu {live['mtu']} -> {iface['mtu']}")
            key = iface["name"].replace("-", "_").replace(".", "_")
            gathered = ansible_facts.get(key)
            ipv4 = (gathered or {}).get("ipv4") or {}
            if iface.get("address") and isinstance(gathered, Mapping) and isinstance(ipv4, Mapping):
                want = ipaddress.ip_interface(iface["address"])
                have = f"{ipv4.get('address')}/{ipv4.get('prefix')}" if ipv4.get("address") else None
                if have is None or ipaddress.ip_interface(have) != want:
                    reasons.append(f"address {have or 'none'} -> {want}")
        if reasons:
            out.append({"name": iface["name"], "reasons": reasons})
    return out


def _facts_ipv4(cidr: str | None) -> dict[str, str]:
    if not cidr:
        return {}
    address, _, prefix = cidr.partition("/")
    return {"address": address, "prefix": prefix}


# -- the configuration backend (networkmanager | netplan | ifupdown) and the netplan file ---------

BACKENDS = ("networkmanager", "netplan", "ifupdown")

#: the first lines of the netplan file (netplan ignores comments; no timestamp, so a rerun is equal)
NETPLAN_HEADER = (
    "# Managed by fabricops.fabric.ipoib (Ansible): the IPoIB interfaces of this host's plan.\n"
    "# Edits here are overwritten on the next run; change the plan (ipoib_plan) instead.\n"
)

#: the one sentence that refuses P_Key children on the netplan backend (netplan 0.106 - 1.x has no
#: P_Key child device type: docs/ipoib.md)
NETPLAN_NO_PKEY = (
    "netplan has no P_Key child interface type, so the netplan backend cannot create {names}; "
    "create P_Key children with NetworkManager (the role's networkmanager backend) or as a "
    "systemd-networkd .netdev (Kind=ipoib, PartitionKey=) with IPoIB= in the parent's .network"
)


def _stdout_lines(result: Any) -> list[str]:
    if not isinstance(result, Mapping):
        return []
    lines = result.get("stdout_lines")
    if lines is None:
        lines = str(result.get("stdout") or "").splitlines()
    return [str(line).strip() for line in lines]


def _stat(read: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    entry = ((read.get("stats") or {}).get(name)) or {}
    return entry.get("stat") or {}


def netplan_renderer(read: Mapping[str, Any]) -> str | None:
    """The renderer netplan uses on the host, from ``netplan get`` (the merged configuration as YAML):
    its ``network.renderer``, ``networkd`` when none is set (netplan's default; an empty /etc/netplan
    prints nothing). None when netplan is not installed with /etc/netplan, or ``netplan get`` failed
    or printed something that is not that YAML. (``netplan get renderer`` itself fails on netplan
    0.106 when no renderer is set, so the whole tree is read.)"""
    if not _stat(read, "netplan").get("exists") or not _stat(read, "netplan_dir").get("isdir"):
        return None
    result = (read.get("commands") or {}).get("netplan_get") or {}
    if result.get("rc") != 0:
        return None
    try:
        doc = yaml.safe_load(str(result.get("stdout") or "")) or {}
    except yaml.YAMLError:
        return None
    network = doc.get("network", {}) if isinstance(doc, Mapping) else None
    if not isinstance(network, Mapping):
        return None
    return str(network.get("renderer") or "networkd")


def choose_backend(read: Mapping[str, Any]) -> str:
    """The backend from the ipoib role's preflight read (a ``host_read`` result with the commands
    ``nm`` and ``netplan_get`` and the stats ``ifup``, ``netplan``, ``netplan_dir``).

    NetworkManager running wins (an Ubuntu desktop whose netplan renders to NetworkManager gets
    keyfiles, which NetworkManager reads beside netplan's); then netplan installed with /etc/netplan
    and the networkd renderer (Ubuntu Server); then ifupdown (/sbin/ifup). ``none`` otherwise.
    """
    if "SubState=running" in _stdout_lines((read.get("commands") or {}).get("nm")):
        return "networkmanager"
    if netplan_renderer(read) == "networkd":
        return "netplan"
    if _stat(read, "ifup").get("exists"):
        return "ifupdown"
    return "none"


def backend_refusal(host: str, read: Mapping[str, Any], interfaces: Iterable[Mapping[str, Any]]) -> str:
    """'' when the chosen backend can write ``interfaces``; else one sentence naming what was found."""
    backend = choose_backend(read)
    if backend == "none":
        renderer = (read.get("commands") or {}).get("netplan_get") or {}
        if _stat(read, "netplan").get("exists") and not _stat(read, "netplan_dir").get("isdir"):
            netplan = "netplan is installed but /etc/netplan is missing"
        elif _stat(read, "netplan").get("exists") and renderer.get("rc") != 0:
            detail = (str(renderer.get("stderr") or renderer.get("stdout") or "").strip().splitlines()
                      or ["no output"])[-1][:200]
            netplan = f"`netplan get` failed ({detail})"
        elif _stat(read, "netplan").get("exists") and netplan_renderer(read) is None:
            netplan = "`netplan get` printed no netplan configuration"
        elif _stat(read, "netplan").get("exists"):
            netplan = f"netplan renders to {netplan_renderer(read)}, which is not running"
        else:
            netplan = "no netplan (/usr/sbin/netplan)"
        return (
            f"{host}: no network backend for IPoIB: NetworkManager is not running, {netplan}, and "
            "ifupdown (/sbin/ifup) is not installed; the ipoib role writes NetworkManager keyfiles, "
            "a netplan file (networkd renderer) or ifupdown stanzas"
        )
    if backend == "netplan":
        children = [str(i["name"]) for i in interfaces if i.get("parent")]
        if children:
            return f"{host}: " + NETPLAN_NO_PKEY.format(names=", ".join(children))
    return ""


def netplan_document(interfaces: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The netplan document (``network: {version: 2, ethernets: ...}``) for the planned interfaces.

    Each interface is an ``ethernets`` entry matched by its netdev name (the plan's names are the
    kernel's netdevs, resolved from fabric facts), rendered by networkd (per device, so the file
    never changes the renderer of the host's other interfaces), with its MTU, ``infiniband-mode``
    (netplan >= 0.105; networkd's ``[IPoIB] Mode=``) and address. ``optional: true``: an IPoIB link
    that is down (no subnet manager yet) does not hold up boot in systemd-networkd-wait-online.
    P_Key children raise :class:`IpoibPlanError` (netplan has no such device type).
    """
    ifaces = list(interfaces)
    children = [str(i["name"]) for i in ifaces if i.get("parent")]
    if children:
        raise IpoibPlanError(NETPLAN_NO_PKEY.format(names=", ".join(children)))
    ethernets: dict[str, Any] = {}
    for iface in sorted(ifaces, key=lambda i: i["name"]):
        entry: dict[str, Any] = {"renderer": "networkd"}
        if iface.get("address"):
            entry["addresses"] = [str(ipaddress.ip_interface(iface["address"]))]
        entry["dhcp4"] = False
        entry["dhcp6"] = False
        entry["mtu"] = int(iface["mtu"])
        entry["infiniband-mode"] = str(iface["mode"])
        entry["optional"] = True
        ethernets[str(iface["name"])] = entry
    return {"network": {"version": 2, "ethernets": ethernets}}


def netplan_yaml(interfaces: Iterable[Mapping[str, Any]]) -> str:
    """:func:`netplan_document` as the file's text: the header, then block-style YAML."""
    body = yaml.safe_dump(netplan_document(interfaces), default_flow_style=False, sort_keys=False)
    return NETPLAN_HEADER + body
