"""The fabric's shape as a scheduler sees it: which leaf each node hangs under, which switches
join the leaves; rendered as Slurm's ``topology.conf`` (topology/tree and topology/block).

Pure functions: cabling in (planned or as built, :mod:`fabricops.sched.sources` reads it), text
out. docs/scheduler-topology.md says what is generated and why; the rules taken from Slurm:

- **tree** (topology.conf(5), "topology/tree"; the topology guide, "Hierarchical Networks"): one
  line per switch, ``SwitchName=NAME Nodes=HOSTLIST`` for a leaf, ``SwitchName=NAME
  Switches=HOSTLIST`` above it; a switch has nodes or child switches, never both (switch_record.c
  refuses "both child switches and nodes"); a node under several leaves is warned about ("Multiple
  leaf switches contain nodes"). Slurm lets nodes on switches without a common parent be used, but
  no job spans them, and warns when no switch reaches all nodes.
- **block** (topology.conf(5), "topology/block", Slurm 23.11+): ``BlockName=NAME Nodes=HOSTLIST``
  per block and ``BlockSizes=``; without BlockSizes the first block's node count becomes the base
  size and a smaller block later in the file is fatal (block_record.c), so it is always written.

How the cabling becomes a tree (:func:`build_tree`):

1. One *network*: ``infiniband`` (default: the compute fabric), ``roce`` (the Ethernet fabric), or
   the name of a switch, meaning the switches joined to it by inter-switch links.
2. A node's leaf is the switch its first port on that network is cabled to (HCA and port in natural
   order; ``rail`` picks an HCA instead). In a rail-optimised fabric every rail's leaves group the
   same hosts, so one rail stands for all; Slurm wants each node under one leaf. The Kubernetes
   labels carry the leaf of every rail.
3. Leaves are level 0. Level k+1 is every switch not yet placed that has a link to a level-k
   switch and no host cable (leaves of other rails stay out); its children are those level-k
   switches. Links within a level (MLAG peers, spine-spine) are not part of the tree.
4. Per connected part of that tree: when no switch reaches every node of the part, a switch that
   is not in the fabric, ``fabricops-top`` (a number is added if that name is taken), joins the
   part's top switches, so Slurm can place a job across them as the cables can carry it. Parts that
   the cabling does not join stay apart (no job can span them, as Slurm's guide says) and the
   header comment says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import BadInput
from fabricops.model.fabric import natural
from fabricops.sched import names as nm

INFINIBAND = "InfiniBand"
ETHERNET = "Ethernet"
#: --fabric words -> the link layer they select
NETWORKS = {"infiniband": INFINIBAND, "ib": INFINIBAND, "roce": ETHERNET, "ethernet": ETHERNET}
TOP_NAME = "fabricops-top"
TIER_NAMES = ("leaf", "spine", "core")
SOURCES = {
    "plan": "as planned (fabricops_cabling, fabricops_switch_links)",
    "as-built": "as built",
}


@dataclass(frozen=True)
class HostPort:
    """One host port and the switch it is cabled to."""

    host: str
    hca: str  #: HCA (or netdev where the plan names none)
    port: int
    switch: str
    layer: str  #: InfiniBand | Ethernet


@dataclass(frozen=True)
class Link:
    """One inter-switch cable (parallel cables are several links)."""

    a: str
    b: str
    layer: str


@dataclass
class Cabling:
    """The fabric's cables as one source saw them."""

    ports: list[HostPort]
    links: list[Link]
    source: str = "plan"  #: plan | as-built
    detail: str = ""  #: for the header: "ibnetdiscover", "LLDP (lldpctl on the hosts, the switches)"
    notes: list[str] = field(default_factory=list)  #: what the reader left out, one sentence each

    def describe(self) -> str:
        base = SOURCES.get(self.source, self.source)
        return f"{base} ({self.detail})" if self.detail else base


@dataclass
class Tree:
    """The scheduler's tree of one network. ``leaves``: leaf -> node names; ``switches``: upper
    switch -> child switches; ``level``: switch -> 0 (leaf), 1 (spine), 2 (core) ...; ``tops``:
    the switches added to join a part (not in the fabric)."""

    network: str
    leaves: dict[str, list[str]]
    switches: dict[str, list[str]]
    level: dict[str, int]
    tops: list[str] = field(default_factory=list)
    parts: int = 1  #: connected parts of the tree (more than one: no job spans them)
    rails: dict[str, dict[str, str]] = field(default_factory=dict)  #: node -> {rail: leaf}
    notes: list[str] = field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        return sorted({n for ns in self.leaves.values() for n in ns}, key=natural)

    def leaf_of(self, node: str) -> str | None:
        return next((lf for lf, ns in self.leaves.items() if node in ns), None)

    def parents(self, switch: str) -> list[str]:
        return sorted((s for s, kids in self.switches.items() if switch in kids), key=natural)

    def path(self, node: str) -> list[str]:
        """The node's leaf, then the first (natural order) parent of each switch up to the top."""
        out: list[str] = []
        sw = self.leaf_of(node)
        while sw is not None and sw not in out:
            out.append(sw)
            ups = self.parents(sw)
            sw = ups[0] if ups else None
        return out


# --- input -------------------------------------------------------------------------------------


def _entries(value: Any, what: str) -> list[Mapping[str, Any]]:
    if value in (None, ""):
        return []
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise BadInput(f"{what} is not a list")
    for i, e in enumerate(value):
        if not isinstance(e, Mapping):
            raise BadInput(f"{what} entry {i + 1} is not a mapping")
    return list(value)


def plan_layers(
    cabling: Sequence[Mapping[str, Any]],
    switch_links: Sequence[Mapping[str, Any]],
    layers: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Switch -> link layer: the inventory's (``layers``, from its switch groups) first; else the
    cabling entry's ``link_layer``, else its netdev (``ib*`` is InfiniBand, another netdev
    Ethernet, as :meth:`fabricops.model.fabric.Fabric.from_inventory` decides); a switch with no
    host cable takes the layer of the switches it is linked to."""
    out = {str(k): str(v) for k, v in (layers or {}).items()}
    for e in cabling:
        sw = str(e.get("switch"))
        if sw in out:
            continue
        if e.get("link_layer"):
            out[sw] = str(e["link_layer"])
        elif e.get("netdev"):
            out[sw] = INFINIBAND if str(e["netdev"]).startswith("ib") else ETHERNET
    for _ in range(4):  # leaf -> spine -> core: a few hops settle every switch
        for e in switch_links:
            a, b = str(e.get("switch_a")), str(e.get("switch_b"))
            if a in out and b not in out:
                out[b] = out[a]
            elif b in out and a not in out:
                out[a] = out[b]
    return out


def planned_cables(
    cabling: Any, switch_links: Any, layers: Mapping[str, str] | None = None
) -> tuple[list, dict[str, str]]:
    """The inventory's cabling as :func:`fabricops.verify.cabling.plan` reads it (the one reader
    of ``fabricops_cabling`` / ``fabricops_switch_links`` for the cabling check and this), after
    checking each entry has what it needs (:class:`BadInput` naming the first that does not)."""
    from fabricops.verify import cabling as vcab

    cab = _entries(cabling, "fabricops_cabling")
    links = _entries(switch_links, "fabricops_switch_links")
    for i, e in enumerate(cab):
        missing = [k for k in ("host", "switch", "switch_port") if e.get(k) in (None, "")]
        if not e.get("hca") and not e.get("netdev"):
            missing.append("hca (or netdev)")
        if missing:
            raise BadInput(
                f"fabricops_cabling entry {i + 1} ({e.get('host', '?')}) lacks {', '.join(missing)}"
            )
        try:
            int(e.get("port") or 1)
        except (TypeError, ValueError):
            raise BadInput(
                f"fabricops_cabling entry {i + 1} ({e['host']}): port {e.get('port')!r} is not a number"
            ) from None
    for i, e in enumerate(links):
        missing = [k for k in ("switch_a", "port_a", "switch_b", "port_b") if e.get(k) in (None, "")]
        if missing:
            raise BadInput(f"fabricops_switch_links entry {i + 1} lacks {', '.join(missing)}")
    lay = plan_layers(cab, links, layers)
    return vcab.plan(cab, links, lay), lay


def from_cables(cables: Iterable[Any], source: str = "plan", detail: str = "") -> Cabling:
    """:class:`Cabling` from verify's cables (``fabricops.verify.cabling.Cable``)."""
    ports: list[HostPort] = []
    links: list[Link] = []
    for c in cables:
        if c.kind == "host":
            ports.append(HostPort(c.a.node, c.a.port, int(c.a.host_port or 1), c.b.node, c.layer))
        else:
            links.append(Link(c.a.node, c.b.node, c.layer))
    return Cabling(ports, links, source, detail)


def from_plan(
    cabling: Any, switch_links: Any = (), layers: Mapping[str, str] | None = None
) -> Cabling:
    """The cabling as planned: the inventory's ``fabricops_cabling`` and ``fabricops_switch_links``."""
    cables, _lay = planned_cables(cabling, switch_links, layers)
    return from_cables(cables, "plan")


# --- choosing the network ------------------------------------------------------------------------


def select(cabling: Cabling, network: str = "infiniband") -> Cabling:
    """The part of ``cabling`` one network is made of (module docstring, step 1); :class:`BadInput`
    when it names nothing there."""
    word = str(network).strip()
    layer = NETWORKS.get(word.lower())
    if layer is not None:
        ports = [p for p in cabling.ports if p.layer == layer]
        links = [ln for ln in cabling.links if ln.layer == layer]
        if not ports:
            have = sorted({p.layer for p in cabling.ports})
            raise BadInput(
                f"--fabric {word}: the cabling has no {layer} host cable"
                + (f" (it has {', '.join(have)}: try --fabric {_other(layer)})" if have else "")
            )
        return Cabling(ports, links, cabling.source, cabling.detail, list(cabling.notes))
    switches = {p.switch for p in cabling.ports} | {s for ln in cabling.links for s in (ln.a, ln.b)}
    if word not in switches:
        raise BadInput(
            f"--fabric {word!r} is neither infiniband, roce nor a switch of the cabling "
            f"({', '.join(sorted(switches, key=natural)[:8]) or 'no switch'})"
        )
    part = _component(word, cabling.links)
    ports = [p for p in cabling.ports if p.switch in part]
    if not ports:
        raise BadInput(f"--fabric {word}: no host is cabled to {word} or the switches linked to it")
    links = [ln for ln in cabling.links if ln.a in part]
    return Cabling(ports, links, cabling.source, cabling.detail, list(cabling.notes))


def _other(layer: str) -> str:
    return "roce" if layer == INFINIBAND else "infiniband"


def _component(start: str, links: Sequence[Link]) -> set[str]:
    seen, todo = {start}, [start]
    adj: dict[str, set[str]] = {}
    for ln in links:
        adj.setdefault(ln.a, set()).add(ln.b)
        adj.setdefault(ln.b, set()).add(ln.a)
    while todo:
        for nxt in adj.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def network_name(cabling: Cabling) -> str:
    layers = {p.layer for p in cabling.ports}
    if layers == {INFINIBAND}:
        return "InfiniBand"
    if layers == {ETHERNET}:
        return "RoCE (Ethernet)"
    return "/".join(sorted(layers))


# --- the tree -------------------------------------------------------------------------------------


def _rail_key(p: HostPort) -> str:
    return p.hca if p.port == 1 else f"{p.hca}.{p.port}"


def build_tree(
    cabling: Cabling,
    node_names: Mapping[str, str] | None = None,
    rail: str | None = None,
) -> Tree:
    """The scheduler's tree of ``cabling`` (already one network: :func:`select`). ``node_names``:
    host -> scheduler node name (``slurm_node_name``), the host's own name otherwise. Every switch
    and node name is checked (:mod:`fabricops.sched.names`)."""
    node_names = dict(node_names or {})
    by_host: dict[str, list[HostPort]] = {}
    for p in cabling.ports:
        by_host.setdefault(p.host, []).append(p)
    notes = list(cabling.notes)
    leaves: dict[str, list[str]] = {}
    rails: dict[str, dict[str, str]] = {}
    owner: dict[str, str] = {}
    for host in sorted(by_host, key=natural):
        ports = sorted(by_host[host], key=lambda p: (natural(p.hca), p.port))
        node = nm.check(node_names.get(host, host), f"node name of host {host}",
                        "set slurm_node_name for that host in the inventory")
        if node in owner and owner[node] != host:
            raise BadInput(f"node name {node} is given to both {owner[node]} and {host}; each needs its own")
        owner[node] = host
        chosen = ports[0]
        if rail is not None:
            on_rail = [p for p in ports if p.hca == rail or _rail_key(p) == rail]
            if not on_rail:
                notes.append(f"{host} has no port on rail {rail}: left out of the tree")
                continue
            chosen = on_rail[0]
        for p in ports:
            nm.check(p.switch, "switch name", "rename the switch in the inventory")
            rails.setdefault(node, {}).setdefault(_rail_key(p), p.switch)
        leaves.setdefault(chosen.switch, []).append(node)
    if not leaves:
        raise BadInput("no host is cabled to this network: nothing to put in a topology")
    for lf in leaves:
        leaves[lf] = sorted(set(leaves[lf]), key=natural)
    host_switches = {p.switch for p in cabling.ports}
    adj: dict[str, set[str]] = {}
    for ln in cabling.links:
        nm.check(ln.a, "switch name", "rename the switch in the inventory")
        nm.check(ln.b, "switch name", "rename the switch in the inventory")
        if ln.a != ln.b:
            adj.setdefault(ln.a, set()).add(ln.b)
            adj.setdefault(ln.b, set()).add(ln.a)
    level = dict.fromkeys(leaves, 0)
    children: dict[str, list[str]] = {}
    frontier = set(leaves)
    k = 0
    while frontier:
        k += 1
        nxt: dict[str, set[str]] = {}
        for sw in frontier:
            for up in adj.get(sw, ()):
                if up in level or up in host_switches:
                    continue
                nxt.setdefault(up, set()).add(sw)
        for up, kids in nxt.items():
            level[up] = k
            children[up] = sorted(kids, key=natural)
        frontier = set(nxt)
    tops, parts = _join_parts(leaves, children, level)
    return Tree(network_name(cabling), leaves, children, level, tops, parts, rails, notes)


def _reach(sw: str, leaves: Mapping[str, list[str]], children: Mapping[str, list[str]]) -> set[str]:
    if sw in leaves:
        return set(leaves[sw])
    out: set[str] = set()
    for kid in children.get(sw, ()):
        out |= _reach(kid, leaves, children)
    return out


def _join_parts(
    leaves: dict[str, list[str]], children: dict[str, list[str]], level: dict[str, int]
) -> tuple[list[str], int]:
    """Add a top switch to each connected part of the tree that no switch spans (step 4)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for up, kids in children.items():
        for kid in kids:
            parent[find(kid)] = find(up)
    parts: dict[str, list[str]] = {}
    for sw in level:
        parts.setdefault(find(sw), []).append(sw)
    taken = set(level)
    tops: list[str] = []
    ordered = sorted(parts.values(), key=lambda sws: natural(min(sws, key=natural)))
    for sws in ordered:
        nodes = set().union(*(set(leaves[s]) for s in sws if s in leaves))
        if any(_reach(s, leaves, children) == nodes for s in sws):
            continue
        is_child = {kid for s in sws for kid in children.get(s, ())}
        roots = sorted((s for s in sws if s not in is_child), key=natural)
        name, n = TOP_NAME, 1
        while name in taken:
            n += 1
            name = f"{TOP_NAME}{n}"
        taken.add(name)
        children[name] = roots
        level[name] = max(level[s] for s in roots) + 1
        tops.append(name)
    return tops, len(parts)


# --- rendering --------------------------------------------------------------------------------


def _header(kind: str, network: str, source: str, extra: Sequence[str] = ()) -> list[str]:
    lines = [
        f"# Slurm topology.conf for {kind}, generated by fabricops (`fabricops topology`)",
        f"# from the {network} fabric's cabling {source}.",
        "# Do not edit: run `fabricops topology` again (docs/scheduler-topology.md).",
    ]
    return lines + [f"# {x}" for x in extra]


def render_tree(tree: Tree, source: str) -> str:
    """topology.conf text of ``tree`` (topology/tree). ``source`` says where the cabling came from
    (:meth:`Cabling.describe`); it goes into the header, which carries no time."""
    counts = []
    for lvl in range(max(tree.level.values()) + 1):
        n = sum(1 for s, v in tree.level.items() if v == lvl and s not in tree.tops)
        if n:
            tier = TIER_NAMES[lvl] if lvl < len(TIER_NAMES) else f"level-{lvl}"
            counts.append(f"{n} {tier} switch{'es' if n != 1 else ''}")
    extra = [", ".join([*counts, f"{len(tree.nodes)} nodes"]) + "."]
    if tree.parts > 1:
        extra.append(
            f"The cabling makes {tree.parts} separate fabrics: no job spans them (Slurm topology guide); "
            "put them in separate partitions."
        )
    lines = _header("the topology/tree plugin", tree.network, source, extra)
    for sw in sorted(tree.leaves, key=natural):
        lines.append(f"SwitchName={sw} Nodes={nm.hostlist(tree.leaves[sw])}")
    for sw in sorted(tree.switches, key=lambda s: (tree.level[s], s in tree.tops, natural(s))):
        if sw in tree.tops:
            lines.append(
                f"# {sw} is not a switch of the fabric: it joins {', '.join(tree.switches[sw])}, which the "
                "cabling connects but no one switch spans."
            )
        lines.append(f"SwitchName={sw} Switches={nm.hostlist(tree.switches[sw])}")
    return "\n".join(lines) + "\n"


def tree_conf(
    cabling: Cabling | Sequence[Mapping[str, Any]],
    switch_links: Sequence[Mapping[str, Any]] = (),
    *,
    fabric: str = "infiniband",
    node_names: Mapping[str, str] | None = None,
    layers: Mapping[str, str] | None = None,
    rail: str | None = None,
) -> str:
    """Slurm ``topology.conf`` (topology/tree) text for one network of the fabric.

    ``cabling``: a :class:`Cabling` (``fabricops.sched.sources.as_built`` or :func:`from_plan`), or
    the inventory's ``fabricops_cabling`` list itself, with ``switch_links`` its
    ``fabricops_switch_links`` and ``layers`` switch -> link layer (the inventory's switch groups;
    guessed from netdevs otherwise). ``fabric``: ``infiniband`` (default), ``roce`` or a switch
    name. ``node_names``: host -> Slurm node name. Raises :class:`fabricops.errors.BadInput` (a
    name that cannot go into the file, an entry missing a field, a network with no host)."""
    cab = cabling if isinstance(cabling, Cabling) else from_plan(cabling, switch_links, layers)
    sel = select(cab, fabric)
    return render_tree(build_tree(sel, node_names, rail), sel.describe())


def block_conf(
    domains: Mapping[str, str],
    block_sizes: Sequence[int] | None = None,
    node_names: Mapping[str, str] | None = None,
) -> str:
    """Slurm ``topology.conf`` (topology/block) text: one block per NVLink domain.

    ``domains``: host -> domain name (``fabricops_nvlink_domain``); ``node_names`` as for
    :func:`tree_conf`. Blocks are written in natural order of their names (Slurm pairs neighbouring
    blocks into larger ones in file order). ``block_sizes`` (BlockSizes=): default the smallest
    block's node count, so no block is below the base size; given, the first is the base, each
    later one a power-of-two multiple of it (topology.conf(5)), and no block may be smaller than
    the base. Raises :class:`BadInput` naming what is wrong."""
    node_names = dict(node_names or {})
    blocks: dict[str, list[str]] = {}
    owner: dict[str, str] = {}
    for host in sorted(domains, key=natural):
        dom = nm.check(domains[host], f"NVLink domain of host {host}",
                       "fix fabricops_nvlink_domain for that host in the inventory")
        node = nm.check(node_names.get(host, host), f"node name of host {host}",
                        "set slurm_node_name for that host in the inventory")
        if node in owner and owner[node] != host:
            raise BadInput(f"node name {node} is given to both {owner[node]} and {host}; each needs its own")
        owner[node] = host
        blocks.setdefault(dom, []).append(node)
    if not blocks:
        raise BadInput("no host declares an NVLink domain (fabricops_nvlink_domain): no block topology")
    sizes = {b: len(set(ns)) for b, ns in blocks.items()}
    smallest = min(sizes.values())
    if block_sizes:
        bs = [int(x) for x in block_sizes]
        base = bs[0]
        if base <= 0 or any(x <= 0 for x in bs):
            raise BadInput(f"--block-sizes {','.join(map(str, bs))}: sizes must be positive")
        for x in bs[1:]:
            ratio = x // base
            if x % base or ratio < 2 or ratio & (ratio - 1):
                raise BadInput(
                    f"--block-sizes {','.join(map(str, bs))}: {x} is not a power-of-two multiple of the "
                    f"base size {base} (Slurm's BlockSizes rule)"
                )
        if bs != sorted(set(bs)):
            raise BadInput(f"--block-sizes {','.join(map(str, bs))}: sizes must grow from the base size")
        small = sorted((b for b, n in sizes.items() if n < base), key=natural)
        if small:
            raise BadInput(
                f"block {small[0]} has {sizes[small[0]]} nodes, fewer than the base block size {base} "
                "(slurmctld refuses such a block)"
            )
    else:
        bs = [smallest]
    extra = [f"{len(blocks)} NVLink domain{'s' if len(blocks) != 1 else ''}, "
             f"{sum(sizes.values())} nodes (fabricops_nvlink_domain)."]
    lines = [
        "# Slurm topology.conf for the topology/block plugin, generated by fabricops (`fabricops topology`)",
        "# from the NVLink domains the inventory declares (fabricops_nvlink_domain).",
        "# Do not edit: run `fabricops topology --format block` again (docs/scheduler-topology.md).",
        *[f"# {x}" for x in extra],
    ]
    for b in sorted(blocks, key=natural):
        lines.append(f"BlockName={b} Nodes={nm.hostlist(blocks[b])}")
    lines.append(f"BlockSizes={','.join(str(x) for x in bs)}")
    return "\n".join(lines) + "\n"
