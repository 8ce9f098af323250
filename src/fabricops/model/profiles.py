"""Hardware profiles and pass thresholds (data: ``data/profiles/*.yml``, ``data/thresholds.yml``).

A profile names the GPUs (model, count, NVLink generation, topology) and the HCAs (count, link
layer, speed, width) of one kind of server (or compute tray), its platform (the row of
``data/gpu_platforms.yml`` that says which fabric services it needs), optionally its CPUs and its
multi-node NVLink domain, plus the published floors that apply to it. Thresholds
every profile shares live once in ``data/thresholds.yml``; a profile adds or overrides values.

>>> p = load_profile("hgx-h100-ndr")
>>> threshold_for(p, "ib_write_bw", 400, gpudirect=True).value
380
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fabricops.errors import FabricopsError
from fabricops.model import _data
from fabricops.model.nvlink import NVLINK, NVLinkGen
from fabricops.model.rates import ETHERNET, IB, IB_VARIANTS, WIDTHS, port_rate

__all__ = [
    "BW_TESTS",
    "LATENCY_TESTS",
    "NCCL_SCALE_GROUPS",
    "TESTS",
    "BwFloor",
    "CPUSpec",
    "GPUSpec",
    "HCASpec",
    "NVLinkDomain",
    "Profile",
    "ProfileError",
    "Threshold",
    "list_profiles",
    "load_profile",
    "threshold_for",
]

BW_TESTS = ("ib_write_bw", "ib_read_bw", "ib_send_bw")
LATENCY_TESTS = ("ib_write_lat", "ib_send_lat", "ib_read_lat")
COUNTER_TESTS = ("symbol_error", "link_downed", "link_flaps_24h")
NCCL_TESTS = ("nccl_all_reduce_single_node", "nccl_all_reduce_intra_domain", "nccl_busbw_per_nic")
#: NCCL scale groups (NVIDIA Cluster Readiness Engine design 054: intra-node, intra-rack over
#: multi-node NVLink, then across the network) -> the test whose floor applies to the group.
NCCL_SCALE_GROUPS = {
    "intra_node": "nccl_all_reduce_single_node",
    "intra_domain": "nccl_all_reduce_intra_domain",
    "across_domains": "nccl_busbw_per_nic",
}
#: Every test name :func:`threshold_for` knows.
TESTS = BW_TESTS + LATENCY_TESTS + NCCL_TESTS + COUNTER_TESTS

_TOPOLOGIES = ("nvswitch", "direct")
_SECTIONS = ("perftest_bw", "latency_us", "nccl", "error_counters")


class ProfileError(FabricopsError):
    """A hardware profile that is unknown or does not validate; the message says what to fix."""


@dataclass(frozen=True)
class GPUSpec:
    model: str  #: as nvidia-smi prints it, e.g. "NVIDIA H100 80GB HBM3"
    count: int
    nvlink: int  #: NVLink generation (key of ``fabricops.model.nvlink.NVLINK``)
    topology: str  #: "nvswitch" (all-to-all through NVSwitch) or "direct" (GPU-to-GPU links)

    @property
    def nvlink_gen(self) -> NVLinkGen:
        return NVLINK[self.nvlink]


@dataclass(frozen=True)
class CPUSpec:
    model: str  #: e.g. "NVIDIA Grace"
    count: int  #: CPUs per server / compute tray


@dataclass(frozen=True)
class NVLinkDomain:
    """A multi-node NVLink domain (GB200/GB300 NVL72): up to ``max_nodes`` servers (compute trays)
    share one NVLink fabric; smaller domains are allowed."""

    max_nodes: int
    max_gpus: int  #: max_nodes x gpu.count
    source: str


@dataclass(frozen=True)
class HCASpec:
    count: int
    link_layer: str  #: "InfiniBand" or "Ethernet"
    speed: str  #: IB generation ("NDR") or Ethernet speed ("400GbE")
    width: str | None  #: "4X" etc. for InfiniBand, None for Ethernet
    rate_gbps: int | float  #: port rate from the rates table (NDR 4X -> 400)


@dataclass(frozen=True)
class BwFloor:
    """A published minimum for a perftest bandwidth test on a port of ``port_rate`` Gb/s."""

    test: str
    memory: str  #: "host" or "gpudirect"
    port_rate: int | float
    value: int | float  #: Gb/s, unidirectional
    source: str


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    source: str
    gpu: GPUSpec
    hca: HCASpec
    floors: tuple[BwFloor, ...]
    thresholds: dict[str, Any] = field(repr=False)  #: defaults merged with the profile's own values
    path: str | None = None  #: file it was loaded from, None for a shipped profile
    platform: str | None = None  #: key of ``data/gpu_platforms.yml`` (None: a profile file that names none)
    cpu: CPUSpec | None = None
    nvlink_domain: NVLinkDomain | None = None  #: None: the NVLink fabric ends at the server


@dataclass(frozen=True)
class Threshold:
    """A pass criterion: ``measured <op> value``."""

    test: str
    value: int | float
    unit: str  #: "Gb/s", "GB/s", "us" or "count"
    op: str  #: ">=", "<=" or "<"
    source: str
    basis: str  #: how the value was derived, in words

    def passes(self, measured: float) -> bool:
        if self.op == ">=":
            return measured >= self.value
        if self.op == "<=":
            return measured <= self.value
        return measured < self.value


def list_profiles() -> list[str]:
    """Names of the shipped profiles."""
    return _data.profile_names()


def load_profile(name: str | Path) -> Profile:
    """Load a shipped profile by name (``"hgx-h100-ndr"``) or a profile file by path.

    Raises ProfileError for an unknown name, unreadable or invalid YAML, or a profile that does not
    validate (the message names the field).
    """
    text_name = str(name)
    path: str | None = None
    if text_name in _data.profile_names():
        text = _data.profile_text(text_name)
    elif text_name.endswith((".yml", ".yaml")) or "/" in text_name:
        try:
            text = Path(text_name).read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileError(f"cannot read profile file {text_name}: {exc.strerror}") from None
        path = text_name
    else:
        known = ", ".join(_data.profile_names())
        raise ProfileError(f"unknown hardware profile {text_name!r}; known profiles: {known}")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile {text_name}: not valid YAML ({exc})") from None
    return _build(raw, text_name, path)


def _fail(where: str, msg: str) -> ProfileError:
    return ProfileError(f"profile {where}: {msg}")


def _require(d: Any, key: str, where: str, kind: type | tuple[type, ...], ctx: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise _fail(where, f"missing {ctx}{key}")
    value = d[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _fail(where, f"{ctx}{key} must be {names}, got {value!r}")
    return value


def _positive_int(d: dict, key: str, where: str, ctx: str) -> int:
    value = _require(d, key, where, int, ctx)
    if value < 1:
        raise _fail(where, f"{ctx}{key} must be a positive integer, got {value}")
    return value


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _check_sources(node: Any, where: str, ctx: str) -> None:
    """Every threshold leaf ({value|max|fail_at: ...}) carries a non-empty source."""
    if isinstance(node, dict):
        if any(k in node for k in ("value", "max", "fail_at")):
            if not isinstance(node.get("source"), str) or not node["source"].strip():
                raise _fail(where, f"threshold {ctx.rstrip('.')} has no source")
            for k in ("value", "max", "fail_at"):
                if k in node and (isinstance(node[k], bool) or not isinstance(node[k], int | float)):
                    raise _fail(where, f"threshold {ctx}{k} must be a number, got {node[k]!r}")
            return
        for key, value in node.items():
            _check_sources(value, where, f"{ctx}{key}.")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_sources(value, where, f"{ctx}{i}.")


def _build(raw: Any, where: str, path: str | None) -> Profile:
    if not isinstance(raw, dict):
        raise _fail(where, "must be a YAML mapping with name, gpu, hca and thresholds")
    name = _require(raw, "name", where, str, "")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
        raise _fail(where, f"name {name!r} must be lower-case letters, digits, '.', '_' or '-'")
    if path is None and name != where:
        raise _fail(where, f"file name and name: {name!r} differ")
    description = _require(raw, "description", where, str, "")
    source = _require(raw, "source", where, str, "")
    platform = None
    if "platform" in raw:
        platform = _require(raw, "platform", where, str, "")
        known_platforms = sorted(_data.load("gpu_platforms.yml")["platforms"])
        if platform not in known_platforms:
            raise _fail(where, f"platform {platform!r} is not one of {', '.join(known_platforms)}")
    elif path is None:
        raise _fail(where, "missing platform (a shipped profile names its row of gpu_platforms.yml)")

    g = _require(raw, "gpu", where, dict, "")
    nvlink = _require(g, "nvlink", where, int, "gpu.")
    if nvlink not in NVLINK:
        raise _fail(where, f"gpu.nvlink {nvlink} is not a known NVLink generation ({sorted(NVLINK)})")
    topology = _require(g, "topology", where, str, "gpu.")
    if topology not in _TOPOLOGIES:
        raise _fail(where, f"gpu.topology must be one of {', '.join(_TOPOLOGIES)}, got {topology!r}")
    gpu = GPUSpec(
        model=_require(g, "model", where, str, "gpu."),
        count=_positive_int(g, "count", where, "gpu."),
        nvlink=nvlink,
        topology=topology,
    )

    cpu = None
    if "cpu" in raw:
        c = _require(raw, "cpu", where, dict, "")
        cpu = CPUSpec(_require(c, "model", where, str, "cpu."), _positive_int(c, "count", where, "cpu."))

    domain = None
    if "nvlink_domain" in raw:
        d = _require(raw, "nvlink_domain", where, dict, "")
        max_nodes = _positive_int(d, "max_nodes", where, "nvlink_domain.")
        if "max_gpus" in d and _positive_int(d, "max_gpus", where, "nvlink_domain.") != max_nodes * gpu.count:
            raise _fail(where, f"nvlink_domain.max_gpus {d['max_gpus']} is not max_nodes {max_nodes} "
                               f"x gpu.count {gpu.count} = {max_nodes * gpu.count}")
        dsource = _require(d, "source", where, str, "nvlink_domain.")
        if not dsource.strip():
            raise _fail(where, "nvlink_domain has no source")
        domain = NVLinkDomain(max_nodes, max_nodes * gpu.count, dsource)

    h = _require(raw, "hca", where, dict, "")
    layer = _require(h, "link_layer", where, str, "hca.")
    speed = str(_require(h, "speed", where, str, "hca."))
    width: str | None
    if layer == "InfiniBand":
        width = str(h.get("width", "4X")).upper()
        if width not in WIDTHS:
            raise _fail(where, f"hca.width must be one of {', '.join(WIDTHS)}, got {width!r}")
        if speed.upper() not in IB and speed.upper() not in IB_VARIANTS:
            raise _fail(where, f"hca.speed {speed!r} is not an InfiniBand generation ({', '.join(IB)})")
    elif layer == "Ethernet":
        width = None
        if speed not in ETHERNET:
            raise _fail(where, f"hca.speed {speed!r} is not an Ethernet speed ({', '.join(ETHERNET)})")
    else:
        raise _fail(where, f"hca.link_layer must be InfiniBand or Ethernet, got {layer!r}")
    rate = port_rate(layer, speed, width)
    if "rate" in h and h["rate"] != rate:
        raise _fail(where, f"hca.rate {h['rate']} disagrees with {speed} {width or ''} = {rate} Gb/s")
    hca = HCASpec(_positive_int(h, "count", where, "hca."), layer, speed, width, rate)

    own = raw.get("thresholds") or {}
    if not isinstance(own, dict):
        raise _fail(where, "thresholds must be a mapping")
    unknown = sorted(set(own) - set(_SECTIONS))
    if unknown:
        raise _fail(where, f"unknown threshold sections {', '.join(unknown)} (known: {', '.join(_SECTIONS)})")
    _check_sources(own, where, "")
    thresholds = _merge(_data.load("thresholds.yml"), own)

    floors = []
    for i, f in enumerate((own.get("perftest_bw") or {}).get("floors") or []):
        ctx = f"thresholds.perftest_bw.floors[{i}]."
        test = _require(f, "test", where, str, ctx)
        if test not in BW_TESTS:
            raise _fail(where, f"{ctx}test must be one of {', '.join(BW_TESTS)}, got {test!r}")
        memory = _require(f, "memory", where, str, ctx)
        if memory not in ("host", "gpudirect"):
            raise _fail(where, f"{ctx}memory must be host or gpudirect, got {memory!r}")
        floors.append(
            BwFloor(
                test=test,
                memory=memory,
                port_rate=_require(f, "port_rate", where, (int, float), ctx),
                value=_require(f, "value", where, (int, float), ctx),
                source=_require(f, "source", where, str, ctx),
            )
        )
    return Profile(
        name, description, source, gpu, hca, tuple(floors), thresholds, path, platform, cpu, domain
    )


def _leaf(p: Profile, *keys: Any) -> dict:
    node: Any = p.thresholds
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            raise ProfileError(f"profile {p.name} has no threshold {'.'.join(map(str, keys))}")
        node = node[key]
    return node


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else round(x, 6)


def threshold_for(
    profile: Profile | str,
    test: str,
    port_rate: float | None = None,
    bidirectional: bool = False,
    gpudirect: bool = False,
) -> Threshold:
    """The pass criterion for ``test`` on a profile.

    - perftest bandwidth (``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``): at least 90 % of
      ``port_rate`` (Gb/s; default: the profile's HCA rate), or a stricter published floor for that
      test, memory (host / ``gpudirect``) and port rate; x2 when ``bidirectional``.
    - latency (``ib_write_lat``, ``ib_send_lat``, ``ib_read_lat``): at most the cap in us.
    - ``nccl_all_reduce_single_node``: all_reduce busbw floor in GB/s for the profile's GPUs.
    - ``nccl_all_reduce_intra_domain``: all_reduce busbw floor in GB/s across one multi-node NVLink
      domain (``NCCL_MNNVL_ENABLE=1``); only profiles with an ``nvlink_domain`` and a published floor.
    - ``nccl_busbw_per_nic``: busbw floor per NIC across nodes (GB/s) for NICs of ``port_rate``.
    - ``symbol_error``, ``link_downed``: counter increase at most ``max``;
      ``link_flaps_24h``: fewer than ``fail_at``.

    Pass the rate the port *should* run at: a degraded port's own rate would lower the bar.
    """
    p = load_profile(profile) if isinstance(profile, str) else profile
    key = str(test).strip().lower()
    rate = p.hca.rate_gbps if port_rate is None else port_rate
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"port_rate must be a positive number of Gb/s, got {port_rate!r}")

    if key in BW_TESTS:
        frac = _leaf(p, "perftest_bw", "fraction_of_port")
        memory = "gpudirect" if gpudirect else "host"
        value = frac["value"] * rate
        basis = f"{frac['value']:.0%} of {_num(rate)} Gb/s"
        source = frac["source"]
        for floor in p.floors:
            applies = floor.test == key and floor.memory == memory and floor.port_rate == rate
            if applies and floor.value > value:
                value, source = floor.value, floor.source
                basis = f"published floor for {key} ({memory}) on a {_num(rate)} Gb/s port"
        if bidirectional:
            factor = _leaf(p, "perftest_bw", "bidirectional_factor")
            value *= factor["value"]
            basis += f", x{factor['value']} bidirectional"
            source = f"{source}; {factor['source']}"
        return Threshold(key, _num(value), "Gb/s", ">=", source, basis)

    if key in LATENCY_TESTS:
        cap = _leaf(p, "latency_us", key)
        return Threshold(key, cap["value"], "us", "<=", cap["source"], f"{key} at most {cap['value']} us")

    if key in ("symbol_error", "link_downed"):
        lim = _leaf(p, "error_counters", key)
        basis = f"{key} increase at most {lim['max']}"
        return Threshold(key, lim["max"], "count", "<=", lim["source"], basis)

    if key == "link_flaps_24h":
        lim = _leaf(p, "error_counters", key)
        basis = f"fail at >= {lim['fail_at']} in 24 h"
        return Threshold(key, lim["fail_at"], "count", "<", lim["source"], basis)

    if key == "nccl_all_reduce_single_node":
        nccl = p.thresholds.get("nccl", {})
        if "all_reduce_busbw_single_node_gbs" not in nccl:
            raise ProfileError(
                f"profile {p.name} has no published single-node NCCL all_reduce floor "
                f"({p.gpu.count}x {p.gpu.model}); add thresholds.nccl.all_reduce_busbw_single_node_gbs"
            )
        floor = nccl["all_reduce_busbw_single_node_gbs"]
        basis = f"all_reduce busbw, {p.gpu.count}x {p.gpu.model} in one node"
        return Threshold(key, floor["value"], "GB/s", ">=", floor["source"], basis)

    if key == "nccl_all_reduce_intra_domain":
        nccl = p.thresholds.get("nccl", {})
        if p.nvlink_domain is None:
            raise ProfileError(
                f"profile {p.name} has no multi-node NVLink domain: its NVLink fabric ends at the server"
            )
        if "all_reduce_busbw_intra_domain_gbs" not in nccl:
            raise ProfileError(
                f"profile {p.name} has no published NCCL all_reduce floor across its NVLink domain; add "
                "thresholds.nccl.all_reduce_busbw_intra_domain_gbs with its source"
            )
        floor = nccl["all_reduce_busbw_intra_domain_gbs"]
        most = f"{p.nvlink_domain.max_gpus}x {p.gpu.model}"
        basis = f"all_reduce busbw across one NVLink domain (up to {most}, MNNVL)"
        return Threshold(key, floor["value"], "GB/s", ">=", floor["source"], basis)

    if key == "nccl_busbw_per_nic":
        table = _leaf(p, "nccl", "busbw_per_nic_gbs")
        for nic_rate, floor in table.items():
            if float(nic_rate) == float(rate):
                basis = f"all_reduce busbw per {_num(rate)} Gb/s NIC across nodes"
                return Threshold(key, floor["value"], "GB/s", ">=", floor["source"], basis)
        known = ", ".join(str(k) for k in table)
        raise ProfileError(f"no per-NIC NCCL busbw floor for {_num(rate)} Gb/s NICs (known: {known} Gb/s)")

    raise ProfileError(f"unknown test {test!r}; expected one of {', '.join(TESTS)}")
