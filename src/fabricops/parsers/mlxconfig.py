"""``mlxconfig -d DEV q`` / ``mlxconfig -d DEV -e q`` (NVIDIA MFT; mstflint's ``mstconfig``).

The query prints an opening block (``Device #1:``, ``----------``, ``Device type:``, ``Name:``,
``Description:``, ``Device:``), then a ``Configurations:`` header naming its columns (``Next Boot``
alone for ``q``; ``Default  Current  Next Boot`` for ``-e q``; ``Next Boot  New`` before the prompt
of ``set``), then one row per parameter. A row starts with ``*`` when the next-boot value differs
from the default or current one, and newer MFT prints ``RO`` there for read-only parameters
(mstflint ``mlxconfig/mlxcfg_ui.cpp`` ``printSingleParam``: ``"%s%s     %-48s"`` of the diff mark,
the read-only mark and the name). Values are kept exactly as printed (``True(1)``, ``IB(1)``,
``44``, ``Array[0..7]``). The record is the dict of SPEC-20 A1 (docs/parsers.md, "NIC firmware").

Tolerated: indentation (docs quote the output in code blocks), ``...`` lines a writer put in for
rows left out, trailing blanks, the ``Apply new Configuration?`` prompt and ``-I-`` lines after a
``set``. Refused: no ``Configurations:`` header (another tool, or ``| grep`` output), a header
with no rows, a row whose value count does not match the header, a parameter listed twice.
"""

from __future__ import annotations

import re
from typing import Any

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines

TOOL = "mlxconfig"
EXPECTED = (
    "mlxconfig query output (a 'Configurations:' header with Default/Current/Next Boot columns, "
    "then parameter rows)"
)

#: Column titles as mlxconfig prints them -> record keys.
COLUMNS = {"Default": "default", "Current": "current", "Next Boot": "next", "New": "new"}

_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(?:\[\d+\])?$")
_OPENING = {"Device type": "device_type", "Name": "name", "Description": "description", "Device": "device"}
_PAREN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\((-?\d+)\)$")
_TRAILER = ("The '*' shows", "The 'RO' shows", "-I-", "-W-", "Apply new Configuration", "Applying")
_NUMBER = re.compile(r"^(?:0[xX][0-9a-fA-F]{1,16}|-?\d{1,20})$")


def _header_columns(rest: str) -> list[str] | None:
    """'Default         Current         Next Boot' -> ['default', 'current', 'next']."""
    words = rest.split()
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] == "Next" and i + 1 < len(words) and words[i + 1] == "Boot":
            out.append("next")
            i += 2
        elif words[i] in COLUMNS:
            out.append(COLUMNS[words[i]])
            i += 1
        else:
            return None
    if not out or "next" not in out or len(set(out)) != len(out):
        return None
    return out


@bounded(TOOL, max_mb=4)
def parse_query(text: str) -> dict:
    if not text or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    record: dict[str, Any] = {
        "device": None, "device_type": None, "name": None, "description": None, "columns": [], "configs": {},
    }
    columns: list[str] | None = None
    devices = 0
    for raw in clean_lines(text):
        line = raw.strip()
        if not line or line == "..." or set(line) == {"-"}:
            continue
        if line.startswith("Device #"):
            devices += 1
            if devices > 1:
                raise ParseError(TOOL, EXPECTED, "more than one 'Device #' block (query one device with -d)")
            continue
        if columns is None:
            if line.startswith("Configurations:"):
                columns = _header_columns(line[len("Configurations:") :])
                if columns is None:
                    raise ParseError(TOOL, EXPECTED, f"unknown column header: {line[:120]!r}")
                record["columns"] = columns
                continue
            key, sep, value = line.partition(":")
            if sep and key.strip() in _OPENING:
                value = value.strip()
                record[_OPENING[key.strip()]] = None if value in ("", "N/A") else value
            continue
        if line.startswith(_TRAILER):
            continue
        if line.startswith("-E-"):
            raise ParseError(TOOL, EXPECTED, f"mlxconfig reported an error: {line[:200]}")
        tokens = line.split()
        modified = False
        if tokens[0] == "*":
            modified = True
            tokens = tokens[1:]
        elif tokens[0].startswith("*"):
            modified = True
            tokens[0] = tokens[0][1:]
        if tokens and tokens[0] == "RO":
            tokens = tokens[1:]
        if not tokens or not _KEY.match(tokens[0]):
            raise ParseError(TOOL, EXPECTED, f"not a parameter row: {line[:120]!r}")
        name, values = tokens[0], tokens[1:]
        if len(values) != len(columns):
            raise ParseError(
                TOOL, EXPECTED,
                f"row {name} has {len(values)} values for {len(columns)} columns (cut or damaged output)",
            )
        if name in record["configs"]:
            raise ParseError(
                TOOL, EXPECTED, f"parameter {name} is listed twice (two captures pasted together?)"
            )
        entry: dict[str, Any] = dict(zip(columns, values, strict=True))
        entry["modified"] = modified
        record["configs"][name] = entry
    if columns is None:
        raise ParseError(TOOL, EXPECTED, "no 'Configurations:' header found")
    if not record["configs"]:
        raise ParseError(TOOL, EXPECTED, "a 'Configurations:' header without any parameter row")
    return record


def value_int(v: str | None) -> int | None:
    """The number in a value as mlxconfig prints or accepts it: 'True(1)' -> 1, '44' -> 44, '0x10' -> 16."""
    if v is None:
        return None
    v = str(v).strip()
    m = _PAREN.match(v)
    if m:
        return int(m.group(2))
    if _NUMBER.match(v):
        return int(v, 16) if v.lower().startswith("0x") else int(v)
    return None


def value_name(v: str | None) -> str | None:
    """The symbolic name of a value, upper-cased: 'True(1)' -> 'TRUE', 'ETH' -> 'ETH', '44' -> None."""
    if v is None:
        return None
    v = str(v).strip()
    m = _PAREN.match(v)
    if m:
        return m.group(1).upper()
    if _NUMBER.match(v) or not v:
        return None
    return v.upper()


def same(a: str | None, b: str | None) -> bool:
    """Whether two values mean the same setting: by number when both carry one, else by name."""
    ia, ib = value_int(a), value_int(b)
    if ia is not None and ib is not None:
        return ia == ib
    na, nb = value_name(a), value_name(b)
    return na is not None and na == nb


def parse_set_error(text: str) -> str | None:
    """The reason mlxconfig printed when it refused a ``set`` (the text after '-E- '), or None."""
    for raw in clean_lines(text or ""):
        line = raw.strip()
        if line.startswith("-E-"):
            return line[3:].strip() or None
    return None
