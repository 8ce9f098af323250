"""nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ...): text, or the ``-J`` JSON file.

Text versions differ: older ones print no ``redop``/``root`` columns (all_gather) or no ``root``
(all_reduce) and an ``error`` column, newer ones ``#wrong``; newer ones add ``Group`` to the device
lines, a ``# nccl-tests version`` line and ``# Collective test starting/concluded: NAME``. Lines that
are not table rows (``NCCL INFO`` debug output, warnings) may appear inside the table and are kept in
``notes``. ``mpirun --tag-output`` prefixes (``[1,0]<stdout>:``) are removed. The ``-J`` JSON
(``version``, ``config``, ``results``, ``average_bus_bandwidth``) is recognised when the text is a
JSON object. Schema: docs/parsers.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines, load_json, to_number

__all__ = ["NcclDevice", "NcclResult", "NcclTestsRecord", "parse"]

TOOL = "nccl-tests"
EXPECTED = "the output of an nccl-tests binary such as all_reduce_perf (or its -J JSON file)"

#: Canonical collective names, from the binary name without ``_perf`` / ``_perf_mpi``.
_BINARY_TO_COLLECTIVE = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "alltoall",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "sendrecv",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
    "alltoallv": "alltoallv",
}


@dataclass
class NcclResult:
    """One row of the results table (one half: out-of-place or in-place)."""

    bytes: int  #: message size in bytes (the ``size`` column)
    count: int  #: elements
    type: str  #: data type, e.g. "float"
    redop: str | None  #: reduction op ("sum", "none", ...); None when the version prints no column
    root: int | None  #: root rank, -1 for collectives without one; None when not printed
    time_us: float | None  #: microseconds (CPU time with -C); None when not measured
    algbw: float | None  #: GB/s (10^9 B/s)
    busbw: float | None  #: GB/s
    wrong: int | float | None  #: ``#wrong`` (or older ``error``) value; None when N/A (no check)


@dataclass
class NcclDevice:
    rank: int
    group: int | None  #: None on versions without "Group"
    pid: int
    host: str
    device: int  #: CUDA device index on that host
    bus_id: str  #: as printed in brackets, e.g. "0000:18:00" or "0x18"
    name: str  #: GPU name, e.g. "NVIDIA H100 80GB HBM3"


@dataclass
class NcclTestsRecord:
    format: str  #: "text" or "json"
    collective: str | None  #: "all_reduce", "all_gather", ...
    collective_from: str | None  #: "header" (binary name / JSON args) or "inferred" (busbw/algbw)
    program: str | None  #: binary name when printed, e.g. "all_reduce_perf_mpi"
    version: str | None  #: nccl-tests version ("2.18.0") when printed
    nccl_version: int | None  #: NCCL version code (22907) when printed
    nthreads: int | None
    ngpus: int | None  #: GPUs per thread/process (-g)
    min_bytes: int | None
    max_bytes: int | None
    warmup_iters: int | None
    iters: int | None
    ranks: int | None  #: number of ranks (device lines); None when not printed
    devices: list[NcclDevice]
    results: list[NcclResult]  #: out-of-place rows
    results_in_place: list[NcclResult]
    avg_busbw: float | None  #: "# Avg bus bandwidth" in GB/s; None when the run did not finish
    out_of_bounds: int | None  #: "# Out of bounds values" count
    complete: bool  #: the footer (Avg bus bandwidth) was printed
    notes: list[str] = field(default_factory=list)  #: non-table lines found inside the table


# `mpirun --tag-output` prefixes, removed from every line in one pass over the text (per line, the
# substitution alone was a third of the time on 16 MB of short lines).
_TAG = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:", re.M)
_DEVICE = re.compile(
    r"^#\s+Rank\s+(\d+)(?:\s+Group\s+(\d+))?\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$"
)
_PARAMS = {
    key: re.compile(pattern)
    for key, pattern in {
        "nthreads": r"nThread\s+(\d+)",
        "ngpus": r"nGpus\s+(\d+)",
        "min_bytes": r"minBytes\s+(\d+)",
        "max_bytes": r"maxBytes\s+(\d+)",
        "warmup_iters": r"warmup iters:\s*(\d+)",
        "iters": r"(?<!warmup )(?<!agg )iters:\s*(\d+)",
    }.items()
}
# Comment-line patterns, each tried only on a body starting with its first letter (running them all
# on every '#' line took 17 s on 16 MB of '#' lines).
_VERSION = re.compile(r"nccl-tests version (\S+)(?:.*nccl-library=(\d+))?")
_COLLECTIVE = re.compile(r"Collective test (?:starting|concluded):\s*(\S+)")
_RANK = re.compile(r"Rank\s+\d+\s")
_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)")
_FAILURE = re.compile(r"\b(failure|failed|error)\b", re.IGNORECASE)
_INT = re.compile(r"-?\d+")
_GROUP_START = {"time", "cputime"}


def _num(token: str) -> int | float | None:
    """'12' -> 12, '1.5' -> 1.5, '1e+03' -> 1000; 'N/A', 'nan', 'inf' and words -> None."""
    token = token.strip()
    value = to_number(token)
    if isinstance(value, float) and value.is_integer() and "e" in token.lower():
        return int(value)
    return value


def _collective_of(program: str | None) -> str | None:
    if not program:
        return None
    base = program.rsplit("/", 1)[-1]
    for suffix in ("_perf_mpi", "_perf"):
        if base.endswith(suffix):
            return _BINARY_TO_COLLECTIVE.get(base[: -len(suffix)])
    return None


@bounded(TOOL, max_mb=6)
def parse(text: str) -> NcclTestsRecord:
    """Parse nccl-tests text output or its ``-J`` JSON file."""
    if text is None or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("{"):
        return _parse_json(stripped)
    return _parse_text(text)


# --- text -------------------------------------------------------------------------------------


def _split_header(tokens: list[str]) -> tuple[list[str], list[str], list[str], list[str]]:
    """Header tokens -> (prefix columns, out-of-place group, in-place group, trailing columns)."""
    starts = [i for i, t in enumerate(tokens) if t in _GROUP_START]
    prefix = tokens[: starts[0]]
    if len(starts) == 1:
        return prefix, tokens[starts[0] :], [], []
    oop = tokens[starts[0] : starts[1]]
    rest = tokens[starts[1] :]
    ip = rest[: len(oop)]
    return prefix, oop, ip, rest[len(oop) :]


def _check_header(tokens: list[str]) -> None:
    """Both halves (out-of-place, in-place) with time, algbw, busbw and #wrong/error, or a ParseError.

    Every nccl-tests version prints both groups (a disabled half leaves its cells blank), so a
    header with less was cut, e.g. at a terminal's width.
    """
    _, oop, ip, _ = _split_header(tokens)
    for group in (oop, ip):
        if not ({"algbw", "busbw"} <= set(group) and {"#wrong", "error"} & set(group)):
            raise ParseError(TOOL, EXPECTED, f"results header {' '.join(tokens)[:100]!r} lacks a column "
                             "(cut or damaged output)")


def _half(prefix: dict[str, Any], cols: list[str], values: list[str], numbers: list[Any]) -> NcclResult:
    """One half of a row; ``numbers`` holds ``_num`` of each of ``values`` (read once per row)."""
    got = dict(zip(cols, zip(values, numbers, strict=True), strict=False))
    wrong_key = "#wrong" if "#wrong" in got else "error"
    return NcclResult(
        bytes=prefix["size"],
        count=prefix["count"],
        type=prefix["type"],
        redop=prefix.get("redop"),
        root=prefix.get("root"),
        time_us=_float(*got.get("time", got.get("cputime", (None, None)))),
        algbw=_float(*got.get("algbw", (None, None))),
        busbw=_float(*got.get("busbw", (None, None))),
        wrong=got[wrong_key][1] if wrong_key in got else None,
    )


def _float(token: str | None, value: Any = False) -> float | None:
    """``token`` as a non-negative float (None for N/A); ``value``: its ``_num``, when known."""
    if value is False:
        value = _num(token) if token is not None else None
    if value is not None and value < 0:
        raise ParseError(TOOL, EXPECTED, f"negative value {token!r} where a time or bandwidth belongs")
    return None if value is None else float(value)


def _parse_text(text: str) -> NcclTestsRecord:
    lines = clean_lines(text)
    joined = "\n".join(lines)
    if "]<std" in joined:
        lines = _TAG.sub("", joined).split("\n")

    params: dict[str, int] = {}
    devices: list[NcclDevice] = []
    version = program = None
    nccl_version: int | None = None
    header: list[str] | None = None
    oop_rows: list[NcclResult] = []
    ip_rows: list[NcclResult] = []
    notes: list[str] = []
    avg_busbw: float | None = None
    oob: int | None = None
    complete = False
    saw_params = False
    failure: str | None = None

    columns = None
    for line in lines:
        s = line.strip()
        if not s:
            continue
        if s[0] == "#":
            body = s.lstrip("#").strip()
            if not body:
                continue
            first = body[0]
            if first == "n" and body.startswith("nThread"):
                saw_params = True
                for key, pattern in _PARAMS.items():
                    m = pattern.search(body)
                    if m:
                        params[key] = int(m.group(1))
                continue
            m = _VERSION.match(body) if first == "n" else None
            if m:
                version = m.group(1)
                nccl_version = int(m.group(2)) if m.group(2) else None
                continue
            m = _COLLECTIVE.match(body) if first == "C" else None
            if m:
                program = m.group(1)
                continue
            m = _DEVICE.match(s) if first == "R" else None
            if m:
                devices.append(
                    NcclDevice(
                        rank=int(m.group(1)),
                        group=int(m.group(2)) if m.group(2) is not None else None,
                        pid=int(m.group(3)),
                        host=m.group(4),
                        device=int(m.group(5)),
                        bus_id=m.group(6),
                        name=m.group(7).strip(),
                    )
                )
                continue
            if first == "R" and body.startswith("Rank ") and _RANK.match(body):
                raise ParseError(TOOL, EXPECTED, f"device line {s[:80]!r} is cut or damaged")
            if header is None and "size" in body and "count" in body and "type" in body:
                tokens = body.split()
                if {"size", "count", "type"} <= set(tokens) and _GROUP_START & set(tokens):
                    _check_header(tokens)
                    header = tokens
                    columns = _split_header(header)
                    continue
            m = _OOB.match(body) if first == "O" else None
            if m:
                oob = int(m.group(1))
                continue
            m = _AVG.match(body) if first == "A" else None
            if m:
                avg_busbw = _float(m.group(1))
                complete = True
                continue
            continue  # other comment lines: "(B) (elements)", "Using devices", "#"
        if header is not None and not complete and s.split(None, 1)[0].isdecimal():
            row = _row(columns, s.split())
            if row is None:
                # A row that does not fit the header is damage (a cut line, a lost column), not a
                # note: skipping it would give a results table with holes.
                raise ParseError(TOOL, EXPECTED, f"result row {s[:80]!r} does not match the header "
                                 f"{' '.join(header)[:80]!r} (cut or damaged output)")
            oop, ip = row
            if oop is not None:
                oop_rows.append(oop)
            if ip is not None:
                ip_rows.append(ip)
            continue
        if header is not None and not complete:
            notes.append(s)
        if failure is None and _FAILURE.search(s):
            failure = s

    if header is None:
        if not saw_params and not devices:
            raise ParseError(TOOL, EXPECTED, "no '# nThread ...' line and no results table header")
        detail = "truncated: no results table"
        if failure:
            detail += f"; the run reported: {failure[:160]}"
        raise ParseError(TOOL, EXPECTED, detail)
    if not oop_rows and not ip_rows:
        detail = "truncated: results table header but no result rows"
        if failure:
            detail += f"; the run reported: {failure[:160]}"
        raise ParseError(TOOL, EXPECTED, detail)

    collective = _collective_of(program)
    collective_from = "header" if collective else None
    if collective is None:
        collective = _infer_collective(oop_rows or ip_rows, len(devices) or None, header)
        collective_from = "inferred" if collective else None

    return NcclTestsRecord(
        format="text",
        collective=collective,
        collective_from=collective_from,
        program=program,
        version=version,
        nccl_version=nccl_version,
        nthreads=params.get("nthreads"),
        ngpus=params.get("ngpus"),
        min_bytes=params.get("min_bytes"),
        max_bytes=params.get("max_bytes"),
        warmup_iters=params.get("warmup_iters"),
        iters=params.get("iters"),
        ranks=len(devices) or None,
        devices=devices,
        results=oop_rows,
        results_in_place=ip_rows,
        avg_busbw=avg_busbw,
        out_of_bounds=oob,
        complete=complete,
        notes=notes,
    )


def _row(
    columns: tuple[list[str], list[str], list[str], list[str]], tokens: list[str]
) -> tuple[NcclResult | None, NcclResult | None] | None:
    """A data row split by the header's columns (:func:`_split_header`); None when it does not fit."""
    prefix_cols, oop_cols, ip_cols, trailing = columns
    n_prefix = len(prefix_cols)
    if len(tokens) < n_prefix + len(oop_cols):
        return None
    prefix: dict[str, Any] = {}
    for col, tok in zip(prefix_cols, tokens[:n_prefix], strict=True):
        if col in ("size", "count", "root"):
            if not _INT.fullmatch(tok):
                return None
            prefix[col] = int(tok)
        else:
            prefix[col] = tok
    if "size" not in prefix or "count" not in prefix or "type" not in prefix:
        return None
    body = tokens[n_prefix:]
    numbers = [_num(t) for t in body[: len(oop_cols) + len(ip_cols)]]
    if not all(v is not None or t.upper() == "N/A" for t, v in zip(body, numbers, strict=False)):
        return None
    # A timestamp column (-S 1) prints "YYYY-mm-dd HH:MM:SS": two tokens for one header column.
    expected_full = len(oop_cols) + len(ip_cols) + len(trailing)
    n_oop = len(oop_cols)
    if len(body) in (expected_full, expected_full + 1) and ip_cols:
        oop = _half(prefix, oop_cols, body[:n_oop], numbers[:n_oop])
        ip = _half(prefix, ip_cols, body[n_oop : n_oop + len(ip_cols)], numbers[n_oop : n_oop + len(ip_cols)])
        return oop, ip
    if len(body) == len(oop_cols) or (ip_cols and len(body) == len(ip_cols) + len(trailing)):
        # Only one half printed (out-of-place disabled: nccl-tests leaves it blank).
        cols = ip_cols or oop_cols
        half = _half(prefix, cols, body[: len(cols)], numbers[: len(cols)])
        return (None, half) if ip_cols else (half, None)
    return None


def _infer_collective(rows: list[NcclResult], ranks: int | None, header: list[str]) -> str | None:
    """Name the collective from busbw/algbw (nccl-tests PERFORMANCE.md) when only one fits."""
    if not ranks or ranks < 2:
        return None
    ratios = [r.busbw / r.algbw for r in rows if r.algbw and r.busbw and r.algbw >= 1.0]
    if not ratios:
        return None
    ratio = ratios[-1]
    n = ranks
    factors = {
        "all_reduce": 2 * (n - 1) / n,
        "reduce_scatter": (n - 1) / n,
        "all_gather": (n - 1) / n,
        "alltoall": (n - 1) / n,
        "broadcast": 1.0,
        "reduce": 1.0,
        "sendrecv": 1.0,
    }
    candidates = {name for name, f in factors.items() if abs(ratio - f) <= 0.02 * f}
    redop = rows[-1].redop if "redop" in header else None
    root = rows[-1].root if "root" in header else None
    if redop is not None:
        reducing = redop != "none"
        candidates &= (
            {"all_reduce", "reduce_scatter", "reduce"}
            if reducing
            else {"all_gather", "alltoall", "broadcast", "sendrecv"}
        )
    if root is not None:
        candidates &= {"broadcast", "reduce"} if root >= 0 else set(factors) - {"broadcast", "reduce"}
    return candidates.pop() if len(candidates) == 1 else None


# --- JSON (-J) --------------------------------------------------------------------------------


def _jnum(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return _float(repr(value))
    return _float(str(value)) if isinstance(value, str) else None


def _jint(value: Any, what: str, default: int | None = None) -> int:
    """A JSON integer field (an int, an integral float or a decimal string), else a ParseError."""
    if value is None and default is not None:
        return default
    number = None
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        number = _num(str(value))
    if number is None or number != int(number):
        raise ParseError(TOOL, EXPECTED, f"JSON {what} is {str(value)[:40]!r}, not an integer")
    return int(number)


def _jstr(value: Any) -> str | None:
    return None if value is None else str(value) if isinstance(value, str | int | float) else None


def _json_half(row: dict, half: Any) -> NcclResult | None:
    if not isinstance(half, dict):
        return None
    root = row.get("root")
    root_num = _num(str(root)) if isinstance(root, int | float | str) and not isinstance(root, bool) else None
    wrong = half.get("nwrong")
    wrong_num = _num(str(wrong)) if isinstance(wrong, int | float | str) else None
    if isinstance(wrong_num, float) and wrong_num.is_integer():
        wrong_num = int(wrong_num)
    return NcclResult(
        bytes=_jint(row["size"], "size"),
        count=_jint(row.get("count"), "count", 0),
        type=str(_jstr(row.get("type")) or ""),
        redop=_jstr(row.get("redop")),
        root=int(root_num) if root_num is not None else None,
        time_us=_jnum(half.get("time", half.get("cpu_time"))),
        algbw=_jnum(half.get("alg_bw")),
        busbw=_jnum(half.get("bus_bw")),
        wrong=wrong_num,
    )


def _parse_json(text: str) -> NcclTestsRecord:
    doc = load_json(text, TOOL, EXPECTED + " (truncated or invalid JSON)")
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ParseError(TOOL, EXPECTED, "JSON without a 'results' list is not an nccl-tests -J file")
    if not ({"config", "average_bus_bandwidth", "nccl_version"} & set(doc)):
        raise ParseError(TOOL, EXPECTED, "JSON lacks nccl-tests keys (config, average_bus_bandwidth)")
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    raw_devices = config.get("devices", doc.get("devices")) or []
    if not isinstance(raw_devices, list):
        raise ParseError(TOOL, EXPECTED, "JSON 'devices' is not a list")
    devices = [
        NcclDevice(
            rank=_jint(d.get("rank"), "rank", i),
            group=_jint(d["group"], "group") if d.get("group") is not None else None,
            pid=_jint(d.get("pid"), "pid", 0),
            host=str(_jstr(d.get("hostname")) or ""),
            device=_jint(d.get("device"), "device", 0),
            bus_id=str(_jstr(d.get("device_hex")) or ""),
            name=str(_jstr(d.get("device_info")) or ""),
        )
        for i, d in enumerate(raw_devices)
        if isinstance(d, dict)
    ]
    oop_rows: list[NcclResult] = []
    ip_rows: list[NcclResult] = []
    for row in doc["results"]:
        if not isinstance(row, dict) or "size" not in row:
            continue
        oop = _json_half(row, row.get("out_of_place"))
        ip = _json_half(row, row.get("in_place"))
        if oop:
            oop_rows.append(oop)
        if ip:
            ip_rows.append(ip)
    if not oop_rows and not ip_rows:
        raise ParseError(TOOL, EXPECTED, "truncated: the JSON 'results' list has no measurements")
    args = doc.get("args") if isinstance(doc.get("args"), list) else []
    program = str(args[0]).rsplit("/", 1)[-1] if args else None
    collective = _collective_of(program)
    avg = doc.get("average_bus_bandwidth")
    oob = doc.get("out_of_bounds")
    avg_busbw = _jnum(avg.get("bandwidth")) if isinstance(avg, dict) else None
    header = ["size", "count", "type", "redop", "root"]
    if collective is None:
        inferred = _infer_collective(oop_rows or ip_rows, len(devices) or None, header)
        collective_from = "inferred" if inferred else None
        collective = inferred
    else:
        collective_from = "header"

    def _int(key: str) -> int | None:
        value = config.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    nccl_version = doc.get("nccl_version")
    return NcclTestsRecord(
        format="json",
        collective=collective,
        collective_from=collective_from,
        program=program,
        version=None,
        nccl_version=nccl_version if isinstance(nccl_version, int) else None,
        nthreads=_int("nthreads"),
        ngpus=_int("ngpus"),
        min_bytes=_int("minimum_bytes"),
        max_bytes=_int("maximum_bytes"),
        warmup_iters=_int("warmup_iters"),
        iters=_int("iterations"),
        ranks=len(devices) or None,
        devices=devices,
        results=oop_rows,
        results_in_place=ip_rows,
        avg_busbw=avg_busbw,
        out_of_bounds=oob.get("count") if isinstance(oob, dict) and type(oob.get("count")) is int else None,
        complete=isinstance(avg, dict),
        notes=[],
    )
