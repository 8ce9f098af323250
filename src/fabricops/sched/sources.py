"""Where the cabling comes from: the plan (the inventory) or the fabric as built.

As built is read the way ``fabricops verify``'s cabling phase reads it, through the same functions
of :mod:`fabricops.verify.cabling` (one reader per tool; docs/verify.md, "Cabling"):

- **InfiniBand**: ``ibnetdiscover`` (``iblinkinfo`` where it is missing) on one host of the fabric,
  a second when the first cannot read it; it lists every host cable and every inter-switch link.
- **Ethernet (RoCE)**: ``lldpctl -f keyvalue`` on every host of the fabric for the host cables, and
  each switch's own LLDP table for the leaf-spine links (hosts do not see those).

The fabric reports names; the plan's names give them meaning (a NodeDescription ``gpu07 mlx5_0``,
a managed switch ``MF0;ib-leaf1:...``, an LLDP system name). A device the plan does not know
cannot be placed: it is left out with a note, as is a port with no neighbour.

Reading fails closed: a source that cannot be read (no host reached, a tool missing, a switch not
read) is :class:`fabricops.errors.CouldNotRun` (exit 4) with its sentence, never a topology built
from part of the fabric.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fabricops.errors import CouldNotRun
from fabricops.model.fabric import natural
from fabricops.sched.topology import (
    ETHERNET,
    INFINIBAND,
    Cabling,
    HostPort,
    Link,
    from_cables,
    planned_cables,
    select,
)

RunFn = Callable[[str, str, float], Mapping[str, Any]]


def _vars(hostvars: Mapping[str, Mapping[str, Any]], hosts: Sequence[str]) -> Mapping[str, Any]:
    with_plan = (hostvars.get(h) or {} for h in hosts if (hostvars.get(h) or {}).get("fabricops_cabling"))
    return next(with_plan, {})


def plan(
    hostvars: Mapping[str, Mapping[str, Any]], hosts: Sequence[str], layers: Mapping[str, str] | None = None
) -> Cabling:
    """The cabling as planned: ``fabricops_cabling`` and ``fabricops_switch_links`` (group vars,
    as every host sees them; the first host that has them)."""
    hv = _vars(hostvars, hosts)
    cables, _lay = planned_cables(hv.get("fabricops_cabling"), hv.get("fabricops_switch_links"), layers)
    return from_cables(cables, "plan")


def as_built(
    run: RunFn,
    hosts: Sequence[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    layers: Mapping[str, str] | None = None,
    fabric: str = "infiniband",
    switch_lldp: Any = None,
    switch_reader: Any = None,
    timeout: float = 60,
) -> Cabling:
    """The cabling of one network (``fabric`` as for :func:`fabricops.sched.topology.select`) as the
    fabric reports it. ``run(host, command, timeout)`` runs a command on a host (verify's
    transport); ``switch_lldp(switch, ports)`` reads a switch's LLDP table (default: through
    ``switch_reader``'s access, :func:`fabricops.verify.cabling.switch_lldp_reader`)."""
    from fabricops.verify import cabling as vcab

    hv = _vars(hostvars, hosts)
    everything, lay = planned_cables(hv.get("fabricops_cabling"), hv.get("fabricops_switch_links"), layers)
    if not everything:
        raise CouldNotRun("fabricops_cabling is empty: the plan names no host port, so nothing the fabric "
                          "reports can be placed")
    planned = select(from_cables(everything), fabric)  # BadInput when the network is not there
    sw_of_net = {p.switch for p in planned.ports} | {s for ln in planned.links for s in (ln.a, ln.b)}
    cables = [c for c in everything if c.b.node in sw_of_net]  # host cables and ISLs of this network
    names = vcab.Names(everything)
    out: list[Any] = []  # verify's error results: each one sentence
    observations: list[Any] = []
    layer = planned.ports[0].layer
    if layer == INFINIBAND:
        detail = "ibnetdiscover"
        for part in vcab.ib_fabrics(cables):
            obs = vcab._read_ib(run, part, names, list(hosts), timeout, out)
            if obs is not None:
                observations.append(obs)
    else:
        detail = "LLDP: lldpctl on the hosts, the switches' LLDP tables"
        eth_hosts = sorted({c.a.node for c in cables if c.kind == "host"}, key=natural)
        for host in eth_hosts:
            if host not in hosts:
                out.append(_Error(f"{host} is cabled to the fabric but not among the hosts read (--limit)"))
                continue
            obs = vcab._read_lldpctl(run, host, cables, names, timeout, out)
            if obs is not None:
                observations.append(obs)
        reader = switch_lldp or vcab.switch_lldp_reader(switch_reader)
        isl_switches = sorted({e.node for c in cables if c.kind == "isl" for e in (c.a, c.b)}, key=natural)
        if isl_switches and reader is None:
            raise CouldNotRun(
                "the Ethernet fabric's leaf-spine links are read from the switches' LLDP tables and no "
                "switch access is configured; give the switches' access in the inventory, or use --from plan"
            )
        for switch in isl_switches:
            obs = vcab._read_switch(vcab._named(reader, names), switch, cables, names, out)
            if obs is not None:
                observations.append(obs)
    if out:
        first = out[0].message
        more = f" (and {len(out) - 1} more)" if len(out) > 1 else ""
        raise CouldNotRun(f"cannot read the cabling as built: {first}{more}")
    got = observed(observations, cables, lay, detail)
    if not got.ports:
        why = got.notes[0] if got.notes else "no host cable reported"
        raise CouldNotRun(
            f"cannot read the cabling as built: the fabric reported none of the planned host ports ({why}); "
            "is this the fabric the inventory describes?"
        )
    return got


class _Error:
    def __init__(self, message: str):
        self.message = message


def observed(
    observations: Sequence[Any], cables: Sequence[Any], layers: Mapping[str, str], detail: str
) -> Cabling:
    """:class:`Cabling` from verify's observations (``fabricops.verify.cabling.Observed``): every
    host-to-switch and switch-to-switch neighbour a source reported. ``cables`` (the plan of this
    network) say which ends were expected, so a planned host port with no neighbour gets a note."""
    ports: dict[tuple[str, str, int], HostPort] = {}
    links: dict[frozenset, Link] = {}
    notes: list[str] = []
    planned_hosts = {c.a for c in cables if c.kind == "host"}
    switches = {e.node for c in cables for e in (c.a, c.b) if not e.is_host}

    def layer(sw: str) -> str:
        return layers.get(sw) or (ETHERNET if any(c.layer == ETHERNET for c in cables) else INFINIBAND)

    for obs in observations:
        for local, peer in obs.peers.items():
            if peer is None or peer.end is None:
                unknown_on_switch = not local.is_host and local.node in switches and peer is not None
                if local in planned_hosts or unknown_on_switch:
                    why = "no neighbour" if peer is None else str(peer)
                    notes.append(f"{local}: {why} ({obs.source}); not placed")
                continue
            far = peer.end
            if local.is_host and far.is_host:
                continue
            if local.is_host or far.is_host:
                h, s = (local, far) if local.is_host else (far, local)
                key = (h.node, h.port, int(h.host_port or 1))
                if key in ports and ports[key].switch != s.node:
                    notes.append(
                        f"{h}: {obs.source} sees it on {s.node}, another source on {ports[key].switch}"
                    )
                    continue
                ports.setdefault(key, HostPort(h.node, h.port, int(h.host_port or 1), s.node, layer(s.node)))
            else:
                pair = frozenset({(local.node, local.port), (far.node, far.port)})
                links.setdefault(pair, Link(local.node, far.node, layer(local.node)))
    seen_hosts = {k[0] for k in ports}
    for c in cables:
        if c.kind == "host" and c.a.node not in seen_hosts:
            msg = f"{c.a.node}: no port seen on the fabric; left out of the tree"
            if msg not in notes:
                notes.append(msg)
    ordered_ports = sorted(ports.values(), key=lambda p: (natural(p.host), natural(p.hca), p.port))
    ordered_links = sorted(links.values(), key=lambda ln: (natural(ln.a), natural(ln.b)))
    return Cabling(ordered_ports, ordered_links, "as-built", detail, sorted(set(notes), key=natural))
