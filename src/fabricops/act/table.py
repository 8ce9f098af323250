"""The action table: which action a failing verify result gets (data: ``actions.yml`` in this package).

A rule matches a failing result by category, check, component kind, severity and status (each a
value or a list; absent: any); the first match gives the action. A user file (``--actions FILE``)
has the same form; its rules are tried first (``replace: true``: only its rules) and its
``default`` wins. Everything in a table is validated: an unknown key, check name, component kind,
severity, status or action is :class:`~fabricops.errors.BadInput` (exit 5) with one sentence.

:func:`kind_of` is the one place that says which part a result blames for acting on it: a failed
pair test that isolation explained by a cable is the cable's, a host's port named by isolation is
that port's, an inter-switch link read on the switches is a cable, a switch's port of a host cable
is a switch port; otherwise the result's own component kind.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from fabricops import safeyaml
from fabricops.errors import BadInput
from fabricops.result import COMPONENT_KINDS, SEVERITIES

DRAIN, QUARANTINE, MONITOR, NONE = "drain", "quarantine_port", "monitor", "none"
ACTIONS = (DRAIN, QUARANTINE, MONITOR, NONE)
SCHEMA = "fabricops.act/1"
STATUSES = ("fail", "error")
FIELDS = ("category", "check", "component", "severity", "status")
ANY = "*"


@functools.cache
def known_checks() -> frozenset[str]:
    """Every check name a verify report can carry (the verify modules' own constants)."""
    from fabricops.verify import cabling, consistency, outliers, pairs, switchports
    from fabricops.verify.hostchecks import GPU_CHECKS, HOST_CHECKS

    return frozenset(
        {
            *HOST_CHECKS,
            *GPU_CHECKS,
            *pairs.TESTS,
            consistency.CHECK,
            switchports.CHECK,
            switchports.PROOF,
            cabling.CHECK,
            outliers.CHECK,
            # named where they are made (fabricops.verify.engine, .rounds, .nccl_phase)
            "expectation",
            "inventory",
            "schedule",
            "isolation",
            "coverage",
            "nccl_busbw",
            "nccl_rail",
            "nccl_gdr",
        }
    )


CATEGORIES = ("hosts", "gpus", "pairs", "nccl", "cabling", "switches")


@dataclass(frozen=True)
class Rule:
    action: str
    match: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    source: str = ""  #: where the rule comes from ("actions.yml rule 3")

    def matches(self, facts: Mapping[str, str]) -> bool:
        return all(ANY in want or facts.get(k) in want for k, want in self.match.items())


@dataclass(frozen=True)
class Table:
    rules: tuple[Rule, ...]
    default: str = MONITOR

    def action_for(self, facts: Mapping[str, str]) -> tuple[str, str]:
        """(action, which rule gave it) for a failing result's facts (FIELDS -> value)."""
        for rule in self.rules:
            if rule.matches(facts):
                return rule.action, rule.source
        return self.default, "default"


def kind_of(r: Mapping[str, Any]) -> str:
    """The kind of part a failing result (report dict) blames, for acting on it."""
    details = r.get("details") if isinstance(r.get("details"), dict) else {}
    part = details.get("explained_by")
    if isinstance(part, dict) and part.get("kind") in ("cable", "hca_port"):
        return str(part["kind"])
    if r.get("check") == "switch_port":
        return "cable" if details.get("kind") == "isl" else "switch_port"
    comp = r.get("component")
    if isinstance(comp, dict) and comp.get("kind") in COMPONENT_KINDS:
        return str(comp["kind"])
    from fabricops.result import component_of

    return component_of(r.get("host"), r.get("device")).kind


def facts_of(r: Mapping[str, Any]) -> dict[str, str]:
    return {
        "category": str(r.get("category") or ""),
        "check": str(r.get("check") or ""),
        "component": kind_of(r),
        "severity": str(r.get("severity") or ("critical" if r.get("status") in STATUSES else "info")),
        "status": str(r.get("status") or ""),
    }


_ALLOWED = {
    "category": CATEGORIES,
    "component": COMPONENT_KINDS,
    "severity": SEVERITIES,
    "status": STATUSES,
}


def _values(where: str, key: str, value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, str) and v for v in items):
        raise BadInput(f"{where}: {key} must be a name or a list of names")
    allowed: Sequence[str] = tuple(sorted(known_checks())) if key == "check" else _ALLOWED[key]
    for v in items:
        if v != ANY and v not in allowed:
            hint = "a check of a verify report" if key == "check" else ", ".join(allowed)
            raise BadInput(f"{where}: unknown {key} {v!r} (expected {hint}, or '*')")
    return tuple(items)


def _action(where: str, value: Any) -> str:
    if value not in ACTIONS:
        raise BadInput(f"{where}: unknown action {value!r} (expected one of {', '.join(ACTIONS)})")
    return str(value)


def parse_table(data: Any, label: str) -> tuple[tuple[Rule, ...], str | None, bool]:
    """(rules, default or None, replace) of a table document; BadInput naming what is wrong."""
    if not isinstance(data, dict):
        raise BadInput(f"{label}: not an action table (expected a mapping with 'rules')")
    unknown = sorted(set(map(str, data)) - {"schema", "rules", "default", "replace"})
    if unknown:
        raise BadInput(f"{label}: unknown key {unknown[0]!r} (expected schema, rules, default, replace)")
    if data.get("schema", SCHEMA) != SCHEMA:
        raise BadInput(f"{label}: schema {data.get('schema')!r} is not {SCHEMA}")
    rules_data = data.get("rules", [])
    if not isinstance(rules_data, list):
        raise BadInput(f"{label}: rules must be a list of rules")
    rules = []
    for i, rd in enumerate(rules_data, 1):
        where = f"{label} rule {i}"
        if not isinstance(rd, dict):
            raise BadInput(f"{where}: not a mapping (expected match fields and an action)")
        extra = sorted(set(map(str, rd)) - {*FIELDS, "action", "note"})
        if extra:
            raise BadInput(f"{where}: unknown key {extra[0]!r} (expected {', '.join(FIELDS)}, action, note)")
        if "action" not in rd:
            raise BadInput(f"{where}: no action (expected one of {', '.join(ACTIONS)})")
        match = {k: _values(where, k, rd[k]) for k in FIELDS if k in rd}
        rules.append(Rule(_action(where, rd["action"]), match, where))
    default = _action(f"{label} default", data["default"]) if "default" in data else None
    replace = data.get("replace", False)
    if not isinstance(replace, bool):
        raise BadInput(f"{label}: replace must be true or false")
    return tuple(rules), default, replace


def _load_yaml(text: str, label: str) -> Any:
    try:
        return safeyaml.load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInput(f"{label}: not YAML ({first})") from None


@functools.cache
def shipped() -> Table:
    text = resources.files("fabricops.act").joinpath("actions.yml").read_text(encoding="utf-8")
    rules, default, _ = parse_table(_load_yaml(text, "actions.yml"), "actions.yml")
    return Table(rules, default or MONITOR)


def load_table(user_text: str | None = None, label: str = "--actions") -> Table:
    """The shipped table, with a user's table text (YAML) tried first when given."""
    base = shipped()
    if user_text is None:
        return base
    rules, default, replace = parse_table(_load_yaml(user_text, label), label)
    return Table(rules if replace else (*rules, *base.rules), default or base.default)
