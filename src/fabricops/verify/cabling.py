"""The cabling as built against the plan: every cable of ``fabricops_cabling`` (host to leaf) and
``fabricops_switch_links`` (leaf to spine) is looked up in what the fabric itself reports.

Evidence (docs/verify.md, "Cabling"):

- **InfiniBand**: ``ibnetdiscover`` (``iblinkinfo`` where it is missing) on one verified host per
  InfiniBand fabric (the switches an ISL joins are one fabric); it lists every node of the subnet
  and every cable, host cables and ISLs alike. Hosts are named by their NodeDescription
  (``gpu07 mlx5_0``: rdma-core writes ``<hostname> <device>``), managed switches by theirs
  (``MF0;leaf1:MQM9700/U1``: the part between ``;`` and ``:``), else the description itself.
- **Ethernet**: ``lldpctl -f keyvalue`` on every host (lldpd: the neighbour of each netdev), and,
  when the switches are reachable (the same read-only access the RoCE path check uses), each
  switch's own LLDP table (NVUE ``nv show interface <port> lldp neighbor``, Onyx ``show lldp
  interfaces ethernet remote``).

Every difference is one sentence (``gpu07 mlx5_3 is on leaf2 swp9, planned leaf2 swp11``);
output that cannot be read is an ``error`` (fails closed) and a run that checked no cable is an
``error``. :func:`compare` is pure (plan and observations in, results out); :func:`phase` runs the
commands.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import FabricopsError, ParseError
from fabricops.parsers import parse
from fabricops.verify.result import ERROR, FAIL, PASS, CheckResult

CATEGORY = "cabling"
CHECK = "cabling"
IB_COMMANDS = ("ibnetdiscover", "iblinkinfo")
LLDP_COMMAND = "lldpctl -f keyvalue"

RunFn = Callable[[str, str, float], Mapping[str, Any]]
#: (switch, ports) -> {port: Peer or None (no neighbour)}; raises when the switch cannot be read
SwitchLldpFn = Callable[[str, Sequence[str]], Mapping[str, "Peer | None"]]

_MANAGED_DESC = re.compile(r"^MF\d+;([^:]+):")


@dataclass(frozen=True)
class End:
    """One end of a cable: a switch port (``leaf2``, ``swp9``) or a host port (``gpu07``,
    ``mlx5_3``, port 1)."""

    node: str
    port: str
    host_port: int | None = None  #: set for a host end: the HCA port number

    @property
    def is_host(self) -> bool:
        return self.host_port is not None

    def __str__(self) -> str:
        if self.is_host:
            return f"{self.node} {self.port}" + (f"/{self.host_port}" if self.host_port != 1 else "")
        return f"{self.node} {self.port}"


@dataclass(frozen=True)
class Peer:
    """What a source saw at the other end: an End when it names a planned node, else the raw name."""

    end: End | None
    raw: str = ""  #: the neighbour as reported ("foo HCA-1 port 1"), for unknown devices

    def __str__(self) -> str:
        return str(self.end) if self.end is not None else f"an unknown device ({self.raw})"


@dataclass
class Cable:
    a: End  #: the host end of a host cable, switch_a of an ISL
    b: End
    kind: str  #: host | isl
    layer: str  #: InfiniBand | Ethernet
    netdev: str | None = None


@dataclass
class Observed:
    """What one source reported: neighbours by local end (None: the port has no neighbour)."""

    source: str  #: "ibnetdiscover on gpu01", "lldpctl on gpu03", "leaf2 LLDP"
    peers: dict[End, Peer | None] = field(default_factory=dict)
    covers: set[End] = field(default_factory=set)  #: ends this source would have seen if cabled


# --- the plan ---------------------------------------------------------------------------------


def _layer(switch: str, port: str, layers: Mapping[str, str]) -> str:
    if switch in layers:
        return layers[switch]
    return "Ethernet" if re.match(r"(?i)^(swp|eth)", port) else "InfiniBand"


def plan(
    cabling: Sequence[Mapping[str, Any]],
    switch_links: Sequence[Mapping[str, Any]],
    layers: Mapping[str, str],
    hosts: Sequence[str] | None = None,
) -> list[Cable]:
    """The planned cables of the verified hosts (all hosts when None) and every ISL."""
    out: list[Cable] = []
    for c in cabling or []:
        if hosts is not None and c.get("host") not in hosts:
            continue
        hca = str(c.get("hca") or c.get("netdev"))
        a = End(str(c["host"]), hca, int(c.get("port") or 1))
        b = End(str(c["switch"]), str(c["switch_port"]))
        out.append(Cable(a, b, "host", _layer(b.node, b.port, layers), c.get("netdev")))
    for ln in switch_links or []:
        a = End(str(ln["switch_a"]), str(ln["port_a"]))
        b = End(str(ln["switch_b"]), str(ln["port_b"]))
        out.append(Cable(a, b, "isl", _layer(a.node, a.port, layers)))
    return out


# --- naming what the tools report -------------------------------------------------------------


class Names:
    """Maps the names the fabric reports to the plan's hosts, HCAs and switches."""

    def __init__(self, cables: Sequence[Cable]):
        self.switches = {e.node for c in cables for e in (c.a, c.b) if not e.is_host}
        self.hosts = {c.a.node for c in cables if c.a.is_host}
        self.netdevs = {(c.a.node, c.netdev): c.a for c in cables if c.a.is_host and c.netdev}

    def switch(self, name: str) -> str | None:
        if name in self.switches:
            return name
        short = name.split(".", 1)[0]  # an LLDP system name may be the FQDN
        return short if short in self.switches else None

    def ib_node(self, desc: str, port: int, kind: str | None = None) -> Peer:
        """A NodeDescription and port -> the End it names (``gpu07 mlx5_0`` port 1, ``MF0;leaf1:...``)."""
        m = _MANAGED_DESC.match(desc)
        sw = self.switch(m.group(1) if m else desc.strip())
        if sw is not None and kind != "Ca":
            return Peer(End(sw, str(port)))
        words = desc.split()
        if len(words) == 2 and words[0] in self.hosts and kind != "Switch":
            return Peer(End(words[0], words[1], port))
        return Peer(None, f'"{desc}" port {port}')

    def lldp_peer(self, system: str | None, port: str | None) -> Peer:
        """An LLDP neighbour (system name, port name) -> a switch port or a host netdev."""
        sysname = (system or "").strip()
        sw = self.switch(sysname)
        if sw is not None and port:
            return Peer(End(sw, port))
        host = sysname if sysname in self.hosts else sysname.split(".", 1)[0]
        if host in self.hosts and port and (host, port) in self.netdevs:
            return Peer(self.netdevs[(host, port)])
        return Peer(None, f"{sysname or 'no system name'} port {port or '?'}")


# --- reading the tools ------------------------------------------------------------------------


def observe_ib(text: str, tool: str, names: Names, source: str) -> Observed:
    """Parse ibnetdiscover or iblinkinfo output into neighbours by local end. Raises ParseError."""
    obs = Observed(source)
    if tool == "ibnetdiscover":
        topo = parse("ibnetdiscover", text)
        for node in topo.nodes:
            for c in node.cables:
                local = names.ib_node(node.desc, c.port, node.kind)
                if local.end is None:
                    continue
                obs.peers[local.end] = names.ib_node(c.peer_desc or "", c.peer_port, c.peer_kind)
    else:
        info = parse("iblinkinfo", text)
        for node in info.nodes:
            kind = {"CA": "Ca", "Switch": "Switch"}.get(node.kind)
            for p in node.ports:
                local = names.ib_node(node.desc, p.port, kind)
                if local.end is None:
                    continue
                if p.peer_desc is None:
                    obs.peers.setdefault(local.end, None)
                    continue
                obs.peers[local.end] = names.ib_node(p.peer_desc, p.peer_port or 0)
    # a cable line names both ends: the far end sees this one (a CA block missing, a port not listed)
    for local, peer in list(obs.peers.items()):
        if peer is not None and peer.end is not None:
            obs.peers.setdefault(peer.end, Peer(local))
    return obs


def observe_lldpctl(host: str, text: str, names: Names, netdevs: Mapping[str, End]) -> Observed:
    """``lldpctl -f keyvalue`` of ``host``: the neighbour of each planned netdev (empty output: none)."""
    obs = Observed(f"lldpctl on {host}")
    heard = {}
    if text.strip():
        for n in parse("lldpctl", text).neighbors:
            heard[n.interface] = names.lldp_peer(n.system_name, n.port_name)
    for netdev, end in netdevs.items():
        obs.covers.add(end)
        obs.peers[end] = heard.get(netdev)
    return obs


# --- comparing --------------------------------------------------------------------------------


def _peer_of(cable_end: End, observations: Sequence[Observed]) -> list[tuple[str, Peer | None]]:
    out = []
    for obs in observations:
        if cable_end in obs.peers:
            out.append((obs.source, obs.peers[cable_end]))
        elif cable_end in obs.covers:
            out.append((obs.source, None))
    return out


def _result(cable: Cable, status: str, message: str, **details: Any) -> CheckResult:
    host = cable.a.node if cable.kind == "host" else f"{cable.a.node}<->{cable.b.node}"
    return CheckResult(
        CATEGORY,
        CHECK,
        host,
        f"{cable.a.port}" if cable.kind == "host" else cable.a.port,
        status,
        message,
        measured=details.pop("measured", None),
        threshold=f"{cable.b}",
        op="==",
        source="fabricops_cabling" if cable.kind == "host" else "fabricops_switch_links",
        details={
            "kind": cable.kind,
            "layer": cable.layer,
            "planned": [str(cable.a), str(cable.b)],
            **details,
        },
    )


def compare(
    cables: Sequence[Cable], observations: Sequence[Observed], planned: Sequence[Cable] | None = None
) -> list[CheckResult]:
    """One result per cable of ``cables`` some source could see, plus one per unplanned cable.

    A cable passes when every source that saw either end reports the planned peer; the first
    source that reports another peer (or none) makes it fail with that sentence. A cable no
    source could see gets no result (the source's own error says why). ``planned`` is the whole
    plan (default ``cables``): a reported cable with an end in it is not "unplanned" (a host that
    is not being verified, or a cable whose other end was already reported as wrong)."""
    results: list[CheckResult] = []
    planned_ends = {e for c in (planned if planned is not None else cables) for e in (c.a, c.b)}
    for cable in cables:
        seen_a = _peer_of(cable.a, observations)
        seen_b = _peer_of(cable.b, observations)
        if not seen_a and not seen_b:
            continue
        views = [f"{src}: {cable.a} -> {peer or 'no neighbour'}" for src, peer in seen_a]
        views += [f"{src}: {cable.b} -> {peer or 'no neighbour'}" for src, peer in seen_b]
        bad = None
        for src, peer in seen_a:
            if peer is None:
                bad = (
                    bad
                    or f"{cable.a} has no neighbour ({src}), planned {cable.b}: cable missing or link down"
                )
            elif peer.end != cable.b:
                bad = bad or f"{cable.a} is on {peer}, planned {cable.b}"
        for src, peer in seen_b:
            if peer is None:
                bad = (
                    bad
                    or f"{cable.b} has no neighbour ({src}), planned {cable.a}: cable missing or link down"
                )
            elif peer.end != cable.a:
                bad = bad or f"{cable.b} has {peer}, planned {cable.a}"
        seen = [p for _, p in seen_a + seen_b]
        measured = next((str(p) for p in seen if p is not None and p.end not in (cable.a, cable.b)), None)
        if bad is None:
            results.append(
                _result(
                    cable, PASS, f"{cable.a} <-> {cable.b} as planned", measured=str(cable.b), sources=views
                )
            )
        else:
            results.append(_result(cable, FAIL, bad, measured=measured, sources=views))
    # cables the fabric reports that the plan has not got (neither end planned)
    reported: set[frozenset[End]] = set()
    for obs in observations:
        for local, peer in obs.peers.items():
            if peer is None or local in planned_ends or (peer.end is not None and peer.end in planned_ends):
                continue
            pair = frozenset((local, peer.end)) if peer.end is not None else frozenset((local,))
            if pair in reported:
                continue
            reported.add(pair)
            kind = "host" if local.is_host or (peer.end is not None and peer.end.is_host) else "isl"
            results.append(
                CheckResult(
                    CATEGORY,
                    CHECK,
                    local.node,
                    local.port,
                    FAIL,
                    f"unplanned cable {local} <-> {peer} ({obs.source}; not in "
                    f"{'fabricops_cabling' if kind == 'host' else 'fabricops_switch_links'})",
                    details={"kind": kind, "source": obs.source},
                )
            )
    return results


def skipped(skip: Sequence[str], expects: Any) -> bool:
    """``--skip cabling``, or ``cabling`` in every verified host's ``fabricops_verify_skip``."""
    expects = list(expects)
    return CHECK in set(skip) or (bool(expects) and all(CHECK in e.skip for e in expects))


# --- running the commands ---------------------------------------------------------------------


def _error(host: str, device: str | None, message: str) -> CheckResult:
    return CheckResult(CATEGORY, CHECK, host, device, ERROR, message)


def _detail(res: Mapping[str, Any]) -> str:
    lines = ((res.get("stderr") or "") + "\n" + (res.get("stdout") or "")).strip().splitlines()
    return lines[-1].strip() if lines else f"exit {res.get('rc')}"


def ib_fabrics(cables: Sequence[Cable]) -> list[list[Cable]]:
    """InfiniBand cables grouped by fabric: switches an ISL joins are one subnet."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    ib = [c for c in cables if c.layer == "InfiniBand"]
    for c in ib:
        if c.kind == "isl":
            parent[find(c.a.node)] = find(c.b.node)
        else:
            find(c.b.node)
    groups: dict[str, list[Cable]] = {}
    for c in ib:
        groups.setdefault(find(c.b.node if c.kind == "host" else c.a.node), []).append(c)
    return list(groups.values())


def _read_ib(
    run: RunFn,
    fabric: list[Cable],
    names: Names,
    hosts: Sequence[str],
    timeout: float,
    out: list[CheckResult],
) -> Observed | None:
    switches = sorted({e.node for c in fabric for e in (c.a, c.b) if not e.is_host})
    candidates = [h for h in hosts if any(c.kind == "host" and c.a.node == h for c in fabric)]
    if not candidates:
        out.append(
            _error(
                ",".join(switches),
                None,
                f"InfiniBand fabric {', '.join(switches)}: no verified host "
                "is cabled to it, nothing can read it (failing closed)",
            )
        )
        return None
    problems = []
    for host in candidates[:2]:  # a second host when the first cannot read the subnet
        for tool in IB_COMMANDS:
            res = run(host, tool, timeout)
            if res.get("rc") == 127 or "command not found" in (res.get("stderr") or ""):
                problems.append(f"{host}: {tool} is not installed")
                continue
            if res.get("rc") not in (0, None):
                problems.append(f"{host}: `{tool}` failed: {_detail(res)}")
                break
            try:
                obs = observe_ib(res.get("stdout") or "", tool, names, f"{tool} on {host}")
            except ParseError as exc:
                problems.append(f"{host}: {exc}")
                break
            obs.covers = {e for c in fabric for e in (c.a, c.b)}
            return obs
    out.append(
        _error(
            candidates[0],
            None,
            f"InfiniBand fabric {', '.join(switches)}: cabling not read: "
            + "; ".join(problems)
            + " (failing closed)",
        )
    )
    return None


def _read_lldpctl(
    run: RunFn, host: str, cables: Sequence[Cable], names: Names, timeout: float, out: list[CheckResult]
) -> Observed | None:
    netdevs = {
        c.netdev: c.a
        for c in cables
        if c.kind == "host" and c.layer == "Ethernet" and c.a.node == host and c.netdev
    }
    res = run(host, LLDP_COMMAND, timeout)
    if res.get("rc") == 127 or "command not found" in (res.get("stderr") or ""):
        out.append(
            _error(
                host,
                None,
                f"{host}: lldpctl is not installed: install lldpd to check its Ethernet "
                "cabling (failing closed)",
            )
        )
        return None
    if res.get("rc") not in (0, None):
        out.append(_error(host, None, f"{host}: `{LLDP_COMMAND}` failed: {_detail(res)} (is lldpd running?)"))
        return None
    try:
        return observe_lldpctl(host, res.get("stdout") or "", names, netdevs)
    except ParseError as exc:
        out.append(_error(host, None, f"{host}: {exc}"))
        return None


def _read_switch(
    reader: SwitchLldpFn, switch: str, cables: Sequence[Cable], names: Names, out: list[CheckResult]
) -> Observed | None:
    ends = sorted(
        {e for c in cables for e in (c.a, c.b) if e.node == switch and not e.is_host}, key=lambda e: e.port
    )
    try:
        seen = reader(switch, [e.port for e in ends])
    except (FabricopsError, ParseError, OSError) as exc:
        out.append(
            _error(
                switch,
                None,
                f"{switch}: LLDP not read ({' '.join(str(exc).split())[:160]}); its "
                "ports are checked from the hosts' side only",
            )
        )
        return None
    obs = Observed(f"{switch} LLDP")
    for e in ends:
        obs.covers.add(e)
        peer = seen.get(e.port)
        obs.peers[e] = peer
    return obs


def switch_lldp_reader(
    switch_reader: Any, names_for: Callable[[], Names] | None = None
) -> SwitchLldpFn | None:
    """A reader of switches' LLDP tables through the same access as ``switch_reader`` (a
    :class:`fabricops.verify.switchstate.SwitchReader`); None when switches are not reachable."""
    hostvars = getattr(switch_reader, "hostvars", None)
    if hostvars is None:
        return None
    kept = getattr(switch_reader, "lldp", None)
    if callable(kept):  # a SwitchReader: through its sessions (one per switch for a verify run)
        return kept
    connector = getattr(switch_reader, "connector", None)

    def read(switch: str, ports: Sequence[str]) -> dict[str, Any]:
        from fabricops.roce import platforms
        from fabricops.roce.switchspec import normalize_os, normalize_ports
        from fabricops.switch.access import switch_os
        from fabricops.verify.switchstate import inventory_access

        hv = dict(hostvars(switch) or {})
        if not hv:
            raise FabricopsError(f"{switch} is not in the inventory")
        if hv.get("fabricops_switch_reachable") is False:
            raise FabricopsError(f"{switch} is marked unreachable (fabricops_switch_reachable: false)")
        os_name = switch_os(hv) or normalize_os(hv.get("fabricops_switch_os") or hv.get("ansible_network_os"))
        conn = (
            connector(switch, os_name, hv)
            if connector
            else platforms.connect(inventory_access(hv, switch, os_name))
        )
        try:
            return read_lldp(conn, os_name, ports, normalize_ports)
        finally:
            with contextlib.suppress(Exception):
                conn.disconnect()

    return read


def _onyx_lldp(
    conn: Any, ports: Sequence[str], normalize: Callable[[Sequence[str]], list[str]]
) -> dict[str, Any]:
    """Onyx: one ``show lldp interfaces ethernet remote`` for the whole switch."""
    from fabricops.parsers.lldp import parse_onyx_remote

    # Onyx's standard (user) mode shows only "a restricted set of state information" (User Manual,
    # CLI modes); the LLDP tables need enable mode, as `show running-config` does.
    enable = getattr(conn, "enable", None)
    if callable(enable):
        enable()
    text = conn.send_command("show lldp interfaces ethernet remote")
    by_port = {n.interface: n for n in parse_onyx_remote(text).neighbors} if text.strip() else {}
    return {p: by_port.get(normalize([p])[0]) for p in ports}


def _nvue_lldp(
    conn: Any, ports: Sequence[str], normalize: Callable[[Sequence[str]], list[str]]
) -> dict[str, Any]:
    """Cumulus NVUE: ``nv show interface <port> lldp neighbor`` per port (nothing: no neighbour)."""
    from fabricops.parsers.lldp import parse_nvue_neighbor

    out: dict[str, Any] = {}
    for p in ports:
        text = conn.send_command(f"nv show interface {p} lldp neighbor")
        rows = parse_nvue_neighbor(text, p).neighbors if text.strip() else []
        out[p] = rows[0] if rows else None
    return out


#: switch OS -> its LLDP neighbour reader (show commands only). A candidate for the platform
#: classes (fabricops.roce.platforms) once they grow an LLDP read.
LLDP_READERS = {"onyx": _onyx_lldp, "cumulus": _nvue_lldp}


def read_lldp(
    conn: Any, os_name: str, ports: Sequence[str], normalize: Callable[..., list[str]]
) -> dict[str, Any]:
    """{port: LldpNeighbor or None} read with show commands only (``conn.send_command``)."""
    reader = LLDP_READERS.get(os_name)
    if reader is None:
        raise FabricopsError(f"no LLDP reader for switch OS {os_name!r} (one of {', '.join(LLDP_READERS)})")
    return reader(conn, ports, lambda names: normalize(os_name, list(names)))


def phase(
    run: RunFn,
    hosts: Sequence[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    layers: Mapping[str, str] | None = None,
    switch_reader: Any = None,
    timeout: float = 60,
    switch_lldp: SwitchLldpFn | None = None,
) -> list[CheckResult]:
    """Read the as-built cabling and compare it with the inventory's plan (the ``cabling`` phase)."""
    out: list[CheckResult] = []
    hv0 = next((hostvars.get(h) or {} for h in hosts if hostvars.get(h)), {})
    everything = plan(
        hv0.get("fabricops_cabling") or [], hv0.get("fabricops_switch_links") or [], layers or {}
    )
    cables = [c for c in everything if c.kind == "isl" or c.a.node in hosts]
    if not any(c.kind == "host" for c in cables):
        return [
            _error(
                ",".join(hosts) or "-",
                None,
                "no cable to check: fabricops_cabling lists none of the verified hosts (failing closed)",
            )
        ]
    names = Names(everything)
    # every source at once (each waits on its own host or switch session); results in plan order
    jobs: list[Callable[[list[CheckResult]], Observed | None]] = []
    for fabric in ib_fabrics(cables):
        jobs.append(lambda o, f=fabric: _read_ib(run, f, names, hosts, timeout, o))
    eth_hosts = sorted({c.a.node for c in cables if c.kind == "host" and c.layer == "Ethernet"})
    for host in eth_hosts:
        jobs.append(lambda o, h=host: _read_lldpctl(run, h, cables, names, timeout, o))
    reader = switch_lldp or switch_lldp_reader(switch_reader)
    if reader is not None:
        eth = [c for c in cables if c.layer == "Ethernet"]
        named = _named(reader, names)
        for switch in sorted({e.node for c in eth for e in (c.a, c.b) if not e.is_host}):
            jobs.append(lambda o, sw=switch: _read_switch(named, sw, eth, names, o))
    observations = _gather(jobs, out)
    results = compare(cables, observations, everything)
    checked = [r for r in results if r.details.get("planned")]
    if not checked:
        out.append(
            _error(
                ",".join(hosts) or "-",
                None,
                f"no cable checked ({len(cables)} planned): no source "
                "could read the cabling (failing closed)",
            )
        )
    return out + results


def _gather(jobs: Sequence[Callable[[list[CheckResult]], Observed | None]], out: list[CheckResult],
            workers: int = 16) -> list[Observed]:
    """Run the readers side by side; their errors into ``out`` and their observations back, both in
    the order of ``jobs`` (a report does not depend on which session answered first)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(job: Callable[[list[CheckResult]], Observed | None]) -> tuple[list[CheckResult], Observed | None]:
        mine: list[CheckResult] = []
        return mine, job(mine)

    observations: list[Observed] = []
    if not jobs:
        return observations
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs)))) as pool:
        for errors, obs in pool.map(one, jobs):
            out.extend(errors)
            if obs is not None:
                observations.append(obs)
    return observations


def _named(reader: SwitchLldpFn, names: Names) -> SwitchLldpFn:
    """Wrap a reader returning LldpNeighbor rows into one returning Peers."""

    def read(switch: str, ports: Sequence[str]) -> dict[str, Peer | None]:
        got = reader(switch, ports)
        out: dict[str, Peer | None] = {}
        for p in ports:
            n = got.get(p)
            if n is None or isinstance(n, Peer):
                out[p] = n
            else:
                out[p] = names.lldp_peer(n.system_name, n.port_name)
        return out

    return read
