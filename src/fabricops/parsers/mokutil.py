"""``mokutil --sb-state`` and ``mokutil --test-key KEY`` (lcp/mokutil ``src/mokutil.c``).

``--sb-state`` prints ``SecureBoot enabled`` or ``SecureBoot disabled``, possibly followed by
``Platform is in Setup Mode`` (and, with newer mokutil, ``SecureBoot validation is disabled in
shim``); on a machine booted without EFI it prints ``EFI variables are not supported on this
system`` (and exits 255): Secure Boot cannot be on there, and :func:`parse_sb_state` gives None.

``--test-key KEY`` prints ``KEY is already enrolled`` (exit 1) or ``KEY is not enrolled`` (exit 0);
anything else (no such file, no EFI) is not an answer and is a ParseError.
"""

from __future__ import annotations

import re

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines

SB_TOOL = "mokutil-sb-state"
SB_EXPECTED = "mokutil --sb-state output ('SecureBoot enabled' / 'SecureBoot disabled')"
KEY_TOOL = "mokutil-test-key"
KEY_EXPECTED = "mokutil --test-key output ('KEY is already enrolled' / 'KEY is not enrolled')"

NOT_EFI = "EFI variables are not supported on this system"
_SB = re.compile(r"SecureBoot (enabled|disabled)")
_SB_EXTRA = ("Platform is in Setup Mode", "SecureBoot validation is disabled in shim")
_KEY = re.compile(r"(\S.*?) is (already enrolled|not enrolled)")


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in clean_lines(text or "") if ln.strip()]


@bounded(SB_TOOL, max_mb=1)
def sb_state(text: str) -> dict:
    """The whole answer: {"efi", "secure_boot" (bool or None), "setup_mode", "validation_disabled"}."""
    lines = _lines(text)
    if not lines:
        raise ParseError(SB_TOOL, SB_EXPECTED, "empty input")
    if lines == [NOT_EFI]:
        return {"efi": False, "secure_boot": None, "setup_mode": False, "validation_disabled": False}
    m = _SB.fullmatch(lines[0])
    if not m or any(ln not in _SB_EXTRA for ln in lines[1:]):
        raise ParseError(SB_TOOL, SB_EXPECTED, f"unexpected line {lines[0][:80]!r}")
    return {
        "efi": True,
        "secure_boot": m.group(1) == "enabled",
        "setup_mode": "Platform is in Setup Mode" in lines[1:],
        "validation_disabled": "SecureBoot validation is disabled in shim" in lines[1:],
    }


def parse_sb_state(text: str) -> bool | None:
    """True: Secure Boot on; False: off; None: not an EFI boot (so off too). SPEC-20 A5."""
    return sb_state(text)["secure_boot"]


@bounded(KEY_TOOL, max_mb=1)
def test_key(text: str) -> dict:
    """{"key": path as printed, "enrolled": bool}."""
    lines = _lines(text)
    if not lines:
        raise ParseError(KEY_TOOL, KEY_EXPECTED, "empty input")
    if len(lines) != 1:
        raise ParseError(KEY_TOOL, KEY_EXPECTED, f"{len(lines)} lines, mokutil prints one")
    m = _KEY.fullmatch(lines[0])
    if not m:
        raise ParseError(KEY_TOOL, KEY_EXPECTED, f"unexpected line {lines[0][:80]!r}")
    return {"key": m.group(1), "enrolled": m.group(2) == "already enrolled"}


def parse_test_key(text: str) -> bool:
    """True: the key is enrolled (or queued/in db); False: not enrolled. Else ParseError. SPEC-20 A5."""
    return test_key(text)["enrolled"]


test_key.__test__ = False  # type: ignore[attr-defined]  # not a pytest test when imported by name
