"""The product's fabric model and the lab emulator route InfiniBand the same way (OpenSM ftree by
destination position on its leaf), hop for hop, on the lab's two-tier shapes; and that rule routes
every ISL direction, so the coverage schedule covers every directed cable (SPEC-18 §3, issue 18)."""

from __future__ import annotations

import pytest

from fabricops.model.fabric import Fabric
from fabricops.verify import coverage
from fabricops_lab import hardware, inventory, topology
from fabricops_lab.emul.perftest import Fabric as EmulFabric

SHAPES = [8, 16, 32]


def _shape(n):
    topo = topology.resolve("two-tier", n)
    cab = hardware.cabling_json(topo)
    inv_cab = [{k: c[k] for k in inventory.CABLE_ORDER} for c in topo["cabling"]]
    inv_links = [{k: ln[k] for k in inventory.LINK_ORDER if k in ln} for ln in topo["links"]]
    tiers = {s["name"]: s.get("tier", "leaf") for s in topo["switches"]}
    fabrics = Fabric.from_inventory(inv_cab, inv_links, tiers=tiers)
    (ib,) = [f for f in fabrics if not f.roce]
    return cab, ib


def _emul_path(emul, cab, src, dst):
    def cable(ep):
        host, dev = ep
        hca, port = dev.split("/")
        (c,) = [c for c in cab["links"] if c["host"] == host and c["hca"] == hca and str(c["port"]) == port]
        return c

    hops = emul.route(cable(src), cable(dst), lid=None)
    return [((a, pa), (b, pb)) for a, pa, b, pb in hops]


@pytest.mark.parametrize("n", SHAPES)
def test_model_and_emulator_agree_on_every_infiniband_pair(n):
    cab, ib = _shape(n)
    emul = EmulFabric(cab)
    assert len(ib.endpoints) == n and len(ib.leaves) == 4 and len(ib.spines) == 2
    pairs = 0
    for src in ib.endpoints:
        for dst in ib.endpoints:
            if src == dst:
                continue
            assert ib.path(src, dst) == _emul_path(emul, cab, src, dst), (src, dst)
            pairs += 1
    assert pairs == n * (n - 1)


@pytest.mark.parametrize("n", SHAPES)
def test_every_infiniband_isl_direction_is_routed_and_scheduled(n):
    _cab, ib = _shape(n)
    used = set()
    for src in ib.endpoints:
        for dst in ib.endpoints:
            if src != dst:
                used.update(ib.path(src, dst))
    isl = ib.isl_links()
    assert len(isl) == 2 * 4 * 2 * max(1, -(-(n // 4) // 2))  # both directions, 4 leaves x 2 spines x U
    assert isl - used == set()
    assert coverage.unroutable(ib) == set()
    rounds = coverage.schedule(ib)
    covered = {d for r in rounds for t in r for d in ib.path(t.src, t.dst)}
    assert covered == ib.directed()
