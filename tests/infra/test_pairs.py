"""Pairwise ib_write_bw / ib_write_lat on every rail (with --fabric-pairs), judged as
``fabricops verify --only pairs`` judges them: the same transport (testinfra's Ansible backend,
fabricops.verify.transport.Fabric), the same engine (the coverage schedule, isolation, blame), run
once for the session over the hosts testinfra was given.

Each host's test fails when the run's verdict for that host is not "pass" (a port of its own named
bad, or blamed by its peers); ``test_fabric_parts`` fails when isolation named a part that is no
host's (a cable between switches) or a link could not be proven. A healthy host on the path of a bad
cable passes: the cable fails, not the host (docs/verify.md).
"""

from __future__ import annotations

import pytest


def _limit(spec: str | None) -> str:
    """``ansible://gpu_hosts,ansible://gpu05`` -> ``gpu_hosts,gpu05`` (an Ansible host pattern)."""
    parts = [p.strip() for p in (spec or "").split(",") if p.strip()]
    if not parts or not all(p.startswith("ansible://") for p in parts):
        pytest.fail("--fabric-pairs needs the Ansible backend: --hosts='ansible://PATTERN' "
                    "--ansible-inventory=INV")
    return ",".join(p[len("ansible://"):] for p in parts)


@pytest.fixture(scope="session")
def pair_run(request):
    if not request.config.getoption("--fabric-pairs"):
        pytest.skip("pairwise tests not requested (--fabric-pairs)")
    from fabricops.verify.cli import Reach
    from fabricops.verify.engine import Options, verify
    from fabricops.verify.transport import Fabric

    fabric = Fabric(request.config.getoption("ansible_inventory"), _limit(request.config.getoption("hosts")))
    hostvars = {h: fabric.hostvars(h) for h in fabric.hosts}
    roce = next((hv.get("fabricops_roce") for hv in hostvars.values() if hv.get("fabricops_roce")), None)
    reach = Reach(fabric.run)
    opts = Options(only="pairs", profile=request.config.getoption("--fabric-profile"))
    vr = verify(reach, fabric.hosts, hostvars, opts, fabric.switch_link_layers(),
                switch_reader=fabric.switch_reader(roce))
    not_checked = {h: f"unreachable: {why}" for h, why in vr.unreached.items()}
    not_checked.update(reach.not_checked(vr.hosts))
    return vr, not_checked


def _explain(vr, host: str | None = None) -> str:
    rows = [r for r in vr.results
            if not r.ok and (host is None or host in r.host.replace("<->", ",").split(","))]
    return "\n".join(f"{r.message}" + (f" -- likely cause: {r.cause}" if r.cause else "") for r in rows[:20])


def test_pairs(host, pair_run):
    from fabricops.verify.report import host_verdicts

    vr, not_checked = pair_run
    me = host.ansible.get_variables()["inventory_hostname"]
    v = host_verdicts(vr, not_checked).get(me) or {"verdict": "not_checked", "why": "not in the pair run"}
    assert v["verdict"] == "pass", f"{me}: {v['verdict']}: {v['why']}\n{_explain(vr, me)}"


def test_fabric_parts(pair_run):
    """What no host owns: a cable or switch port isolation named, a link neither measured nor read
    healthy, a schedule that could not be planned."""
    from fabricops.verify.report import bad_parts

    vr, _not_checked = pair_run
    # a host's own port, named by isolation, fails that host's test_pairs (host_verdicts), not this one
    parts = [p for p in bad_parts(vr) if p["kind"] != "hca_port"]
    assert parts == [], _explain(vr)
    fabric_wide = [r for r in vr.results if not r.ok and r.check not in ("ib_write_bw", "ib_write_lat")
                   and not (r.check == "isolation" and ": bad host port " in r.message)]
    assert fabric_wide == [], "\n".join(r.message for r in fabric_wide)
