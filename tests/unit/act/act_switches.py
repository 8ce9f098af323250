"""Emulated switches for act's port quarantine, and the inventory that describes them.

``SshSwitch`` serves one emulated Onyx or Cumulus switch over real SSH on 127.0.0.1 (the lab's
``fabricops_lab.switchd.server.serve``, as tests/unit/switch/test_access.py starts them): act reaches
it exactly as it reaches a real one (inventory variables, password, known_hosts, netmiko).
``engine_rack`` is tests/unit/switch/conftest.py's in-process ``Rack`` (the same emulator code, no
SSH), for the cases that do not need the transport. ``show`` reads the emulated switch back through
its own CLI, as an operator would.
"""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import threading
from pathlib import Path
from typing import Any

import asyncssh

from fabricops_lab.switchd.nvue import NvueSession
from fabricops_lab.switchd.onyx import OnyxSession
from fabricops_lab.switchd.server import close, serve

_spec = importlib.util.spec_from_file_location(
    "_switch_conftest", Path(__file__).parents[1] / "switch" / "conftest.py"
)
_switch_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_switch_conftest)
Rack = _switch_conftest.Rack  # one emulated switch in-process, a new engine session per connect()

PASSWORD = "qu4rantine-Pw"
USERS = {"onyx": "admin", "cumulus": "cumulus"}
PORTS = {"onyx": [f"Eth1/{n}" for n in range(1, 9)], "cumulus": [f"swp{n}" for n in range(1, 9)]}


def port(os_name: str, n: int) -> str:
    """The cabling's name of port n (Onyx: ``1/n``, as an inventory may write it; Cumulus ``swpn``)."""
    return f"1/{n}" if os_name == "onyx" else f"swp{n}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Loop:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(15)


class SshSwitch:
    """One emulated switch served over SSH; ``switch`` is its state (read back with :func:`show`)."""

    def __init__(self, loop: Loop, tmp: Path, os_name: str, name: str):
        self.os_name, self.name, self.port, self.loop = os_name, name, free_port(), loop
        tmp.mkdir(parents=True, exist_ok=True)
        host_key = tmp / "hostkey"
        self.acceptor = loop.run(
            serve(os_name, name, PORTS[os_name], "127.0.0.1", self.port, str(host_key), PASSWORD,
                  str(tmp / "state"), None)
        )
        self.switch = self.acceptor._fabricops_switch
        pub = asyncssh.read_private_key(str(host_key)).export_public_key().decode().split()
        self.known_line = f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}"

    def close(self) -> None:
        self.loop.run(close(self.acceptor))


def show(switch: Any, os_name: str, command: str) -> str:
    """``command`` on the emulated switch's own CLI (a new session, enable mode on Onyx)."""
    if os_name == "onyx":
        s = OnyxSession(switch)
        s.handle("no cli session paging enable")
        s.handle("enable")
    else:
        s = NvueSession(switch)
    return s.handle(command)[0]


def admin_state(switch: Any, os_name: str, n: int) -> str:
    """Port n's admin state as the switch shows it: Onyx ``show interfaces ethernet 1/n`` "Admin
    state" (Enabled / Disabled); Cumulus ``nv show interface swpn link`` state (up / down)."""
    if os_name == "onyx":
        text = show(switch, os_name, f"show interfaces ethernet 1/{n}")
        line = next(ln for ln in text.splitlines() if ln.strip().startswith("Admin state"))
        return line.split(":", 1)[1].strip()
    text = show(switch, os_name, f"nv show interface swp{n} link")
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("state:"))
    return lines[i + 1].strip().rstrip(":").split(":")[0].strip()


def cabling(os_name: str, switch: str, hosts: dict[str, int]) -> list[dict[str, Any]]:
    """``fabricops_cabling``: host -> its mlx5_0 port 1 on ``switch`` port n."""
    return [
        {"host": h, "hca": "mlx5_0", "port": 1, "netdev": "eth0", "switch": switch,
         "switch_port": port(os_name, n)}
        for h, n in hosts.items()
    ]


def inventory(switches: dict[str, dict[str, Any]], cables: list[dict[str, Any]],
              links: list[dict[str, Any]] | None = None, hosts=()) -> dict[str, dict[str, Any]]:
    """name -> inventory variables: each switch's own (access, OS) plus the fabric plan every host of
    the inventory carries (group_vars/all: fabricops_cabling, fabricops_switch_links)."""
    plan = {"fabricops_cabling": cables, "fabricops_switch_links": links or []}
    out = {name: {**hv, **plan, "inventory_hostname": name} for name, hv in switches.items()}
    for h in hosts:
        out[h] = {**plan, "inventory_hostname": h}
    return out


def ssh_vars(sw: SshSwitch, known_hosts: Path) -> dict[str, Any]:
    return {
        "ansible_host": "127.0.0.1",
        "ansible_port": sw.port,
        "ansible_user": USERS[sw.os_name],
        "ansible_password": PASSWORD,
        "fabricops_switch_os": sw.os_name,
        "roce_switch_known_hosts": str(known_hosts),
    }
