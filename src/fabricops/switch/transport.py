"""The one transport seam to a switch: netmiko behind ``get_roce_data`` and ``apply``.

Everything above this module sees CLI text only, so tests feed captured text through a fake
connection (any object with ``send_command``, ``send_config_set``, ``save_config`` and
``disconnect``) and a later move from netmiko to another transport stays here.

Apply flows
-----------
Onyx: the pre-change running config is kept; the commands are sent in config mode; on a rejected
command, a dropped session or a failed verification a *new* session restores the pre-change RoCE
configuration (the commands that take the current state back, computed by the same knob table)
and checks it; ``configuration write`` is sent only after the change is verified.

NVUE: ``nv set``/``nv unset`` stage a pending revision; ``nv config diff`` decides whether anything
changed (empty: ``nv config detach``, nothing applied); ``nv config apply --confirm <time> -y``
applies with an automatic rollback; a *new* session checks reachability and the applied state, then
confirms (``nv config apply --confirm-yes``) and ``nv config save``. On failure before apply:
``nv config detach``; after apply: ``nv config apply --confirm-no`` (or the timer rolls back).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import FabricopsError
from fabricops.parsers.nvue import parse_config_diff

from .access import SwitchAccess, known_hosts_from_ssh_args
from .knobs import Facts
from .model import SwitchError
from .resource import compute, gather

__all__ = [
    "NETMIKO_DEVICE_TYPES",
    "ApplyResult",
    "Connector",
    "apply",
    "connect",
    "get_roce_data",
    "known_hosts_from_ssh_args",
    "open_session",
]

NETMIKO_DEVICE_TYPES = {"onyx": "mellanox_mlnxos", "cumulus": "cumulus_linux"}
ONYX_ERROR = r"^% "
NVUE_ERROR = re.compile(r"^(?:Error:|Usage:|-bash: )", re.M)

Connector = Callable[[], Any]


# --------------------------------------------------------------------------- connecting


def connect(
    access: SwitchAccess | str,
    host: str | None = None,
    username: str | None = None,
    password: str | None = None,
    *,
    port: int = 22,
    known_hosts: str | None = None,
    timeout: float = 30,
) -> Any:
    """A netmiko session with strict host-key checking (an unknown key is refused, never added).

    ``access`` comes from :func:`fabricops.switch.access.switch_connection` (password, key file,
    ssh-agent, proxy). The older form ``connect(os_name, host, username, password, port=,
    known_hosts=)`` is a password login. Failures raise :class:`SwitchError`: one sentence naming the
    switch, never a secret."""
    if not isinstance(access, SwitchAccess):
        access = _password_access(access, host, username, password, port, known_hosts, timeout)
    return open_session(access)


def _password_access(os_name, host, username, password, port, known_hosts, timeout) -> SwitchAccess:
    from .model import normalize_os

    name = str(host)
    if not known_hosts or not os.path.isfile(known_hosts):
        raise SwitchError(
            f"{name}: no known_hosts file ({known_hosts or 'none given'}); fabricops checks switch host "
            "keys: set roce_switch_known_hosts, fabricops_known_hosts or -o UserKnownHostsFile= in "
            "ansible_ssh_common_args."
        )
    return SwitchAccess(
        switch=name,
        os_name=normalize_os(os_name),
        host=name,
        port=int(port),
        username=str(username),
        known_hosts=known_hosts,
        password=password,
        timeout=float(timeout),
        sources={"password": "argument"},
    )


def open_session(access: SwitchAccess) -> Any:
    """Open the session :class:`SwitchAccess` describes (through its proxy command, if any)."""
    import paramiko
    from netmiko import ConnectHandler

    if not os.path.isfile(access.known_hosts):
        raise SwitchError(
            f"{access.switch}: step 'connect' failed: no known_hosts file ({access.known_hosts}); "
            "fabricops checks switch host keys."
        )
    sock = None
    try:
        if access.proxy_command:
            sock = paramiko.ProxyCommand(access.proxy_command)
        return ConnectHandler(**access.netmiko_params(), sock=sock)
    except Exception as exc:
        if sock is not None:
            with contextlib.suppress(Exception):
                sock.close()
        raise SwitchError(_connect_failure(access, exc)) from None


def _connect_failure(access: SwitchAccess, exc: BaseException) -> str:
    """One sentence for a failed login; the exception text is scrubbed of every secret."""
    import paramiko

    where = f"{access.host}:{access.port}"
    via = f" through the proxy '{access.proxy_command}'" if access.proxy_command else ""
    head = f"{access.switch}: step 'connect' failed:"
    text = access.scrub(" ".join(str(exc).split()))
    name = type(exc).__name__
    if isinstance(exc, paramiko.BadHostKeyException):
        return (
            f"{head} the host key of {where} does not match the one in {access.known_hosts}; fabricops "
            "refuses it (the switch was replaced or someone is in the middle): check the fingerprint."
        )
    if "not found in known_hosts" in text:
        port = f"-p {access.port} " if access.port != 22 else ""
        return (
            f"{head} the host key of {where} is not in {access.known_hosts}; fabricops never accepts an "
            f"unknown switch key: check its fingerprint and add it (ssh-keyscan {port}{access.host})."
        )
    if "Authentication" in name or "authentication" in text.lower()[:80]:
        return (
            f"{head} {where} refused the login of {access.username}{via} "
            f"(tried {', '.join(access.methods()) or 'nothing'}); check ansible_user and the credentials."
        )
    if "Timeout" in name or isinstance(exc, TimeoutError | ConnectionError | OSError):
        return (
            f"{head} {where} did not answer SSH{via} within {access.timeout:g} s ({name}: "
            f"{re.split(r'Common causes|Things you might try', text)[0].strip()[:160]})."
        )
    first = re.split(r"Common causes|Things you might try", text)[0].strip()[:200]
    return f"{head} {where}{via}: {name}: {first}" if first else f"{head} {where}{via}: {name}."


# --------------------------------------------------------------------------- reading


def _onyx_port_arg(port: str) -> str:
    return port[3:]


def get_roce_data(connection: Any, os_name: str, ports: Sequence[str] = ()) -> dict[str, str]:
    """Raw CLI text of everything the RoCE resource reads (show commands only)."""
    send = connection.send_command
    if os_name == "onyx":
        data = {
            "running-config": send("show running-config"),
            "pfc": send("show dcb priority-flow-control | json-print"),
        }
        if ports:
            data["qos"] = send("show qos | json-print")
        for p in ports:
            data[f"ecn:{p}"] = send(
                f"show interfaces ethernet {_onyx_port_arg(p)} congestion-control | json-print"
            )
        return data
    return {
        "qos": send("nv show qos --rev=applied -o json"),
        "interface": send("nv show interface --rev=applied -o json"),
        "roce": send("nv show qos roce -o json"),
        "diff": send("nv config diff"),
    }


# --------------------------------------------------------------------------- applying


@dataclass
class ApplyResult:
    changed: bool
    sent: list[str] = field(default_factory=list)  #: every configuration command sent, in order
    after: Facts = field(default_factory=dict)
    after_data: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class StepFailed(FabricopsError):
    def __init__(self, step: str, detail: str):
        super().__init__(detail)
        self.step = step
        self.detail = detail


def _safe_disconnect(conn: Any) -> None:
    with contextlib.suppress(Exception):  # a dead session may fail to close
        conn.disconnect()


def _reason(exc: BaseException) -> str:
    name = type(exc).__name__
    text = " ".join(re.split(r"\s*Things you might try", str(exc))[0].split())[:200]
    if name == "ConfigInvalidException":
        return f"the switch rejected a command ({text})"
    if "Timeout" in name:
        return f"the session was lost: no prompt came back ({name}: {text})"
    return f"the session dropped ({name}: {text})" if text else f"the session dropped ({name})"


def apply(
    connection: Any,
    commands: Sequence[str],
    *,
    os_name: str,
    switch: str,
    reconnect: Connector,
    before_facts: Facts,
    want: Facts,
    state: str,
    ports: Sequence[str] = (),
    save: bool = True,
    confirm_timeout: str = "120s",
) -> ApplyResult:
    """Send ``commands`` safely (see the module doc); raises :class:`SwitchError` naming switch and step."""
    if not commands:
        return ApplyResult(changed=False)
    if os_name == "onyx":
        return _apply_onyx(
            connection, list(commands), switch, reconnect, before_facts, want, state, ports, save
        )
    return _apply_nvue(
        connection, list(commands), switch, reconnect, want, state, ports, save, confirm_timeout
    )


def _verify(conn: Any, os_name: str, want: Facts, state: str, ports: Sequence[str]) -> tuple[Facts, dict]:
    data = get_roce_data(conn, os_name, ports)
    facts, _oper = gather(os_name, data, ports)
    left = compute(state, want, facts, os_name, ports)
    if left:
        raise StepFailed("verify", f"after the change the switch still needs: {'; '.join(left[:5])}")
    return facts, data


def _apply_onyx(
    conn: Any,
    commands: list[str],
    switch: str,
    reconnect: Connector,
    before: Facts,
    want: Facts,
    state: str,
    ports: Sequence[str],
    save: bool,
) -> ApplyResult:
    result = ApplyResult(changed=True, sent=list(commands))
    step = "send"
    try:
        try:
            _onyx_enable(conn)
            conn.send_config_set(commands, error_pattern=ONYX_ERROR)
        except Exception as exc:
            raise StepFailed("send", _reason(exc)) from exc
        step = "verify"
        try:
            result.after, result.after_data = _verify(conn, "onyx", want, state, ports)
        except StepFailed:
            raise
        except Exception as exc:
            raise StepFailed("verify", _reason(exc)) from exc
    except StepFailed as failure:
        _safe_disconnect(conn)
        restored = _restore_onyx(switch, reconnect, before, ports)
        raise SwitchError(
            f"{switch}: step '{failure.step}' failed: {failure.detail}. {restored} "
            "Nothing was saved (configuration write not sent)."
        ) from None
    step = "save"
    try:
        conn.save_config()
    except Exception as exc:
        raise SwitchError(
            f"{switch}: step '{step}' failed: configuration write did not complete ({_reason(exc)}); "
            "the running configuration holds the change, the saved one may not. Run the play again."
        ) from None
    result.sent.append("configuration write")
    return result


def _onyx_enable(conn: Any) -> None:
    """Config mode needs enable mode on Onyx (netmiko's driver does not enter it at login)."""
    enable = getattr(conn, "enable", None)
    if callable(enable):
        enable()


def _restore_onyx(switch: str, reconnect: Connector, before: Facts, ports: Sequence[str]) -> str:
    """Take the running RoCE configuration back to ``before`` over a new session; a sentence."""
    try:
        conn = reconnect()
    except Exception as exc:
        return (
            f"Could not reconnect to restore the previous configuration ({_reason(exc)}); the saved "
            "configuration is unchanged, so a reload restores it."
        )
    try:
        facts, _ = gather("onyx", get_roce_data(conn, "onyx", ()), ())
        undo = compute("overridden", before, facts, "onyx")
        if undo:
            _onyx_enable(conn)
            conn.send_config_set(undo, error_pattern=ONYX_ERROR)
        facts, _ = gather("onyx", get_roce_data(conn, "onyx", ()), ())
        left = compute("overridden", before, facts, "onyx")
        if left:
            return (
                f"Restoring the previous configuration left {len(left)} difference(s): {'; '.join(left[:3])}."
            )
        return f"The previous configuration was restored ({len(undo)} command(s))."
    except Exception as exc:
        return (
            f"Restoring the previous configuration failed ({_reason(exc)}); "
            "the saved configuration is unchanged."
        )
    finally:
        _safe_disconnect(conn)


def _nvue_send(conn: Any, command: str) -> str:
    out = conn.send_command(command)
    if NVUE_ERROR.search(out or ""):
        raise StepFailed("stage", f"'{command}' answered: {' '.join(out.split())[:200]}")
    return out


def _apply_nvue(
    conn: Any,
    commands: list[str],
    switch: str,
    reconnect: Connector,
    want: Facts,
    state: str,
    ports: Sequence[str],
    save: bool,
    confirm_timeout: str,
) -> ApplyResult:
    result = ApplyResult(changed=True)
    applied = False
    step = "stage"
    try:
        try:
            for cmd in commands:
                step = "stage"
                _nvue_send(conn, cmd)
                result.sent.append(cmd)
            step = "diff"
            diff = parse_config_diff(conn.send_command("nv config diff"))
            if diff.empty:
                _nvue_send(conn, "nv config detach")
                result.sent.append("nv config detach")
                result.changed = False
                result.notes.append("nv config diff was empty: nothing applied")
                return result
            step = "apply"
            cmd = f"nv config apply --confirm {confirm_timeout} -y"
            applied = True  # from here on the apply may have happened, even if no answer comes back
            out = conn.send_command(cmd, read_timeout=120)
            result.sent.append(cmd)
            if NVUE_ERROR.search(out or "") or "applied" not in (out or ""):
                raise StepFailed("apply", f"'{cmd}' answered: {' '.join((out or '').split())[:200]}")
        except StepFailed:
            raise
        except Exception as exc:
            raise StepFailed(step, _reason(exc)) from exc
        # reachability: a new session must reach the switch and see the wanted state
        step = "confirm"
        try:
            conn2 = reconnect()
        except Exception as exc:
            raise StepFailed("confirm", f"the switch is not reachable after apply ({_reason(exc)})") from exc
        try:
            result.after, result.after_data = _verify(conn2, "cumulus", want, state, ports)
            out = conn2.send_command("nv config apply --confirm-yes")
            result.sent.append("nv config apply --confirm-yes")
            if NVUE_ERROR.search(out or ""):
                raise StepFailed("confirm", f"confirm answered: {' '.join(out.split())[:200]}")
            if save:
                step = "save"
                out = conn2.send_command("nv config save")
                if NVUE_ERROR.search(out or ""):
                    raise StepFailed("save", f"'nv config save' answered: {' '.join(out.split())[:200]}")
                result.sent.append("nv config save")
        except StepFailed:
            raise
        except Exception as exc:
            raise StepFailed(step, _reason(exc)) from exc
        finally:
            _safe_disconnect(conn2)
        return result
    except StepFailed as failure:
        _safe_disconnect(conn)
        if failure.step == "save":
            raise SwitchError(
                f"{switch}: step 'save' failed: {failure.detail}; the change is applied and confirmed "
                "but not saved to the startup revision. Run the play again."
            ) from None
        undone = _undo_nvue(reconnect, applied, confirm_timeout)
        raise SwitchError(f"{switch}: step '{failure.step}' failed: {failure.detail}. {undone}") from None


def _undo_nvue(reconnect: Connector, applied: bool, confirm_timeout: str) -> str:
    try:
        conn = reconnect()
    except Exception as exc:
        if applied:
            return (
                f"Could not reconnect ({_reason(exc)}); the unconfirmed apply rolls back by itself within "
                f"{confirm_timeout}."
            )
        return f"Could not reconnect to detach the pending revision ({_reason(exc)}); nothing was applied."
    notes = []
    try:
        if applied:
            status = conn.send_command("nv config apply --confirm-status")
            if "no pending confirm" not in status.lower():
                conn.send_command("nv config apply --confirm-no")
                notes.append("The unconfirmed apply was rolled back (nv config apply --confirm-no).")
            else:
                notes.append("No unconfirmed apply was pending.")
        if not parse_config_diff(conn.send_command("nv config diff")).empty:
            conn.send_command("nv config detach")
            notes.append("The pending revision was detached; the switch keeps its previous configuration.")
        elif not applied:
            notes.append("Nothing was applied; the switch keeps its previous configuration.")
    except Exception as exc:
        notes.append(f"Cleaning up failed ({_reason(exc)}).")
    finally:
        _safe_disconnect(conn)
    return " ".join(notes)


def require_no_pending(conn: Any, switch: str, data: Mapping[str, str], discard: bool) -> list[str]:
    """NVUE: refuse to mix our change with someone else's pending one (or detach it when allowed)."""
    diff = parse_config_diff(data.get("diff", ""))
    if diff.empty:
        return []
    if not discard:
        raise SwitchError(
            f"{switch}: step 'read' failed: the switch has a pending revision that is not ours "
            f"({'; '.join(diff.changes[:3])}); apply or detach it (nv config detach), or set "
            "roce_switch_discard_pending: true."
        )
    conn.send_command("nv config detach")
    return ["nv config detach"]
