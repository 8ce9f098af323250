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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fabricops.roce.platforms import switch_platform
from fabricops.switch.errors import SwitchError
from fabricops.switch.knobs import PORT_PLACEHOLDER, Facts, Key, UnsafeLine, check_line

__all__ = [
    "STATES",
    "apply_facts",
    "compute",
    "config_lines",
    "facts_from_onyx_config",
    "gather",
    "gathered",
    "parse_config",
    "structured",
]

STATES = ("merged", "replaced", "overridden", "deleted", "gathered", "rendered", "parsed")


def _platform(os_name: str) -> Any:
    from fabricops.roce.platforms import switch_platform

    return switch_platform(os_name)


def _knob(os_name: str, key: Key) -> Any:
    return _platform(os_name).knob(key)


def _sort_key(os_name: str, key: Key) -> tuple[Any, ...]:
    return _platform(os_name).sort_key(key)


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
    plat = _platform(os_name)
    for text in order:
        ports = grouped[text]
        if not ports:
            lines.append(text)
        else:  # Onyx: `interface ethernet 1/1-1/2 ...`; NVUE: `nv set interface swp1-2 ...`
            lines += plat.group_port_lines(text, ports)
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
    plat = _platform(os_name)
    out = []
    for key, value in sorted(facts.items(), key=lambda kv: plat.sort_key(kv[0])):
        knob = plat.knob(key)
        out.append(plat.config_line(knob, key, knob.render(key, value)))
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
    return _platform("onyx").parse_config(text)


def parse_config(os_name: str, text: str) -> Facts:
    """Facts of the configuration text a user gives (``state: parsed``): Onyx ``show
    running-config``, NVUE ``nv config show`` (YAML or JSON)."""
    return _platform(os_name).parse_config(text)


def gather(os_name: str, data: Mapping[str, str], ports: Sequence[str] = ()) -> tuple[Facts, dict[str, Any]]:
    """(configured facts, operational view) from the raw texts of :func:`get_roce_data`.

    The diff is computed from the *configured* state (Onyx running-config, NVUE applied revision):
    Onyx's json-print shows report effective values that include the ``roce`` one-shot's implied
    defaults, so they cannot tell what is configured from what is implied. The json-print / ``-o
    json`` shows are parsed into the operational view, which the apply flow verifies after a change.
    """
    return _platform(os_name).gather(data, ports)


def gathered(os_name: str, facts: Facts) -> dict[str, Any]:
    """``state: gathered`` in the shape users write: ``roce`` (the ``fabricops_roce`` fields the
    switch holds), ``ports``, ``pfc_watchdog``, ``ets_lossless_percent`` (and NVUE's
    ``buffer_pool``), ``notes`` where the switch holds what one definition cannot say, and the raw
    per-knob facts under ``knobs`` (the :func:`structured` document)."""
    out = _platform(os_name).user_shape(facts)
    out["knobs"] = structured(os_name, facts)
    return out


def get_roce_data(connection: Any, os_name: str, ports: Sequence[str] = ()) -> dict[str, str]:
    """Raw CLI text of everything the RoCE resource reads (show commands only).

    The show commands are the platform's (``fabricops.roce.platforms.onyx.OnyxPlatform.read``:
    enable mode, ``show running-config``, the json-print shows; ``...nvue.NvuePlatform.read``: the
    applied revision's ``nv show ... -o json``, ``nv show qos roce``, ``nv config diff``)."""
    return switch_platform(os_name).read(connection, ports)
