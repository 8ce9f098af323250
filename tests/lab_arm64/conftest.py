"""The mixed-architecture lab (``fabricops lab up --topology arm64``: gh01, a Grace Hopper server on
Debian 12 arm64 under qemu-user, and gpu01, an amd64 HGX H100 server; docs/lab-fidelity.md, "Host
variants", arm64).

Not part of ``.ci/run`` and not collected by ``testpaths``: it needs qemu-user-static
(``scripts/setup.sh --arm64``), and a cold arm64 image costs a debootstrap under qemu. Run it alone, as
root, with the lab free (docs/development.md, "The arm64 host test"). The module-scoped ``arm64_lab``
fixture takes down any other lab, brings this one up and takes it down at the end
(``FABRICOPS_LAB_KEEP=1`` keeps it).
"""

from __future__ import annotations

import shutil

import pytest
from labtools import topology_lab

TOPOLOGY = "arm64"
ARM64_HOST = "gh01"
AMD64_HOST = "gpu01"


def _arm64_problem() -> str | None:
    from fabricops_lab import foreign_arch

    if not shutil.which("qemu-aarch64-static"):
        return "no qemu-aarch64-static: run scripts/setup.sh --arm64"
    if not foreign_arch.BINFMT_DIR.is_dir():
        return f"no {foreign_arch.BINFMT_DIR}: this kernel has no binfmt_misc"
    return None


@pytest.fixture(scope="module")
def arm64_lab():
    yield from topology_lab(TOPOLOGY, _arm64_problem())
