"""Slurm through its own commands only: read nodes with ``scontrol -o show node``, drain and resume
with ``scontrol update``. Nothing else of Slurm is touched.

Every command is an argv list built here from validated parts (a node name matches
:data:`NODE_NAME`; a reason is built by :func:`drain_reason` from validated words). A
:data:`Runner` takes that argv and returns ``(rc, stdout, stderr)``: :func:`local_runner` runs it
without a shell (``--slurm-local``: this machine is a Slurm login node); :func:`ssh_runner` runs it
on the controller host over the product's transport, where SSH carries one command string: the
argv is joined with :func:`shlex.join`, every word quoted, so the remote shell splits it back into
exactly these words. Tests give an in-memory Slurm as the runner.

:func:`parse_nodes` reads ``scontrol show node`` in both forms (``-o``: one line per node; without:
a record of indented lines per node, tests/fixtures/slurm-scontrol-show-node).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import BadInput, CouldNotRun

Runner = Callable[[list[str]], tuple[int, str, str]]

#: the prefix of every drain reason fabricops writes; a node drained with another reason is not ours
OWNED_PREFIX = "fabricops:"
#: a Slurm node act may name: letters, digits, ``.``, ``_``, ``-``; no hostlist expression, no space
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: one word of a drain reason (a check, a host, a device such as mlx5_0/1, Eth1/4, an ISL name)
REASON_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/<>@+,-]{0,99}$")
REASON_MAX = 160
TIMEOUT_S = 60

SHOW_NODES = ["scontrol", "-o", "show", "node"]


def check_node(name: Any, where: str = "") -> str:
    if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
        raise BadInput(
            f"{where}Slurm node name {name!r} refused: a node name is letters, digits, '.', '_' "
            "and '-' (at most 64), nothing else (slurm_node_name in the inventory)"
        )
    return name


def drain_reason(check: str, *parts: str) -> str:
    """``fabricops: <check> <component words>``, each word validated; BadInput when one is not."""
    words = [check, *[p for part in parts if part for p in str(part).split()]]
    for w in words:
        if not REASON_WORD.fullmatch(w):
            raise BadInput(f"drain reason word {w!r} refused (letters, digits and ._:/<>@+,- only)")
    reason = " ".join([OWNED_PREFIX, *words])
    if len(reason) > REASON_MAX:
        raise BadInput(f"drain reason {reason[:60]!r}... refused: longer than {REASON_MAX} characters")
    return reason


def drain_argv(node: str, reason: str) -> list[str]:
    check_node(node)
    if (
        not reason.startswith(OWNED_PREFIX + " ")
        or len(reason) > REASON_MAX
        or not all(REASON_WORD.fullmatch(w) for w in reason[len(OWNED_PREFIX) + 1 :].split(" "))
    ):
        raise BadInput(f"drain reason {reason!r} refused: not built by drain_reason")
    return ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"]


def resume_argv(node: str) -> list[str]:
    return ["scontrol", "update", f"nodename={check_node(node)}", "state=resume"]


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
    def ours(self) -> bool:
        """Drained by fabricops: its reason starts with the owned prefix."""
        return self.drained and self.reason.startswith(OWNED_PREFIX)

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


def local_runner(argv: list[str]) -> tuple[int, str, str]:
    """Run ``argv`` here, no shell; a missing ``scontrol`` is rc 127 as a shell would say."""
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=TIMEOUT_S, shell=False, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: no answer in {TIMEOUT_S} s"
    except OSError as exc:
        return 126, "", f"{argv[0]}: {exc.strerror or exc}"
    return proc.returncode, proc.stdout, proc.stderr


def ssh_runner(run: Callable[..., Mapping[str, Any]], host: str) -> Runner:
    """A runner on ``host`` through a transport's ``run(host, command, timeout)`` (verify's Fabric):
    the argv quoted word by word into the one string SSH carries."""

    def runner(argv: list[str]) -> tuple[int, str, str]:
        res = run(host, shlex.join(argv), TIMEOUT_S)
        return int(res.get("rc", 255)), str(res.get("stdout") or ""), str(res.get("stderr") or "")

    return runner


def _one_line(text: str) -> str:
    words = " ".join(text.split())
    return words if len(words) <= 200 else words[:197] + "..."


class Slurm:
    """Slurm's view of the nodes and the two changes act makes, through a :data:`Runner`."""

    def __init__(self, runner: Runner, where: str):
        self.runner = runner
        self.where = where  #: "the controller slurm1", "this machine"

    def nodes(self) -> dict[str, Node]:
        rc, out, err = self.runner(list(SHOW_NODES))
        if rc != 0:
            why = _one_line(err) or f"exit status {rc}"
            raise CouldNotRun(
                f"Slurm not reachable on {self.where}: {' '.join(SHOW_NODES)} failed ({why}); "
                "nothing acted on"
            )
        try:
            return parse_nodes(out)
        except BadInput as exc:
            raise CouldNotRun(f"Slurm on {self.where}: {exc}; nothing acted on") from None

    def update(self, argv: list[str]) -> tuple[bool, str]:
        rc, out, err = self.runner(argv)
        return rc == 0, "" if rc == 0 else (_one_line(err or out) or f"exit status {rc}")
