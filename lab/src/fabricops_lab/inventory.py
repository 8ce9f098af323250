"""The lab's Ansible inventory (``inventories/lab/``), written by ``fabricops lab up``.

Hosts are reached over real SSH with the lab's key and a strict known_hosts; switches are driven
from the controller (netmiko), so they carry ``ansible_connection: local`` and their credentials
as a lookup of the password file: the inventory never contains a password.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import yaml

from fabricops.roce.desired import desired_state
from fabricops_lab import firmware_images, paths

HEADER = (
    "# Written by `fabricops lab up` for the emulated rack; `fabricops lab down` removes it.\n"
    "# Do not edit: change the topology file and run `fabricops lab up` again.\n"
)

# The fabric-wide RoCE lossless definition (REFERENCE.md "RoCE lossless, the real knobs"), in the
# schema of fabricops.model.roce: only what is chosen; ToS, PFC vector and maps are derived from it.
ROCE = {
    "lossless_priority": 3,
    "dscp": 26,
    "cnp_dscp": 48,
    "cnp_priority": 6,
    "trust": "dscp",
    "ecn": {"min_kb": 150, "max_kb": 1500, "probability": 100},
    "roce_mode": 2,
}

SWITCH_USERS = {"onyx": "admin", "cumulus": "cumulus"}
FILES = ("hosts.yml", "group_vars/all.yml")
CABLE_ORDER = ("host", "netdev", "hca", "port", "switch", "switch_port")
LINK_ORDER = ("switch_a", "port_a", "switch_b", "port_b", "tier", "speed")


def ssh_common_args() -> str:
    kh = paths.ssh_dir() / "known_hosts"
    return f"-o UserKnownHostsFile={kh} -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"


def hosts_yml(lab: dict[str, Any]) -> dict[str, Any]:
    topo = lab["topology"]
    # ipoib_host_index: each host's address in every IPoIB network of the plan (all.yml)
    gpu_hosts = {
        h["name"]: {"ansible_host": h["mgmt_ip"], "ipoib_host_index": h["index"]} for h in topo["hosts"]
    }
    # the NVLink domain (NVL72 rack) of each compute tray that has one: nvidia_imex's node list
    for h in topo["hosts"]:
        if h.get("nvlink_domain"):
            gpu_hosts[h["name"]]["fabricops_nvlink_domain"] = h["nvlink_domain"]
        gpu_hosts[h["name"]].update(rpm_host_vars(lab, h))
        gpu_hosts[h["name"]].update(arch_host_vars(lab, h))
        gpu_hosts[h["name"]].update(host_ipoib_plan(topo, h))
    groups: dict[str, dict[str, Any]] = {"onyx_switches": {}, "cumulus_switches": {}, "ib_switches": {}}
    running = lab.get("switches") or {}
    for sw in topo["switches"]:
        info = running.get(sw["name"], {})
        entry: dict[str, Any] = {
            "ansible_host": (info.get("mgmt_ip") or sw["mgmt_ip"]),
            "fabricops_switch_os": sw["os"],
            "fabricops_switch_model": sw["model"],
        }
        if topo.get("links"):  # a multi-tier rack: each switch's tier, as the planner writes it
            entry["fabricops_switch_tier"] = sw.get("tier", "leaf")
        if sw["os"] == "ib":
            # Managed by its subnet manager, not over SSH here: listed for cabling and reports.
            entry["fabricops_switch_reachable"] = bool(info.get("port"))
            groups["ib_switches"][sw["name"]] = entry
            continue
        pw_file = info.get("password_file") or str(paths.switch_dir(sw["name"]) / "password")
        entry.update(
            {
                "ansible_network_os": sw["os"],
                "ansible_port": int(info.get("port") or 22),
                "ansible_user": info.get("user", SWITCH_USERS[sw["os"]]),
            }
        )
        if info.get("login") == "publickey" and info.get("client_key"):
            # key-only: no password in this switch's variables (docs/switch-access.md)
            entry["roce_switch_private_key_file"] = info["client_key"]
            entry["roce_switch_use_agent"] = False
        else:
            entry["ansible_password"] = "{{ lookup('ansible.builtin.file', '" + pw_file + "') }}"
        entry.update({"roce_switch_api_ca": info["api_ca"]} if info.get("api_ca") else {})  # NVUE REST API
        groups[f"{sw['os']}_switches"][sw["name"]] = entry
    host_vars = {
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(paths.ssh_dir() / "id_ed25519"),
        "ansible_ssh_common_args": ssh_common_args(),
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    switch_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "fabricops_ssh_known_hosts": str(paths.ssh_dir() / "known_hosts"),
    }
    out: dict[str, Any] = {
        "all": {
            "children": {
                "gpu_hosts": {
                    "hosts": gpu_hosts,
                    "vars": host_vars,
                },
                "switches": {
                    "children": {
                        "onyx_switches": {"hosts": groups["onyx_switches"]},
                        "cumulus_switches": {"hosts": groups["cumulus_switches"]},
                    },
                    "vars": switch_vars,
                },
                "ib_switches": {"hosts": groups["ib_switches"], "vars": dict(switch_vars)},
            }
        }
    }
    ctl = (lab.get("slurm") or {}).get("controller")
    if ctl:
        # the Slurm head node (fabricops_lab.slurm), reached as a site reaches its own: SSH, then
        # scontrol / sinfo; in no group the roles, drift or verify target
        out["all"]["children"]["slurm_controller"] = {
            "hosts": {ctl["name"]: {"ansible_host": ctl["mgmt_ip"]}},
            "vars": dict(host_vars),
        }
    return out


def arch_host_vars(lab: dict[str, Any], host: dict[str, Any]) -> dict[str, Any]:
    """A host's own variables where its architecture's artifacts differ from the rack's (group_vars
    hold the controller's architecture's), as a mixed-arch rack's host_vars give them: the MLNX_OFED
    tarball / ISO (URL and sha256) and apt repository, the DOCA-Host repository and the fabric
    manager repository built for it (ofed_repo / doca_repo / fabric_services ``by_arch``). A GPU
    host whose GPUs sit behind no NVSwitch (GH200: ``topology: direct``) runs no fabric manager."""
    data: dict[str, Any] = {}
    if (host.get("gpus") or {}).get("topology") == "direct":
        data["fabricops_site_fabric_manager"] = False
    darch = host.get("arch")
    ofed = lab.get("ofed") or {}
    builds = (ofed.get("by_arch") or {}).get(darch) if darch else None
    if not builds:
        return data
    build = builds.get(ofed.get("default_version"))
    if build:
        data.update({
            "mlnx_ofed_tarball_url": build["tgz_url"],
            "mlnx_ofed_tarball_sha256": build["tgz_sha256"],
            "mlnx_ofed_iso_url": build["iso_url"],
            "mlnx_ofed_iso_sha256": build["iso_sha256"],
            "mlnx_ofed_repo_url": build["repo_url"],
        })
    doca = lab.get("doca") or {}
    doca_build = ((doca.get("by_arch") or {}).get(darch) or {}).get(doca.get("default_version"))
    if doca_build:
        data["mlnx_ofed_doca_repo_url"] = doca_build["repo_url"]
    fm = ((lab.get("fabric_manager") or {}).get("by_arch") or {}).get(darch)
    if fm:
        data["nvidia_fabric_manager_repo_url"] = fm["repo_url"]
    return data


def rpm_host_vars(lab: dict[str, Any], host: dict[str, Any]) -> dict[str, Any]:
    """An ``rpm`` host's own repository variables (its dnf reads the lab's signed RPM repository,
    rpm_repo.prepare, not the apt one group_vars give every other host), as a mixed-OS rack's
    host_vars give them: the fabric manager role's repository URL, key URL and key sha256. Nothing for
    another variant, or when the lab built no RPM repository."""
    rpm = (lab.get("fabric_manager") or {}).get("rpm")
    if (host.get("variant") or "default") != "rpm" or not rpm:
        return {}
    return {
        "nvidia_fabric_manager_repo_url": rpm["repo_url"],
        "nvidia_fabric_manager_repo_key_url": rpm["repo_key_url"],
        "nvidia_fabric_manager_repo_key_sha256": rpm["repo_key_sha256"],
    }


def all_yml(lab: dict[str, Any], ofed_facts: dict[str, Any] | None) -> dict[str, Any]:
    topo = lab["topology"]
    data: dict[str, Any] = {
        "fabricops_hardware_profile": topo.get("hardware_profile", "hgx-h100-ndr"),
        "fabricops_cabling": [{k: c[k] for k in CABLE_ORDER} for c in topo["cabling"]],
    }
    if topo.get("links"):
        # inter-switch links in the planner's shape (plan/writers.py); none in a one-tier rack
        data["fabricops_switch_links"] = [{k: ln[k] for k in LINK_ORDER} for ln in topo["links"]]
    roce_netdevs = {}
    for h in topo["hosts"]:
        for hca in h["hcas"]:
            for p in hca["ports"]:
                if p["link_layer"] == "Ethernet":
                    roce_netdevs.setdefault(h["name"], []).append(
                        {
                            "netdev": p["netdev"],
                            "hca": hca["name"],
                            "address": f"{p['address']}/{p['prefix']}",
                        }
                    )
    if roce_netdevs:
        # RoCE lossless only where the rack has RoCE ports: an InfiniBand-only rack plans none.
        # through the one desired-state function the roles, verify and diagnose use: the lab writes
        # only a definition that validates (a DesiredStateError names the field otherwise)
        data["fabricops_roce"] = dict(desired_state({"fabricops_roce": dict(ROCE)}, "lab").data)
        data["fabricops_roce_addresses"] = roce_netdevs
    data.update(host_plan_vars(topo))
    # NIC firmware pins (what the lab's NICs run, so a fresh lab is compliant) and the images the
    # lab serves for them (lab/firmware_images.py)
    data.update(firmware_images.inventory_vars(topo))
    data.update(subnet_manager_vars(topo))
    if lab.get("fabric_manager"):
        # the fabric manager repository (fabric_services.prepare), as the role's own variable; the
        # lab's description of it stays beside for the tests (no playbook or role reads it)
        fm = lab["fabric_manager"]
        data["nvidia_fabric_manager_repo_url"] = fm["repo_url"]
        if fm.get("repo_key_url"):  # the lab signs its mirrors (fabricops_lab.ofed_repo)
            data["nvidia_fabric_manager_repo_key_url"] = fm["repo_key_url"]
            data["nvidia_fabric_manager_repo_key_sha256"] = fm["repo_key_sha256"]
        data["fabricops_fabric_manager"] = json.loads(json.dumps(lab["fabric_manager"], sort_keys=True))
    if ofed_facts:
        data.update(ofed_role_vars(ofed_facts))
        # The lab mirror's description (every version it serves, for the upgrade tests); no playbook
        # or role reads it. lab.json stores keys sorted: sorted here too, so a rewrite is byte-identical.
        data["fabricops_ofed"] = json.loads(json.dumps(ofed_facts, sort_keys=True))
    if lab.get("doca"):
        data.update(doca_role_vars(lab["doca"]))
    return data


def doca_role_vars(doca: dict[str, Any]) -> dict[str, Any]:
    """The DOCA-Host mirror (doca_repo.prepare) as the mlnx_ofed role's doca variables, for the newer
    release; the install method stays the tarball (mlnx_ofed_install_method above). ``fabricops_doca``
    describes both releases (no role reads it)."""
    data: dict[str, Any] = {}
    version = doca.get("default_version")
    build = (doca.get("versions") or {}).get(version)
    if build:
        data["mlnx_ofed_doca_version"] = version
        data["mlnx_ofed_doca_repo_url"] = build["repo_url"]
        data["mlnx_ofed_doca_repo_key_url"] = doca["repo_key_url"]
        data["mlnx_ofed_doca_repo_key_sha256"] = doca["repo_key_sha256"]
    data["fabricops_doca"] = json.loads(json.dumps(doca, sort_keys=True))
    return data


def ofed_role_vars(ofed_facts: dict[str, Any]) -> dict[str, Any]:
    """The mlnx_ofed role's own variables for the lab mirror's default build, as a real rack's
    inventory sets them (inventories/example/ib): pinned version, URL + sha256 of each method."""
    data: dict[str, Any] = {}
    version = ofed_facts.get("default_version")
    build = (ofed_facts.get("versions") or {}).get(version)
    if build:
        data.update(
            {
                "mlnx_ofed_version": version,
                "mlnx_ofed_install_method": "tarball",
                "mlnx_ofed_tarball_url": build["tgz_url"],
                "mlnx_ofed_tarball_sha256": build["tgz_sha256"],
                "mlnx_ofed_iso_url": build["iso_url"],
                "mlnx_ofed_iso_sha256": build["iso_sha256"],
                "mlnx_ofed_repo_url": build["repo_url"],
            }
        )
        if ofed_facts.get("repo_key_url"):  # the lab's mirror is signed: the key, as a real rack gives it
            data["mlnx_ofed_repo_key_url"] = ofed_facts["repo_key_url"]
            data["mlnx_ofed_repo_key_sha256"] = ofed_facts["repo_key_sha256"]
    if ofed_facts.get("distro"):
        # NVIDIA builds MLNX_OFED for a point release (debian12.1); the hosts run a newer 12.x.
        # A real rack's inventory makes this choice deliberately, and so does the lab's.
        data["mlnx_ofed_distro"] = ofed_facts["distro"]
    return data


# IPoIB networks for the rack's InfiniBand ports, in order (RFC 2544's benchmarking range: lab-only).
IPOIB_PREFIXES = ("198.18.0.0/16", "198.19.0.0/16")


def host_plan_vars(topo: dict[str, Any]) -> dict[str, Any]:
    """What a real rack's inventory plans for its hosts: the NCCL profile of the compute fabric
    (InfiniBand when the hosts have IB ports, else RoCE) and an IPoIB network per IB port."""
    ib_netdevs: list[str] = []
    has_roce = False
    for h in topo["hosts"]:
        for hca in h["hcas"]:
            for p in hca["ports"]:
                if p["link_layer"] == "InfiniBand" and p["netdev"] not in ib_netdevs:
                    ib_netdevs.append(p["netdev"])
                has_roce = has_roce or p["link_layer"] == "Ethernet"
    data: dict[str, Any] = {}
    if ib_netdevs:
        data["nccl_profile_name"] = "ib"
        networks = zip(ib_netdevs, IPOIB_PREFIXES, strict=False)
        data["ipoib_plan"] = {"networks": {nd: {"prefix": prefix} for nd, prefix in networks}}
    elif has_roce:
        data["nccl_profile_name"] = "roce"
    return data


def host_ipoib_plan(topo: dict[str, Any], host: dict[str, Any]) -> dict[str, Any]:
    """A host's own ``ipoib_plan`` when none of its InfiniBand netdevs is in the rack's (group_vars:
    :func:`host_plan_vars`): a rack mixing servers whose ports are named apart (gh01's ibp1s0 / ibp2s0
    beside an HGX host's ibp26s0 / ibp60s0) gives each of them the same networks by its own names, in
    port order, as its host_vars would. Nothing for a rack whose hosts share the names."""
    plan = (host_plan_vars(topo).get("ipoib_plan") or {}).get("networks") or {}
    own = [p["netdev"] for hca in host["hcas"] for p in hca["ports"] if p["link_layer"] == "InfiniBand"]
    if not plan or not own or any(nd in plan for nd in own):
        return {}
    prefixes = [net["prefix"] for net in plan.values()]
    return {"ipoib_plan": {"networks": {nd: {"prefix": pf} for nd, pf in zip(own, prefixes, strict=False)}}}


def subnet_manager_vars(topo: dict[str, Any]) -> dict[str, Any]:
    """The subnet_manager role's plan for the rack's InfiniBand subnet (docs/fabric-services.md).

    ``switch`` (the default rack): the managed switch runs the SM, the role verifies. ``hosts``:
    OpenSM on the first two hosts with InfiniBand cables, priorities 15 (master) and 14 (standby);
    the topology allows ``hosts`` only with one ib switch, hence ``single_switch``. Nothing when no
    host port is cabled to an InfiniBand switch."""
    ib_switches = {sw["name"] for sw in topo["switches"] if sw["os"] == "ib"}
    ib_hosts = list(dict.fromkeys(c["host"] for c in topo["cabling"] if c["switch"] in ib_switches))
    if not ib_hosts:
        return {}
    mode = topo.get("subnet_manager", "switch")
    if mode != "hosts":
        return {"subnet_manager_mode": "switch"}
    return {
        "subnet_manager_mode": "hosts",
        "subnet_manager_topology": "single_switch",
        "subnet_manager_hosts": {h: 15 - i for i, h in enumerate(ib_hosts[:2])},
    }


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(data: dict[str, Any]) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def render(lab: dict[str, Any], ofed_facts: dict[str, Any] | None = None) -> dict[str, str]:
    dump = _dump
    return {
        "hosts.yml": HEADER + dump(hosts_yml(lab)),
        "group_vars/all.yml": HEADER + "---\n" + dump(all_yml(lab, ofed_facts)),
    }


def write(lab: dict[str, Any], inventory_dir: Path, ofed_facts: dict[str, Any] | None = None) -> bool:
    """Write the inventory; returns True when a file changed."""
    changed = False
    for rel, text in render(lab, ofed_facts).items():
        target = inventory_dir / rel
        if target.exists() and target.read_text() == text:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(target)
        changed = True
    return changed


def remove(inventory_dir: Path) -> None:
    for rel in FILES:
        target = inventory_dir / rel
        if target.exists() and target.read_text().startswith(HEADER):
            target.unlink()
    for d in (inventory_dir / "group_vars", inventory_dir):
        with contextlib.suppress(OSError):
            d.rmdir()


def known_hosts_lines(
    topo: dict[str, Any], switch_keys: dict[str, tuple[str, int, str]] | None = None
) -> list[str]:
    """known_hosts: every host by name and IP; switches by name and IP (and port when not 22)."""
    from fabricops_lab import hosts as hosts_mod

    lines = []
    for h in topo["hosts"]:
        pub = hosts_mod.ensure_host_key(h["name"])
        keytype, key = pub.split()[:2]
        lines.append(f"{h['name']},{h['mgmt_ip']} {keytype} {key}")
    for name, (ip, port, pub) in (switch_keys or {}).items():
        keytype, key = pub.split()[:2]
        names = [name, ip] if port == 22 else [f"[{name}]:{port}", f"[{ip}]:{port}"]
        lines.append(f"{','.join(names)} {keytype} {key}")
    return lines
