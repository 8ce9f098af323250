"""Cumulus Linux NVUE: ``nv show qos roce`` (text or ``-o json``), ``nv config diff`` and the
ports' link state and counters (``nv show interface [<port> link [stats]]``).

Schemas are documented in docs/parsers.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from fabricops import safeyaml
from fabricops.errors import ParseError

from ._text import bounded, clean_lines, load_json, to_number

__all__ = [
    "ConfigDiffRecord",
    "InterfaceLinksRecord",
    "LinkState",
    "QosRoceRecord",
    "parse_config_diff",
    "parse_interface_links",
    "parse_qos_roce",
    "size_to_bytes",
]

_SHELL_PROMPT = re.compile(r"^[^\s@]+@[^\s:]+:\S*[$#]\s*")  # user@host:~$ (linear: classes are disjoint)
_UNITS = {"B": 1, "BYTES": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}


def size_to_bytes(value: str | int | None) -> int | None:
    """'146.48 KB' -> 149996, '1.43 MB' -> 1499464, '150000' -> 150000 (NVUE prints binary units)."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"\s*([\d.]+)\s*([A-Za-z]*)\s*", str(value))
    if not m:
        return None
    unit = m.group(2).upper() or "B"
    number = to_number(m.group(1))
    if unit not in _UNITS or number is None:
        return None
    return round(number * _UNITS[unit])


def _strip_shell(text: str) -> list[str]:
    return [ln for ln in clean_lines(text) if not _SHELL_PROMPT.match(ln)]


def _int_list(value: str | None) -> list[int]:
    if not value or value.strip() in {"-", ""}:
        return []
    return sorted(int(x) for x in re.split(r"[\s,]+", value.strip()) if x.isdecimal())


@dataclass
class QosRoceRecord:
    enable: str | None  # "on" | "off" (older releases print "enable", newer "state": "enabled")
    mode: str | None  # "lossless" | "lossy" | "lossless-single-ipool" | "lossy-multi-tc"
    pfc_priority: int | None  # switch priority with PFC; None in lossy modes
    pfc_rx: str | None
    pfc_tx: str | None
    cable_length: int | None  # metres
    congestion_mode: str | None  # "ECN"
    ecn_traffic_classes: list[int]
    min_threshold_bytes: int | None
    max_threshold_bytes: int | None
    probability: int | None  # percent marked at max-threshold
    trust: str | None  # "pcp,dscp" | "dscp" | "pcp" ...
    lldp_app_tlv: dict[str, str]
    prio_map: list[dict[str, str]] = field(default_factory=list)  # rows of the PCP/DSCP->SP table
    tc_map: list[dict[str, str]] = field(default_factory=list)  # rows of the SP->TC/ETS table
    pools: list[dict[str, str]] = field(default_factory=list)  # rows of the pool table
    source_column: str = "operational"  # which column the values came from ("json" for -o json)

    @property
    def enabled(self) -> bool:
        return (self.enable or "").lower() in {"on", "enabled", "yes"}


_TOOL_ROCE = "nv show qos roce"
_SECTIONS = {"pfc", "congestion-control", "trust", "lldp-app-tlv"}


def _flat_from_json(doc: dict[str, Any]) -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, val in doc.items():
        if isinstance(val, dict) and key in _SECTIONS:
            for k2, v2 in val.items():
                if not isinstance(v2, dict | list):
                    flat[f"{key}.{k2}"] = str(v2)
        elif not isinstance(val, dict | list):
            flat[key] = str(val)
    return flat


def _table(lines: list[str], start: int) -> tuple[list[dict[str, str]], int]:
    """Parse a '====' titled table: header line, dash line, rows until a blank/next title."""
    i = start
    while i < len(lines) and not lines[i].strip().startswith("-"):
        i += 1
    if i >= len(lines) or i == 0:
        return [], i
    header, dashes = lines[i - 1], lines[i]
    cols = [(m.start(), m.end()) for m in re.finditer(r"-+", dashes)]
    names = []
    for n, (a, _b) in enumerate(cols):
        end = cols[n + 1][0] if n + 1 < len(cols) else None
        names.append(header[a:end].strip() or "#")
    rows = []
    i += 1
    while (
        i < len(lines)
        and lines[i].strip()
        and not lines[i + 1 if i + 1 < len(lines) else i].startswith("===")
    ):
        row = {}
        for n, (a, _b) in enumerate(cols):
            end = cols[n + 1][0] if n + 1 < len(cols) else None
            row[names[n]] = lines[i][a:end].strip()
        rows.append(row)
        i += 1
    return rows, i


@bounded(_TOOL_ROCE, max_mb=1)
def parse_qos_roce(text: str) -> QosRoceRecord:
    """``nv show qos roce`` text (operational/applied columns) or ``nv show qos roce -o json``."""
    if not text or not text.strip():
        raise ParseError(_TOOL_ROCE, "RoCE settings", "empty input")
    lines = _strip_shell(text)
    body = "\n".join(lines).strip()
    prio_map: list[dict[str, str]] = []
    tc_map: list[dict[str, str]] = []
    pools: list[dict[str, str]] = []
    if body.startswith("{"):
        doc = load_json(body, _TOOL_ROCE, "valid JSON from -o json")
        if not isinstance(doc, dict) or not ({"mode", "enable", "state"} & set(doc)):
            raise ParseError(_TOOL_ROCE, "a JSON object with 'mode' and 'enable'/'state'")
        flat = _flat_from_json(doc)
        for key, target in (("prio-map", prio_map), ("tc-map", tc_map), ("pool-map", pools)):
            val = doc.get(key)
            if isinstance(val, dict):
                for rid, row in sorted(val.items(), key=lambda kv: str(kv[0])):
                    if isinstance(row, dict):
                        target.append({"#": str(rid), **{k: str(v) for k, v in row.items()}})
        column = "json"
    else:
        # find the header 'operational  applied' and its dash line to get column offsets
        hdr = next(
            (n for n, ln in enumerate(lines) if re.search(r"\boperational\b", ln) and "applied" in ln), None
        )
        if hdr is None or hdr + 1 >= len(lines) or not lines[hdr + 1].startswith("---"):
            raise ParseError(_TOOL_ROCE, "an 'operational  applied' header over a dash line")
        dash_cols = [m.start() for m in re.finditer(r"-+", lines[hdr + 1])]
        if len(dash_cols) < 3:
            raise ParseError(_TOOL_ROCE, "three columns (name, operational, applied)")
        op_col, ap_col = dash_cols[1], dash_cols[2]
        ap_end = dash_cols[3] if len(dash_cols) > 3 else None
        flat_op: dict[str, str] = {}
        flat_ap: dict[str, str] = {}
        section = ""
        i = hdr + 2
        while i < len(lines):
            ln = lines[i]
            if not ln.strip() or (i + 1 < len(lines) and lines[i + 1].startswith("===")):
                break
            name = ln[:op_col].rstrip()
            key = name.strip()
            op = ln[op_col:ap_col].strip()
            ap = ln[ap_col:ap_end].strip() if ap_end else ln[ap_col:].strip()
            if name.startswith("  "):
                key = f"{section}.{key}"
            elif not op and not ap:
                section = key
                i += 1
                continue
            else:
                section = ""
            if op:
                flat_op[key] = op
            if ap:
                flat_ap[key] = ap
            i += 1
        if not flat_op and not flat_ap:
            raise ParseError(_TOOL_ROCE, "setting rows under the header", "truncated output")
        # operational wins where printed; applied fills what operational leaves blank
        flat = {**flat_ap, **flat_op}
        column = "operational" if flat_op else "applied"
        while i < len(lines):
            title = lines[i].strip()
            if i + 1 < len(lines) and lines[i + 1].startswith("==="):
                rows, i = _table(lines, i + 2)
                if title.startswith("RoCE PCP/DSCP->SP"):
                    prio_map = rows
                elif title.startswith("RoCE SP->TC"):
                    tc_map = rows
                elif title.startswith("RoCE pool") or title.startswith("RoCE Pool"):
                    pools = rows
                continue
            i += 1
    if "mode" not in flat:
        raise ParseError(_TOOL_ROCE, "a 'mode' row", "truncated output or another command")
    prio = _int_list(flat.get("pfc.pfc-priority"))
    cable = flat.get("pfc.cable-length")
    prob = flat.get("congestion-control.probability")
    return QosRoceRecord(
        enable=flat.get("enable") or flat.get("state"),
        mode=None if flat.get("mode") in {None, "-"} else flat.get("mode"),
        pfc_priority=prio[0] if prio else None,
        pfc_rx=flat.get("pfc.rx-enabled"),
        pfc_tx=flat.get("pfc.tx-enabled"),
        cable_length=int(cable) if cable and cable.isdecimal() else None,
        congestion_mode=flat.get("congestion-control.congestion-mode"),
        ecn_traffic_classes=_int_list(flat.get("congestion-control.enabled-tc")),
        min_threshold_bytes=size_to_bytes(flat.get("congestion-control.min-threshold")),
        max_threshold_bytes=size_to_bytes(flat.get("congestion-control.max-threshold")),
        probability=int(prob) if prob and prob.isdecimal() else None,
        trust=flat.get("trust.trust-mode"),
        lldp_app_tlv={k.split(".", 1)[1]: v for k, v in flat.items() if k.startswith("lldp-app-tlv.")},
        prio_map=prio_map,
        tc_map=tc_map,
        pools=pools,
        source_column=column,
    )


# --------------------------------------------------------------------------- nv config diff


@dataclass
class ConfigDiffRecord:
    empty: bool  # True: no pending change (nv config diff printed nothing)
    set: dict[str, Any]  # nested mapping of what would be set (leaf value, or None for a bare key)
    unset: dict[str, Any]  # nested mapping of what would be removed
    changes: list[str]  # flattened: 'set qos roce mode lossless', 'unset system wjh'


_TOOL_DIFF = "nv config diff"


def _flatten(prefix: str, tree: Any, out: list[str]) -> None:
    if isinstance(tree, dict) and tree:
        for k, v in tree.items():
            _flatten(f"{prefix} {k}", v, out)
    elif isinstance(tree, dict) or tree is None:
        out.append(prefix)
    else:
        out.append(f"{prefix} {tree}")


@bounded(_TOOL_DIFF, max_mb=1)
def parse_config_diff(text: str) -> ConfigDiffRecord:
    """``nv config diff``: YAML list of ``- set:`` / ``- unset:`` trees.

    An empty diff is real output (nothing pending), so whitespace-only input, or only the echoed
    prompt line, gives ``empty=True`` instead of an error; anything else must be the YAML list.
    """
    if text is None:
        raise ParseError(_TOOL_DIFF, "the diff text")
    lines = _strip_shell(text)
    body = "\n".join(lines).strip("\n")
    if not body.strip():
        return ConfigDiffRecord(True, {}, {}, [])
    if body.lstrip().startswith("["):  # `nv config diff -o json`: the same list as JSON ([] = empty)
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ParseError(_TOOL_DIFF, "a JSON list of set/unset trees", str(exc)[:80]) from None
        if doc == []:
            return ConfigDiffRecord(True, {}, {}, [])
        body = yaml.safe_dump(doc, default_flow_style=False) if isinstance(doc, list) else "- x"
    if not re.match(r"^- (set|unset):", body.lstrip()):
        raise ParseError(_TOOL_DIFF, "'- set:' or '- unset:' at the start", f"got {body.strip()[:40]!r}")
    try:
        doc = safeyaml.load(body)  # refuses anchors/aliases: a 785-byte alias bomb took 5.4 GB
    except yaml.YAMLError as exc:
        raise ParseError(_TOOL_DIFF, "a YAML list of set/unset trees", str(exc).splitlines()[0]) from None
    if not isinstance(doc, list):
        raise ParseError(_TOOL_DIFF, "a YAML list of set/unset trees")
    sets: dict[str, Any] = {}
    unsets: dict[str, Any] = {}
    changes: list[str] = []
    for item in doc:
        if not isinstance(item, dict) or not set(item) <= {"set", "unset"}:
            raise ParseError(_TOOL_DIFF, "list items 'set' or 'unset'", f"got {item!r}"[:80])
        for op, tree in item.items():
            target = sets if op == "set" else unsets
            if isinstance(tree, dict):
                _merge(target, tree)
            _flatten(op, tree, changes)
    return ConfigDiffRecord(False, sets, unsets, changes)


def _merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v


# --------------------------------------------------------------------------- interface link state


@dataclass
class LinkState:
    """One interface's ``link`` view: operational state, speed and the ``stats`` counters."""

    name: str | None  # "swp1" (None: a single-port view read without its name)
    state: str | None  # operational link state: "up" | "down" (oper-status where printed, else state)
    admin_status: str | None  # "up" | "down" (Cumulus Linux 5.9+ prints admin-status / oper-status)
    speed: str | None  # as printed: "400G", "1G"
    speed_gbps: float | None
    mtu: int | None
    stats: dict[str, int] = field(default_factory=dict)  # carrier-transitions, in-bytes, in-errors, ...

    @property
    def up(self) -> bool | None:
        return None if self.state is None else self.state == "up"


@dataclass
class InterfaceLinksRecord:
    interfaces: dict[str, LinkState]  # name -> link state ("" for a single view read without a name)
    source: str  # "json" | "text" (the operational column of the table)


_TOOL_LINK = "nv show interface link"
_LINK_KEYS = {"speed", "state", "stats", "mtu", "oper-status", "admin-status", "auto-negotiate", "duplex"}
_STAT_KEYS = {
    "carrier-transitions", "in-bytes", "out-bytes", "in-pkts", "out-pkts", "in-errors", "out-errors",
}
_NV_SPEED = re.compile(r"(\d{1,5}(?:\.\d{1,3})?)([GM])")
MAX_LINKS = 8192  # interfaces in one output (swp, breakouts, bonds, VLANs, VRFs ...)


def _nv_speed_gbps(value: Any) -> float | None:
    """NVUE link speeds: '400G' -> 400.0, '1G' -> 1.0, '100M' -> 0.1; None otherwise."""
    m = _NV_SPEED.fullmatch(str(value or "").strip())
    if not m:
        return None
    number = float(m.group(1))
    return number if m.group(2) == "G" else number / 1000


def _state_word(value: Any) -> str | None:
    """NVUE JSON prints a link state as a one-key set (``{"up": {}}``); the table as a word."""
    if isinstance(value, dict):
        keys = [str(k) for k in value]
        return keys[0].strip().lower() if len(keys) == 1 else None
    if value is None or isinstance(value, list):
        return None
    word = str(value).strip().lower()
    return word or None


def _stats(value: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    if not isinstance(value, dict):
        return out
    for k, v in value.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, int):
            out[str(k)] = v
        elif isinstance(v, str):
            n = size_to_bytes(v) if str(k).endswith("bytes") else (int(v) if v.strip().isdecimal() else None)
            if n is not None:
                out[str(k)] = n
    return out


def _link_from(name: str | None, link: dict[str, Any]) -> LinkState:
    state = _state_word(link.get("oper-status")) or _state_word(link.get("state"))
    mtu = link.get("mtu")
    stats = link.get("stats")
    if stats is None and _STAT_KEYS & set(link):  # the stats view itself
        stats = link
    return LinkState(
        name=name,
        state=state,
        admin_status=_state_word(link.get("admin-status")),
        speed=str(link["speed"]).strip() if link.get("speed") not in (None, "") else None,
        speed_gbps=_nv_speed_gbps(link.get("speed")),
        mtu=mtu if isinstance(mtu, int) and not isinstance(mtu, bool) else (
            int(mtu) if isinstance(mtu, str) and mtu.isdecimal() else None),
        stats=_stats(stats),
    )


def _links_from_json(doc: Any, port: str | None) -> dict[str, LinkState]:
    if not isinstance(doc, dict):
        raise ParseError(_TOOL_LINK, "a JSON object (-o json)", f"got {type(doc).__name__}")
    if isinstance(doc.get("link"), dict):  # nv show interface <port> -o json
        return {port or "": _link_from(port, doc["link"])}
    if (_LINK_KEYS | _STAT_KEYS) & set(doc):  # nv show interface <port> link [stats] -o json
        return {port or "": _link_from(port, doc)}
    if len(doc) > MAX_LINKS:
        raise ParseError(_TOOL_LINK, f"at most {MAX_LINKS} interfaces", f"got {len(doc)}")
    out = {}
    for name, iface in doc.items():  # nv show interface -o json: every interface by name
        if isinstance(iface, dict) and isinstance(iface.get("link"), dict):
            out[str(name)] = _link_from(str(name), iface["link"])
    return out


def _links_from_table(lines: list[str], port: str | None) -> dict[str, LinkState]:
    """The operational column of ``nv show interface <port> link [stats]`` (rows indented under
    ``stats`` are its counters)."""
    hdr = next((n for n, ln in enumerate(lines) if re.search(r"\boperational\b", ln)), None)
    if hdr is None or hdr + 1 >= len(lines) or not lines[hdr + 1].lstrip().startswith("---"):
        raise ParseError(_TOOL_LINK, "an 'operational' header over a dash line, or -o json")
    cols = [m.start() for m in re.finditer(r"-+", lines[hdr + 1])]
    if len(cols) < 2:
        raise ParseError(_TOOL_LINK, "two columns (name, operational)")
    op_start = cols[1]
    op_end = cols[2] if len(cols) > 2 else None
    link: dict[str, Any] = {}
    stats: dict[str, Any] = {}
    section = ""
    for ln in lines[hdr + 2 :]:
        if not ln.strip():
            break
        name = ln[:op_start].rstrip()
        key = name.strip()
        value = (ln[op_start:op_end] if op_end else ln[op_start:]).strip()
        if name.startswith("  ") and section == "stats":
            if value:
                stats[key] = value
            continue
        section = key if not value else ""
        if value:
            link[key] = value
    if stats:
        link["stats"] = stats
    if not link:
        raise ParseError(_TOOL_LINK, "rows under the header", "truncated output")
    return {port or "": _link_from(port, link)}


@bounded(_TOOL_LINK, max_mb=16)
def parse_interface_links(text: str, port: str | None = None) -> InterfaceLinksRecord:
    """The link state, speed and counters of NVUE interfaces, from any of:

    - ``nv show interface -o json`` (operational: every interface, each with its ``link``),
    - ``nv show interface <port> -o json`` / ``nv show interface <port> link -o json`` /
      ``nv show interface <port> link stats -o json`` (one interface; ``port`` names it),
    - the table of ``nv show interface <port> link [stats]`` (its operational column).

    JSON prints a state as a set (``"state": {"up": {}}``, NVUE API guide); newer releases add
    ``oper-status`` / ``admin-status``, read first. Byte counts in the table are rounded
    ("39.21 MB"); the JSON counts are exact."""
    if not text or not text.strip():
        raise ParseError(_TOOL_LINK, "interface link state", "empty input")
    lines = _strip_shell(text)
    body = "\n".join(lines).strip()
    if body.startswith("{"):
        links = _links_from_json(load_json(body, _TOOL_LINK, "valid JSON from -o json"), port)
        source = "json"
    else:
        links = _links_from_table(lines, port)
        source = "text"
    if not links:
        raise ParseError(_TOOL_LINK, "interfaces with a 'link' (state, speed, stats)")
    return InterfaceLinksRecord(links, source)
