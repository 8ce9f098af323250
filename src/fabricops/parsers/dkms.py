"""``dkms status``: which DKMS module versions are added, built or installed, for which kernels.

Two line formats are in use (dkms ``dkms.in``, ``do_status``/``module_status_built``):

- dkms 2.8 and 3.x: ``MOD/VER, KVER, ARCH: STATE`` and, for a module only added,
  ``MOD/VER: added`` (``8812au/4.2.3: added``; Ubuntu 22.04's dkms 2.8.7 prints this form);
- older dkms 2.x: ``MOD, VER, KVER, ARCH: STATE`` and ``MOD, VER: added``.

A state may be followed by notes in parentheses, kept in ``warnings`` as printed with the
whitespace collapsed: ``(original_module exists)``, ``(WARNING! Diff between built and
installed module!)`` (dkms 2.x could print the same note several times; each one is kept).
``dkms status`` prints nothing when no module is registered: empty input is ``[]``, not an
error. Any other line (another tool's output, a line cut short) is a ParseError: a gap in this
list would read as "module missing for that kernel".
"""

from __future__ import annotations

import re
from typing import Any

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines

TOOL = "dkms-status"
EXPECTED = (
    "dkms status lines like 'mlnx-ofed-kernel/24.10.OFED.24.10.1.1.4.1, 6.1.0-18-amd64, x86_64: installed'"
)

_MODULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+~:-]*")
_KERNEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+~-]*")
_ARCH = re.compile(r"[A-Za-z0-9_]+")
_STATE = re.compile(r"[a-z][a-z-]*")


def _bad(line: str, why: str) -> ParseError:
    shown = line if len(line) <= 80 else line[:77] + "..."
    return ParseError(TOOL, EXPECTED, f"{why}: {shown!r}")


def _notes(rest: str, line: str) -> list[str]:
    notes: list[str] = []
    i = 0
    while i < len(rest):
        if rest[i].isspace():
            i += 1
            continue
        if rest[i] != "(":
            raise _bad(line, "text after the state that is not a '(...)' note")
        end = rest.find(")", i)
        if end < 0:
            raise _bad(line, "a note in parentheses is not closed")
        note = " ".join(rest[i + 1 : end].split())
        if not note or "(" in note:
            raise _bad(line, "an empty or nested note")
        notes.append(note)
        i = end + 1
    return notes


def _line(line: str) -> dict[str, Any]:
    ids, sep, tail = line.partition(": ")
    if not sep:
        raise _bad(line, "no ': STATE' part")
    parts = [p.strip() for p in ids.split(",")]
    first = parts[0]
    if "/" in first:
        module, _, version = first.partition("/")
        rest = parts[1:]
    else:
        if len(parts) < 2:
            raise _bad(line, "no module version")
        module, version, rest = first, parts[1], parts[2:]
    if not _MODULE.fullmatch(module) or not _VERSION.fullmatch(version):
        raise _bad(line, "module or version is not a DKMS name")
    kernel = arch = None
    if len(rest) == 2:
        kernel, arch = rest
        if not _KERNEL.fullmatch(kernel) or not _ARCH.fullmatch(arch):
            raise _bad(line, "kernel or architecture is not one")
    elif rest:
        raise _bad(line, "expected 'MODULE/VERSION, KERNEL, ARCH'")
    tail = tail.strip()
    state_end = 0
    while state_end < len(tail) and not tail[state_end].isspace() and tail[state_end] != "(":
        state_end += 1
    state = tail[:state_end]
    if not _STATE.fullmatch(state):
        raise _bad(line, "no state word (added, built, installed)")
    if kernel is None and state != "added":
        raise _bad(line, f"state {state!r} without a kernel")
    return {
        "module": module,
        "version": version,
        "kernel": kernel,
        "arch": arch,
        "state": state,
        "warnings": _notes(tail[state_end:], line),
    }


@bounded(TOOL, max_mb=4)
def parse_status(text: str) -> list:
    """``dkms status`` output -> one dict per line (SPEC-20 A4), in output order."""
    if text is None:
        raise ParseError(TOOL, EXPECTED, "no input")
    return [_line(ln.strip()) for ln in clean_lines(text) if ln.strip()]


def installed(status: list[dict[str, Any]], module: str, kernel: str) -> bool:
    """True when ``module`` is in state ``installed`` for ``kernel`` (any version)."""
    return any(r["module"] == module and r["kernel"] == kernel and r["state"] == "installed" for r in status)
