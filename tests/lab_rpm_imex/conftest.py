"""The lab's gb200-rpm topology (``fabricops lab up --topology gb200-rpm``: one NVLink domain of two GB200
NVL72 compute trays, tray01 Debian 12 and tray02 the ``rpm`` host variant: real dnf 4.14 / rpm 4.18 with
Rocky Linux 9.4's identity).

Not part of ``.ci/run``: run it alone, as root, with the lab free and the rpm tools installed
(``bash scripts/setup.sh --rpm``; the lab builds its signed RPM repository only for a topology with an
rpm host):

    flock /work/lab.lock .venv/bin/python -m pytest -p no:cacheprovider --durations=0 tests/lab_rpm_imex

The module-scoped ``imex_rpm_lab`` fixture takes down any other lab, brings the gb200-rpm topology up
and takes it down at the end (``FABRICOPS_LAB_KEEP=1`` keeps it).
"""

from __future__ import annotations

import shutil

import pytest
from integration.conftest import ansible_playbook
from labtools import topology_lab

TOPOLOGY = "gb200-rpm"
RPM_TRAY = "tray02"
DEB_TRAY = "tray01"
#: the IMEX phase alone: site.yml's other phases' roles (MLNX_OFED, GPUDirect, ...) refuse a Rocky host
#: (fabricops.platforms.SUPPORT), even under --tags imex (their platform gates are tagged always)
PLAYBOOK = "playbooks/imex.yml"


def imex(*extra: str):
    """``ansible-playbook playbooks/imex.yml`` on the lab's inventory."""
    return ansible_playbook(PLAYBOOK, *extra, timeout=900)


def _problem() -> str | None:
    missing = [t for t in ("rpmbuild", "rpmsign", "createrepo_c") if shutil.which(t) is None]
    return f"{', '.join(missing)} not installed (bash scripts/setup.sh --rpm)" if missing else None


@pytest.fixture(scope="module")
def imex_rpm_lab():
    """The gb200-rpm topology, up (lab.json's data); down again after the module."""
    yield from topology_lab(TOPOLOGY, _problem())
