"""The lab rack with every host variant (``fabricops lab up --topology variants``: gpu01 and gpu02 with
ifupdown, gpu03 netplan over systemd-networkd, gpu04 NetworkManager; docs/lab-fidelity.md, "Host
variants").

Not part of ``.ci/run`` (its time budget; the default rack there has the netplan host): run it alone,
as root, with the lab free (docs/development.md, "The mixed-variant rack test"). The module-scoped
``variants_lab`` fixture takes down any other lab, brings this one up and takes it down at the end
(``FABRICOPS_LAB_KEEP=1`` keeps it).
"""

from __future__ import annotations

import pytest
from labtools import topology_lab

TOPOLOGY = "variants"


@pytest.fixture(scope="module")
def variants_lab():
    yield from topology_lab(TOPOLOGY)
