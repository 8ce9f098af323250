"""The GB200 NVL72 lab (``fabricops lab up --topology gb200``: two NVLink domains of two compute trays).

Not part of ``.ci/run`` (its time budget): run it alone, as root, with the lab free
(docs/development.md, "The GB200 rack test"). The module-scoped ``gb200_lab`` fixture takes down any
other lab, brings the gb200 topology up and takes it down at the end (``FABRICOPS_LAB_KEEP=1`` keeps
it); ``converged`` runs site.yml once on it, as scripts/demo.sh runs it on a new rack.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from integration.conftest import REPO, ansible_env, ansible_playbook
from labtools import topology_lab

TOPOLOGY = "gb200"
FABRICOPS = str(Path(sys.executable).with_name("fabricops"))
#: the consent a new rack's first run gives (scripts/demo.sh): every host and switch in one batch
SITE_ARGS = ("-e", "mlnx_ofed_allow_restart=true", "-e", "ipoib_allow_restart=true",
             "-e", "fabricops_serial=100%", "-e", "fabricops_switch_serial=100%")


def site(*extra: str):
    """``ansible-playbook site.yml`` with the demo's consent variables."""
    return ansible_playbook("site.yml", *SITE_ARGS, *extra, timeout=1200)


def fabricops(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([FABRICOPS, *args], cwd=REPO, env=ansible_env(), capture_output=True, text=True,
                          timeout=timeout)


def verify(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    """``fabricops verify --json`` (with its printed summary): exit status, report, output."""
    out = tmp_path / f"verify{len(list(tmp_path.glob('verify*.json')))}.json"
    p = fabricops("verify", "--json", str(out), *args)
    return p.returncode, json.loads(out.read_text()), p.stdout + p.stderr


@pytest.fixture(scope="module")
def gb200_lab():
    """The gb200 topology, up (lab.json's data); down again after the module."""
    yield from topology_lab(TOPOLOGY)


@pytest.fixture(scope="module")
def trays(gb200_lab) -> dict[str, str]:
    """tray name -> its NVLink domain."""
    return {h["name"]: h["nvlink_domain"] for h in gb200_lab["topology"]["hosts"]}


@pytest.fixture(scope="module")
def converged(gb200_lab):
    """The first site.yml run on the new rack (its AnsibleRun)."""
    run = site()
    assert run.rc == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return run
