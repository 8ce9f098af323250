"""pytest-testinfra suite: point it at your fabric through testinfra's Ansible backend.

    py.test tests/infra --hosts='ansible://gpu_hosts' --ansible-inventory=inventories/prod/hosts.yml \
        [--fabric-profile hgx-h100-ndr] [--fabric-pairs]

Each host is checked with the same commands and evaluation as ``fabricops verify``
(fabricops.verify.hostchecks): the command runs through ``host.run``, its output is parsed on the
controller with fabricops.parsers. A check that could not run fails (fails closed).
"""

from __future__ import annotations

import pytest

from fabricops.verify import hostchecks
from fabricops.verify.expect import host_expect


def pytest_addoption(parser):
    g = parser.getgroup("fabricops")
    g.addoption(
        "--fabric-profile", default=None, help="hardware profile (default: fabricops_hardware_profile)"
    )
    g.addoption("--fabric-ofed-version", default=None, help="pinned MLNX_OFED version (default: inventory)")
    g.addoption("--fabric-pairs", action="store_true", help="also run the pairwise ib_write_bw/lat rounds")


def _switch_layers(host) -> dict[str, str]:
    groups = host.ansible.get_variables().get("groups") or {}
    out = {s: "Ethernet" for s in groups.get("switches", [])}
    out.update({s: "InfiniBand" for s in groups.get("ib_switches", [])})
    return out


@pytest.fixture(scope="module")
def fabric_expect(host, request):
    hv = host.ansible.get_variables()
    return host_expect(
        hv.get("inventory_hostname", host.backend.get_hostname()),
        hv,
        profile=request.config.getoption("--fabric-profile"),
        ofed_override=request.config.getoption("--fabric-ofed-version"),
        switch_link_layers=_switch_layers(host),
    )


@pytest.fixture(scope="module")
def fabric_results(host, fabric_expect):
    """Every host and GPU check of this host, evaluated once per module: the host's evidence read in
    one session, as ``fabricops verify`` reads it (fabricops.verify.transport.batch_on)."""
    from fabricops.verify.transport import batch_on

    name = fabric_expect.host
    raw = batch_on(host, name, hostchecks.commands(fabric_expect), 60)
    return hostchecks.evaluate(fabric_expect, raw)


def assert_check(results, check: str) -> None:
    mine = [r for r in results if r.check == check]
    assert mine, f"{check}: no result (failing closed)"
    bad = [r for r in mine if not r.ok]
    assert not bad, "\n".join(
        f"{r.message}" + (f" -- likely cause: {r.cause}" if r.cause else "") for r in bad
    )
    if all(r.status == "skip" for r in mine):
        pytest.skip(mine[0].message)
