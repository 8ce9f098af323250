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
from fabricops.parsers._text import clean_lines, to_number

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


def _na(value: str | None) -> str | None:
    if value is None:
        return None
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


def parse_topo(text: str) -> TopoMatrix:
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
    trailing = [col for col in _TRAILING_COLUMNS if col in header]
    known = set(devices)

    matrix: dict[str, dict[str, str]] = {}
    cpu: dict[str, str | None] = {}
    numa: dict[str, int | None] = {}
    gpu_numa: dict[str, int | None] = {}
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
        row = stripped.split()
        name = row[0]
        if name not in known:
            continue  # warning lines ("Conflicting CPU frequency values detected ...") and noise
        cells = row[1 : 1 + len(devices)]
        if len(cells) < len(devices):
            detail = f"row {name} has {len(cells)} of {len(devices)} cells (truncated)"
            raise ParseError(tool, expected, detail)
        matrix[name] = dict(zip(devices, cells, strict=True))
        extra = row[1 + len(devices) :]
        values = dict(zip(trailing, extra, strict=False))
        cpu[name] = _na(values.get("CPU Affinity"))
        raw_numa = to_number(values.get("NUMA Affinity", "") or "")
        numa[name] = raw_numa if isinstance(raw_numa, int) else None
        if "GPU NUMA ID" in trailing:
            raw_gn = to_number(values.get("GPU NUMA ID", "") or "")
            gpu_numa[name] = raw_gn if isinstance(raw_gn, int) else None

    gpus = [d for d in devices if re.fullmatch(r"GPU\d+", d)]
    nics = [d for d in devices if d not in gpus]
    missing = [g for g in gpus if g not in matrix]
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

_NVL_GPU_RE = re.compile(r"^GPU (\d+): (.*?) \(UUID: ([^)]*)\)\s*(.*)$")
_NVL_LINK_RE = re.compile(r"^\s*Link (\d+):\s*(.*?)\s*$")
_NVL_SPEED_RE = re.compile(r"^([0-9.]+)\s*GB/s$")


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


def parse_nvlink(text: str) -> NvlinkStatus:
    tool = "nvidia-smi nvlink --status"
    expected = "'GPU N: NAME (UUID: ...)' lines followed by 'Link N:' lines"
    if not text or not text.strip():
        raise ParseError(tool, expected, "empty input")
    gpus: list[NvlinkGpu] = []
    evidence = False
    for ln in clean_lines(text):
        stripped = ln.strip()
        m = _NVL_GPU_RE.match(stripped)
        if m:
            gpu = NvlinkGpu(index=int(m.group(1)), name=m.group(2).strip(), uuid=m.group(3).strip())
            rest = m.group(4).strip()
            if rest.startswith("NVML:"):
                gpu.message = rest
                evidence = True
            gpus.append(gpu)
            continue
        m = _NVL_LINK_RE.match(ln)
        if m and gpus:
            value = m.group(2)
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


@dataclass
class QueryResult:
    """``nvidia-smi --query-gpu=... --format=csv``."""

    fields: list[str]
    units: dict[str, str | None]
    rows: list[dict[str, Any]]


def _query_value(fieldname: str, unit: str | None, raw: str) -> Any:
    value = raw.strip()
    if _na(value) is None:
        return None
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
    rows = list(csv.reader(lines, skipinitialspace=True))
    header = _split_header(rows[0])
    if isinstance(fields, str):
        fields = [f.strip() for f in fields.split(",") if f.strip()]
    if fields:
        names = [f.strip() for f in fields]
        units: dict[str, str | None] = dict.fromkeys(names)
        if header and [h[0] for h in header] == names:
            units = {name: unit for name, unit in header}
            rows = rows[1:]
    else:
        if header is None or len(header) != len(rows[0]):
            raise ParseError(
                tool, expected,
                "no header line: include the header (omit 'noheader') or pass the field names",
            )
        names = [h[0] for h in header]
        units = {name: unit for name, unit in header}
        rows = rows[1:]
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

_Q_KV_RE = re.compile(r"^(\S.*?)\s+:(?:\s(.*))?$")
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
        parent = stack[-1][1]
        m = _Q_KV_RE.match(content)
        if m and not _Q_GPU_RE.match(content):
            value = (m.group(2) or "").strip()
            put(parent, m.group(1).strip(), value)
            last = (indent, parent, m.group(1).strip())
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
