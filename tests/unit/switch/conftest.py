"""Fake connections at the transport seam (``send_command`` / ``send_config_set`` / ``save_config``).

``EngineConnection`` drives the lab's emulated Onyx / NVUE CLI engines in-process (the same code the
emulated switches run behind SSH), so the emulated switches' real output feeds the parsers and the
renderer; ``TextConnection`` answers canned text (real captures).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from fabricops_lab.switchd.nvue import NvueSession, NvueSwitch
from fabricops_lab.switchd.onyx import OnyxSession, OnyxSwitch

_spec = importlib.util.spec_from_file_location("_tests_conftest", Path(__file__).parents[2] / "conftest.py")
_top = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_top)
read_fixture = _top.read_fixture  # tests/conftest.py's loader (this conftest shadows the module name)


class SessionDropped(OSError):
    pass


class ConfigInvalidException(Exception):  # same class name netmiko raises
    pass


class EngineConnection:
    def __init__(self, switch, os_name, log):
        self.switch, self.os = switch, os_name
        self.session = OnyxSession(switch) if os_name == "onyx" else NvueSession(switch)
        if os_name == "onyx":  # netmiko's session preparation (mellanox_mlnxos disable_paging)
            self.session.handle("no cli session paging enable")
        self.log = log  # shared across sessions: every line sent, in order
        self.dead = False

    def _line(self, line):
        if self.dead:
            raise SessionDropped("Socket is closed")
        self.log.append(line)
        out, drop = self.session.handle(line)
        if drop:
            self.dead = True
            raise SessionDropped("Socket is closed")
        return out

    def enable(self):
        return self._line("enable") if self.session.mode == "user" else ""

    def send_command(self, command, **_kw):
        return self._line(command)

    def send_config_set(self, commands, error_pattern="", **_kw):
        out = self._line("configure terminal")
        for cmd in commands:
            got = self._line(cmd)
            out += got
            if error_pattern and re.search(error_pattern, got, re.M):
                raise ConfigInvalidException(f"Invalid input detected at command: {cmd}")
        out += self._line("exit")
        return out

    def save_config(self):
        # as netmiko's MellanoxMlnxosSSH.save_config: enable, config mode, configuration write, exit
        # (`configuration write` is a config-mode command on Onyx)
        self.enable()
        if self.os != "onyx":
            return self._line("configuration write")
        out = self._line("configure terminal") if self.session.mode == "enable" else ""
        out += self._line("configuration write")
        return out + self._line("exit")

    def disconnect(self):
        self.dead = True


class Rack:
    """One emulated switch plus a connector that opens a new fake session each call."""

    def __init__(self, os_name, tmp_path, ports):
        cls = OnyxSwitch if os_name == "onyx" else NvueSwitch
        self.os = os_name
        self.switch = cls(f"leaf-{os_name}", ports, tmp_path / os_name, None)
        self.log: list[str] = []
        self.sessions = 0

    def connect(self):
        self.sessions += 1
        return EngineConnection(self.switch, self.os, self.log)

    def arm_drop(self, n):
        import json
        import os
        import time

        path = self.switch.state_dir / "faults.json"
        path.write_text(json.dumps({"drop_after_commands": n, "t": time.time()}))
        os.utime(path, (time.time() + self.sessions, time.time() + self.sessions))

    def config_lines(self):
        """Configuration commands the switch received (config-mode lines / nv set|unset|config)."""
        if self.os == "onyx":
            return [ln for ln in self.log if not ln.startswith(("show ", "enable", "configure", "exit"))]
        return [ln for ln in self.log if re.match(r"nv (set|unset|config (apply|detach|save))", ln)]

    def state(self):
        if self.os == "onyx":
            return [ln for ln in self.switch.running_config().splitlines() if "Generated at" not in ln]
        import copy

        return copy.deepcopy(self.switch.applied)


@pytest.fixture
def onyx_rack(tmp_path):
    return Rack("onyx", tmp_path, [f"Eth1/{n}" for n in range(1, 9)])


@pytest.fixture
def nvue_rack(tmp_path):
    return Rack("cumulus", tmp_path, [f"swp{n}" for n in range(1, 9)])


@pytest.fixture(params=["onyx", "cumulus"])
def rack(request, tmp_path):
    if request.param == "onyx":
        return Rack("onyx", tmp_path, [f"Eth1/{n}" for n in range(1, 9)])
    return Rack("cumulus", tmp_path, [f"swp{n}" for n in range(1, 9)])


@pytest.fixture(autouse=True)
def _lock_dir(tmp_path, monkeypatch):
    """Each test's controller-side switch locks live in its own directory (0700: as root, a runtime
    directory that is not root's own is not used, fabricops.switch.lock)."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    return runtime
