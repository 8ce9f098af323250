"""An emulated Onyx switch on 127.0.0.1 (as tests/unit/lab/test_switchd.py starts one) and a runner
for the mellanox.onyx modules from the conformance venv, with strict host-key checking."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import asyncssh
import yaml

from fabricops_lab.switchd.server import close, serve

PASSWORD = "conformance-secret"
NAME = "leaf-onyx"
PORTS = [f"Eth1/{n}" for n in range(1, 5)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OnyxUnderTest:
    """One emulated Onyx switch (its own event-loop thread) answering as RELEASE."""

    def __init__(self, tmp: Path, release: str | None = None):
        self.tmp, self.release = tmp, release
        self.port = free_port()
        self.hostkey = tmp / "hostkey"
        self.state = tmp / "state"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        fut = asyncio.run_coroutine_threadsafe(
            serve("onyx", NAME, PORTS, "127.0.0.1", self.port, str(self.hostkey), PASSWORD,
                  str(self.state), str(tmp / "fabric.json"), release=release),
            self.loop,
        )
        self.acceptor = fut.result(10)
        self.switch = self.acceptor._fabricops_switch
        pub = asyncssh.read_private_key(str(self.hostkey)).export_public_key().decode().split()[:2]
        self.known_hosts = tmp / "known_hosts"
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {' '.join(pub)}\n")

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(close(self.acceptor), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    # ------------------------------------------------------------------ mellanox.onyx via Ansible
    def playbook(self, venv: Path, tasks: list[dict[str, Any]], check: bool = False) -> list[dict[str, Any]]:
        """Run TASKS (mellanox.onyx modules) in one play over network_cli; each task's result."""
        home = self.tmp / "home"
        (home / ".ssh").mkdir(parents=True, exist_ok=True)
        # paramiko (network_cli's transport) checks ~/.ssh/known_hosts: the switch's key, nothing else
        (home / ".ssh" / "known_hosts").write_text(self.known_hosts.read_text())
        inv = self.tmp / "inventory.yml"
        inv.write_text(yaml.safe_dump({"all": {"hosts": {"leaf": {
            "ansible_host": "127.0.0.1",
            "ansible_port": self.port,
            "ansible_connection": "ansible.netcommon.network_cli",
            "ansible_network_os": "mellanox.onyx.onyx",
            "ansible_user": "admin",
            "ansible_password": PASSWORD,
            "ansible_become": True,
            "ansible_become_method": "enable",
        }}}}))
        pb = self.tmp / "play.yml"
        pb.write_text(yaml.safe_dump([{"hosts": "leaf", "gather_facts": False, "tasks": tasks}]))
        cfg = self.tmp / "ansible.cfg"
        cfg.write_text("[defaults]\nhost_key_checking = True\nstdout_callback = ansible.posix.json\n"
                       "[persistent_connection]\ncommand_timeout = 30\nconnect_timeout = 30\n")
        env = {
            "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
            "HOME": str(home),
            "ANSIBLE_CONFIG": str(cfg),
            "ANSIBLE_LOCAL_TEMP": str(self.tmp / "ansible-tmp"),
            "ANSIBLE_PERSISTENT_CONTROL_PATH_DIR": str(self.tmp / "pc"),
            "LANG": "C.UTF-8",
        }
        cmd = [str(venv / "bin" / "ansible-playbook"), "-i", str(inv), str(pb)]
        cmd += ["--check"] if check else []
        t0 = time.monotonic()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        self.last_seconds = time.monotonic() - t0
        try:
            doc = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError(f"ansible-playbook gave no JSON (rc {proc.returncode}): "
                                 f"{proc.stdout[-2000:]} {proc.stderr[-2000:]}") from None
        results = []
        for t in doc["plays"][0]["tasks"]:
            r = t["hosts"].get("leaf", {})
            r["_task"] = t["task"]["name"]
            results.append(r)
        return results
