"""The asyncssh server: password and/or public-key login, one engine session per SSH channel, shared
switch state.

Login as on the devices: Onyx and Cumulus Linux run OpenSSH's sshd, which offers ``publickey`` and
``password`` by default and checks a key against the user's ``~/.ssh/authorized_keys`` (sshd(8),
AUTHORIZED_KEYS FILE FORMAT; Cumulus Linux user guide "SSH for Remote Access": "copy your public key to
the switch ... authorized_keys"; Onyx MLNX-OS user manual "ssh client user ... authorized-key"). A
server started without a password (``password=None``) is key-only, as sshd with
``PasswordAuthentication no``; one without authorized keys is password-only. Each accepted login is
logged with its method (sshd logs ``Accepted publickey for USER`` / ``Accepted password for USER``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

import asyncssh

from .nvue import DEFAULT_RELEASE, NvueSession, NvueSwitch
from .nvue_api import NvueApiServer
from .onyx import OnyxSession, OnyxSwitch
from .state import sync_faults

__all__ = ["SwitchServer", "build_switch", "close", "serve"]

log = logging.getLogger("fabricops_lab.switchd")
USERS = {"onyx": "admin", "cumulus": "cumulus"}
TICK_S = 0.2  #: how often a switch re-reads the lab's faults and its confirm timer


def build_switch(
    os_name: str,
    name: str,
    ports: list[str],
    state_dir: str,
    fabric_file: str | None,
    release: str | None = None,
    password: str | None = None,
) -> Any:
    if os_name == "onyx":
        return OnyxSwitch(name, ports, state_dir, fabric_file, release=release)
    if os_name == "cumulus":  # the login password is also the sudo password, as for a Cumulus user
        return NvueSwitch(name, ports, state_dir, fabric_file, release or DEFAULT_RELEASE, password)
    raise ValueError(f"unknown switch OS {os_name!r} (onyx or cumulus)")


def load_authorized_keys(path: str | None) -> set[bytes]:
    """Public keys (wire form) of an OpenSSH ``authorized_keys`` file; empty for no file."""
    if not path:
        return set()
    keys = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keys.add(asyncssh.import_public_key(line).public_data)
    return keys


class SwitchServer(asyncssh.SSHServer):
    def __init__(self, password: str | None, users: set[str], authorized: set[bytes] | None = None,
                 switch: Any = None):
        self._password = password
        self._users = users
        self._authorized = set(authorized or ())
        self._switch = switch  # Onyx: its login_password, which `username admin password` changes

    def _current_password(self) -> str | None:
        if self._switch is not None and hasattr(self._switch, "login_password"):
            return self._switch.login_password
        return self._password

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return self._current_password() is not None

    def validate_password(self, username: str, password: str) -> bool:
        current = self._current_password()
        ok = current is not None and username in self._users and password == current
        if ok:
            log.info("Accepted password for %s", username)
        return ok

    def public_key_auth_supported(self) -> bool:
        return bool(self._authorized)

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        ok = username in self._users and key.public_data in self._authorized
        if ok:
            log.info("Accepted publickey for %s (%s)", username, key.get_fingerprint())
        return ok


class RawModeInput:
    """Input as a CLI in raw terminal mode reads it (the Onyx CLI): a line at a time, echoed when the
    CLI reads it, not when it arrives.

    A line-editing CLI turns the terminal's own echo off and echoes what its editor reads (termios(3):
    ECHO, ICANON; GNU readline's rl_prep_terminal does this), so lines typed ahead while a command runs
    appear after that command's output and prompt, each behind the prompt it was read at. asyncssh's
    line editor echoes input the moment it arrives instead: typeahead echoes ran ahead of the prompts,
    which then came glued together on one line. netmiko's find_prompt sends another RETURN when the
    prompt is slow and takes the last line it reads as the prompt: on a busy machine it took that glued
    line and the command after it timed out (CI: test_netmiko_mlnxos save_config, ReadTimeout).
    A line ends at CR, LF or CR LF (the terminal's ICRNL: Ansible's network_cli ends a command with CR,
    netmiko with LF)."""

    def __init__(self, process: asyncssh.SSHServerProcess, echo: bool):
        self._stdin = process.stdin
        self._write = process.stdout.write
        self._buf = ""
        self._after_cr = False
        self.echo = echo

    async def readline(self) -> str:
        """The next line without its end ('' at end of input, as the line editor's reader)."""
        while True:
            if self._after_cr and self._buf.startswith("\n"):
                self._buf = self._buf[1:]
            self._after_cr = False
            ends = [i for i in (self._buf.find("\r"), self._buf.find("\n")) if i >= 0]
            if ends:
                i = min(ends)
                line, self._after_cr, self._buf = self._buf[:i], self._buf[i] == "\r", self._buf[i + 1:]
                if self.echo:
                    self._write(line + "\n")
                return line + "\n"
            data = await self._stdin.read(4096)
            if not data:
                return ""
            self._buf += data


async def _session(process: asyncssh.SSHServerProcess, switch: Any, os_name: str) -> None:
    sess = (
        OnyxSession(switch) if os_name == "onyx" else NvueSession(switch, process.get_extra_info("username"))
    )
    write = process.stdout.write
    reader: Any = process.stdin
    if os_name == "onyx" and process.get_terminal_type() is not None:
        process.channel.set_line_mode(False)  # type: ignore[attr-defined]
        reader = RawModeInput(process, echo=True)

    def echo() -> None:  # sudo reads its password without echo (termios ECHO off), as on the host
        if os_name == "cumulus":
            with contextlib.suppress(Exception):
                process.channel.set_echo(not sess.wants_password)

    try:
        write(sess.banner() + sess.prompt())
        while True:
            try:
                line = await reader.readline()
            except (asyncssh.BreakReceived, asyncssh.TerminalSizeChanged):
                continue
            if not line:  # EOF
                break
            out, drop = sess.handle(line.rstrip("\r\n"))
            if drop:
                if out:
                    write(out)
                # abrupt: no prompt, no exit status, the TCP connection goes away
                process.channel.get_connection().abort()
                return
            write(out + sess.prompt())
            echo()
    except (asyncssh.ConnectionLost, BrokenPipeError, ConnectionResetError):
        return
    process.exit(0)


async def serve(
    os_name: str,
    name: str,
    ports: list[str],
    listen: str,
    port: int,
    host_key: str,
    password: str | None,
    state_dir: str,
    fabric_file: str | None,
    authorized_keys: str | None = None,
    release: str | None = None,
    api_port: int | None = None,
    api_password: str | None = None,
) -> asyncssh.SSHAcceptor:
    """Serve one switch; ``password`` None: key-only; ``authorized_keys``: an OpenSSH file of keys.

    Cumulus: ``release`` picks the Cumulus Linux release emulated (``nvue.RELEASES``); ``api_port``
    (8765 on a real switch; 0: any free port) also serves the NVUE REST API over HTTPS on ``listen``,
    basic auth with the switch user and ``api_password`` (default: the login password)."""
    authorized = load_authorized_keys(authorized_keys)
    if password is None and not authorized:
        raise ValueError("a switch needs a password or authorized keys, or nobody can log in")
    switch = build_switch(os_name, name, ports, state_dir, fabric_file, release, password)
    if hasattr(switch, "login_password"):
        switch.login_password = password
    if not Path(host_key).exists():
        key = asyncssh.generate_private_key("ssh-ed25519")
        key.write_private_key(host_key)
    users = {USERS[os_name], "root"} if os_name == "cumulus" else {USERS[os_name]}

    async def handler(process: asyncssh.SSHServerProcess) -> None:
        await _session(process, switch, os_name)

    acceptor = await asyncssh.create_server(
        lambda: SwitchServer(password, users, authorized, switch),
        listen,
        port,
        server_host_keys=[host_key],
        process_factory=handler,
        line_editor=True,
        line_echo=True,
        encoding="utf-8",
    )

    async def ticker() -> None:
        """Every switch: a lab fault (faults.json) reaches the fabric file without a CLI session.
        Cumulus: `nv config apply --confirm` rolls back on time, even when idle."""
        while True:
            await asyncio.sleep(TICK_S)
            with getattr(switch, "lock", None) or contextlib.nullcontext():
                try:
                    sync_faults(switch)
                    if os_name == "cumulus":
                        switch.check_confirm()
                except Exception:  # the emulator keeps serving; the log says why
                    log.exception("switch %s: fault/confirm tick failed", name)

    acceptor._fabricops_ticker = asyncio.get_running_loop().create_task(ticker())  # type: ignore[attr-defined]
    if os_name == "cumulus":
        api_secret = api_password if api_password is not None else password
        if api_port is not None:
            if not api_secret:
                raise ValueError("the NVUE REST API needs a password (HTTP basic auth)")
            api = NvueApiServer(switch, listen, api_port, USERS[os_name], api_secret, state_dir)
            acceptor._fabricops_api = api  # type: ignore[attr-defined]
    acceptor._fabricops_switch = switch  # type: ignore[attr-defined]
    return acceptor


async def close(acceptor: asyncssh.SSHAcceptor) -> None:
    """Stop a switch :func:`serve` started, on its event loop: its fault/confirm ticker, its NVUE REST
    API, then the SSH listener (a ticker left pending is destroyed with the loop, and asyncio says so)."""
    ticker = getattr(acceptor, "_fabricops_ticker", None)
    if ticker is not None:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    api = getattr(acceptor, "_fabricops_api", None)
    if api is not None:
        api.close()
    acceptor.close()
    await acceptor.wait_closed()
