"""Want vs have -> commands, for the resource states of ``fabricops.fabric.roce_switch``.

Pure functions over knob facts (``knobs.py``): no connection, no Ansible. The same code computes
what check mode shows, what a real run sends, and what a rollback sends (a rollback is
``overridden`` with the pre-change facts as the want).

States (cisco.ios resource-module semantics):
- ``merged``: set every wanted knob that differs; touch nothing else.
- ``replaced``: merged, and remove RoCE knobs the want does not hold, globally and on the wanted ports.
- ``overridden``: replaced on every port of the switch (ports not wanted lose their RoCE settings).
- ``deleted``: remove the RoCE knobs, globally and on the wanted ports.
- ``gathered`` / ``parsed``: no commands (the facts are the answer); ``rendered``: merged against nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fabricops.errors import ParseError
from fabricops.parsers import nvue as nvue_parser
from fabricops.parsers import onyx as onyx_parser

from .knobs import (
    NVUE_KNOBS,
    ONYX_KNOBS,
    PORT_PLACEHOLDER,
    Facts,
    Key,
    UnsafeLine,
    check_line,
    nvue_facts,
    nvue_knob,
    onyx_facts,
    onyx_knob,
)
from .model import SwitchError

__all__ = [
    "STATES",
    "apply_facts",
    "compute",
    "config_lines",
    "facts_from_onyx_config",
    "gather",
    "structured",
]

STATES = ("merged", "replaced", "overridden", "deleted", "gathered", "rendered", "parsed")


def _knob(os_name: str, key: Key) -> Any:
    return onyx_knob(key[0]) if os_name == "onyx" else nvue_knob(key[0])


def _order(os_name: str) -> dict[str, int]:
    table = ONYX_KNOBS if os_name == "onyx" else NVUE_KNOBS
    return {k.name: n for n, k in enumerate(table)}


def _sort_key(os_name: str, key: Key) -> tuple[Any, ...]:
    from .model import _natural

    return (_order(os_name)[key[0]], *[_natural(str(k)) for k in key[1:]])


def _is_port_knob(os_name: str, key: Key) -> bool:
    return bool(_knob(os_name, key).per_port)


def _in_scope(os_name: str, state: str, key: Key, ports: set[str]) -> bool:
    if not _is_port_knob(os_name, key) or state == "overridden":
        return True
    return key[1] in ports


def changes(
    state: str, want: Facts, have: Facts, os_name: str, ports: Iterable[str] = ()
) -> tuple[list[tuple[Key, Any]], list[tuple[Key, Any]]]:
    """(to set, to remove) as fact lists, in send order."""
    if state not in STATES:
        raise SwitchError(f"state {state!r} is not one of {', '.join(STATES)}.")
    if state in {"gathered", "parsed"}:
        return [], []
    if state == "rendered":
        have = {}
    scope = set(ports)
    to_set = [] if state == "deleted" else [(k, v) for k, v in want.items() if have.get(k) != v]
    to_remove = []
    if state in {"replaced", "overridden", "deleted"}:
        for k, v in have.items():
            if state != "deleted" and k in want:
                continue
            if _in_scope(os_name, state, k, scope) and _knob(os_name, k).render_remove(k, v) is not None:
                to_remove.append((k, v))
    to_set.sort(key=lambda kv: _sort_key(os_name, kv[0]))
    # removal: per-port knobs before the global ones they depend on
    to_remove.sort(key=lambda kv: _sort_key(os_name, kv[0]), reverse=True)
    return to_set, to_remove


def _onyx_port_spec(ports: Sequence[str]) -> list[str]:
    """['Eth1/1','Eth1/2','Eth1/4'] -> ['1/1-1/2', '1/4'] (Onyx interface ranges, same slot)."""
    parsed: dict[str, list[int]] = {}
    for p in ports:
        slot, _, num = p[3:].rpartition("/")
        parsed.setdefault(slot, []).append(int(num))
    out = []
    for slot, nums in parsed.items():
        nums.sort()
        start = prev = nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            out.append(f"{slot}/{start}" if start == prev else f"{slot}/{start}-{slot}/{prev}")
            if n is not None:
                start = prev = n
    return out


def _nvue_port_spec(ports: Sequence[str]) -> list[str]:
    """['swp1','swp2','swp4'] -> ['swp1-2', 'swp4'] (breakout ports stay single)."""
    singles = [p for p in ports if "s" in p[3:]]
    nums = sorted(int(p[3:]) for p in ports if p not in singles)
    out: list[str] = []
    if nums:
        start = prev = nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            out.append(f"swp{start}" if start == prev else f"swp{start}-{prev}")
            if n is not None:
                start = prev = n
    return out + singles


def _render(os_name: str, items: list[tuple[Key, Any]], remove: bool) -> list[str]:
    """Commands for facts; per-port commands with the same text are grouped into port ranges."""
    lines: list[str] = []
    grouped: dict[str, list[str]] = {}
    order: list[str] = []
    for key, value in items:
        knob = _knob(os_name, key)
        if not knob.per_port:
            text = knob.render_remove(key, value) if remove else knob.render(key, value)
            if text is not None:
                order.append(text)
                grouped.setdefault(text, [])
            continue
        # render with a placeholder port so identical commands on several ports group together
        port = key[1]
        templ_key = (key[0], PORT_PLACEHOLDER, *key[2:])
        text = knob.render_remove(templ_key, value) if remove else knob.render(templ_key, value)
        if text is None:
            continue
        if text not in grouped:
            order.append(text)
            grouped[text] = []
        grouped[text].append(port)
    for text in order:
        ports = grouped[text]
        if not ports:
            lines.append(text)
        elif os_name == "onyx":
            lines += [f"interface ethernet {spec} {text}" for spec in _onyx_port_spec(ports)]
        else:
            lines.append(text.replace(PORT_PLACEHOLDER, ",".join(_nvue_port_spec(ports))))
    try:
        return [check_line(line) for line in lines]
    except UnsafeLine as exc:
        raise SwitchError(str(exc)) from None


def compute(state: str, want: Facts, have: Facts, os_name: str, ports: Iterable[str] = ()) -> list[str]:
    """The commands that take ``have`` to ``want`` under ``state`` (removals first)."""
    to_set, to_remove = changes(state, want, have, os_name, ports)
    return _render(os_name, to_remove, remove=True) + _render(os_name, to_set, remove=False)


def apply_facts(state: str, want: Facts, have: Facts, os_name: str, ports: Iterable[str] = ()) -> Facts:
    """The facts after the commands of :func:`compute` are applied (the predicted ``after``)."""
    to_set, to_remove = changes(state, want, have, os_name, ports)
    after = dict(have) if state != "rendered" else {}
    for k, _v in to_remove:
        after.pop(k, None)
    after.update(to_set)
    return after


def config_lines(os_name: str, facts: Facts) -> list[str]:
    """Facts as configuration lines (the text of ``diff`` before/after), one per fact, sorted."""
    out = []
    for key, value in sorted(facts.items(), key=lambda kv: _sort_key(os_name, kv[0])):
        knob = _knob(os_name, key)
        text = knob.render(key, value)
        if os_name == "onyx" and knob.per_port:
            text = f"interface ethernet {key[1][3:]} {text}"
        out.append(text)
    return out


def structured(os_name: str, facts: Facts) -> dict[str, Any]:
    """Facts as a JSON-friendly document: ``global`` knobs and ``ports`` -> knobs."""
    doc: dict[str, Any] = {"global": {}, "ports": {}}
    for key, value in sorted(facts.items(), key=lambda kv: _sort_key(os_name, kv[0])):
        knob = _knob(os_name, key)
        val = list(value) if isinstance(value, tuple) else value
        ident = [str(k) for k in (key[2:] if knob.per_port else key[1:])]
        target = doc["ports"].setdefault(key[1], {}) if knob.per_port else doc["global"]
        if ident:
            node = target.setdefault(key[0], {})
            for part in ident[:-1]:
                node = node.setdefault(part, {})
            node[ident[-1]] = val
        else:
            target[key[0]] = val
    return doc


# --------------------------------------------------------------------------- reading the device


def facts_from_onyx_config(text: str) -> Facts:
    """Facts from ``show running-config`` text (the configured state)."""
    rc = onyx_parser.parse_running_config(text)
    return onyx_facts(rc.global_lines, rc.interfaces)


def _json_tree(text: str, what: str) -> dict[str, Any]:
    body = "\n".join(ln for ln in text.replace("\r\n", "\n").splitlines() if not ln.startswith("Error:"))
    if "Error: The requested item does not exist" in text or not body.strip():
        return {}  # nothing configured under that path
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise ParseError(what, "JSON from -o json", f"got {text.strip()[:60]!r}") from None
    if not isinstance(doc, dict):
        raise ParseError(what, "a JSON object", f"got {type(doc).__name__}")
    return doc


def gather(os_name: str, data: Mapping[str, str], ports: Sequence[str] = ()) -> tuple[Facts, dict[str, Any]]:
    """(configured facts, operational view) from the raw texts of ``transport.get_roce_data``.

    The diff is computed from the *configured* state (Onyx running-config, NVUE applied revision):
    Onyx's json-print shows report effective values that include the ``roce`` one-shot's implied
    defaults, so they cannot tell what is configured from what is implied. The json-print / ``-o
    json`` shows are parsed into the operational view, which the apply flow verifies after a change.
    """
    if os_name == "onyx":
        facts = facts_from_onyx_config(data["running-config"])
        oper: dict[str, Any] = {"ports": {}}
        if data.get("pfc"):
            pfc = onyx_parser.parse_pfc(data["pfc"])
            oper["pfc"] = {"enabled": pfc.enabled, "priorities": pfc.priorities_enabled}
            for name, iface in pfc.interfaces.items():
                if not ports or name in ports:
                    oper["ports"].setdefault(name, {})["pfc"] = iface.enabled
        if data.get("qos"):
            qos = onyx_parser.parse_qos_trust(data["qos"])
            for name, iface in qos.interfaces.items():
                if not ports or name in ports:
                    oper["ports"].setdefault(name, {})["trust"] = iface.trust
        for name in ports:
            text = data.get(f"ecn:{name}")
            if text:
                ecn = onyx_parser.parse_ecn(text)
                oper["ports"].setdefault(name, {})["ecn"] = {
                    str(tc): [t.min_threshold, t.max_threshold]
                    for tc, t in sorted(ecn.traffic_classes.items())
                    if t.ecn
                }
        return facts, oper
    qos = _json_tree(data.get("qos", ""), "nv show qos --rev=applied -o json")
    ifaces = _json_tree(data.get("interface", ""), "nv show interface --rev=applied -o json")
    facts = nvue_facts(qos, ifaces)
    oper = {}
    if data.get("roce"):
        rec = nvue_parser.parse_qos_roce(data["roce"])
        oper = {
            "mode": rec.mode,
            "pfc_priority": rec.pfc_priority,
            "trust": rec.trust,
            "ecn_traffic_classes": rec.ecn_traffic_classes,
            "min_threshold_bytes": rec.min_threshold_bytes,
            "max_threshold_bytes": rec.max_threshold_bytes,
        }
    return facts, oper
