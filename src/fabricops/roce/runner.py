"""The whole ``fabricops.fabric.roce_switch`` task as one plain function (the action plugin is a shim).

:func:`run` validates the input, reads the switch through the transport seam, computes the commands
for the state, and applies them unless in check mode. It returns the module result: ``before``,
``commands``, ``after``, ``diff``, ``changed`` (and ``gathered`` / ``rendered`` / ``parsed``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fabricops.errors import FabricopsError
from fabricops.roce.platforms import switch_platform
from fabricops.switch.errors import SwitchError
from fabricops.switch.knobs import Facts
from fabricops.switch.lock import device_key, switch_lock
from fabricops.switch.oses import normalize_os

from .change import ChangeFailed
from .resource import (
    STATES,
    apply_facts,
    compute,
    config_lines,
    gather,
    gathered,
    get_roce_data,
    parse_config,
    structured,
)
from .switchspec import (
    normalize_confirm_timeout,
    normalize_ports,
    ports_from_cabling,
    switch_spec,
    want_facts,
)

__all__ = ["run"]


def _diff(os_name: str, switch: str, before: Facts, after: Facts) -> dict[str, str]:
    def text(facts: Facts) -> str:
        lines = config_lines(os_name, facts)
        return "\n".join(lines) + ("\n" if lines else "")

    return {
        "before": text(before),
        "after": text(after),
        "before_header": f"{switch} (RoCE configuration)",
        "after_header": f"{switch} (RoCE configuration)",
    }


def run(
    *,
    switch: str,
    os_name: str,
    state: str = "merged",
    roce: Mapping[str, Any] | None = None,
    ports: Sequence[str] | None = None,
    cabling: Sequence[Mapping[str, Any]] | None = None,
    links: Sequence[Mapping[str, Any]] | None = None,
    pfc_watchdog: bool = True,
    ets_lossless_percent: int = 50,
    buffer_pool: str | None = "default",
    check_mode: bool = False,
    save: bool = True,
    confirm_timeout: str = "120s",
    discard_pending: bool = False,
    running_config: str | None = None,
    connector: Callable[[], Any] | None = None,
    device: tuple[str, int] | Callable[[], tuple[str, int]] | None = None,
) -> dict[str, Any]:
    """One switch, one state. Raises :class:`FabricopsError` (one sentence naming switch and step).

    A change (merged / replaced / overridden / deleted, not in check mode) holds the switch's
    controller-side lock from before the first connection to the end, so a second run on the same
    switch stops before it sends anything and names the first; a failed change raises
    :class:`fabricops.roce.change.ChangeFailed`, whose ``outcome`` says what the switch holds.

    ``device``: the (address, port) the connection reaches (or a function returning it, resolved
    only when a change takes the lock): the lock's key, so every inventory name of one switch shares
    one lock; None: the lock is keyed by ``switch``.
    """
    if state not in STATES:
        raise SwitchError(f"{switch}: state {state!r} is not one of {', '.join(STATES)}.")
    os_name = normalize_os(os_name)
    try:
        confirm_timeout = normalize_confirm_timeout(confirm_timeout)
    except SwitchError as exc:
        raise SwitchError(f"{switch}: step 'validate' failed: {exc}") from None
    if state == "parsed":
        if not running_config:
            raise SwitchError(
                f"{switch}: state parsed needs running_config (the device's configuration text)."
            )
        facts = parse_config(os_name, running_config)
        return {"changed": False, "parsed": structured(os_name, facts), "commands": []}
    # explicit ports are the whole list; else the host-facing ports and the inter-switch link ends
    port_list = list(ports or []) or ports_from_cabling(cabling, switch, links)
    spec = None
    if state != "gathered":
        if not port_list and state != "deleted":
            raise SwitchError(
                f"{switch}: no ports to configure: fabricops_cabling has no entry with switch: {switch}, "
                "fabricops_switch_links none with it as switch_a or switch_b, and roce_switch_ports is empty."
            )
        try:
            spec = switch_spec(
                os_name,
                roce,
                port_list,
                pfc_watchdog=pfc_watchdog,
                ets_lossless_percent=ets_lossless_percent,
                buffer_pool=buffer_pool,
            )
        except FabricopsError as exc:
            raise SwitchError(f"{switch}: step 'validate' failed: {exc}") from None
        port_list = spec.ports
    else:
        port_list = normalize_ports(os_name, port_list)
    want = want_facts(spec) if spec else {}
    if state == "rendered":
        commands = compute("rendered", want, {}, os_name, port_list)
        return {"changed": False, "rendered": commands, "commands": commands, "ports": port_list}

    if connector is None:
        raise SwitchError(f"{switch}: no connection details to reach the switch.")
    if state in {"merged", "replaced", "overridden", "deleted"} and not check_mode:
        where = device() if callable(device) else device
        key = device_key(*where) if where else None
        with switch_lock(switch, f"roce_switch state={state}", key):
            return _session(switch, os_name, state, want, port_list, check_mode, save, confirm_timeout,
                            discard_pending, connector)
    return _session(switch, os_name, state, want, port_list, check_mode, save, confirm_timeout,
                    discard_pending, connector)


def _session(
    switch: str,
    os_name: str,
    state: str,
    want: Facts,
    port_list: list[str],
    check_mode: bool,
    save: bool,
    confirm_timeout: str,
    discard_pending: bool,
    connector: Callable[[], Any],
) -> dict[str, Any]:
    step = "connect"
    try:
        conn = connector()
    except FabricopsError:
        raise
    except Exception as exc:
        raise SwitchError(
            f"{switch}: step 'connect' failed: {type(exc).__name__}: {_first_line(exc)}"
        ) from None
    try:
        step = "read"
        try:
            data = get_roce_data(conn, os_name, port_list)
            before, oper = gather(os_name, data, port_list)
        except FabricopsError as exc:
            raise SwitchError(f"{switch}: step 'read' failed: {exc}") from None
        except Exception as exc:
            raise SwitchError(
                f"{switch}: step 'read' failed: {type(exc).__name__}: {_first_line(exc)}"
            ) from None
        result: dict[str, Any] = {
            "changed": False,
            "before": structured(os_name, before),
            "operational": oper,
            "ports": port_list,
        }
        if state == "gathered":
            # the shape users write (roce, ports, options), the per-knob facts under `knobs`
            result.update(gathered=gathered(os_name, before), commands=[])
            return result
        commands = compute(state, want, before, os_name, port_list)
        predicted = apply_facts(state, want, before, os_name, port_list)
        result["commands"] = commands
        result["diff"] = _diff(os_name, switch, before, predicted)
        if not commands:
            result["after"] = result["before"]
            return result
        if check_mode:
            result.update(changed=True, after=structured(os_name, predicted))
            return result
        plat = switch_platform(os_name)
        # NVUE: refuse (or detach, when allowed) a pending revision that is not ours; Onyx: nothing
        sent_first = plat.before_apply(conn, switch, data, discard_pending)
        step = "apply"
        try:
            outcome = plat.apply(
                conn,
                commands,
                switch=switch,
                reconnect=connector,
                data=data,
                before_facts=before,
                want=want,
                state=state,
                ports=port_list,
                save=save,
                confirm_timeout=confirm_timeout,
            )
        except ChangeFailed as exc:
            exc.sent = sent_first + exc.sent
            raise
        after = outcome.after or predicted
        result.update(
            changed=outcome.changed,
            after=structured(os_name, after),
            sent=sent_first + outcome.sent,
            notes=outcome.notes,
            outcome=outcome.outcome if outcome.changed else "unchanged",
        )
        if outcome.after_data:
            result["operational_after"] = gather(os_name, outcome.after_data, port_list)[1]
        result["diff"] = _diff(os_name, switch, before, after)
        return result
    finally:
        del step
        with contextlib.suppress(Exception):  # already closed by the apply flow
            conn.disconnect()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return " ".join(" ".join(text).split())[:300] if text else "no detail"
