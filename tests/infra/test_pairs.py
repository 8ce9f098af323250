"""Pairwise ib_write_bw / ib_write_lat per rail in circle-method rounds (with --fabric-pairs).

Runs once for the session over every host testinfra was given; each host's test fails when a pair
it is in fails (the message carries blame and likely cause).
"""

import pytest

from fabricops.verify import hostchecks, pairs
from fabricops.verify.engine import explain_roce, plan_rails
from fabricops.verify.expect import host_expect


@pytest.fixture(scope="session")
def pair_results(request):
    if not request.config.getoption("--fabric-pairs"):
        pytest.skip("pairwise tests not requested (--fabric-pairs)")
    import testinfra

    spec = request.config.getoption("hosts")
    inv = request.config.getoption("ansible_inventory")
    names = testinfra.get_backend(
        spec[0] if isinstance(spec, list) else spec, ansible_inventory=inv
    ).get_hosts(spec[0] if isinstance(spec, list) else spec, ansible_inventory=inv)
    hosts = {n: testinfra.get_host(f"ansible://{n}", ansible_inventory=inv) for n in names}
    groups = next(iter(hosts.values())).ansible.get_variables().get("groups") or {}
    layers = {s: "Ethernet" for s in groups.get("switches", [])}
    layers.update({s: "InfiniBand" for s in groups.get("ib_switches", [])})
    expects = {
        n: host_expect(
            n,
            h.ansible.get_variables(),
            profile=request.config.getoption("--fabric-profile"),
            switch_link_layers=layers,
        )
        for n, h in hosts.items()
    }

    def run(name, cmd, timeout):
        r = hosts[name].run(f"timeout -k 5 {int(timeout)} sh -c {pairs.shlex.quote(cmd)}")
        return {"rc": r.rc, "stdout": r.stdout, "stderr": r.stderr}

    # every cabled port, InfiniBand and RoCE (ibstat for link layers/rates, GID tables for RoCE)
    raws = {
        n: {k: run(n, c, 60) for k, c in {"ibstat": "ibstat", **hostchecks.pair_commands(e)}.items()}
        for n, e in expects.items()
    }
    rails, errors = plan_rails(expects, raws)
    first = next(iter(expects.values()))
    pr = pairs.run_pairs(
        run,
        list(expects),
        rails,
        {n: str(e.address) for n, e in expects.items()},
        first.profile,
        first.rate_gbps,
        first.perftest,
    )
    pairs.annotate(pr.results, n_hosts=len(expects))
    explain_roce(pr.results, rails, [], None)
    pr.results.extend(errors)
    return pr.results


def test_pairs(host, pair_results):
    me = host.ansible.get_variables()["inventory_hostname"]
    bad = [r for r in pair_results if me in r.host.split("<->") and not r.ok]
    assert not bad, "\n".join(f"{r.message} -- likely cause: {r.cause}" for r in bad)
