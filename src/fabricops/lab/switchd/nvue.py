"""The Cumulus Linux NVUE engine behind a bash-like prompt.

Revisions: ``pending`` (what ``nv set``/``nv unset`` change), ``applied`` (what runs), ``startup``
(what ``nv config save`` wrote; loaded at start). Only the applied revision feeds the fabric file.
``nv config apply --confirm 30s`` applies and rolls back unless confirmed in time.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import time
from pathlib import Path
from typing import Any

import yaml

from .state import FaultWatch, port_entry, run_line, write_fabric_file

__all__ = ["NvueSession", "NvueSwitch", "expand_ports"]

ROCE_MODES = {"lossless", "lossy", "lossless-single-ipool", "lossy-multi-tc"}
TRUST = {"l2", "l3", "both", "port"}
# attributes whose next token is a value (the leaf); everything else nests
LEAVES = {
    "enable",
    "mode",
    "min-threshold",
    "max-threshold",
    "probability",
    "ecn",
    "red",
    "trust",
    "state",
    "profile",
    "cable-length",
    "tx",
    "rx",
    "hostname",
    "memory-percent",
    "mtu",
    "traffic-class",
    "switch-priority",
    "port-buffer",
    "bw-percent",
}
# NVUE collections whose members are bare IDs (``switch-priority: {'3': {}}``): under these paths
# ``switch-priority`` is a set that ``nv set`` adds to and ``nv unset ... switch-priority N`` removes
# one member from (elsewhere, e.g. ``qos mapping default-global dscp 26 switch-priority 3``, it is a leaf).
ID_SETS = {("qos", "pfc", "switch-priority"), ("qos", "link-pause", "switch-priority")}
INT_LEAVES = {"bw-percent"}  # typed integer leaves (NVUE shows them as numbers)
TOP = {"qos", "interface", "system", "router", "bridge", "vrf", "service", "mlag", "evpn", "nve"}
ROCE_DEFAULT_ECN = (150000, 1500000)  # bytes, tc 0 and 3 (Cumulus "RoCE" default table)


def expand_ports(spec: str) -> list[str]:
    """'swp1-4,swp7' -> ['swp1','swp2','swp3','swp4','swp7']."""
    out = []
    for part in spec.split(","):
        m = re.fullmatch(r"([a-z]+)(\d+)(?:-(?:[a-z]+)?(\d+))?", part)
        if not m:
            out.append(part)
            continue
        a, b = int(m.group(2)), int(m.group(3) or m.group(2))
        out.extend(f"{m.group(1)}{n}" for n in range(a, b + 1))
    return out


def _is_id_set(path: list[str]) -> bool:
    """``qos pfc default-global switch-priority`` -> True (profile name ignored)."""
    return len(path) == 4 and (path[0], path[1], path[3]) in ID_SETS


def _expand_numbers(spec: str) -> list[str]:
    out = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)-(\d+)", part)
        out.extend(str(n) for n in range(int(m.group(1)), int(m.group(2)) + 1)) if m else out.append(part)
    return out


def to_bytes(value: str) -> int | None:
    """'150KB' -> 150000, '1.5MB' -> 1500000, '40000' -> 40000 (input units are decimal)."""
    m = re.fullmatch(r"([\d.]+)\s*([KMG]?B?)", str(value).strip(), re.I)
    if not m:
        return None
    mult = {"": 1, "B": 1, "K": 1000, "KB": 1000, "M": 10**6, "MB": 10**6, "G": 10**9, "GB": 10**9}[
        m.group(2).upper()
    ]
    return round(float(m.group(1)) * mult)


def fmt_size(nbytes: int) -> str:
    """As NVUE prints (binary units, 2 decimals): 150000 -> '146.48 KB', 1500000 -> '1.43 MB'."""
    if nbytes >= 1024**2:
        return f"{nbytes / 1024**2:.2f} MB"
    if nbytes >= 1024:
        return f"{nbytes / 1024:.2f} KB"
    return f"{nbytes} Bytes"


def parse_duration(spec: str) -> float | None:
    """'30s' / '5m' / '1h' / '60' (plain = minutes, as NVUE documents)."""
    m = re.fullmatch(r"(\d+)([smh]?)", spec)
    if not m:
        return None
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "": 60}[m.group(2)]


def _diff(old: Any, new: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(set, unset) trees turning ``old`` into ``new``."""
    sets: dict[str, Any] = {}
    unsets: dict[str, Any] = {}
    old = old if isinstance(old, dict) else {}
    new = new if isinstance(new, dict) else {}
    for k, v in new.items():
        if k not in old:
            sets[k] = copy.deepcopy(v)
        elif isinstance(v, dict) and isinstance(old[k], dict):
            s, u = _diff(old[k], v)
            if s:
                sets[k] = s
            if u:
                unsets[k] = u
        elif v != old[k]:
            sets[k] = copy.deepcopy(v)
    for k in old:
        if k not in new:
            unsets[k] = None
    return sets, unsets


class NvueError(Exception):
    pass


class NvueSwitch:
    """One emulated Cumulus switch (shared by its SSH sessions)."""

    def __init__(self, name: str, ports: list[str], state_dir: str | Path, fabric_file: str | Path | None):
        self.name = name
        self.ports = ports
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.startup_path = self.state_dir / "startup.yaml"
        self.fabric_file = fabric_file
        self.faults = FaultWatch(self.state_dir)
        startup: dict[str, Any] = {}
        if self.startup_path.exists():
            startup = yaml.safe_load(self.startup_path.read_text(encoding="utf-8")) or {}
        self.applied: dict[str, Any] = copy.deepcopy(startup)
        self.pending: dict[str, Any] = copy.deepcopy(startup)
        self.rev = 1
        self.confirm_deadline: float | None = None
        self.confirm_rollback: dict[str, Any] | None = None
        self.write_fabric()

    # ---------------------------------------------------------------- effective applied state
    def _get(self, tree: dict[str, Any], *path: str) -> Any:
        for p in path:
            if not isinstance(tree, dict) or p not in tree:
                return None
            tree = tree[p]
        return tree

    def roce_view(self, tree: dict[str, Any]) -> dict[str, Any]:
        """Resolve a revision to RoCE facts: mode, pfc priorities, trust, ECN per TC (bytes)."""
        roce = self._get(tree, "qos", "roce")
        enabled = isinstance(roce, dict) and str(roce.get("enable", "on")) == "on"
        mode = (roce or {}).get("mode", "lossless") if enabled else None
        pfc: list[int] = [3] if mode in {"lossless", "lossless-single-ipool"} else []
        sp = self._get(tree, "qos", "pfc", "default-global", "switch-priority")
        if isinstance(sp, dict):  # the NVUE collection {'3': {}, '4': {}}
            pfc = sorted(int(x) for x in sp if str(x).isdigit())
        elif sp is not None:  # a bare value (hand-written startup.yaml)
            pfc = sorted(int(x) for x in _expand_numbers(str(sp)) if x.isdigit())
        trust = "l3" if enabled else "l2"
        t = self._get(tree, "qos", "mapping", "default-global", "trust")
        if t is not None:
            trust = str(t)
        ecn: dict[int, list[Any]] = {}
        if enabled:
            for tc in (0, 3):
                ecn[tc] = [True, *ROCE_DEFAULT_ECN, 100]
        tcs = self._get(tree, "qos", "congestion-control", "default-global", "traffic-class") or {}
        for tc, attrs in tcs.items():
            if not isinstance(attrs, dict):
                continue
            cur = ecn.get(int(tc), [False, 40000, 200000, 100])
            if "ecn" in attrs:
                cur[0] = str(attrs["ecn"]) in {"enable", "enabled", "on"}
            elif "min-threshold" in attrs or "max-threshold" in attrs:
                cur[0] = True
            if "min-threshold" in attrs:
                cur[1] = to_bytes(str(attrs["min-threshold"])) or cur[1]
            if "max-threshold" in attrs:
                cur[2] = to_bytes(str(attrs["max-threshold"])) or cur[2]
            if "probability" in attrs:
                cur[3] = int(attrs["probability"])
            ecn[int(tc)] = cur
        return {
            "enabled": enabled,
            "mode": mode,
            "pfc": pfc,
            "trust": trust,
            "ecn": ecn,
            "cable_length": (roce or {}).get("cable-length"),
        }

    def write_fabric(self) -> None:
        view = self.roce_view(self.applied)
        down = self.faults.ports_down()
        ports = {}
        trust = {"l3": "l3", "both": "l3", "l2": "l2", "port": "port"}.get(view["trust"], "l2")
        for p in self.ports:
            state = self._get(self.applied, "interface", p, "link", "state")
            link_up = p not in down and state != "down"
            ecn = {tc: (v[1] // 1000, v[2] // 1000) for tc, v in view["ecn"].items() if v[0]}
            ports[p] = port_entry(trust, view["pfc"], ecn, link_up)
        write_fabric_file(self.fabric_file, self.name, "cumulus", ports)

    # ---------------------------------------------------------------- confirm timer
    def check_confirm(self) -> None:
        if self.confirm_deadline is not None and time.monotonic() >= self.confirm_deadline:
            self.applied = self.confirm_rollback or {}
            self.pending = copy.deepcopy(self.applied)
            self.confirm_deadline = self.confirm_rollback = None
            self.rev += 1
            self.write_fabric()

    # ---------------------------------------------------------------- set/unset
    def _path_ops(self, tokens: list[str]) -> list[tuple[list[str], Any]]:
        """Tokens after 'nv set' -> [(path, value)], ranges (swp1-4, 0,3) expanded."""
        if not tokens or tokens[0] not in TOP:
            raise NvueError(f"Error: '{tokens[0] if tokens else ''}' is not one of {sorted(TOP)}")
        paths: list[tuple[list[str], Any]] = [([], None)]
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if tok in LEAVES and i == len(tokens) - 2 and not _is_id_set(tokens[: i + 1]):
                return [([*p, tok], tokens[-1]) for p, _ in paths]
            prev = tokens[i - 1] if i else ""
            if prev == "interface":
                names = expand_ports(tok)
            elif prev in {"traffic-class", "switch-priority", "dscp", "pcp"}:
                names = _expand_numbers(tok)
            else:
                names = [tok]
            paths = [([*p, n], None) for p, _ in paths for n in names]
            i += 1
        return [(p, {}) for p, _ in paths]

    def _validate(self, path: list[str], value: Any) -> None:
        leaf = path[-1]
        if path[:2] == ["qos", "roce"] and leaf == "mode" and value not in ROCE_MODES:
            raise NvueError(
                f"Error: Invalid config [rev_id: {self.rev}]\n  mode: '{value}' is not one of "
                f"{sorted(ROCE_MODES)}"
            )
        if leaf == "enable" and value not in {"on", "off"}:
            raise NvueError(
                f"Error: Invalid config [rev_id: {self.rev}]\n  enable: '{value}' is not one of ['off', 'on']"
            )
        if leaf == "trust" and value not in TRUST:
            raise NvueError(
                f"Error: Invalid config [rev_id: {self.rev}]\n"
                f"  trust: '{value}' is not one of {sorted(TRUST)}"
            )
        if leaf in INT_LEAVES and not (str(value).isdigit() and 0 <= int(value) <= 100):
            raise NvueError(
                f"Error: Invalid config [rev_id: {self.rev}]\n  {leaf}: '{value}' is not an integer in 0-100"
            )
        if leaf in {"min-threshold", "max-threshold"} and to_bytes(str(value)) is None:
            raise NvueError(f"Error: Invalid config [rev_id: {self.rev}]\n  {leaf}: '{value}' is not a size")
        if (
            path[0] == "interface"
            and len(path) > 1
            and path[1] not in self.ports
            and not path[1].startswith(("lo", "eth", "bond", "vlan", "br"))
        ):
            raise NvueError(
                f"Error: Invalid config [rev_id: {self.rev}]\n  interface: '{path[1]}' does not exist"
            )

    def nv_set(self, tokens: list[str]) -> None:
        ops = self._path_ops(tokens)
        for path, value in ops:
            if value != {}:
                self._validate(path, value)
        for path, value in ops:
            node = self.pending
            for p in path[:-1]:
                if not isinstance(node.get(p), dict):
                    node[p] = {}
                node = node[p]
            if value == {}:
                node.setdefault(path[-1], {})
                if path == ["qos", "roce"] and isinstance(node[path[-1]], dict):
                    node[path[-1]].setdefault("enable", "on")
                    node[path[-1]].setdefault("mode", "lossless")
            else:
                node[path[-1]] = int(value) if path[-1] in INT_LEAVES else value
                if path[:2] == ["qos", "roce"] and path[-1] == "mode":
                    node.setdefault("enable", "on")

    def nv_unset(self, tokens: list[str]) -> None:
        for path, _value in self._path_ops(tokens):  # 'nv unset qos roce mode X' drops the attribute
            node = self.pending
            for p in path[:-1]:
                node = node.get(p) if isinstance(node, dict) else None
                if node is None:
                    break
            if isinstance(node, dict):
                node.pop(path[-1], None)
                if _is_id_set(path[:-1]) and not node:  # the last member gone: back to the default
                    parent = self._get(self.pending, *path[:-2])
                    if isinstance(parent, dict):
                        parent.pop(path[-2], None)

    # ---------------------------------------------------------------- config ops
    def diff_text(self, old: dict[str, Any], new: dict[str, Any]) -> str:
        sets, unsets = _diff(old, new)
        items = []
        if sets:
            items.append({"set": sets})
        if unsets:
            items.append({"unset": unsets})
        if not items:
            return ""
        return yaml.safe_dump(items, default_flow_style=False, sort_keys=True)

    def apply(self, confirm: float | None) -> str:
        previous = copy.deepcopy(self.applied)
        self.applied = copy.deepcopy(self.pending)
        self.rev += 1
        if confirm is not None:
            self.confirm_deadline = time.monotonic() + confirm
            self.confirm_rollback = previous
        else:
            self.confirm_deadline = self.confirm_rollback = None
        self.write_fabric()
        return f"applied [rev_id: {self.rev}]\n"

    def save(self) -> None:
        tmp = self.startup_path.with_suffix(".tmp")
        tmp.write_text(
            yaml.safe_dump(self.applied, default_flow_style=False, sort_keys=True), encoding="utf-8"
        )
        tmp.replace(self.startup_path)

    # ---------------------------------------------------------------- show
    def show_qos_roce(self, tree: dict[str, Any], as_json: bool) -> str:
        v = self.roce_view(tree)
        roce_node = self._get(tree, "qos", "roce")
        enable = str(roce_node.get("enable", "on")) if isinstance(roce_node, dict) else "off"
        ecn_tcs = sorted(tc for tc, e in v["ecn"].items() if e[0])
        e3 = v["ecn"].get(3) or v["ecn"].get(ecn_tcs[0] if ecn_tcs else 3) or [False, *ROCE_DEFAULT_ECN, 100]
        trust_mode = {
            "l3": "pcp,dscp" if v["enabled"] else "dscp",
            "l2": "pcp",
            "both": "pcp,dscp",
            "port": "port",
        }[v["trust"]]
        cable = v["cable_length"] or 100
        rows: list[tuple[str, str]] = [("enable", enable), ("mode", v["mode"] or "-")]
        rows += [("pfc", ""), ("  pfc-priority", ",".join(map(str, v["pfc"])) or "-")]
        if v["pfc"]:
            rows += [("  rx-enabled", "enabled"), ("  tx-enabled", "enabled"), ("  cable-length", str(cable))]
        rows += [
            ("congestion-control", ""),
            ("  congestion-mode", "ECN" if ecn_tcs else "-"),
            ("  enabled-tc", ",".join(map(str, ecn_tcs)) or "-"),
            ("  min-threshold", fmt_size(e3[1])),
            ("  max-threshold", fmt_size(e3[2])),
            ("  probability", str(e3[3])),
            ("trust", ""),
            ("  trust-mode", trust_mode),
            ("lldp-app-tlv", ""),
            ("  priority", "3"),
            ("  protocol-id", "4791"),
            ("  selector", "UDP"),
        ]
        if as_json:
            doc: dict[str, Any] = {}
            section = None
            for k, val in rows:
                if not k.startswith("  ") and not val:
                    section = k
                    doc[section] = {}
                elif k.startswith("  "):
                    doc[section][k.strip()] = val
                else:
                    doc[k] = val
            doc["prio-map"] = {
                str(sp): {
                    "pcp": sp,
                    "dscp": ",".join(str(d) for d in range(sp * 8, sp * 8 + 8)),
                    "switch-prio": sp,
                }
                for sp in range(8)
            }
            doc["tc-map"] = {
                str(sp): {
                    "switch-prio": sp,
                    "traffic-class": sp if sp in (3, 6) else 0,
                    "scheduler-weight": "strict-priority" if sp == 6 else "DWRR-50%",
                }
                for sp in range(8)
            }
            return json.dumps(doc, indent=2) + "\n"
        if not v["enabled"]:
            rows = [("enable", enable), ("mode", "-")]
        opw = max(11, max(len(val) for _, val in rows))
        lines = [f"{'':20}{'operational':<{opw}}  applied", f"{'-' * 18}  {'-' * opw}  {'-' * opw}"]
        for k, val in rows:
            op = "" if k in {"enable"} else val
            lines.append(f"{k:<18}  {op:<{opw}}  {val}".rstrip())
        if v["enabled"]:
            lines += [
                "RoCE PCP/DSCP->SP mapping configurations",
                "=" * 43,
                "       pcp  dscp                     switch-prio",
                "    -  ---  -----------------------  -----------",
            ]
            for sp in range(8):
                d = ",".join(str(x) for x in range(sp * 8, sp * 8 + 8))
                lines.append(f"    {sp}  {sp}    {d:<23}  {sp}")
            lines += [
                "RoCE SP->TC mapping and ETS configurations",
                "=" * 45,
                "       switch-prio  traffic-class  scheduler-weight",
                "    -  -----------  -------------  ----------------",
            ]
            for sp in range(8):
                tc = sp if sp in (3, 6) else 0
                w = "strict-priority" if sp == 6 else "DWRR-50%"
                lines.append(f"    {sp}  {sp:<11}  {tc:<13}  {w}")
            lines += ["Exception List", "=" * 17, "No Data"]
        return "\n".join(lines) + "\n"


class NvueSession:
    """A bash session on the switch: `nv` commands plus a few shell builtins."""

    def __init__(self, switch: NvueSwitch, user: str = "cumulus"):
        self.sw = switch
        self.user = user
        self.closed = False
        self.frozen = False  # a `freeze` fault: no output and no prompt from now on

    def prompt(self) -> str:
        if self.frozen:
            return ""
        return f"{self.user}@{self.sw.name}:mgmt:~$ "

    def banner(self) -> str:
        return "\nLinux " + self.sw.name + " 6.1.0-cl-1-amd64 #1 SMP PREEMPT_DYNAMIC x86_64\n\n"

    def handle(self, line: str) -> tuple[str, bool]:
        if self.closed:
            return "", True
        if self.frozen:
            return "", False
        if self.sw.faults.refresh_changed_ports():
            self.sw.write_fabric()
        self.sw.check_confirm()
        s = line.strip()
        rule = self.sw.faults.match(s) if s else None

        def foreign(commands: list[str]) -> None:  # another operator's session on the same switch
            other = NvueSession(self.sw, "operator")
            for c in commands:
                other.handle(c)

        # a refused change: NVUE reports it as "Error: ..." (as _validate does)
        def reject(c: str) -> str:
            return f"Error: Invalid config [rev_id: {self.sw.rev}]\n  rejected: {c}\n"

        return run_line(self, s, rule, self._dispatch, reject, foreign)

    def _dispatch(self, s: str) -> tuple[str, bool]:
        if not s:
            return "", False
        try:
            argv = shlex.split(s)
        except ValueError:
            return "-bash: syntax error: unexpected end of file\n", False
        cmd = argv[0]
        if cmd in {"exit", "logout"}:
            self.closed = True
            return "", True
        if cmd == "hostname":
            return self.sw.name + "\n", False
        if cmd == "echo":
            return " ".join(argv[1:]) + "\n", False
        if cmd in {"true", ":"}:
            return "", False
        if cmd != "nv":
            return f"-bash: {cmd}: command not found\n", False
        try:
            out, is_config = self.nv(argv[1:])
        except NvueError as exc:
            return str(exc) + "\n", False
        drop = self.sw.faults.count_config_command() if is_config else False
        if drop:
            self.closed = True  # the caller ends the SSH connection; nothing more is answered
        return out, drop

    def nv(self, args: list[str]) -> tuple[str, bool]:
        sw = self.sw
        usage = (
            "Usage: nv [options] <command> [<args>...]\n\nError: Unknown command: "
            + " ".join(args[:1])
            + "\n"
        )
        if not args:
            return "Usage: nv [options] <command> [<args>...]\n", False
        verb, rest = args[0], args[1:]
        if verb == "set":
            sw.nv_set(rest)
            return "", True
        if verb == "unset":
            sw.nv_unset(rest)
            return "", True
        if verb == "show":
            return self.nv_show(rest), False
        if verb == "config":
            return self.nv_config(rest)
        return usage, False

    def nv_show(self, rest: list[str]) -> str:
        sw = self.sw
        as_json = False
        tree = sw.applied
        words = []
        i = 0
        while i < len(rest):
            a = rest[i]
            if a in {"-o", "--output"} and i + 1 < len(rest):
                as_json = rest[i + 1] == "json"
                i += 2
                continue
            m = re.fullmatch(r"--rev(?:=(\S+))?", a)
            if m or a == "-r":
                rev = m.group(1) if m and m.group(1) else (rest[i + 1] if i + 1 < len(rest) else "")
                i += 1 if (m and m.group(1)) else 2
                if rev == "pending":
                    tree = sw.pending
                elif rev in {"applied", "operational"}:
                    tree = sw.applied
                elif rev == "startup":
                    tree = yaml.safe_load(sw.startup_path.read_text()) if sw.startup_path.exists() else {}
                else:
                    raise NvueError(f"Error: Revision '{rev}' not found")
                continue
            words.append(a)
            i += 1
        if words == ["qos", "roce"]:
            return sw.show_qos_roce(tree, as_json)
        if len(words) >= 2 and words[0] == "interface" and words[1] in sw.ports:
            state = sw._get(tree, "interface", words[1], "link", "state")
            up = words[1] not in sw.faults.ports_down() and state != "down"
            if as_json:
                return json.dumps({"link": {"state": "up" if up else "down"}, "type": "swp"}, indent=2) + "\n"
            return (
                f"{'':26}operational  applied\n{'-' * 24}  -----------  -------\ntype{'':22}swp\n"
                f"link\n  state{'':19}{'up' if up else 'down'}\n"
            )
        node = sw._get(tree, *words) if words else tree
        if node is None:
            raise NvueError(f"Error: The requested item does not exist: {' '.join(words)}")
        return (
            json.dumps(node, indent=2) if as_json else yaml.safe_dump(node, default_flow_style=False)
        ) + "\n"

    def nv_config(self, rest: list[str]) -> tuple[str, bool]:
        sw = self.sw
        sub = rest[0] if rest else ""
        opts = rest[1:]
        if sub == "diff":
            revs = [o for o in opts if not o.startswith("-")]
            names = {
                "applied": sw.applied,
                "pending": sw.pending,
                "empty": {},
                "startup": yaml.safe_load(sw.startup_path.read_text()) if sw.startup_path.exists() else {},
            }
            if len(revs) == 2:
                return sw.diff_text(names.get(revs[0], {}), names.get(revs[1], {})), False
            return sw.diff_text(sw.applied, sw.pending), False
        if sub == "apply":
            if "--confirm-yes" in opts:
                if sw.confirm_deadline is None:
                    raise NvueError("Error: There is no pending confirm")
                sw.confirm_deadline = sw.confirm_rollback = None
                return f"applied [rev_id: {sw.rev}]\n", True
            if "--confirm-no" in opts:
                if sw.confirm_deadline is not None:
                    sw.confirm_deadline = 0.0
                    sw.check_confirm()
                return "", True
            if "--confirm-status" in opts:
                if sw.confirm_deadline is None:
                    return "No pending confirm\n", False
                return f"{max(0, round(sw.confirm_deadline - time.monotonic()))} seconds left\n", False
            confirm = None
            if "--confirm" in opts:
                idx = opts.index("--confirm")
                nxt = opts[idx + 1] if idx + 1 < len(opts) else ""
                confirm = parse_duration(nxt) if nxt and not nxt.startswith("-") else None
                if confirm is None:
                    confirm = 600.0 if not nxt or nxt.startswith("-") else None
                if confirm is None:
                    raise NvueError(f"Error: Invalid confirm time '{nxt}'")
            return sw.apply(confirm), True
        if sub == "confirm":  # convenience alias; real NVUE uses 'nv config apply --confirm-yes'
            return self.nv_config(["apply", "--confirm-yes"])
        if sub == "detach":
            sw.pending = copy.deepcopy(sw.applied)
            return "", True
        if sub == "save":
            sw.save()
            return "saved\n", False
        if sub == "show":
            if "-o" in opts and "commands" in opts:
                return "".join(f"nv set {c}\n" for c in _commands(sw.applied)), False
            header = {
                "header": {
                    "model": "SN4700",
                    "nvue-api-version": "nvue_v1",
                    "rev-id": 1.0,
                    "version": "Cumulus Linux 5.14.0",
                }
            }
            if "-o" in opts and "json" in opts:  # `nv config show -o json`: the same list, as JSON
                return json.dumps([header, {"set": sw.applied}], indent=2) + "\n", False
            return yaml.safe_dump([header, {"set": sw.applied}], default_flow_style=False), False
        return f"Usage: nv config [options] <command> [<args>...]\n\nError: Unknown command: {sub}\n", False


def _commands(tree: Any, prefix: str = "") -> list[str]:
    if isinstance(tree, dict) and tree:
        out = []
        for k, v in tree.items():
            out += _commands(v, f"{prefix} {k}".strip())
        return out
    if isinstance(tree, dict):
        return [prefix]
    return [f"{prefix} {tree}"]
