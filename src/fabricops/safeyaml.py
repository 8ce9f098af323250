"""YAML for untrusted text: no anchors or aliases, bounded depth, plain JSON-able values.

``yaml.safe_load`` is safe from code execution but not from a "billion laughs" document: a few
hundred bytes of nested aliases expand to gigabytes once something walks the result (issue 15:
785 bytes fed to ``fabricops parse nvue-config-diff`` took 5.4 GB and did not finish). No tool
fabricops reads prints anchors (``nv config diff`` writes plain YAML), so :func:`load` refuses
them at the first ``&anchor`` or ``*alias`` event, before anything is built. It also refuses
nesting deeper than ``max_depth`` (the composer recurses per level), numbers of more than 40
characters (``int()`` raises ValueError past 4300 digits), ``.nan``/``.inf``, and the tags that
do not map to JSON (``!!binary``, ``!!set``, ``!!omap``, ``!!pairs``); timestamps stay strings.
Every refusal is a :class:`yaml.YAMLError`, so callers catch one exception type.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError, SafeConstructor

__all__ = ["MAX_DEPTH", "NoAliasSafeLoader", "load"]

MAX_DEPTH = 64
_MAX_NUMBER_CHARS = 40


class NoAliasSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses anchors, aliases and deep nesting while composing."""

    max_depth = MAX_DEPTH

    def __init__(self, stream: Any):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise ComposerError(None, None, f"alias *{event.anchor} refused (anchors and aliases are not "
                                "accepted in tool output)", event.start_mark)
        if getattr(event, "anchor", None) is not None:
            raise ComposerError(None, None, f"anchor &{event.anchor} refused (anchors and aliases are not "
                                "accepted in tool output)", event.start_mark)
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise ComposerError(None, None, f"nested deeper than {self.max_depth} levels",
                                    event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: Any) -> int:
        if len(str(node.value)) > _MAX_NUMBER_CHARS:
            raise ConstructorError(None, None, f"a {len(node.value)}-character number", node.start_mark)
        return SafeConstructor.construct_yaml_int(self, node)

    def construct_yaml_float(self, node: Any) -> float:
        if len(str(node.value)) > _MAX_NUMBER_CHARS:
            raise ConstructorError(None, None, f"a {len(node.value)}-character number", node.start_mark)
        value = SafeConstructor.construct_yaml_float(self, node)
        if not math.isfinite(value):
            raise ConstructorError(None, None, f"{node.value} is not a finite number", node.start_mark)
        return value

    def construct_refused(self, node: Any) -> Any:
        raise ConstructorError(None, None, f"tag {node.tag} refused (not plain data)", node.start_mark)


NoAliasSafeLoader.add_constructor("tag:yaml.org,2002:int", NoAliasSafeLoader.construct_yaml_int)
NoAliasSafeLoader.add_constructor("tag:yaml.org,2002:float", NoAliasSafeLoader.construct_yaml_float)
NoAliasSafeLoader.add_constructor("tag:yaml.org,2002:timestamp", NoAliasSafeLoader.construct_yaml_str)
for _tag in ("binary", "set", "omap", "pairs"):
    NoAliasSafeLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", NoAliasSafeLoader.construct_refused)


if yaml.__with_libyaml__:

    class _FastLoader(yaml.CSafeLoader):
        """libyaml's parser and composer (C, ~20x faster) with the same constructors; used only
        after :func:`_check_events` has seen every event and found no anchor and no deep nesting."""

    for _tag, _ctor in NoAliasSafeLoader.yaml_constructors.items():
        _FastLoader.add_constructor(_tag, _ctor)
else:  # pragma: no cover - PyYAML built without libyaml
    _FastLoader = None


def _check_events(text: str) -> None:
    """Stream the parse events (constant memory) and refuse anchors, aliases and deep nesting."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            kind = "alias *" if isinstance(event, yaml.AliasEvent) else "anchor &"
            raise ComposerError(None, None, f"{kind}{event.anchor} refused (anchors and aliases are not "
                                "accepted in tool output)", event.start_mark)
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def load(text: str) -> Any:
    """Load one YAML document from untrusted text; anything refused raises :class:`yaml.YAMLError`."""
    try:
        if _FastLoader is not None:
            _check_events(text)
            return yaml.load(text, Loader=_FastLoader)
        return yaml.load(text, Loader=NoAliasSafeLoader)
    except ValueError as exc:  # e.g. a timestamp-looking date out of range in a merge, or int parsing
        raise yaml.YAMLError(str(exc)) from None
    except RecursionError:
        raise yaml.YAMLError(f"nested deeper than {MAX_DEPTH} levels") from None
