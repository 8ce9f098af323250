"""Talking to the hosts: Ansible's inventory and connection settings through testinfra's backend.

Why testinfra's Ansible backend (and not ansible-runner or ``ansible`` ad hoc): it reads the same
inventory (``ansible-inventory --list``: group_vars, host_vars, ``ansible_host``, ``ansible_user``,
``ansible_port``, the private key, ``ansible_ssh_common_args``, ``become``) and ansible.cfg's
``ssh_args`` (ControlPersist), then runs each command over plain SSH: a command costs one SSH
round trip instead of a module upload and Python start per task, commands run concurrently from
threads (pairwise rounds need a server and a client at once), and the suite in tests/infra uses
the very same backend, so the CLI and the testinfra suite cannot disagree about how a host is
reached.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
from collections.abc import Mapping
from typing import Any

from fabricops.errors import FabricopsError


class TransportError(FabricopsError):
    exit_status = 2


def _path_with_venv() -> None:
    """ansible-inventory is looked up on PATH: make the one next to this Python findable."""
    bindir = os.path.dirname(sys.executable)
    parts = os.environ.get("PATH", "").split(os.pathsep)
    if bindir not in parts:
        os.environ["PATH"] = os.pathsep.join([bindir, *parts])


class Fabric:
    """The hosts of an inventory, their variables, and ``run(host, command, timeout)``."""

    def __init__(self, inventory: str | None = None, limit: str = "gpu_hosts"):
        _path_with_venv()
        try:
            from testinfra.utils.ansible_runner import AnsibleRunner
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            raise TransportError(f"pytest-testinfra is required for verify: {exc}") from None
        self.inventory = inventory
        self.runner = AnsibleRunner(inventory)
        try:
            self.hosts = self.runner.get_hosts(limit)
        except Exception as exc:
            raise TransportError(
                f"cannot read the inventory {inventory or '(ansible.cfg default)'}: {exc}"
            ) from None
        if not self.hosts:
            raise TransportError(f"no host matches {limit!r} in the inventory {inventory or '(default)'}")
        self._lock = threading.Lock()
        self._hosts: dict[str, Any] = {}

    def hostvars(self, host: str) -> dict[str, Any]:
        return dict(self.runner.get_variables(host))

    def inventory_vars(self, name: str) -> dict[str, Any]:
        """Variables of any inventory host (a switch too); {} when it is not in the inventory."""
        try:
            return dict(self.runner.get_variables(name))
        except Exception:
            return {}

    def switch_reader(self, roce: Any) -> Any:
        """Read-only switch port reader for the likely cause of degraded RoCE pairs."""
        from fabricops.verify.switchstate import SwitchReader

        return SwitchReader(self.inventory_vars, roce)

    def switch_link_layers(self) -> dict[str, str]:
        """Switch name -> the link layer its cables carry (from the inventory groups)."""
        out: dict[str, str] = {}
        for group, layer in (("switches", "Ethernet"), ("ib_switches", "InfiniBand")):
            try:
                for name in self.runner.get_hosts(group):
                    out[name] = layer
            except Exception:
                continue
        return out

    def _host(self, host: str) -> Any:
        with self._lock:
            if host not in self._hosts:
                self._hosts[host] = self.runner.get_host(host)
            return self._hosts[host]

    def run(self, host: str, command: str, timeout: float = 60) -> Mapping[str, Any]:
        """Run ``command`` (a shell line) on ``host``; rc 124 when it exceeded ``timeout``."""
        wrapped = f"timeout -k 5 {int(timeout)} sh -c {shlex.quote(command)}"
        try:
            res = self._host(host).run(wrapped)
        except Exception as exc:  # SSH failures surface as exceptions in some backends
            return {"rc": 255, "stdout": "", "stderr": f"{host}: {exc}"}
        stderr = res.stderr
        if res.rc == 255 and not res.stdout:
            stderr = f"{host} unreachable over SSH: {stderr.strip()}"
        return {"rc": res.rc, "stdout": res.stdout, "stderr": stderr}
