"""Parser for Slurm's node records: ``scontrol show node`` (``-o``: one line per node; without: a
record of indented lines per node), the argv that prints them, and the check of a node name.

Shared by act (drain and resume) and verify's Slurm launcher (the nodes under test must be in
service): neither imports the other for it. The captured output is tests/fixtures/slurm-scontrol-
show-node (its source on its first line).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import BadInput

#: a Slurm node fabricops may name: letters, digits, ``.``, ``_``, ``-``; no hostlist expression, no space
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

SHOW_NODES = ["scontrol", "-o", "show", "node"]


def check_node(name: Any, where: str = "") -> str:
    if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
        raise BadInput(
            f"{where}Slurm node name {name!r} refused: a node name is letters, digits, '.', '_' "
            "and '-' (at most 64), nothing else (slurm_node_name in the inventory)"
        )
    return name


@dataclass
class Node:
    name: str
    state: str  #: the base state: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: frozenset[str] = frozenset()  #: DRAIN, NOT_RESPONDING, ...
    partitions: tuple[str, ...] = ()
    reason: str = ""  #: without its ``[user@time]`` trailer
    reason_by: str = ""  #: ``root@2026-12-06T12:00:00`` as scontrol prints it
    fields: Mapping[str, str] = field(default_factory=dict)

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags or self.state in ("DRAINED", "DRAINING")

    @property
    def down(self) -> bool:
        return self.state in ("DOWN", "FAIL") or "FAIL" in self.flags

    @property
    def out_of_service(self) -> bool:
        return self.drained or self.down

    @property
    def state_text(self) -> str:
        return "+".join([self.state, *sorted(self.flags)])


#: a key of scontrol's key=value output: a word at the start or after white space
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/]*)=")
_TRAILER = re.compile(r"^(.*?)\s*\[([^\[\]@\s]+@[^\[\]\s]+)\]\s*$")


def _fields(record: str) -> dict[str, str]:
    """key -> value of one node's record; a key seen again (inside a free-text reason) keeps the first."""
    out: dict[str, str] = {}
    keys = list(_KEY.finditer(record))
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(record)
        out.setdefault(m.group(1), record[m.end() : end].strip())
    return out


def parse_nodes(text: str) -> dict[str, Node]:
    """Node name -> :class:`Node` from ``scontrol show node`` (``-o`` or not). Text that holds no
    ``NodeName=`` record but is not empty is not scontrol's output (BadInput)."""
    records: list[str] = []
    for line in text.splitlines():
        if line.startswith("NodeName="):
            records.append(line)
        elif line.strip() and records and line[:1].isspace():
            records[-1] += " " + line.strip()
        elif line.strip() and not records:
            raise BadInput(f"not scontrol show node output: expected NodeName=..., got {line.strip()[:60]!r}")
    nodes: dict[str, Node] = {}
    for rec in records:
        f = _fields(rec)
        name = f.get("NodeName", "")
        state_words = [w for w in re.split(r"[+]", f.get("State", "UNKNOWN").upper()) if w]
        base = state_words[0].rstrip("*~#%$@!^-") if state_words else "UNKNOWN"
        reason, by = f.get("Reason", ""), ""
        m = _TRAILER.match(reason)
        if m:
            reason, by = m.group(1), m.group(2)
        if reason in ("(null)", "None"):
            reason = ""
        parts = tuple(p for p in f.get("Partitions", "").split(",") if p and p != "(null)")
        nodes[name] = Node(name, base, frozenset(state_words[1:]), parts, reason, by, f)
    return nodes
