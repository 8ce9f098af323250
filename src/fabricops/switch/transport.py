"""The one transport seam to a switch: netmiko sessions (and the seam for a REST client).

Everything above this module sees CLI text only, so tests feed captured text through a fake
connection (any object with ``send_command``, ``send_config_set``, ``save_config`` and
``disconnect``) and a later move from netmiko to another transport stays here. The change flows
(lock, device-side check, apply, checked restore) are :mod:`fabricops.roce.change`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from fabricops.parsers.nvue import parse_config_diff

from .access import SwitchAccess, known_hosts_from_ssh_args
from .errors import SwitchError
from .oses import normalize_os

__all__ = [
    "NETMIKO_DEVICE_TYPES",
    "Connector",
    "connect",
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
    rest: Callable[[SwitchAccess], Any] | None = None,
) -> Any:
    """A netmiko session with strict host-key checking (an unknown key is refused, never added).

    ``access`` comes from :func:`fabricops.switch.access.switch_connection` (password, key file,
    ssh-agent, proxy). The older form ``connect(os_name, host, username, password, port=,
    known_hosts=)`` is a password login. Failures raise :class:`SwitchError`: one sentence naming the
    switch, never a secret."""
    if not isinstance(access, SwitchAccess):
        access = _password_access(access, host, username, password, port, known_hosts, timeout)
    return open_session(access, rest)


def _password_access(os_name, host, username, password, port, known_hosts, timeout) -> SwitchAccess:
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


def open_session(access: SwitchAccess, rest: Callable[[SwitchAccess], Any] | None = None) -> Any:
    """Open the session :class:`SwitchAccess` describes (through its proxy command, if any).

    ``roce_switch_transport: rest`` needs ``rest``, the platform's REST client factory
    (``fabricops.roce.platforms.connect`` passes the NVUE API's): what a REST call may carry is the
    platform's knowledge, not the transport's."""
    if access.transport == "rest":
        if rest is None:
            raise SwitchError(
                f"{access.switch}: step 'connect' failed: roce_switch_transport rest needs the platform's "
                "REST client; connect through fabricops.roce.platforms.connect."
            )
        return rest(access)
    import paramiko

    if not os.path.isfile(access.known_hosts):
        raise SwitchError(
            f"{access.switch}: step 'connect' failed: no known_hosts file ({access.known_hosts}); "
            "fabricops checks switch host keys."
        )
    sock = None
    try:
        if access.proxy_command:
            sock = paramiko.ProxyCommand(access.proxy_command)
        conn = netmiko_connect(**access.netmiko_params(), sock=sock)
    except Exception as exc:
        if sock is not None:
            with contextlib.suppress(Exception):
                sock.close()
        raise SwitchError(_connect_failure(access, exc)) from None
    return conn


#: the end of a CLI prompt once the device has answered a newline: Onyx ``name [standalone: master] >``,
#: ``#``, ``(config) #``; Cumulus ``user@name:mgmt:~$`` (``#`` for root)
PROMPT_END = r"[>#$]\s*$"


_REPEATED_PROMPT = re.compile(r"(.+?[>#$])(?:\s*\1)+")


def one_prompt(text: str) -> str:
    """The prompt in ``text``, the last line a prompt probe read: ``P P`` (the same prompt twice or
    more on one line) is ``P``.

    A newline typed ahead of the device's answer is echoed when it arrives (a terminal's line
    discipline does so; Cumulus is bash on a Linux tty), so two newlines in flight give
    ``\r\n\r\n`` and then two prompts with nothing between them. netmiko's own login sends such a
    newline unasked (``_try_session_preparation``'s ``force_data``); on a loaded controller its
    prompt arrives late, together with the probe's. Taken whole, ``P P`` became the pattern the
    next command waited for, which never came: a read timed out
    (tests/unit/switch/test_fault_matrix.py, once in CI)."""
    match = _REPEATED_PROMPT.fullmatch(text.strip())
    return match.group(1) if match else text


@functools.cache
def _prompt_waiting_driver(device_type: str) -> type:
    """netmiko's own driver for ``device_type`` whose ``find_prompt`` waits for the prompt.

    Stock ``find_prompt`` sends a newline, sleeps a fixed 0.25 s (0.025 s with ``fast_cli``) and
    reads; when only the echo of the newline has arrived by then it sends another newline. The
    device answers every newline with a prompt, so the extra one arrives later, in the middle of the
    next command's output (a slow or busy switch, a loaded controller): ``show running-config``
    read back as ``name [standalone: master] # ##`` on its first line, and a change refused as
    "changed since it was read" (tests/unit/switch/test_fault_matrix.py, once in CI). netmiko's
    ``find_prompt(pattern=...)`` reads until the pattern instead: one newline, one prompt, waited
    for (its read timeout bounds it), never a second newline."""
    from netmiko.ssh_dispatcher import CLASS_MAPPER

    base = CLASS_MAPPER[device_type]

    def find_prompt(self: Any, delay_factor: float = 1.0, pattern: str | None = None) -> str:
        return one_prompt(base.find_prompt(self, delay_factor=delay_factor, pattern=pattern or PROMPT_END))

    return type(base.__name__, (base,), {"find_prompt": find_prompt, "__module__": __name__})


def netmiko_connect(**params: Any) -> Any:
    """``netmiko.ConnectHandler(**params)`` with :func:`_prompt_waiting_driver`'s prompt probe (the
    login's own ``set_base_prompt`` included); every other step is the stock driver's."""
    from netmiko.ssh_dispatcher import CLASS_MAPPER

    device_type = params.get("device_type", "")
    if device_type not in CLASS_MAPPER:
        raise ValueError(f"unsupported netmiko device_type {device_type!r}")
    return _prompt_waiting_driver(device_type)(**params)


def known_prompt(conn: Any) -> Any:
    """``conn`` whose ``send_command`` waits for the prompt the session learned at login, instead of
    asking the switch for it again before every command.

    netmiko's ``send_command`` calls ``find_prompt()`` first by default (``auto_find_prompt``): a
    newline, a fixed 0.25 s sleep and a read, on every show command -- half a second per command on
    the lab's switches, most of a verify run's switch time. The prompt is set once by the driver's
    ``session_preparation`` (``set_base_prompt``) and matches the switch's every mode (Onyx
    ``name [standalone: master] >`` and ``#``, ``(config) #``; Cumulus ``user@name:~$``), so the
    command's output ends where the same prompt pattern appears. A caller that passes
    ``auto_find_prompt`` or ``expect_string`` (a confirmation prompt) keeps its choice.

    For read-only sessions (verify's :class:`~fabricops.verify.switchstate.SwitchReader`) only: the
    change flows (apply, checked restore after a dropped session) keep the probe before each
    command (:func:`_prompt_waiting_driver`'s, one newline answered by one prompt), which also reads
    away whatever an earlier step left in the channel before the command is sent."""
    send = conn.send_command

    def send_command(command_string: str, *args: Any, **kwargs: Any) -> Any:
        if not args and "expect_string" not in kwargs:
            kwargs.setdefault("auto_find_prompt", False)
        return send(command_string, *args, **kwargs)

    conn.send_command = send_command
    return conn


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


# --------------------------------------------------------------------------- applying


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
