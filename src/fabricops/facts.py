"""Fabric facts: what the fabric_facts module read on a host -> the facts roles and templates use.

Runs on the controller (called by the fabricops.fabric.fabric_facts action plugin). Tool output is
read with fabricops.parsers; a tool that is absent yields an honest empty value, a tool that printed
something unreadable is reported under ``errors`` instead of guessed.
"""

from __future__ import annotations

import re
from typing import Any

from fabricops.errors import ParseError
from fabricops.parsers import parse, to_data

_SYSFS_RATE = re.compile(
    r"^\s*(?P<rate>\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((?P<width>\d+X)\s*(?P<speed>[A-Z0-9]+)?\))?"
)
_IPV4_MAPPED = "0000:0000:0000:0000:0000:ffff:"


def sysfs_value(raw: str | None) -> str | None:
    """'4: ACTIVE' -> 'ACTIVE'; other values unchanged."""
    if raw is None:
        return None
    return raw.split(":", 1)[1].strip() if re.match(r"^\d+:\s", raw) else raw


def sysfs_rate(raw: str | None) -> dict[str, Any]:
    """'400 Gb/sec (4X NDR)' -> {'rate_gbps': 400, 'width': '4X', 'speed': 'NDR'}."""
    m = _SYSFS_RATE.match(raw or "")
    if not m:
        return {"rate_gbps": None, "width": None, "speed": None}
    rate = float(m["rate"])
    return {"rate_gbps": int(rate) if rate.is_integer() else rate, "width": m["width"], "speed": m["speed"]}


def gid_to_ipv4(gid: str) -> str | None:
    if not gid.startswith(_IPV4_MAPPED):
        return None
    tail = gid[len(_IPV4_MAPPED):].replace(":", "")
    return ".".join(str(int(tail[i : i + 2], 16)) for i in range(0, 8, 2))


def _port_netdev(dev: dict[str, Any], port: str, net: dict[str, Any]) -> str | None:
    netdevs = dev.get("netdevs") or []
    if len(netdevs) == 1:
        return netdevs[0]
    for name in netdevs:
        dev_port = (net.get(name) or {}).get("dev_port")
        if dev_port is not None and str(int(dev_port, 0) + 1) == str(port):
            return name
    return None


def _tool(raw: dict[str, Any], key: str, tool: str, errors: list[str]) -> Any:
    result = raw.get(key)
    if not result or result.get("rc") != 0:
        return None
    try:
        return to_data(parse(tool, result.get("stdout", "")))
    except ParseError as exc:
        errors.append(f"{tool}: {exc}")
        return None


def build_facts(raw: dict[str, Any]) -> dict[str, Any]:
    errors: list[str] = []
    net = raw.get("net") or {}
    hcas = []
    for name, dev in sorted((raw.get("infiniband") or {}).items()):
        ports = []
        for port_name, port in sorted(dev.get("ports", {}).items(), key=lambda kv: int(kv[0])):
            gids = port.get("gids") or []
            # the lowest index first: NCCL's own selection (2.21.5+) takes the first IPv4 RoCE v2 GID
            # of the table, so the index written for an older NCCL is the one a newer one would pick
            v2_ipv4 = sorted(
                (g for g in gids if g.get("type") == "RoCE v2" and gid_to_ipv4(g["gid"])),
                key=lambda g: int(g["index"]),
            )
            ports.append({
                "port": int(port_name),
                "state": sysfs_value(port.get("state")),
                "phys_state": sysfs_value(port.get("phys_state")),
                "link_layer": port.get("link_layer"),
                **sysfs_rate(port.get("rate")),
                "lid": int(port["lid"], 0) if port.get("lid") else None,
                "netdev": _port_netdev(dev, port_name, net),
                "gids": gids,
                "roce_v2_ipv4_gid_index": v2_ipv4[0]["index"] if v2_ipv4 else None,
                "roce_v2_ipv4": gid_to_ipv4(v2_ipv4[0]["gid"]) if v2_ipv4 else None,
            })
        numa = dev.get("numa_node")
        hcas.append({
            "name": name,
            "fw_ver": dev.get("fw_ver"),
            "node_guid": dev.get("node_guid"),
            "hca_type": dev.get("hca_type"),
            "board_id": dev.get("board_id"),
            "numa_node": int(numa) if numa not in (None, "", "-1") else None,
            "ports": ports,
        })

    def up(link_layer: str) -> list[str]:
        return [
            f"{h['name']}:{p['port']}"
            for h in hcas
            for p in h["ports"]
            if p["link_layer"] == link_layer and p["state"] == "ACTIVE"
        ]

    ofed = _tool(raw, "ofed_info", "ofed_info", errors)
    query = _tool(raw, "nvidia_smi_query", "nvidia-smi-query", errors)
    gpus = []
    for row in (query or {}).get("rows", []):
        gpus.append({
            "index": row.get("index"),
            "name": row.get("name"),
            "uuid": row.get("uuid"),
            "pci_bus_id": row.get("pci.bus_id"),
        })
    driver = next((r.get("driver_version") for r in (query or {}).get("rows", [])), None)
    return {
        "ofed": {
            "installed": bool(ofed and ofed.get("installed")),
            "version": (ofed or {}).get("version"),
        },
        "hcas": hcas,
        "ib_ports_up": up("InfiniBand"),
        "roce_ports_up": up("Ethernet"),
        "netdevs": {
            name: {
                "type": int(n["type"]) if n.get("type") else None,
                "mtu": int(n["mtu"]) if n.get("mtu") else None,
                "operstate": n.get("operstate"),
                "mode": n.get("mode"),
                "address": n.get("address"),
            }
            for name, n in sorted(net.items())
        },
        "gpus": gpus,
        "gpu_count": len(gpus),
        "gpu_driver_version": driver,
        "errors": errors,
    }
