"""Integration tests on the emulated rack (marker ``lab``).

The session-scoped ``lab`` fixture brings the default rack up once (reusing a lab already up from
the same topology) and takes it down at the end of the session, unless it was already up before
the session or ``FABRICOPS_LAB_KEEP=1`` is set. Helpers for other integration tests:

- ``ansible(pattern, module, args=None)`` -> :class:`AnsibleRun` (per-host results, from the
  oneline callback), ``ansible_playbook(playbook, *extra_args)`` -> :class:`AnsibleRun` (per-host
  PLAY RECAP counts; output in ``stdout``); both run the
  repository's ``.venv/bin`` Ansible with its ``ansible.cfg`` and ``inventories/lab``;
- ``host_exec(name, argv)`` runs a command inside a lab host (no SSH; for checks below the line);
- ``ssh(name, command)`` runs a command over the lab's real SSH (what Ansible sees).
They are plain functions (``from integration.conftest import ansible`` is not needed: use the
fixtures of the same names) and fixtures.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
INVENTORY = REPO / "inventories" / "lab" / "hosts.yml"


def pytest_configure(config):
    config.addinivalue_line("markers", "lab_teardown: runs after every other test (it takes the lab down)")


def pytest_collection_modifyitems(config, items):
    """Tests marked lab_teardown run last: they take the shared lab down."""
    items.sort(key=lambda item: item.get_closest_marker("lab_teardown") is not None)


# --- helpers ------------------------------------------------------------------------------------


@dataclass
class AnsibleRun:
    rc: int
    stdout: str
    stderr: str
    hosts: dict[str, Any] = field(
        default_factory=dict
    )  # host -> result dict (ad-hoc) / recap stats (playbook)

    def failed(self) -> dict[str, Any]:
        return {
            h: r
            for h, r in self.hosts.items()
            if r.get("failed") or r.get("unreachable") or r.get("failures")
        }

    def changed_tasks(self) -> list[str]:
        """``TASK name: host`` for every ``changed:`` line of a playbook run: what an idempotence
        assertion prints instead of the output's tail, which rarely shows the task that changed."""
        out, task = [], ""
        for line in self.stdout.splitlines():
            if line.startswith(("TASK [", "RUNNING HANDLER [")):
                task = line.split("[", 1)[1].rsplit("]", 1)[0]
            elif line.startswith("changed: ["):
                out.append(f"{task}: {line[len('changed: ['):].split(']', 1)[0]}")
        return out


def ansible_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{VENV_BIN}:{env.get('PATH', '')}",
        }
    )
    env.update(extra)
    return env


ONELINE = re.compile(r"^(\S+) \| (SUCCESS|CHANGED|FAILED!|UNREACHABLE!)(?: \| rc=\d+)?(?: =>|:) ?(.*)$")
RECAP = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$")


def _oneline(stdout: str) -> dict[str, Any]:
    """Per-host results from the oneline callback (``host | SUCCESS => {...}``)."""
    hosts: dict[str, Any] = {}
    for line in stdout.splitlines():
        m = ONELINE.match(line)
        if not m:
            continue
        host, status, rest = m.groups()
        try:
            result = json.loads(rest)
        except ValueError:
            result = {"msg": rest}
        if not isinstance(result, dict):
            result = {"msg": result}
        result.setdefault("failed", status == "FAILED!")
        result["unreachable"] = status == "UNREACHABLE!"
        result["status"] = status
        hosts[host] = result
    return hosts


def _recap(stdout: str) -> dict[str, Any]:
    """PLAY RECAP lines -> {host: {"ok": n, "changed": n, "failures": n, "unreachable": n, ...}}."""
    stats: dict[str, Any] = {}
    in_recap = False
    for line in stdout.splitlines():
        if line.startswith("PLAY RECAP"):
            in_recap = True
            continue
        m = RECAP.match(line.strip()) if in_recap else None
        if m:
            counts = dict(kv.split("=") for kv in m.group(2).split())
            stat = {k: int(v) for k, v in counts.items()}
            stat["failures"] = stat.pop("failed", 0)
            stats[m.group(1)] = stat
    return stats


def ansible(
    pattern: str,
    module: str,
    args: str | None = None,
    *extra: str,
    timeout: int = 300,
    inventory: Path = INVENTORY,
) -> AnsibleRun:
    """``ansible PATTERN -m MODULE [-a ARGS]`` against the lab inventory."""
    argv = [str(VENV_BIN / "ansible"), pattern, "-i", str(inventory), "-m", module]
    if args is not None:
        argv += ["-a", args]
    argv += list(extra)
    env = ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.oneline", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    return AnsibleRun(proc.returncode, proc.stdout, proc.stderr, _oneline(proc.stdout))


def ansible_playbook(
    playbook: str | Path, *extra: str, timeout: int = 900, inventory: Path = INVENTORY
) -> AnsibleRun:
    """``ansible-playbook PLAYBOOK`` (relative to the repo root) against the lab inventory;
    ``hosts`` holds the per-host stats (ok, changed, failures, unreachable, ...)."""
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *extra]
    proc = subprocess.run(argv, cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=timeout)
    return AnsibleRun(proc.returncode, proc.stdout, proc.stderr, _recap(proc.stdout))


def host_exec(name: str, argv: list[str], input: str | None = None, check: bool = True, timeout: float = 60):
    from fabricops_lab import hosts

    return hosts.host_exec(name, argv, input=input, check=check, timeout=timeout)


def ssh(name: str, command: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    from fabricops_lab import hosts, paths

    lab = paths.load_lab()
    ip = lab["hosts"][name]["mgmt_ip"]
    proc = subprocess.run(
        ["ssh", *hosts.ssh_base_args(), f"root@{ip}", command],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"ssh {name} {command!r} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


# --- fixtures -----------------------------------------------------------------------------------


def _lab_problem() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root"
    if not (VENV_BIN / "ansible").exists():
        return f"no Ansible in {VENV_BIN}"
    for tool in ("systemd-nspawn", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    from fabricops_lab import preflight

    missing = preflight.problems()
    return "; ".join(missing) if missing else None


@pytest.fixture(scope="session")
def lab():
    """The default lab, up (dict from lab.json)."""
    problem = _lab_problem()
    if problem:
        if os.environ.get("FABRICOPS_REQUIRE_LAB") == "1":
            pytest.fail(f"lab not available: {problem}")
        pytest.skip(f"lab not available: {problem}")
    from fabricops_lab import paths, rack, topology

    if os.environ.get("FABRICOPS_LAB_SHARED") == "1":
        # scripts/test.sh brought the rack up and runs several pytest streams on it at once: each
        # takes it as it is (a reconcile from each at the same moment would race on lab.json), and
        # none takes it down
        data = paths.load_lab()
        if data.get("topology") != topology.load():
            pytest.fail("FABRICOPS_LAB_SHARED=1 but the lab that is up is not the default rack")
        yield data
        return
    was_up = False
    if paths.lab_json().exists():
        current = paths.load_lab()
        if current.get("topology") != topology.load():
            rack.down()
        else:
            was_up = True
    data = rack.up(inventory_dir=INVENTORY.parent)
    yield data
    if not was_up and os.environ.get("FABRICOPS_LAB_KEEP") != "1" and paths.lab_json().exists():
        rack.down()


def rebuild_lab(lab: dict, topology_file: str | None = None, n_hosts: int | None = None) -> dict:
    """Take the lab down and bring the given topology (default: the default rack) up fresh; the
    session's ``lab`` dict is updated in place when it is the default rack again. The image is cached,
    so this costs the hosts' boot (seconds), not a build. The controller's fact cache goes too: facts
    cached from the hosts that were (gathering = smart) must not stand for the new ones."""
    from fabricops_lab import rack

    rack.down()
    shutil.rmtree(REPO / ".cache" / "facts", ignore_errors=True)
    if topology_file is None and n_hosts is None:
        data = rack.up(inventory_dir=INVENTORY.parent)
        lab.clear()
        lab.update(data)
        return lab
    return rack.up(topology_file=topology_file, n_hosts=n_hosts, inventory_dir=INVENTORY.parent)


@pytest.fixture(scope="module")
def fresh_lab(lab):
    """The default rack as ``lab up`` boots it, for a file whose tests are about that (no OFED, no
    addresses, switches at their factory state): rebuilt, whatever files ran before."""
    return rebuild_lab(lab)


@pytest.fixture(scope="session", name="ansible")
def ansible_fixture(lab):
    return ansible


@pytest.fixture(scope="session", name="ansible_playbook")
def ansible_playbook_fixture(lab):
    return ansible_playbook


@pytest.fixture(scope="session", name="host_exec")
def host_exec_fixture(lab):
    return host_exec


@pytest.fixture(scope="session", name="ssh")
def ssh_fixture(lab):
    return ssh


#: the controller's address on the lab's management bridge (fabricops_lab.network)
LAB_CONTROLLER_IP = "198.51.100.1"


@pytest.fixture(scope="session")
def deb_mirror(lab):
    """Debian's prometheus-node-exporter .deb served over HTTP on the lab's controller address."""
    debs = sorted(glob.glob("/var/cache/apt/archives/prometheus-node-exporter_*_amd64.deb"))
    tmp = Path(tempfile.mkdtemp(prefix="fabricops-mirror-"))
    if debs:
        shutil.copy(debs[-1], tmp)
    else:
        proc = subprocess.run(["apt-get", "download", "prometheus-node-exporter"], cwd=tmp,
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            pytest.skip(f"no prometheus-node-exporter .deb on the controller: {proc.stderr.strip()}")
    deb = next(tmp.glob("*.deb"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer((LAB_CONTROLLER_IP, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"url": f"http://{LAB_CONTROLLER_IP}:{server.server_address[1]}/{deb.name}",
           "sha256": hashlib.sha256(deb.read_bytes()).hexdigest()}
    server.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
