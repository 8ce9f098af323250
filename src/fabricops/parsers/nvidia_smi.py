"""Parsers for ``nvidia-smi`` outputs: ``topo -m``, ``nvlink --status``, ``--query-gpu`` CSV and ``-q``.

Record schemas are documented in docs/parsers.md. Every parser raises
:class:`fabricops.errors.ParseError` on empty input, on another tool's output and on output whose
essential part is missing.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines, to_number

__all__ = [
    "NvlinkGpu",
    "NvlinkLink",
    "NvlinkStatus",
    "QGpu",
    "QReport",
    "QueryResult",
    "TopoMatrix",
    "parse_nvlink",
    "parse_q",
    "parse_query",
    "parse_topo",
]

_NA = {"N/A", "[N/A]", "[Not Supported]", "[Unknown Error]", "Not Supported", "[Insufficient Permissions]"}


def _na(value: Any) -> str | None:
    if not isinstance(value, str):
        return None  # absent, or a section/list where a value belongs (damaged output)
    value = value.strip()
    return None if not value or value in _NA else value


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m
# --------------------------------------------------------------------------------------------

_TRAILING_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LEGEND_RE = re.compile(r"^\s*(X|SYS|SOC|NODE|PHB|PXB|PIX|NV#)\s+=\s+(.*)$")
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
_NV_RE = re.compile(r"^NV(\d+)$")


@dataclass
class TopoMatrix:
    """``nvidia-smi topo -m`` (``--matrix``)."""

    devices: list[str]
    matrix: dict[str, dict[str, str]]
    cpu_affinity: dict[str, str | None]
    numa_affinity: dict[str, int | None]
    gpu_numa_id: dict[str, int | None]
    nic_legend: dict[str, str]
    legend: dict[str, str]
    gpus: list[str] = field(default_factory=list)
    nics: list[str] = field(default_factory=list)

    def nvlinks(self, a: str, b: str) -> int | None:
        """Number of bonded NVLinks between two devices (``NV18`` -> 18), None when not NVLink."""
        m = _NV_RE.match(self.matrix.get(a, {}).get(b, ""))
        return int(m.group(1)) if m else None

    def nic_name(self, column: str) -> str:
        """``NIC0`` -> ``mlx5_0`` via the NIC legend; older versions already name the device."""
        return self.nic_legend.get(column, column)


def _is_topo_header(line: str) -> bool:
    tokens = line.split()
    return bool(tokens) and tokens[0] == "GPU0" and ("Affinity" in line or len(tokens) > 1)


# Cell values nvidia-smi prints (its legend; SOC on older drivers) besides NV#; a cell the legend
# of the same output defines is accepted too. A terminal-width cut leaves 'NO' of 'NODE'.
_TOPO_CELLS = {"X", "SYS", "SOC", "NODE", "PHB", "PXB", "PIX"}
_DEVICE_NAME_RE = re.compile(r"^(?:GPU\d+|NIC\d+|mlx\d+_\d+|CPU\d+)$")
_CPU_LIST_RE = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")
# Legend texts as nvidia-smi prints them (every capture in tests/fixtures/nvidia-smi-topo/): a
# legend line that stops short of its text is the mark of a terminal-width cut, which may have cut
# a trailing matrix column exactly at a column boundary too (leaving rows that still fit).
_LEGEND_TEXT = {
    "SYS": "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "NODE": "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
    "within a NUMA node",
    "PHB": "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "PXB": "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "PIX": "Connection traversing at most a single PCIe bridge",
    "NV#": "Connection traversing a bonded set of # NVLinks",
}
_CUT_HINT = "the output was cut (a terminal's width?): capture it with 'nvidia-smi topo -m > FILE'"


@bounded("nvidia-smi topo -m", max_mb=1)
def parse_topo(text: str) -> TopoMatrix:
    """``nvidia-smi topo -m``; a damaged matrix (rows that do not fit the header) is refused.

    Every row of a device in the header must have one cell per device, cells nvidia-smi prints
    (X on the diagonal), and for GPUs one value per trailing column (CPU Affinity, NUMA
    Affinity, GPU NUMA ID) of the right kind; the header must end with those columns; a device
    row the header has no column for, or a header device without a row, is an error. So a
    terminal-width cut (NIC columns gone, NIC rows kept, CPU affinities truncated) is refused
    instead of giving a partial matrix.
    """
    tool, expected = "nvidia-smi topo -m", "a matrix header starting with GPU0 (GPU0 GPU1 ... CPU Affinity)"
    if not text or not text.strip():
        raise ParseError(tool, expected, "empty input")
    lines = clean_lines(text)
    start = next((i for i, ln in enumerate(lines) if _is_topo_header(ln)), None)
    if start is None:
        raise ParseError(tool, expected)
    header = lines[start]
    tokens = header.split()
    devices: list[str] = []
    for tok in tokens:
        if tok in ("CPU", "NUMA", "GPU"):
            break
        devices.append(tok)
    tail = " ".join(tokens[len(devices) :])
    trailing = [col for col in _TRAILING_COLUMNS if col in tail]
    if tail != " ".join(trailing) or "CPU Affinity" not in trailing:
        seen = f"ends with {tail!r}" if tail else f"ends with {devices[-1]!r}"
        raise ParseError(tool, expected, f"the header {seen}, not the Affinity columns; {_CUT_HINT}")
    if len(set(devices)) != len(devices):
        raise ParseError(tool, expected, "the header names a device twice")
    known = set(devices)

    body: list[str] = []
    legend: dict[str, str] = {}
    nic_legend: dict[str, str] = {}
    in_legend = False
    for ln in lines[start + 1 :]:
        stripped = ln.strip()
        if not stripped:
            continue
        if stripped.startswith("Legend:") or stripped.startswith("NIC Legend:"):
            in_legend = True
            continue
        if in_legend:
            m = _LEGEND_RE.match(ln)
            if m:
                legend[m.group(1)] = m.group(2).strip()
                continue
            m = _NIC_LEGEND_RE.match(ln)
            if m:
                nic_legend[m.group(1)] = m.group(2)
            continue
        body.append(stripped)
    vocabulary = _TOPO_CELLS | {k for k in legend if k != "NV#"}
    for key, value in legend.items():
        full = _LEGEND_TEXT.get(key, "")
        if value != full and full.startswith(value):
            detail = f"the legend line of {key} stops at {value[-20:]!r}; {_CUT_HINT}"
            raise ParseError(tool, expected, detail)

    matrix: dict[str, dict[str, str]] = {}
    cpu: dict[str, str | None] = {}
    numa: dict[str, int | None] = {}
    gpu_numa: dict[str, int | None] = {}
    for stripped in body:
        row = stripped.split()
        name = row[0]
        if name not in known:
            if _DEVICE_NAME_RE.match(name):
                raise ParseError(tool, expected, f"row {name} has no column in the header; {_CUT_HINT}")
            continue  # warning lines ("Conflicting CPU frequency values detected ...") and noise
        if name in matrix:
            raise ParseError(tool, expected, f"row {name} appears twice")
        cells = row[1 : 1 + len(devices)]
        if len(cells) < len(devices):
            detail = f"row {name} has {len(cells)} of {len(devices)} cells (truncated)"
            raise ParseError(tool, expected, detail)
        for device, cell in zip(devices, cells, strict=True):
            if cell not in vocabulary and not _NV_RE.match(cell):
                raise ParseError(tool, expected, f"row {name} column {device} holds {cell[:20]!r}, "
                                 "not a link type (X, SYS, NODE, PHB, PXB, PIX, NV#)")
        if cells[devices.index(name)] != "X":
            raise ParseError(tool, expected, f"row {name} does not have X in its own column {name}")
        extra = row[1 + len(devices) :]
        is_gpu = re.fullmatch(r"GPU\d+", name) is not None
        if len(extra) > len(trailing) or (is_gpu and len(extra) != len(trailing)) or (
            not is_gpu and extra and len(extra) != len(trailing)
        ):
            raise ParseError(tool, expected, f"row {name} has {len(extra)} values for the "
                             f"{len(trailing)} columns {', '.join(trailing)}; {_CUT_HINT}")
        values = dict(zip(trailing, extra, strict=False))
        affinity = _na(values.get("CPU Affinity"))
        if affinity is not None and not _CPU_LIST_RE.match(affinity):
            raise ParseError(tool, expected, f"row {name}: CPU Affinity {affinity[:20]!r} is not a CPU list")
        for col in ("NUMA Affinity", "GPU NUMA ID"):
            value = _na(values.get(col))
            if value is not None and not _CPU_LIST_RE.match(value):
                raise ParseError(tool, expected, f"row {name}: {col} {value[:20]!r} is not a NUMA node")
        matrix[name] = dict(zip(devices, cells, strict=True))
        cpu[name] = affinity
        raw_numa = to_number(values.get("NUMA Affinity", "") or "")
        numa[name] = raw_numa if isinstance(raw_numa, int) else None
        if "GPU NUMA ID" in trailing:
            raw_gn = to_number(values.get("GPU NUMA ID", "") or "")
            gpu_numa[name] = raw_gn if isinstance(raw_gn, int) else None

    gpus = [d for d in devices if re.fullmatch(r"GPU\d+", d)]
    nics = [d for d in devices if d not in gpus]
    missing = [d for d in devices if d not in matrix]
    if not matrix:
        raise ParseError(tool, expected, "header found but no matrix rows")
    if missing:
        raise ParseError(tool, expected, f"no row for {', '.join(missing)} (truncated output)")
    return TopoMatrix(
        devices=devices,
        matrix=matrix,
        cpu_affinity={k: v for k, v in cpu.items() if k in gpus or v is not None},
        numa_affinity={k: v for k, v in numa.items() if k in gpus or v is not None},
        gpu_numa_id={k: v for k, v in gpu_numa.items() if k in gpus},
        nic_legend=nic_legend,
        legend=legend,
        gpus=gpus,
        nics=nics,
    )


# --------------------------------------------------------------------------------------------
# nvidia-smi nvlink --status
# --------------------------------------------------------------------------------------------

_NVL_GPU_RE = re.compile(r"^GPU (\d+): ")
_NVL_LINK_RE = re.compile(r"^\s*Link (\d+):\s*(.*)$")  # value stripped in code: (.*?)\s*$ is quadratic
_NVL_SPEED_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*GB/s$")


@dataclass
class NvlinkLink:
    link: int
    active: bool
    speed_gb_s: float | None
    raw: str


@dataclass
class NvlinkGpu:
    index: int
    name: str
    uuid: str
    links: list[NvlinkLink] = field(default_factory=list)
    message: str | None = None

    @property
    def active_links(self) -> int:
        return sum(1 for link in self.links if link.active)

    @property
    def inactive_links(self) -> list[int]:
        return [link.link for link in self.links if not link.active]


@dataclass
class NvlinkStatus:
    """``nvidia-smi nvlink --status`` / ``-s``."""

    gpus: list[NvlinkGpu]


def _nvlink_gpu_line(line: str) -> tuple[int, str, str, str] | None:
    """'GPU 0: NAME (UUID: GPU-...)  REST' -> (0, NAME, UUID, REST); linear in the line length.

    (The regex ``GPU (\\d+): (.*?) \\(UUID: ([^)]*)\\)`` did the same in quadratic time on a long
    line holding many ' (UUID: ' and no ')'.)
    """
    m = _NVL_GPU_RE.match(line)
    if not m:
        return None
    opening = line.find(" (UUID: ", m.end())
    if opening < 0:
        return None
    closing = line.find(")", opening + 8)
    if closing < 0:
        return None
    name, uuid = line[m.end() : opening].strip(), line[opening + 8 : closing].strip()
    return int(m.group(1)), name, uuid, line[closing + 1 :].strip()


@bounded("nvidia-smi nvlink --status", max_mb=1)
def parse_nvlink(text: str) -> NvlinkStatus:
    tool = "nvidia-smi nvlink --status"
    expected = "'GPU N: NAME (UUID: ...)' lines followed by 'Link N:' lines"
    if not text or not text.strip():
        raise ParseError(tool, expected, "empty input")
    gpus: list[NvlinkGpu] = []
    evidence = False
    for ln in clean_lines(text):
        stripped = ln.strip()
        m = _nvlink_gpu_line(stripped)
        if m:
            index, name, uuid, rest = m
            gpu = NvlinkGpu(index=index, name=name, uuid=uuid)
            if rest.startswith("NVML:"):
                gpu.message = rest
                evidence = True
            gpus.append(gpu)
            continue
        m = _NVL_LINK_RE.match(ln)
        if m and gpus:
            value = m.group(2).strip()
            speed = _NVL_SPEED_RE.match(value)
            if speed:
                gpus[-1].links.append(NvlinkLink(int(m.group(1)), True, float(speed.group(1)), value))
            elif value.startswith("<inactive>") or value.lower() == "inactive":
                gpus[-1].links.append(NvlinkLink(int(m.group(1)), False, None, value))
            elif "," in value:
                continue  # 'Link 0, P2P is supported: true' belongs to --capabilities
            else:
                gpus[-1].links.append(NvlinkLink(int(m.group(1)), False, None, value))
            evidence = True
            continue
        if stripped.startswith("NVML:") and gpus:
            gpus[-1].message = stripped
            evidence = True
    if not gpus:
        raise ParseError(tool, expected)
    if not evidence:
        raise ParseError(tool, expected, "GPU lines without any Link line (is this 'nvidia-smi -L'?)")
    return NvlinkStatus(gpus=gpus)


# --------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]
# --------------------------------------------------------------------------------------------

_FIELD_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(?:\s*\[([^\]]+)\])?$")
_NUMBER_RE = re.compile(r"^-?\d+(?:\.\d+)?$")
# Fields whose values look numeric but are identifiers or versions ("591.86", "1562221013740").
_TEXT_FIELDS = {
    "name", "gpu_name", "uuid", "gpu_uuid", "serial", "gpu_serial", "driver_version", "vbios_version",
    "pci.bus_id", "gpu_bus_id", "pci.domain", "pci.bus", "pci.device", "pci.device_id",
    "pci.sub_device_id", "timestamp", "pstate", "compute_cap", "persistence_mode", "compute_mode",
    "display_mode", "display_active", "mig.mode.current", "mig.mode.pending", "inforom.img",
    "inforom.oem", "inforom.ecc", "inforom.pwr", "gpu_operation_mode.current",
}


# Field names of `nvidia-smi --help-query-gpu` (drivers 450-570): a header must hold at least one,
# else any one-word first line made a "CSV" of whatever followed (4 MB of 'a' lines: 30 s, 1.6 GB).
# Exact names, and the dotted families (`clocks.max.sm`, `ecc.errors.corrected.volatile.total`,
# `clocks_event_reasons.sw_power_cap`, ...), so fields a newer driver adds to a family still count.
_QUERY_NAMES = {
    "timestamp", "driver_version", "count", "name", "gpu_name", "serial", "gpu_serial", "uuid",
    "gpu_uuid", "gpu_bus_id", "index", "display_mode", "display_active", "display_attached",
    "persistence_mode", "addressing_mode", "vbios_version", "pstate", "compute_mode", "compute_cap",
}
_QUERY_FAMILIES = {
    "pci", "pcie", "accounting", "driver_model", "inforom", "gom", "gpu_operation_mode", "fan",
    "clocks_throttle_reasons", "clocks_event_reasons", "memory", "utilization", "encoder", "ecc",
    "retired_pages", "remapped_rows", "temperature", "power", "enforced", "module", "clocks", "mig",
    "fabric", "gsp", "c2c", "protected_memory", "platform", "reset_status", "vgpu_driver_capability",
    "vgpu_device_capability",
}


def _known_field(name: str) -> bool:
    family, dot, _ = name.partition(".")
    return name in _QUERY_NAMES or (bool(dot) and family in _QUERY_FAMILIES)


@dataclass
class QueryResult:
    """``nvidia-smi --query-gpu=... --format=csv``."""

    fields: list[str]
    units: dict[str, str | None]
    rows: list[dict[str, Any]]


# Values of the right kind for the identifier fields (a cut line leaves 'GPU-f3da2e71-6e43-7').
_QUERY_FORMATS = {
    "uuid": re.compile(r"^(?:GPU|MIG)-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$"),
    "pci.bus_id": re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$"),
}
_QUERY_FORMATS["gpu_uuid"] = _QUERY_FORMATS["uuid"]
_QUERY_FORMATS["gpu_bus_id"] = _QUERY_FORMATS["pci.bus_id"]


def _query_value(fieldname: str, unit: str | None, raw: str) -> Any:
    value = raw.strip()
    if _na(value) is None:
        return None
    fmt = _QUERY_FORMATS.get(fieldname)
    if fmt is not None and not fmt.match(value):
        raise ParseError("nvidia-smi --query-gpu", f"{fieldname} values as nvidia-smi prints them",
                         f"{fieldname} {value[:50]!r} is cut or damaged")
    if unit and value.endswith(f" {unit}"):
        value = value[: -len(unit) - 1].strip()
    if fieldname in _TEXT_FIELDS or fieldname.startswith("pci.") or not _NUMBER_RE.match(value):
        return value
    number = to_number(value)
    return value if number is None else number


def _split_header(row: list[str]) -> list[tuple[str, str | None]] | None:
    out = []
    for cell in row:
        m = _FIELD_RE.match(cell.strip())
        if not m or _NUMBER_RE.match(cell.strip()):
            return None
        out.append((m.group(1), m.group(2)))
    return out


@bounded("nvidia-smi --query-gpu", max_mb=4)
def parse_query(text: str, fields: list[str] | str | None = None) -> QueryResult:
    tool = "nvidia-smi --query-gpu"
    expected = (
        "CSV from --format=csv with its header line (field names such as 'index, name, memory.total [MiB]')"
    )
    if not text or not text.strip():
        raise ParseError(tool, expected, "empty input")
    lines = [ln for ln in clean_lines(text) if ln.strip()]
    for ln in lines:
        if "is not a valid field to query" in ln or ln.strip() == "No devices were found":
            raise ParseError(tool, expected, ln.strip())
    reader = csv.reader(lines, skipinitialspace=True)
    try:
        first = next(reader)
    except csv.Error as exc:
        raise ParseError(tool, expected, f"not CSV: {exc}") from None
    header = _split_header(first)
    if isinstance(fields, str):
        fields = [f.strip() for f in fields.split(",") if f.strip()]
    if fields:
        names = [f.strip() for f in fields]
        units: dict[str, str | None] = dict.fromkeys(names)
        has_header = bool(header and [h[0] for h in header] == names)
        if has_header:
            units = {name: unit for name, unit in header}
    else:
        # the header is checked before the rest is read: 4 MB of 'a' lines were read as 2 million
        # rows of a one-field CSV (30 s, 1.6 GB) before anything looked at their header
        if header is None or len(header) != len(first):
            raise ParseError(
                tool, expected,
                "no header line: include the header (omit 'noheader') or pass the field names",
            )
        names = [h[0] for h in header]
        if not any(_known_field(name) for name in names):
            shown = ", ".join(first)[:60]
            raise ParseError(tool, expected, f"header {shown!r} names no --query-gpu field")
        units = {name: unit for name, unit in header}
        has_header = True
    try:
        rows = [first, *reader][1 if has_header else 0 :]
    except csv.Error as exc:
        raise ParseError(tool, expected, f"not CSV: {exc}") from None
    if not rows:
        raise ParseError(tool, expected, "header without any GPU row")
    out = []
    for i, row in enumerate(rows):
        if len(row) != len(names):
            raise ParseError(tool, expected, f"row {i + 1} has {len(row)} values for {len(names)} fields")
        pairs = zip(names, row, strict=True)
        out.append({name: _query_value(name, units[name], cell) for name, cell in pairs})
    return QueryResult(fields=names, units=units, rows=out)


# --------------------------------------------------------------------------------------------
# nvidia-smi -q
# --------------------------------------------------------------------------------------------

_Q_MAX_DEPTH = 16  # nvidia-smi -q nests 4 levels (GPU > ECC Errors > Volatile > SRAM Correctable)
_Q_GPU_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")


@dataclass
class QGpu:
    pci_bus_id: str
    product_name: str | None
    uuid: str | None
    serial: str | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    temperature_c: int | None
    power_draw_w: float | None
    power_limit_w: float | None
    ecc_mode: str | None
    ecc_errors: dict[str, int | None]
    clocks_mhz: dict[str, int | None]
    max_clocks_mhz: dict[str, int | None]
    fabric_state: str | None
    fabric_status: str | None
    sections: dict[str, Any]


@dataclass
class QReport:
    """``nvidia-smi -q`` (also ``-a``, ``-q -i N``)."""

    timestamp: str | None
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    gpus: list[QGpu]
    sections: dict[str, Any]


def _q_kv(content: str) -> tuple[str, str] | None:
    """'Key   : value' -> ('Key', 'value'): the first ':' with whitespace before it and whitespace
    or the end of line after it (what ``^(\\S.*?)\\s+:(?:\\s(.*))?$`` matched, but linear: that
    regex was quadratic on a long line of spaces without such a colon)."""
    pos = content.find(":", 1)
    while pos > 0:
        after = content[pos + 1 : pos + 2]
        if content[pos - 1].isspace() and (not after or after.isspace()):
            key = content[:pos].rstrip()
            if key:
                return key, content[pos + 2 :].strip()
        pos = content.find(":", pos + 1)
    return None


def _q_tree(lines: list[str]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    last: tuple[int, dict[str, Any], str] | None = None  # indent, parent, key of the last key/value

    multi: set[tuple[int, str]] = set()  # (id(dict), key) already turned into a list of values

    def put(parent: dict[str, Any], key: str, value: Any) -> None:
        if key in parent:
            if (id(parent), key) not in multi:
                parent[key] = [parent[key]]
                multi.add((id(parent), key))
            parent[key].append(value)
        else:
            parent[key] = value

    for ln in lines:
        if not ln.strip() or set(ln.strip()) <= {"="} or "NVSMI LOG" in ln:
            continue
        indent = len(ln) - len(ln.lstrip(" "))
        content = ln.strip()
        if last and indent > last[0]:
            # A key/value line with children (Processes -> Process ID -> Type, Name, ...)
            _, parent, key = last
            current = parent[key][-1] if isinstance(parent[key], list) else parent[key]
            node = {"_value": current}
            if isinstance(parent[key], list):
                parent[key][-1] = node
            else:
                parent[key] = node
            stack.append((last[0], node))
        last = None
        while stack[-1][0] >= indent:
            stack.pop()
        if len(stack) > _Q_MAX_DEPTH:
            raise ParseError("nvidia-smi -q", "sections nested a few levels deep",
                             f"more than {_Q_MAX_DEPTH} levels of indentation (damaged output)")
        parent = stack[-1][1]
        kv = None if _Q_GPU_RE.match(content) else _q_kv(content)
        if kv:
            put(parent, kv[0], kv[1])
            last = (indent, parent, kv[0])
        else:
            node: dict[str, Any] = {}
            put(parent, content, node)
            stack.append((indent, node))
    return root


def _get(d: dict[str, Any], *path: str) -> Any:
    cur: Any = d
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    if isinstance(cur, dict) and "_value" in cur:
        return cur["_value"]
    return cur


def _first(d: dict[str, Any], *paths: tuple[str, ...]) -> Any:
    for path in paths:
        value = _get(d, *path)
        if value is not None:
            return value
    return None


def _num(value: Any, suffix: str = "") -> int | float | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    if suffix and value.endswith(suffix):
        value = value[: -len(suffix)].strip()
    return to_number(value)


def _ecc_summary(sec: dict[str, Any]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    errors = sec.get("ECC Errors") if isinstance(sec.get("ECC Errors"), dict) else {}
    for scope in ("Volatile", "Aggregate"):
        block = errors.get(scope) if isinstance(errors.get(scope), dict) else {}
        for kind in ("Correctable", "Uncorrectable"):
            total: int | None = None
            for key, value in block.items():
                words = key.split()
                if kind == "Uncorrectable" and "Uncorrectable" not in words:
                    continue
                if kind == "Correctable" and "Correctable" not in words:
                    continue
                n = _num(value) if isinstance(value, str) else None
                if isinstance(n, int):
                    total = (total or 0) + n
            out[f"{scope.lower()}_{kind.lower()}"] = total
    return out


def _clocks(block: Any) -> dict[str, int | None]:
    if not isinstance(block, dict):
        return {}
    out = {}
    for key, value in block.items():
        n = _num(value, "MHz") if isinstance(value, str) else None
        out[key.lower()] = n if isinstance(n, int) else None
    return out


@bounded("nvidia-smi -q", max_mb=2)
def parse_q(text: str) -> QReport:
    tool = "nvidia-smi -q"
    expected = "the '==============NVSMI LOG==============' report with 'GPU <bus id>' sections"
    if not text or not text.strip():
        raise ParseError(tool, expected, "empty input")
    lines = clean_lines(text)
    tree = _q_tree(lines)
    if "Driver Version" not in tree and not any("NVSMI LOG" in ln for ln in lines):
        raise ParseError(tool, expected)
    gpu_keys = [k for k in tree if _Q_GPU_RE.match(k)]
    if not gpu_keys:
        raise ParseError(tool, expected, "no 'GPU <bus id>' section (truncated output?)")
    gpus = []
    for key in gpu_keys:
        secs = tree[key] if isinstance(tree[key], list) else [tree[key]]
        for sec in secs:
            if not sec:
                raise ParseError(tool, expected, f"empty section {key} (truncated output)")
            fb_total = _num(_get(sec, "FB Memory Usage", "Total"), "MiB")
            fb_used = _num(_get(sec, "FB Memory Usage", "Used"), "MiB")
            temp = _num(_get(sec, "Temperature", "GPU Current Temp"), "C")
            draw = _num(
                _first(sec, ("Power Readings", "Power Draw"), ("GPU Power Readings", "Power Draw")), "W"
            )
            limit = _num(_first(
                sec, ("Power Readings", "Power Limit"), ("Power Readings", "Enforced Power Limit"),
                ("GPU Power Readings", "Current Power Limit"),
            ), "W")
            gpus.append(QGpu(
                pci_bus_id=_na(_get(sec, "PCI", "Bus Id")) or _Q_GPU_RE.match(key).group(1),
                product_name=_na(_get(sec, "Product Name")),
                uuid=_na(_get(sec, "GPU UUID")),
                serial=_na(_get(sec, "Serial Number")),
                memory_total_mib=fb_total if isinstance(fb_total, int) else None,
                memory_used_mib=fb_used if isinstance(fb_used, int) else None,
                temperature_c=temp if isinstance(temp, int) else None,
                power_draw_w=float(draw) if draw is not None else None,
                power_limit_w=float(limit) if limit is not None else None,
                ecc_mode=_na(_first(sec, ("ECC Mode", "Current"), ("Ecc Mode", "Current"))),
                ecc_errors=_ecc_summary(sec),
                clocks_mhz=_clocks(sec.get("Clocks")),
                max_clocks_mhz=_clocks(sec.get("Max Clocks")),
                fabric_state=_na(_get(sec, "Fabric", "State")),
                fabric_status=_na(_get(sec, "Fabric", "Status")),
                sections=sec,
            ))
    attached = _num(tree.get("Attached GPUs")) if isinstance(tree.get("Attached GPUs"), str) else None
    def top(key: str) -> str | None:
        value = tree.get(key)
        return _na(value) if isinstance(value, str) else None

    return QReport(
        timestamp=top("Timestamp"),
        driver_version=top("Driver Version"),
        cuda_version=top("CUDA Version"),
        attached_gpus=attached if isinstance(attached, int) else None,
        gpus=gpus,
        sections=tree,
    )
