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
from typing import Any

from fabricops.errors import BadInput, CouldNotRun
from fabricops.parsers.slurm import NODE_NAME, SHOW_NODES, Node, check_node, parse_nodes

__all__ = [
    "NODE_NAME", "OWNED_PREFIX", "SHOW_NODES", "Node", "Runner", "Slurm", "check_node", "drain_argv",
    "drain_reason", "local_runner", "ours", "parse_nodes", "resume_argv", "ssh_runner",
]

Runner = Callable[[list[str]], tuple[int, str, str]]

#: the prefix of every drain reason fabricops writes; a node drained with another reason is not ours
OWNED_PREFIX = "fabricops:"
#: one word of a drain reason (a check, a host, a device such as mlx5_0/1, Eth1/4, an ISL name)
REASON_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/<>@+,-]{0,99}$")
REASON_MAX = 160
TIMEOUT_S = 60

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


def ours(node: Node) -> bool:
    """Drained by fabricops: drained, and its reason starts with the owned prefix."""
    return node.drained and node.reason.startswith(OWNED_PREFIX)


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
