"""The lab's rpm topology (``fabricops lab up --topology rpm``: gpu01 Debian 12, gpu02 the ``rpm`` host
variant: real dnf 4.14 / rpm 4.18 with Rocky Linux 9.4's identity; two HGX H100 servers).

Not part of ``.ci/run``: run it alone, as root, with the lab free and the rpm tools installed
(``bash scripts/setup.sh --rpm``; the lab builds its signed RPM repository only for this topology):

    flock /work/lab.lock .venv/bin/python -m pytest -p no:cacheprovider --durations=0 tests/lab_rpm

The module-scoped ``rpm_lab`` fixture takes down any other lab, brings the rpm topology up and takes
it down at the end (``FABRICOPS_LAB_KEEP=1`` keeps it).
"""

from __future__ import annotations

import shutil

import pytest
from integration.conftest import ansible_playbook
from labtools import topology_lab

TOPOLOGY = "rpm"
RPM_HOST = "gpu02"
DEB_HOST = "gpu01"
PLAYBOOK = "playbooks/fabric_manager.yml"


def fabric_manager(*extra: str):
    """``ansible-playbook playbooks/fabric_manager.yml`` on the lab's inventory."""
    return ansible_playbook(PLAYBOOK, *extra, timeout=900)


def _problem() -> str | None:
    missing = [t for t in ("rpmbuild", "rpmsign", "createrepo_c") if shutil.which(t) is None]
    return f"{', '.join(missing)} not installed (bash scripts/setup.sh --rpm)" if missing else None


@pytest.fixture(scope="module")
def rpm_lab():
    """The rpm topology, up (lab.json's data); down again after the module."""
    yield from topology_lab(TOPOLOGY, _problem())
