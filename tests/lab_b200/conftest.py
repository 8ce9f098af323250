"""The HGX B200 lab (``fabricops lab up --topology b200``: two 8-GPU B200 servers on one InfiniBand switch).

Not part of ``.ci/run`` (its time budget): run it alone, as root, with the lab free
(docs/development.md, "The HGX B200 lab test"). The module-scoped ``b200_lab`` fixture takes down any
other lab, brings the b200 topology up and takes it down at the end (``FABRICOPS_LAB_KEEP=1`` keeps
it); ``converged`` runs playbooks/fabric_manager.yml once on it (after reading the fabric state of the
new servers, whose fabric manager is not installed yet).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from integration.conftest import REPO, ansible_env, ansible_playbook, ssh
from labtools import topology_lab

TOPOLOGY = "b200"
HOSTS = ("b200-01", "b200-02")
PLAYBOOK = "playbooks/fabric_manager.yml"
FABRICOPS = str(Path(sys.executable).with_name("fabricops"))


def fabric_manager(*extra: str):
    """``ansible-playbook playbooks/fabric_manager.yml`` on the lab's inventory."""
    return ansible_playbook(PLAYBOOK, *extra, timeout=900)


def fabricops(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([FABRICOPS, *args], cwd=REPO, env=ansible_env(), capture_output=True, text=True,
                          timeout=timeout)


def verify_fabric_manager(tmp_path: Path) -> dict[str, dict]:
    """``fabricops verify --only gpus``: host -> its fabric_manager result (the report's other GPU checks
    are not this test's business)."""
    out = tmp_path / f"verify{len(list(tmp_path.glob('verify*.json')))}.json"
    p = fabricops("verify", "--only", "gpus", "--json", str(out))
    assert out.is_file(), p.stdout[-3000:] + p.stderr[-3000:]
    data = json.loads(out.read_text())
    return {r["host"]: r for r in data["results"] if r["check"] == "fabric_manager"}


def fabric_states(host: str) -> set[tuple[str, str]]:
    """The (State, Status) pairs of the Fabric blocks of HOST's ``nvidia-smi -q``."""
    out = ssh(host, "nvidia-smi -q | grep -A2 '^    Fabric$'").stdout
    states, status = [], []
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "State":
            states.append(value.strip())
        elif key.strip() == "Status":
            status.append(value.strip())
    return set(zip(states, status, strict=True))


@pytest.fixture(scope="module")
def b200_lab():
    """The b200 topology, up (lab.json's data); down again after the module."""
    yield from topology_lab(TOPOLOGY)


@pytest.fixture(scope="module")
def before(b200_lab) -> dict[str, set]:
    """Each server's fabric state as the lab brings it up (no fabric manager installed)."""
    return {h: fabric_states(h) for h in HOSTS}


@pytest.fixture(scope="module")
def converged(before):
    """The first fabric_manager.yml run on the new servers (its AnsibleRun)."""
    run = fabric_manager()
    assert run.rc == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return run
