"""The lab's networks: management bridge, per-host namespaces and the data-plane bridges.

Everything is created inside names the lab owns and nothing else is touched:
- ``fo-mgmt``: bridge in the root namespace, 198.51.100.1/24 (the controller side);
- ``fo-<host>``: a named network namespace per host (systemd-nspawn joins it with
  ``--network-namespace-path``), holding ``eth0`` (management) and one veth per HCA port netdev,
  created *before* boot so the host's own ifupdown raises them like a real server's NICs;
- ``fo-fabric``: a namespace with one Linux bridge per switch (``br-<switch>``); the far end of
  every host port veth is a port of its switch's bridge; in a multi-tier fabric each leaf's bridge
  has one veth trunk to the fabric's first spine's bridge (:func:`fabric_trunks`).
MACs are fixed (derived from positions): a recycled address with a new random MAC leaves stale ARP
entries that stall SSH (LAB-NOTES). IPv6 is disabled on the lab's own bridges, forwarding stays off.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import subprocess
from pathlib import Path
from typing import Any

from fabricops.errors import FabricopsError
from fabricops_lab import hardware
from fabricops_lab.topology import CONTROLLER_IP, MGMT_PREFIX

log = logging.getLogger(__name__)

MGMT_BRIDGE = "fo-mgmt"
MGMT_BRIDGE_MAC = "02:fb:ff:00:00:01"
FABRIC_NS = "fo-fabric"
NETNS_DIR = Path("/run/netns")
FABRIC_MTU = 9216


def run(argv: list[str], check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, input=input)
    if check and proc.returncode != 0:
        raise FabricopsError(f"{' '.join(argv[:6])} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def ip_batch(lines: list[str], netns: str | None = None) -> None:
    if not lines:
        return
    argv = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    run(argv, input="\n".join(lines) + "\n")


def link_exists(name: str, netns: str | None = None) -> bool:
    argv = ["ip", *(["-n", netns] if netns else []), "link", "show", "dev", name]
    return subprocess.run(argv, capture_output=True).returncode == 0


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def host_netns(host: str) -> str:
    return f"fo-{host}"


def mgmt_veth(host_index: int) -> str:
    return f"fo-m{host_index}"


def bridge_name(switch: str) -> str:
    name = f"br-{switch}"
    if len(name) <= 15:
        return name
    return f"br-{switch[:7]}-{hashlib.sha256(switch.encode()).hexdigest()[:4]}"


def fabric_veth(host_index: int, hca_index: int, port: int) -> str:
    return f"h{host_index}-{hca_index}-{port}"


def _sysctl_in(netns: str | None, key: str, value: str) -> None:
    path = "/proc/sys/" + key.replace(".", "/")
    if netns is None:
        with contextlib.suppress(OSError):
            Path(path).write_text(value)
        return
    run(["ip", "netns", "exec", netns, "sh", "-c", f"echo {value} > {path}"], check=False)


# --- management bridge and fabric namespace -----------------------------------------------


def ensure_mgmt_bridge() -> None:
    if not link_exists(MGMT_BRIDGE):
        ip_batch(
            [
                f"link add {MGMT_BRIDGE} address {MGMT_BRIDGE_MAC} type bridge stp_state 0 forward_delay 0",
            ]
        )
        # The bridge owns no IPv6: no router solicitations, no DAD on the lab network.
        _sysctl_in(None, f"net.ipv6.conf.{MGMT_BRIDGE}.disable_ipv6", "1")
        ip_batch([f"addr add {CONTROLLER_IP}/{MGMT_PREFIX} dev {MGMT_BRIDGE}", f"link set {MGMT_BRIDGE} up"])


def fabric_trunks(switches: list[dict[str, Any]], links: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(leaf, spine) bridge pairs that join the switches of one multi-tier fabric at layer 2: every
    linked leaf to the fabric's first spine (by name), a star, so the bridges (no STP) hold no loop.
    Hosts on different leaves then reach each other's data addresses (the perftest control
    connection, IPoIB); which ISLs a flow crosses is the physics' business (cabling.json isls), not
    the bridges'."""
    names = [s["name"] for s in switches]
    parent = {n: n for n in names}

    def root(n: str) -> str:
        while parent[n] != n:
            n = parent[n]
        return n

    for ln in links:
        if ln["switch_a"] in parent and ln["switch_b"] in parent:
            parent[root(ln["switch_a"])] = root(ln["switch_b"])
    tier = {s["name"]: s.get("tier", "leaf") for s in switches}
    linked = {ln[k] for ln in links for k in ("switch_a", "switch_b") if ln[k] in parent}
    hub: dict[str, str] = {}
    for n in sorted(linked):
        if tier[n] == "spine":
            hub.setdefault(root(n), n)
    return [(n, hub[root(n)]) for n in names if n in linked and tier[n] == "leaf" and root(n) in hub]


def trunk_veths(leaf: str) -> tuple[str, str]:
    """The veth pair (leaf end, spine end) of a leaf's layer-2 trunk in fo-fabric."""
    h = hashlib.sha256(leaf.encode()).hexdigest()[:8]
    return f"tl-{h}", f"ts-{h}"


def ensure_fabric(switches: list[dict[str, Any]], links: list[dict[str, Any]] | None = None) -> None:
    if not netns_exists(FABRIC_NS):
        run(["ip", "netns", "add", FABRIC_NS])
        _sysctl_in(FABRIC_NS, "net.ipv6.conf.all.disable_ipv6", "1")
        _sysctl_in(FABRIC_NS, "net.ipv6.conf.default.disable_ipv6", "1")
        ip_batch(["link set lo up"], FABRIC_NS)
    lines = []
    for sw in switches:
        br = bridge_name(sw["name"])
        if not link_exists(br, FABRIC_NS):
            lines += [
                f"link add {br} type bridge stp_state 0 forward_delay 0 ageing_time 30000",
                f"link set {br} mtu {FABRIC_MTU}",
                f"link set {br} up",
            ]
    for leaf, spine in fabric_trunks(switches, links or []):
        a, b = trunk_veths(leaf)
        if not link_exists(a, FABRIC_NS):
            lines += [
                f"link add {a} mtu {FABRIC_MTU} type veth peer name {b} mtu {FABRIC_MTU}",
                f"link set {a} master {bridge_name(leaf)} up",
                f"link set {b} master {bridge_name(spine)} up",
            ]
    ip_batch(lines, FABRIC_NS)


# --- a host's namespace -----------------------------------------------------------------------


def create_host_netns(topo: dict[str, Any], host: dict[str, Any], hw: dict[str, Any]) -> None:
    """The host's namespace with eth0 and every HCA port netdev, wired to the bridges."""
    ns = host_netns(host["name"])
    if netns_exists(ns):
        destroy_host_netns(host)
    run(["ip", "netns", "add", ns])
    idx = host["index"]
    cable = {(c["host"], c["netdev"]): c for c in topo["cabling"]}
    sw_by_name = {s["name"]: s for s in topo["switches"]}
    root_lines = [
        f"link add {mgmt_veth(idx)} address {hardware.mgmt_mac(idx, 'bridge')} type veth "
        f"peer name eth0 address {hardware.mgmt_mac(idx, 'host')} netns {ns}",
        f"link set {mgmt_veth(idx)} master {MGMT_BRIDGE} up",
    ]
    fabric_lines = []
    for k, (hca_t, hca) in enumerate(zip(host["hcas"], hw["hcas"], strict=True)):
        for _p_t, p in zip(hca_t["ports"], hca["ports"], strict=True):
            mac = p["mac"] or hardware.ipoib_veth_mac(p["port_guid"])
            far = fabric_veth(idx, k, p["port"])
            fabric_lines.append(
                f"link add {far} address {hardware.fabric_peer_mac(idx, k, p['port'])} mtu {FABRIC_MTU} "
                f"type veth peer name {p['netdev']} address {mac} netns {ns}"
            )
            c = cable.get((host["name"], p["netdev"]))
            if c and c["switch"] in sw_by_name:
                fabric_lines.append(f"link set {far} master {bridge_name(c['switch'])} up")
            # An uncabled port stays down (no carrier), as on a real host.
    ip_batch(root_lines)
    ip_batch(fabric_lines, FABRIC_NS)
    ip_batch(["link set lo up"], ns)


def destroy_host_netns(host: dict[str, Any]) -> None:
    """Remove the host's namespace (its veths go with it) and any root-side leftovers."""
    ns = host_netns(host["name"])
    if netns_exists(ns):
        run(["ip", "netns", "del", ns], check=False)
    if link_exists(mgmt_veth(host["index"])):
        run(["ip", "link", "del", mgmt_veth(host["index"])], check=False)
    # The kernel frees a deleted namespace, and with it the fabric-side ends of its veths, only when
    # nothing refers to it any more; a host restarting while its old namespace lingers would find those
    # names taken ("File exists"). Deleting one end of a veth deletes the pair.
    for k, hca in enumerate(host.get("hcas") or []):
        for p in hca.get("ports") or []:
            end = fabric_veth(host["index"], k, p["port"])
            if link_exists(end, FABRIC_NS):
                run(["ip", "-n", FABRIC_NS, "link", "del", end], check=False)


def port_link(host_index: int, hca_index: int, port: int, up: bool) -> None:
    """Carrier on/off for one host port, seen from the switch side (used for link faults)."""
    run(
        [
            "ip",
            "-n",
            FABRIC_NS,
            "link",
            "set",
            fabric_veth(host_index, hca_index, port),
            "up" if up else "down",
        ]
    )


def teardown(topo: dict[str, Any] | None) -> None:
    """Remove the fabric namespace and the management bridge (hosts' namespaces first)."""
    if topo:
        for h in topo["hosts"]:
            destroy_host_netns(h)
    else:
        for p in NETNS_DIR.glob("fo-*") if NETNS_DIR.is_dir() else []:
            if p.name != FABRIC_NS:
                run(["ip", "netns", "del", p.name], check=False)
    if netns_exists(FABRIC_NS):
        run(["ip", "netns", "del", FABRIC_NS], check=False)
    if link_exists(MGMT_BRIDGE):
        run(["ip", "link", "del", MGMT_BRIDGE], check=False)


def lab_links() -> list[str]:
    """Links in the root namespace that the lab made (fo-*), for status and the no-trace test."""
    out = run(["ip", "-o", "link", "show"], check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(": ")
        if len(parts) > 1:
            name = parts[1].split("@")[0]
            if name.startswith("fo-"):
                names.append(name)
    return names
