"""The lab rack with every host variant (``fabricops lab up --topology variants``: gpu01 and gpu02 with
ifupdown, gpu03 netplan over systemd-networkd, gpu04 NetworkManager; docs/lab-fidelity.md, "Host
variants").

Not part of ``.ci/run`` (its time budget; the default rack there has the netplan host): run it alone,
as root, with the lab free (docs/development.md, "The mixed-variant rack test"). The module-scoped
``variants_lab`` fixture takes down any other lab, brings this one up and takes it down at the end
(``FABRICOPS_LAB_KEEP=1`` keeps it).
"""

from __future__ import annotations

import os
import shutil

import pytest
from integration.conftest import INVENTORY, REPO, _lab_problem

TOPOLOGY = "variants"


@pytest.fixture(scope="module")
def variants_lab():
    problem = _lab_problem()
    if problem:
        if os.environ.get("FABRICOPS_REQUIRE_LAB") == "1":
            pytest.fail(f"lab not available: {problem}")
        pytest.skip(f"lab not available: {problem}")
    from fabricops_lab import paths, rack, topology

    if paths.lab_json().exists() and paths.load_lab().get("topology") != topology.resolve(TOPOLOGY):
        rack.down()
    shutil.rmtree(REPO / ".cache" / "facts", ignore_errors=True)  # another lab's hosts' facts
    data = rack.up(TOPOLOGY, None, INVENTORY.parent)
    yield data
    if os.environ.get("FABRICOPS_LAB_KEEP") != "1" and paths.lab_json().exists():
        rack.down()
