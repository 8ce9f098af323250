"""No evidence, no verdict (issue 35): a host whose every command fails at the transport is "not
checked", produces no pass/fail result, and takes no part in the pair rounds; with every host
unreachable the run exits 4 with no finding at all."""

from __future__ import annotations

import json

from test_coverage_engine import Hosts, _inventory

from fabricops.errors import EXIT_NORUN
from fabricops.verify import report
from fabricops.verify.engine import Options, unreached, verify

SSH_REFUSED = {"rc": 255, "stdout": "", "stderr": "ssh: connect to host 10.0.0.9 port 22: Connection refused"}


def _down(fake, gone):
    def run(host, cmd, timeout=60):
        return dict(SSH_REFUSED) if host in gone else fake.run(host, cmd, timeout)

    return run


def test_unreached_needs_every_command_to_fail_at_the_transport():
    assert unreached({"a": SSH_REFUSED, "b": SSH_REFUSED}).startswith("ssh: connect to host")
    assert unreached({"a": SSH_REFUSED, "b": {"rc": 1, "stdout": "", "stderr": "no such tool"}}) is None
    assert unreached({"a": {**SSH_REFUSED, "stdout": "partial"}}) is None  # it answered something
    assert unreached({}) is None


def test_every_host_unreachable_is_no_verdict_and_no_finding():
    hosts, hv = _inventory(n=4, leaves=1, spines=0)
    fake = Hosts(hv)
    for only in (None, "pairs", "hosts"):
        vr = verify(_down(fake, set(hosts)), hosts, hv, Options(only=only))
        assert set(vr.unreached) == set(hosts)
        assert vr.results == [] and vr.pairs is None, [r.message for r in vr.results]
        nc = {h: f"unreachable: {w}" for h, w in vr.unreached.items()}
        assert report.exit_status(vr, nc) == EXIT_NORUN
        data = json.loads(report.to_json(vr, nc))
        assert data["results"] == [] and data["blamed"] == [] and data["bad_parts"] == []
        assert {v["verdict"] for v in data["host_verdicts"].values()} == {"not_checked"}
        assert "FAILURES" not in report.terminal(vr, nc)


def test_one_unreachable_host_is_left_out_of_the_pairs_and_blamed_for_nothing():
    hosts, hv = _inventory(n=4, leaves=1, spines=0)
    fake = Hosts(hv)
    vr = verify(_down(fake, {"gpu02"}), hosts, hv, Options(only="pairs"))
    assert list(vr.unreached) == ["gpu02"]
    about_gpu02 = [r.message for r in vr.results if "gpu02" in r.host]
    assert about_gpu02 == []
    assert [r for r in vr.results if r.check == "ib_write_bw"] and all(r.ok for r in vr.results)
    nc = {"gpu02": "unreachable"}
    assert report.exit_status(vr, nc) == EXIT_NORUN
    assert report.host_verdicts(vr, nc)["gpu02"]["verdict"] == "not_checked"
