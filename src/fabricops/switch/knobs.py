"""The knob machinery: each knob both parses the device's configuration and renders commands.

The tables themselves (``ONYX_KNOBS``, ``NVUE_KNOBS``) are part of their platform
(``fabricops.roce.platforms.onyx`` / ``.nvue``): this module is below the platforms and imports none.

The house style is cisco.ios ``rm_templates``: a knob is declared once, and the same declaration is
used to read it from the device and to write it back, so the parser and the renderer cannot drift.

- **Onyx**: a knob is a running-config line template (``traffic-class {tc} congestion-control ecn
  minimum-absolute {min_kb} maximum-absolute {max_kb}``). The regex that reads the line is derived
  from the template; rendering fills the template. Per-port knobs are the commands after
  ``interface ethernet 1/N``.
- **NVUE**: a knob is a path in the applied revision's tree (``qos congestion-control default-global
  traffic-class {tc} min-threshold``). Reading walks the tree along the path; rendering is
  ``nv set <path> <value>`` / ``nv unset <path>``.

A *fact* is ``(key, value)``: key = ``(knob name, *identifying fields)`` (the port first for per-port
knobs), value = the remaining fields (one value, a tuple, or True for a presence-only line).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fabricops.errors import FabricopsError

__all__ = [
    "Facts",
    "Key",
    "NvueKnob",
    "OnyxKnob",
    "UnsafeLine",
    "bytes_value",
    "check_line",
]

Key = tuple[Any, ...]
Facts = dict[Key, Any]


_ANY = r"\S+"

#: what a rendered CLI line may hold: ASCII letters, digits, space and ``/ , . _ -`` (port ranges,
#: sizes, ``--confirm 120s -y``). Anything else (newline, control characters, ``;``, ``$()``,
#: backticks, quotes, ``|``, ``>``, non-ASCII) could start a second command on the switch shell.
_SAFE_LINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 /,._-]*", re.ASCII)


class UnsafeLine(FabricopsError, ValueError):
    """A rendered line that could carry a second command; nothing is sent."""


def check_line(line: str) -> str:
    """``line`` unchanged, or :class:`UnsafeLine` when it is not one plain CLI command.

    The last line of defence: every option is validated at the boundary (argument spec, model), and
    every line that reaches a switch passes through here.
    """
    text = str(line)
    if not _SAFE_LINE.fullmatch(text) or ".." in text or "  " in text or text != text.strip():
        raise UnsafeLine(
            f"refusing to send {text!r} to the switch: a CLI line may hold only ASCII letters, digits, "
            "single spaces and / , . _ - (no newline, control character, quote, ;, $, `, .. or non-ASCII)."
        )
    return text


def _conv(text: str) -> Any:
    return int(text) if re.fullmatch(r"\d+", text) else text


#: the port placeholder of ``fabricops.roce.resource._render`` (it groups per-port lines, then checks
#: the final line)
PORT_PLACEHOLDER = "\0"


def _checked(line: str, key: Key) -> str:
    if PORT_PLACEHOLDER not in key[1:2]:
        check_line(line)
    return line


# --------------------------------------------------------------------------- Onyx


@dataclass(frozen=True)
class OnyxKnob:
    name: str
    template: str  #: the configuration line, with {fields}
    keys: tuple[str, ...] = ()  #: fields that identify the instance (the rest is the value)
    per_port: bool = False  #: an ``interface ethernet 1/N`` command
    remove: str | None = None  #: the line that removes it; None: Onyx (or the lab) offers none
    accept: str | None = None  #: a looser regex for reading (e.g. ``force`` optional)
    field_re: Mapping[str, str] | None = None  #: per-field regex (default ``\\S+``)

    @property
    def fields(self) -> list[str]:
        return re.findall(r"\{(\w+)\}", self.template)

    def regex(self) -> re.Pattern[str]:
        if self.accept:
            return re.compile(self.accept + r"$")
        out, pos = "", 0
        for m in re.finditer(r"\{(\w+)\}", self.template):
            out += re.escape(self.template[pos : m.start()])
            pattern = (self.field_re or {}).get(m.group(1), _ANY)
            out += f"(?P<{m.group(1)}>{pattern})"
            pos = m.end()
        return re.compile(out + re.escape(self.template[pos:]) + "$")

    def parse(self, line: str, port: str | None = None) -> tuple[Key, Any] | None:
        m = self.regex().match(line)
        if not m:
            return None
        values = {k: _conv(v) for k, v in m.groupdict().items()}
        key: Key = (self.name, *([port] if self.per_port else []), *(values[k] for k in self.keys))
        rest = [values[f] for f in self.fields if f not in self.keys]
        value = True if not rest else rest[0] if len(rest) == 1 else tuple(rest)
        return key, value

    def _values(self, key: Key, value: Any) -> dict[str, Any]:
        ident = list(key[2:] if self.per_port else key[1:])
        vals = dict(zip(self.keys, ident, strict=True))
        rest = [f for f in self.fields if f not in self.keys]
        if len(rest) == 1:
            vals[rest[0]] = value
        elif rest:
            vals.update(zip(rest, value, strict=True))
        return vals

    def render(self, key: Key, value: Any) -> str:
        """The configuration line (without the ``interface ethernet`` prefix for per-port knobs)."""
        return _checked(self.template.format(**self._values(key, value)), key)

    def render_remove(self, key: Key, value: Any) -> str | None:
        if self.remove is None:
            return None
        return _checked(self.remove.format(**self._values(key, value)), key)



# --------------------------------------------------------------------------- NVUE

_SIZE = re.compile(r"([\d.]+)\s*([KMG]?)B?", re.I)


def bytes_value(value: Any) -> int | None:
    """An NVUE size as set (``150KB``, ``1.5MB``, ``150000``) -> bytes; input units are decimal."""
    if isinstance(value, int):
        return value
    m = _SIZE.fullmatch(str(value).strip())
    if not m:
        return None
    return round(float(m.group(1)) * {"": 1, "K": 1000, "M": 10**6, "G": 10**9}[m.group(2).upper()])


def _size_text(nbytes: int) -> str:
    """Bytes -> what to type: 150000 -> '150KB' (NVUE reads KB as 1000 bytes on input)."""
    if nbytes % 10**6 == 0:
        return f"{nbytes // 10**6}MB"
    if nbytes % 1000 == 0:
        return f"{nbytes // 1000}KB"
    return str(nbytes)


@dataclass(frozen=True)
class NvueKnob:
    name: str
    path: tuple[str, ...]  #: with {field} placeholders; the identifying fields, in key order
    leaf: bool = True  #: ``nv set <path> <value>``; False: a presence node (``nv set <path>``)
    per_port: bool = False  #: the first field is ``port`` (an ``interface`` path)
    read: Callable[[Any], Any] = str  #: tree value -> fact value
    write: Callable[[Any], str] = str  #: fact value -> what to type
    unset: tuple[str, ...] | None = None  #: path to unset (default: ``path``)

    @property
    def keys(self) -> list[str]:
        return [p[1:-1] for p in self.path if p.startswith("{")]

    def render(self, key: Key, value: Any) -> str:
        words = self._fill(self.path, key)
        return _checked("nv set " + " ".join(words) + (f" {self.write(value)}" if self.leaf else ""), key)

    def render_remove(self, key: Key, value: Any) -> str | None:
        return _checked("nv unset " + " ".join(self._fill(self.unset or self.path, key)), key)

    def _fill(self, path: tuple[str, ...], key: Key) -> list[str]:
        vals = dict(zip(self.keys, key[1:], strict=True))
        return [str(vals[p[1:-1]]) if p.startswith("{") else p for p in path]

    def walk(self, tree: Mapping[str, Any]) -> list[tuple[Key, Any]]:
        """Every instance of this knob in an NVUE tree (``nv show ... -o json`` of a revision)."""
        out: list[tuple[Key, Any]] = []

        def rec(node: Any, depth: int, ident: list[Any]) -> None:
            if depth == len(self.path):
                if self.leaf:
                    val = _leaf(node)
                    if val is not None:
                        out.append(((self.name, *ident), self.read(val)))
                else:
                    out.append(((self.name, *ident), True))
                return
            if not isinstance(node, Mapping):
                return
            part = self.path[depth]
            if part.startswith("{"):
                for k in sorted(node, key=_natural):
                    rec(node[k], depth + 1, [*ident, _conv(str(k))])
            elif part in node:
                rec(node[part], depth + 1, ident)

        rec(tree, 0, [])
        return out


def _leaf(node: Any) -> Any:
    """A leaf value; NVUE trees may also hold a bare value as a key with an empty mapping."""
    if isinstance(node, Mapping):
        if len(node) == 1 and next(iter(node.values())) in ({}, None):
            return next(iter(node))
        return None
    return node


def _natural(name: Any) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(name))]
