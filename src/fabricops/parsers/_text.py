"""Small text helpers shared by the parsers (only what several of them need)."""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def clean_lines(text: str) -> list[str]:
    """Split into lines with CRs, ANSI colour codes and trailing whitespace removed."""
    text = _ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    return [line.rstrip() for line in text.split("\n")]


def to_number(token: str) -> int | float | None:
    """'400' -> 400, '26.562' -> 26.562, 'N/A' or '' -> None."""
    token = token.strip()
    if not token or token.upper() in {"N/A", "NA", "-", "[N/A]"}:
        return None
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        return None
