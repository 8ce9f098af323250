"""Emulated fabric discovery: ``ibnetdiscover`` and ``iblinkinfo`` (infiniband-diags, installed by the
emulated MLNX_OFED), ``lldpctl`` (lldpd, part of the lab's server image), and the switches' side of
LLDP for the emulated Onyx and NVUE daemons (stdlib only).

All of them read the cabling *as built*: ``cabling.json`` (host cables ``links``, inter-switch
cables ``isls``, ``switches``) with ``cabling-override.json`` laid over it (the ``swapped-cable``
fault: ``{"links": [{host, netdev, hca, port, switch, switch_port}, ...]}``, each entry replacing
the cable of the same host and netdev), and each switch's port state (``switches/NAME.json``
``"link": "down"``). A cable whose switch port is down, or whose host port is this host's and
not LinkUp, is not there. Formats and their sources: the docstrings below and docs/verify.md
("Cabling").

Names: a host port's NodeDescription is ``<host> <device>`` (hardware.json ``node_desc``, what
rdma-core writes); a switch's is ``MF0;<name>:MQM9700/U1``, the form managed Quantum switches
report (capture tests/fixtures/iblinkinfo/edr76-sb7700.txt: ``MF0;SB7700:MSB7700/U1``). LIDs and
node GUIDs of other hosts follow the lab's rules (hardware.lids / hardware.node_guid: hosts in
order, IB ports numbered from LID 2; ``lid`` / ``node_guid`` on a cabling entry win); this host's
come from its own hardware.json. Switch GUIDs are services._switch_guid (the same as sminfo).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from . import devstate, services

OVERRIDE = devstate.CABLING_OVERRIDE
SWITCH_DEVID = {"ib": 0xD2F2}  #: Quantum-2 (QM9700) device ID
CA_DEVID = 0x1021  #: ConnectX-7 (MT4129)
VENDOR_ID = 0x2C9
LANE = {  # per-lane speed as libibnetdisc prints it (ibnd_dump_agg_linkspeedext; libibmad dump.c)
    "SDR": "2.5 Gbps",
    "DDR": "5.0 Gbps",
    "QDR": "10.0 Gbps",
    "FDR10": "10.0 Gbps (FDR10)",
    "FDR": "14.0625 Gbps",
    "EDR": "25.78125 Gbps",
    "HDR": "53.125 Gbps",
    "NDR": "106.25 Gbps",
    "XDR": "212.5 Gbps",
}
ONYX_DESCR = "Mellanox MSN4700,Onyx,SWv3.10.4302"  # mellanox.onyx fixture onyx_lldp_show.cfg shape
CUMULUS_DESCR = "Cumulus Linux version 5.9.0 running on Mellanox Technologies Ltd. MSN5600"
HOST_DESCR = "Debian GNU/Linux 12 (bookworm) Linux"


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


# --- the cabling as built ------------------------------------------------------------------


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def apply_override(links: list[dict[str, Any]], override: Any) -> list[dict[str, Any]]:
    """Host cables with ``cabling-override.json``'s entries in place of those of the same host port."""
    return devstate.apply_override(links, override)


def as_built(fabric_dir: str | Path | None = None) -> dict[str, Any]:
    """cabling.json with the override applied; ``switches`` filled from switches/NAME.json when absent."""
    fab = Path(fabric_dir) if fabric_dir is not None else devstate.path(devstate.FABRIC_DIR)
    cabling = _read(fab / "cabling.json") or {}
    links = apply_override(list(cabling.get("links") or []), _read(fab / OVERRIDE))
    switches = dict(cabling.get("switches") or {})
    sdir = fab / "switches"
    if sdir.is_dir():
        for f in sorted(sdir.glob("*.json")):
            data = _read(f) or {}
            switches.setdefault(f.stem, {"os": data.get("os"), "tier": "leaf"})
    return {"links": links, "isls": list(cabling.get("isls") or []), "switches": switches, "dir": fab}


def switch_ports(fab: Path, switch: str) -> dict[str, dict[str, Any]]:
    return (_read(fab / "switches" / f"{switch}.json") or {}).get("ports") or {}


def port_up(fab: Path, switch: str, port: str, cache: dict[str, Any] | None = None) -> bool:
    ports = (
        cache.setdefault(switch, switch_ports(fab, switch))
        if cache is not None
        else switch_ports(fab, switch)
    )
    return (ports.get(str(port)) or {}).get("link", "up") != "down"


def _natural(s: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(s))]


# --- InfiniBand ------------------------------------------------------------------------------


def _hca_index(hca: str) -> int:
    m = re.search(r"(\d+)$", hca)
    return int(m.group(1)) if m else 0


def _host_guid(host_index: int, hca_index: int) -> str:
    low = 0xA00000 + host_index * 0x100 + hca_index * 0x10  # hardware._low24 / node_guid
    return f"b83fd20300{low:06x}"


def _switch_guid(name: str) -> str:
    return services._switch_guid(name)[2:]


class Subnet:
    """The InfiniBand subnet this host's first active IB port is on, as built."""

    def __init__(self, hw: dict[str, Any], built: dict[str, Any]):
        self.fab: Path = built["dir"]
        self.hw = hw
        sw_os = {n: (s or {}).get("os") for n, s in built["switches"].items()}
        self.cache: dict[str, Any] = {}
        ib_links = [ln for ln in built["links"] if sw_os.get(ln.get("switch")) == "ib"]
        order: list[str] = []
        for ln in ib_links:
            if ln["host"] not in order:
                order.append(ln["host"])
        self.host_index = {h: i + 1 for i, h in enumerate(order)}
        # LIDs as hardware.lids: hosts in order, their IB ports in (device, port) order, from 2
        self.lid: dict[tuple[str, str, int], int] = {}
        nxt = 2
        for h in order:
            for ln in sorted(
                (x for x in ib_links if x["host"] == h), key=lambda x: (_natural(x["hca"]), x["port"])
            ):
                self.lid[(h, ln["hca"], int(ln["port"]))] = int(ln.get("lid") or nxt)
                nxt += 1
        me = hw.get("host")
        local = {
            (me, hca["name"], p["port"]): (hca, p)
            for hca in hw.get("hcas", [])
            for p in hca["ports"]
            if p.get("link_layer") == "InfiniBand"
        }
        for key, (_hca, p) in local.items():
            if p.get("lid"):
                self.lid[key] = int(p["lid"])
        self.local = local
        # the switch component reachable from this host's first LinkUp IB port
        start = None
        for key, (_hca, p) in sorted(local.items(), key=lambda kv: (_natural(kv[0][1]), kv[0][2])):
            cab = next((ln for ln in ib_links if (ln["host"], ln["hca"], int(ln["port"])) == key), None)
            if (
                p.get("phys_state") == "LinkUp"
                and cab
                and port_up(self.fab, cab["switch"], cab["switch_port"], self.cache)
            ):
                start = key
                self.start_cable = cab
                break
        self.start = start
        self.isls = [
            i
            for i in built["isls"]
            if sw_os.get(i.get("switch_a")) == "ib"
            and port_up(self.fab, i["switch_a"], i["port_a"], self.cache)
            and port_up(self.fab, i["switch_b"], i["port_b"], self.cache)
        ]
        self.switches: list[str] = []
        if start is not None:
            seen = {self.start_cable["switch"]}
            todo = [self.start_cable["switch"]]
            while todo:
                s = todo.pop()
                for i in self.isls:
                    for a, b in (("switch_a", "switch_b"), ("switch_b", "switch_a")):
                        if i[a] == s and i[b] not in seen:
                            seen.add(i[b])
                            todo.append(i[b])
            self.switches = sorted(seen, key=_natural)
        in_subnet = set(self.switches)
        self.cables = []  # host cables that are up, in the subnet
        for ln in ib_links:
            if ln["switch"] not in in_subnet or not port_up(
                self.fab, ln["switch"], ln["switch_port"], self.cache
            ):
                continue
            key = (ln["host"], ln["hca"], int(ln["port"]))
            if key in local and local[key][1].get("phys_state") != "LinkUp":
                continue
            self.cables.append(ln)
        self.isls = [i for i in self.isls if i["switch_a"] in in_subnet]
        # switch LIDs: the first leaf (by name; the lab's SM switch, hosts' SM lid 1) 1, the others
        # after the hosts' LIDs; the same numbering from whichever host runs the tool
        leaves = {ln["switch"] for ln in ib_links}
        self.switches.sort(key=lambda s: (s not in leaves, _natural(s)))
        top = max([1, *self.lid.values()])
        self.switch_lid = {s: (1 if k == 0 else top + k) for k, s in enumerate(self.switches)}

    # identities
    def ca_guid(self, host: str, hca: str) -> str:
        if host == self.hw.get("host"):
            for h in self.hw.get("hcas", []):
                if h["name"] == hca:
                    return h["node_guid"].replace(":", "").lower()
        ln = next(
            (x for x in self.cables if x["host"] == host and x["hca"] == hca and x.get("node_guid")), None
        )
        if ln:
            return str(ln["node_guid"]).replace(":", "").lower().removeprefix("0x").rjust(16, "0")
        return _host_guid(self.host_index.get(host, 0), _hca_index(hca))

    def port_guid(self, host: str, hca: str, port: int) -> str:
        key = (host, hca, port)
        if key in self.local:
            return str(self.local[key][1].get("port_guid") or "").replace(":", "").lower()
        return self.ca_guid(host, hca)

    def width_speed(self, ln: dict[str, Any] | None, switch: str, port: str) -> tuple[str, str]:
        st = (self.cache.get(switch) or switch_ports(self.fab, switch)).get(str(port)) or {}
        width, speed = st.get("width"), st.get("speed")
        if ln is not None:
            key = (ln["host"], ln["hca"], int(ln["port"]))
            if key in self.local:
                p = self.local[key][1]
                width, speed = width or p.get("width"), speed or p.get("speed")
        if self.start is not None and (width is None or speed is None):
            p = self.local[self.start][1]
            width, speed = width or p.get("width"), speed or p.get("speed")
        return str(width or "4X").upper(), str(speed or "NDR").upper()

    def sw_desc(self, s: str) -> str:
        return f"MF0;{s}:MQM9700/U1"

    def switch_neighbors(self, s: str) -> dict[int, tuple[str, Any]]:
        """port -> ("ca", link) | ("sw", (peer switch, peer port, isl))."""
        out: dict[int, tuple[str, Any]] = {}
        for ln in self.cables:
            if ln["switch"] == s and str(ln["switch_port"]).isdigit():
                out[int(ln["switch_port"])] = ("ca", ln)
        for i in self.isls:
            for a, pa, b, pb in (
                ("switch_a", "port_a", "switch_b", "port_b"),
                ("switch_b", "port_b", "switch_a", "port_a"),
            ):
                if i[a] == s and str(i[pa]).isdigit():
                    out[int(i[pa])] = ("sw", (i[b], int(i[pb]), i))
        return dict(sorted(out.items()))


def _ib_ready(hw: dict[str, Any]) -> bool:
    from .rdma import _driver_loaded

    return (
        _driver_loaded()
        and devstate.sysfs("class/infiniband").is_dir()
        and any(p.get("link_layer") == "InfiniBand" for h in hw.get("hcas", []) for p in h["ports"])
    )


def _no_port(tool: str) -> int:
    # infiniband-diags' answer without a usable local port (ibdiag_common.c / mad_rpc_open_port)
    _err(f"ibwarn: [{os.getpid()}] mad_rpc_open_port: can't open UMAD port ((null):0)")
    _err(f"{tool}: iberror: failed: Failed to open '(null)' port '0'")
    return 255


def _subnet(tool: str) -> Subnet | int:
    hw = services._hw()
    if not hw or not _ib_ready(hw):
        return _no_port(tool)
    sub = Subnet(hw, as_built())
    if sub.start is None:
        # the local port is down: discovery from it fails (ibnetdiscover.c: "discover failed")
        _err(f"ibwarn: [{os.getpid()}] _do_madrpc: send failed; Invalid argument")
        _err(f"{tool}: iberror: failed: discover failed")
        return 255
    return sub


def ibnetdiscover(argv: list[str]) -> int:
    """Default output only (ibnetdiscover.c dump_topology, non-grouped): switches, then CAs."""
    if any(a in ("-h", "--help") for a in argv):
        _out("Usage: ibnetdiscover [options] [<topology-file>]")
        return 0
    bad = [a for a in argv if a.startswith("-")]
    if bad:
        _err(f"ibnetdiscover: the lab emulates the default output only (not {' '.join(bad)})")
        return 255
    sub = _subnet("ibnetdiscover")
    if isinstance(sub, int):
        return sub
    me_host, me_hca, me_port = sub.start
    me_guid = sub.ca_guid(me_host, me_hca)
    lines = [
        "#",
        f"# Topology file: generated on {time.ctime()}",
        "#",
        f"# Initiated from node {me_guid} port {sub.port_guid(me_host, me_hca, me_port).rjust(16, '0')}",
    ]
    for s in sub.switches:
        g = _switch_guid(s)
        nports = len(switch_ports(sub.fab, s)) or 64
        lines += [
            "",
            f"vendid=0x{VENDOR_ID:x}",
            f"devid=0x{SWITCH_DEVID['ib']:x}",
            f"sysimgguid=0x{int(g, 16):x}",
            f"switchguid=0x{int(g, 16):x}({int(g, 16):x})",
            f'Switch\t{nports} "S-{g}"\t\t# "{sub.sw_desc(s)}" enhanced port 0 lid {sub.switch_lid[s]} lmc 0',
        ]
        for port, (kind, what) in sub.switch_neighbors(s).items():
            if kind == "ca":
                ln = what
                h, hca, hp = ln["host"], ln["hca"], int(ln["port"])
                w, sp = sub.width_speed(ln, s, ln["switch_port"])
                lines.append(
                    f'[{port}]\t"H-{sub.ca_guid(h, hca)}"[{hp}]({int(sub.port_guid(h, hca, hp), 16):x}) '
                    f'\t\t# "{h} {hca}" lid {sub.lid.get((h, hca, hp), 0)} {w.lower()}{sp}'
                )
            else:
                peer, pport, _isl = what
                w, sp = sub.width_speed(None, s, str(port))
                lines.append(
                    f'[{port}]\t"S-{_switch_guid(peer)}"[{pport}]\t\t# "{sub.sw_desc(peer)}" '
                    f"lid {sub.switch_lid[peer]} {w.lower()}{sp}"
                )
    for ln in sorted(sub.cables, key=lambda x: (_natural(x["host"]), _natural(x["hca"]))):
        h, hca, hp = ln["host"], ln["hca"], int(ln["port"])
        g = sub.ca_guid(h, hca)
        w, sp = sub.width_speed(ln, ln["switch"], ln["switch_port"])
        lines += [
            "",
            f"vendid=0x{VENDOR_ID:x}",
            f"devid=0x{CA_DEVID:x}",
            f"sysimgguid=0x{int(g, 16):x}",
            f"caguid=0x{int(g, 16):x}",
            f'Ca\t1 "H-{g}"\t\t# "{h} {hca}"',
            f'[{hp}]({int(sub.port_guid(h, hca, hp), 16):x}) \t"S-{_switch_guid(ln["switch"])}"'
            f"[{ln['switch_port']}]\t\t# lid {sub.lid.get((h, hca, hp), 0)} lmc 0 "
            f'"{sub.sw_desc(ln["switch"])}" lid {sub.switch_lid[ln["switch"]]} {w.lower()}{sp}',
        ]
    _out("\n".join(lines))
    return 0


def _link(width: str, speed: str) -> str:
    # iblinkinfo.c print_port: "(%3s %18s %6s/%8s)"
    return f"({width:>3} {LANE.get(speed, '2.5 Gbps'):>18} {'Active':>6}/{'LinkUp':>8})"


def iblinkinfo(argv: list[str]) -> int:
    """Default output (iblinkinfo.c print_node_header / print_port): CAs, then switches, every port."""
    if any(a in ("-h", "--help") for a in argv):
        _out("Usage: iblinkinfo <options>")
        return 0
    bad = [a for a in argv if a.startswith("-")]
    if bad:
        _err(f"iblinkinfo: the lab emulates the default output only (not {' '.join(bad)})")
        return 255
    sub = _subnet("iblinkinfo")
    if isinstance(sub, int):
        return sub
    lines = []
    for ln in sorted(sub.cables, key=lambda x: (_natural(x["host"]), _natural(x["hca"]))):
        h, hca, hp = ln["host"], ln["hca"], int(ln["port"])
        w, sp = sub.width_speed(ln, ln["switch"], ln["switch_port"])
        lines.append(f"CA: {h} {hca}:")
        lines.append(
            f"      0x{sub.port_guid(h, hca, hp).rjust(16, '0')} "
            f"{sub.lid.get((h, hca, hp), 0):6d} {hp:4d}[  ] "
            f"=={_link(w, sp)}==>  {sub.switch_lid[ln['switch']]:6d} {int(ln['switch_port']):4d}[  ] "
            f'"{sub.sw_desc(ln["switch"])}" ( )'
        )
    for s in sub.switches:
        lines.append(f"Switch: 0x{_switch_guid(s)} {sub.sw_desc(s)}:")
        neigh = sub.switch_neighbors(s)
        ports = switch_ports(sub.fab, s)
        numbers = sorted({int(p) for p in ports if str(p).isdigit()} | set(neigh))
        for port in numbers:
            lid = sub.switch_lid[s]
            if port in neigh:
                kind, what = neigh[port]
                if kind == "ca":
                    h, hca, hp = what["host"], what["hca"], int(what["port"])
                    w, sp = sub.width_speed(what, s, str(port))
                    peer = f'{sub.lid.get((h, hca, hp), 0):6d} {hp:4d}[  ] "{h} {hca}" ( )'
                else:
                    peer_sw, pport, _isl = what
                    w, sp = sub.width_speed(None, s, str(port))
                    peer = f'{sub.switch_lid[peer_sw]:6d} {pport:4d}[  ] "{sub.sw_desc(peer_sw)}" ( )'
                lines.append(f"      {lid:6d} {port:4d}[  ] =={_link(w, sp)}==>  {peer}")
            else:
                phys = "Disabled" if (ports.get(str(port)) or {}).get("link") == "down" else "Polling"
                lines.append(
                    f'      {lid:6d} {port:4d}[  ] ==({"":14}{"Down":>6}/{phys:>8})==>'
                    '             [  ] "" ( )'
                )
    _out("\n".join(lines))
    return 0


# --- LLDP --------------------------------------------------------------------------------------


def _mac(*parts: str) -> str:
    h = hashlib.sha256("/".join(("fabricops-lldp", *parts)).encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in h[:5])


def _age(fab: Path) -> str:
    try:
        secs = max(0, int(time.time() - (fab / "cabling.json").stat().st_mtime))
    except OSError:
        secs = 0
    d, rest = divmod(secs, 86400)
    return f"{d} day, {rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def host_neighbors(hw: dict[str, Any], built: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(netdev, cable) for this host's Ethernet ports whose cable is up at both ends."""
    fab = built["dir"]
    me = hw.get("host")
    out = []
    for hca in hw.get("hcas", []):
        for p in hca.get("ports", []):
            if p.get("link_layer") != "Ethernet" or not p.get("netdev") or p.get("phys_state") != "LinkUp":
                continue
            ln = next(
                (x for x in built["links"] if x.get("host") == me and x.get("netdev") == p["netdev"]), None
            )
            if ln and port_up(fab, ln["switch"], ln["switch_port"]):
                out.append((p["netdev"], ln))
    return out


def lldpctl(argv: list[str]) -> int:
    """``lldpctl [-f keyvalue] [IFACE ...]`` (lldpd's kv_writer.c: ``lldp.<if>.<path>=<value>``).

    What a switch advertises: its hostname, its port as an interface name (Cumulus docs, "LLDP":
    ``PortID: ifname swp47``), the port name again as description. Formats other than keyvalue
    are refused rather than imitated."""
    fmt, ifaces, it = "plain", [], iter(argv)
    for a in it:
        if a == "-f":
            fmt = next(it, "")
        elif a.startswith("-f") and len(a) > 2:
            fmt = a[2:]
        elif a in ("-h", "--help"):
            _out("Usage: lldpctl [OPTIONS ...] [INTERFACES ...]")
            return 0
        elif a.startswith("-"):
            _err(f"lldpctl: unknown option {a}")
            return 1
        else:
            ifaces.append(a)
    if fmt != "keyvalue":
        _err(f"lldpctl: the lab emulates -f keyvalue only (not {fmt or 'an empty format'})")
        return 1
    hw = services._hw()
    built = as_built()
    switches = built["switches"]
    lines = []
    for rid, (nd, ln) in enumerate(host_neighbors(hw, built), 1):
        if ifaces and nd not in ifaces:
            continue
        sw, port = ln["switch"], str(ln["switch_port"])
        os_name = (switches.get(sw) or {}).get("os")
        pre = f"lldp.{nd}"
        lines += [
            f"{pre}.via=LLDP",
            f"{pre}.rid={rid}",
            f"{pre}.age={_age(built['dir'])}",
            f"{pre}.chassis.mac={_mac('chassis', sw)}",
            f"{pre}.chassis.name={sw}",
            f"{pre}.chassis.descr={ONYX_DESCR if os_name == 'onyx' else CUMULUS_DESCR}",
            f"{pre}.chassis.Bridge.enabled=on",
            f"{pre}.chassis.Router.enabled=on",
            f"{pre}.port.ifname={port}",
            f"{pre}.port.descr={port}",
            f"{pre}.port.ttl=120",
        ]
    if lines:
        _out("\n".join(lines))
    return 0


def switch_neighbors(fabric_dir: str | Path, switch: str) -> dict[str, dict[str, str]]:
    """What ``switch`` hears on each port, as built: {port: {system, port_id, port_id_type,
    port_descr, chassis_id}}. Hosts run lldpd, which advertises the netdev's MAC as port ID and the
    netdev as description (lldpd tests/integration/test_basic.py: ``port.mac`` + ``port.descr=eth1``);
    switches advertise interface names."""
    built = as_built(fabric_dir)
    fab = built["dir"]
    cache: dict[str, Any] = {}
    out: dict[str, dict[str, str]] = {}
    for ln in built["links"]:
        if ln.get("switch") != switch or not port_up(fab, switch, ln["switch_port"], cache):
            continue
        out[str(ln["switch_port"])] = {
            "system": ln["host"],
            "port_id": _mac("port", ln["host"], ln["netdev"]),
            "port_id_type": "mac",
            "port_descr": ln["netdev"],
            "chassis_id": _mac("chassis", ln["host"]),
            "descr": HOST_DESCR,
        }
    for i in built["isls"]:
        for a, pa, b, pb in (
            ("switch_a", "port_a", "switch_b", "port_b"),
            ("switch_b", "port_b", "switch_a", "port_a"),
        ):
            if i.get(a) != switch:
                continue
            if not (port_up(fab, i[a], i[pa], cache) and port_up(fab, i[b], i[pb], cache)):
                continue
            os_b = (built["switches"].get(i[b]) or {}).get("os")
            out[str(i[pa])] = {
                "system": i[b],
                "port_id": str(i[pb]),
                "port_id_type": "ifname",
                "port_descr": str(i[pb]),
                "chassis_id": _mac("chassis", i[b]),
                "descr": ONYX_DESCR if os_b == "onyx" else CUMULUS_DESCR,
            }
    return out


def nvue_lldp_neighbor(fabric_dir: str | Path, switch: str, port: str) -> str:
    """``nv show interface <port> lldp neighbor`` (NVUE command reference, "LLDP"): columns as
    wide as their widest cell, two spaces apart, dashes under the header; nothing when the port
    hears no neighbour. Remote Port is the port ID when it is an interface name, else the
    description (a host's netdev)."""
    n = switch_neighbors(fabric_dir, switch).get(port)
    if n is None:
        return ""
    remote = n["port_id"] if n["port_id_type"] == "ifname" else n["port_descr"]
    head = ["Neighbor", "Remote IP", "Model", "SW Version", "Remote Port"]
    row = [n["system"], "", "", "", remote]
    widths = [max(len(h), len(c)) for h, c in zip(head, row, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return (
        "\n".join([fmt.format(*head).rstrip(), "  ".join("-" * w for w in widths), fmt.format(*row).rstrip()])
        + "\n"
    )


def onyx_lldp_remote(fabric_dir: str | Path, switch: str, ports: list[str]) -> str:
    """``show lldp interfaces ethernet [1/N] remote``: a block per port with a neighbour, the
    fields named as Onyx's JSON answer of this command names them (parsers/lldp.py)."""
    neigh = switch_neighbors(fabric_dir, switch)
    blocks = []
    for idx, port in enumerate(ports, 1):
        n = neigh.get(port)
        if n is None:
            continue
        sub = "Mac Address (3)" if n["port_id_type"] == "mac" else "Interface Name (5)"
        blocks.append(
            "\n".join(
                [
                    port,
                    f"Remote Index                 : {idx}",
                    f"Remote chassis id            : {n['chassis_id']} ; "
                    "chassis id subtype : Mac Address (4)",
                    f"Remote port-id               : {n['port_id']} ; port id subtype : {sub}",
                    f"Remote port description      : {n['port_descr']}",
                    f"Remote system name           : {n['system']}",
                    f"Remote system description    : {n['descr']}",
                ]
            )
        )
    return ("\n\n".join(blocks) + "\n") if blocks else ""
