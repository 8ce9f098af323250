"""Outliers, not only floors (verify/outliers.py): ClusterKit's rule -- a bandwidth below 93 % of the
best on the rail, a latency above 2.1x the best -- on pair results made by ``pairs.evaluate`` from real
perftest captures (the numbers edited), and end to end through ``engine.verify``."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from captures import read_fixture
from fake_counters import PortCounters

from fabricops.model.profiles import load_profile
from fabricops.verify import outliers, pairs
from fabricops.verify.engine import Options, verify
from fabricops.verify.result import ERROR, FAIL, PASS, SKIP, passed

PROFILE = load_profile("hgx-h100-ndr")
BW = read_fixture("perftest-bw", "csegpu_ndr_write_bw_gbits_client.txt")  # 392.34 Gb/s
LAT = read_fixture("perftest-lat", "csegpu_ndr_send_lat_client.txt")  # t_typical 1.27 us
BW_ROW = "392.38             392.34"
LAT_ROW = "1.24           5.19         1.27"
#: a latency cap loose enough that a pair at 2.2x the best still passes it (the shipped cap is 2.5 us)
LOOSE = replace(PROFILE, thresholds={**PROFILE.thresholds,
                                     "latency_us": {**PROFILE.thresholds["latency_us"],
                                                    "ib_write_lat": {"value": 5.0, "source": "test"}}})


def _ok(text):
    return {"rc": 0, "stdout": text, "stderr": ""}


def _bw(a, b, gbps, rail=2, name="mlx5_2/1", layer="Ethernet"):
    test = pairs.RailTest(rail, a, name, b, name)
    text = BW.replace(BW_ROW, f"{gbps + 0.04:.2f}             {gbps:.2f}")
    r = pairs.evaluate(test, "ib_write_bw", _ok(text), _ok(""), PROFILE, 400.0, 1.0, layer)
    r.details["rail_name"] = name  # as run_test writes it
    return r


def _lat(a, b, us, rail=2, name="mlx5_2/1", layer="Ethernet", profile=LOOSE):
    test = pairs.RailTest(rail, a, name, b, name)
    text = LAT.replace(LAT_ROW, f"{us - 0.03:.2f}           5.19         {us:.2f}")
    r = pairs.evaluate(test, "ib_write_lat", _ok(text), _ok(""), profile, 400.0, 1.0, layer)
    r.details["rail_name"] = name
    return r


def test_a_pair_that_passes_the_floor_at_92_percent_of_the_best_is_an_outlier():
    rs = [_bw("gpu01", "gpu02", 392.34), _bw("gpu03", "gpu04", 391.9), _bw("gpu01", "gpu03", 362.0),
          _bw("gpu02", "gpu04", 390.8)]
    assert all(r.status == PASS for r in rs) and rs[2].threshold == 360  # RoCE floor: 90 % of 400
    got = outliers.judge(rs)
    bad = [r for r in got if r.status == FAIL]
    assert len(bad) == 1 and len(got) == 1  # no "clean rail" result where an outlier speaks for it
    o = bad[0]
    assert (o.check, o.host, o.device) == ("outlier", "gpu01<->gpu03", "mlx5_2/1<->mlx5_2/1")
    assert o.measured == 92.3 and o.threshold == 93.0 and o.op == ">=" and o.unit == "% of best"
    assert o.cause.startswith("outlier: 92% of the best on rail mlx5_2/1 (ClusterKit 93% rule)")
    assert o.message == (
        "gpu01<->gpu03 mlx5_2/1<->mlx5_2/1: ib_write_bw 362 Gb/s is 92% of the best on rail mlx5_2/1 "
        "(392.34 Gb/s, gpu01<->gpu02; 4 results); it passes its floor (>= 360) but is an outlier "
        "(ClusterKit 93% rule)"
    )
    assert "ClusterKit" in o.source and "93 %" in o.source
    # blame and reports see a failed pair on its rail
    assert (o.details["client"], o.details["server"], o.details["rail"]) == ("gpu01", "gpu03", 2)
    assert rs[2].status == PASS and rs[2].details["outlier"]["outlier"] is True  # the floor stands
    assert rs[1].details["outlier"] == {"best": 392.34, "best_pair": "gpu01<->gpu02", "results": 4,
                                        "ratio": 99.9, "outlier": False}


def test_at_93_percent_is_not_an_outlier_and_the_rail_says_it_was_judged():
    rs = [_bw("gpu01", "gpu02", 392.34), _bw("gpu03", "gpu04", 391.0), _bw("gpu01", "gpu03", 365.0)]
    got = outliers.judge(rs)  # 365 / 392.34 = 93.03 %
    assert [r.status for r in got] == [PASS]
    assert got[0].message.startswith("rail mlx5_2/1 (Ethernet): 3 ib_write_bw results, none an outlier")
    assert got[0].host == "gpu01,gpu02,gpu03,gpu04" and passed(got)


def test_a_failed_floor_is_not_reported_twice_and_counts_toward_the_rail():
    rs = [_bw("gpu01", "gpu02", 392.34), _bw("gpu03", "gpu04", 391.0), _bw("gpu01", "gpu03", 196.2)]
    assert rs[2].status == FAIL
    got = outliers.judge(rs)
    assert [r.status for r in got] == [PASS]  # judged (3 results); the failure is the floor's
    assert rs[2].details["outlier"]["outlier"] is True


def test_latency_above_2_1x_the_best_is_an_outlier():
    rs = [_lat("gpu01", "gpu02", 1.27), _lat("gpu03", "gpu04", 1.31), _lat("gpu01", "gpu03", 2.80),
          _lat("gpu02", "gpu04", 2.60)]
    assert all(r.status == PASS for r in rs)  # the loose cap: 5 us
    bad = [r for r in outliers.judge(rs) if r.status == FAIL]
    assert [r.host for r in bad] == ["gpu01<->gpu03"]  # 2.80 / 1.27 = 2.2x; 2.60 / 1.27 = 2.05x
    assert (bad[0].measured, bad[0].threshold, bad[0].op, bad[0].unit) == (2.2, 2.1, "<=", "x best")
    assert bad[0].cause.startswith("outlier: 2.2x the best on rail mlx5_2/1 (ClusterKit 2.1x rule)")


def test_fewer_than_three_results_on_a_rail_give_no_verdict_and_say_so():
    rs = [_bw("gpu01", "gpu02", 392.34), _bw("gpu03", "gpu04", 300.0, rail=3, name="mlx5_3/1"),
          _bw("gpu01", "gpu04", 362.0, rail=3, name="mlx5_3/1"), _lat("gpu01", "gpu02", 1.27)]
    got = outliers.judge(rs)
    assert {r.device: r.status for r in got} == {"mlx5_2/1": SKIP, "mlx5_3/1": SKIP}
    skip = next(r for r in got if r.device == "mlx5_2/1")
    assert skip.message == (
        "rail mlx5_2/1 (Ethernet): 1 ib_write_bw and 1 ib_write_lat result(s); an outlier verdict needs "
        "at least 3 of a test on the rail: no outlier verdict there"
    )
    assert passed(got)  # not a failure: there is nothing to compare with


def test_rails_link_layers_and_rates_are_judged_apart():
    roce = [_bw("gpu01", "gpu02", 392.34), _bw("gpu03", "gpu04", 392.0), _bw("gpu01", "gpu03", 391.0)]
    # the same port name on another link layer: its own group (IB floor 390, published)
    ib = [_bw("gpu01", "gpu02", 392.3, layer="InfiniBand"), _bw("gpu03", "gpu04", 391.2, layer="InfiniBand"),
          _bw("gpu01", "gpu03", 390.1, layer="InfiniBand")]
    # another rail whose best is lower: 362 is 99 % of its own best, 92 % of the other rail's
    other = [_bw(a, b, v, rail=3, name="mlx5_3/1") for a, b, v in
             (("gpu01", "gpu02", 364.0), ("gpu03", "gpu04", 363.5), ("gpu01", "gpu03", 362.0))]
    got = outliers.judge(roce + ib + other)
    assert [r.status for r in got] == [PASS, PASS, PASS]
    assert sorted(r.message.split(":")[0] for r in got) == [
        "rail mlx5_2/1 (Ethernet)", "rail mlx5_2/1 (InfiniBand)", "rail mlx5_3/1 (Ethernet)"]


@pytest.mark.parametrize(
    ("value", "status", "text"),
    [
        (False, SKIP, "outliers not judged (fabricops_verify_outliers: false): only the floors decide"),
        ({"bw_percent": 120}, ERROR,
         "outliers not judged: fabricops_verify_outliers.bw_percent is 120; use a number from 50 to 100."),
        ({"min_results": 2}, ERROR,
         "outliers not judged: fabricops_verify_outliers.min_results is 2; use an integer from 3 to 10000."),
        ({"bw_pct": 90}, ERROR,
         "outliers not judged: fabricops_verify_outliers has unknown key(s) bw_pct; use bw_percent, "
         "lat_factor, min_results, enabled."),
        ("maybe", ERROR,
         "outliers not judged: fabricops_verify_outliers is 'maybe'; use false, true or a mapping of "
         "bw_percent, lat_factor, min_results."),
    ],
)
def test_the_inventory_turns_the_rule_off_or_is_one_sentence(value, status, text):
    rs = [_bw("gpu01", "gpu02", 392.34), _bw("gpu03", "gpu04", 391.9), _bw("gpu01", "gpu03", 362.0)]
    got = outliers.judge(rs, {"fabricops_verify_outliers": value})
    assert [(r.status, r.message) for r in got] == [(status, text)]


def test_inventory_text_reads_as_ansible_reads_it():
    assert outliers.rules_from("false").enabled is False and outliers.rules_from("yes").enabled is True
    assert outliers.rules_from({"bw_percent": "95", "enabled": "on"}) == outliers.Rules(bw_percent=95.0)
    assert outliers.rules_from({"min_results": "4"}).min_results == 4
    with pytest.raises(outliers.RulesError, match=r"min_results is 4\.5; use an integer"):
        outliers.rules_from({"min_results": 4.5})


def test_the_inventory_tunes_the_tolerance():
    rs = [_bw("gpu01", "gpu02", 392.34), _bw("gpu03", "gpu04", 391.9), _bw("gpu01", "gpu03", 380.0)]
    assert [r.status for r in outliers.judge(rs)] == [PASS]  # 96.9 % of the best
    got = outliers.judge(rs, {"fabricops_verify_outliers": {"bw_percent": 98}})
    assert [r.status for r in got] == [FAIL] and "(ClusterKit 98% rule)" in got[0].cause
    assert got[0].source.startswith("fabricops_verify_outliers: bandwidth below 98 %")


# --- end to end: engine.verify runs the rule after the pair phase ---------------------------------------


def _gids(hca, i):
    """What `grep -H '' .../gids/* .../gid_attrs/types/*` prints on an mlx5 RoCE port (203.0.113.i)."""
    base = f"/sys/class/infiniband/{hca}/ports/1"
    mapped = f"0000:0000:0000:0000:0000:ffff:cb00:71{i:02x}"
    return "\n".join([f"{base}/gids/0:fe80:0000:0000:0000:ba3f:d2ff:fea0:0120", f"{base}/gids/1:{mapped}",
                      f"{base}/gid_attrs/types/0:IB/RoCE v1", f"{base}/gid_attrs/types/1:RoCE v2"]) + "\n"


class Fabric:
    """Perftest from the real captures; the pairs of ``slow`` run at ``gbps`` (RoCE rail mlx5_0)."""

    def __init__(self, slow=None, gbps=391.0):
        self.slow, self.gbps = slow, gbps
        self.port_counters = PortCounters()  # the negative controls read them around every bw test

    def run(self, host, cmd, timeout=60):
        answer = self.port_counters.answer(host, cmd)
        if answer is not None:
            return answer
        if cmd.startswith("grep -H '' /sys/class/infiniband/mlx5_0/"):
            return _ok(_gids("mlx5_0", int(host[-1])))
        if "ib_write_bw" in cmd and "wait $p" not in cmd:
            peer = "gpu0" + re.search(r"203\.0\.113\.(\d+)", cmd)[1]
            text = BW
            if self.slow in (host, peer):
                text = BW.replace(BW_ROW, f"{self.gbps + 0.04:.2f}             {self.gbps:.2f}")
            self.port_counters.credit(host, "mlx5_0", peer, "mlx5_0", text)
            return _ok(text)
        if "ib_write_lat" in cmd and "wait $p" not in cmd:
            return _ok(LAT)
        return _ok("")


HV = {
    "fabricops_hardware_profile": "hgx-h100-ndr",
    "fabricops_verify_perftest": {"server_start_s": 0},
    # a RoCE rail: no published floor, 90 % of 400 = 360 Gb/s
    "fabricops_verify_ports": [{"hca": "mlx5_0", "port": 1, "link_layer": "Ethernet", "speed": "400GbE"}],
}


def _verify(fake, extra=None):
    hosts = [f"gpu0{i}" for i in range(1, 5)]
    hv = {h: dict(HV, ansible_host=f"addr-{h}", **(extra or {})) for h in hosts}
    return verify(fake.run, hosts, hv, Options(only="pairs", rerun=False))


def test_verify_reports_the_host_whose_pairs_sit_below_the_rail():
    vr = _verify(Fabric())
    assert vr.ok and [r.status for r in vr.results if r.check == "outlier"] == [PASS]
    vr = _verify(Fabric(slow="gpu03", gbps=362.0))
    floors = [r for r in vr.results if r.check == "ib_write_bw"]
    assert len(floors) == 6 and all(r.status == PASS for r in floors)  # every floor passes
    out = [r for r in vr.results if r.check == "outlier"]
    assert sorted(r.host for r in out) == ["gpu01<->gpu03", "gpu02<->gpu03", "gpu03<->gpu04"]
    assert all(r.status == FAIL and r.measured == 92.3 for r in out)
    assert all(r.cause.startswith("gpu03 mlx5_0/1: an outlier with 3 different peers (gpu01, gpu02, gpu04); "
                                  "outlier: 92% of the best on rail mlx5_0/1 (ClusterKit 93% rule)")
               for r in out), [r.cause for r in out]
    assert not vr.ok  # exit status 1: a check failed
    # blame sees the three outliers: gpu03 is the host they share
    assert pairs.blame(vr.results) == {("gpu03", 0): ["gpu01", "gpu02", "gpu04"]}
    # turned off in the inventory: the floors alone decide, and the run says so
    vr = _verify(Fabric(slow="gpu03", gbps=362.0), {"fabricops_verify_outliers": False})
    assert vr.ok and [r.status for r in vr.results if r.check == "outlier"] == [SKIP]
