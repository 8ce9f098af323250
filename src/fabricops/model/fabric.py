"""The fabric as a graph of directed cables, and the paths tests take through it (SPEC-18 §3, §5).

A :class:`Fabric` is one connected fabric (one rail family): host ports (``endpoints``), leaf and
spine switches, and the cables between them -- host cables (host port <-> leaf port) and
inter-switch links (leaf port <-> spine port). A *directed cable* (:data:`DirLink`) is one direction
of one cable, ``((node, port), (node, port))``; its string form is ``"leaf1:swp31>spine1:swp1"``
(host side ``"gpu03:mlx5_1/1"``).

Routing (the same rules the lab's physics implements):

- **InfiniBand** (OpenSM ftree, deterministic per destination *port*, not per LID value): OpenSM's
  fat-tree engine (``-R ftree``; opensm doc/current-routing.txt "Fat-tree Routing Algorithm",
  osm_ucast_ftree.c ``fabric_route_to_cns``: "foreach leaf switch, for each compute node (in
  indexing order) ... assign-down-going-port-by-ascending-up") walks each leaf's host ports in order
  and hands them out over the leaf's up ports round-robin, so one leaf's destinations spread over all
  spines and all parallel links. The model: ``pos`` = the destination's index among the host ports
  cabled to its leaf, in natural order of the leaf's port names; the source leaf's uplinks are its
  ISL ports (to spines that reach the destination leaf) sorted by spine name, then natural port
  order; ``n_up`` their count. Up over uplink ``i = pos % n_up``; at that spine, down to the
  destination leaf over its ``k``-th parallel link (spine's natural port order), ``k = r %
  n_parallel`` where ``r`` is the rank of uplink ``i`` among the source leaf's uplinks to that
  spine (the mirror of the link it came up on). On the symmetric shapes the lab builds every ISL
  direction carries at least one destination. LIDs are accepted but do not pick the path. Same
  leaf: leaf -> host directly.
- **RoCE** (ECMP): the uplink is a hash of the flow (source/destination address, UDP source port
  from the QP numbers, random per run), so a cross-leaf path is unknown to the product
  (:meth:`Fabric.path` returns None) unless the caller passes the flow's hash (``flow``).

Only two-tier fabrics (leaf, spine) are modelled; a spine-to-core link is refused.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import BadInput

__all__ = [
    "Cable",
    "DirLink",
    "Fabric",
    "FabricError",
    "dirlink_str",
    "ecmp_hash",
    "fat_tree",
    "roce_sport",
]

Port = tuple[str, str]  #: (node, port): ("gpu03", "mlx5_1/1"), ("leaf1", "swp31")
DirLink = tuple[Port, Port]  #: one direction of one cable


class FabricError(BadInput):
    """The inventory does not describe a fabric the model can route (one sentence naming the entry)."""


def natural(name: str) -> list[Any]:
    """Natural sort key: swp2 < swp10, Eth1/2 < Eth1/10."""
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", str(name)) if t != ""]


def dirlink_str(d: DirLink) -> str:
    """``"leaf1:swp31>spine1:swp1"``."""
    (a, pa), (b, pb) = d
    return f"{a}:{pa}>{b}:{pb}"


def ecmp_hash(src_ip: str, dst_ip: str, udp_sport: int) -> int:
    """The ECMP hash of a RoCE flow (SPEC-18 §3): crc32 of ``"src|dst|sport"``."""
    return zlib.crc32(f"{src_ip}|{dst_ip}|{udp_sport}".encode())


def roce_sport(lqpn: int, rqpn: int) -> int:
    """RoCEv2 UDP source port of a QP pair (rdma_calc_flow_label, then the kernel's fold)."""
    v = lqpn * rqpn
    fl = (v ^ (v >> 20) ^ (v >> 40)) & 0xFFFFF
    return (fl & 0x3FFF) | ((fl & 0xFC000) >> 14) | 0xC000


@dataclass(frozen=True)
class Cable:
    """One cable. Host cable: ``a`` is the host port, ``b`` the leaf port. ISL: ``a`` the leaf port,
    ``b`` the spine port."""

    a: Port
    b: Port
    kind: str  #: "host" | "isl"

    def directions(self) -> tuple[DirLink, DirLink]:
        return (self.a, self.b), (self.b, self.a)

    def __str__(self) -> str:
        return f"{self.a[0]}:{self.a[1]}<>{self.b[0]}:{self.b[1]}"


@dataclass(eq=False)
class Fabric:
    """One connected fabric. Build it with :meth:`from_inventory` or :func:`fat_tree`."""

    endpoints: list[Port]
    cables: list[Cable]
    link_layer: str = "InfiniBand"  #: InfiniBand | Ethernet
    lids: dict[Port, int] = field(default_factory=dict)
    tiers: dict[str, str] = field(default_factory=dict)  #: switch -> leaf | spine

    def __post_init__(self) -> None:
        self._leaf: dict[Port, Port] = {}  # endpoint -> (leaf, leaf port)
        self._host_of: dict[Port, Port] = {}  # (leaf, port) -> endpoint
        up: dict[str, list[tuple[str, str, str]]] = {}
        par: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for c in self.cables:
            if c.kind == "host":
                self._leaf[c.a] = c.b
                self._host_of[c.b] = c.a
            else:
                (leaf, lp), (spine, sp) = c.a, c.b
                up.setdefault(leaf, []).append((spine, lp, sp))
                par.setdefault((spine, leaf), []).append((sp, lp))
        self._up = {k: sorted(v, key=lambda t: (natural(t[0]), natural(t[1]))) for k, v in up.items()}
        self._par = {k: sorted(v, key=lambda t: natural(t[0])) for k, v in par.items()}
        self.endpoints = sorted(self.endpoints, key=lambda e: (natural(e[0]), natural(e[1])))
        self.leaves = sorted({lp[0] for lp in self._leaf.values()}, key=natural)
        self.spines = sorted({s for (s, _l) in self._par}, key=natural)
        self._on_leaf: dict[str, list[Port]] = {}
        for e in self.endpoints:
            self._on_leaf.setdefault(self._leaf[e][0], []).append(e)
        # pos: a host port's index among its leaf's host ports, natural order of the leaf port names
        self._pos: dict[Port, int] = {}
        for eps in self._on_leaf.values():
            for i, e in enumerate(sorted(eps, key=lambda e: natural(self._leaf[e][1]))):
                self._pos[e] = i

    # --- building -----------------------------------------------------------------------------

    @classmethod
    def from_inventory(
        cls,
        cabling: Sequence[Mapping[str, Any]],
        switch_links: Sequence[Mapping[str, Any]] | None = None,
        tiers: Mapping[str, str] | None = None,
        lids: Mapping[Port, int] | None = None,
        link_layer: str | Mapping[str, str] | None = None,
    ) -> list[Fabric]:
        """The connected fabrics of ``fabricops_cabling`` + ``fabricops_switch_links``.

        ``tiers``: switch -> leaf|spine (``fabricops_switch_tier``); without it a switch with host
        cables is a leaf and the other end of a ``leaf_spine`` link a spine. ``lids``: endpoint ->
        LID (ibstat's Base lid). ``link_layer``: one for all, or switch -> link layer; else the
        cabling entry's ``link_layer``, else InfiniBand when the netdev is ``ib*``, Ethernet
        otherwise. Raises :class:`FabricError` naming the first bad entry."""
        tiers = dict(tiers or {})
        used: dict[Port, str] = {}
        host_cables: list[Cable] = []
        layer_of: dict[str, str] = {}
        seen_ep: dict[Port, str] = {}
        for i, e in enumerate(cabling or []):
            what = f"fabricops_cabling entry {i + 1}"
            if not isinstance(e, Mapping):
                raise FabricError(f"{what} is not a mapping (host, hca, port, switch, switch_port)")
            missing = [k for k in ("host", "hca", "switch", "switch_port") if e.get(k) in (None, "")]
            if missing:
                raise FabricError(
                    f"{what} ({e.get('host', '?')} {e.get('hca', '?')}) lacks {', '.join(missing)}"
                )
            ep = (str(e["host"]), f"{e['hca']}/{e.get('port', 1)}")
            sw = (str(e["switch"]), str(e["switch_port"]))
            what = f"{what} ({ep[0]} {ep[1]} -> {sw[0]} {sw[1]})"
            if ep in seen_ep:
                raise FabricError(f"{what}: {ep[0]} {ep[1]} is cabled twice (also {seen_ep[ep]})")
            if sw in used:
                raise FabricError(f"{what}: {sw[0]} port {sw[1]} is used twice (also {used[sw]})")
            if tiers.get(sw[0], "leaf") != "leaf":
                raise FabricError(f"{what}: host cable on {sw[0]}, whose tier is {tiers[sw[0]]} (not leaf)")
            seen_ep[ep] = what
            used[sw] = what
            host_cables.append(Cable(ep, sw, "host"))
            if isinstance(link_layer, str):
                layer_of.setdefault(sw[0], link_layer)
            elif isinstance(link_layer, Mapping) and sw[0] in link_layer:
                layer_of.setdefault(sw[0], str(link_layer[sw[0]]))
            elif e.get("link_layer"):
                layer_of.setdefault(sw[0], str(e["link_layer"]))
            else:
                nd = str(e.get("netdev") or "")
                layer_of.setdefault(sw[0], "InfiniBand" if nd.startswith("ib") else "Ethernet")
        leaves = {c.b[0] for c in host_cables}
        isls: list[Cable] = []
        for i, e in enumerate(switch_links or []):
            what = f"fabricops_switch_links entry {i + 1}"
            if not isinstance(e, Mapping):
                raise FabricError(f"{what} is not a mapping (switch_a, port_a, switch_b, port_b)")
            missing = [k for k in ("switch_a", "port_a", "switch_b", "port_b") if e.get(k) in (None, "")]
            if missing:
                raise FabricError(f"{what} lacks {', '.join(missing)}")
            a, b = (str(e["switch_a"]), str(e["port_a"])), (str(e["switch_b"]), str(e["port_b"]))
            what = f"{what} ({a[0]} {a[1]} -> {b[0]} {b[1]})"
            tier = str(e.get("tier") or "leaf_spine")
            if tier != "leaf_spine":
                raise FabricError(f"{what}: tier {tier}: only two-tier (leaf_spine) fabrics are modelled")
            if a[0] == b[0]:
                raise FabricError(f"{what}: a link from {a[0]} to itself")
            for p in (a, b):
                if p in used:
                    raise FabricError(f"{what}: {p[0]} port {p[1]} is used twice (also {used[p]})")
                used[p] = what
            ta = tiers.get(a[0]) or ("leaf" if a[0] in leaves else None)
            tb = tiers.get(b[0]) or ("leaf" if b[0] in leaves else None)
            if ta == "spine" and tb != "spine":
                a, b, ta, tb = b, a, tb, ta
            ta, tb = ta or "leaf", tb or "spine"
            if (ta, tb) != ("leaf", "spine"):
                raise FabricError(
                    f"{what}: links {a[0]} ({ta}) to {b[0]} ({tb}); "
                    "a leaf_spine link joins a leaf and a spine"
                )
            if b[0] in leaves:
                raise FabricError(f"{what}: spine {b[0]} has host cables")
            tiers.setdefault(a[0], "leaf")
            tiers.setdefault(b[0], "spine")
            isls.append(Cable(a, b, "isl"))
        # connected components over switches
        parent: dict[str, str] = {}

        def find(x: str) -> str:
            parent.setdefault(x, x)
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for c in isls:
            parent[find(c.a[0])] = find(c.b[0])
        for c in host_cables:
            find(c.b[0])
        groups: dict[str, list[Cable]] = {}
        for c in host_cables:
            groups.setdefault(find(c.b[0]), []).append(c)
        for c in isls:
            groups.setdefault(find(c.a[0]), []).append(c)
        out = []
        for cables in groups.values():
            eps = [c.a for c in cables if c.kind == "host"]
            if not eps:
                continue
            sws = {c.b[0] for c in cables if c.kind == "host"} | {
                p[0] for c in cables if c.kind == "isl" for p in (c.a, c.b)
            }
            layers = {layer_of[s] for s in sws if s in layer_of}
            if len(layers) > 1:
                raise FabricError(
                    f"switches {', '.join(sorted(sws, key=natural))} are linked but carry "
                    f"{' and '.join(sorted(layers))}"
                )
            ll = layers.pop() if layers else "InfiniBand"
            eps_set = set(eps)
            f_lids = {ep: int(v) for ep, v in (lids or {}).items() if ep in eps_set and v is not None}
            out.append(cls(eps, cables, ll, f_lids, {s: tiers.get(s, "leaf") for s in sws}))
        out.sort(key=lambda f: (natural(f.endpoints[0][1]), natural(f.leaves[0])))
        return out

    # --- queries ------------------------------------------------------------------------------

    @property
    def roce(self) -> bool:
        return self.link_layer == "Ethernet"

    def directed(self) -> set[DirLink]:
        """Every cable, both directions."""
        return {d for c in self.cables for d in c.directions()}

    def host_links(self) -> set[DirLink]:
        return {d for c in self.cables if c.kind == "host" for d in c.directions()}

    def isl_links(self) -> set[DirLink]:
        return {d for c in self.cables if c.kind == "isl" for d in c.directions()}

    def leaf_of(self, endpoint: Port) -> str:
        return self._leaf[endpoint][0]

    def leaf_port(self, endpoint: Port) -> Port:
        return self._leaf[endpoint]

    def endpoint_at(self, switch_port: Port) -> Port | None:
        return self._host_of.get(switch_port)

    def on_leaf(self, leaf: str) -> list[Port]:
        return list(self._on_leaf.get(leaf, []))

    def uplinks(self, leaf: str) -> list[DirLink]:
        """The leaf's up-direction ISLs in routing order (spine name, natural port order)."""
        return [((leaf, lp), (sp, spp)) for sp, lp, spp in self._up.get(leaf, [])]

    def downlinks(self, spine: str, leaf: str) -> list[DirLink]:
        """The spine's down-direction links to ``leaf``, parallel-link order."""
        return [((spine, spp), (leaf, lp)) for spp, lp in self._par.get((spine, leaf), [])]

    def up(self, endpoint: Port) -> DirLink:
        return (endpoint, self._leaf[endpoint])

    def down(self, endpoint: Port) -> DirLink:
        return (self._leaf[endpoint], endpoint)

    def cross(self, src_leaf: str, dst: Port, flow: int | None = None) -> tuple[DirLink, DirLink] | None:
        """(up ISL, down ISL) from ``src_leaf`` to ``dst`` on another leaf, or None when unknown
        (RoCE without ``flow``) or when no spine joins the two leaves."""
        dleaf = self.leaf_of(dst)
        ups = [u for u in self._up.get(src_leaf, []) if (u[0], dleaf) in self._par]
        if not ups:
            return None
        if self.roce:
            if flow is None:
                return None
            spine, lp, sp = ups[flow % len(ups)]
            par = self._par[(spine, dleaf)]
            k = flow % len(par)
        else:
            i = self._pos[dst] % len(ups)
            spine, lp, sp = ups[i]
            par = self._par[(spine, dleaf)]
            r = sum(1 for u in ups[:i] if u[0] == spine)  # rank of uplink i among those to spine
            k = r % len(par)
        dsp, dlp = par[k]
        return ((src_leaf, lp), (spine, sp)), ((spine, dsp), (dleaf, dlp))

    def path(self, src: Port, dst: Port, flow: int | None = None) -> list[DirLink] | None:
        """The directed cables a test from ``src`` to ``dst`` sends its data over; None = unknown
        (a cross-leaf RoCE path without ``flow``, the ECMP hash of the flow) or no path (no spine
        joins the two leaves)."""
        if src == dst:
            raise ValueError(f"{src[0]} {src[1]}: a test needs two different ports")
        ls, ld = self.leaf_of(src), self.leaf_of(dst)
        if ls == ld:
            return [self.up(src), self.down(dst)]
        x = self.cross(ls, dst, flow)
        if x is None:
            return None
        return [self.up(src), x[0], x[1], self.down(dst)]

    def kind(self, d: DirLink) -> str:
        """``host-up`` | ``host-down`` | ``isl-up`` | ``isl-down``."""
        if d[0] in self._leaf:
            return "host-up"
        if d[1] in self._leaf:
            return "host-down"
        return "isl-up" if self.tiers.get(d[0][0], "leaf") == "leaf" else "isl-down"

    def name(self, d: DirLink) -> str:
        """What to replace, in words: ``ISL leaf2:swp31>spine1:swp2``, ``host port gpu07 mlx5_1/1 (...)``."""
        k = self.kind(d)
        if k == "host-up":
            return f"host port {d[0][0]} {d[0][1]} (transmit: {dirlink_str(d)})"
        if k == "host-down":
            return f"host port {d[1][0]} {d[1][1]} (receive: {dirlink_str(d)})"
        return f"ISL {dirlink_str(d)}"

    def describe(self) -> str:
        return (
            f"{self.link_layer} fabric: {len(self.endpoints)} ports, {len(self.leaves)} leaves, "
            f"{len(self.spines)} spines, {sum(1 for c in self.cables if c.kind == 'isl')} ISLs"
        )


def fat_tree(
    hosts: int,
    hosts_per_leaf: int,
    spines: int,
    uplinks_per_spine: int = 1,
    link_layer: str = "InfiniBand",
    device: str = "mlx5_0/1",
) -> Fabric:
    """A synthetic two-tier fat tree: hosts ``gpu0001..`` filled leaf by leaf (``leaf1`` takes the
    first ``hosts_per_leaf``), each leaf with ``uplinks_per_spine`` links to each spine. Leaf ports
    ``p1..`` face hosts, then the uplinks; LIDs from 2 in host order (the SM's switch has 1)."""
    if hosts < 2 or hosts_per_leaf < 1 or spines < 0 or uplinks_per_spine < 0:
        raise ValueError("fat_tree needs hosts >= 2, hosts_per_leaf >= 1, spines >= 0, uplinks >= 0")
    width = max(2, len(str(hosts)))
    n_leaves = -(-hosts // hosts_per_leaf)
    cables: list[Cable] = []
    eps: list[Port] = []
    lids: dict[Port, int] = {}
    for i in range(hosts):
        ep = (f"gpu{i + 1:0{width}d}", device)
        eps.append(ep)
        lids[ep] = 2 + i
        cables.append(Cable(ep, (f"leaf{i // hosts_per_leaf + 1}", f"p{i % hosts_per_leaf + 1}"), "host"))
    if n_leaves > 1:
        for li in range(n_leaves):
            for s in range(spines):
                for u in range(uplinks_per_spine):
                    lp = f"p{hosts_per_leaf + s * uplinks_per_spine + u + 1}"
                    sp = f"p{li * uplinks_per_spine + u + 1}"
                    cables.append(Cable((f"leaf{li + 1}", lp), (f"spine{s + 1}", sp), "isl"))
    tiers = {f"leaf{i + 1}": "leaf" for i in range(n_leaves)}
    tiers.update({f"spine{s + 1}": "spine" for s in range(spines if n_leaves > 1 else 0)})
    return Fabric(eps, cables, link_layer, lids if link_layer == "InfiniBand" else {}, tiers)


def endpoints_of(cables: Iterable[Cable]) -> list[Port]:
    return [c.a for c in cables if c.kind == "host"]
