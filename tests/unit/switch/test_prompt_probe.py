"""The prompt probe of the product's netmiko sessions (fabricops.switch.transport.netmiko_connect).

A CLI answers every newline with one prompt. The server here is as slow as a busy switch: it echoes
a newline at once (the line editor does, as a terminal does) and prints the prompt 0.3 s later.
netmiko's stock ``find_prompt`` reads after a fixed sleep, finds only the echo and sends another
newline; the extra prompt lands in the next command's output. The product's sessions wait for the
prompt itself: one newline per probe, and the command's output is the device's.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

import asyncssh
import pytest
from netmiko import ConnectHandler

from fabricops.switch.transport import PROMPT_END, netmiko_connect

PROMPT = "slow-sw [standalone: master] # "  # enable mode (netmiko's Onyx logout waits for "#")
SHOW = ["##", "## Running database", "##", "hostname slow-sw"]


class _Server(asyncssh.SSHServer):
    def begin_auth(self, username):
        return True

    def password_auth_supported(self):
        return True

    def validate_password(self, username, password):
        return username == "admin" and password == "pw"


class SlowCli:
    """One asyncssh server on 127.0.0.1 in its own thread; ``lines``: every line it was sent."""

    def __init__(self, tmp_path):
        self.lines: list[str] = []
        self.caught_up = 0
        self.stall = False  # the next empty line's prompt after 1 s, the ones typed meanwhile at once
        self.key = str(tmp_path / "hostkey")
        asyncssh.generate_private_key("ssh-ed25519").write_private_key(self.key)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _run(self):
        asyncio.set_event_loop(self.loop)

        async def session(process):
            process.stdout.write("Mellanox Onyx Switch Management\r\n" + PROMPT)
            while True:
                line = await process.stdin.readline()
                if not line:
                    break
                line = line.rstrip("\r\n")
                self.lines.append(line)
                if line.strip() == "exit":  # the CLI's logout closes the session
                    break
                if line.strip():
                    process.stdout.write("".join(f"{ln}\r\n" for ln in SHOW) + PROMPT)
                elif self.caught_up:  # typed while the switch was busy: answered at once
                    self.caught_up -= 1
                    process.stdout.write(PROMPT)
                elif self.stall:  # a switch busy for a second, then catching up on what was typed
                    self.stall = False
                    await asyncio.sleep(1.0)
                    self.caught_up = 1
                    process.stdout.write(PROMPT)
                else:
                    await asyncio.sleep(0.3)  # the busy switch: the echo now, the prompt later
                    process.stdout.write(PROMPT)
            process.exit(0)

        async def start():
            self.server = await asyncssh.create_server(
                _Server,
                "127.0.0.1",
                0,
                server_host_keys=[self.key],
                process_factory=session,
                line_editor=True,
                line_echo=True,
                encoding="utf-8",
            )
            self.port = self.server.sockets[0].getsockname()[1]
            self.ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def params(self):
        return {
            "device_type": "mellanox_mlnxos",
            "host": "127.0.0.1",
            "port": self.port,
            "username": "admin",
            "password": "pw",
            "fast_cli": True,
            "conn_timeout": 5,
            "ssh_strict": False,
            "system_host_keys": False,
        }

    def stop(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def cli(tmp_path):
    server = SlowCli(tmp_path)
    yield server
    server.stop()


def _probe_then_show(conn, cli):
    sent = len(cli.lines)
    prompt = conn.find_prompt()
    probe_lines = cli.lines[sent:]
    out = conn.send_command("show running-config", auto_find_prompt=False)
    return prompt, probe_lines, out


def test_the_probe_sends_one_newline_and_waits_for_its_prompt(cli):
    conn = netmiko_connect(**cli.params())
    try:
        prompt, probe_lines, out = _probe_then_show(conn, cli)
    finally:
        with contextlib.suppress(Exception):
            conn.disconnect()
    assert prompt == PROMPT.strip()
    assert probe_lines == [""], probe_lines  # one newline: one prompt
    assert out.splitlines() == SHOW, out  # no stray prompt in the output
    assert type(conn).__mro__[1].__name__ == "MellanoxMlnxosSSH"  # netmiko's own driver underneath


def test_the_stock_probe_is_what_the_fix_is_for(cli):
    """The server reproduces the fault: the stock driver's probe sends more newlines than one and
    the show's output carries a prompt that is not the device's answer to it."""
    conn = ConnectHandler(**cli.params())
    try:
        _prompt, probe_lines, out = _probe_then_show(conn, cli)
    finally:
        with contextlib.suppress(Exception):
            conn.disconnect()
    assert len(probe_lines) > 1, probe_lines
    assert out.splitlines() != SHOW, out


def test_prompt_end_matches_both_oses_prompts_and_not_a_partial_one():
    import re

    for prompt in (
        "leaf-onyx [standalone: master] > ",
        "leaf-onyx [standalone: master] # ",
        "leaf-onyx [standalone: master] (config) # ",
        "cumulus@leaf-nvue:mgmt:~$ ",
        "root@leaf-nvue:mgmt:~# ",
    ):
        assert re.search(PROMPT_END, "\r\n" + prompt), prompt
    assert not re.search(PROMPT_END, "\r\nleaf-onyx [standalone: mas")
    assert not re.search(PROMPT_END, "\r\n")


def test_an_unknown_device_type_is_one_sentence():
    with pytest.raises(ValueError, match="unsupported netmiko device_type 'nope'"):
        netmiko_connect(device_type="nope", host="127.0.0.1")


def test_a_newline_typed_ahead_of_a_busy_switch_does_not_double_the_prompt(cli):
    """netmiko's login sends a newline unasked; a switch busy at that moment answers it late,
    together with the next probe's newline. Both newlines were echoed when they arrived, so the two
    prompts land on one line (``P P``): the prompt is still ``P``, and the command is read whole.
    Without :func:`~fabricops.switch.transport.one_prompt` the command waits for ``P P`` and its read
    times out."""
    from fabricops.switch.transport import one_prompt

    conn = netmiko_connect(**cli.params())
    try:
        cli.stall = True
        conn.write_channel(conn.RETURN)  # the stray newline, its prompt a second late
        out = conn.send_command("show running-config", read_timeout=5)  # probes the prompt first
        prompt = conn.find_prompt()
    finally:
        with contextlib.suppress(Exception):
            conn.disconnect()
    assert out.splitlines() == SHOW, out
    assert prompt == PROMPT.strip()
    assert one_prompt("P # P #") == "P #"
    assert one_prompt("  sw [standalone: master] # sw [standalone: master] # ") == "sw [standalone: master] #"
    assert one_prompt("cumulus@sw:mgmt:~$ cumulus@sw:mgmt:~$") == "cumulus@sw:mgmt:~$"
    assert one_prompt("sw [standalone: master] (config) #") == "sw [standalone: master] (config) #"
