"""Write a plan as an inventory skeleton and a lab topology for a scaled-down slice (docs/plan.md).

``inventory(plan)`` returns the files of ``DIR``: ``hosts.yml`` (groups ``gpu_hosts`` and
``switches`` / ``ib_switches``), ``group_vars/all.yml`` (``fabricops_hardware_profile``,
``fabricops_roce`` when the fabric is RoCE, ``fabricops_cabling`` host-to-leaf cables and
``fabricops_switch_links`` between tiers) and ``lab-topology.yml``. A plan on multi-node NVLink compute
trays (``--profile gb200-nvl72``) gives every tray host its NVLink domain (``fabricops_nvlink_domain``,
which the nvidia_imex role and ``fabricops topology --format block`` read) and ``fabricops_plan.nvlink``
the domains' sizes. The lab topology: 2-4 hosts of the plan's shape,
cabled as the plan cables them (a multi-tier plan: with the leaves' spines and links, two-tier),
which ``fabricops_lab.topology.load`` accepts (the lab's own tests hold every slice to its loader:
the product does not import the lab, which a production controller does not have).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from fabricops.model import roce as roce_model
from fabricops.plan.recommend import Plan

__all__ = [
    "HEADER",
    "cabling",
    "host_names",
    "inventory",
    "lab_slice",
    "netdevs",
    "write",
]

HEADER = (
    "# Written by `fabricops plan --write-inventory`: a skeleton. Fill in ansible_host (and the\n"
    "# switches' credentials as lookups, never as text) before running the playbooks.\n"
)
#: PCI buses (decimal, as in predictable netdev names) for the rails' NICs: the lab derives the PCI
#: address and NUMA node from the name (ibp26s0 -> bus 0x1a, NUMA 0; buses >= 0x80 on NUMA 1).
RAIL_BUSES = (26, 60, 77, 94, 156, 188, 204, 220, 27, 61, 78, 95, 157, 189, 205, 221)
LAB_MAX_SLICE_HOSTS = 4
#: the most hosts a lab topology holds (``fabricops_lab.topology.MAX_HOSTS``; a test holds them equal)
LAB_MAX_HOSTS = 63
LAB_MAX_ROCE_RAILS = 4
LIST_KEYS = ("fabricops_cabling", "fabricops_switch_links")
PORT_FORMAT = {"ib": "{n}", "onyx": "Eth1/{n}", "cumulus": "swp{n}"}
#: The fabric-wide RoCE lossless class (REFERENCE.md; model/roce.py DEFAULTS), checked by roce.validate.
ROCE = {
    "lossless_priority": 3,
    "dscp": 26,
    "cnp_dscp": 48,
    "cnp_priority": 6,
    "trust": "dscp",
    "ecn": {"min_kb": 150, "max_kb": 1500},
    "roce_mode": 2,
}
NVL_HEADER = (
    "# NVLink domains: nvidia_imex lists every tray of a domain (fabricops_nvlink_domain) in its\n"
    "# nodes_config.cfg by nvidia_imex_address or ansible_host, which must be IP addresses.\n"
)
#: GPU memory as ``nvidia-smi --query-gpu=name,memory.total`` prints it, for a lab slice of a GPU the lab
#: does not know by name ("NVIDIA GB200, 189471 MiB" and "NVIDIA GB300, 284208 MiB" in nvidia-smi
#: output quoted in public repositories, e.g. TACC Vista run notes for GB200).
GPU_MEMORY_MIB = {"NVIDIA GB200": 189471, "NVIDIA GB300": 284208}


def netdevs(link_layer: str, rails: int) -> list[str]:
    """Netdev name of each rail's NIC port: ibp26s0, ibp60s0, ... or enp26s0f0np0, ..."""
    if rails > len(RAIL_BUSES):
        raise ValueError(f"at most {len(RAIL_BUSES)} rails")
    if link_layer == "InfiniBand":
        return [f"ibp{b}s0" for b in RAIL_BUSES[:rails]]
    return [f"enp{b}s0f0np0" for b in RAIL_BUSES[:rails]]


def host_names(nodes: int) -> list[str]:
    width = max(2, len(str(nodes)))
    return [f"gpu{i:0{width}d}" for i in range(1, nodes + 1)]


def _port(os_: str, n: int) -> str:
    return PORT_FORMAT[os_].replace("{n}", str(n))


def _switch_names(plan: Plan) -> dict[str, list[str]]:
    d = plan.design
    names: dict[str, list[str]] = {}
    width = max(2, len(str(max(d.switches.values() or [1]))))
    if d.rail_optimised and d.tiers >= 2 and d.topology != "Dragonfly+":
        per = d.leaves_per_rail
        names["leaf"] = [f"leaf-r{r + 1}-{j + 1:0{width}d}" for r in range(d.rails) for j in range(per)]
    else:
        names["leaf"] = [f"leaf-{j + 1:0{width}d}" for j in range(d.switches.get("leaf", 0))]
    for tier in ("spine", "core"):
        names[tier] = [f"{tier}-{j + 1:0{width}d}" for j in range(d.switches.get(tier, 0))]
    return names


def cabling(plan: Plan) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, list[str]]]:
    """(host cables, switch-to-switch links, switch names per tier) of the whole plan."""
    d = plan.design
    if d.nodes <= 1 or plan.switch is None:
        return [], [], {}
    os_ = plan.switch.lab_os
    names = _switch_names(plan)
    hosts = host_names(d.nodes)
    nds = netdevs(plan.link_layer or "InfiniBand", d.rails)
    host_cables: list[dict[str, Any]] = []
    for i, h in enumerate(hosts):
        for r in range(d.rails):
            if d.tiers == 1:
                leaf, port = 0, r * d.nodes + i + 1
            elif d.rail_optimised and d.topology != "Dragonfly+":
                leaf, port = r * d.leaves_per_rail + i // d.leaf_down, i % d.leaf_down + 1
            else:
                e = i * d.rails + r
                leaf, port = e // d.leaf_down, e % d.leaf_down + 1
            host_cables.append(
                {
                    "host": h,
                    "netdev": nds[r],
                    "hca": f"mlx5_{r}",
                    "port": 1,
                    "switch": names["leaf"][leaf],
                    "switch_port": _port(os_, port),
                }
            )
    links: list[dict[str, Any]] = []
    k = d.radix
    if d.topology == "two-tier fat tree":
        spines = names["spine"]
        used = [0] * len(spines)
        for li, leaf in enumerate(names["leaf"]):
            for u in range(d.leaf_up):
                s = (li * d.leaf_up + u) % len(spines)
                used[s] += 1
                links.append(
                    _link(leaf, _port(os_, d.leaf_down + u + 1), spines[s], _port(os_, used[s]), "leaf_spine")
                )
    elif d.topology == "three-tier fat tree":
        half = k // 2
        spines, cores = names["spine"], names["core"]
        s_used = [0] * len(spines)
        base = 0
        pod_spines: list[list[int]] = []
        for p in range(d.groups):
            n_leaves = min(half, len(names["leaf"]) - p * half)
            n_sp = math.ceil(n_leaves * d.leaf_up / half)
            pod_spines.append(list(range(base, base + n_sp)))
            base += n_sp
        for li, leaf in enumerate(names["leaf"]):
            pod = pod_spines[li // half]
            local = li % half
            for u in range(d.leaf_up):
                s = pod[(local * d.leaf_up + u) % len(pod)]
                s_used[s] += 1
                links.append(
                    _link(
                        leaf, _port(os_, d.leaf_down + u + 1), spines[s], _port(os_, s_used[s]), "leaf_spine"
                    )
                )
        c_used = [0] * len(cores)
        for si, sp in enumerate(spines):
            for u in range(half):
                c = (si * half + u) % len(cores)
                c_used[c] += 1
                links.append(
                    _link(sp, _port(os_, half + u + 1), cores[c], _port(os_, c_used[c]), "spine_core")
                )
    elif d.topology == "Dragonfly+":
        half = k // 2
        spines = names["spine"]
        for li, leaf in enumerate(names["leaf"]):
            g = li // half
            for u in range(half):
                s = g * half + u
                links.append(
                    _link(leaf, _port(os_, half + u + 1), spines[s], _port(os_, li % half + 1), "leaf_spine")
                )
        groups = d.groups
        per_pair = (half * half) // (groups - 1)
        nxt = [0] * groups  # next free global port of each group (spine-major)

        def take(g: int) -> tuple[str, str]:
            n = nxt[g]
            nxt[g] += 1
            return spines[g * half + n // half], _port(os_, half + n % half + 1)

        for a in range(groups):
            for b in range(a + 1, groups):
                for _ in range(per_pair):
                    sa, pa = take(a)
                    sb, pb = take(b)
                    links.append(_link(sa, pa, sb, pb, "global"))
    return host_cables, links, names


def _link(a: str, pa: str, b: str, pb: str, tier: str) -> dict[str, Any]:
    return {"switch_a": a, "port_a": pa, "switch_b": b, "port_b": pb, "tier": tier}


def _switch_entry(plan: Plan, tier: str) -> dict[str, Any]:
    assert plan.switch is not None
    return {
        "fabricops_switch_os": plan.switch.lab_os,
        "fabricops_switch_model": plan.switch.name,
        "fabricops_switch_tier": tier,
    }


def hosts_yml(plan: Plan, names: dict[str, list[str]]) -> dict[str, Any]:
    n = plan.nvlink
    hosts: dict[str, dict[str, Any]] = {
        h: ({} if n is None else {"fabricops_nvlink_domain": n.domain_of(i)})
        for i, h in enumerate(host_names(plan.design.nodes))
    }
    children: dict[str, Any] = {"gpu_hosts": {"hosts": hosts, "vars": {"ansible_user": "root"}}}
    if names and plan.switch is not None:
        members = {n: _switch_entry(plan, tier) for tier, ns in names.items() for n in ns}
        if plan.switch.lab_os == "ib":
            children["ib_switches"] = {"hosts": members}
        else:
            children["switches"] = {
                "children": {f"{plan.switch.lab_os}_switches": {"hosts": members}},
                "vars": {"ansible_connection": "local"},
            }
    return {"all": {"children": children}}


def all_yml(plan: Plan, host_cables: list[dict], links: list[dict]) -> dict[str, Any]:
    """``group_vars/all.yml`` as data (keys in the order they are written)."""
    data: dict[str, Any] = {"fabricops_hardware_profile": plan.hardware_profile}
    if plan.roce:
        roce_model.validate(ROCE)  # the class the roles will read must validate
        data["fabricops_roce"] = dict(ROCE, ecn=dict(ROCE["ecn"]))
    d = plan.design
    data["fabricops_plan"] = {
        "topology": d.topology,
        "gpus": d.gpus,
        "nodes": d.nodes,
        "rails": d.rails,
        "switch": d.switch,
        "switches": dict(d.switches),
        "cables": dict(d.cables),
        "bisection_gbps": d.bisection_gbps,
    }
    n = plan.nvlink
    if n is not None:
        data["fabricops_plan"]["nvlink"] = {
            "profile": n.profile,
            "configuration": n.configuration,
            "domain_size": n.domain_size,
            "domains": dict(n.domain_trays),
            "switch_trays_per_domain": n.switch_trays_per_domain,
        }
    data["fabricops_cabling"] = host_cables
    if links:
        data["fabricops_switch_links"] = links
    return data


def _render_all_yml(data: dict[str, Any]) -> str:
    """YAML for group_vars/all.yml; the long cable lists one flow mapping per line (JSON is YAML),
    which keeps a 100,000-GPU plan quick to write and easy to grep."""
    head = {k: v for k, v in data.items() if k not in LIST_KEYS}
    text = _dump(head)
    for key in LIST_KEYS:
        if key not in data:
            continue
        rows = data[key]
        if not rows:
            text += f"{key}: []\n"
            continue
        text += f"{key}:\n" + "".join(f"- {json.dumps(r)}\n" for r in rows)
    return text


def lab_slice(
    plan: Plan,
    hosts: int | None = None,
    wiring: tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, list[str]]] | None = None,
) -> dict[str, Any]:
    """A lab topology (raw, as the file holds it) of 2-4 hosts shaped like the plan's nodes.

    A multi-tier plan (``tiers >= 2``) gives a two-tier slice: the plan's first hosts cabled as the
    plan cables them, the leaves they reach, the spines those leaves link to most (two, more only
    when a leaf reaches neither) and the plan's leaf-spine links between them (``links:``, the
    ``fabricops_switch_links`` shape, same names and ports). The lab models two tiers: spine-core
    and Dragonfly+ global links stay out. WIRING is :func:`cabling`'s result when the caller has it."""
    d = plan.design
    n = hosts or max(2, min(LAB_MAX_SLICE_HOSTS, d.nodes))
    n = min(n, LAB_MAX_HOSTS)
    link_layer = plan.link_layer or "InfiniBand"
    sw = plan.switch
    os_ = sw.lab_os if sw else "ib"
    speed = plan.host_speed or "NDR"
    rails = d.rails or 1
    if link_layer == "Ethernet":
        rails = min(rails, LAB_MAX_ROCE_RAILS)
    nds = netdevs(link_layer, rails)
    port = {"port": 1, "link_layer": link_layer, "speed": speed, "netdev": None}
    if link_layer == "InfiniBand":
        port["width"] = "4X"
    hcas = [{"name": f"mlx5_{r}", "ports": [dict(port, netdev=nds[r])]} for r in range(rails)]
    gpu: dict[str, Any] = {"model": plan.gpu_model, "count": d.gpus_per_node, "topology": "nvswitch"}
    if plan.nvlink is not None and plan.gpu_model in GPU_MEMORY_MIB:  # a GPU the lab does not know by name
        gpu.update(nvlink_gen=plan.nvlink.nvlink, memory_mib=GPU_MEMORY_MIB[plan.gpu_model])
    two_tier = d.tiers >= 2 and sw is not None and d.nodes > 1
    names = host_names(d.nodes)[:n] if two_tier else host_names(n)  # two-tier: the plan's own hosts
    lab_name = f"plan-{d.gpus}gpu"
    head = {
        "name": lab_name,
        "hardware_profile": plan.hardware_profile or lab_name,
        "host_profiles": {"node": {"gpus": gpu, "hcas": hcas}},
        "hosts": [{"name": h, "profile": "node"} for h in names],
    }
    if two_tier:
        return {**head, **_two_tier_slice(plan, names, nds, wiring or cabling(plan))}
    plan_leaves = _switch_names(plan)["leaf"] if sw is not None and d.nodes > 1 else []
    if d.tiers >= 2 and d.rail_optimised and d.topology != "Dragonfly+" and rails > 1:
        # the first leaf of every rail's leaf group, named as in the plan
        sw_names = [plan_leaves[r * d.leaves_per_rail] for r in range(rails)]
    else:
        sw_names = plan_leaves[:1] or ["leaf-01"]
    radix = sw.ports if sw else 64
    need = n * rails if len(sw_names) == 1 else n
    switches = [
        {
            "name": s,
            "os": os_,
            "model": sw.name if sw else "NVIDIA Quantum-2 QM9700",
            "ports": {"format": PORT_FORMAT[os_], "first": 1, "count": max(radix, need)},
        }
        for s in sw_names
    ]
    cables = []
    for i, h in enumerate(names):
        for r in range(rails):
            if len(sw_names) == 1:
                s, p = sw_names[0], r * n + i + 1
            else:
                s, p = sw_names[r], i + 1
            cables.append({"host": h, "netdev": nds[r], "switch": s, "port": _port(os_, p)})
    return {**head, "switches": switches, "cabling": cables}


SLICE_SPINES = 2  #: spines in a two-tier lab slice (more only when a slice leaf reaches none of them)


def _two_tier_slice(
    plan: Plan,
    names: list[str],
    nds: list[str],
    wiring: tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, list[str]]],
) -> dict[str, Any]:
    """switches, cabling and links of a two-tier slice: the plan's own cables, names and ports."""
    host_cables, links, _ = wiring
    assert plan.switch is not None
    os_, model, radix = plan.switch.lab_os, plan.switch.name, plan.switch.ports
    wanted_h, wanted_nd = set(names), set(nds)
    cables = [
        {"host": c["host"], "netdev": c["netdev"], "switch": c["switch"], "port": c["switch_port"]}
        for c in host_cables
        if c["host"] in wanted_h and c["netdev"] in wanted_nd
    ]
    leaves = list(dict.fromkeys(c["switch"] for c in cables))
    in_slice = set(leaves)
    up = [ln for ln in links if ln["tier"] == "leaf_spine" and ln["switch_a"] in in_slice]
    reach: dict[str, set[str]] = {}
    for ln in up:
        reach.setdefault(ln["switch_b"], set()).add(ln["switch_a"])
    order = sorted(reach, key=lambda sp: (-len(reach[sp]), list(reach).index(sp)))
    spines = order[:SLICE_SPINES]
    for sp in order[SLICE_SPINES:]:  # a leaf that reaches none of the spines chosen so far
        if reach[sp] - set().union(*(reach[x] for x in spines)):
            spines.append(sp)
    chosen = set(spines)
    isls = [
        {k: ln[k] for k in ("switch_a", "port_a", "switch_b", "port_b", "tier")}
        for ln in up
        if ln["switch_b"] in chosen
    ]
    used: dict[str, int] = {}
    for sname, port in [(c["switch"], c["port"]) for c in cables] + [
        (ln[f"switch_{e}"], ln[f"port_{e}"]) for ln in isls for e in "ab"
    ]:
        num = int("".join(ch for ch in str(port).rsplit("/", 1)[-1] if ch.isdigit()) or 0)
        used[sname] = max(used.get(sname, 0), num)
    switches = [
        {
            "name": name,
            "os": os_,
            "tier": tier,
            "model": model,
            "ports": {"format": PORT_FORMAT[os_], "first": 1, "count": max(radix, used.get(name, 0))},
        }
        for tier, group in (("leaf", leaves), ("spine", spines))
        for name in group
    ]
    return {"switches": switches, "cabling": cables, "links": isls}


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def inventory(plan: Plan) -> dict[str, str]:
    """Relative path -> text of every file ``--write-inventory DIR`` writes."""
    host_cables, links, names = cabling(plan)
    topo = lab_slice(plan, wiring=(host_cables, links, names))
    slice_note = (
        f"# Lab slice of the plan ({len(topo['hosts'])} hosts of {plan.design.nodes}); "
        "bring it up with: fabricops lab up --topology THIS_FILE\n"
    )
    if plan.link_layer == "Ethernet" and plan.design.rails > LAB_MAX_ROCE_RAILS:
        slice_note += (
            f"# The lab emulates at most {LAB_MAX_ROCE_RAILS} RoCE rails: the slice has the first "
            f"{LAB_MAX_ROCE_RAILS} of {plan.design.rails}.\n"
        )
    if plan.design.tiers >= 2 and topo.get("links"):
        tiers = {s["tier"] for s in topo["switches"]}
        n_leaves = sum(s["tier"] == "leaf" for s in topo["switches"])
        slice_note += (
            f"# Two tiers of the plan: {n_leaves} leaves, {len(topo['switches']) - n_leaves} spines and "
            f"the {len(topo['links'])} links between them"
            + (" (the lab models two tiers: no spine-core links)" if plan.design.tiers >= 3 else "")
            + ".\n"
        ) if "spine" in tiers else ""
    if plan.nvlink is not None:
        slice_note += (
            f"# The lab has no NVLink domains: the slice's trays are the first {len(topo['hosts'])} of "
            f"{plan.nvlink.domain_of(0)} and rehearse the scale-out rails only.\n"
        )
    header = HEADER + (NVL_HEADER if plan.nvlink is not None else "")
    return {
        "hosts.yml": header + _dump(hosts_yml(plan, names)),
        "group_vars/all.yml": HEADER + "---\n" + _render_all_yml(all_yml(plan, host_cables, links)),
        "lab-topology.yml": slice_note + _dump(topo),
    }


def write(plan: Plan, directory: str | Path) -> list[Path]:
    """Write the inventory skeleton and lab topology under ``directory``; returns the paths written.

    The lab topology is the shape ``fabricops_lab.topology`` loads (tests/unit/plan hold every plan's
    slice to it); ``fabricops lab up --topology`` validates it again before it builds anything."""
    files = inventory(plan)
    out = []
    root = Path(directory)
    for rel, text in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        out.append(target)
    return out
