"""Blame the part that failed (issue 35): when isolation names a cable between switches, the hosts at
its ends are not failed, in the terminal table and in the JSON; when it names a host's port, that host
fails. Fake hosts whose perftest results follow the fabric's routing (test_coverage_engine.Hosts)."""

from __future__ import annotations

import json

from test_coverage_engine import Hosts, _inventory

from fabricops.model.fabric import dirlink_str
from fabricops.verify import report
from fabricops.verify.engine import Options, verify
from fabricops.verify.pairs import blame


def _bad_isl(fake):
    return next(d for d in sorted(fake.fabric.isl_links()) if d[0][0] == "ib-leaf2")


def test_a_named_isl_fails_the_cable_and_no_host():
    hosts, hv = _inventory()
    fake = Hosts(hv)
    bad = _bad_isl(fake)
    fake.bad = {bad, (bad[1], bad[0])}  # the cable trained at 2X: both directions slow
    vr = verify(fake.run, hosts, hv, Options(only="pairs"))
    up = f"ISL {bad[0][0]}:{bad[0][1]}<>{bad[1][0]}:{bad[1][1]}"
    failed = [r for r in vr.results if r.check == "ib_write_bw" and not r.ok]
    assert failed, "the fault must fail pair tests for this test to mean anything"
    assert all(r.details["explained_by"] == {"kind": "cable", "name": up} for r in failed)
    assert blame(vr.results) == {}
    verdicts = report.host_verdicts(vr)
    assert {h: v["verdict"] for h, v in verdicts.items()} == {h: "pass" for h in hosts}
    assert report.exit_status(vr) == 1  # the run still fails: on the cable
    data = json.loads(report.to_json(vr))
    assert data["bad_parts"] == [{"kind": "cable", "name": up, "failed_tests": len(failed)}]
    assert data["blamed"] == [] and set(v["verdict"] for v in data["host_verdicts"].values()) == {"pass"}
    text = report.terminal(vr)
    rows = [ln for ln in text.splitlines() if ln[:1].strip() and ln.split()[0] in hosts]
    assert rows and all(ln.rstrip().endswith("pass") for ln in rows), text
    assert f"cable {up}: {len(failed)} failed pair test(s) cross it" in text
    assert "blamed by pair tests" not in text


def test_a_named_host_port_fails_that_host_only():
    hosts, hv = _inventory()
    fake = Hosts(hv)
    port = ("gpu07", "mlx5_0/1")
    fake.bad = {fake.fabric.up(port), fake.fabric.down(port)}
    vr = verify(fake.run, hosts, hv, Options(only="pairs"))
    assert [(h, rail) for h, rail in blame(vr.results)] == [("gpu07", 0)]
    verdicts = report.host_verdicts(vr)
    assert verdicts["gpu07"]["verdict"] == "fail"
    assert {h for h, v in verdicts.items() if v["verdict"] != "pass"} == {"gpu07"}
    assert [p["name"] for p in report.bad_parts(vr)] == ["host port gpu07 mlx5_0/1"]
    assert dirlink_str(fake.fabric.up(port)).startswith("gpu07:mlx5_0/1>")
