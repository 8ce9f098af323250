"""The lab topology file: load, validate, normalise, and scale (docs/lab.md, "Topology file").

``load(path)`` returns the *normalised* topology (every host's GPUs and HCAs expanded, switch port
names listed, management addresses planned, each cable resolved to its HCA), which ``fabricops lab
up`` stores in ``lab.json``. Every problem raises :class:`TopologyError` with one sentence that
names the bad key path, e.g. ``hosts[1].hcas[0].ports[0].speed: 'NDX' is not an InfiniBand speed``.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import yaml

from fabricops.errors import FabricopsError
from fabricops_lab import paths

DEFAULT_TOPOLOGY = paths.DATA_DIR / "topology-default.yml"

MGMT_NET = "198.51.100"
MGMT_PREFIX = 24
CONTROLLER_IP = f"{MGMT_NET}.1"
HOST_IP_BASE = 10  # host i (1-based) -> .10+i
SWITCH_IP_BASE = 200  # switch j (1-based) -> .200+j
ROCE_NET = "203.0.113"
ROCE_PREFIX = 26  # rail r: 203.0.113.(r*64 + host_index)/26
MAX_HOSTS = 63
MAX_SWITCHES = 54

SWITCH_OS = ("onyx", "cumulus", "ib")
GPU_TOPOLOGIES = ("nvswitch", "direct")
LINK_LAYERS = ("InfiniBand", "Ethernet")
IB_SPEEDS = ("SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR")
IB_WIDTHS = ("1X", "2X", "4X", "8X", "12X")
ETH_SPEED_RE = re.compile(r"^(\d+)GbE$")

# GPU model -> (memory MiB as nvidia-smi reports it, NVLink generation, links per GPU)
GPU_MODELS: dict[str, tuple[int, int, int]] = {
    "NVIDIA H100 80GB HBM3": (81559, 4, 18),
    "NVIDIA H200": (143771, 4, 18),
    "NVIDIA A100-SXM4-80GB": (81920, 3, 12),
    "NVIDIA A100-SXM4-40GB": (40960, 3, 12),
    "NVIDIA B200": (183359, 5, 18),
    # GB200 NVL72 compute tray GPU: 189471 MiB in real trays' `nvidia-smi` (drivers 580/590), NVLink 5
    # with 18 links of 53.125 GB/s (NVIDIA/k8s-test-infra#371, `nvidia-smi nvlink -s` on a GB200)
    "NVIDIA GB200": (189471, 5, 18),
    "Tesla V100-SXM2-32GB": (32768, 2, 6),
}
NVLINKS_PER_GEN = {1: 4, 2: 6, 3: 12, 4: 18, 5: 18}
#: NVL72 compute trays (src/fabricops/model/data/profiles/gb200-nvl72.yml, gb300-nvl72.yml): 4 GPUs a
#: tray, up to 18 trays in one NVLink domain (NVIDIA GB200 NVL Multi-Node Tuning Guide, 72x1). The
#: GB300's memory is in no capture of our sources: a topology naming it gives memory_mib and nvlink_gen.
NVL72_MODELS = ("NVIDIA GB200", "NVIDIA GB300")
NVL72_GPUS_PER_TRAY = 4
NVL72_MAX_TRAYS = 18

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
HCA_RE = re.compile(r"^[a-z][a-z0-9_]{0,30}$")
NETDEV_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9_.-]{0,14}$")
GUID_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}$")
MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
PCI_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

TOP_KEYS = {
    "name", "hardware_profile", "subnet_manager", "host_profiles", "hosts", "switches", "cabling", "links",
}
#: Who runs the InfiniBand subnet manager: the managed switch, or OpenSM on hosts
#: (docs/fabric-services.md, "The lab"); absent = switch.
SUBNET_MANAGERS = ("switch", "hosts")
HOST_KEYS = {"name", "profile", "gpus", "hcas", "nvlink_domain", "variant", "arch"}
PROFILE_KEYS = {"gpus", "hcas"}
GPU_KEYS = {"model", "count", "nvlink_gen", "topology", "memory_mib"}
HCA_KEYS = {"name", "model", "pci", "fw_ver", "node_guid", "ports"}
PORT_KEYS = {"port", "link_layer", "speed", "width", "netdev", "port_guid", "mac"}
SWITCH_KEYS = {"name", "os", "model", "ports", "release", "tier"}
#: A switch's place in the fabric. The lab models one- and two-tier fabrics: hosts on leaves, and
#: inter-switch links (``links:``) only between a leaf and a spine (no leaf-leaf, no spine-spine).
SWITCH_TIERS = ("leaf", "spine")
#: ``links:`` entries: the planner's ``fabricops_switch_links`` shape (plan/writers.py ``_link``).
LINK_KEYS = {"switch_a", "port_a", "switch_b", "port_b", "speed", "width", "tier"}
LINK_TIERS = ("leaf_spine",)
PLURAL = {"leaf": "leaves", "spine": "spines"}
PORTS_KEYS = {"format", "first", "count"}
CABLE_KEYS = {"host", "netdev", "switch", "port"}


class TopologyError(FabricopsError):
    """A topology file that cannot describe a rack; str() names the key path."""

    def __init__(self, where: str, problem: str, source: str | None = None):
        prefix = f"topology {source}: " if source else "topology: "
        super().__init__(f"{prefix}{where}: {problem}")
        self.where = where


def port_rate(link_layer: str, speed: str, width: str) -> int:
    """The port rate in Gb/s as ibstat prints it (NDR 4X -> 400); ValueError when unknown.

    Uses the project's one table of link rates (``fabricops.model.rates``)."""
    from fabricops.model import rates

    return round(rates.port_rate(link_layer, speed, width))


# --- loading ------------------------------------------------------------------------------


def load(path: str | Path | None = None) -> dict[str, Any]:
    """Load and normalise a topology file (the default rack when PATH is None)."""
    p = Path(path) if path else DEFAULT_TOPOLOGY
    try:
        text = p.read_text()
    except OSError as exc:
        raise TopologyError("file", f"cannot read {p} ({exc.strerror})", None) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise TopologyError("file", f"{p} is not valid YAML{at}", None) from None
    return normalise(raw, source=str(p))


def normalise(raw: Any, source: str | None = None) -> dict[str, Any]:
    v = _Validator(source)
    return v.topology(raw)


class _Validator:
    def __init__(self, source: str | None):
        self.source = source

    def err(self, where: str, problem: str) -> TopologyError:
        return TopologyError(where, problem, self.source)

    def mapping(self, value: Any, where: str, allowed: set[str], required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            raise self.err(where, f"must be a mapping, not {_kind(value)}")
        for key in value:
            if key not in allowed:
                raise self.err(
                    f"{where}.{key}" if where else str(key),
                    f"unknown key (allowed: {', '.join(sorted(allowed))})",
                )
        for key in required:
            if key not in value or value[key] is None:
                raise self.err(f"{where}.{key}" if where else key, "is required")
        return value

    def seq(self, value: Any, where: str, nonempty: bool = True) -> list:
        if not isinstance(value, list):
            raise self.err(where, f"must be a list, not {_kind(value)}")
        if nonempty and not value:
            raise self.err(where, "must not be empty")
        return value

    def string(self, value: Any, where: str, pattern: re.Pattern | None = None, what: str = "") -> str:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise self.err(where, f"must be a string, not {_kind(value)}")
        s = str(value)
        if pattern is not None and not pattern.match(s):
            raise self.err(where, f"{s!r} is not a valid {what or 'value'}")
        return s

    def integer(self, value: Any, where: str, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.err(where, f"must be an integer, not {_kind(value)}")
        if not lo <= value <= hi:
            raise self.err(where, f"{value} is out of range {lo}..{hi}")
        return value

    def choice(self, value: Any, where: str, choices: tuple[str, ...], what: str) -> str:
        s = self.string(value, where)
        if s not in choices:
            raise self.err(where, f"{s!r} is not {what} (one of {', '.join(choices)})")
        return s

    # -- sections --

    def topology(self, raw: Any) -> dict[str, Any]:
        top = self.mapping(raw, "", TOP_KEYS, ("hosts", "switches", "cabling"))
        name = self.string(top.get("name", "lab"), "name", NAME_RE, "lab name")
        profiles = top.get("host_profiles") or {}
        self.mapping(profiles, "host_profiles", set(profiles) if isinstance(profiles, dict) else set())
        for pname, prof in profiles.items():
            self.mapping(prof, f"host_profiles.{pname}", PROFILE_KEYS)

        hosts_raw = self.seq(top["hosts"], "hosts")
        if len(hosts_raw) > MAX_HOSTS:
            raise self.err("hosts", f"{len(hosts_raw)} hosts is more than the lab's {MAX_HOSTS}")
        hosts: list[dict[str, Any]] = []
        seen: dict[str, str] = {}
        for i, h in enumerate(hosts_raw):
            host = self.host(h, f"hosts[{i}]", i + 1, profiles)
            if host["name"] in seen:
                raise self.err(
                    f"hosts[{i}].name", f"{host['name']!r} is already used by {seen[host['name']]}"
                )
            seen[host["name"]] = f"hosts[{i}]"
            hosts.append(host)

        sw_raw = self.seq(top["switches"], "switches")
        if len(sw_raw) > MAX_SWITCHES:
            raise self.err("switches", f"{len(sw_raw)} switches is more than the lab's {MAX_SWITCHES}")
        switches: list[dict[str, Any]] = []
        for j, s in enumerate(sw_raw):
            sw = self.switch(s, f"switches[{j}]", j + 1)
            if sw["name"] in seen:
                raise self.err(f"switches[{j}].name", f"{sw['name']!r} is already used by {seen[sw['name']]}")
            seen[sw["name"]] = f"switches[{j}]"
            switches.append(sw)

        self.nvlink_domains(hosts)
        cabling = self.cabling(top["cabling"], hosts, switches)
        links = self.links(top.get("links") or [], hosts, switches, cabling)
        subnet_manager = self.subnet_manager(top.get("subnet_manager", "switch"), switches, cabling)
        rails = self.rails(hosts)
        for h in hosts:
            for hca in h["hcas"]:
                for p in hca["ports"]:
                    if p["link_layer"] == "Ethernet":
                        r = rails[(hca["name"], p["port"])]
                        p["rail"] = r
                        p["address"] = f"{ROCE_NET}.{r * 64 + h['index']}"
                        p["prefix"] = ROCE_PREFIX
        return {
            "name": name,
            "hardware_profile": self.string(top.get("hardware_profile", name), "hardware_profile"),
            "subnet_manager": subnet_manager,
            "hosts": hosts,
            "switches": switches,
            "cabling": cabling,
            "links": links,
        }

    def nvlink_domains(self, hosts: list[dict]) -> None:
        """A domain's hosts are NVL72 compute trays, at most NVL72_MAX_TRAYS of them."""
        members: dict[str, list[int]] = {}
        for i, h in enumerate(hosts):
            if h["nvlink_domain"] is None:
                continue
            if h["gpus"]["model"] not in NVL72_MODELS:
                model = h["gpus"]["model"] or "no GPU"
                raise self.err(f"hosts[{i}].nvlink_domain", f"{h['name']} has {model}, "
                               f"not an NVL72 compute tray ({', '.join(NVL72_MODELS)}): only those share an "
                               "NVLink domain")
            members.setdefault(h["nvlink_domain"], []).append(i)
        for name, idx in members.items():
            if len(idx) > NVL72_MAX_TRAYS:
                raise self.err(f"hosts[{idx[NVL72_MAX_TRAYS]}].nvlink_domain",
                               f"NVLink domain {name!r} has {len(idx)} compute trays, more than the "
                               f"{NVL72_MAX_TRAYS} of one NVL72 rack")

    def subnet_manager(self, value: Any, switches: list[dict], cabling: list[dict]) -> str:
        mode = self.choice(value, "subnet_manager", SUBNET_MANAGERS, "a subnet manager placement")
        if mode == "hosts":
            ib_switches = {sw["name"] for sw in switches if sw["os"] == "ib"}
            ib = sorted({c["switch"] for c in cabling if c["switch"] in ib_switches})
            if len(ib) != 1:
                raise self.err(
                    "subnet_manager",
                    f"'hosts' needs every InfiniBand cable on one ib switch (the lab models one subnet "
                    f"per switch and OpenSM on hosts runs one subnet); "
                    f"{'none is cabled' if not ib else 'cabled to ' + ', '.join(ib)}",
                )
        return mode

    def host(self, h: Any, where: str, index: int, profiles: dict) -> dict[str, Any]:
        h = self.mapping(h, where, HOST_KEYS, ("name",))
        name = self.string(h["name"], f"{where}.name", NAME_RE, "host name (lower case, digits, '-')")
        base: dict[str, Any] = {}
        if "profile" in h:
            pname = self.string(h["profile"], f"{where}.profile")
            if pname not in profiles:
                raise self.err(f"{where}.profile", f"{pname!r} is not defined under host_profiles")
            base = copy.deepcopy(profiles[pname])
            src = f"host_profiles.{pname}"
        else:
            src = where
        gpus_src, gpus_where = (
            (h["gpus"], f"{where}.gpus") if "gpus" in h else (base.get("gpus"), f"{src}.gpus")
        )
        hcas_src, hcas_where = (
            (h["hcas"], f"{where}.hcas") if "hcas" in h else (base.get("hcas"), f"{src}.hcas")
        )
        if hcas_src is None:
            raise self.err(f"{where}.hcas", "is required (here or in the host's profile)")
        gpus = self.gpus(gpus_src, gpus_where) if gpus_src is not None else None
        hcas = self.hcas(hcas_src, hcas_where)
        domain = None
        if h.get("nvlink_domain") is not None:
            domain = self.string(h["nvlink_domain"], f"{where}.nvlink_domain", NAME_RE,
                                 "NVLink domain name (lower case, digits, '-')")
        variant = "default"
        if h.get("variant") is not None:
            from fabricops_lab import image  # the recipe names the variants

            variant = self.choice(h["variant"], f"{where}.variant", image.variants(), "host variant")
        arch = "amd64"
        if h.get("arch") is not None:  # a foreign architecture runs under qemu-user (foreign_arch.py)
            from fabricops_lab import foreign_arch

            arch = self.choice(h["arch"], f"{where}.arch", foreign_arch.ARCHES, "host architecture")
        return {
            "name": name,
            "nvlink_domain": domain,
            "variant": variant,
            "arch": arch,
            "index": index,
            "mgmt_ip": f"{MGMT_NET}.{HOST_IP_BASE + index}",
            "gpus": gpus
            or {"model": None, "count": 0, "nvlink_gen": 0, "topology": "direct", "memory_mib": 0},
            "hcas": hcas,
        }

    def gpus(self, g: Any, where: str) -> dict[str, Any]:
        g = self.mapping(g, where, GPU_KEYS, ("model", "count"))
        model = self.string(g["model"], f"{where}.model")
        count = self.integer(g["count"], f"{where}.count", 0, 16)
        known = GPU_MODELS.get(model)
        if known is None and ("memory_mib" not in g or "nvlink_gen" not in g):
            raise self.err(
                f"{where}.model",
                f"{model!r} is not a known GPU model "
                f"(known: {', '.join(GPU_MODELS)}); give memory_mib and nvlink_gen for others",
            )
        gen = self.integer(g.get("nvlink_gen", known[1] if known else 0), f"{where}.nvlink_gen", 0, 5)
        mem = self.integer(g.get("memory_mib", known[0] if known else 0), f"{where}.memory_mib", 1, 10**7)
        topo = self.choice(
            g.get("topology", "nvswitch"), f"{where}.topology", GPU_TOPOLOGIES, "a GPU topology"
        )
        if model in NVL72_MODELS:
            if count != NVL72_GPUS_PER_TRAY:
                raise self.err(f"{where}.count", f"{count} is not the {NVL72_GPUS_PER_TRAY} GPUs of an "
                               f"NVL72 compute tray ({model})")
            if gen != 5 or topo != "nvswitch":
                raise self.err(f"{where}", f"{model} is NVLink 5 through the NVLink switch trays "
                               "(nvlink_gen 5, topology nvswitch)")
        return {
            "model": model,
            "count": count,
            "nvlink_gen": gen,
            "topology": topo,
            "memory_mib": mem,
            "nvlinks": NVLINKS_PER_GEN.get(gen, 0),
        }

    def hcas(self, value: Any, where: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        names: set[str] = set()
        netdevs: set[str] = set()
        for k, hca in enumerate(self.seq(value, where)):
            w = f"{where}[{k}]"
            hca = self.mapping(hca, w, HCA_KEYS, ("name", "ports"))
            name = self.string(hca["name"], f"{w}.name", HCA_RE, "HCA device name (like mlx5_0)")
            if name in names:
                raise self.err(f"{w}.name", f"{name!r} appears twice on this host")
            names.add(name)
            entry: dict[str, Any] = {
                "name": name,
                "model": self.string(hca.get("model", "ConnectX-7"), f"{w}.model"),
            }
            if "pci" in hca:
                entry["pci"] = self.string(hca["pci"], f"{w}.pci", PCI_RE, "PCI address (0000:1a:00.0)")
            if "fw_ver" in hca:
                entry["fw_ver"] = self.string(hca["fw_ver"], f"{w}.fw_ver")
            if "node_guid" in hca:
                entry["node_guid"] = self.string(
                    hca["node_guid"], f"{w}.node_guid", GUID_RE, "GUID (xxxx:xxxx:xxxx:xxxx)"
                )
            ports = []
            pnums: set[int] = set()
            for n, port in enumerate(self.seq(hca["ports"], f"{w}.ports")):
                pw = f"{w}.ports[{n}]"
                p = self.port(port, pw)
                if p["port"] in pnums:
                    raise self.err(f"{pw}.port", f"port {p['port']} appears twice on {name}")
                if p["netdev"] in netdevs:
                    raise self.err(f"{pw}.netdev", f"{p['netdev']!r} appears twice on this host")
                pnums.add(p["port"])
                netdevs.add(p["netdev"])
                ports.append(p)
            entry["ports"] = ports
            out.append(entry)
        return out

    def port(self, port: Any, where: str) -> dict[str, Any]:
        port = self.mapping(port, where, PORT_KEYS, ("link_layer", "speed", "netdev"))
        ll = self.choice(port["link_layer"], f"{where}.link_layer", LINK_LAYERS, "a link layer")
        speed = self.string(port["speed"], f"{where}.speed")
        if ll == "InfiniBand" and speed not in IB_SPEEDS:
            raise self.err(
                f"{where}.speed", f"{speed!r} is not an InfiniBand speed (one of {', '.join(IB_SPEEDS)})"
            )
        if ll == "Ethernet" and not ETH_SPEED_RE.match(speed):
            raise self.err(f"{where}.speed", f"{speed!r} is not an Ethernet speed (like 400GbE)")
        width = self.choice(port.get("width", "4X"), f"{where}.width", IB_WIDTHS, "a link width")
        try:
            rate = port_rate(ll, speed, width)
        except ValueError as exc:
            raise self.err(f"{where}.width", f"{speed} {width} is not a valid port ({exc})") from None
        p: dict[str, Any] = {
            "port": self.integer(port.get("port", 1), f"{where}.port", 1, 2),
            "link_layer": ll,
            "speed": speed,
            "width": width,
            "rate_gbps": rate,
            "netdev": self.string(
                port["netdev"], f"{where}.netdev", NETDEV_RE, "netdev name (at most 15 characters)"
            ),
        }
        if p["netdev"] in ("eth0", "lo"):
            raise self.err(
                f"{where}.netdev", f"{p['netdev']!r} is reserved for the host's management/loopback"
            )
        if "port_guid" in port:
            p["port_guid"] = self.string(
                port["port_guid"], f"{where}.port_guid", GUID_RE, "GUID (xxxx:xxxx:xxxx:xxxx)"
            )
        if "mac" in port:
            if ll != "Ethernet":
                raise self.err(f"{where}.mac", "only Ethernet (RoCE) ports have a MAC address here")
            p["mac"] = self.string(str(port["mac"]).lower(), f"{where}.mac", MAC_RE, "MAC address")
        return p

    def switch(self, s: Any, where: str, index: int) -> dict[str, Any]:
        s = self.mapping(s, where, SWITCH_KEYS, ("name", "os", "ports"))
        name = self.string(s["name"], f"{where}.name", NAME_RE, "switch name (lower case, digits, '-')")
        os_ = self.choice(s["os"], f"{where}.os", SWITCH_OS, "a switch OS")
        ports = self.switch_ports(s["ports"], f"{where}.ports")
        out = {
            "name": name,
            "os": os_,
            "model": self.string(s.get("model", ""), f"{where}.model"),
            "index": index,
            "mgmt_ip": f"{MGMT_NET}.{SWITCH_IP_BASE + index}",
            "ports": ports,
            "tier": self.choice(s.get("tier", "leaf"), f"{where}.tier", SWITCH_TIERS, "a switch tier"),
            **self.switch_release(s, where, os_),
        }
        return out

    def switch_release(self, s: dict[str, Any], where: str, os_: str) -> dict[str, Any]:
        """Optional ``release:``: the OS release the emulated switch answers as (docs/lab-fidelity.md):
        Onyx ``onyx_releases.RELEASES``, Cumulus ``nvue.RELEASES`` (5.4, 5.14); none for InfiniBand."""
        if "release" not in s:
            return {}
        if os_ == "onyx":
            from .switchd.onyx_releases import RELEASES as ONYX

            return {"release": self.choice(str(s["release"]), f"{where}.release", tuple(ONYX),
                                           "an emulated Onyx release")}
        if os_ == "cumulus":
            from .switchd.nvue import RELEASES as NVUE

            return {"release": self.choice(str(s["release"]), f"{where}.release", tuple(NVUE), "a release")}
        raise self.err(f"{where}.release", f"only onyx and cumulus switches have a release, not {os_}")

    def switch_ports(self, value: Any, where: str) -> list[str]:
        if isinstance(value, list):
            names = [self.string(v, f"{where}[{i}]") for i, v in enumerate(self.seq(value, where))]
        else:
            spec = self.mapping(value, where, PORTS_KEYS, ("format", "count"))
            fmt = self.string(spec["format"], f"{where}.format")
            if "{n}" not in fmt:
                raise self.err(f"{where}.format", f"{fmt!r} must contain {{n}} (the port number)")
            first = self.integer(spec.get("first", 1), f"{where}.first", 0, 10000)
            count = self.integer(spec["count"], f"{where}.count", 1, 4096)
            names = [fmt.replace("{n}", str(first + i)) for i in range(count)]
        dup = _first_dup(names)
        if dup is not None:
            raise self.err(where, f"port {dup!r} is listed twice")
        return names

    def cabling(self, value: Any, hosts: list[dict], switches: list[dict]) -> list[dict[str, Any]]:
        by_host = {h["name"]: h for h in hosts}
        by_switch = {s["name"]: s for s in switches}
        used_nd: dict[tuple[str, str], str] = {}
        used_sp: dict[tuple[str, str], str] = {}
        out = []
        for i, c in enumerate(self.seq(value, "cabling")):
            w = f"cabling[{i}]"
            c = self.mapping(c, w, CABLE_KEYS, ("host", "netdev", "switch", "port"))
            hname = self.string(c["host"], f"{w}.host")
            if hname not in by_host:
                raise self.err(f"{w}.host", f"{hname!r} is not a host of this topology")
            netdev = self.string(c["netdev"], f"{w}.netdev")
            found = next(
                ((hca, p) for hca in by_host[hname]["hcas"] for p in hca["ports"] if p["netdev"] == netdev),
                None,
            )
            if found is None:
                raise self.err(f"{w}.netdev", f"{hname} has no HCA port with netdev {netdev!r}")
            hca, p = found
            sname = self.string(c["switch"], f"{w}.switch")
            if sname not in by_switch:
                raise self.err(f"{w}.switch", f"{sname!r} is not a switch of this topology")
            sw = by_switch[sname]
            sport = self.string(c["port"], f"{w}.port")
            if sport not in sw["ports"]:
                raise self.err(f"{w}.port", f"{sname} has no port {sport!r}")
            if sw["tier"] != "leaf":
                raise self.err(
                    f"{w}.switch", f"{sname} is a spine: hosts are cabled to leaves (spines only take links)"
                )
            if (p["link_layer"] == "InfiniBand") != (sw["os"] == "ib"):
                raise self.err(
                    f"{w}.switch",
                    f"{p['link_layer']} port {hname}:{netdev} cannot be cabled to {sw['os']} switch {sname}",
                )
            if (hname, netdev) in used_nd:
                raise self.err(
                    f"{w}.netdev", f"{hname}:{netdev} is already cabled by {used_nd[(hname, netdev)]}"
                )
            if (sname, sport) in used_sp:
                raise self.err(f"{w}.port", f"{sname}:{sport} is already cabled by {used_sp[(sname, sport)]}")
            used_nd[(hname, netdev)] = w
            used_sp[(sname, sport)] = w
            out.append(
                {
                    "host": hname,
                    "netdev": netdev,
                    "hca": hca["name"],
                    "port": p["port"],
                    "switch": sname,
                    "switch_port": sport,
                }
            )
        return out

    def links(
        self, value: Any, hosts: list[dict], switches: list[dict], cabling: list[dict]
    ) -> list[dict[str, Any]]:
        """Inter-switch links: each joins a leaf and a spine of the same fabric (ib with ib, Onyx or
        Cumulus with Onyx or Cumulus) on ports no host cable or other link uses. Normalised leaf
        first, with the speed and width of the host ports on that fabric unless given, and ``gbps``
        from the product's rate table (fabricops.model.rates, as host ports get ``rate_gbps``)."""
        by_switch = {s["name"]: s for s in switches}
        used: dict[tuple[str, str], str] = {
            (c["switch"], c["switch_port"]): f"cabling[{i}]" for i, c in enumerate(cabling)
        }
        checked: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        for i, link in enumerate(self.seq(value, "links", nonempty=False)):
            w = f"links[{i}]"
            link = self.mapping(link, w, LINK_KEYS, ("switch_a", "port_a", "switch_b", "port_b"))
            ends = []
            for side in ("a", "b"):
                sname = self.string(link[f"switch_{side}"], f"{w}.switch_{side}")
                if sname not in by_switch:
                    raise self.err(f"{w}.switch_{side}", f"{sname!r} is not a switch of this topology")
                sport = self.string(link[f"port_{side}"], f"{w}.port_{side}")
                if sport not in by_switch[sname]["ports"]:
                    raise self.err(f"{w}.port_{side}", f"{sname} has no port {sport!r}")
                if (sname, sport) in used:
                    raise self.err(
                        f"{w}.port_{side}", f"{sname}:{sport} is already cabled by {used[(sname, sport)]}"
                    )
                used[(sname, sport)] = w
                ends.append((by_switch[sname], sport))
            (sa, pa), (sb, pb) = ends
            if (sa["os"] == "ib") != (sb["os"] == "ib"):
                raise self.err(
                    f"{w}.switch_b",
                    f"{sa['os']} switch {sa['name']} cannot be linked to {sb['os']} switch {sb['name']} "
                    "(InfiniBand and Ethernet are separate fabrics)",
                )
            if sa["tier"] == sb["tier"]:
                raise self.err(
                    f"{w}.switch_b",
                    f"{sa['name']} and {sb['name']} are both {PLURAL[sa['tier']]}: a link joins a leaf and "
                    "a spine (the lab models two-tier leaf-spine fabrics only)",
                )
            if "tier" in link:
                self.choice(link["tier"], f"{w}.tier", LINK_TIERS, "a link tier the lab models")
            leaf, lport, spine, sport = (sa, pa, sb, pb) if sa["tier"] == "leaf" else (sb, pb, sa, pa)
            ends_out = {"switch_a": leaf["name"], "port_a": lport, "switch_b": spine["name"], "port_b": sport}
            checked.append((w, link, ends_out))
        if not checked:
            return []
        # the fabric of each switch: switches joined by links (union-find over the link list)
        parent = {s["name"]: s["name"] for s in switches}

        def root(n: str) -> str:
            while parent[n] != n:
                parent[n] = parent[parent[n]]
                n = parent[n]
            return n

        for _, _, e in checked:
            parent[root(e["switch_a"])] = root(e["switch_b"])
        ports = {(h["name"], p["netdev"]): p for h in hosts for hca in h["hcas"] for p in hca["ports"]}
        fabric_port: dict[str, dict[str, Any]] = {}
        for c in cabling:  # the first host port cabled to each fabric gives its ISLs' speed and width
            fabric_port.setdefault(root(c["switch"]), ports[(c["host"], c["netdev"])])
        out = []
        for w, link, e in checked:
            host_port = fabric_port.get(root(e["switch_a"]))
            ll = "InfiniBand" if by_switch[e["switch_a"]]["os"] == "ib" else "Ethernet"
            if host_port is None and "speed" not in link:
                raise self.err(
                    f"{w}.speed", "is required (no host port is cabled to this fabric to take it from)"
                )
            speed = self.string(link["speed"], f"{w}.speed") if "speed" in link else host_port["speed"]
            if ll == "InfiniBand" and speed not in IB_SPEEDS:
                raise self.err(
                    f"{w}.speed", f"{speed!r} is not an InfiniBand speed (one of {', '.join(IB_SPEEDS)})"
                )
            if ll == "Ethernet" and not ETH_SPEED_RE.match(speed):
                raise self.err(f"{w}.speed", f"{speed!r} is not an Ethernet speed (like 400GbE)")
            default_width = host_port["width"] if host_port else "4X"
            width = self.choice(link.get("width", default_width), f"{w}.width", IB_WIDTHS, "a link width")
            try:
                gbps = port_rate(ll, speed, width)
            except ValueError as exc:
                raise self.err(f"{w}.width", f"{speed} {width} is not a valid link ({exc})") from None
            out.append({**e, "speed": speed, "width": width, "gbps": gbps, "tier": "leaf_spine"})
        return out

    def rails(self, hosts: list[dict]) -> dict[tuple[str, int], int]:
        """RoCE rail number per (HCA, port): the order Ethernet ports appear across the rack."""
        order: list[tuple[str, int]] = []
        for h in hosts:
            for hca in h["hcas"]:
                for p in hca["ports"]:
                    key = (hca["name"], p["port"])
                    if p["link_layer"] == "Ethernet" and key not in order:
                        order.append(key)
        if len(order) > 4:
            raise self.err(
                "hosts", f"{len(order)} RoCE rails is more than the lab's 4 (203.0.113.0/24 in /26 rails)"
            )
        return {k: r for r, k in enumerate(order)}


def _kind(value: Any) -> str:
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        type(None): "empty",
    }.get(type(value), type(value).__name__)


def _first_dup(items: list[str]) -> str | None:
    seen: set[str] = set()
    for it in items:
        if it in seen:
            return it
        seen.add(it)
    return None


# --- scaling ------------------------------------------------------------------------------


def scaled(n: int, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The default rack's shape (or BASE's, a raw topology) with N hosts: hosts named like the
    first (gpu01..gpuNN), every host cabled like the first, switch ports numbered on and grown when
    N needs more. A BASE with ``links:`` (a two-tier fabric) is scaled by :func:`_scaled_two_tier`."""
    if not 1 <= n <= MAX_HOSTS:
        raise TopologyError("--hosts", f"{n} is out of range 1..{MAX_HOSTS}")
    raw = yaml.safe_load(DEFAULT_TOPOLOGY.read_text()) if base is None else copy.deepcopy(base)
    if not isinstance(raw, dict) or not raw.get("hosts") or not raw.get("cabling") or not raw.get("switches"):
        return normalise(raw, source=f"--hosts {n}")  # the validator names what is missing
    if raw.get("links"):
        return _scaled_two_tier(n, raw)
    first = raw["hosts"][0]
    hosts = _host_names(first, n)
    per_switch: dict[str, list[dict]] = {}
    for c in raw["cabling"]:
        if c["host"] == first["name"]:
            per_switch.setdefault(c["switch"], []).append(c)
    switches = {s["name"]: s for s in raw["switches"]}
    cabling = []
    for i, h in enumerate(hosts):
        for sname, cables in per_switch.items():
            sw = switches[sname]
            for k, c in enumerate(cables):
                port = _port_name(sw, i * len(cables) + k)
                cabling.append({"host": h["name"], "netdev": c["netdev"], "switch": sname, "port": port})
    for sname, cables in per_switch.items():
        _grow_ports(switches[sname], n * len(cables))
    raw["hosts"] = hosts
    raw["cabling"] = cabling
    return normalise(raw, source=f"--hosts {n}")


def _host_names(first: dict[str, Any], n: int) -> list[dict[str, Any]]:
    m = re.match(r"^(.*?)(\d+)$", str(first["name"]))
    stem, width = (m.group(1), max(2, len(m.group(2)))) if m else (first["name"], 2)
    return [dict(first, name=f"{stem}{i:0{width}d}") for i in range(1, n + 1)]


def _port_name(sw: dict[str, Any], idx: int) -> str:
    """The switch's port number IDX (0-based) in its ``ports:`` spec (a list grows NAME-pK names)."""
    spec = sw["ports"]
    if isinstance(spec, dict):
        return str(spec["format"]).replace("{n}", str(int(spec.get("first", 1)) + idx))
    return str(spec[idx]) if idx < len(spec) else f"{sw['name']}-p{idx + 1}"


def _port_count(sw: dict[str, Any]) -> int:
    spec = sw["ports"]
    return int(spec["count"]) if isinstance(spec, dict) else len(spec)


def _grow_ports(sw: dict[str, Any], need: int) -> None:
    spec = sw["ports"]
    if isinstance(spec, dict):
        spec["count"] = max(int(spec["count"]), need)
    elif need > len(spec):
        sw["ports"] = list(spec) + [f"{sw['name']}-p{k + 1}" for k in range(len(spec), need)]


def _scaled_two_tier(n: int, raw: dict[str, Any]) -> dict[str, Any]:
    """A two-tier BASE with N hosts (docs/lab.md, "Two-tier topology").

    Each of the first host's netdevs is cabled, host by host, round-robin over the leaves that
    netdev reaches in BASE (host i on leaf ((i-1) % L)+1), on the leaf's ports from the first.
    Each leaf gets U = max(1, ceil(hosts on it / S)) links to each of its S spines (BASE's links
    name them), so its S*U uplinks carry all its hosts at full rate (1:1, non-blocking). Uplinks
    take the leaf's ports from the upper half (or right after its hosts, when they fill more);
    each spine's ports are taken in order, leaf by leaf. Switches grow ports when N needs more.
    """
    first = raw["hosts"][0]
    hosts = _host_names(first, n)
    switches = {s["name"]: s for s in raw["switches"]}
    leaves_of: dict[str, list[str]] = {}  # netdev -> the leaves it is cabled to in BASE, in order
    netdevs = [c["netdev"] for c in raw["cabling"] if c["host"] == first["name"]]
    for c in raw["cabling"]:
        if c["netdev"] in netdevs and c["switch"] not in leaves_of.setdefault(c["netdev"], []):
            leaves_of[c["netdev"]].append(c["switch"])
    spines_of: dict[str, list[str]] = {}  # leaf -> its spines (BASE's links), in order
    link_attrs: dict[tuple[str, str], dict[str, Any]] = {}
    for link in raw["links"]:
        a, b = link["switch_a"], link["switch_b"]
        leaf, spine = (a, b) if switches[a].get("tier", "leaf") == "leaf" else (b, a)
        if spine not in spines_of.setdefault(leaf, []):
            spines_of[leaf].append(spine)
        link_attrs.setdefault((leaf, spine), {k: link[k] for k in ("speed", "width") if k in link})
    on_leaf: dict[str, int] = {}
    cabling = []
    for i, h in enumerate(hosts):
        for nd in netdevs:
            leaves = leaves_of[nd]
            leaf = leaves[i % len(leaves)]
            k = on_leaf.get(leaf, 0)
            on_leaf[leaf] = k + 1
            port = _port_name(switches[leaf], k)
            cabling.append({"host": h["name"], "netdev": nd, "switch": leaf, "port": port})
    links = []
    spine_used: dict[str, int] = {}
    for leaf in dict.fromkeys(lf for nd in netdevs for lf in leaves_of[nd]):
        spines = spines_of.get(leaf, [])
        if not spines:
            continue
        h_leaf = on_leaf.get(leaf, 0)
        up = max(1, math.ceil(h_leaf / len(spines)))
        start = max(_port_count(switches[leaf]) // 2, h_leaf)
        _grow_ports(switches[leaf], start + up * len(spines))
        for s_i, spine in enumerate(spines):
            for u in range(up):
                sk = spine_used.get(spine, 0)
                spine_used[spine] = sk + 1
                links.append({
                    "switch_a": leaf,
                    "port_a": _port_name(switches[leaf], start + s_i * up + u),
                    "switch_b": spine,
                    "port_b": _port_name(switches[spine], sk),
                    **link_attrs.get((leaf, spine), {}),
                })
    for leaf, k in on_leaf.items():
        _grow_ports(switches[leaf], k)
    for spine, k in spine_used.items():
        _grow_ports(switches[spine], k)
    raw["hosts"] = hosts
    raw["cabling"] = cabling
    raw["links"] = links
    return normalise(raw, source=f"--hosts {n}")


def resolve(topology: str | None = None, n_hosts: int | None = None) -> dict[str, Any]:
    """What ``fabricops lab up [--topology NAME|FILE] [--hosts N]`` brings up, normalised.

    NAME picks ``topology-NAME.yml`` from the lab's data directory (``default``, ``two-tier``);
    anything with a ``/`` or a ``.yml``/``.yaml`` suffix, or an existing file, is a path. ``--hosts
    N`` scales that topology (the default rack when none is given) with :func:`scaled`."""
    path = DEFAULT_TOPOLOGY
    if topology:
        p = Path(topology)
        if "/" in topology or p.suffix in (".yml", ".yaml") or p.exists():
            path = p
        else:
            path = paths.DATA_DIR / f"topology-{topology}.yml"
            if not NAME_RE.match(topology) or not path.is_file():
                files = paths.DATA_DIR.glob("topology-*.yml")
                names = sorted(f.stem.removeprefix("topology-") for f in files)
                raise TopologyError(
                    "--topology",
                    f"{topology!r} is neither a file nor a lab topology (one of {', '.join(names)})",
                )
    if not n_hosts:
        return load(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise TopologyError("file", f"cannot read {path} ({exc.strerror})", None) from None
    except yaml.YAMLError:
        return load(path)  # names the line
    return scaled(n_hosts, raw)
