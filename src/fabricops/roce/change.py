"""A switch change is whole: checked before, applied, verified, and after any failure compared.

Called by :func:`fabricops.roce.runner.run` (which holds the controller-side lock, ``lock.py``)
with an open session and what it read. Every failure raises :class:`ChangeFailed`, whose
``outcome`` says what the switch holds, checked by reading it back over a new session:

- ``refused``: the device-side check found another change (nothing was sent, or what was staged
  was detached before anything was applied);
- ``restored``: the change was undone and the switch's configuration (Onyx: the whole running
  config; NVUE: the whole applied revision) equals the one read before the change;
- ``not_restored``: it does not (the message lists what differs), or it could not be read back;
- ``live``: the change is in effect (verified; NVUE: confirmed) but the save did not complete or
  was not confirmed; the message says exactly what is live, confirmed and saved.

Onyx: fingerprint of ``show running-config`` taken when read, read again and compared right before
the commit sequence; commands in config mode; verify; ``configuration write``. On failure a new
session sends the commands that take the RoCE knobs back (``overridden`` to the before facts, the
same knob table) and compares the running config with the one before.

NVUE: the applied revision (``nv config show -o json``) compared with the one read, a pending
revision that is not ours refused; ``nv set``/``nv unset``; ``nv config diff`` must hold only QoS
changes; the applied revision compared again right before ``nv config apply --confirm T -y``; a new
session verifies and confirms (``--confirm-yes``), then ``nv config save``. On failure a new
session rolls back an unconfirmed apply (``--confirm-no``), detaches the pending revision and
compares the applied revision with the one before.

A port's administrative state (``fabricops act``'s quarantine, :func:`port_admin_onyx`,
:func:`port_admin_nvue`; the caller holds the lock) is one line, read back, saved: Onyx
``interface ethernet 1/N [no] shutdown`` then ``configuration write``; NVUE ``nv set interface swpN
link state down|up`` on a switch with no pending revision, ``nv config apply -y``, ``nv config save``.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import FabricopsError
from fabricops.parsers.nvue import parse_config_diff
from fabricops.switch.errors import SwitchError
from fabricops.switch.knobs import Facts, check_line
from fabricops.switch.transport import NVUE_ERROR, ONYX_ERROR

from .platforms.nvue import nvue_facts
from .resource import compute, facts_from_onyx_config, gather, get_roce_data

__all__ = [
    "APPLY_TIMEOUT",
    "READ_TIMEOUT",
    "ApplyResult",
    "ChangeFailed",
    "apply_nvue",
    "apply_onyx",
    "port_admin_nvue",
    "port_admin_onyx",
]

#: seconds one command may take before the session counts as frozen (``nv config apply``: APPLY_TIMEOUT)
READ_TIMEOUT = 30.0
APPLY_TIMEOUT = 120.0
_OURS = re.compile(r"^(?:set|unset) (?:qos|interface \S+ qos)(?: |$)")

Connector = Callable[[], Any]


@dataclass
class ApplyResult:
    changed: bool
    sent: list[str] = field(default_factory=list)  #: every configuration command sent, in order
    after: Facts = field(default_factory=dict)
    after_data: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    outcome: str = "applied"


class ChangeFailed(SwitchError):
    """A failed change; ``outcome`` is what the switch holds (see the module doc)."""

    def __init__(self, message: str, outcome: str, difference: Sequence[str] = (), sent: Sequence[str] = ()):
        super().__init__(message)
        self.outcome = outcome
        self.difference = list(difference)
        self.sent = list(sent)


class _Step(FabricopsError):
    def __init__(self, step: str, detail: str):
        super().__init__(detail)
        self.step, self.detail = step, detail


def _reason(exc: BaseException) -> str:
    if isinstance(exc, _Step):
        return exc.detail
    name = type(exc).__name__
    text = " ".join(re.split(r"\s*Things you might try", str(exc))[0].split())[:200]
    if name == "ConfigInvalidException":
        return f"the switch rejected a command ({text})"
    if "Timeout" in name:
        return f"the session froze: no prompt came back ({name}: {text})"
    return f"the session dropped ({name}: {text})" if text else f"the session dropped ({name})"


def _disconnect(conn: Any) -> None:
    with contextlib.suppress(Exception):  # a dead session may fail to close
        conn.disconnect()


def _send(conn: Any, command: str, timeout: float | None = None) -> str:
    return conn.send_command(check_line(command), read_timeout=timeout or READ_TIMEOUT) or ""


def _squeeze(text: str) -> str:
    return " ".join(text.split())[:200]


def _verify(conn: Any, os_name: str, want: Facts, state: str, ports: Sequence[str]) -> tuple[Facts, dict]:
    data = get_roce_data(conn, os_name, ports)
    facts, _oper = gather(os_name, data, ports)
    left = compute(state, want, facts, os_name, ports)
    if left:
        raise _Step("verify", f"after the change the switch still needs: {'; '.join(left[:5])}")
    return facts, data


def _differences(before: Sequence[str], now: Sequence[str], limit: int = 6) -> list[str]:
    """What differs between two line lists: '-line' (gone) and '+line' (new), in order."""
    gone = [f"-{ln}" for ln in before if ln not in set(now)]
    new = [f"+{ln}" for ln in now if ln not in set(before)]
    out = gone + new
    if not out and list(before) != list(now):
        out = ["the same lines in another order"]
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])


# --------------------------------------------------------------------------- Onyx


def onyx_lines(running_config: str) -> list[str]:
    """The running config as compared: without the ``## Generated at`` stamp and blank lines."""
    return [
        ln.rstrip()
        for ln in running_config.replace("\r\n", "\n").splitlines()
        if ln.strip() and not ln.startswith("## Generated at")
    ]


def apply_onyx(
    conn: Any,
    commands: Sequence[str],
    *,
    switch: str,
    reconnect: Connector,
    before_config: str,
    before_facts: Facts,
    want: Facts,
    state: str,
    ports: Sequence[str],
    save: bool,
) -> ApplyResult:
    commands = [check_line(c) for c in commands]
    before = onyx_lines(before_config)
    try:
        now = onyx_lines(_send(conn, "show running-config"))
    except Exception as exc:
        raise ChangeFailed(
            f"{switch}: step 'check' failed: {_reason(exc)}; nothing was sent.", "refused"
        ) from None
    diff = _differences(before, now)
    if diff:
        raise ChangeFailed(
            f"{switch}: step 'check' failed: the running configuration changed since it was read "
            f"({'; '.join(diff)}): another change is being made on the switch; nothing was sent. "
            "Run again when it has finished.",
            "refused",
            diff,
        )
    result = ApplyResult(changed=True, sent=list(commands))
    step = "send"
    try:
        enable = getattr(conn, "enable", None)
        if callable(enable):  # config mode needs enable mode (netmiko does not enter it at login)
            enable()
        conn.send_config_set(commands, error_pattern=ONYX_ERROR, read_timeout=READ_TIMEOUT)
        step = "verify"
        result.after, result.after_data = _verify(conn, "onyx", want, state, ports)
    except Exception as exc:
        _disconnect(conn)
        outcome, sentence, difference = _restore_onyx(reconnect, before, before_facts)
        raise ChangeFailed(
            f"{switch}: step '{step}' failed: {_reason(exc)}. {sentence} Nothing was saved "
            "(configuration write not sent).",
            outcome,
            difference,
            commands,
        ) from None
    if not save:
        return result
    try:
        # a config-mode command on Onyx (netmiko's own save_config and mellanox.onyx onyx_config send
        # it inside `configure terminal`): sent through config mode, as they do
        out = conn.send_config_set([check_line("configuration write")], read_timeout=READ_TIMEOUT) or ""
        if re.search(ONYX_ERROR, out, re.M):
            raise _Step("save", f"configuration write answered: {_squeeze(out)}")
    except Exception as exc:
        _disconnect(conn)
        raise ChangeFailed(
            f"{switch}: step 'save' failed: {_reason(exc)}. The change is live and verified in the running "
            "configuration, but the saved configuration may still be the previous one; save it on the "
            "switch (configuration write).",
            "live",
            sent=[*commands, "configuration write"],
        ) from None
    result.sent.append("configuration write")
    return result


def _restore_onyx(reconnect: Connector, before: list[str], before_facts: Facts) -> tuple[str, str, list[str]]:
    """Take the running config back over a new session; (outcome, sentence, difference)."""
    try:
        conn = reconnect()
    except Exception as exc:
        return (
            "not_restored",
            f"NOT restored: could not reconnect ({_reason(exc)}); the running configuration may hold part "
            "of the change. The saved configuration is unchanged (a reload restores it).",
            ["unknown: the switch could not be read back"],
        )
    try:
        enable = getattr(conn, "enable", None)
        if callable(enable):  # show running-config is an enable-mode command (see get_roce_data)
            enable()
        facts = facts_from_onyx_config(_send(conn, "show running-config"))
        undo = [check_line(c) for c in compute("overridden", before_facts, facts, "onyx")]
        if undo:
            conn.send_config_set(undo, error_pattern=ONYX_ERROR, read_timeout=READ_TIMEOUT)
        now = onyx_lines(_send(conn, "show running-config"))
    except Exception as exc:
        return (
            "not_restored",
            f"NOT restored: restoring failed ({_reason(exc)}); the running configuration may hold part of "
            "the change. The saved configuration is unchanged (a reload restores it).",
            ["unknown: the restore did not complete"],
        )
    finally:
        _disconnect(conn)
    diff = _differences(before, now)
    if not diff:
        return (
            "restored",
            f"The previous configuration was restored ({len(undo)} command(s) over a new session): "
            "the running configuration equals the one read before the change.",
            [],
        )
    return (
        "not_restored",
        f"NOT restored: the running configuration differs from the one before the change: {'; '.join(diff)}.",
        diff,
    )


# --------------------------------------------------------------------------- NVUE


def nvue_config(conn: Any) -> dict[str, Any]:
    """The applied revision as a tree (``nv config show -o json``: ``[{header}, {set: tree}]``)."""
    text = _send(conn, "nv config show -o json")
    body = "\n".join(ln for ln in text.replace("\r\n", "\n").splitlines() if not ln.startswith("Error:"))
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise _Step("read", f"nv config show -o json did not answer JSON ({_squeeze(text)[:60]!r})") from None
    tree: dict[str, Any] = {}
    for item in doc if isinstance(doc, list) else [doc]:
        if isinstance(item, Mapping) and isinstance(item.get("set"), Mapping):
            tree.update(item["set"])
    return tree


def _flat(tree: Any, prefix: str = "") -> list[str]:
    if isinstance(tree, Mapping) and tree:
        return [ln for k in sorted(tree, key=str) for ln in _flat(tree[k], f"{prefix} {k}".strip())]
    return [prefix] if isinstance(tree, Mapping) else [f"{prefix} {tree}"]


def apply_nvue(
    conn: Any,
    commands: Sequence[str],
    *,
    switch: str,
    reconnect: Connector,
    before_facts: Facts,
    want: Facts,
    state: str,
    ports: Sequence[str],
    save: bool,
    confirm_timeout: str,
) -> ApplyResult:
    commands = [check_line(c) for c in commands]
    apply_cmd = check_line(f"nv config apply --confirm {confirm_timeout} -y")
    result = ApplyResult(changed=True)
    try:
        before = nvue_config(conn)
    except Exception as exc:
        raise ChangeFailed(
            f"{switch}: step 'check' failed: {_reason(exc)}; nothing was sent.", "refused"
        ) from None
    if nvue_facts(before.get("qos"), before.get("interface")) != before_facts:
        raise ChangeFailed(
            f"{switch}: step 'check' failed: the applied revision changed since it was read: another change "
            "is being made on the switch; nothing was sent. Run again when it has finished.",
            "refused",
        )
    step, applied = "stage", False
    try:
        for cmd in commands:
            out = _send(conn, cmd)
            result.sent.append(cmd)
            if NVUE_ERROR.search(out):
                raise _Step("stage", f"'{cmd}' answered: {_squeeze(out)}")
        step = "diff"
        diff = parse_config_diff(_send(conn, "nv config diff"))
        if diff.empty:
            _send(conn, "nv config detach")
            result.sent.append("nv config detach")
            result.changed = False
            result.notes.append("nv config diff was empty: nothing applied")
            return result
        step = "check"
        foreign = [c for c in diff.changes if not _OURS.match(c)]
        if foreign:
            raise _Step(
                "check", f"the pending revision holds changes that are not ours ({'; '.join(foreign[:3])})"
            )
        now = nvue_config(conn)
        if now != before:
            changed = _differences(_flat(before), _flat(now))
            raise _Step("check", f"the applied revision changed since it was read ({'; '.join(changed)})")
        step, applied = "apply", True  # from here the apply may have happened, even without an answer
        out = _send(conn, apply_cmd, APPLY_TIMEOUT)
        result.sent.append(apply_cmd)
        if NVUE_ERROR.search(out) or "applied" not in out:
            raise _Step("apply", f"'{apply_cmd}' answered: {_squeeze(out)}")
    except Exception as exc:
        _disconnect(conn)
        raise _nvue_failure(
            switch, step, exc, reconnect, before, applied, confirm_timeout, result.sent
        ) from None
    _disconnect(conn)
    # reachability: a new session must reach the switch and see the wanted state before confirming
    step = "confirm"
    conn2 = None
    try:
        conn2 = reconnect()
        step = "verify"
        result.after, result.after_data = _verify(conn2, "cumulus", want, state, ports)
        step = "confirm"
        out = _send(conn2, "nv config apply --confirm-yes")
        result.sent.append("nv config apply --confirm-yes")
        if NVUE_ERROR.search(out):
            raise _Step("confirm", f"'nv config apply --confirm-yes' answered: {_squeeze(out)}")
    except Exception as exc:
        if conn2 is not None:
            _disconnect(conn2)
        raise _nvue_failure(
            switch, step, exc, reconnect, before, True, confirm_timeout, result.sent
        ) from None
    if not save:
        # Cumulus Linux 5.9+ auto-saves on apply (NVUE Command Reference, "Config Commands"): say so
        try:
            auto = parse_config_diff(_send(conn2, "nv config diff applied startup")).empty
        except Exception:
            auto = False
        _disconnect(conn2)
        result.notes.append(
            "live and confirmed; saved anyway by the switch's auto-save (Cumulus Linux 5.9 and later save on "
            "apply unless 'nv set system config auto-save enable off'); save: false cannot prevent it"
            if auto
            else "live and confirmed; not saved (save: false)"
        )
        return result
    try:
        out = _send(conn2, "nv config save")
        if NVUE_ERROR.search(out):
            raise _Step("save", f"'nv config save' answered: {_squeeze(out)}")
    except Exception as exc:
        _disconnect(conn2)
        saved = _nvue_saved(reconnect)
        raise ChangeFailed(
            f"{switch}: step 'save' failed: {_reason(exc)}. The change is live and confirmed; "
            f"saved: {saved}.",
            "live",
            sent=result.sent,
        ) from None
    _disconnect(conn2)
    result.sent.append("nv config save")
    return result


def _nvue_saved(reconnect: Connector) -> str:
    """'yes' / 'no' / 'unknown (...)': does the startup revision hold the applied one?"""
    try:
        conn = reconnect()
    except Exception as exc:
        return f"unknown (could not reconnect: {_reason(exc)})"
    try:
        return "yes" if parse_config_diff(_send(conn, "nv config diff applied startup")).empty else "no"
    except Exception as exc:
        return f"unknown ({_reason(exc)})"
    finally:
        _disconnect(conn)


def _nvue_failure(
    switch: str,
    step: str,
    exc: BaseException,
    reconnect: Connector,
    before: dict[str, Any],
    applied: bool,
    confirm_timeout: str,
    sent: list[str],
) -> ChangeFailed:
    """Clean up over a new session, read the applied revision back and say what it holds."""
    head = f"{switch}: step '{step}' failed: {_reason(exc)}."
    refused = step == "check"
    try:
        conn = reconnect()
    except Exception as exc2:
        tail = (
            f" an unconfirmed apply rolls back by itself within {confirm_timeout}, a confirmed one stays"
            if applied
            else " nothing was applied, a pending revision may remain"
        )
        return ChangeFailed(
            f"{head} NOT restored: could not reconnect ({_reason(exc2)}) to check the switch:{tail}.",
            "not_restored",
            ["unknown: the switch could not be read back"],
            sent,
        )
    notes: list[str] = []
    try:
        confirmed = None
        if applied:
            status = _send(conn, "nv config apply --confirm-status")
            if "no pending confirm" in status.lower():
                confirmed = True
            else:
                _send(conn, "nv config apply --confirm-no")
                sent.append("nv config apply --confirm-no")
                notes.append("the unconfirmed apply was rolled back (nv config apply --confirm-no)")
                confirmed = False
        if not parse_config_diff(_send(conn, "nv config diff")).empty:
            _send(conn, "nv config detach")
            sent.append("nv config detach")
            notes.append("the pending revision was detached")
        now = nvue_config(conn)
        saved = "yes" if parse_config_diff(_send(conn, "nv config diff applied startup")).empty else "no"
    except Exception as exc2:
        return ChangeFailed(
            f"{head} NOT restored: cleaning up failed ({_reason(exc2)}); the switch could not be read back.",
            "not_restored",
            ["unknown: the cleanup did not complete"],
            sent,
        )
    finally:
        _disconnect(conn)
    done = (" " + "; ".join(notes).capitalize() + ".") if notes else ""
    diff = _differences(_flat(before), _flat(now))
    if refused and not diff:
        return ChangeFailed(
            f"{head} Refused: another change is being made on the switch; nothing of this change was "
            f"applied.{done} The applied revision equals the one read before. Run again when the other "
            "change has finished.",
            "refused",
            diff,
            sent,
        )
    if refused:  # the other change's apply may have taken what this one had staged
        return ChangeFailed(
            f"{head} Refused to apply: another change is being made on the switch.{done} NOT restored: the "
            "applied revision differs from the one read before (the other change, and possibly what this "
            f"change had staged): {'; '.join(diff)}. Check the switch before running again.",
            "not_restored",
            diff,
            sent,
        )
    if not diff:
        return ChangeFailed(
            f"{head}{done} Restored: the applied revision equals the one read before the change.",
            "restored",
            [],
            sent,
        )
    if confirmed:
        return ChangeFailed(
            f"{head}{done} NOT restored: the change is live and confirmed (no confirm is pending); saved: "
            f"{saved}. The applied revision differs from the one before: {'; '.join(diff)}.",
            "live",
            diff,
            sent,
        )
    return ChangeFailed(
        f"{head}{done} NOT restored: the applied revision differs from the one before the change: "
        f"{'; '.join(diff)}.",
        "not_restored",
        diff,
        sent,
    )


# --------------------------------------------------------------------------- a port's admin state


def port_admin_onyx(
    conn: Any,
    *,
    switch: str,
    port: str,
    state: str,
    commands: Sequence[str],
    read: Callable[[Any], str | None],
) -> list[str]:
    """Onyx: the interface line in config mode, the port read back, ``configuration write``
    (``commands``: the platform's ``port_admin_commands``). Returns the commands sent; raises
    :class:`SwitchError` with one sentence naming the step and what the switch holds."""
    *config, save = [check_line(c) for c in commands]
    sent: list[str] = []
    step = "send"
    try:
        enable = getattr(conn, "enable", None)
        if callable(enable):  # config mode needs enable mode (netmiko does not enter it at login)
            enable()
        conn.send_config_set(config, error_pattern=ONYX_ERROR, read_timeout=READ_TIMEOUT)
        sent += config
        step = "verify"
        now = read(conn)
        if now != state:
            raise _Step("verify", f"read back, {port} is administratively {now or 'not listed'}, not {state}")
        step = "save"
        out = conn.send_config_set([save], read_timeout=READ_TIMEOUT) or ""
        if re.search(ONYX_ERROR, out, re.M):
            raise _Step("save", f"configuration write answered: {_squeeze(out)}")
        sent.append(save)
    except Exception as exc:
        _disconnect(conn)
        held = {
            "send": f"{port} may or may not have changed in the running configuration",
            "verify": f"the running configuration may hold `{config[0]}`",
            "save": f"{port} is administratively {state} in the running configuration, but the saved "
            "configuration may still be the previous one (a reload would undo it); save it "
            "(configuration write)",
        }[step]
        raise SwitchError(f"{switch}: step '{step}' failed: {_reason(exc)}; {held}.") from None
    return sent


def port_admin_nvue(
    conn: Any,
    *,
    switch: str,
    port: str,
    state: str,
    commands: Sequence[str],
    read: Callable[[Any], str | None],
) -> list[str]:
    """NVUE: refuse a pending revision that is not ours; ``nv set interface swpN link state``; the
    pending diff must hold only that; ``nv config apply -y``; the port read back; ``nv config save``.
    Returns the commands sent; raises :class:`SwitchError` with one sentence naming the step and what
    the switch holds (a failure before the apply detaches what was staged)."""
    set_line, apply_line, save_line = [check_line(c) for c in commands]
    sent: list[str] = []
    try:
        pending = parse_config_diff(_send(conn, "nv config diff"))
    except Exception as exc:
        _disconnect(conn)
        raise SwitchError(f"{switch}: step 'check' failed: {_reason(exc)}; nothing was sent.") from None
    if not pending.empty:
        _disconnect(conn)
        raise SwitchError(
            f"{switch}: step 'check' failed: the switch has a pending revision that is not ours "
            f"({'; '.join(pending.changes[:3])}); apply or detach it (nv config detach); nothing was sent."
        )
    ours = f"set interface {port} link state"
    step, applied = "stage", False
    try:
        out = _send(conn, set_line)
        sent.append(set_line)
        if NVUE_ERROR.search(out):
            raise _Step("stage", f"'{set_line}' answered: {_squeeze(out)}")
        step = "check"
        diff = parse_config_diff(_send(conn, "nv config diff"))
        foreign = [c for c in diff.changes if not c.startswith(ours)]
        if diff.empty or foreign:
            what = "; ".join(foreign[:3]) if foreign else "it is empty"
            raise _Step("check", f"the pending revision is not just `{set_line}` ({what})")
        step, applied = "apply", True
        out = _send(conn, apply_line, APPLY_TIMEOUT)
        sent.append(apply_line)
        if NVUE_ERROR.search(out) or "applied" not in out:
            raise _Step("apply", f"'{apply_line}' answered: {_squeeze(out)}")
        step = "verify"
        now = read(conn)
        if now != state:
            raise _Step("verify", f"read back, {port} is administratively {now or 'not listed'}, not {state}")
        step = "save"
        out = _send(conn, save_line)
        if NVUE_ERROR.search(out):
            raise _Step("save", f"'{save_line}' answered: {_squeeze(out)}")
        sent.append(save_line)
    except Exception as exc:
        held = f"{port} may be administratively {state} in the applied revision"
        if not applied:
            try:
                _send(conn, "nv config detach")
                sent.append("nv config detach")
                held = "nothing was applied; what was staged was detached"
            except Exception:
                held = "nothing was applied; what was staged may still be pending (nv config detach)"
        elif step == "save":
            held = (
                f"{port} is administratively {state} in the applied revision, but the startup revision "
                "may still be the previous one; save it (nv config save)"
            )
        _disconnect(conn)
        raise SwitchError(f"{switch}: step '{step}' failed: {_reason(exc)}; {held}.") from None
    return sent
