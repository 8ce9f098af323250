"""Names that reach a scheduler file, and Slurm's hostlist expressions.

**The one name rule** (:data:`NAME_RE`): letters, digits, ``-`` and ``_``; 1 to 63 characters;
starting and ending with a letter or digit. Why so strict:

- topology.conf lines are ``Key=value`` words (``SwitchName=s0 Nodes=tux[0-3]``; Slurm's
  topology.conf(5)): a space or ``=`` splits the word, ``#`` starts a comment, and every Nodes= and
  Switches= value goes through Slurm's hostlist parser, where ``,`` separates names and ``[ ]``
  open a range; a name carrying any of those would silently name other switches or nodes.
- Slurm joins switch and node names with ``.`` in ``SLURM_TOPOLOGY_ADDR`` (the topology guide,
  "Environment Variables"): a dot inside a name would make that path ambiguous.
- SwitchName must be shorter than 64 characters (topology.conf(5); ``HOST_NAME_MAX`` in
  switch_record.c), and a Kubernetes label value is at most 63 characters, beginning and ending
  with an alphanumeric character (Kubernetes "Labels and Selectors", syntax and character set).
  One rule serves both files.

A name outside the rule is refused with one sentence naming it (:class:`BadName`, exit 5): it
is never quoted, escaped or rewritten, so the scheduler always sees the inventory's own names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fabricops.errors import BadInput
from fabricops.model.fabric import natural

NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?$")
RULE = "letters, digits, '-' and '_' only, 1-63 characters, starting and ending with a letter or digit"
#: a Kubernetes label key's name part (after the prefix and '/'): 63 characters, alphanumeric ends,
#: '-', '_' and '.' inside (Kubernetes "Labels and Selectors")
LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
#: a Kubernetes node name: a DNS subdomain name (RFC 1123, lowercase), at most 253 characters
K8S_NODE_RE = re.compile(
    r"^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$"
)


class BadName(BadInput):
    """A switch, node or block name that cannot go into a scheduler file as it is."""


def check(name: object, what: str, fix: str) -> str:
    """``name`` when it follows :data:`NAME_RE`; else :class:`BadName` (one sentence: what, the
    name, the rule, the fix)."""
    text = str(name) if name is not None else ""
    if not isinstance(name, str) or not NAME_RE.match(text):
        raise BadName(f"{what} {text!r} cannot go into a scheduler topology file ({RULE}); {fix}")
    return text


def _split(name: str) -> tuple[str, str] | None:
    """(prefix, digits) when ``name`` ends in digits, else None."""
    m = re.match(r"^(.*?)(\d+)$", name)
    return (m.group(1), m.group(2)) if m else None


def hostlist(names: Iterable[str]) -> str:
    """Slurm's ranged form of ``names``: ``gpu[01-04,07]``, natural order, duplicates dropped.

    Names are grouped by everything before their trailing digits; a run of consecutive numbers
    becomes ``lo-hi``. Zero padding follows Slurm's hostlist: a range prints every number with the
    width of its first (``09-10`` is gpu09 and gpu10), so a number joins a run only when printing
    it at the run's width gives back exactly its own digits (``gpu9``, ``gpu10`` -> ``gpu[9-10]``;
    ``gpu09``, ``gpu10`` -> ``gpu[09-10]``; ``gpu9``, ``gpu010`` stay apart). A name without
    trailing digits, or alone in its group, is written as it is."""
    unique = sorted(set(names), key=natural)
    groups: dict[str, list[str]] = {}
    order: list[tuple[str, str | None]] = []  # (prefix, None) for a plain name
    for name in unique:
        parts = _split(name)
        if parts is None:
            order.append((name, None))
            continue
        prefix, digits = parts
        if prefix not in groups:
            groups[prefix] = []
            order.append((prefix, ""))
        groups[prefix].append(digits)
    out: list[tuple[list, str]] = []
    for prefix, kind in order:
        if kind is None:
            out.append((natural(prefix), prefix))
            continue
        digits = sorted(groups[prefix], key=lambda d: (int(d), len(d)))
        if len(digits) == 1:
            out.append((natural(prefix + digits[0]), prefix + digits[0]))
            continue
        ranges: list[str] = []
        lo = prev = digits[0]
        width = len(lo)
        for d in digits[1:]:
            if int(d) == int(prev) + 1 and f"{int(d):0{width}d}" == d:
                prev = d
                continue
            ranges.append(lo if lo == prev else f"{lo}-{prev}")
            lo = prev = d
            width = len(d)
        ranges.append(lo if lo == prev else f"{lo}-{prev}")
        out.append((natural(prefix + digits[0]), f"{prefix}[{','.join(ranges)}]"))
    return ",".join(text for _key, text in sorted(out, key=lambda t: t[0]))


def expand(expr: str) -> list[str]:
    """The names of a hostlist expression as :func:`hostlist` writes it (tests and --check read
    files back with it): ``gpu[01-03,07],leaf1`` -> gpu01, gpu02, gpu03, gpu07, leaf1."""
    out: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?", expr):
        prefix, body = m.group(1), m.group(2)
        if body is None:
            out.append(prefix)
            continue
        for part in body.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                out.append(f"{prefix}{n:0{width}d}")
    return out
