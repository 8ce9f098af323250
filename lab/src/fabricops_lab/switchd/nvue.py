"""The Cumulus Linux NVUE engine behind a bash-like prompt (and behind the REST API, ``nvue_api``).

Revisions: ``pending`` (what ``nv set``/``nv unset`` change on the CLI), ``applied`` (what runs),
``startup`` (what ``nv config save`` wrote; loaded at start), plus the revisions REST clients create
(``POST /nvue_v1/revision``). Only the applied revision feeds the fabric file. Every ``nv set`` /
``nv unset`` path and value is checked against the object model in :mod:`.nvue_schema`.

Per release (``RELEASES``; chosen per switch in the topology, ``release:``): Cumulus Linux 5.8 and
earlier do not save on apply; from 5.9 "auto save is on by default; the nv config apply command
automatically saves the configuration", and ``nv set system config auto-save enable off`` turns it
off (NVUE Command Reference, "Config Commands": ``nv config apply``, ``nv config save``).
``nv config apply --confirm 30s`` applies and rolls back unless confirmed in time; under auto-save
the emulator saves when the apply is confirmed (a rolled-back apply never reaches startup).
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from fabricops_lab.emul.devstate import switch_port_counters

from .nvue_schema import PRESENCE, SCHEMA, Coll, IdSet, Leaf, to_bytes
from .state import FaultWatch, merge_port_faults, port_entry, run_line, trained_links, write_fabric_file

__all__ = ["RELEASES", "NvueError", "NvueSession", "NvueSwitch", "expand_ports"]

#: release -> (version string of ``nv config show`` / ``nv show system``, auto-save default)
RELEASES: dict[str, dict[str, Any]] = {
    "5.4": {"version": "Cumulus Linux 5.4.0", "auto_save": False},
    "5.14": {"version": "Cumulus Linux 5.14.0", "auto_save": True},
}
DEFAULT_RELEASE = "5.14"
ROCE_DEFAULT_ECN = (150000, 1500000)  # bytes, tc 0 and 3 (Cumulus "RoCE" default table)
VERBS = ("set", "unset", "show", "config", "action", "list-commands")
CONFIG_SUBS = ("apply", "detach", "diff", "history", "revision", "save", "show", "confirm")
CONFIRM_PROMPT = "Are you sure? [y/N] "  # NVUE's prompt (NVOS/NVUE "nv config apply" example output)


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


def _expand_numbers(spec: str) -> list[str]:
    out = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)-(\d+)", part)
        out.extend(str(n) for n in range(int(m.group(1)), int(m.group(2)) + 1)) if m else out.append(part)
    return out


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


def unique_prefix(word: str, choices: Any) -> str | None:
    """NVUE's abbreviations (``nv sh`` = ``nv show``): the one choice WORD is a prefix of."""
    if word in choices:
        return word
    hits = [c for c in choices if c.startswith(word)]
    return hits[0] if len(hits) == 1 else None


class NvueError(Exception):
    pass


def usage_error(words: list[str], bad: str) -> NvueError:
    """An unknown command or attribute: NVUE prints the usage of the last good node, then the error."""
    where = " ".join(["nv", *words])
    return NvueError(f"Usage:\n  {where} [options] <attribute> ...\n\nError: Unknown command: {bad}")



def _prune(tree: dict[str, Any], *path: str) -> None:
    """Drop the empty mappings along PATH, deepest first (what the pfc-off fault added, on clear)."""
    for depth in range(len(path), 0, -1):
        parent: Any = tree
        for key in path[: depth - 1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and parent.get(path[depth - 1]) == {}:
            del parent[path[depth - 1]]

#: the PFC profile the lab's pfc-off fault gives a port (both pause directions disabled)
PFC_OFF_PROFILE = "pfc-off"

class NvueSwitch:
    """One emulated Cumulus switch (shared by its SSH sessions and its REST API)."""

    def __init__(
        self,
        name: str,
        ports: list[str],
        state_dir: str | Path,
        fabric_file: str | Path | None,
        release: str = DEFAULT_RELEASE,
        sudo_password: str | None = None,
    ):
        if release not in RELEASES:
            raise ValueError(f"unknown Cumulus Linux release {release!r} (one of {', '.join(RELEASES)})")
        self.name = name
        self.ports = ports
        self.release = release
        self.version = RELEASES[release]["version"]
        self.sudo_password = sudo_password
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.startup_path = self.state_dir / "startup.yaml"
        self.fabric_file = fabric_file
        self.faults = FaultWatch(self.state_dir)
        self.pfc_saved: dict[str, Any] = {}  # pfc-off fault: each port's `qos pfc` before the fault
        self.lock = threading.RLock()  # SSH sessions (event loop) and the REST API (its thread) share state
        startup: dict[str, Any] = {}
        if self.startup_path.exists():
            startup = yaml.safe_load(self.startup_path.read_text(encoding="utf-8")) or {}
        self.applied: dict[str, Any] = copy.deepcopy(startup)
        self.pending: dict[str, Any] = copy.deepcopy(startup)
        self.rev = 1
        self.confirm_deadline: float | None = None
        self.confirm_rollback: dict[str, Any] | None = None
        self.confirm_rev: int | None = None
        #: rev_id -> {"tree", "state", "user", "date", "type"} (``nv config revision`` / history)
        self.revisions: dict[int, dict[str, Any]] = {
            1: {
                "tree": copy.deepcopy(startup),
                "state": "applied_and_saved",
                "user": "root",
                "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "type": "CLI",
            }
        }
        #: REST changesets: id -> {"tree", "base", "state", "user", "rev"}
        self.changesets: dict[str, dict[str, Any]] = {}
        self.write_fabric()

    # ---------------------------------------------------------------- release behaviour
    def auto_save(self, tree: dict[str, Any] | None = None) -> bool:
        """Does ``nv config apply`` save? The tree's ``system config auto-save enable`` or the default."""
        val = self._get(tree if tree is not None else self.applied, "system", "config", "auto-save", "enable")
        return str(val) == "on" if val is not None else bool(RELEASES[self.release]["auto_save"])

    def startup(self) -> dict[str, Any]:
        if not self.startup_path.exists():
            return {}
        return yaml.safe_load(self.startup_path.read_text(encoding="utf-8")) or {}

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

    def sync_pfc_off(self) -> None:
        """The lab's pfc-off fault, as an operator does it on Cumulus Linux (NVUE "Priority Flow
        Control": a PFC profile per interface, ``nv set qos pfc pfc-off tx disable``, ``rx disable``,
        ``nv set interface swpN qos pfc profile pfc-off``, applied): in the applied and pending trees of
        each listed port; a port leaving the list gets its previous ``qos pfc`` back (and the profile
        goes when no port uses it)."""
        want = self.faults.pfc_off() & set(self.ports)
        if not want and not self.pfc_saved:
            return
        add, drop = sorted(want - set(self.pfc_saved)), sorted(set(self.pfc_saved) - want)
        for p in add:
            self.pfc_saved[p] = copy.deepcopy(self._get(self.applied, "interface", p, "qos", "pfc"))
        for tree in (self.applied, self.pending):
            for p in add:
                iface = tree.setdefault("interface", {}).setdefault(p, {})
                iface.setdefault("qos", {})["pfc"] = {"profile": PFC_OFF_PROFILE}
            for p in drop:
                qos = self._get(tree, "interface", p, "qos")
                if isinstance(qos, dict):
                    if self.pfc_saved[p] is None:
                        qos.pop("pfc", None)
                    else:
                        qos["pfc"] = copy.deepcopy(self.pfc_saved[p])
                _prune(tree, "interface", p, "qos")
            if want:
                profiles = tree.setdefault("qos", {}).setdefault("pfc", {})
                profiles[PFC_OFF_PROFILE] = {"tx": "disable", "rx": "disable"}
            elif isinstance(self._get(tree, "qos", "pfc"), dict):
                tree["qos"]["pfc"].pop(PFC_OFF_PROFILE, None)
                _prune(tree, "qos", "pfc")
        for p in drop:
            del self.pfc_saved[p]

    def port_pfc(self, tree: dict[str, Any], port: str, default: list[int]) -> list[int]:
        """PFC priorities on PORT: its ``qos pfc profile`` (switch-priority, or the global list) or
        none when that profile disables both pause directions (``tx disable``, ``rx disable``)."""
        name = self._get(tree, "interface", port, "qos", "pfc", "profile")
        prof = self._get(tree, "qos", "pfc", str(name)) if name is not None else None
        if not isinstance(prof, dict):
            return default
        if str(prof.get("tx")) == "disable" and str(prof.get("rx")) == "disable":
            return []
        sp = prof.get("switch-priority")
        if isinstance(sp, dict):
            return sorted(int(x) for x in sp if str(x).isdigit())
        return default

    def write_fabric(self) -> None:
        self.sync_pfc_off()
        view = self.roce_view(self.applied)
        down = self.faults.ports_down()
        ports = {}
        trust = {"l3": "l3", "both": "l3", "l2": "l2", "port": "port"}.get(view["trust"], "l2")
        for p in self.ports:
            state = self._get(self.applied, "interface", p, "link", "state")
            link_up = p not in down and state != "down"
            ecn = {tc: (v[1] // 1000, v[2] // 1000) for tc, v in view["ecn"].items() if v[0]}
            ports[p] = port_entry(trust, self.port_pfc(self.applied, p, view["pfc"]), ecn, link_up)
        merge_port_faults(ports, self.faults)
        write_fabric_file(self.fabric_file, self.name, "cumulus", ports)

    # ---------------------------------------------------------------- confirm timer
    def check_confirm(self) -> None:
        if self.confirm_deadline is not None and time.monotonic() >= self.confirm_deadline:
            self.applied = self.confirm_rollback or {}
            if self.confirm_rev in self.revisions:
                self.revisions[self.confirm_rev]["state"] = "confirm_fail"
            self.pending = copy.deepcopy(self.applied)
            self.confirm_deadline = self.confirm_rollback = self.confirm_rev = None
            self.rev += 1
            self.write_fabric()

    # ---------------------------------------------------------------- set/unset against the schema
    def invalid(self, name: str, why: str) -> NvueError:
        """NVUE's refusal of a value (the form ``nv set qos roce mode bogus`` answers)."""
        return NvueError(f"Error: Invalid config [rev_id: {self.rev}]\n  {name}: {why}")

    def resolve(self, tokens: list[str], verb: str = "set") -> list[tuple[list[str], Any]]:
        """Tokens after ``nv set``/``nv unset`` -> [(path, value)], checked against the object model.

        ``value`` is a typed leaf value, ``{}`` for an object (or an ID-set member / presence node),
        or ``None`` for ``nv unset`` of a whole node. Ranges (``swp1-4``, ``0,3``) expand."""
        node: Any = SCHEMA
        paths: list[list[str]] = [[]]
        words: list[str] = [verb]
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if isinstance(node, Leaf):
                if i != len(tokens) - 1:
                    raise usage_error(words, tokens[i + 1])
                why = node.check(tok)
                if why:
                    raise NvueError(f"Error: Invalid config [rev_id: {self.rev}]\n  {paths[0][-1]}: {why}")
                if verb == "unset":  # `nv unset qos roce mode lossy` drops the attribute
                    return [(p, None) for p in paths]
                return [(p, node.typed(tok)) for p in paths]
            if isinstance(node, Coll):
                ids = expand_ports(tok) if node.ids.startswith("swp") else _expand_numbers(tok)
                for ident in ids:
                    if not re.fullmatch(node.ids, ident):
                        raise self.invalid(node.what, f"'{ident}' is not valid")
                    if words[-1] == "interface" and ident.startswith("swp") and ident not in self.ports:
                        raise self.invalid("interface", f"'{ident}' does not exist")
                paths = [[*p, n] for p in paths for n in ids]
                words.append(f"<{node.what}>")
                node = node.child
                i += 1
                continue
            if isinstance(node, IdSet):
                ids = _expand_numbers(tok)
                for ident in ids:
                    if not (ident.isdigit() and node.lo <= int(ident) <= node.hi):
                        raise NvueError(
                            f"Error: Invalid config [rev_id: {self.rev}]\n  {paths[0][-1]}: '{ident}' is not "
                            f"an integer in {node.lo}-{node.hi}"
                        )
                if i != len(tokens) - 1:
                    raise usage_error([*words, tok], tokens[i + 1])
                return [([*p, n], {} if verb == "set" else None) for p in paths for n in ids]
            if isinstance(node, dict):
                key = unique_prefix(tok, list(node)) if node else None
                if key is None:
                    raise usage_error(words, tok)
                if node[key] is None:  # a first-level node this emulator does not model
                    raise NvueError(
                        f"Error: Invalid config [rev_id: {self.rev}]\n  {key}: not supported by this switch"
                    )
                paths = [[*p, key] for p in paths]
                words.append(key)
                node = node[key]
                i += 1
                continue
            raise usage_error(words, tok)
        if not paths[0]:
            raise NvueError(f"Usage:\n  nv {verb} [options] <attribute> ...\n\nError: Missing attribute")
        if isinstance(node, Leaf):
            if verb == "set":
                raise NvueError(f"Usage:\n  nv {' '.join(words)} <value>\n\nError: Missing value")
            return [(p, None) for p in paths]
        if isinstance(node, IdSet) and verb == "set":
            raise NvueError(f"Usage:\n  nv {' '.join(words)} <value>\n\nError: Missing value")
        return [(p, {} if verb == "set" else None) for p in paths]

    def set_in(self, tree: dict[str, Any], tokens: list[str]) -> None:
        ops = self.resolve(tokens, "set")
        for path, value in ops:
            node = tree
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
                node[path[-1]] = value
                if path[:2] == ["qos", "roce"] and path[-1] == "mode":
                    node.setdefault("enable", "on")

    def unset_in(self, tree: dict[str, Any], tokens: list[str]) -> None:
        for path, _value in self.resolve(tokens, "unset"):
            node: Any = tree
            for p in path[:-1]:
                node = node.get(p) if isinstance(node, dict) else None
                if node is None:
                    break
            if isinstance(node, dict):
                node.pop(path[-1], None)
                if self._is_id_set(path[:-1]) and not node:  # the last member gone: back to the default
                    parent = self._get(tree, *path[:-2])
                    if isinstance(parent, dict):
                        parent.pop(path[-2], None)

    @staticmethod
    def _is_id_set(path: list[str]) -> bool:
        node: Any = SCHEMA
        for p in path:
            if isinstance(node, dict):
                node = node.get(p)
            elif isinstance(node, Coll):
                node = node.child
            else:
                return False
        return isinstance(node, IdSet)

    def nv_set(self, tokens: list[str]) -> None:
        self.set_in(self.pending, tokens)

    def nv_unset(self, tokens: list[str]) -> None:
        self.unset_in(self.pending, tokens)

    def check_tree(self, tree: Any, path: list[str] | None = None) -> str | None:
        """None when TREE (a REST body at PATH) fits the object model, else the complaint."""
        node = self._schema_at(path)
        if isinstance(node, str):
            return node
        return _check_node(node, tree)

    def typed_tree(self, tree: Any, path: list[str] | None = None) -> Any:
        """TREE (a checked REST body at PATH) with every leaf stored as the CLI stores it
        (``Leaf.typed``: a JSON number or the string typed), so a revision is the same whichever
        way it was made."""
        node = self._schema_at(path)
        return tree if isinstance(node, str) else _typed_node(node, tree)

    def _schema_at(self, path: list[str] | None) -> Any:
        """The schema node at PATH, or the complaint (a str) when PATH leaves the object model."""
        node: Any = SCHEMA
        for p in path or []:
            if isinstance(node, dict) and p in node and node[p] is not None:
                node = node[p]
            elif isinstance(node, Coll) and re.fullmatch(node.ids, p):
                node = node.child
            elif isinstance(node, IdSet) and p.isdigit():
                node = PRESENCE
            else:
                return f"'{p}' is not a valid path element"
        return node

    # ---------------------------------------------------------------- config ops
    def diff_items(self, old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
        sets, unsets = _diff(old, new)
        items: list[dict[str, Any]] = []
        if sets:
            items.append({"set": sets})
        if unsets:
            items.append({"unset": unsets})
        return items

    def diff_text(self, old: dict[str, Any], new: dict[str, Any]) -> str:
        items = self.diff_items(old, new)
        return yaml.safe_dump(items, default_flow_style=False, sort_keys=True) if items else ""

    def apply_tree(self, tree: dict[str, Any], confirm: float | None, user: str, kind: str = "CLI") -> int:
        """Make TREE the applied revision; returns its rev_id. Auto-save per release (see module doc)."""
        previous = copy.deepcopy(self.applied)
        untouched = self.pending == previous  # a CLI pending revision with nothing staged follows along
        self.applied = copy.deepcopy(tree)
        self.rev += 1
        if untouched or tree is self.pending:
            self.pending = copy.deepcopy(self.applied)
        state = "applied"
        if confirm is not None:
            self.confirm_deadline = time.monotonic() + confirm
            self.confirm_rollback = previous
            self.confirm_rev = self.rev
            state = "confirm"
        else:
            self.confirm_deadline = self.confirm_rollback = self.confirm_rev = None
            if self.auto_save():
                self.save()
                state = "applied_and_saved"
        self.revisions[self.rev] = {
            "tree": copy.deepcopy(self.applied),
            "state": state,
            "user": user,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "type": kind,
        }
        self.write_fabric()
        return self.rev

    def apply(self, confirm: float | None, user: str = "cumulus") -> str:
        return f"applied [rev_id: {self.apply_tree(self.pending, confirm, user)}]\n"

    def confirm_yes(self) -> int:
        if self.confirm_deadline is None:
            raise NvueError("Error: There is no pending confirm")
        rev = self.confirm_rev or self.rev
        self.confirm_deadline = self.confirm_rollback = self.confirm_rev = None
        state = "applied"
        if self.auto_save():
            self.save()
            state = "applied_and_saved"
        if rev in self.revisions:
            self.revisions[rev]["state"] = state
        return rev

    def save(self) -> None:
        tmp = self.startup_path.with_suffix(".tmp")
        tmp.write_text(
            yaml.safe_dump(self.applied, default_flow_style=False, sort_keys=True), encoding="utf-8"
        )
        tmp.replace(self.startup_path)

    def named_tree(self, name: str) -> dict[str, Any] | None:
        """A revision by the names NVUE accepts: applied, pending, startup, empty, or a rev_id."""
        if name == "applied":
            return self.applied
        if name == "pending":
            return self.pending
        if name == "startup":
            return self.startup()
        if name == "empty":
            return {}
        if name.isdigit() and int(name) in self.revisions:
            return self.revisions[int(name)]["tree"]
        if name in self.changesets:
            return self.changesets[name]["tree"]
        return None

    # ---------------------------------------------------------------- show (shared by CLI and REST)
    def show_tree(self, words: list[str], tree: dict[str, Any], operational: bool) -> Any:
        """The object at WORDS (already resolved names) of TREE; {} for a valid path with nothing set.

        Operational reads (no revision option, REST ``GET`` without ``rev``) of ``interface`` list every
        port with its link state, as ``nv show interface`` on a switch with its ports up does."""
        node: Any = SCHEMA
        for w in words:
            if isinstance(node, dict) and w in node and node[w] is not None:
                node = node[w]
            elif isinstance(node, Coll) and re.fullmatch(node.ids, w):
                if w.startswith("swp") and w not in self.ports:
                    raise NvueError(f"Error: The requested item does not exist: {' '.join(words)}")
                node = node.child
            elif isinstance(node, IdSet) and w.isdigit():
                node = PRESENCE
            else:
                raise NvueError(f"Error: The requested item does not exist: {' '.join(words)}")
        value = self._get(tree, *words) if words else tree
        if operational and words[:1] == ["interface"]:
            return self._interfaces_oper(words, tree)
        if value is None:
            return {} if not isinstance(node, Leaf) else None
        return copy.deepcopy(value)

    def link_stats(self, port: str, link: dict[str, Any] | None = None) -> dict[str, int]:
        """A port's ``link stats`` (NVUE API guide, GET /nvue_v1/interface/swp1/link/stats: the nine
        keys in this order): bytes and packets from the flow ledger over a base of control frames;
        ``carrier-transitions`` the first up plus a down and an up per flap of the lab's ``flapping``
        fault, ``in-errors`` the symbol errors it left (frames a corrupted symbol spoils fail their
        FCS); no drops of its own."""
        if link is None:
            link = trained_links(self.fabric_file, self.name, [port], self.faults)[port]
        c = switch_port_counters(self.fabric_file, self.name, port)
        return {"carrier-transitions": 1 + 2 * link["flaps"], "in-bytes": c["rx_bytes"], "in-drops": 0,
                "in-errors": link["symbol_errors"], "in-pkts": c["rx_packets"], "out-bytes": c["tx_bytes"],
                "out-drops": 0, "out-errors": 0, "out-pkts": c["tx_packets"]}

    def _interfaces_oper(self, words: list[str], tree: dict[str, Any]) -> Any:
        """The operational interface tree (``nv show interface -o json``, REST ``GET /interface``):
        each port's configuration with its ``link`` as the switch runs it -- ``state`` as NVUE's JSON
        prints a state, a one-key set (``{"up": {}}``; NVUE API guide, "Run cURL Commands"), ``mtu``,
        the ``speed`` the link trained at while it is up (NVUE command reference, "nv show interface
        <interface-id> link": operational speed "1G"; :func:`.state.trained_links`) and ``stats``
        (:meth:`link_stats`)."""
        down = self.faults.ports_down()
        out: dict[str, Any] = {}
        wanted = self.ports if len(words) < 2 else [p for p in self.ports if p == words[1]]
        links = trained_links(self.fabric_file, self.name, wanted, self.faults)
        for p in self.ports:
            conf = copy.deepcopy(self._get(tree, "interface", p) or {})
            state = self._get(tree, "interface", p, "link", "state")
            link = conf.setdefault("link", {})
            up = p not in down and state != "down"
            link.update({"state": {"up" if up else "down": {}}, "mtu": int(link.get("mtu", 9216))})
            if p in links:
                gbps = links[p]["gbps"]
                if up and gbps:
                    link["speed"] = f"{gbps:g}G"
                link["stats"] = self.link_stats(p, links[p])
            conf["type"] = "swp"
            out[p] = conf
        if len(words) == 1:
            return out
        got: Any = out
        for w in words[1:]:
            got = got.get(w) if isinstance(got, dict) else None
        return {} if got is None else got

    # ---------------------------------------------------------------- show
    def show_lldp_neighbor(self, port: str) -> str:
        """`nv show interface <port> lldp neighbor`: the cabling as built next to the fabric file,
        rendered by emul/fabricdisc.py (the NVUE command reference's table)."""
        from fabricops_lab.emul import fabricdisc

        if not self.fabric_file:
            return ""
        return fabricdisc.nvue_lldp_neighbor(Path(self.fabric_file).parent.parent, self.name, port)

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


def _check_node(schema: Any, value: Any) -> str | None:
    """Validate a REST body VALUE against SCHEMA (None: valid)."""
    if value is None:  # PATCH with null unsets
        return None
    if isinstance(schema, Leaf):
        return schema.check(str(value))
    if isinstance(schema, IdSet):
        if not isinstance(value, dict):
            return "a set of IDs must be an object ({'3': {}})"
        for k in value:
            if not (str(k).isdigit() and schema.lo <= int(k) <= schema.hi):
                return f"'{k}' is not an integer in {schema.lo}-{schema.hi}"
        return None
    if isinstance(schema, Coll):
        if not isinstance(value, dict):
            return "must be an object"
        for k, v in value.items():
            if not re.fullmatch(schema.ids, str(k)):
                return f"'{k}' is not a valid {schema.what}"
            why = _check_node(schema.child, v)
            if why:
                return why
        return None
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return "must be an object"
        for k, v in value.items():
            if k not in schema:
                return f"Additional properties are not allowed ('{k}' was unexpected)"
            if schema[k] is None:
                return f"'{k}' is not supported by this switch"
            why = _check_node(schema[k], v)
            if why:
                return why
        return None
    return "unknown schema node"


def _typed_node(schema: Any, value: Any) -> Any:
    """VALUE (checked by :func:`_check_node`) with its leaves as the CLI stores them."""
    if value is None:
        return None
    if isinstance(schema, Leaf):
        return schema.typed(str(value))
    if isinstance(schema, Coll) and isinstance(value, dict):
        return {k: _typed_node(schema.child, v) for k, v in value.items()}
    if isinstance(schema, dict) and isinstance(value, dict):
        return {k: v if schema.get(k) is None else _typed_node(schema[k], v) for k, v in value.items()}
    return value


def merge_patch(tree: dict[str, Any], path: list[str], body: Any) -> None:
    """Apply a REST PATCH BODY at PATH to TREE (RFC 7396 merge: null removes)."""
    node = tree
    for p in path[:-1] if path else []:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    if path:
        key = path[-1]
        if body is None:
            node.pop(key, None)
            return
        if not isinstance(body, dict) or not isinstance(node.get(key), dict):
            node[key] = copy.deepcopy(body) if not isinstance(body, dict) else {}
            if not isinstance(body, dict):
                return
        node = node[key]
    for k, v in body.items():
        if v is None:
            node.pop(k, None)
        elif isinstance(v, dict) and v and isinstance(node.get(k), dict):
            merge_patch(node, [k], v)
        elif isinstance(v, dict):
            node.setdefault(k, {}) if not v else node.__setitem__(k, copy.deepcopy(v))
        else:
            node[k] = v


class NvueSession:
    """A bash session on the switch: ``nv`` commands, ``sudo`` and a few shell builtins.

    ``sudo`` as on a Cumulus Linux host (Debian sudo 1.9): ``[sudo] password for cumulus: `` (input
    not echoed; the server turns echo off while ``wants_password``), "Sorry, try again." on a wrong
    one and ``sudo: 3 incorrect password attempts`` after three; ``sudo -s`` / ``sudo -i`` / ``sudo
    su`` open a root shell whose prompt ends in ``#`` (``root@leaf:mgmt:/home/cumulus#``) until
    ``exit``; ``sudo <command>`` runs one command. netmiko's ``cumulus_linux`` driver relies on these
    (``enable()``/``config_mode()`` send ``sudo -s`` and wait for ``ssword`` or ``#``)."""

    def __init__(self, switch: NvueSwitch, user: str = "cumulus"):
        self.sw = switch
        self.user = user
        self.root = user == "root"
        self.closed = False
        self.frozen = False  # a `freeze` fault: no output and no prompt from now on
        self.wants_password = False
        self._sudo: tuple[str, list[str], int] | None = None  # (mode, command, tries)
        self._confirm: float | bool | None = False  # a pending "Are you sure?" (the --confirm value)
        self.sudo_ok_until = 0.0  # sudo's credential cache (timestamp_timeout, 15 min on Debian)

    def prompt(self) -> str:
        if self.frozen:
            return ""
        if self.wants_password:
            return f"[sudo] password for {self.user}: "
        if self._confirm is not False:
            return CONFIRM_PROMPT
        if self.root and self.user != "root":
            return f"root@{self.sw.name}:mgmt:/home/{self.user}# "
        if self.root:
            return f"root@{self.sw.name}:mgmt:~# "
        return f"{self.user}@{self.sw.name}:mgmt:~$ "

    def banner(self) -> str:
        return "\nLinux " + self.sw.name + " 6.1.0-cl-1-amd64 #1 SMP PREEMPT_DYNAMIC x86_64\n\n"

    def handle(self, line: str) -> tuple[str, bool]:
        with self.sw.lock:
            return self._handle(line)

    def _handle(self, line: str) -> tuple[str, bool]:
        if self.closed:
            return "", True
        if self.frozen:
            return "", False
        if self.wants_password:
            return self._sudo_password(line), False
        if self._confirm is not False:
            return self._answer_confirm(line), False
        if self.sw.faults.refresh_changed_ports():
            self.sw.write_fabric()
        self.sw.check_confirm()
        s = line.strip()
        rule = self.sw.faults.match(s) if s else None

        def foreign(commands: list[str]) -> None:  # another operator's session on the same switch
            other = NvueSession(self.sw, "operator")
            for c in commands:
                other.handle(c)

        # a refused change: NVUE reports it as "Error: ..." (as the schema check does)
        def reject(c: str) -> str:
            return f"Error: Invalid config [rev_id: {self.sw.rev}]\n  rejected: {c}\n"

        return run_line(self, s, rule, self._dispatch, reject, foreign)

    # ---------------------------------------------------------------- sudo
    def _sudo_start(self, argv: list[str]) -> str:
        args = argv[1:]
        if not args:
            return "usage: sudo -h | -K | -k | -V\nusage: sudo [-s|-i] [command [arg ...]]\n"
        shell = args[0] in {"-s", "-i"} or args[:1] == ["su"] or args == ["-s", "su"]
        cmd = args[1:] if args[0] in {"-s", "-i"} else ([] if args[:1] == ["su"] else args)
        if self.root or time.monotonic() < self.sudo_ok_until:
            return self._sudo_run("shell" if shell else "cmd", cmd)
        self._sudo = ("shell" if shell else "cmd", cmd, 0)
        self.wants_password = True
        return ""

    def _sudo_password(self, line: str) -> str:
        mode, cmd, tries = self._sudo or ("cmd", [], 0)
        if self.sw.sudo_password is not None and line == self.sw.sudo_password:
            self.wants_password = False
            self._sudo = None
            self.sudo_ok_until = time.monotonic() + 900
            return "\n" + self._sudo_run(mode, cmd)
        tries += 1
        if tries >= 3:
            self.wants_password = False
            self._sudo = None
            return "\nsudo: 3 incorrect password attempts\n"
        self._sudo = (mode, cmd, tries)
        return "\nSorry, try again.\n"

    def _sudo_run(self, mode: str, cmd: list[str]) -> str:
        if mode == "shell" and not cmd:
            self.root = True
            return ""
        was = self.root
        self.root = True
        try:
            out, _ = self._dispatch(shlex.join(cmd))
        finally:
            self.root = was
        return out

    # ---------------------------------------------------------------- confirm prompt
    def _answer_confirm(self, line: str) -> str:
        confirm, self._confirm = self._confirm, False
        if line.strip().lower() in {"y", "yes"}:
            return self.sw.apply(confirm if isinstance(confirm, float) else None, self.user)
        return "Declined apply\n"

    def _apply_warnings(self) -> list[str]:
        """What NVUE warns about before an apply (each needs a yes): a management interface change."""
        sets, unsets = _diff(self.sw.applied, self.sw.pending)
        warn = []
        if "eth0" in (sets.get("interface") or {}) or "eth0" in (unsets.get("interface") or {}):
            warn.append(
                "Warning: management interface config is changed. If you are connected with it, your "
                "conection may be temporary interrupted."
            )
        return warn

    # ---------------------------------------------------------------- dispatch
    def _dispatch(self, s: str) -> tuple[str, bool]:
        if not s:
            return "", False
        try:
            argv = shlex.split(s)
        except ValueError:
            return "-bash: syntax error: unexpected end of file\n", False
        cmd = argv[0]
        if cmd in {"exit", "logout"}:
            if self.root and self.user != "root":  # leaves the sudo root shell
                self.root = False
                return "exit\n" if cmd == "exit" else "", False
            self.closed = True
            return "", True
        if cmd == "sudo":
            return self._sudo_start(argv), False
        if cmd == "hostname":
            return self.sw.name + "\n", False
        if cmd == "whoami":
            return ("root" if self.root else self.user) + "\n", False
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
        if not args:
            return "Usage:\n  nv [options] <command> [<args>...]\n", False
        verb = unique_prefix(args[0], VERBS)
        rest = args[1:]
        if verb is None:
            return f"Usage:\n  nv [options] <command> [<args>...]\n\nError: Unknown command: {args[0]}\n", (
                False
            )
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
        return f"Usage:\n  nv {verb} [options] ...\n\nError: not supported by this switch\n", False

    def _show_opts(self, rest: list[str]) -> tuple[list[str], str, str | None]:
        """(words, output format, revision or None for operational) of ``nv show`` / ``nv config``."""
        fmt, rev, words = "auto", None, []
        i = 0
        while i < len(rest):
            a = rest[i]
            m = re.fullmatch(r"(?:-o|--output)(?:=(\S+))?", a)
            if m:
                fmt = m.group(1) or (rest[i + 1] if i + 1 < len(rest) else "")
                i += 1 if m.group(1) else 2
                if fmt not in {"auto", "json", "yaml", "commands", "raw"}:
                    raise NvueError(f"Error: Invalid output format '{fmt}' (auto, json, yaml)")
                continue
            if a in {"-y", "--y", "--assume-yes"}:
                words.append("-y")
                i += 1
                continue
            m = re.fullmatch(r"--rev(?:=(\S+))?", a)
            if m or a == "-r":
                rev = m.group(1) if m and m.group(1) else (rest[i + 1] if i + 1 < len(rest) else "")
                i += 1 if (m and m.group(1)) else 2
                continue
            if a in {"--applied", "--pending", "--startup", "--operational"}:
                rev = a[2:]
                i += 1
                continue
            words.append(a)
            i += 1
        return words, fmt, rev

    def _tree(self, rev: str | None) -> dict[str, Any]:
        if rev in (None, "operational"):
            return self.sw.applied
        tree = self.sw.named_tree(rev)
        if tree is None:
            raise NvueError(f"Error: Revision '{rev}' not found")
        return tree

    def nv_show(self, rest: list[str]) -> str:
        sw = self.sw
        raw, fmt, rev = self._show_opts(rest)
        if len(raw) == 4 and raw[0] == "interface" and raw[2:] == ["lldp", "neighbor"] and rev is None:
            if raw[1] not in sw.ports:
                raise NvueError(f"Error: The requested item does not exist: interface {raw[1]}")
            return sw.show_lldp_neighbor(raw[1])
        tree = self._tree(rev)
        counters = self._counters_show(raw, fmt, rev)
        if counters is not None:
            return counters
        words = self._resolve_show(raw)
        as_json = fmt == "json"
        if words == ["qos", "roce"]:
            return sw.show_qos_roce(tree, as_json)
        if words == ["system"] and rev is None:
            doc = {
                "hostname": sw._get(tree, "system", "hostname") or sw.name,
                "build": sw.version,
                "platform": "SN4700",
            }
            return _render(doc, fmt)
        if len(words) == 2 and words[0] == "interface" and words[1] in sw.ports and rev is None:
            state = sw._get(tree, "interface", words[1], "link", "state")
            up = words[1] not in sw.faults.ports_down() and state != "down"
            if as_json:
                return json.dumps({"link": {"state": "up" if up else "down"}, "type": "swp"}, indent=2) + "\n"
            return (
                f"{'':26}operational  applied\n{'-' * 24}  -----------  -------\ntype{'':22}swp\n"
                f"link\n  state{'':19}{'up' if up else 'down'}\n"
            )
        if words == ["interface"] and rev is None and not as_json and fmt != "yaml":
            return self._interface_table(tree)
        node = sw.show_tree(words, tree, operational=rev is None)
        return _render(node, fmt)

    def _counters_show(self, raw: list[str], fmt: str, rev: str | None) -> str | None:
        """``nv show interface swpN link stats`` (Cumulus Linux 5.x) and ``nv show interface swpN
        counters`` (5.5 and later): the port's traffic counters, bytes and packets from the flow
        ledger (what the emulated perftest ran through the port) over a base of control frames.
        Layouts: CumulusNetworks/docs, cumulus-linux-5x Monitoring-and-Troubleshooting/
        Troubleshooting-Network-Interfaces/Monitoring-Interfaces-and-Transceivers-with-NVUE.md
        ("nv show interface swp1" link stats; "nv show interface swp1 counters", Detailed
        Counters / Drop Counters / Error Counters). Anything else: None (the schema decides)."""
        if len(raw) < 3 or rev not in (None, "operational") or unique_prefix(raw[0], ["interface"]) is None:
            return None
        port, rest = raw[1], raw[2:]
        if port not in self.sw.ports:
            return None
        sw = self.sw
        stats = sw.link_stats(port)
        if len(rest) == 2 and unique_prefix(rest[0], ["link"]) and unique_prefix(rest[1], ["stats"]):
            if fmt == "json":
                return json.dumps(stats, indent=2) + "\n"
            rows = [(k, _nv_bytes(v) if k.endswith("bytes") else str(v)) for k, v in stats.items()]
            return _nv_table(rows)
        if len(rest) == 1 and unique_prefix(rest[0], ["counters"]):
            if tuple(int(x) for x in sw.release.split(".")) < (5, 5):
                return None  # introduced in Cumulus Linux 5.5.0 (NVUE command reference)
            if fmt == "json":  # the flat keys of link stats (no JSON capture of this view to follow)
                return json.dumps(stats, indent=2) + "\n"
            return _nv_counters(stats)
        return None

    def _resolve_show(self, raw: list[str]) -> list[str]:
        """Expand abbreviations of fixed names in a show path (``nv sh q ro`` = ``nv show qos roce``)."""
        node: Any = SCHEMA
        out: list[str] = []
        for w in raw:
            if isinstance(node, dict) and node:
                key = unique_prefix(w, list(node))
                if key is None:
                    raise NvueError(f"Error: The requested item does not exist: {' '.join([*out, w])}")
                out.append(key)
                node = node[key]
            elif isinstance(node, Coll):
                out.append(w)
                node = node.child
            else:
                out.append(w)
                node = None
        return out

    def _interface_table(self, tree: dict[str, Any]) -> str:
        """``nv show interface`` (the summary table, 5.x layout)."""
        oper = self.sw.show_tree(["interface"], tree, operational=True)
        lines = [
            "Interface  MTU   Speed  State  Remote Host  Remote Port  Type  Summary",
            "---------  ----  -----  -----  -----------  -----------  ----  -------",
        ]
        for p, conf in oper.items():
            st = next(iter(conf["link"]["state"]))
            speed = conf["link"].get("speed", "")
            lines.append(f"+ {p:<8} {conf['link']['mtu']:<5} {speed:<6} {st:<6} {'':12} {'':12} swp".rstrip())
        return "\n".join(lines) + "\n"

    def nv_config(self, rest: list[str]) -> tuple[str, bool]:
        sw = self.sw
        if not rest:
            return "Usage:\n  nv config [options] <command> [<args>...]\n", False
        sub = unique_prefix(rest[0], CONFIG_SUBS)
        opts = rest[1:]
        if sub is None:
            head = "Usage:\n  nv config [options] <command> [<args>...]\n\n"
            return f"{head}Error: Unknown command: {rest[0]}\n", False
        if sub == "diff":
            revs, fmt, _rev = self._show_opts(opts)
            if len(revs) > 2:
                raise NvueError("Usage:\n  nv config diff [<revision-base>] [<revision-target>]")
            names = revs or ["applied", "pending"]
            if len(names) == 1:
                names = [names[0], "pending"]
            trees = [sw.named_tree(n) for n in names]
            for n, t in zip(names, trees, strict=True):
                if t is None:
                    raise NvueError(f"Error: Revision '{n}' not found")
            items = sw.diff_items(trees[0], trees[1])  # type: ignore[arg-type]
            if fmt == "json":
                return json.dumps(items, indent=2) + "\n", False
            return (yaml.safe_dump(items, default_flow_style=False, sort_keys=True) if items else ""), False
        if sub == "apply":
            return self._config_apply(opts)
        if sub == "confirm":  # convenience alias; real NVUE uses 'nv config apply --confirm-yes'
            return self._config_apply(["--confirm-yes"])
        if sub == "detach":
            sw.pending = copy.deepcopy(sw.applied)
            return "", True
        if sub == "save":
            sw.save()
            if sw.revisions.get(sw.rev, {}).get("state") == "applied":
                sw.revisions[sw.rev]["state"] = "applied_and_saved"
            return "saved\n", False
        if sub in {"history", "revision"}:
            _w, fmt, _r = self._show_opts(opts)
            return self._history(fmt, sub), False
        # show
        _w, fmt, _r = self._show_opts(opts)
        if fmt == "commands":
            return "".join(f"nv set {c}\n" for c in _commands(sw.applied)), False
        header = {
            "header": {"model": "SN4700", "nvue-api-version": "nvue_v1", "rev-id": 1.0, "version": sw.version}
        }
        if fmt == "json":  # `nv config show -o json`: the same list, as JSON
            return json.dumps([header, {"set": sw.applied}], indent=2) + "\n", False
        return yaml.safe_dump([header, {"set": sw.applied}], default_flow_style=False), False

    def _config_apply(self, opts: list[str]) -> tuple[str, bool]:
        sw = self.sw
        if "--confirm-yes" in opts:
            return f"applied [rev_id: {sw.confirm_yes()}]\n", True
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
            if not nxt or nxt.startswith("-"):
                confirm = 600.0  # "If you do not confirm within ten minutes, the configuration rolls back"
            else:
                confirm = parse_duration(nxt)
                if confirm is None:
                    raise NvueError(f"Error: Invalid confirm time '{nxt}'")
        yes = any(o in {"-y", "--y", "--assume-yes"} for o in opts)
        no = "--assume-no" in opts
        warnings = self._apply_warnings()
        if warnings and not yes:
            if no:
                return "\n".join(warnings) + "\n" + CONFIRM_PROMPT + "n\nDeclined apply\n", False
            self._confirm = float(confirm) if confirm is not None else None
            return "\n".join(warnings) + "\n\n", False
        return sw.apply(confirm, self.user), True

    def _history(self, fmt: str, sub: str) -> str:
        rows = []
        for rid, r in sorted(self.sw.revisions.items()):
            rows.append(
                {
                    "rev-id": rid,
                    "state": r["state"],
                    "apply-id": f"rev_{rid}_apply_1",
                    "apply-date": r["date"],
                    "type": r["type"],
                    "user": r["user"],
                    "reason": "Config update",
                    "message": f"Config update by {r['user']}",
                }
            )
        if fmt == "json":
            return json.dumps({str(r["rev-id"]): r for r in rows}, indent=2) + "\n"
        if fmt == "yaml" or sub == "history":
            return yaml.safe_dump(rows, default_flow_style=False, sort_keys=True)
        # `nv config revision`: the table of the NVUE Command Reference, "Config Commands"
        head = ["Rev ID", "State", "Apply ID", "Apply Date", "Type", "User", "Reason", "Message"]
        keys = ["rev-id", "state", "apply-id", "apply-date", "type", "user", "reason", "message"]
        widths = [max(len(h), *(len(str(r[k])) for r in rows)) for h, k in zip(head, keys, strict=True)]
        out = [
            "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
            "  ".join("-" * w for w in widths),
        ]
        for r in rows:
            out.append("  ".join(str(r[k]).ljust(w) for k, w in zip(keys, widths, strict=True)).rstrip())
        return "\n".join(out) + "\n"


def _nv_bytes(n: int) -> str:
    """NVUE's byte counts in show output: "300 Bytes", "9.73 MB" (decimal units)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} Bytes"


def _nv_table(rows: list[tuple[str, str]]) -> str:
    """An NVUE operational/applied table of leaves."""
    w = max(len("operational"), *(len(k) for k, _ in rows))
    vw = max(len("operational"), *(len(v) for _, v in rows))
    lines = [f"{'':{w}}  {'operational':<{vw}}  applied", f"{'-' * w}  {'-' * vw}  -------"]
    lines += [f"{k:<{w}}  {v:<{vw}}".rstrip() for k, v in rows]
    return "\n".join(lines) + "\n"


def _nv_counters(stats: dict[str, int]) -> str:
    """``nv show interface swpN counters`` (5.5+): carrier transitions, then the counter groups."""
    def group(title: str, rows: list[tuple[str, str, str]]) -> list[str]:
        w = max(len("Counter"), *(len(r[0]) for r in rows))
        rw = max(len("Receive"), *(len(r[1]) for r in rows))
        out = ["", title, "=" * (len(title) + 3), f"    {'Counter':<{w}}  {'Receive':<{rw}}  Transmit",
               f"    {'-' * w}  {'-' * rw}  --------"]
        return out + [f"    {a:<{w}}  {b:<{rw}}  {c}" for a, b, c in rows]

    lines = [f"{'':19}  operational  applied", f"{'-' * 19}  -----------  -------",
             f"{'carrier-transitions':<19}  {stats['carrier-transitions']}"]
    lines += group("Detailed Counters", [
        ("Broadcast Packets", "0", "0"), ("Multicast Packets", "0", "0"),
        ("Total Octets", str(stats["in-bytes"]), str(stats["out-bytes"])),
        ("Total Packets", str(stats["in-pkts"]), str(stats["out-pkts"])),
        ("Unicast Packets", str(stats["in-pkts"]), str(stats["out-pkts"]))])
    lines += group("Drop Counters", [
        ("ACL Drops", "0", "n/a"), ("Buffer Drops", "0", "n/a"), ("Non-Queue Drops", "n/a", "0"),
        ("Queue Drops", "n/a", "0"), ("Total Drops", "0", "0")])
    lines += group("Error Counters", [
        ("Alignment Errors", "0", "n/a"), ("FCS Errors", "0", "n/a"), ("Jabber Errors", "0", "n/a"),
        ("Length Errors", "0", "n/a"), ("Oversize Errors", "0", "n/a"),
        ("Symbol Errors", str(stats["in-errors"]), "n/a"),
        ("Total Errors", str(stats["in-errors"]), str(stats["out-errors"])),
        ("Undersize Errors", "0", "n/a")])
    return "\n".join(lines) + "\n"


def _render(node: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(node, indent=2) + "\n"
    if node is None or node == {}:
        return "" if fmt != "yaml" else "{}\n"
    if not isinstance(node, dict | list):
        return f"{node}\n"
    return yaml.safe_dump(node, default_flow_style=False)


def _commands(tree: Any, prefix: str = "") -> list[str]:
    if isinstance(tree, dict) and tree:
        out = []
        for k, v in tree.items():
            out += _commands(v, f"{prefix} {k}".strip())
        return out
    if isinstance(tree, dict):
        return [prefix]
    return [f"{prefix} {tree}"]
