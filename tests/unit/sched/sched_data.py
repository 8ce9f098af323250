"""Shared inputs of the scheduler-topology tests: the two-tier lab's planned cabling (through the lab's
own topology loader and inventory writer, so the tests follow the lab's shape), an ibnetdiscover text
rendered from a cabling list, and a fake inventory for the command."""

from __future__ import annotations

import copy
import re
from typing import Any

from fabricops.sched.names import expand
from fabricops.verify import cabling as vcab

LAYERS_TWO_TIER = {
    **{f"ib-leaf{i}": "InfiniBand" for i in range(1, 5)},
    **{f"ib-spine{i}": "InfiniBand" for i in (1, 2)},
    **{f"leaf{i}": "Ethernet" for i in range(1, 5)},
    **{f"spine{i}": "Ethernet" for i in (1, 2)},
}


def two_tier(n: int = 16) -> dict[str, Any]:
    """all.yml of the two-tier lab with N hosts: fabricops_cabling and fabricops_switch_links."""
    from fabricops_lab import inventory, topology

    topo = topology.resolve("two-tier", n)
    return copy.deepcopy(inventory.all_yml({"topology": topo}, None))


def swap(cabling: list[dict[str, Any]], h1: str, h2: str, netdev: str = "ibp26s0") -> list[dict[str, Any]]:
    """The cabling with the ``netdev`` cables of two hosts exchanged (each on the other's leaf port)."""
    out = copy.deepcopy(cabling)
    a = next(c for c in out if c["host"] == h1 and c["netdev"] == netdev)
    b = next(c for c in out if c["host"] == h2 and c["netdev"] == netdev)
    a["switch"], b["switch"] = b["switch"], a["switch"]
    a["switch_port"], b["switch_port"] = b["switch_port"], a["switch_port"]
    return out


def ibnetdiscover(cabling: list[dict[str, Any]], links: list[dict[str, Any]], layers: dict[str, str]) -> str:
    """ibnetdiscover output (its real format: a switch block per switch, one line per cabled port) for
    the InfiniBand cables of ``cabling`` and ``links``."""
    ib = {s for s, lay in layers.items() if lay == "InfiniBand"}
    guid = {s: f"fc6a1c03000{i:05x}" for i, s in enumerate(sorted(ib), start=1)}
    hosts = sorted({c["host"] for c in cabling})
    hguid = {h: f"b83fd20300{i:06x}" for i, h in enumerate(hosts, start=1)}
    ports: dict[str, list[tuple[int, str]]] = {s: [] for s in guid}
    for c in cabling:
        if c["switch"] not in ib:
            continue
        g = hguid[c["host"]]
        ports[c["switch"]].append(
            (int(c["switch_port"]), f'"H-{g}"[{c["port"]}]({g}) \t\t# "{c["host"]} {c["hca"]}" lid 9 4xNDR')
        )
    for ln in links:
        a, b = ln["switch_a"], ln["switch_b"]
        if a not in ib:
            continue
        ports[a].append(
            (int(ln["port_a"]), f'"S-{guid[b]}"[{ln["port_b"]}]\t\t# "MF0;{b}:MQM9700/U1" lid 4 4xNDR')
        )
        ports[b].append(
            (int(ln["port_b"]), f'"S-{guid[a]}"[{ln["port_a"]}]\t\t# "MF0;{a}:MQM9700/U1" lid 4 4xNDR')
        )
    out = ["#", "# Topology file: generated on Tue Dec  1 10:00:00 2026", "#", ""]
    for s in sorted(guid):
        out.append(f"switchguid=0x{guid[s]}({guid[s]})")
        out.append(f'Switch\t64 "S-{guid[s]}"\t\t# "MF0;{s}:MQM9700/U1" enhanced port 0 lid 1 lmc 0')
        out += [f"[{p}]\t{rest}" for p, rest in sorted(ports[s])]
        out.append("")
    return "\n".join(out)


class FakeRun:
    """``run(host, command, timeout)`` answering from a table; ibnetdiscover from ``ibnet``."""

    def __init__(self, ibnet: str = "", lldp: dict[str, str] | None = None, answers=None):
        self.ibnet, self.lldp, self.answers = ibnet, lldp or {}, answers or {}
        self.calls: list[tuple[str, str]] = []

    def __call__(self, host, cmd, timeout=60):
        self.calls.append((host, cmd))
        if (host, cmd) in self.answers:
            return self.answers[(host, cmd)]
        if cmd == "ibnetdiscover":
            return {"rc": 0, "stdout": self.ibnet, "stderr": ""}
        if cmd == vcab.LLDP_COMMAND and host in self.lldp:
            return {"rc": 0, "stdout": self.lldp[host], "stderr": ""}
        return {"rc": 127, "stdout": "", "stderr": f"sh: 1: {cmd}: not found"}


class FakeInventory:
    """What :func:`fabricops.sched.cli.open_inventory` returns, without Ansible."""

    def __init__(
        self, hostvars: dict[str, dict[str, Any]], layers: dict[str, str], run=None, switch_lldp=None
    ):
        self.hosts = sorted(hostvars)
        self._hv = hostvars
        self._layers = layers
        self.run = run or FakeRun()
        self.switch_lldp = switch_lldp

    def hostvars(self, host):
        return dict(self._hv[host])

    def inventory_vars(self, name):
        return dict(self._hv.get(name, {}))

    def switch_link_layers(self):
        return dict(self._layers)

    def switch_reader(self, roce):
        return None


def hostvars_for(data: dict[str, Any], **per_host: dict[str, Any]) -> dict[str, dict[str, Any]]:
    hosts = sorted({c["host"] for c in data["fabricops_cabling"]})
    return {h: {**data, **per_host.get(h, {})} for h in hosts}


def parse(text: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(leaf -> nodes, switch -> child switches) read back from topology.conf text."""
    leaves, uppers = {}, {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"SwitchName=(\S+) (Nodes|Switches)=(\S+)", line)
        assert m, f"not a topology.conf switch line: {line!r}"
        (leaves if m.group(2) == "Nodes" else uppers)[m.group(1)] = expand(m.group(3))
    return leaves, uppers
