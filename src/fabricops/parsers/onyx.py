"""NVIDIA Onyx (MLNX-OS) show commands: PFC, ECN, QoS trust, the running configuration and the
ports' state and counters (``show interfaces ethernet``).

Each parser reads both the plain text and the ``| json-print`` form where Onyx offers one
(json-print is a list or dict of ``{"key": "value"}`` blocks, as the Onyx JSON API returns it).
Schemas are documented in docs/parsers.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import ParseError

from ._text import bounded, clean_lines, load_json

__all__ = [
    "EcnRecord",
    "EthInterface",
    "InterfacesRecord",
    "PfcInterface",
    "PfcRecord",
    "QosInterface",
    "QosTrustRecord",
    "RunningConfigRecord",
    "TrafficClassCongestion",
    "expand_interface_range",
    "parse_ecn",
    "parse_interfaces",
    "parse_pfc",
    "parse_qos_trust",
    "parse_running_config",
]

_PROMPT = re.compile(r"^\S+ \[[^\]]*\] (?:\([^)]*\) )?[>#]")


def _strip_prompts(text: str) -> list[str]:
    """Lines without the Onyx prompt/command echo lines a session log carries."""
    return [ln for ln in clean_lines(text) if not _PROMPT.match(ln) and not ln.startswith("switch (")]


def _load_json(text: str) -> Any | None:
    body = "\n".join(_strip_prompts(text)).strip()
    if not body or body[0] not in "[{":
        return None
    try:
        return load_json(body, "onyx", "JSON from | json-print")
    except ParseError:
        return None  # not JSON: read as text (which then says what it expected)


def _norm_ifname(name: str) -> str:
    """'ethernet 1/1' / 'eth1/1' -> 'Eth1/1'; port-channel 1 -> Po1; mlag-port-channel 2 -> Mpo2."""
    name = name.strip()
    m = re.fullmatch(r"(?i)(?:ethernet|eth)\s*(\d+/\d+(?:/\d+)?)", name)
    if m:
        return "Eth" + m.group(1)
    m = re.fullmatch(r"(?i)(?:mlag-port-channel|mpo)\s*(\d+)", name)
    if m:
        return "Mpo" + m.group(1)
    m = re.fullmatch(r"(?i)(?:port-channel|po)\s*(\d+)", name)
    if m:
        return "Po" + m.group(1)
    m = re.fullmatch(r"(?i)vlan\s*(\d+)", name)
    if m:
        return "Vlan" + m.group(1)
    m = re.fullmatch(r"(?i)loopback\s*(\d+)", name)
    if m:
        return "Lo" + m.group(1)
    return name


MAX_RANGE = 1024  # ports in one range; a Spectrum switch has at most 128 (256 split)


def expand_interface_range(spec: str) -> list[str]:
    """'1/1-1/4' -> ['Eth1/1', ..., 'Eth1/4']; '1/1,1/3' too; a single '1/7' -> ['Eth1/7']."""
    out: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)/(\d+)-(?:(\d+)/)?(\d+)", part)
        if m:
            slot, first, slot2, last = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
            if slot2 is not None and slot2 != slot:
                raise ValueError(f"interface range across slots: {part}")
            if last < first:
                raise ValueError(f"empty interface range: {part}")
            if last - first >= MAX_RANGE:
                raise ValueError(f"interface range of {last - first + 1} ports: {part}")
            out.extend(f"Eth{slot}/{n}" for n in range(first, last + 1))
        elif re.fullmatch(r"\d+/\d+(?:/\d+)?", part):
            out.append("Eth" + part)
        else:
            raise ValueError(f"not an Ethernet interface range: {part}")
    return out


def _prio_list(value: str) -> list[int]:
    value = value.strip()
    if not value or value.lower() in {"none", "n/a", "-"}:
        return []
    return sorted(int(x) for x in re.split(r"[\s,]+", value) if x.isdecimal())


# --------------------------------------------------------------------------- PFC


@dataclass
class PfcInterface:
    admin: str  # "Auto" | "on" | "off" (as printed)
    oper: str  # "Enabled" | "Disabled"

    @property
    def enabled(self) -> bool:
        return self.oper.lower() == "enabled"


@dataclass
class PfcRecord:
    enabled: bool | None  # global "PFC: enabled"; None when the output carries only interfaces
    priorities_enabled: list[int]
    priorities_disabled: list[int]
    interfaces: dict[str, PfcInterface]
    format: str  # "text" | "json"

    def vector(self) -> list[int]:
        """The 8-entry PFC vector (1 = PFC on that priority), as mlnx_qos prints it."""
        return [1 if p in self.priorities_enabled else 0 for p in range(8)]


_TOOL_PFC = "onyx show dcb priority-flow-control"


def _pfc_from_json(doc: Any) -> PfcRecord:
    blocks = doc if isinstance(doc, list) else [doc]
    enabled = None
    prios_on: list[int] = []
    prios_off: list[int] = []
    ifaces: dict[str, PfcInterface] = {}
    seen = False
    for block in blocks:
        if not isinstance(block, dict):
            raise ParseError(_TOOL_PFC, "a JSON object per block", f"got {type(block).__name__}")
        for key, val in block.items():
            if key == "PFC":
                enabled, seen = str(val).lower() == "enabled", True
            elif key == "Priority Enabled List":
                prios_on, seen = _prio_list(str(val)), True
            elif key == "Priority Disabled List":
                prios_off = _prio_list(str(val))
            elif isinstance(val, list) and val and isinstance(val[0], dict) and "PFC oper" in val[0]:
                ifaces[_norm_ifname(key)] = PfcInterface(
                    str(val[0].get("PFC admin", "")), str(val[0]["PFC oper"])
                )
                seen = True
    if not seen:
        raise ParseError(_TOOL_PFC, "'PFC', 'Priority Enabled List' or per-interface 'PFC oper' keys")
    return PfcRecord(enabled, prios_on, prios_off, ifaces, "json")


@bounded(_TOOL_PFC, max_mb=1)
def parse_pfc(text: str) -> PfcRecord:
    """``show dcb priority-flow-control`` (text or ``| json-print``)."""
    if not text or not text.strip():
        raise ParseError(_TOOL_PFC, "PFC state lines", "empty input")
    doc = _load_json(text)
    if doc is not None:
        return _pfc_from_json(doc)
    enabled = None
    prios_on: list[int] = []
    prios_off: list[int] = []
    ifaces: dict[str, PfcInterface] = {}
    in_table = False
    for line in _strip_prompts(text):
        s = line.strip()
        m = re.match(r"PFC\s*:\s*(\S+)", s)
        if m:
            enabled = m.group(1).lower() == "enabled"
            continue
        m = re.match(r"Priority Enabled List\s*:\s*(.*)", s)
        if m:
            prios_on = _prio_list(m.group(1))
            continue
        m = re.match(r"Priority Disabled List\s*:\s*(.*)", s)
        if m:
            prios_off = _prio_list(m.group(1))
            continue
        if re.match(r"Interface\s+PFC admin\s+PFC oper", s):
            in_table = True
            continue
        if in_table:
            m = re.match(r"((?:Eth|Po|Mpo)\S+)\s+(\S+)\s+(\S+)$", s)
            if m:
                ifaces[_norm_ifname(m.group(1))] = PfcInterface(m.group(2), m.group(3))
    if enabled is None:
        raise ParseError(_TOOL_PFC, "a 'PFC: enabled|disabled' line")
    return PfcRecord(enabled, prios_on, prios_off, ifaces, "text")


# --------------------------------------------------------------------------- ECN


@dataclass
class TrafficClassCongestion:
    tc: int
    mode: str  # "none" | "ECN" | "RED" | "both" (lower-cased "none", others as printed)
    threshold_mode: str | None  # "absolute" | "relative" | None when mode is none
    min_threshold: int | None  # KB when absolute, percent when relative
    max_threshold: int | None
    red_dropped_packets: int | None

    @property
    def ecn(self) -> bool:
        return self.mode.lower() in {"ecn", "both", "ecn and red", "red and ecn"}


@dataclass
class EcnRecord:
    interface: str | None  # "Eth1/1"
    ecn_marked_packets: int | None
    traffic_classes: dict[int, TrafficClassCongestion]
    format: str  # "text" | "json"


_TOOL_ECN = "onyx show interfaces ethernet congestion-control"


def _threshold(value: str | None) -> int | None:
    if value is None:
        return None
    m = re.match(r"\s*(\d+)", str(value))
    return int(m.group(1)) if m else None


def _tc_from_fields(tc: int, f: dict[str, str]) -> TrafficClassCongestion:
    mode = str(f.get("Mode", "none")).strip()
    if mode.lower() == "none":
        mode = "none"
    tm = f.get("Threshold mode")
    red = f.get("RED dropped packets")
    return TrafficClassCongestion(
        tc,
        mode,
        tm.strip() if tm else None,
        _threshold(f.get("Minimum threshold")),
        _threshold(f.get("Maximum threshold")),
        int(red) if red and str(red).strip().isdecimal() else None,
    )


@bounded(_TOOL_ECN, max_mb=1)
def parse_ecn(text: str) -> EcnRecord:
    """``show interfaces ethernet 1/1 congestion-control`` (text or ``| json-print``)."""
    if not text or not text.strip():
        raise ParseError(_TOOL_ECN, "traffic-class congestion-control blocks", "empty input")
    doc = _load_json(text)
    iface = None
    marked = None
    tcs: dict[int, TrafficClassCongestion] = {}
    if doc is not None:
        if not isinstance(doc, list):
            raise ParseError(_TOOL_ECN, "a JSON list of blocks with 'header': 'TC-N'")
        for block in doc:
            if not isinstance(block, dict):
                continue
            if "Interface ethernet" in block:
                iface = _norm_ifname("ethernet " + str(block["Interface ethernet"]))
                em = str(block.get("ECN marked packets", "")).strip()
                marked = int(em) if em.isdecimal() else None
            m = re.fullmatch(r"TC-(\d)", str(block.get("header", "")))
            if m:
                tcs[int(m.group(1))] = _tc_from_fields(int(m.group(1)), block)
        if not tcs:
            raise ParseError(_TOOL_ECN, "blocks with 'header': 'TC-0'..'TC-7'")
        return EcnRecord(iface, marked, tcs, "json")
    cur: dict[str, str] | None = None
    cur_tc = -1
    for line in _strip_prompts(text):
        s = line.strip()
        m = re.match(r"Interface ethernet\s*:?\s*(\S+)", s)
        if m:
            iface = _norm_ifname("ethernet " + m.group(1))
            continue
        m = re.match(r"ECN marked packets\s*:\s*(\d+)", s)
        if m:
            marked = int(m.group(1))
            continue
        m = re.match(r"TC-(\d)\s*:?$", s)
        if m:
            if cur is not None:
                tcs[cur_tc] = _tc_from_fields(cur_tc, cur)
            cur, cur_tc = {}, int(m.group(1))
            continue
        m = re.match(r"([A-Za-z][A-Za-z ]++)\s*:\s*(.*)$", s)  # possessive: the lazy key was quadratic
        if m and cur is not None:
            cur[m.group(1).strip()] = m.group(2).strip()
    if cur is not None:
        tcs[cur_tc] = _tc_from_fields(cur_tc, cur)
    if not tcs:
        raise ParseError(_TOOL_ECN, "'TC-N:' blocks")
    return EcnRecord(iface, marked, tcs, "text")


# --------------------------------------------------------------------------- QoS trust


@dataclass
class QosInterface:
    trust: str  # "L2" | "L3" | "both" | "port" (as printed)
    default_switch_priority: int | None
    dscp_rewrite: str | None
    pcp_rewrite: str | None


@dataclass
class QosTrustRecord:
    interfaces: dict[str, QosInterface]
    format: str  # "text" | "json"


_TOOL_QOS = "onyx show qos"


def _qos_iface(fields: dict[str, Any]) -> QosInterface:
    dsp = str(fields.get("Default switch-priority", "")).strip()
    return QosInterface(
        str(fields["Trust mode"]).strip(),
        int(dsp) if dsp.isdecimal() else None,
        fields.get("DSCP rewrite"),
        fields.get("PCP,DEI rewrite"),
    )


@bounded(_TOOL_QOS, max_mb=1)
def parse_qos_trust(text: str) -> QosTrustRecord:
    """``show qos`` / ``show qos interface ethernet 1/1`` (text or ``| json-print``): trust per port."""
    if not text or not text.strip():
        raise ParseError(_TOOL_QOS, "per-interface 'Trust mode' lines", "empty input")
    doc = _load_json(text)
    ifaces: dict[str, QosInterface] = {}
    if doc is not None:
        blocks = doc if isinstance(doc, list) else [doc]
        for block in blocks:
            if not isinstance(block, dict):
                continue
            for name, val in block.items():
                if isinstance(val, list):
                    for sub in val:
                        if isinstance(sub, dict) and "Trust mode" in sub:
                            ifaces[_norm_ifname(name)] = _qos_iface(sub)
                            break
        if not ifaces:
            raise ParseError(_TOOL_QOS, "interface blocks with a 'Trust mode' key")
        return QosTrustRecord(ifaces, "json")
    cur: str | None = None
    fields: dict[str, str] = {}

    def flush() -> None:
        if cur is not None and "Trust mode" in fields:
            ifaces[cur] = _qos_iface(fields)

    for line in _strip_prompts(text):
        s = line.strip()
        m = re.match(r"(?:Interface\s+)?((?:Eth|ethernet\s*)\d+/\d+(?:/\d+)?|Po\d+|Mpo\d+)\s*:?$", s)
        if m:
            flush()
            cur, fields = _norm_ifname(m.group(1)), {}
            continue
        m = re.match(r"([A-Za-z][A-Za-z ,;()-]++)\s*:\s*(.*)$", s)  # possessive: the lazy key was quadratic
        if m and cur is not None:
            fields[m.group(1).strip()] = m.group(2).strip()
    flush()
    if not ifaces:
        raise ParseError(_TOOL_QOS, "'EthX/Y:' blocks with a 'Trust mode:' line")
    return QosTrustRecord(ifaces, "text")


# --------------------------------------------------------------------------- running-config


@dataclass
class RunningConfigRecord:
    hostname: str | None
    database: str | None  # 'Running database "initial"'
    global_lines: list[str]  # every non-interface command, in order
    interfaces: dict[str, list[str]]  # 'Eth1/7' -> ['channel-group 1 mode active', ...] (ranges expanded)
    pfc_enabled: bool  # 'dcb priority-flow-control enable [force]'
    pfc_priorities: list[int]  # 'dcb priority-flow-control priority N enable'
    roce: str | None  # 'roce lossless' -> 'lossless'; bare 'roce' -> 'lossless'
    traffic_pool_lines: list[str] = field(default_factory=list)  # buffer/pool/traffic pool lines

    def interface_has(self, name: str, command: str) -> bool:
        return command in self.interfaces.get(name, [])


_TOOL_RC = "onyx show running-config"
_IF_PREFIX = re.compile(
    r"^interface\s+(ethernet\s+\S+|port-channel\s+\d+|mlag-port-channel\s+\d+|vlan\s+\d+|loopback\s+\d+)"
    r"(?:\s+(.*))?$"
)
_DATABASE = re.compile(r'## Running database "([^"]*)"')
_HOSTNAME = re.compile(r"hostname\s+(\S+)")
_PFC_ON = re.compile(r"dcb priority-flow-control enable\b")
_PFC_PRIO = re.compile(r"(no )?dcb priority-flow-control priority (\d) enable")
_ROCE = re.compile(r"roce(?:\s+(lossless|lossy|semi-lossless))?$")
_POOL = re.compile(r"(?:traffic pool|pool|advanced buffer|buffer)\b")
_KNOWN_GLOBAL = re.compile(
    r"^(?:no\s+)?(?:cli|license|protocol|lacp|vlan|spanning-tree|ip|hostname|dcb|lldp|mlag|mlag-vip|"
    r"telnet-server|ssh|roce|qos|traffic|pool|advanced|buffer|interface|web|ntp|snmp-server|username|"
    r"logging|clock|banner|port|system)(?=\s|$)"  # a command word, not "lldp.eth0.port=" (lldpctl)
)


@bounded(_TOOL_RC, max_mb=2)
def parse_running_config(text: str) -> RunningConfigRecord:
    """``show running-config``: structured lines, interface ranges expanded per port."""
    if not text or not text.strip():
        raise ParseError(_TOOL_RC, "running-config command lines", "empty input")
    hostname = database = roce = None
    global_lines: list[str] = []
    interfaces: dict[str, list[str]] = {}
    pools: list[str] = []
    pfc_enabled = False
    prios: set[int] = set()
    known = 0
    lines = 0
    for raw in _strip_prompts(text):
        s = raw.strip()
        if not s:
            continue
        if not s.startswith("#"):
            lines += 1
        if s.startswith("#"):
            m = _DATABASE.match(s)
            if m:
                database = m.group(1)
            continue
        if s.startswith("%"):  # an error from the CLI, not config
            raise ParseError(_TOOL_RC, "running-config command lines", f"the CLI answered {s!r}")
        if _KNOWN_GLOBAL.match(s):
            known += 1
        m = _IF_PREFIX.match(s) if s[0] == "i" else None
        if m:
            target, rest = m.group(1), (m.group(2) or "").strip()
            if target.startswith("ethernet"):
                try:
                    names = expand_interface_range(target.split(None, 1)[1])
                except ValueError as exc:
                    raise ParseError(_TOOL_RC, "valid interface ranges", str(exc)) from None
            else:
                names = [_norm_ifname(target)]
            for n in names:
                lst = interfaces.setdefault(n, [])
                if rest:
                    lst.append(rest)
            continue
        global_lines.append(s)
        first = s[0]  # each pattern is tried only on lines starting with its first letter
        m = _HOSTNAME.match(s) if first == "h" else None
        if m:
            hostname = m.group(1)
        if first == "d" and _PFC_ON.match(s):
            pfc_enabled = True
        m = _PFC_PRIO.match(s) if first in "dn" else None
        if m and not m.group(1):
            prios.add(int(m.group(2)))
        elif m:
            prios.discard(int(m.group(2)))
        m = _ROCE.match(s) if first == "r" else None
        if m:
            roce = m.group(1) or "lossless"
        if first in "tpab" and _POOL.match(s):
            pools.append(s)
    # Mostly Onyx commands: another tool's "port: 1" lines must not pass as a configuration.
    if known == 0 or known * 2 < lines:
        raise ParseError(_TOOL_RC, "Onyx configuration commands (hostname, interface ..., dcb ..., ...)")
    return RunningConfigRecord(
        hostname, database, global_lines, interfaces, pfc_enabled, sorted(prios), roce, pools
    )


# --------------------------------------------------------------------------- interfaces


@dataclass
class EthInterface:
    """One port of ``show interfaces ethernet`` (the fields of mellanox.onyx fixture
    onyx_interfaces_show.cfg; ``rx`` / ``tx``: the ``Rx`` / ``Tx`` counter groups as integers)."""

    name: str  # "Eth1/1"
    admin_state: str | None  # "Enabled" | "Disabled"
    oper_state: str | None  # "Up" | "Down"
    actual_speed: str | None  # as printed: "100 Gbps"
    speed_gbps: float | None  # 100.0; None when not printed or not a rate ("N/A")
    mtu: int | None
    last_change: str | None  # "Last change in operational status"
    rx: dict[str, int] = field(default_factory=dict)  # "bytes", "packets", "error packets", ...
    tx: dict[str, int] = field(default_factory=dict)

    @property
    def up(self) -> bool | None:
        return None if self.oper_state is None else self.oper_state.strip().lower() == "up"


@dataclass
class InterfacesRecord:
    interfaces: dict[str, EthInterface]  # "Eth1/1" -> its state; VLAN and other blocks left out
    format: str  # "json" (3.6.6000+: one-key dicts) | "json-header" (before: flat blocks with "header")


_TOOL_IF = "onyx show interfaces ethernet"
_SPEED = re.compile(r"(?i)\s*(\d{1,5}(?:\.\d{1,3})?)\s*(G|M)(?:b(?:ps|/s)?|bE)?\s*")
MAX_INTERFACES = 4096  # blocks in one output; a Spectrum switch has at most 256 (split) ports


def speed_gbps(text: Any) -> float | None:
    """'100 Gbps' -> 100.0, '400G' -> 400.0, '25000 Mbps' -> 25.0; None for 'N/A', 'Unknown'."""
    m = _SPEED.fullmatch(str(text or ""))
    if not m:
        return None
    value = float(m.group(1))
    return value / 1000 if m.group(2).upper() == "M" else value


def _counter_group(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    out = {}
    for k, v in value.items():
        s = str(v).strip()
        if s.isdecimal():
            out[str(k).strip()] = int(s)
    return out


def _eth_from_fields(name: str, f: dict[str, Any]) -> EthInterface:
    mtu = re.match(r"\s*(\d{1,6})\b", str(f.get("MTU") or ""))
    speed = f.get("Actual speed")
    return EthInterface(
        name=name,
        admin_state=str(f["Admin state"]).strip() if f.get("Admin state") is not None else None,
        oper_state=str(f["Operational state"]).strip() if f.get("Operational state") is not None else None,
        actual_speed=str(speed).strip() if speed is not None else None,
        speed_gbps=speed_gbps(speed),
        mtu=int(mtu.group(1)) if mtu else None,
        last_change=f.get("Last change in operational status"),
        rx=_counter_group(f.get("Rx")),
        tx=_counter_group(f.get("Tx")),
    )


@bounded(_TOOL_IF, max_mb=8)
def parse_interfaces(text: str) -> InterfacesRecord:
    """``show interfaces ethernet [1/N[-1/M]] [counters] | json-print``: each Ethernet port's admin
    and operational state, actual speed, MTU and Rx/Tx counters.

    Both JSON shapes Onyx has printed: from 3.6.6000 a list of one-key dicts ``[{"Eth1/1": [{...}]}]``
    (mellanox.onyx onyx_interface's API branch), before a list of flat blocks with ``"header":
    "Eth1/1"`` (fixture onyx_interfaces_show.cfg, 3.6.5000). Blocks that are not Ethernet ports
    (``"header": "Vlan 10"``) are left out. The text form is not read: ask for ``| json-print``."""
    if not text or not text.strip():
        raise ParseError(_TOOL_IF, "the | json-print form", "empty input")
    doc = _load_json(text)
    if doc is None:
        raise ParseError(_TOOL_IF, "the | json-print form (a JSON list of port blocks)", "not JSON")
    blocks = doc if isinstance(doc, list) else [doc]
    if len(blocks) > MAX_INTERFACES:
        raise ParseError(_TOOL_IF, f"at most {MAX_INTERFACES} port blocks", f"got {len(blocks)}")
    ifaces: dict[str, EthInterface] = {}
    shape = "json"
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if "header" in block:
            shape = "json-header"
            name = _norm_ifname(str(block["header"]))
            if name.startswith("Eth"):
                ifaces[name] = _eth_from_fields(name, block)
            continue
        for key, val in block.items():
            name = _norm_ifname(str(key))
            if not name.startswith("Eth"):
                continue
            subs = val if isinstance(val, list) else [val]
            fields: dict[str, Any] = {}
            for sub in subs:
                if isinstance(sub, dict):
                    fields.update(sub)
            if fields:
                ifaces[name] = _eth_from_fields(name, fields)
    if not ifaces:
        raise ParseError(_TOOL_IF, "Ethernet port blocks (Eth1/N with their state or counters)")
    return InterfacesRecord(ifaces, shape)
