"""Small text helpers shared by the parsers (only what several of them need), and their bounds.

Tool output is untrusted input: a file someone pasted, a pipe, a switch's answer. Every parser is
wrapped in :func:`bounded`, which refuses input larger than that tool's cap (one line: ``input
larger than N MB``), bytes that are not UTF-8 and NUL bytes before any parsing starts; :func:`load_json`
caps nesting depth and number size; YAML goes through :mod:`fabricops.safeyaml` (no aliases).
The caps per tool are listed in docs/parsers.md.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

from fabricops.errors import FabricopsError, ParseError

MB = 1024 * 1024

#: Longest number token a parser turns into an int or float. Real counters are at most 20 digits
#: (2**64); Python refuses to convert strings of more than 4300 digits at all (ValueError).
MAX_NUMBER_CHARS = 40

#: Deepest JSON nesting a parser accepts (Onyx json-print, NVUE -o json and nccl-tests -J are
#: at most 5 levels deep; json.loads itself would raise RecursionError near 1000).
MAX_JSON_DEPTH = 32

_LONG_NUMBER = re.compile(rf"\d{{{MAX_NUMBER_CHARS + 1}}}")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_DECIMAL = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")

F = TypeVar("F", bound="Callable[..., Any]")


class InputRefused(ParseError):
    """Input refused before (or instead of) parsing: too large, not UTF-8, nested too deep.

    Same constructor as :class:`ParseError` (so ``fabricops.parsers.parse`` can re-raise it under
    the CLI's tool name), but the message says what is wrong with the input itself rather than
    "input is not X output", because the size or the bytes are the problem.
    """

    def __init__(self, tool: str, expected: str, detail: str = ""):
        self.tool = tool
        self.expected = expected
        self.detail = detail
        FabricopsError.__init__(self, f"{detail}: {expected}")


def too_large(tool: str, limit: int, size: int | None) -> InputRefused:
    """The one-line refusal of input over a cap (``size`` None: a stream, not read to its end)."""
    got = f" ({size / MB:.1f} MB)" if size is not None else ""
    return InputRefused(
        tool,
        f"no {tool} output is that large (pass one run's output, not a log of many)",
        f"input larger than {limit // MB} MB{got}",
    )


def decode(data: bytes, tool: str) -> str:
    """UTF-8 bytes -> str; anything else is a one-line :class:`InputRefused` naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        raise InputRefused(
            tool,
            f"{tool} prints UTF-8 text (convert the file with iconv, or pass the tool's own output)",
            f"input is not UTF-8 text (byte 0x{bad} at offset {exc.start})",
        ) from None


def bounded(tool: str, max_mb: int) -> Callable[[F], F]:
    """Decorate a ``parse(text, ...)`` function: refuse input over ``max_mb`` MB or not UTF-8.

    Accepts ``bytes`` too (decoded strictly as UTF-8). A NUL byte anywhere is refused
    (:func:`refuse_nul`), so no parser can put one into a record field. A run of more than 40
    decimal digits is refused too: no tool prints one, and ``int()`` raises ValueError past 4300
    digits, so every ``int(match)`` in the parsers stays safe. ``func.max_bytes`` carries the cap
    so the CLI can stop reading a pipe as soon as it is exceeded.
    """
    limit = max_mb * MB

    def wrap(func: F) -> F:
        @functools.wraps(func)
        def inner(text: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(text, (bytes, bytearray)):
                if len(text) > limit:
                    raise too_large(tool, limit, len(text))
                text = decode(bytes(text), tool)
            elif text is not None and not isinstance(text, str):
                kind = type(text).__name__
                raise InputRefused(tool, f"pass {tool} output as str or bytes", f"input is a {kind}")
            elif text is not None and len(text) > limit:
                raise too_large(tool, limit, len(text))
            if text is not None:
                refuse_nul(text, tool)
                long_number = _LONG_NUMBER.search(text)
                if long_number:
                    line = text.count("\n", 0, long_number.start()) + 1
                    raise InputRefused(
                        tool,
                        f"no {tool} output prints numbers that long (damaged or not tool output)",
                        f"a number of more than {MAX_NUMBER_CHARS} digits on line {line}",
                    )
            return func(text, *args, **kwargs)

        inner.max_bytes = limit  # type: ignore[attr-defined]
        return inner  # type: ignore[return-value]

    return wrap


def refuse_nul(text: str, tool: str) -> None:
    """A NUL byte anywhere is a one-line :class:`InputRefused` naming its line.

    No tool prints one; it comes from a binary file, a damaged capture or a pasted terminal dump,
    and would otherwise end up inside a record field (a name, a GUID, a value) that later code
    compares, prints or passes on to a C library as text.
    """
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise InputRefused(
            tool,
            f"no {tool} output holds NUL bytes (binary or damaged input)",
            f"a NUL byte (\\x00) on line {line}",
        )


def clean_lines(text: str) -> list[str]:
    """Split into lines with CRs, ANSI colour codes and trailing whitespace removed."""
    text = _ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    return [line.rstrip() for line in text.split("\n")]


def to_number(token: str) -> int | float | None:
    """'400' -> 400, '26.562' -> 26.562; 'N/A', '', 'nan', 'inf', or over 40 characters -> None.

    Only plain decimal notation counts: ``float()`` alone would accept 'nan', 'infinity' and
    '1_000', and ``int()`` raises ValueError beyond 4300 digits.
    """
    token = token.strip()
    if token.isdecimal() and len(token) <= MAX_NUMBER_CHARS:
        return int(token)  # the common case, without the pattern (isdecimal: what `\d` matches)
    if not token or len(token) > MAX_NUMBER_CHARS or not _DECIMAL.fullmatch(token):
        return None
    if "." not in token and "e" not in token and "E" not in token:
        return int(token)  # [-+]?\d+ here: int() takes it (raising ValueError for '1.5' cost more)
    value = float(token)
    return value if math.isfinite(value) else None


def to_int(token: str, base: int = 10) -> int | None:
    """An int token ('17', or with base 0 also '0x1f'), None when it is not one or is absurdly long."""
    token = token.strip()
    if not token or len(token) > MAX_NUMBER_CHARS:
        return None
    try:
        return int(token, base)
    except ValueError:
        return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a tool prints")


def _bounded_int(token: str) -> int:
    if len(token) > MAX_NUMBER_CHARS:
        raise ValueError(f"a {len(token)}-digit number")
    return int(token)


def _bounded_float(token: str) -> float:
    if len(token) > MAX_NUMBER_CHARS:
        raise ValueError(f"a {len(token)}-character number")
    value = float(token)
    if not math.isfinite(value):
        raise ValueError(f"{token} is out of range")
    return value


def load_json(text: str, tool: str, expected: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` for tool output: NaN/Infinity, huge numbers and deep nesting are a ParseError."""
    try:
        doc = json.loads(
            text, parse_constant=_refuse_constant, parse_int=_bounded_int, parse_float=_bounded_float
        )
    except json.JSONDecodeError as exc:
        raise ParseError(tool, expected, f"invalid JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise ParseError(tool, expected, f"JSON nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise ParseError(tool, expected, f"invalid JSON: {exc}") from None
    check_depth(doc, tool, expected, max_depth)
    return doc


def check_depth(doc: Any, tool: str, expected: str, max_depth: int) -> None:
    """Refuse nested lists/dicts deeper than ``max_depth`` (iterative: no recursion to overflow)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > max_depth:
            raise ParseError(tool, expected, f"nested deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children)
