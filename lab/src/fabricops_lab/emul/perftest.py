"""Emulated perftest: ib_{write,read,send}_{bw,lat} with the lab's fabric "physics".

Stdlib only. Without a server address the tool is the server: it listens on TCP (default port
18515), waits for one client, and both sides print perftest's own output format and exit. The two
sides exchange their facts over that real TCP connection (host, device, port state, rate, link
layer, RoCE QoS); the client computes the result from both sides' facts plus the cabling and the
switch port state in the shared fabric directory, sends it to the server, and each side bumps its
own port counters. See docs/parsers.md ("Emulated perftest physics").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import re
import socket
import sys
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from . import devstate, pci

DEFAULT_TCP_PORT = 18515
RESULT_LINE = "-" * 87
TEST_NAMES = {"write": "RDMA_Write", "read": "RDMA_Read", "send": "Send"}
PORT_STATES = {"DOWN": "Down", "INIT": "Init", "ARMED": "Armed", "ACTIVE": "Active", "NOP": "Nop"}
IB_EFFICIENCY = 0.982
IB_JITTER = 0.0015
ROCE_EFFICIENCY = 0.96
PER_QP_MPPS = 2.6

# long option -> (short key, takes value)
_LONG = {
    "ib-dev": ("d", True), "ib-port": ("i", True), "gid-index": ("x", True), "port": ("p", True),
    "size": ("s", True), "all": ("a", False), "iters": ("n", True), "duration": ("D", True),
    "qp": ("q", True), "bidirectional": ("b", False), "CPU-freq": ("F", False),
    "report_gbits": ("report_gbits", False), "rdma_cm": ("R", False), "output": ("output", True),
    "mtu": ("m", True), "tos": ("T", True), "tclass": ("tclass", True), "connection": ("c", True),
    "tx-depth": ("t", True), "noPeak": ("N", False), "inline_size": ("I", True),
    "cq-mod": ("Q", True), "sl": ("S", True), "rx-depth": ("r", True), "outs": ("o", True),
    "perform_warm_up": ("perform_warm_up", False), "force-link": ("force-link", True),
    "report-both": ("report-both", False), "out_json": ("out_json", False),
    "out_json_file": ("out_json_file", True), "use_cuda": ("use_cuda", True),
}
_SHORT_WITH_VALUE = set("dixpsnDqmTctIQSro")
_SHORT_FLAGS = set("abFRNeClHUVz")


class UsageError(Exception):
    pass


@dataclass
class Options:
    verb: str
    kind: str  # "bw" or "lat"
    device: str | None = None
    ib_port: int = 1
    gid_index: int | None = None
    tcp_port: int = DEFAULT_TCP_PORT
    size: int | None = None
    all_sizes: bool = False
    iters: int | None = None
    duration: float | None = None
    qps: int = 1
    bidirectional: bool = False
    report_gbits: bool = False
    rdma_cm: bool = False
    output: str | None = None
    tos: int | None = None
    no_peak: bool = False
    server: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


def parse_args(verb: str, kind: str, argv: list[str]) -> Options:
    opts = Options(verb=verb, kind=kind)
    values: dict[str, str | bool] = {}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name, eq, val = arg[2:].partition("=")
            matches = [k for k in _LONG if k == name] or [k for k in _LONG if k.startswith(name)]
            if len(matches) != 1:
                raise UsageError(f"unrecognized option '{arg}'")
            key, takes = _LONG[matches[0]]
            if takes:
                if not eq:
                    i += 1
                    if i >= len(argv):
                        raise UsageError(f"option '{arg}' requires an argument")
                    val = argv[i]
                values[key] = val
            else:
                values[key] = True
        elif arg.startswith("-") and len(arg) > 1:
            j = 1
            while j < len(arg):
                ch = arg[j]
                if ch in _SHORT_WITH_VALUE:
                    val = arg[j + 1:]
                    if not val:
                        i += 1
                        if i >= len(argv):
                            raise UsageError(f"option requires an argument -- '{ch}'")
                        val = argv[i]
                    values[ch] = val
                    break
                if ch in _SHORT_FLAGS:
                    values[ch] = True
                    j += 1
                    continue
                raise UsageError(f"invalid option -- '{ch}'")
        else:
            positional.append(arg)
        i += 1
    if len(positional) > 1:
        raise UsageError("too many arguments")
    try:
        opts.device = values.get("d") or None  # type: ignore[assignment]
        opts.ib_port = int(values.get("i", 1))
        opts.gid_index = int(values["x"]) if "x" in values else None
        opts.tcp_port = int(values.get("p", DEFAULT_TCP_PORT))
        opts.size = _size(str(values["s"])) if "s" in values else None
        opts.all_sizes = bool(values.get("a"))
        opts.iters = int(values["n"]) if "n" in values else None
        opts.duration = float(values["D"]) if "D" in values else None
        opts.qps = int(values.get("q", 1))
        opts.bidirectional = bool(values.get("b"))
        opts.report_gbits = bool(values.get("report_gbits"))
        opts.rdma_cm = bool(values.get("R"))
        opts.output = values.get("output") or None  # type: ignore[assignment]
        opts.tos = int(values["T"]) if "T" in values else None
        opts.no_peak = bool(values.get("N"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if opts.output not in (None, "bandwidth", "latency", "message_rate"):
        raise UsageError(" Invalid verbosity level output flag. Please use bandwidth, latency, message_rate")
    if kind == "lat" and (opts.qps != 1 or opts.bidirectional):
        raise UsageError(" Bidirectional is only available in BW test" if opts.bidirectional
                         else " Multiple QPs only available on bw tests")
    if opts.all_sizes and opts.duration is not None:
        raise UsageError("Duration mode currently doesn't support running on all sizes.")
    opts.server = positional[0] if positional else None
    return opts


def _size(text: str) -> int:
    text = text.strip()
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:].upper(), 1)
    return int(text[:-1] if mult > 1 else text) * mult


# --- local facts --------------------------------------------------------------------------

def _port_state(dev: str, port: int, hw_port: dict[str, Any]) -> str:
    raw = devstate.read_sysfs(f"{devstate.port_dir(dev, port)}/state")
    if raw:
        return raw.split(":")[-1].strip().upper()
    return str(hw_port.get("state", "DOWN")).upper()


def _port_rate(dev: str, port: int, hw_port: dict[str, Any]) -> float:
    raw = devstate.read_sysfs(f"{devstate.port_dir(dev, port)}/rate")
    if raw:
        try:
            return float(raw.split()[0])
        except (ValueError, IndexError):
            pass
    return float(hw_port.get("rate_gbps", 0))


def pcie_capped_rate(hw: dict[str, Any], dev: str, port_gbps: float) -> float:
    """The HCA port's rate, capped by what its PCIe link carries now (SPEC-19 C: a ConnectX-7
    trained at x8 16 GT/s moves at most 16 x 8 x 128/130 = 126 Gb/s, below its 400 Gb/s port)."""
    limit = pci.hca_pcie_limit_gbps(hw, dev)
    return port_gbps if limit is None else min(port_gbps, limit)


def _gid_bytes(dev: str, port: int, index: int) -> list[int] | None:
    raw = devstate.read_sysfs(f"{devstate.port_dir(dev, port)}/gids/{index}")
    if not raw:
        return None
    hexstr = raw.replace(":", "")
    if len(hexstr) != 32:
        return None
    return [int(hexstr[k:k + 2], 16) for k in range(0, 32, 2)]


def _qos_facts(dev: str, port: int, netdev: str | None) -> dict[str, Any]:
    if not netdev:
        return {}
    qos = devstate.qos_state(netdev)
    return {
        "trust": qos.get("trust"),
        "pfc": list(qos.get("pfc", [0] * 8)),
        "dscp2prio": {str(k): int(v) for k, v in qos.get("dscp2prio", {}).items()},
        "ecn_np": [devstate.ecn_enabled(netdev, "roce_np", p) for p in range(8)],
        "ecn_rp": [devstate.ecn_enabled(netdev, "roce_rp", p) for p in range(8)],
        "traffic_class": devstate.traffic_class(dev),
        "roce_tos": devstate.roce_tos(dev, port),
        "roce_mode": devstate.roce_mode(dev, port),
    }


def local_facts(opts: Options) -> tuple[dict[str, Any] | None, str | None]:
    """Return (facts, None) or (None, error text as the real tool prints it)."""
    try:
        hw = devstate.load_hardware()
    except (OSError, ValueError):
        return None, " Did not detect devices \n If device exists, check if driver is up\n" \
            " Unable to find the Infiniband/RoCE device\n"
    hcas = hw.get("hcas", [])
    if not hcas:
        return None, "No IB devices found\n Unable to find the Infiniband/RoCE device\n"
    name = opts.device or hcas[0]["name"]
    # lab fault wrong-device (docs/lab-faults.md): a test of DEV runs on OTHER and still prints DEV,
    # as a per-device test did that silently used the default device (awslabs/awsome-distributed-ai#1221)
    shown = name
    with contextlib.suppress(OSError, ValueError, AttributeError):
        name = json.loads(devstate.path("var/lib/emulated-hw/wrong-device.json").read_text()).get(name, name)
    hca = next((h for h in hcas if h["name"] == name), None)
    if hca is None:
        return None, f"IB device {name} not found\n Unable to find the Infiniband/RoCE device\n"
    hw_port = next((p for p in hca.get("ports", []) if int(p.get("port", 1)) == opts.ib_port), None)
    if hw_port is None:
        return None, (f" Unable to query port {opts.ib_port} attributes\n"
                      " Couldn't get context for the device\n")
    state = _port_state(name, opts.ib_port, hw_port)
    if state != "ACTIVE":
        pretty = PORT_STATES.get(state, state.title())
        return None, f" Port number {opts.ib_port} state is {pretty}\n Couldn't get context for the device\n"
    link = hw_port.get("link_layer", "InfiniBand")
    ethernet = link == "Ethernet"
    gid_index = opts.gid_index
    if gid_index is None and ethernet:
        gid_index = 3 if _gid_bytes(name, opts.ib_port, 3) else 0
    gid = _gid_bytes(name, opts.ib_port, gid_index) if gid_index is not None else None
    if gid_index is not None and gid is None and (ethernet or opts.gid_index is not None):
        gid = [0] * 16
    netdev = hw_port.get("netdev")
    facts = {
        "host": hw.get("host", socket.gethostname()),
        "device": name,
        "shown_device": shown,
        "port": opts.ib_port,
        "link_layer": "Ethernet" if ethernet else "InfiniBand",
        "state": state,
        "rate_gbps": pcie_capped_rate(hw, name, _port_rate(name, opts.ib_port, hw_port)),
        "netdev": netdev,
        "lid": 0 if ethernet else int(hw_port.get("lid", 0) or 0),
        "mtu": int(hw_port.get("active_mtu", 4096) or 4096),
        "gid_index": gid_index,
        "gid": gid,
        "qos": _qos_facts(name, opts.ib_port, netdev) if ethernet else {},
    }
    return facts, None


# --- the wire (TCP control channel) ---------------------------------------------------------

def _send(sock: socket.socket, obj: dict[str, Any]) -> None:
    sock.sendall((json.dumps(obj) + "\n").encode())


def _recv(fh) -> dict[str, Any] | None:
    line = fh.readline()
    if not line:
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


# --- physics ------------------------------------------------------------------------------

def _dscp(qos: dict[str, Any], tos_override: int | None) -> int:
    if tos_override is not None:
        return tos_override >> 2
    tc = qos.get("traffic_class")
    if tc:
        return int(tc) >> 2
    tos = qos.get("roce_tos")
    return int(tos) >> 2 if tos else 0


def _switch_ok_for_roce(sw: dict[str, Any], prio: int) -> list[str]:
    problems = []
    if str(sw.get("trust", "")).lower() != "l3":
        problems.append("switch_trust")
    pfc = sw.get("pfc") or [0] * 8
    if not (0 <= prio < len(pfc) and pfc[prio]):
        problems.append("switch_pfc")
    ecn = (sw.get("ecn") or {}).get(str(prio)) or {}
    if not ecn.get("enabled"):
        problems.append("switch_ecn")
    return problems


def degraded_ratio(problems: list[str], rng: random.Random) -> float:
    """Fraction of line rate a RoCE path achieves with these problems (matched: ~0.96)."""
    if not problems:
        return ROCE_EFFICIENCY * (1 + rng.uniform(-0.002, 0.002))
    lossy = any(p.endswith(("_pfc", "_trust")) or p == "dscp2prio_mismatch" for p in problems)
    no_ecn = any("ecn" in p for p in problems)
    if lossy and no_ecn:
        base = 0.32
    elif lossy:
        base = 0.42
    else:
        base = 0.58
    return base * (1 + rng.uniform(-0.04, 0.04))


def _msg_bound_gbps(size: int, qps: int) -> float:
    mpps = PER_QP_MPPS * min(qps, 8)
    return mpps * 1e6 * size * 8 / 1e9


def bw_at(size: int, line_gbps: float, qps: int) -> float:
    bound = _msg_bound_gbps(size, qps)
    k = 6.0
    return (line_gbps ** -k + bound ** -k) ** (-1.0 / k)


def _seed(a: dict[str, Any], b: dict[str, Any], counter: int) -> int:
    key = "|".join(sorted([f"{a['host']}:{a['device']}", f"{b['host']}:{b['device']}"]))
    key += f"|{os.environ.get('EMUL_SEED', '')}|{counter}"
    return int(hashlib.sha256(key.encode()).hexdigest()[:16], 16)


def _run_counter() -> int:
    path = devstate.path(f"{devstate.RUN_DIR}/perftest-runs")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        n = int(path.read_text().strip() or 0) + 1 if path.exists() else 1
        path.write_text(str(n))
        return n
    except (OSError, ValueError):
        return 1


def sizes_for(opts: Options) -> list[int]:
    if opts.all_sizes:
        return [1 << i for i in range(1, 24)]
    if opts.size is not None:
        return [opts.size]
    return [65536 if opts.kind == "bw" else 2]


def _host_problems(sender: dict[str, Any], receiver: dict[str, Any]) -> tuple[int, list[str]]:
    """(priority, problems) of one direction of a RoCE path, as the two hosts are configured."""
    sq, rq = sender["qos"], receiver["qos"]
    dscp = _dscp(sq, sender.get("tos_override"))
    problems: list[str] = []
    for host_q, tag in ((sq, "sender"), (rq, "receiver")):
        if host_q.get("trust") != "dscp":
            problems.append(f"{tag}_trust")
    prio = int(sq.get("dscp2prio", {}).get(str(dscp), dscp >> 3))
    if int(rq.get("dscp2prio", {}).get(str(dscp), dscp >> 3)) != prio:
        problems.append("dscp2prio_mismatch")
    for host_q, tag in ((sq, "sender"), (rq, "receiver")):
        if not (host_q.get("pfc") or [0] * 8)[prio]:
            problems.append(f"{tag}_pfc")
    if not (sq.get("ecn_rp") or [False] * 8)[prio]:
        problems.append("sender_ecn_rp")
    if not (rq.get("ecn_np") or [False] * 8)[prio]:
        problems.append("receiver_ecn_np")
    return prio, problems


# --- the fabric: routing, per-hop health, capacity (docs/lab-fidelity.md "Fabric physics") ------
#
# cabling.json = {"links": [host cables], "isls": [{switch_a, port_a, switch_b, port_b, gbps, ...}],
# "switches": {NAME: {"os", "tier"}}}. A path is a list of hops, each one directed cable
# (NODE, PORT_OUT, NODE_NEXT, PORT_IN); the host side port is "mlx5_1/1".
#
# InfiniBand: OpenSM's fat-tree routing (ftree, doc/opensm_release_notes / osm_ucast_ftree.c)
# spreads destinations over a leaf's uplinks by the destination's position on its own leaf: uplink
# pos % n_up, then at the spine the parallel link of the same rank down (see Fabric.route).
# RoCE: the leaf and spine hash each flow (ECMP) on its addresses and its RoCEv2 UDP source port,
# which the kernel derives from the QP numbers (include/rdma/ib_verbs.h rdma_calc_flow_label and
# rdma_flow_label_to_udp_sport), so each QP of a run is a flow that may take another uplink.

Hop = tuple[str, str, str, str]

#: per-lane Gb/s of the InfiniBand generations and lanes of each width: the same table as hwctl
#: (tests/unit/lab/test_emul_rates_agree.py holds both to fabricops.model.rates)
IB_LANE_GBPS = {"SDR": 2.5, "DDR": 5, "QDR": 10, "FDR10": 10, "FDR": 14, "EDR": 25, "HDR": 50,
                "NDR": 100, "XDR": 200}
IB_VARIANTS = {"HDR100": ("HDR", "2X"), "NDR200": ("NDR", "2X")}
LANES = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}
#: a flapping link retrains on each flap; RC QPs lose what was in flight and retransmit after the
#: local ACK timeout: each flap costs FLAP_COST of the rate, at most FLAP_FLOOR left
FLAP_COST = 0.05
FLAP_FLOOR = 0.3


def _natural(port: str) -> tuple:
    """Natural order of port names: swp2 < swp10, Eth1/2 < Eth1/10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", port))


def speed_rate(speed: str, width: str | None = None) -> float | None:
    """Gb/s of a port at SPEED ("HDR", "HDR100", "200GbE") and WIDTH ("2X"); None if unknown."""
    key = str(speed).strip().upper()
    if key in IB_VARIANTS:
        key, width = IB_VARIANTS[key][0], width or IB_VARIANTS[key][1]
    if key in IB_LANE_GBPS:
        return IB_LANE_GBPS[key] * LANES.get(str(width or "4X").upper(), 4)
    m = re.fullmatch(r"(\d+)G(?:BE)?", key)
    return float(m.group(1)) if m else None


def port_capacity(entry: dict[str, Any] | None, nominal: float) -> float:
    """What a switch port carries given its fabric-file entry: a degraded speed or width (set by a
    fault) lowers it the way the lab's host-port faults do (lab/faults.py plan_port_speed /
    plan_port_width: a speed is a table rate; a width alone scales the nominal rate by lanes/4)."""
    if not entry:
        return nominal
    speed, width = entry.get("speed"), entry.get("width")
    if speed:
        rate = speed_rate(str(speed), str(width) if width else None)
        if rate is not None:
            return min(nominal, rate)
    if width and str(width).upper() in LANES:
        return min(nominal, nominal * LANES[str(width).upper()] / 4)
    return nominal


def roce_udp_sport(lqpn: int, rqpn: int) -> int:
    """The RoCEv2 UDP source port of an RC QP pair without a GRH flow label (Linux
    rdma_calc_flow_label + rdma_flow_label_to_udp_sport)."""
    v = lqpn * rqpn
    v ^= v >> 20
    v ^= v >> 40
    fl = v & 0xFFFFF
    low = (fl & 0x03FFF) ^ ((fl & 0xFC000) >> 14)
    return low | 0xC000


def ecmp_hash(src_ip: str, dst_ip: str, sport: int) -> int:
    return zlib.crc32(f"{src_ip}|{dst_ip}|{sport}".encode())


class Fabric:
    """The cabling as the lab wrote it: host cables, ISLs, switch tiers."""

    def __init__(self, cabling: dict[str, Any]):
        self.links = cabling.get("links", [])
        self.switches = dict(cabling.get("switches") or {})
        for ln in self.links:
            self.switches.setdefault(ln["switch"], {})
        self.up: dict[str, list[tuple[str, str, str]]] = {}  # leaf -> [(leaf port, spine, spine port)]
        self.down: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (spine, leaf) -> [(spine p, leaf p)]
        self.nominal: dict[tuple[str, str], float] = {}  # (switch, port) -> ISL Gb/s
        for isl in cabling.get("isls", []) or []:
            a, pa, b, pb = isl["switch_a"], isl["port_a"], isl["switch_b"], isl["port_b"]
            for sw in (a, b):
                self.switches.setdefault(sw, {})
            if self.tier(a) == "spine" and self.tier(b) != "spine":
                a, pa, b, pb = b, pb, a, pa
            if self.tier(b) != "spine":
                continue  # only leaf-spine links route in a two-tier fabric
            self.up.setdefault(a, []).append((pa, b, pb))
            self.down.setdefault((b, a), []).append((pb, pa))
            if isl.get("gbps"):
                self.nominal[(a, pa)] = self.nominal[(b, pb)] = float(isl["gbps"])
        for ups in self.up.values():
            ups.sort(key=lambda u: (_natural(u[1]), _natural(u[0])))
        for downs in self.down.values():
            downs.sort(key=lambda d: _natural(d[0]))
        # pos: a host port's index among its leaf's host ports, natural order of the leaf port names
        self.pos: dict[tuple[str, str], int] = {}
        by_leaf: dict[str, list[str]] = {}
        for ln in self.links:
            by_leaf.setdefault(ln["switch"], []).append(ln["switch_port"])
        for leaf, lports in by_leaf.items():
            for i, lp in enumerate(sorted(lports, key=_natural)):
                self.pos[(leaf, lp)] = i

    def tier(self, switch: str) -> str:
        return str((self.switches.get(switch) or {}).get("tier") or "leaf")

    def is_switch(self, node: str) -> bool:
        return node in self.switches

    def route(self, src: dict[str, Any], dst: dict[str, Any], *, lid: int | None = None,
              flow_hash: int | None = None) -> list[Hop] | None:
        """The hops from host cable SRC to host cable DST, or None when no path joins them.

        InfiniBand follows OpenSM's fat-tree engine (``-R ftree``; opensm doc/current-routing.txt
        "Fat-tree Routing Algorithm", osm_ucast_ftree.c ``fabric_route_to_cns``: each leaf's
        compute nodes, in indexing order, get the leaf's up ports round-robin), not the raw LID:
        ``pos`` = DST's index among the host ports cabled to its leaf (natural order of the leaf's
        port names); up over the source leaf's uplink ``i = pos % n_up`` (uplinks to spines that
        reach DST's leaf, sorted by spine name then natural port order); at the spine down over
        parallel link ``k = r % n_parallel``, ``r`` the rank of uplink ``i`` among the source
        leaf's uplinks to that spine. ``lid`` is accepted and no longer used. The product's model
        (fabricops.model.fabric) implements the same rule; tests/unit/lab/test_routing_agreement.py
        holds them together. RoCE: the ECMP ``flow_hash`` picks both."""
        s_leaf, d_leaf = src["switch"], dst["switch"]
        first: Hop = (src["host"], f"{src['hca']}/{src['port']}", s_leaf, src["switch_port"])
        last: Hop = (d_leaf, dst["switch_port"], dst["host"], f"{dst['hca']}/{dst['port']}")
        if s_leaf == d_leaf:
            return [first, last]
        ups = [u for u in self.up.get(s_leaf, []) if self.down.get((u[1], d_leaf))]
        if not ups:
            return None
        if flow_hash is not None:
            up = ups[flow_hash % len(ups)]
            downs = self.down[(up[1], d_leaf)]
            down = downs[flow_hash % len(downs)]
        else:
            pos = self.pos.get((d_leaf, dst["switch_port"]), 0)
            i = pos % len(ups)
            up = ups[i]
            downs = self.down[(up[1], d_leaf)]
            r = sum(1 for u in ups[:i] if u[1] == up[1])  # rank of uplink i among those to its spine
            down = downs[r % len(downs)]
        return [first, (s_leaf, up[0], up[1], up[2]), (up[1], down[0], d_leaf, down[1]), last]


def _ip_of(facts: dict[str, Any]) -> str:
    gid = facts.get("gid") or []
    if len(gid) == 16 and gid[10:12] == [255, 255]:
        return ".".join(str(b) for b in gid[12:])
    return f"{facts['host']}:{facts['device']}"


def _data_directions(opts: Options) -> list[str]:
    """Which way the data goes: write/send from the client, read from the server, -b and latency
    both ways."""
    if opts.bidirectional or opts.kind == "lat":
        return ["fwd", "rev"]
    return ["rev"] if opts.verb == "read" else ["fwd"]


def _switch_ports_on(hops: list[Hop], fabric: Fabric) -> list[tuple[str, str]]:
    out = []
    for node, p_out, nxt, p_in in hops:
        if fabric.is_switch(node):
            out.append((node, p_out))
        if fabric.is_switch(nxt):
            out.append((nxt, p_in))
    return out


def plan_run(opts: Options, client: dict[str, Any], server: dict[str, Any],
             client_qps: list[dict[str, int]], server_qps: list[dict[str, int]]) -> dict[str, Any]:
    """Every flow of the run (one per QP and data direction) with its path, the capacity of each of
    its cables and what degrades it; or {"fatal"} when there is no data path at all."""
    if client["link_layer"] != server["link_layer"]:
        return {"fatal": "link layers differ"}
    roce = client["link_layer"] == "Ethernet"
    line = min(client["rate_gbps"], server["rate_gbps"])
    # RC traffic goes both ways whatever the test (data one way, ACKs/CNPs the other): a RoCE path
    # needs both directions lossless, on both hosts and on every switch port it crosses
    host_problems: list[str] = []
    prios: set[int] = set()
    if roce:
        for snd, rcv in ((client, server), (server, client)):
            prio, found = _host_problems(snd, rcv)
            prios.add(prio)
            host_problems += found
    directions = _data_directions(opts)
    nq = max(1, len(client_qps))
    cabling = devstate.cabling_as_built()  # a swapped cable carries the traffic where it really goes
    flows: list[dict[str, Any]] = []
    if cabling is None:  # no fabric files: the two ports only (unit tests of the tool itself)
        for d in directions:
            for k in range(nq):
                flows.append({"dir": d, "qp": k, "hops": [], "caps": [],
                              "problems": sorted(set(host_problems))})
        return {"flows": flows, "line": line, "roce": roce}
    cables = {}
    for side, f in (("client", client), ("server", server)):
        c = devstate.cable_for(f["host"], f["netdev"] or "")
        if c is None:
            return {"fatal": "port not cabled"}
        cables[side] = dict(c, hca=c.get("hca") or f["device"], port=c.get("port") or f["port"])
    fabric = Fabric(cabling)
    ports: dict[tuple[str, str], dict[str, Any] | None] = {}

    def port(sw: str, p: str) -> dict[str, Any] | None:
        if (sw, p) not in ports:
            ports[(sw, p)] = devstate.switch_port_state(sw, p)
        return ports[(sw, p)]

    for d in directions:
        snd, rcv = (client, server) if d == "fwd" else (server, client)
        s_cab, r_cab = ((cables["client"], cables["server"]) if d == "fwd"
                        else (cables["server"], cables["client"]))
        for k in range(nq):
            if roce:  # QP k of the client is connected to QP k of the server; lqpn*rqpn is symmetric
                rqpn = server_qps[k]["qpn"] if k < len(server_qps) else 0
                h = ecmp_hash(_ip_of(snd), _ip_of(rcv), roce_udp_sport(client_qps[k]["qpn"], rqpn))
                hops = fabric.route(s_cab, r_cab, flow_hash=h)
            else:
                hops = fabric.route(s_cab, r_cab, lid=rcv.get("lid"))
            if hops is None:
                return {"fatal": "ports on different fabrics"}
            problems = list(host_problems)
            for sw, p in _switch_ports_on(hops, fabric):
                entry = port(sw, p)
                if entry is None or str(entry.get("link", "up")).lower() != "up":
                    return {"fatal": f"switch port {sw} {p} down"}
                if int(entry.get("flaps") or 0) > 0:
                    problems.append(f"flapping:{int(entry['flaps'])}")
                for prio in sorted(prios):
                    problems.extend(_switch_ok_for_roce(entry, prio))
            caps = []
            for node, p_out, nxt, p_in in hops:
                nominal = fabric.nominal.get((node, p_out)) or fabric.nominal.get((nxt, p_in))
                if nominal is None:  # a host cable: the host port's own rate
                    nominal = snd["rate_gbps"] if node == snd["host"] else rcv["rate_gbps"]
                cap = float(nominal)
                for sw, p in ((node, p_out), (nxt, p_in)):
                    if fabric.is_switch(sw):
                        cap = min(cap, port_capacity(port(sw, p), float(nominal)))
                caps.append(cap)
            flows.append({"dir": d, "qp": k, "hops": [list(h) for h in hops], "caps": caps,
                          "problems": sorted(set(problems))})
    return {"flows": flows, "line": line, "roce": roce}


def path_problems(a: dict[str, Any], b: dict[str, Any]) -> tuple[str | None, list[str]]:
    """(fatal, problems) of a one-QP bidirectional exchange between A and B: fatal means no data
    path at all; problems degrade a RoCE path."""
    opts = Options(verb="write", kind="lat")
    qps = [{"qpn": 0x100}]
    plan = plan_run(opts, a, b, qps, qps)
    if "fatal" in plan:
        return plan["fatal"], []
    return None, sorted({p for f in plan["flows"] for p in f["problems"]})


def _flap_factor(problems: list[str]) -> float:
    flaps = sum(int(p.split(":", 1)[1]) for p in problems if p.startswith("flapping:"))
    return max(FLAP_FLOOR, 1.0 - FLAP_COST * flaps) if flaps else 1.0


def flow_shares(plan: dict[str, Any], others: list[dict[str, Any]], own_id: str | None = None) -> list[float]:
    """Each flow's Gb/s: the least over its directed cables of capacity / flows on that cable in the
    same time (this run's flows and every overlapping bandwidth run's in the ledger), the flows of one
    direction together capped by the host ports."""
    load: dict[tuple, int] = {}
    for doc in others:
        if doc.get("kind") != "bw" or doc.get("id") == own_id:
            continue
        for f in doc.get("flows", []):
            for hop in f.get("hops", []):
                load[tuple(hop)] = load.get(tuple(hop), 0) + 1
    for f in plan["flows"]:
        for hop in f["hops"]:
            load[tuple(hop)] = load.get(tuple(hop), 0) + 1
    line = plan["line"]
    shares = []
    for f in plan["flows"]:
        if not f["hops"]:
            shares.append(line / max(1, sum(1 for g in plan["flows"] if g["dir"] == f["dir"])))
            continue
        shares.append(min(cap / load[tuple(hop)] for hop, cap in zip(f["hops"], f["caps"], strict=True)))
    for d in {f["dir"] for f in plan["flows"]}:
        idx = [i for i, f in enumerate(plan["flows"]) if f["dir"] == d]
        total = sum(shares[i] for i in idx)
        if total > line:
            for i in idx:
                shares[i] *= line / total
    return shares


def compute(opts: Options, client: dict[str, Any], server: dict[str, Any],
            client_qps: list[dict[str, int]] | None = None, server_qps: list[dict[str, int]] | None = None,
            others: list[dict[str, Any]] | None = None, plan: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole run's outcome, computed on the client from both sides' facts, the fabric and the
    runs overlapping it in the ledger (``others``)."""
    rng = random.Random(_seed(client, server, _run_counter()))
    client = dict(client, tos_override=opts.tos)
    server = dict(server, tos_override=opts.tos)
    if plan is None:
        qps = client_qps or [{"qpn": 0x100 + k} for k in range(opts.qps)]
        plan = plan_run(opts, client, server, qps, server_qps or qps)
    if "fatal" in plan:
        return {"ok": False, "fatal": plan["fatal"]}
    line, roce = plan["line"], plan["roce"]
    problems = sorted({p for f in plan["flows"] for p in f["problems"]})
    shares = flow_shares(plan, others or [], plan.get("id"))
    ratios: dict[tuple[str, ...], float] = {}
    ib_ratio = None if roce else IB_EFFICIENCY * (1 + rng.uniform(-IB_JITTER, IB_JITTER))
    per_dir: dict[str, float] = {}
    carried = []
    for f, share in zip(plan["flows"], shares, strict=True):
        key = tuple(p for p in f["problems"] if not p.startswith("flapping:"))
        if key not in ratios:
            ratios[key] = degraded_ratio(list(key), rng) if roce else float(ib_ratio)  # type: ignore[arg-type]
        rate = share * ratios[key] * _flap_factor(f["problems"])
        carried.append(rate)
        per_dir[f["dir"]] = per_dir.get(f["dir"], 0.0) + rate
    eff_line = sum(per_dir.values()) / max(1, len(per_dir))
    rows = []
    for size in sizes_for(opts):
        if opts.kind == "bw":
            avg = bw_at(size, eff_line, opts.qps) * (1 + rng.uniform(-0.0005, 0.0005))
            if opts.duration is not None:
                iters = int(avg * 1e9 / 8 / size * opts.duration)
            else:
                iters = (opts.iters or 5000) * opts.qps
            peak = 0.0 if (opts.duration is not None or opts.no_peak) else avg * (1 + rng.uniform(0, 0.0008))
            rows.append({"bytes": size, "iterations": iters, "avg_gbps": avg, "peak_gbps": peak})
        else:
            rows.append(_latency_row(opts, size, line, roce, problems, rng))
    return {"ok": True, "rows": rows, "problems": problems, "line_gbps": line, "roce": roce,
            "flows": plan["flows"], "carried": carried, "per_dir": per_dir}


def pair_rate_gbps(a: dict[str, Any], b: dict[str, Any],
                   size: int = 1 << 23) -> tuple[float | None, str | None]:
    """(Gb/s, None) one RC QP moves from port A to port B with this physics (everything ``compute``
    applies: port rates, path health, lossy RoCE), or (None, why) when no data path joins them.
    A and B are :func:`local_facts` dicts. For other emulated tools that ride on RDMA (emul/nccl.py)."""
    opts = Options(verb="write", kind="bw", size=size)
    outcome = compute(opts, a, b)
    if not outcome.get("ok"):
        return None, str(outcome.get("fatal") or "no data path")
    return float(outcome["rows"][-1]["avg_gbps"]), None


def _latency_row(opts: Options, size: int, line: float, roce: bool, problems: list[str],
                 rng: random.Random) -> dict[str, Any]:
    base = 1.75 if roce else 1.05
    if opts.verb == "send":
        base += 0.05
    if opts.verb == "read":
        base *= 1.9
    typical = base + size * 8 / (line * 1e3) + rng.uniform(-0.02, 0.02)
    if problems:
        typical *= 3.0 + rng.uniform(0, 0.5)
    iters = opts.iters or 1000
    row = {
        "bytes": size, "iterations": iters,
        "t_min": typical * 0.96, "t_max": typical * (4.0 if not problems else 60.0),
        "t_typical": typical, "t_avg": typical * (1.01 if not problems else 1.4),
        "t_stdev": 0.02 + (0.05 if roce else 0.0) + (3.0 if problems else 0.0),
        "p99": typical * (1.08 if not problems else 8.0),
        "p99_9": typical * (1.6 if not problems else 30.0),
    }
    if opts.duration is not None:
        row["iterations"] = int(opts.duration * 1e6 / (typical * 2))
        row["tps"] = 1e6 / typical
    return row


def counter_deltas(opts: Options, outcome: dict[str, Any], mtu: int) -> dict[str, dict[str, int]]:
    """Counter increments for 'client' and 'server' from the run's outcome."""
    moved = sum(r["bytes"] * r["iterations"] for r in outcome["rows"])
    if opts.kind == "lat":
        moved *= 2  # ping-pong: both directions carry the same volume
    packets = sum(r["iterations"] * max(1, math.ceil(r["bytes"] / mtu)) for r in outcome["rows"])
    deltas: dict[str, dict[str, int]] = {"client": {}, "server": {}}
    # who sends the data: write/send -> client; read -> server; -b or lat -> both
    both = opts.bidirectional or opts.kind == "lat"
    senders = ["client", "server"] if both else (["server"] if opts.verb == "read" else ["client"])
    for side in ("client", "server"):
        sends = side in senders
        receives = (("server" if side == "client" else "client") in senders)
        d = deltas[side]
        if sends:
            d["port_xmit_data"] = moved // 4
            d["port_xmit_packets"] = packets
        if receives:
            d["port_rcv_data"] = moved // 4
            d["port_rcv_packets"] = packets
        if not outcome.get("roce"):
            if any(p.startswith("flapping:") for p in outcome["problems"]):
                # a flapping cable on the path: RC retransmits on InfiniBand too (mlx5 hw_counters)
                if receives:
                    d["out_of_sequence"] = max(1, packets // 400)
                if sends:
                    d["packet_seq_err"] = max(1, packets // 800)
                    d["local_ack_timeout_err"] = max(1, packets // 20000)
            continue
        if outcome["problems"]:
            if receives:
                d["out_of_sequence"] = max(1, packets // 400)
            if sends:
                d["packet_seq_err"] = max(1, packets // 800)
                d["local_ack_timeout_err"] = max(1, packets // 20000)
                d["roce_adp_retrans"] = max(1, packets // 500)
        else:
            marked = max(1, packets // 5000)
            if receives:
                d["np_ecn_marked_roce_packets"] = marked
                d["np_cnp_sent"] = max(1, marked // 2)
            if sends:
                d["rp_cnp_handled"] = max(1, marked // 2)
    return deltas


def apply_counters(facts: dict[str, Any], deltas: dict[str, int]) -> None:
    for name, delta in deltas.items():
        if delta <= 0:
            continue
        try:
            devstate.add_counter(facts["device"], facts["port"], name, int(delta))
        except (KeyError, OSError, ValueError):
            continue


# --- rendering ----------------------------------------------------------------------------

def _gid_text(gid: list[int]) -> str:
    return ":".join(f"{b:02d}" for b in gid)


def _lid_text(lid: int) -> str:
    return f"{lid:#04x}" if lid else "0000"


def render_header(opts: Options, facts: dict[str, Any], server_side: bool) -> list[str]:
    title = TEST_NAMES[opts.verb]
    if opts.kind == "bw":
        title += " Bidirectional BW Test" if opts.bidirectional else " BW Test"
    else:
        title += " Latency Test"
    ethernet = facts["link_layer"] == "Ethernet"
    lines = [RESULT_LINE, f"                    {title}",
             f" Dual-port       : OFF\t\tDevice         : {facts.get('shown_device', facts['device'])}",
             f" Number of qps   : {opts.qps}\t\tTransport type : IB",
             " Connection type : RC\t\tUsing SRQ      : OFF",
             " PCIe relax order: " + ("ON" if opts.kind == "bw" else "OFF"),
             " ibv_wr* API     : ON"]
    if opts.kind == "bw":
        if not server_side or opts.bidirectional:
            lines.append(" TX depth        : 128")
        elif opts.verb == "send":
            lines.append(" RX depth        : 512")
        lines.append(f" CQ Moderation   : {1 if opts.duration is not None else 100}")
    else:
        lines.append(" TX depth        : 1")
    lines.append(f" Mtu             : {facts['mtu']}[B]")
    lines.append(f" Link type       : {'Ethernet' if ethernet else 'IB'}")
    if facts.get("gid_index") is not None and (ethernet or opts.gid_index is not None):
        lines.append(f" GID index       : {facts['gid_index']}")
    if opts.verb == "read":
        lines.append(" Outstand reads  : 16")
    else:
        inline = 0 if opts.kind == "bw" else (236 if opts.verb == "send" else 220)
        lines.append(f" Max inline data : {inline}[B]")
    lines.append(f" rdma_cm QPs\t : {'ON' if opts.rdma_cm else 'OFF'}")
    lines.append(f" Data ex. method : {'rdma_cm' if opts.rdma_cm else 'Ethernet'}")
    lines.append(RESULT_LINE)
    return lines


def _address_lines(opts: Options, facts: dict[str, Any], qp_ids: list[dict[str, int]],
                   label: str) -> list[str]:
    out = []
    show_gid = facts.get("gid") is not None and (
        facts["link_layer"] == "Ethernet" or opts.gid_index is not None)
    for qp in qp_ids:
        text = f" {label} address: LID {_lid_text(facts['lid'])} QPN {qp['qpn']:#06x} PSN {qp['psn']:#08x}"
        if opts.verb == "read":
            text += " OUT 0x10"
        if opts.verb != "send":
            text += f" RKey {qp['rkey']:#08x} VAddr {qp['vaddr']:#016x}"
        out.append(text)
        if show_gid:
            out.append(f" GID: {_gid_text(facts['gid'])}")
    return out


def table_header(opts: Options) -> str:
    if opts.kind == "bw":
        u = "Gb/sec" if opts.report_gbits else "MB/sec"
        return f" #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]"
    if opts.duration is not None:
        return " #bytes        #iterations       t_avg[usec]    tps average"
    return (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
            "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")


def render_row(opts: Options, row: dict[str, Any]) -> str:
    if opts.kind == "bw":
        scale = 1.0 if opts.report_gbits else 1e9 / 8 / 1048576  # Gb/s -> MiB/s ("MB/sec")
        avg, peak = row["avg_gbps"] * scale, row["peak_gbps"] * scale
        rate = row["avg_gbps"] * 1e9 / 8 / row["bytes"] / 1e6
        if opts.bidirectional:
            avg, peak, rate = avg * 2, peak * 2, rate * 2
        return (f" {row['bytes']:<7d}    {row['iterations']:<10d}       {peak:<7.2f}            "
                f"{avg:<7.2f}\t\t   {rate:<7.6f}")
    if opts.duration is not None:
        return (f" {row['bytes']:<7d}       {row['iterations']}            {row['t_avg']:<7.2f}        "
                f"{row['tps']:<7.2f}")
    return (f" {row['bytes']:<7d} {row['iterations']}          {row['t_min']:<7.2f}        "
            f"{row['t_max']:<7.2f}      "
            f"{row['t_typical']:<7.2f}  \t       {row['t_avg']:<7.2f}     \t{row['t_stdev']:<7.2f}\t\t"
            f"{row['p99']:<7.2f} \t\t{row['p99_9']:<7.2f}")


def _qp_ids(rng: random.Random, n: int) -> list[dict[str, int]]:
    base = rng.randrange(0x40, 0x4000)
    return [{"qpn": base + k, "psn": rng.randrange(0, 1 << 24), "rkey": rng.randrange(0x1000, 1 << 21),
             "vaddr": 0x7E0000000000 + rng.randrange(0, 1 << 28) * 4096} for k in range(n)]


def _out(lines: list[str]) -> None:
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


# --- the two sides ------------------------------------------------------------------------

#: wall time of one latency exchange, an upper bound for the lab's fabrics (a ping-pong is a few
#: microseconds on InfiniBand and RoCE; perftest's own figures are in microseconds)
LAT_EXCHANGE_S = 10e-6


def _run_seconds(opts: Options) -> float:
    """How long the run takes: ``EMUL_PERFTEST_SECONDS`` (default 1.0: a bandwidth run of perftest's
    default 5,000 iterations of large messages takes about a second at 400 Gb/s), capped by ``-D``.
    A latency run without ``-D`` takes what its iterations take (``-n``, default 1,000 exchanges:
    milliseconds on the hardware, perftest README), not a second: it carries no load that other runs
    must overlap, so there is nothing to wait for."""
    try:
        seconds = float(os.environ.get("EMUL_PERFTEST_SECONDS", "1.0"))
    except ValueError:
        seconds = 1.0
    if opts.duration is not None:
        seconds = min(seconds, opts.duration)
    elif opts.kind == "lat":
        seconds = min(seconds, (opts.iters or 1000) * LAT_EXCHANGE_S)
    return max(0.0, seconds)


def run(verb: str, kind: str, argv: list[str]) -> int:
    try:
        opts = parse_args(verb, kind, argv)
    except UsageError as exc:
        _err(f"{exc}\n Parser function exited with Error\n")
        return 1
    facts, error = local_facts(opts)
    if error:
        _err(error)
        return 1
    assert facts is not None
    if opts.server is None:
        return _server(opts, facts)
    return _client(opts, facts)


def _client(opts: Options, facts: dict[str, Any]) -> int:
    try:
        sock = socket.create_connection((opts.server, opts.tcp_port), timeout=10)
    except OSError:
        _err(f"Couldn't connect to {opts.server}:{opts.tcp_port}\n"
             "Unable to open file descriptor for socket connection\n"
             " Unable to init the socket connection\n")
        return 1
    sock.settimeout(None)
    rng = random.Random()
    my_qps = _qp_ids(rng, opts.qps)
    with sock, sock.makefile("r") as fh:
        _send(sock, {"hello": "client", "facts": facts, "qps": my_qps,
                     "opts": {"verb": opts.verb, "kind": opts.kind, "size": opts.size,
                              "all": opts.all_sizes, "iters": opts.iters, "duration": opts.duration,
                              "qps": opts.qps, "bidirectional": opts.bidirectional,
                              "tos": opts.tos, "no_peak": opts.no_peak}})
        peer = _recv(fh)
        if not peer or peer.get("hello") != "server":
            _err(" Failed to exchange data between server and clients\n")
            return 1
        if opts.duration is not None and opts.kind == "bw":
            _out([" WARNING: BW peak won't be measured in this run."])
        lines = render_header(opts, facts, server_side=False)
        lines += _address_lines(opts, facts, my_qps, "local")
        lines += _address_lines(opts, peer["facts"], peer["qps"], "remote")
        show_table = opts.output is None
        if show_table:
            lines += [RESULT_LINE, table_header(opts)]
        _out(lines)
        peer_facts = peer["facts"]
        plan = plan_run(opts, dict(facts, tos_override=opts.tos), dict(peer_facts, tos_override=opts.tos),
                        my_qps, peer["qps"])
        seconds = _run_seconds(opts)
        if "fatal" in plan:
            time.sleep(min(seconds, 2.0))
            _send(sock, {"result": "error", "fatal": plan["fatal"]})
            _err(" Completion with error at client\n"
                 " Failed status 12: wr_id 0 syndrom 0x81\n"
                 "scnt=128, ccnt=0\n"
                 " Failed to complete run_iter_bw function successfully\n" if opts.kind == "bw" else
                 " Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x81\n"
                 "scnt=1, ccnt=0\n")
            return 1
        # the run goes into the flow ledger for its whole time, so every run overlapping it (a
        # round of tests starts together) sees it; the rates are settled once all have registered
        start = time.time()
        doc = ledger_entry(opts, facts, plan, start, start + seconds)
        entry = devstate.ledger_register(doc) if doc["flows"] else None
        devstate.ledger_prune(start)
        time.sleep(seconds)
        plan["id"] = doc["id"]
        others = devstate.ledger_overlapping(start, start + seconds) if entry else []
        outcome = compute(opts, facts, peer_facts, plan=plan, others=others)
        deltas = counter_deltas(opts, outcome, min(facts["mtu"], peer_facts["mtu"]))
        if entry is not None:
            ledger_finish(entry, doc, outcome, deltas)
        if show_table:
            _out([render_row(opts, row) for row in outcome["rows"]] + [RESULT_LINE])
        else:
            _out([_brief(opts, outcome)])
        apply_counters(facts, deltas["client"])
        _send(sock, {"result": "ok", "rows": outcome["rows"], "deltas": deltas["server"]})
        _recv(fh)  # the server's goodbye (or EOF)
    return 0


def ledger_entry(opts: Options, facts: dict[str, Any], plan: dict[str, Any], start: float,
                 end: float) -> dict[str, Any]:
    """This run's flow-ledger file (devstate "the flow ledger"): a latency test adds little load, so
    it is kind "lat" and other runs do not count it as a flow on their cables."""
    flows = [{"dir": f["dir"], "qp": f["qp"], "hops": f["hops"], "bytes": None, "packets": None}
             for f in plan["flows"] if f["hops"]]
    union = []
    for f in flows:
        for hop in f["hops"]:
            if hop not in union:
                union.append(hop)
    run_id = f"{facts['host']}-{os.getpid()}-{int(start * 1e6)}"
    return {"id": run_id, "kind": opts.kind, "start": start, "end": end, "bytes": None, "hops": union,
            "flows": flows}


def ledger_finish(entry: Any, doc: dict[str, Any], outcome: dict[str, Any],
                  deltas: dict[str, dict[str, int]]) -> None:
    """Write the bytes (and packets) each flow actually carried back into the run's ledger file: the
    bytes of a direction are what the sending port's counters moved, split over its flows by rate."""
    sent = {"fwd": deltas["client"], "rev": deltas["server"]}
    with_hops = [(f, r) for f, r in zip(outcome["flows"], outcome["carried"], strict=True) if f["hops"]]
    total = 0
    for out, (f, rate) in zip(doc["flows"], with_hops, strict=True):
        d = sent[f["dir"]]
        frac = rate / outcome["per_dir"][f["dir"]] if outcome["per_dir"].get(f["dir"]) else 0.0
        out["bytes"] = int(d.get("port_xmit_data", 0) * 4 * frac)
        out["packets"] = int(d.get("port_xmit_packets", 0) * frac)
        total += out["bytes"]
    doc["bytes"] = total
    with contextlib.suppress(OSError):
        devstate.write_json_atomic(entry, doc)


def _brief(opts: Options, outcome: dict[str, Any]) -> str:
    """--output=bandwidth|latency|message_rate prints one number."""
    row = outcome["rows"][-1]
    if opts.kind == "lat":
        return f"{row['t_typical']:.2f}"
    value = row["avg_gbps"] * (2 if opts.bidirectional else 1)
    if opts.output == "message_rate":
        return f"{value * 1e9 / 8 / row['bytes'] / 1e6:.6f}"
    return f"{value if opts.report_gbits else value * 1e9 / 8 / 1048576:.2f}"


def _server(opts: Options, facts: dict[str, Any]) -> int:
    try:
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind(("0.0.0.0", opts.tcp_port))
        lsock.listen(1)
    except OSError:
        _err(f"Couldn't listen to port {opts.tcp_port}\n Unable to init the socket connection\n")
        return 1
    if opts.output is None:
        _out(["", "************************************", "* Waiting for client to connect... *",
              "************************************"])
    conn, _addr = lsock.accept()
    lsock.close()
    rng = random.Random()
    with conn, conn.makefile("r") as fh:
        hello = _recv(fh)
        if not hello or hello.get("hello") != "client":
            _err(" Unable to init the socket connection\n")
            return 1
        co = hello["opts"]
        # the client's run parameters govern the run, as in a matched pair of commands
        opts.size, opts.all_sizes, opts.iters = co["size"], co["all"], co["iters"]
        opts.duration, opts.qps, opts.bidirectional = co["duration"], co["qps"], co["bidirectional"]
        my_qps = _qp_ids(rng, opts.qps)
        _send(conn, {"hello": "server", "facts": facts, "qps": my_qps})
        lines = render_header(opts, facts, server_side=True)
        lines += _address_lines(opts, facts, my_qps, "local")
        lines += _address_lines(opts, hello["facts"], hello["qps"], "remote")
        show_table = opts.output is None
        if show_table:
            lines += [RESULT_LINE, table_header(opts)]
        _out(lines)
        result = _recv(fh)
        if not result or result.get("result") != "ok":
            _err("ethernet_read_keys: Couldn't read remote address\n"
                 " Unable to read to socket/rdma_cm\n"
                 " Failed to exchange data between server and clients\n")
            return 1
        apply_counters(facts, result.get("deltas", {}))
        if show_table:
            _out([render_row(opts, row) for row in result["rows"]] + [RESULT_LINE])
        else:
            _out([_brief(opts, {"rows": result["rows"]})])
        with contextlib.suppress(OSError):
            _send(conn, {"bye": True})
    return 0


def ib_write_bw(argv: list[str]) -> int:
    return run("write", "bw", argv)


def ib_read_bw(argv: list[str]) -> int:
    return run("read", "bw", argv)


def ib_send_bw(argv: list[str]) -> int:
    return run("send", "bw", argv)


def ib_write_lat(argv: list[str]) -> int:
    return run("write", "lat", argv)


def ib_read_lat(argv: list[str]) -> int:
    return run("read", "lat", argv)


def ib_send_lat(argv: list[str]) -> int:
    return run("send", "lat", argv)
