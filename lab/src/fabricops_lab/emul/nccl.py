"""Emulated multi-node NCCL: nccl-tests (all_reduce_perf, all_gather_perf, reduce_scatter_perf),
Open MPI 4.1's ``mpirun`` and the helper mpirun reaches every host with. Stdlib only.
docs/lab.md, "Multi-node NCCL in the lab".

``mpirun`` does what Open MPI's does before a rank runs (orte/orted/orted_submit.c root check,
rmaps slot check, plm/rsh launch over ``ssh -o BatchMode=yes HOST``) and, in place of starting
orted, asks each host for its state with ``ssh -o BatchMode=yes HOST nccl-rank-info PROGRAM``
(a small JSON: GPUs, HCA ports as the perftest emulation sees them, /etc/nccl.conf, the NCCL
library, GPUDirect mechanism, IOMMU/ACS). It then prints what the job prints: rank 0's nccl-tests
output (nccl-tests 2.18.0 src/util.cu formats), every rank's ``NCCL INFO`` lines (NCCL 2.23.4
formats, source file named at each line), and Open MPI's own messages when a rank fails.

The bandwidth comes from the lab's perftest physics (:func:`perftest.pair_rate_gbps`) per rail
and the rules in :func:`peak_busbw`; a job that would hang (an MTU that differs between the two
ends of a rail, NVIDIA/nccl#1524) prints its init lines and sleeps until it is killed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from . import devstate, perftest, services

NCCL_TESTS_VERSION = "2.18.0"
#: the NCCL the emulated nccl-tests were built against (nccl.h NCCL_VERSION_CODE, X*10000+Y*100+Z)
NCCL_HEADERS = 22304
NCCL_BUILD_SUFFIX = "+cuda12.6"
#: where NCCL's loader looks (SPEC-19 E; the Debian/Ubuntu multiarch dir first)
LIB_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/local/cuda/lib64",
    "usr/local/lib",
    "opt/nccl/lib",
)
RANK_INFO = "/usr/lib/emulated-hw/bin/nccl-rank-info"
TESTS = {
    "all_reduce_perf": "all_reduce",
    "all_gather_perf": "all_gather",
    "reduce_scatter_perf": "reduce_scatter",
}

# --- physics constants (docs/lab.md "Multi-node NCCL in the lab") ----------------------------
#: Ring busbw per NIC over line rate across nodes: 46-48 GB/s per 400G NIC (REFERENCE.md;
#: NVIDIA/nccl-tests#119, #290)
EFFICIENCY = 0.94
#: two nodes, Tree allowed: Tree's all_reduce busbw exceeds what the NICs carry (nccl-tests#196);
#: the emulator reports this factor over the Ring figure so a run that forgot Ring is visibly wrong
TREE_INFLATION = 1.6
#: without GPUDirect RDMA NCCL bounces through host memory: per rail at most this fraction of the
#: port's line rate. Uncited typical figure (~60 %), stated as such in docs/lab.md.
HOST_BOUNCE = 0.6
#: NCCL_IB_DISABLE=1 / no IB device: NET/Socket over the OOB interface, GB/s per host (uncited,
#: what TCP over a 25GbE-class management link carries)
SOCKET_GBS = 2.5
#: NVLink per link and direction, GB/s, by generation: model/data/nvlink.yml per_link_gbs
#: (tests/unit/lab/test_nccl_emul.py holds the two equal)
NVLINK_PER_LINK_GBS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
#: a GPU with no active NVLink talks to its peers over PCIe Gen5 x16: 32 GT/s x 16 x 128/130 / 8
PCIE_P2P_GBS = 63.0
#: collective latency model (microseconds): fixed + per node + per rank; uncited, shaped like the
#: real tables (busbw rises with size and saturates from ~256 MB)
LAT_BASE_US, LAT_NODE_US, LAT_RANK_US = 8.0, 4.0, 0.6

Runner = Callable[[str, list[str]], tuple[int, str, str]]
#: how mpirun reaches another host: (host, argv) -> (rc, stdout, stderr). None: real ssh.
#: Unit tests put a function here (the one place the SSH hop is replaced).
REMOTE: Runner | None = None


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


# --- NCCL's own rules ----------------------------------------------------------------------


def set_env_file(text: str) -> dict[str, str]:
    """What the emulated NCCL takes from an nccl.conf: NCCL's setEnvFile (src/misc/param.cc) read
    as NCCL reads it: up to the first '=' is the name, the rest the value, verbatim; lines without
    '=' are skipped; the first line of a name wins (setenv without overwrite); a '#' line sets a
    name no NCCL_* lookup reads, so only names NCCL could look up are kept.

    Not fabricops.evidence.hostfiles.parse_nccl_conf on purpose: this package is copied onto the
    emulated hosts alone (lab/hosts.py install_emulated_software) and imports nothing of the product,
    and the emulated NCCL is the independent reading the product's parser is tested against
    (tests/unit/evidence/test_hostfiles.py)."""
    env: dict[str, str] = {}
    for line in text.split("\n"):
        name, eq, value = line.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            env.setdefault(name, value)
    return env


def _if_list(spec: str | None) -> tuple[list[tuple[str, int]], bool, bool]:
    """NCCL's parseStringList (src/misc/utils.cc) after the '^' and '=' prefixes of
    ncclIbInit (src/transport/net_ib.cc): ([(prefix, port or -1)], exclude, exact)."""
    if spec is None:
        return [], False, False
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    items = []
    for tok in spec.split(","):
        name, colon, port = tok.partition(":")
        if name:
            items.append((name, int(port) if colon and port.isdigit() else (0 if colon else -1)))
    return items, exclude, exact


def hca_selected(dev: str, port: int, spec: str | None) -> bool:
    """matchIfList(...) ^ searchNot, as ncclIbInit filters each ACTIVE port by NCCL_IB_HCA:
    prefix match unless '=' (exact), port -1 matches any, an empty list matches everything."""
    items, exclude, exact = _if_list(spec)
    if not items:
        match = True
    else:
        match = any(
            (dev == name if exact else dev.startswith(name)) and (p == -1 or p == port) for name, p in items
        )
    return match != exclude


def algo_allows_tree(value: str | None) -> bool:
    """NCCL_ALGO (src/enqueue.cc parseList): a comma list of algorithms, '^' to exclude; unset
    lets NCCL choose (Tree on two nodes for all_reduce)."""
    if not value:
        return True
    exclude = value.startswith("^")
    names = {t.strip().lower() for t in value.lstrip("^").split(",") if t.strip()}
    return ("tree" not in names) if exclude else ("tree" in names)


#: NCCL's debug subsystems (src/include/nccl_common.h ncclDebugLogSubSys, src/debug.cc names)
SUBSYS = ("INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL", "PROXY", "NVLS",
          "BOOTSTRAP", "REG", "PROFILE", "RAS")


def debug_mask(value: str | None) -> set[str]:
    """NCCL_DEBUG_SUBSYS (src/debug.cc ncclDebugInit): unset = INIT,BOOTSTRAP,ENV; a comma list;
    '^' inverts; ALL is every subsystem."""
    if value is None:
        return {"INIT", "BOOTSTRAP", "ENV"}
    invert = value.startswith("^")
    names = {t.strip().upper() for t in value.lstrip("^").split(",") if t.strip()}
    names = set(SUBSYS) if "ALL" in names else names & set(SUBSYS)
    return set(SUBSYS) - names if invert else names


def version_code(version: str) -> int:
    x, y, z = (int(p) for p in version.split("."))
    return x * 10000 + y * 100 + z if (x, y) >= (2, 9) else x * 1000 + y * 100 + z


# --- the host side: nccl-rank-info ----------------------------------------------------------


def nccl_library() -> str | None:
    """The NCCL version the loader would find: libnccl.so.2 (the soname) in a library dir,
    its version from the file it resolves to, else the newest libnccl.so.2.X.Y there."""
    best: tuple[int, ...] | None = None
    for d in LIB_DIRS:
        so = devstate.path(d) / "libnccl.so.2"
        if not os.path.exists(so):
            continue
        m = re.search(r"libnccl\.so\.(\d+)\.(\d+)\.(\d+)$", os.path.realpath(so))
        if m:
            cand = tuple(int(g) for g in m.groups())
        else:
            found = [
                tuple(int(g) for g in mm.groups())
                for f in os.listdir(so.parent)
                if (mm := re.fullmatch(r"libnccl\.so\.(\d+)\.(\d+)\.(\d+)", f))
            ]
            cand = max(found) if found else (2, 0, 0)
        best = cand if best is None or cand > best else best
    return ".".join(str(v) for v in best) if best else None


def _kernel_at_least(release: str, want: tuple[int, int]) -> bool:
    m = re.match(r"(\d+)\.(\d+)", release or "")
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= want


def _norm_bdf(bdf: str) -> str:
    """'00000000:18:00.0' / '0000:18:00.0' / '18:00.0' -> '0000:18:00.0' (lower case)."""
    parts = str(bdf).lower().split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}" if len(parts) == 3 else str(bdf).lower()


def _redirecting(acs: Any) -> bool:
    return isinstance(acs, dict) and bool(acs.get("ReqRedir") or acs.get("CmpltRedir"))


def acs_redirected(pcie: Any) -> set[str] | None:
    """BDFs (normalised) of devices below a bridge whose ACS control redirects peer-to-peer
    (ReqRedir+ or CmpltRedir+: NCCL docs "PCI Access Control Services (ACS)", nccl#1737).
    hardware.json ``pcie`` is the emulated PCIe tree (SPEC-19 C); read tolerantly: nested
    bridges (``children``/``devices``/``downstream``) or a flat device list with bus ranges. None
    means a redirecting bridge was found but not what is below it (then every path counts)."""
    if not pcie:
        return set()
    found: set[str] = set()
    unknown = False
    flat: list[dict[str, Any]] = []

    def subtree_bdfs(node: Any) -> set[str]:
        out: set[str] = set()
        if isinstance(node, dict):
            for key in ("bdf", "pci", "pci_bus_id"):
                if isinstance(node.get(key), str):
                    out.add(_norm_bdf(node[key]))
            for v in node.values():
                if isinstance(v, list | dict):
                    out |= subtree_bdfs(v)
        elif isinstance(node, list):
            for v in node:
                out |= subtree_bdfs(v)
        return out

    def walk(node: Any) -> None:
        nonlocal unknown
        if isinstance(node, list):
            for v in node:
                walk(v)
            return
        if not isinstance(node, dict):
            return
        if isinstance(node.get("bdf"), str):
            flat.append(node)
        if _redirecting(node.get("acs_ctl") or node.get("acs")):
            below = subtree_bdfs({k: v for k, v in node.items() if isinstance(v, list | dict)})
            below.discard(_norm_bdf(node.get("bdf", "")))
            if below:
                found.update(below)
            elif not isinstance(node.get("bus"), dict):
                unknown = True
        for v in node.values():
            if isinstance(v, list | dict):
                walk(v)

    walk(pcie)
    # a flat list with bus ranges (as lspci's parser gives them): devices on buses under the bridge
    for br in flat:
        bus = br.get("bus") if isinstance(br.get("bus"), dict) else None
        if bus and _redirecting(br.get("acs_ctl") or br.get("acs")):
            dom = _norm_bdf(br["bdf"]).split(":")[0]
            lo, hi = int(bus.get("secondary", 0)), int(bus.get("subordinate", -1))
            for dev in flat:
                d = _norm_bdf(dev["bdf"]).split(":")
                if d[0] == dom and lo <= int(d[1], 16) <= hi:
                    found.add(":".join(d))
    return None if unknown and not found else found


def iommu_types() -> list[str]:
    """The IOMMU group types the kernel shows (Documentation/ABI/testing/sysfs-kernel-iommu_groups)."""
    base = devstate.sysfs("kernel/iommu_groups")
    try:
        groups = os.listdir(base)
    except OSError:
        return []
    types = set()
    for g in groups:
        with _quiet():
            types.add((base / g / "type").read_text().strip())
    return sorted(types)


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], OSError)


def _oob(env: dict[str, str], host: str) -> tuple[str, str]:
    """The bootstrap/OOB interface: NCCL_SOCKET_IFNAME's first name, else the management eth0,
    with its address from the lab's addresses file (fabric dir hosts/HOST/addresses.json)."""
    items, _exclude, _exact = _if_list(env.get("NCCL_SOCKET_IFNAME"))
    ifname = items[0][0] if items and not _exclude else "eth0"
    addrs = devstate.fabric_json(f"hosts/{host}/addresses.json") or {}
    ip = (addrs.get("mgmt") or {}).get(ifname) or ((addrs.get("netdevs") or {}).get(ifname) or {}).get("ipv4")
    return ifname, ip or "127.0.0.1"


def _trim_qos(facts: dict[str, Any]) -> dict[str, Any]:
    """Keep the JSON small: dscp2prio entries equal to the default (dscp >> 3) are what the
    physics assumes for a missing entry anyway."""
    qos = facts.get("qos") or {}
    if "dscp2prio" in qos:
        qos["dscp2prio"] = {k: v for k, v in qos["dscp2prio"].items() if int(v) != int(k) >> 3}
    return facts


def _executable(program: str) -> bool:
    """PROGRAM is on this host: a path, or a name in PATH (paths under EMUL_ROOT)."""
    if "/" in program:
        return os.access(devstate.path(program), os.X_OK)
    dirs = os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin").split(":")
    return any(os.access(devstate.path(d) / program, os.X_OK) for d in dirs if d)


def rank_info(program: str | None = None) -> dict[str, Any]:
    """This host's state for a rank: what `nccl-rank-info` prints as JSON."""
    try:
        hw = devstate.load_hardware()
    except (OSError, ValueError):
        return {"error": "no hardware.json"}
    host = hw.get("host") or os.uname().nodename
    gpus = []
    for g in sorted(hw.get("gpus", []), key=lambda g: str(g.get("pci_bus_id", ""))):  # CUDA PCI order
        links = int(g.get("nvlinks") or 0) - len(g.get("inactive_nvlinks") or [])
        gpus.append(
            {
                "bus": g.get("pci_bus_id", "00000000:00:00.0"),
                "name": g.get("name", "GPU"),
                "gen": int(g.get("nvlink_gen") or 0),
                "links": max(0, links),
                "mem": int(g.get("memory_mib") or 81559),
            }
        )
    ports = []
    for hca in hw.get("hcas", []):
        for p in hca.get("ports", []):
            opts = perftest.Options(
                verb="write", kind="bw", device=hca["name"], ib_port=int(p.get("port", 1))
            )
            facts, error = perftest.local_facts(opts)
            if facts is None or facts.get("device") != hca["name"]:
                ports.append(
                    {
                        "device": hca["name"],
                        "port": int(p.get("port", 1)),
                        "active": False,
                        "link_layer": p.get("link_layer"),
                        "error": (error or "").strip()[:80],
                    }
                )
                continue
            facts = _trim_qos(dict(facts, active=True, pci=hca.get("pci", "")))
            facts.pop("shown_device", None)
            ports.append(facts)
    try:
        conf = set_env_file(devstate.path("etc/nccl.conf").read_text())
    except OSError:
        conf = {}
    exe = None
    if program:
        exe = _executable(program)
    loaded = services.loaded_modules()
    redirect = acs_redirected(hw.get("pcie"))
    return {
        "host": host,
        "pid": os.getpid(),
        "nccl": nccl_library(),
        "exe": exe,
        "cuda": hw.get("cuda_version", "12.4"),
        "gpus": gpus,
        "ports": ports,
        "conf": conf,
        "affinity": hw.get("nic_affinity") or {},
        "peermem": "nvidia_peermem" in loaded,
        # DMA-BUF: kernel >= 5.12 and the open kernel module (SPEC-19 A.4; NCCL src/init.cc
        # dmaBufSupported asks CUDA for CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)
        "dmabuf": bool(gpus)
        and "nvidia" in loaded
        and _kernel_at_least(str(hw.get("kernel", "")), (5, 12))
        and str(hw.get("gpu_kernel_module", "open")) == "open",
        # the kernel's view; before the emulated sysfs is rendered, the PCIe tree's own record
        "iommu": iommu_types() or sorted(set(((hw.get("pcie") or {}).get("iommu_groups") or {}).values())),
        "acs_redirect": None if redirect is None else sorted(redirect),
        "oob": _oob(conf, host),
        "mnnvl": mnnvl_state(hw),
    }


def mnnvl_state(hw: dict[str, Any]) -> dict[str, Any] | None:
    """What NCCL's multi-node NVLink needs on an NVL72 tray: the GPUs' fabric clique (``nvidia-smi -q``
    Fabric ClusterUUID / CliqueId, one per NVLink domain), IMEX channel0 to open and this node's IMEX
    daemon running (fabric memory handles are imported through it). None: not in an NVLink domain."""
    dom = hw.get("nvlink_domain")
    if not dom:
        return None
    from . import imex

    return {"clique": f"{dom.get('cluster_uuid')}/{dom.get('clique_id')}",
            "channel": imex.channel_path().exists(), "imex": imex.local_daemon() is not None}


def mnnvl_used(hosts: list[dict[str, Any]], envs: list[dict[str, str]]) -> bool:
    """NCCL connects the nodes over NVLink (MNNVL) when every rank's tray is in the same clique with a
    channel and a running IMEX, unless NCCL_MNNVL_ENABLE=0 (NCCL docs, Troubleshooting, "Multi-node
    NVLink (MNNVL) issues"; the default 2 uses it where supported). Otherwise the network carries it."""
    states = [h.get("mnnvl") for h in hosts]
    if len(hosts) < 2 or any(not st for st in states):
        return False
    if any(e.get("NCCL_MNNVL_ENABLE", "2").strip() == "0" for e in envs):
        return False
    return len({st["clique"] for st in states}) == 1 and all(st["channel"] and st["imex"] for st in states)


def nccl_rank_info(argv: list[str]) -> int:
    _out(json.dumps(rank_info(argv[0] if argv else None), separators=(",", ":")))
    return 0


# --- the physics --------------------------------------------------------------------------


def host_env(info: dict[str, Any], xenv: dict[str, str]) -> dict[str, str]:
    """A rank's NCCL settings: -x (the environment) wins over /etc/nccl.conf (setenv without
    overwrite in NCCL's setEnvFile)."""
    return {**info.get("conf", {}), **xenv}


def selected_rails(info: dict[str, Any], env: dict[str, str]) -> list[dict[str, Any]]:
    """The net devices NCCL's IB transport uses on the host, in device order: ACTIVE ports of an
    InfiniBand or Ethernet link layer passing NCCL_IB_HCA (src/transport/net_ib.cc ncclIbInit)."""
    if env.get("NCCL_IB_DISABLE", "0").strip() not in ("", "0"):
        return []
    spec = env.get("NCCL_IB_HCA")
    return [
        p
        for p in info.get("ports", [])
        if p.get("active") and hca_selected(p["device"], int(p["port"]), spec)
    ]


def gdr_mechanism(info: dict[str, Any]) -> bool:
    """NCCL enables GPUDirect RDMA for an HCA with nvidia_peermem (NCCL_PTR_CUDA) or DMA-BUF
    (src/graph/topo.cc: gdrSupport = ptrSupport & CUDA || dmaBufSupport && ptrSupport & DMABUF)."""
    return bool(info.get("peermem") or info.get("dmabuf"))


def gdr_path_ok(info: dict[str, Any], rail: dict[str, Any]) -> bool:
    """Peer-to-peer between the rail's HCA and its GPUs really goes direct: no ACS redirect on the
    path (the traffic is sent up to the root complex; nccl#1737) and the IOMMU not translating
    (DMA/DMA-FQ without ATS; the lab emulates no ATS)."""
    if any(t in ("DMA", "DMA-FQ") for t in info.get("iommu", [])):
        return False
    redirect = info.get("acs_redirect")
    if redirect is None:
        return False
    if not redirect:
        return True
    near = [
        _norm_bdf(g["bus"])
        for i, g in enumerate(info.get("gpus", []))
        if i in set(info.get("affinity", {}).get(rail["device"], []))
    ]
    return not ({_norm_bdf(rail.get("pci") or "")} | set(near)) & set(redirect)


def nvlink_gbs(info: dict[str, Any]) -> float:
    rates = [
        NVLINK_PER_LINK_GBS.get(g["gen"], 25.0) * g["links"] if g["links"] else PCIE_P2P_GBS
        for g in info.get("gpus", [])
    ]
    return min(rates) if rates else PCIE_P2P_GBS


def peak_busbw(
    collective: str,
    hosts: list[dict[str, Any]],
    envs: list[dict[str, str]],
    rate: Callable[[dict, dict], tuple[float | None, str | None]] = perftest.pair_rate_gbps,
) -> dict[str, Any]:
    """The largest-size busbw (GB/s) of the job and what decided it:
    ``{"busbw", "transport": "IB"|"Socket"|"NVLink", "rails", "per_rail", "hang", "fatal", "tree"}``.
    Ring: E x R x the least per-rail rate over rails and hosts, each rail's rate what the perftest
    physics gives between its two ends (GB/s), capped at the host-bounce rate without GPUDirect
    RDMA; capped by NVLink; Tree on two nodes inflates all_reduce."""
    out: dict[str, Any] = {
        "transport": "NVLink",
        "rails": 0,
        "per_rail": [],
        "hang": None,
        "fatal": None,
        "tree": False,
    }
    nv = EFFICIENCY * min(nvlink_gbs(h) for h in hosts)
    if len(hosts) == 1:
        out["busbw"] = nv
        return out
    if mnnvl_used(hosts, envs):
        out.update(busbw=nv, mnnvl=True)  # the trays' NVLink (switch trays), not the network
        return out
    rails = [selected_rails(h, e) for h, e in zip(hosts, envs, strict=True)]
    if any(not r for r in rails):
        out.update(transport="Socket", busbw=min(nv, EFFICIENCY * SOCKET_GBS))
        return out
    n_rails = min(len(r) for r in rails)
    per_rail: list[float] = []
    for k in range(len(hosts)):
        nxt = (k + 1) % len(hosts)
        if len(hosts) == 2 and k == 1:
            break  # two hosts: one pair of ends per rail
        for i in range(n_rails):
            a, b = rails[k][i], rails[nxt][i]
            if int(a.get("mtu") or 0) != int(b.get("mtu") or 0):
                out["hang"] = (
                    f"{hosts[k]['host']} {a['device']} active_mtu {a.get('mtu')} vs "
                    f"{hosts[nxt]['host']} {b['device']} active_mtu {b.get('mtu')}"
                )
                continue
            gbps, fatal = rate(a, b)
            if gbps is None:
                out["fatal"] = (hosts[k], a, hosts[nxt], b, fatal)
                continue
            r = gbps / 8
            for h, port in ((hosts[k], a), (hosts[nxt], b)):
                if not (gdr_mechanism(h) and gdr_path_ok(h, port)):
                    r = min(r, HOST_BOUNCE * float(port.get("rate_gbps") or 0) / 8)
            per_rail.append(r)
    out.update(transport="IB", rails=n_rails, per_rail=per_rail)
    busbw = min(nv, EFFICIENCY * n_rails * min(per_rail)) if per_rail else 0.0
    if (
        collective == "all_reduce"
        and len(hosts) == 2
        and all(algo_allows_tree(e.get("NCCL_ALGO")) for e in envs)
    ):
        busbw *= TREE_INFLATION
        out["tree"] = True
    out["busbw"] = busbw
    return out


# --- nccl-tests arguments -------------------------------------------------------------------

_TEST_OPTS = {
    "t": "nthreads",
    "g": "ngpus",
    "b": "minbytes",
    "e": "maxbytes",
    "i": "stepbytes",
    "f": "stepfactor",
    "n": "iters",
    "m": "agg_iters",
    "w": "warmup_iters",
    "N": "run_cycles",
    "p": "parallel_init",
    "c": "check",
    "o": "op",
    "d": "datatype",
    "r": "root",
    "z": "blocking",
    "y": "stream_null",
    "T": "timeout",
    "G": "cudagraph",
    "C": "report_cputime",
    "S": "report_timestamps",
    "J": "output_file",
    "a": "average",
    "R": "local_register",
    "x": "cta_policy",
    "D": "device_implementation",
    "V": "device_cta_count",
    "M": "memory",
    "u": "unalign",
}
_LONG_TEST = {v: k for k, v in _TEST_OPTS.items()}


class TestUsage(Exception):
    pass


def parse_size(text: str) -> int:
    """nccl-tests parsesize (src/common.cu): a number with an optional K/M/G (1024-based)."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KkMmGg]?)\s*", text)
    if not m:
        raise TestUsage(f"invalid size specified for '{text}'")
    mult = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


def parse_test_args(argv: list[str]) -> dict[str, Any]:
    """getopt_long over nccl-tests' option string (src/common.cu main)."""
    vals: dict[str, str] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        key = None
        if a.startswith("--"):
            name, eq, val = a[2:].partition("=")
            if name == "help":
                raise TestUsage("")
            key = _LONG_TEST.get(name)
            if key is None:
                raise TestUsage(f"invalid option '{a}'")
            if not eq:
                i += 1
                val = argv[i] if i < len(argv) else ""
        elif a.startswith("-") and len(a) > 1:
            key = a[1]
            if key == "h":
                raise TestUsage("")
            if key not in _TEST_OPTS:
                raise TestUsage(f"invalid option '{key}'")
            val = a[2:]
            if not val:
                i += 1
                val = argv[i] if i < len(argv) else ""
        else:
            i += 1
            continue  # getopt permutes; stray words are ignored
        vals[key] = val
        i += 1
    args = {
        "nthreads": int(vals.get("t", 1)),
        "ngpus": int(vals.get("g", 1)),
        "minbytes": parse_size(vals.get("b", "32M")),
        "maxbytes": parse_size(vals.get("e", "32M")),
        "stepbytes": parse_size(vals.get("i", "1M")),
        "stepfactor": int(vals.get("f", 1)),
        "iters": int(vals.get("n", 20)),
        "agg_iters": int(vals.get("m", 1)),
        "warmup_iters": int(vals.get("w", 1)),
        "check": int(vals.get("c", 1)),
        "graph": int(vals.get("G", 0)),
        "blocking": int(vals.get("z", 0)),
        "output_file": vals.get("J"),
    }
    if args["minbytes"] > args["maxbytes"]:
        raise TestUsage(
            f"invalid sizes for 'minbytes' and 'maxbytes': {args['minbytes']} > {args['maxbytes']}"
        )
    return args


def _sizes(args: dict[str, Any]) -> list[int]:
    out, size = [], args["minbytes"]
    while size <= args["maxbytes"]:
        out.append(size)
        if args["stepfactor"] > 1:
            size *= args["stepfactor"]
        else:
            size += max(1, args["stepbytes"])
        if len(out) > 4096:
            break
    return out


def _counts(collective: str, size: int, nranks: int) -> tuple[int, int]:
    """(printed size, printed count) for float: getCollByteCount of each test
    (src/all_reduce.cu, all_gather.cu, reduce_scatter.cu); base rounds to 16 bytes."""
    count = size // 4
    if collective == "all_reduce":
        return count * 4, count
    base = (count // nranks) & ~3
    return base * nranks * 4, base


def float_str(value: float, width: int) -> str:
    """nccl-tests getFloatStr (src/util.cu)."""
    power, val = 0, 1
    while value >= val:
        power += 1
        val *= 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def _g(value: float) -> str:
    return "%g" % value  # noqa: UP031 - C printf %g, as nccl-tests prints it


# --- one job --------------------------------------------------------------------------------


class Job:
    """One nccl-tests run over RANKS ((host index, local rank) per rank) on HOSTS (rank-info dicts)."""

    def __init__(
        self,
        program: str,
        argv: list[str],
        hosts: list[dict[str, Any]],
        procs: list[int],
        xenv: dict[str, str],
        tag_output: bool = False,
    ):
        self.program = os.path.basename(program)
        self.collective = TESTS[self.program]
        self.argv = [program, *argv]
        self.hosts = hosts
        self.procs = procs  # host index of each MPI process, in rank order
        self.xenv = xenv
        self.tag = tag_output
        self.envs = [host_env(h, xenv) for h in hosts]
        seed = "|".join([self.program, *[h["host"] for h in hosts], os.environ.get("EMUL_SEED", "")])
        self.rng = random.Random(int(hashlib.sha256(seed.encode()).hexdigest()[:12], 16))

    # output, optionally with mpirun --tag-output prefixes ([jobid,rank]<stdout>:)
    def say(self, rank: int, text: str, stream: str = "stdout") -> None:
        prefix = f"[1,{rank}]<{stream}>:" if self.tag else ""
        (_out if stream == "stdout" else _err)(prefix + text)

    def run(self) -> int:
        args = self.args
        per_proc = args["nthreads"] * args["ngpus"]
        nranks = len(self.procs) * per_proc
        h0 = self.hosts[self.procs[0]]
        lib = h0.get("nccl") or "2.23.4"
        json_doc = None
        if args["output_file"]:
            json_doc = self._json_open(args["output_file"], lib)
        self.say(
            0,
            f"# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers={NCCL_HEADERS} "
            f"nccl-library={version_code(lib)}",
        )
        self.say(0, f"# Collective test starting: {self.program}")
        step = (args["stepfactor"], "factor") if args["stepfactor"] > 1 else (args["stepbytes"], "bytes")
        self.say(
            0,
            f"# nThread {args['nthreads']} nGpus {args['ngpus']} minBytes {args['minbytes']} maxBytes "
            f"{args['maxbytes']} step: {step[0]}({step[1]}) warmup iters: {args['warmup_iters']} iters: "
            f"{args['iters']} agg iters: {args['agg_iters']} validation: {args['check']} graph: "
            f"{args['graph']}",
        )
        if args["blocking"]:
            self.say(0, "# Blocking Enabled: wait for completion and barrier after each collective ")
        self.say(0, "#")
        self.say(0, "# Using devices")
        # localRank = earlier processes on the same host (getHostHash); cudaDev = localRank*per_proc+i
        devices, local_seen = [], {}
        for p, hidx in enumerate(self.procs):
            local = local_seen.get(hidx, 0)
            local_seen[hidx] = local + 1
            host = self.hosts[hidx]
            first = local * per_proc
            if first + per_proc > len(host["gpus"]):
                return self._missing_gpu(p, host, first + per_proc)
            for i in range(per_proc):
                devices.append(
                    {
                        "rank": p * per_proc + i,
                        "proc": p,
                        "host": hidx,
                        "local": local,
                        "dev": first + i,
                        "gpu": host["gpus"][first + i],
                        "pid": int(host.get("pid", 4000)) + 1 + local,
                    }
                )
        for d in devices:
            dom, bus, slot = _norm_bdf(d["gpu"]["bus"]).split(":")
            self.say(
                0,
                f"#  Rank {d['rank']:2d} Group {0:2d} Pid {d['pid']:6d} on "
                f"{self.hosts[d['host']]['host']:>10s} device {d['dev']:2d} "
                f"[{int(dom, 16):04x}:{int(bus, 16):02x}:{int(slot.split('.')[0], 16):02x}] "
                f"{d['gpu']['name']}",
            )
        mem = min(d["gpu"]["mem"] for d in devices) * 1024 * 1024
        gb = 1 << 30
        reserve = min(-(-mem // (16 * gb)) * gb, 4 * gb)
        mem_max = (mem - reserve - gb) // (3 if args["check"] else 2)
        if args["maxbytes"] > mem_max:
            args["maxbytes"] = mem_max
            args["minbytes"] = min(args["minbytes"], mem_max)
            self.say(0, "#")
            self.say(0, f"# Reducing maxBytes to {mem_max} due to memory limitation")
        phys = peak_busbw(
            self.collective,
            [self.hosts[i] for i in sorted(set(self.procs))],
            [self.envs[i] for i in sorted(set(self.procs))],
        )
        self._init_lines(devices, nranks, phys)
        if phys.get("fatal"):
            return self._network_error(devices, phys["fatal"])
        self._table_header()
        if phys.get("hang"):
            # NVIDIA/nccl#1524: the QPs of a rail whose ends disagree on the MTU never complete;
            # the job sits in its first collective until something kills it
            while True:
                time.sleep(3600)
        rows, bw_sum, bw_n = [], 0.0, 0
        nodes = len(set(self.procs))
        lat = LAT_BASE_US + LAT_NODE_US * (nodes - 1) + LAT_RANK_US * nranks
        factor = 2 * (nranks - 1) / nranks if self.collective == "all_reduce" else (nranks - 1) / nranks
        peak = max(phys["busbw"], 1e-6)
        for size in _sizes(args):
            shown, count = _counts(self.collective, size, nranks)
            halves = []
            for _half in ("oop", "ip"):
                t = (lat + shown * factor / (peak * 1e3)) * (1 + self.rng.uniform(-0.004, 0.004))
                algbw = shown / t / 1e3
                halves.append((t, algbw, algbw * factor))
                bw_sum += algbw * factor
                bw_n += 1
            rows.append((shown, count, halves))
            line = f"{shown:12d}  {count:12d}  {'float':>8s}  {self._redop():>6s}  {-1:6d}"
            for t, alg, bus in halves:
                line += (
                    f"  {float_str(t, 7):>7s}  {float_str(alg, 6):>6s}  {float_str(bus, 6):>6s}  {_g(0):>6s}"
                )
            self.say(0, line)
        avg = bw_sum / max(1, bw_n)
        min_bw = os.environ.get("NCCL_TESTS_MIN_BW") or self.xenv.get("NCCL_TESTS_MIN_BW")
        check = float(min_bw) if min_bw else -1.0
        verdict = "" if check == -1 else ("FAILED" if avg < check * 0.9 else "OK")
        self.say(0, "# Out of bounds values : 0 OK")
        self.say(0, f"# Avg bus bandwidth    : {_g(avg)} {verdict}")
        self.say(0, "#")
        self.say(0, f"# Collective test concluded: {self.program}")
        self.say(0, "#")
        self.say(0, "")
        if json_doc is not None:
            self._json_close(json_doc, devices, rows, avg, check)
        return 7 if verdict == "FAILED" else 0

    @property
    def args(self) -> dict[str, Any]:
        return self._args

    def _redop(self) -> str:
        return "none" if self.collective == "all_gather" else "sum"

    def _table_header(self) -> None:
        """writeResultHeader (src/util.cu), its printf formats verbatim."""
        self.say(0, "#")
        self.say(
            0,
            "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "  # noqa: UP031
            % ("", "", "", "", ""),
        )
        self.say(
            0,
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"  # noqa: UP031
            % (
                "size",
                "count",
                "type",
                "redop",
                "root",
                "time",
                "algbw",
                "busbw",
                "#wrong",
                "time",
                "algbw",
                "busbw",
                "#wrong",
                0,
                "",
            ),
        )
        self.say(
            0,
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"  # noqa: UP031
            % (
                "(B)",
                "(elements)",
                "",
                "",
                "",
                "(us)",
                "(GB/s)",
                "(GB/s)",
                "",
                "(us)",
                "(GB/s)",
                "(GB/s)",
                "",
                0,
                "",
            ),
        )

    # -- failures, as the real job shows them --------------------------------------------------

    def _missing_gpu(self, proc: int, host: dict[str, Any], wanted: int) -> int:
        """nccl-tests 2.18 writeDeviceReport (src/util.cu): a rank whose CUDA device index does not
        exist; main's TESTCHECK (src/common.cu:1206) names the host; Open MPI aborts the job."""
        self.say(
            proc,
            f"Invalid number of GPUs: {wanted} requested but only {len(host['gpus'])} were found.",
            "stderr",
        )
        self.say(proc, "Please check the number of processes and GPUs per process.", "stderr")
        self.say(
            proc, f" .. {host['host']} pid {int(host.get('pid', 4000)) + 1}: Test failure common.cu:1206"
        )
        mpi_nonzero_exit(proc, 5)
        return 5

    def _network_error(self, devices: list[dict[str, Any]], fatal: tuple) -> int:
        """No data path between two ends of a rail (a switch port down, ports on different
        fabrics): the RC QP's sends fail with IBV_WC_RETRY_EXC_ERR (status 12) and NCCL reports a
        remote error (src/transport/net_ib.cc; ncclGetErrorString(ncclRemoteError))."""
        ha, a, hb, _b, _why = fatal
        d = next(x for x in devices if self.hosts[x["host"]]["host"] == ha["host"])
        prefix = f"{ha['host']}:{d['pid']}:{d['pid'] + 61} [{d['dev']}]"
        self.say(
            d["rank"],
            f"\n{prefix} transport/net_ib.cc:2082 NCCL WARN NET/IB : Got completion from peer "
            f"{hb['oob'][1]}<0> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid "
            f"{a['device']} hca {a['device']}",
        )
        self.say(
            d["rank"],
            f"{ha['host']}: Test NCCL failure common.cu:393 'remote process exited or there was a "
            f"network error / NET/IB : Got completion from peer {hb['oob'][1]}<0> with status=12'",
        )
        self.say(d["rank"], f" .. {ha['host']} pid {d['pid']}: Test failure common.cu:1206")
        mpi_nonzero_exit(d["proc"], 3)
        return 3

    # -- NCCL INFO ----------------------------------------------------------------------------

    def _init_lines(self, devices: list[dict[str, Any]], nranks: int, phys: dict[str, Any]) -> None:
        """Each rank's NCCL INFO lines with NCCL_DEBUG=INFO, filtered by NCCL_DEBUG_SUBSYS as
        NCCL filters them (src/debug.cc: default INIT,BOOTSTRAP,ENV; so the NET-only GPU Direct
        RDMA lines need NCCL_DEBUG_SUBSYS to name NET). Each line: its subsystems, its source."""
        nodes = sorted(set(self.procs))
        comm_id = self.rng.getrandbits(64)
        by_host: dict[int, list[dict[str, Any]]] = {}
        for d in devices:
            by_host.setdefault(d["host"], []).append(d)
        for d in devices:
            h, env = self.hosts[d["host"]], self.envs[d["host"]]
            level = env.get("NCCL_DEBUG", "").upper()
            if level not in ("INFO", "TRACE"):
                if d["rank"] == 0 and level in ("VERSION", "WARN"):
                    self.say(0, f"NCCL version {h.get('nccl') or '2.23.4'}{NCCL_BUILD_SUFFIX}")
                continue
            mask = debug_mask(env.get("NCCL_DEBUG_SUBSYS"))
            pid, tid, cdev = d["pid"], d["pid"] + 61, d["dev"]
            ifname, ip = h["oob"]
            comm = f"0x{(0x55d3c0000000 + d['rank'] * 0x1A2B40):x}"
            bus = int(_norm_bdf(d["gpu"]["bus"]).split(":")[1], 16)
            cuda_major, _dot, cuda_minor = str(h.get("cuda", "12.4")).partition(".")
            lines: list[tuple[set[str], str]] = []

            def add(subsys: str, text: str, main_thread: bool = False) -> None:
                who = f"{h['host']}:{pid}:{pid if main_thread else tid} [{cdev}] NCCL INFO "  # noqa: B023
                lines.append((set(subsys.split("|")), who + text))  # noqa: B023

            add("BOOTSTRAP", f"Bootstrap : Using {ifname}:{ip}<0>", True)  # src/bootstrap.cc
            add("INIT", f"cudaDriverVersion {int(cuda_major) * 1000 + int(cuda_minor or 0) * 10}", True)
            # src/init.cc showVersion, INFO(NCCL_ALL, ...)
            add("ALL", f"NCCL version {h.get('nccl') or '2.23.4'}{NCCL_BUILD_SUFFIX}", True)
            add("INIT|NET", "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.")
            rails = selected_rails(h, env)
            if env.get("NCCL_IB_HCA") is not None:
                add("NET|ENV", f"NCCL_IB_HCA set to {env['NCCL_IB_HCA']}")  # src/transport/net_ib.cc
            ib_off = env.get("NCCL_IB_DISABLE", "0").strip() not in ("", "0")
            socket = ib_off or not rails
            if not ib_off:
                if rails:
                    kinds = ["IB" if r["link_layer"] == "InfiniBand" else "RoCE" for r in rails]
                    using = "".join(f" [{k}]{r['device']}:{r['port']}/{kinds[k]}"
                                    for k, r in enumerate(rails))
                    # src/transport/net_ib.cc ncclIbInit: "NET/IB : Using%s %s; OOB %s:%s"
                    add("INIT|NET", f"NET/IB : Using{using} ; OOB {ifname}:{ip}<0>")
                else:
                    add("INIT|NET", "NET/IB : No device found.")
            if socket:
                add("INIT|NET", f"NET/Socket : Using [0]{ifname}:{ip}<0>")  # src/transport/net_socket.cc
            add("INIT", f"Using network {'Socket' if socket else 'IB'}")  # src/init.cc
            start = (f"ncclCommInitRank comm {comm} rank {d['rank']} nranks {nranks} cudaDev {cdev} "
                     f"nvmlDev {cdev} busId {bus:x}000 commId 0x{comm_id:x}")
            add("INIT", f"{start} - Init START")
            if h.get("dmabuf") and not socket:
                add("INIT", f"DMA-BUF is available on GPU device {cdev}")  # src/init.cc:293
            gdr = gdr_mechanism(h) and not socket
            if socket:
                add("NET", f"NET/Socket : GPU Direct RDMA Disabled for HCA 0 '{ifname}'")
            else:
                for k, r in enumerate(rails):  # src/graph/topo.cc:802, INFO(NCCL_NET, ...)
                    add("NET", f"NET/IB : GPU Direct RDMA {'Enabled' if gdr else 'Disabled'} for HCA {k} "
                               f"'{r['device']}'")
            local = by_host[d["host"]]
            mnnvl = 1 if phys.get("mnnvl") else 0
            add("INIT", f"comm {comm} rank {d['rank']} nRanks {nranks} nNodes {len(nodes)} localRanks "
                        f"{len(local)} localRank {d['local']} MNNVL {mnnvl}")  # src/init.cc:1044
            if len(nodes) > 1:
                pos = nodes.index(d["host"])
                nxt, prv = by_host[nodes[(pos + 1) % len(nodes)]], by_host[nodes[pos - 1]]
                n_ch = 1 if socket else max(1, phys.get("rails") or len(rails))
                suffix = "/GDRDMA" if gdr else ""
                via = "NET/Socket" if socket else "NET/IB"
                for c in range(n_ch):  # src/transport/net.cc:194, INFO(NCCL_INIT|NCCL_NET, ...)
                    if d["local"] == c % len(local) and c < len(nxt):
                        p = nxt[c]
                        add("INIT|NET", f"Channel {c:02d}/0 : {d['rank']}[{cdev}] -> {p['rank']}[{p['dev']}] "
                                        f"[send] via {via}/{c}{suffix}")
                    if d["local"] == c % len(local) and c < len(prv):
                        p = prv[c]
                        add("INIT|NET", f"Channel {c:02d}/0 : {p['rank']}[{p['dev']}] -> {d['rank']}[{cdev}] "
                                        f"[receive] via {via}/{c}{suffix}")
            add("INIT", "Connected all rings")  # src/transport/generic.cc
            add("INIT", f"{start} - Init COMPLETE")
            for subsys, text in lines:
                if "ALL" in subsys or subsys & mask:
                    self.say(d["rank"], text)

    # -- -J: the JSON nccl-tests writes (src/util.cu jsonOutputInit .. jsonOutputFinalize) -------

    def _json_open(self, path: str, lib: str) -> dict[str, Any] | None:
        target, n = path, 0
        while os.path.exists(target):  # fopen(path, "wx"), then PATH.0, PATH.1, ...
            target, n = f"{path}.{n}", n + 1
        try:
            with open(target, "x"):
                pass
        except OSError:
            self.say(0, f"# skipping json output; {path} not accessible")
            return None
        self.say(0, f"# Writing JSON output to {target}")
        env = [f"{k}={v}" for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "USER", "PWD")]
        env += [f"{k}={v}" for k, v in self.xenv.items()]
        return {"path": target, "start": time.strftime("%Y-%m-%d %H:%M:%S"), "env": env, "lib": lib}

    def _json_close(
        self, doc: dict[str, Any], devices: list[dict[str, Any]], rows: list, avg: float, check: float
    ) -> None:
        args = self.args

        def s(v: Any) -> str:
            return json.dumps(v)

        def f(v: float) -> str:
            return '"nan"' if v != v else f"{v:f}"

        parts = [
            f'"version":1,"start_time":{s(doc["start"])},"args":[{",".join(s(a) for a in self.argv)}]',
            f'"env":[{",".join(s(e) for e in doc["env"])}]',
            f'"nccl_version":{version_code(doc["lib"])}',
        ]
        step = (
            f'"step_factor":{args["stepfactor"]}'
            if args["stepfactor"] > 1
            else f'"step_bytes":{args["stepbytes"]}'
        )
        devs = ",".join(
            "{"
            + f'"rank":{d["rank"]},"group":0,"pid":{d["pid"]},"hostname":{s(self.hosts[d["host"]]["host"])},'
            f'"device":{d["dev"]},"device_hex":{s(self._hex(d))},"device_info":{s(d["gpu"]["name"])}' + "}"
            for d in devices
        )
        parts.append(
            '"config":{' + f'"nthreads":{args["nthreads"]},"ngpus":{args["ngpus"]},"minimum_bytes":'
            f'{args["minbytes"]},"maximum_bytes":{args["maxbytes"]},{step},"warmup_iters":'
            f'{args["warmup_iters"]},"iterations":{args["iters"]},"aggregated_iterations":'
            f'{args["agg_iters"]},"validation":{args["check"]},"graph":{args["graph"]},'
            f'"blocking_collectives":"{"true" if args["blocking"] else "false"}",'
            f'"parallel_init":"false","devices":[{devs}]' + "}"
        )
        res = []
        for shown, count, halves in rows:
            body = "{" + f'"size":{shown},"count":{count},"type":"float","redop":{s(self._redop())},'
            body += '"root":"    -1"'
            for key, (t, alg, bus) in zip(("out_of_place", "in_place"), halves, strict=True):
                body += (
                    f',"{key}":'
                    + "{"
                    + f'"time":{f(t)},"alg_bw":{f(alg)},"bus_bw":{f(bus)},"nwrong":{f(0.0)}'
                    + "}"
                )
            body += f',"actual_iterations":{args["iters"]},"experiment_name":""' + "}"
            res.append(body)
        parts.append(f'"results":[{",".join(res)}]')
        parts.append('"out_of_bounds":{"count":0,"okay":"true"}')
        okay = '"unchecked"' if check == -1 else ('"true"' if avg >= check * 0.9 else '"false"')
        parts.append('"average_bus_bandwidth":{' + f'"bandwidth":{f(avg)},"okay":{okay}' + "}")
        parts.append('"errors":[""]')
        parts.append(f'"end_time":{s(time.strftime("%Y-%m-%d %H:%M:%S"))}')
        try:
            with open(doc["path"], "w") as fh:
                fh.write("{" + ",".join(parts) + "}")
        except OSError:
            pass

    @staticmethod
    def _hex(d: dict[str, Any]) -> str:
        dom, bus, slot = _norm_bdf(d["gpu"]["bus"]).split(":")
        return f"{int(dom, 16):04x}:{int(bus, 16):02x}:{int(slot.split('.')[0], 16):02x}"


# --- Open MPI's messages (Open MPI 4.1) -----------------------------------------------------

DASHES = "-" * 74


def mpi_nonzero_exit(rank: int, code: int) -> None:
    """orterun help-orterun.txt [orterun:non-zero-exit] and errmgr's "Primary job terminated
    normally" notice, as Open MPI 4.1 prints them when a rank exits non-zero."""
    for line in (
        DASHES,
        "Primary job  terminated normally, but 1 process returned",
        "a non-zero exit code. Per user-direction, the job has been aborted.",
        DASHES,
        DASHES,
        "mpirun detected that one or more processes exited with non-zero status, thus causing",
        "the job to be terminated. The first process to do so was:",
        "",
        f"  Process name: [[{40000 + os.getpid() % 20000},1],{rank}]",
        f"  Exit code:    {code}",
        DASHES,
    ):
        _err(line)


def _root_refusal() -> None:
    """orte/orted/orted_submit.c (Open MPI 4.x): root without --allow-run-as-root or both
    OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1."""
    for line in (
        DASHES,
        "mpirun has detected an attempt to run as root.",
        "",
        "Running as root is *strongly* discouraged as any mistake (e.g., in",
        "defining TMPDIR) or bug can result in catastrophic damage to the OS",
        "file system, leaving your system in an unusable state.",
        "",
        "We strongly suggest that you run mpirun as a non-root user.",
        "",
        "You can override this protection by adding the --allow-run-as-root option",
        "to the cmd line or by setting two environment variables in the following way:",
        "the variable OMPI_ALLOW_RUN_AS_ROOT=1 to indicate the desire to override this",
        "protection, and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 to confirm the choice and",
        "add one more layer of certainty that you want to do so.",
        "We reiterate our advice against doing so - please proceed at your own risk.",
        DASHES,
    ):
        _err(line)


def _not_enough_slots(np: int, program: str) -> None:
    """orte/mca/rmaps/base/help-orte-rmaps-base.txt [orte-rmaps-base:alloc-error] (Open MPI 4.x)."""
    text = f"""{DASHES}
There are not enough slots available in the system to satisfy the {np}
slots that were requested by the application:

  {program}

Either request fewer slots for your application, or make more slots
available for use.

A "slot" is the Open MPI term for an allocatable unit where we can
launch a process.  The number of slots available are defined by the
environment in which Open MPI processes are run:

  1. Hostfile, via "slots=N" clauses (N defaults to number of
     processor cores if not provided)
  2. The --host command line parameter, via a ":N" suffix on the
     hostname (N defaults to 1 if not provided)
  3. Resource manager (e.g., SLURM, PBS/Torque, LSF, etc.)
  4. If none of a hostfile, the --host command line parameter, or an
     RM is present, Open MPI defaults to the number of processor cores

In all the above cases, if you want Open MPI to default to the number
of hardware threads instead of the number of processor cores, use the
--use-hwthread-cpus option.

Alternatively, you can use the --oversubscribe option to ignore the
number of available slots when deciding the number of processes to
launch.
{DASHES}"""
    _err(text)


def _daemons_failed() -> None:
    """orte/mca/errmgr/base/help-errmgr-base.txt [failed-daemon-launch] (Open MPI 4.x)."""
    _err(f"""{DASHES}
ORTE was unable to reliably start one or more daemons.
This usually is caused by:

* not finding the required libraries and/or binaries on
  one or more nodes. Please check your PATH and LD_LIBRARY_PATH
  settings, or configure OMPI with --enable-orterun-prefix-by-default

* lack of authority to execute on one or more specified nodes.
  Please verify your allocation and authorities.

* the inability to write startup files into /tmp (--tmpdir/orte_tmpdir_base).
  Please check with your sys admin to determine the correct location to use.

*  compilation of the orted with dynamic libraries when static are required
  (e.g., on Cray). Please check your configure cmd line and consider using
  one of the contrib/platform definitions for your system type.

* an inability to create a connection back to mpirun due to a
  lack of common network interfaces and/or no route found between
  them. Please check network connectivity (including firewalls
  and network routing requirements).
{DASHES}""")


def _cannot_execute(program: str, node: str, rank: int) -> None:
    """orterun help-orterun.txt [orterun:executable-not-found] style (Open MPI 4.1 odls)."""
    _err(f"""{DASHES}
mpirun was unable to launch the specified application as it could not access
or execute an executable:

Executable: {program}
Node: {node}

while attempting to start process rank {rank}.
{DASHES}""")


# --- mpirun ---------------------------------------------------------------------------------

_MPI_FLAGS = {
    "--allow-run-as-root",
    "--oversubscribe",
    "-oversubscribe",
    "--tag-output",
    "-tag-output",
    "--report-bindings",
    "-report-bindings",
    "--display-map",
    "--nooversubscribe",
    "-q",
    "--quiet",
    "-v",
    "--verbose",
    "--noprefix",
    "--use-hwthread-cpus",
}
_MPI_VALUED = {
    "-np",
    "-n",
    "--np",
    "-c",
    "-H",
    "-host",
    "--host",
    "--hostfile",
    "-hostfile",
    "--machinefile",
    "-machinefile",
    "--bind-to",
    "-bind-to",
    "--map-by",
    "-map-by",
    "-x",
    "--mca",
    "-mca",
    "--prefix",
    "-wdir",
    "--wdir",
    "-wd",
    "--rank-by",
    "-rank-by",
    "--npernode",
    "-npernode",
    "-N",
}


def parse_mpirun(argv: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "flags": set(),
        "np": None,
        "hosts": [],
        "hostfile": None,
        "x": [],
        "program": None,
        "args": [],
    }
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-"):
            opts["program"], opts["args"] = a, argv[i + 1 :]
            break
        name, eq, val = a.partition("=") if a.startswith("--") else (a, "", "")
        if name in _MPI_FLAGS:
            opts["flags"].add(name.lstrip("-"))
        elif name in _MPI_VALUED:
            if name in ("--mca", "-mca"):
                i += 2
                if i >= len(argv):
                    raise TestUsage(f'Error: option "{a}" requires two arguments')
                i += 1
                continue
            if not eq:
                i += 1
                if i >= len(argv):
                    raise TestUsage(f'Error: option "{a}" did not have enough parameters (1)')
                val = argv[i]
            key = name.lstrip("-")
            if key in ("np", "n", "c"):
                opts["np"] = int(val)
            elif key in ("H", "host"):
                opts["hosts"] += [h for h in val.split(",") if h]
            elif key in ("hostfile", "machinefile"):
                opts["hostfile"] = val
            elif key == "x":
                opts["x"].append(val)
        else:
            raise TestUsage(f'Error: unknown option "{a}"')
        i += 1
    return opts


def _slots(opts: dict[str, Any], local: str) -> list[tuple[str, int]]:
    """--host NAME[:N] (N defaults to 1) or a hostfile's "NAME slots=N"; without either, the local
    host with a slot per core (mpirun(1) of Open MPI 4.1, "Specifying Host Nodes")."""
    order: list[str] = []
    slots: dict[str, int] = {}
    entries: list[tuple[str, int]] = []
    for h in opts["hosts"]:
        name, _c, n = h.partition(":")
        entries.append((name, int(n) if n.isdigit() else 1))
    if opts["hostfile"]:
        try:
            with open(opts["hostfile"]) as fh:
                text = fh.read()
        except OSError:
            raise TestUsage(
                f"Open RTE was unable to open the hostfile:\n    {opts['hostfile']}\n"
                "Check to make sure the path and filename are correct."
            ) from None
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.search(r"slots\s*=\s*(\d+)", line)
            entries.append((line.split()[0], int(m.group(1)) if m else 1))
    if not entries:
        entries = [(local, os.cpu_count() or 1)]
    for name, n in entries:
        if name not in slots:
            order.append(name)
            slots[name] = 0
        slots[name] += n
    return [(name, slots[name]) for name in order]


def _local_names() -> set[str]:
    names = {"localhost", "127.0.0.1", os.uname().nodename}
    with contextlib.suppress(OSError, ValueError):
        names.add(devstate.load_hardware().get("host", ""))
    return {n for n in names if n}


def _reach(host: str, argv: list[str]) -> tuple[int, str, str]:
    """Open MPI's rsh launcher: ``ssh -o BatchMode=yes HOST COMMAND`` (plm_rsh_agent default
    "ssh : rsh"; orte/mca/plm/rsh), or the test's replacement."""
    if REMOTE is not None:
        return REMOTE(host, argv)
    try:
        proc = subprocess.run(
            ["ssh", "-o", "BatchMode=yes", host, " ".join(shlex.quote(a) for a in argv)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 255, "", f"ssh: {exc}"
    return proc.returncode, proc.stdout, proc.stderr


def _quiet_pipe(fn: Callable[[list[str]], int]) -> Callable[[list[str]], int]:
    """A reader that goes away (``| head``) ends the tool as SIGPIPE ends a C program: quietly,
    status 141; Ctrl-C is 130."""

    def wrapper(argv: list[str]) -> int:
        try:
            return fn(argv)
        except BrokenPipeError:
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        except KeyboardInterrupt:
            return 130

    return wrapper


@_quiet_pipe
def mpirun(argv: list[str]) -> int:
    try:
        opts = parse_mpirun(argv)
    except TestUsage as exc:
        _err(f"mpirun: {exc}")
        _err("Type 'mpirun --help' for usage.")
        return 1
    allowed = "allow-run-as-root" in opts["flags"] or (
        os.environ.get("OMPI_ALLOW_RUN_AS_ROOT") == "1"
        and os.environ.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM") == "1"
    )
    if os.geteuid() == 0 and not allowed:
        _root_refusal()
        return 1
    if not opts["program"]:
        _err(
            f"{DASHES}\nmpirun could not find anything to do.\n\nIt is possible that you forgot to specify "
            f'how many processes to run,\nperhaps via the "-np" or "N" or "C" arguments.\n{DASHES}'
        )
        return 1
    local = devstate.load_hardware().get("host") if devstate.path(devstate.HW_JSON).exists() else None
    try:
        slots = _slots(opts, local or os.uname().nodename)
    except TestUsage as exc:
        _err(f"{DASHES}\n{exc}\n{DASHES}")
        return 1
    total = sum(n for _h, n in slots)
    np = opts["np"] if opts["np"] is not None else total
    if np > total and "oversubscribe" not in opts["flags"]:
        _not_enough_slots(np, opts["program"])
        return 1
    procs: list[int] = []  # --map-by slot (the default): fill each host's slots in order
    for idx, (_h, n) in enumerate(slots):
        procs += [idx] * min(n, np - len(procs))
    while len(procs) < np:  # oversubscribed: round-robin over the hosts again
        procs.append(len(procs) % len(slots))
    xenv: dict[str, str] = {}
    for spec in opts["x"]:
        name, eq, val = spec.partition("=")
        if eq:
            xenv[name] = val
        elif name in os.environ:
            xenv[name] = os.environ[name]
    used = sorted(set(procs))
    names = _local_names()
    if os.path.basename(opts["program"]) not in TESTS:
        return _run_plain(opts, slots, procs, names)
    infos: list[dict[str, Any]] = [{} for _ in slots]
    for idx in used:
        host = slots[idx][0]
        if host in names:
            infos[idx] = rank_info(opts["program"])
            continue
        rc, out, err = _reach(host, [RANK_INFO, opts["program"]])
        info = None
        if rc == 0:
            try:
                info = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                info = None
        if info is None:
            if err.strip():
                _err(err.rstrip())
            _daemons_failed()
            return 1
        infos[idx] = info
    for rank, idx in enumerate(procs):
        info = infos[idx]
        if info.get("exe") is False:
            _cannot_execute(opts["program"], slots[idx][0], rank)
            return 1
        if not info.get("nccl"):
            # the dynamic loader's message for a binary linked against libnccl.so.2 (ld.so)
            _err(
                f"{opts['program']}: error while loading shared libraries: libnccl.so.2: cannot open shared "
                "object file: No such file or directory"
            )
            mpi_nonzero_exit(rank, 127)
            return 127
    hosts = [
        infos[i] if infos[i] else {"host": slots[i][0], "gpus": [], "ports": []} for i in range(len(slots))
    ]
    return run_test(opts["program"], opts["args"], hosts, procs, xenv, "tag-output" in opts["flags"])


def _run_plain(opts: dict[str, Any], slots: list[tuple[str, int]], procs: list[int], names: set[str]) -> int:
    """Any other program: each rank runs it on its host (locally, or over the same ssh hop)."""
    worst = 0
    argv = [opts["program"], *opts["args"]]
    for rank, idx in enumerate(procs):
        host = slots[idx][0]
        if host in names:
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
                rc, out, err = proc.returncode, proc.stdout, proc.stderr
            except OSError:
                _cannot_execute(opts["program"], host, rank)
                return 1
        else:
            rc, out, err = _reach(host, argv)
            if rc == 255:
                if err.strip():
                    _err(err.rstrip())
                _daemons_failed()
                return 1
        sys.stdout.write(out)
        sys.stderr.write(err)
        if rc and not worst:
            worst = rc
            mpi_nonzero_exit(rank, rc)
    sys.stdout.flush()
    return worst


def run_test(
    program: str,
    argv: list[str],
    hosts: list[dict[str, Any]],
    procs: list[int],
    xenv: dict[str, str],
    tag: bool = False,
) -> int:
    job = Job(program, argv, hosts, procs, xenv, tag)
    try:
        job._args = parse_test_args(argv)
    except TestUsage as exc:
        if str(exc).startswith("invalid sizes"):
            _err(str(exc))
            return 255
        if str(exc):
            _out(str(exc))
        _out(
            f"USAGE: {job.program} \n\t[-t,--nthreads <num threads>] \n\t[-g,--ngpus <gpus per thread>] \n\t"
            "[-b,--minbytes <min size in bytes>] \n\t[-e,--maxbytes <max size in bytes>] \n\t"
            "[-f,--stepfactor <increment factor>] \n\t[-J,--output_file <file>] \n\t[-h,--help]"
        )
        return 0
    return job.run()


def _standalone(program: str, argv: list[str]) -> int:
    """The binary run directly (no mpirun): one process, -g GPUs of this host."""
    info = rank_info(program)
    if info.get("error"):
        _err(f"{program}: no GPU found")
        return 2
    if not info.get("nccl"):
        _err(
            f"{program}: error while loading shared libraries: libnccl.so.2: cannot open shared object file: "
            "No such file or directory"
        )
        return 127
    return run_test(program, argv, [info], [0], {})


@_quiet_pipe
def all_reduce_perf(argv: list[str]) -> int:
    return _standalone("all_reduce_perf", argv)


@_quiet_pipe
def all_gather_perf(argv: list[str]) -> int:
    return _standalone("all_gather_perf", argv)


@_quiet_pipe
def reduce_scatter_perf(argv: list[str]) -> int:
    return _standalone("reduce_scatter_perf", argv)
