"""Pairwise evaluation, blame, scheduling and reports (real perftest captures, fake transports)."""

from __future__ import annotations

import json
import re
import threading
import xml.etree.ElementTree as ET

from captures import read_fixture
from fake_counters import PortCounters

from fabricops.model.profiles import load_profile
from fabricops.verify import pairs, report
from fabricops.verify.engine import Options, VerifyRun, baseline_from_report, verify
from fabricops.verify.expect import PERFTEST_DEFAULTS
from fabricops.verify.result import ERROR, FAIL, PASS, CheckResult

PROFILE = load_profile("hgx-h100-ndr")
BW = read_fixture("perftest-bw", "csegpu_ndr_write_bw_gbits_client.txt")  # 392.34 Gb/s, NDR
LAT = read_fixture("perftest-lat", "csegpu_ndr_send_lat_client.txt")  # t_typical 1.27 us
T = pairs.RailTest(0, "gpu01", "mlx5_0/1", "gpu03", "mlx5_0/1")


def _ok(text):
    return {"rc": 0, "stdout": text, "stderr": ""}


def test_real_ndr_capture_passes_390_floor():
    r = pairs.evaluate(T, "ib_write_bw", _ok(BW), _ok(""), PROFILE, 400)
    assert r.status == PASS and r.measured == 392.34 and r.threshold == 390 and r.op == ">="
    assert "hb176rs_v4" in r.source
    assert r.host == "gpu01<->gpu03" and r.device == "mlx5_0/1<->mlx5_0/1"


def test_degraded_bandwidth_fails_against_the_expected_port_rate():
    degraded = BW.replace("392.38             392.34", "196.20             196.17")
    r = pairs.evaluate(T, "ib_write_bw", _ok(degraded), _ok(""), PROFILE, 400)
    assert r.status == FAIL and r.measured == 196.17
    assert "below published floor" in r.cause


def test_latency_capture_measured_is_typical():
    r = pairs.evaluate(T, "ib_write_lat", _ok(LAT), _ok(""), PROFILE, 400)
    assert r.op == "<=" and r.threshold == 2.5
    assert r.measured is not None and (r.status == PASS) == (r.measured <= 2.5)


def test_client_error_names_the_side_and_cause():
    down = {
        "rc": 1,
        "stdout": " Port number 1 state is Down\n Couldn't get context for the device\n",
        "stderr": "",
    }
    r = pairs.evaluate(T, "ib_write_bw", down, {"rc": 143, "stdout": "", "stderr": ""}, PROFILE, 400)
    assert r.status == FAIL and "gpu01 mlx5_0/1: port is down" in r.cause
    retry = {"rc": 1, "stdout": " Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x81\n"}
    r = pairs.evaluate(T, "ib_write_bw", retry, _ok(""), PROFILE, 400)
    assert "no data path" in r.cause


def test_unreadable_output_is_an_error():
    r = pairs.evaluate(T, "ib_write_bw", _ok("hello\n"), _ok(""), PROFILE, 400)
    assert r.status == ERROR and r.measured is None
    mb = read_fixture("perftest-bw", "comet_write_bw_mbsec_client.txt")  # not --report_gbits
    assert pairs.evaluate(T, "ib_write_bw", _ok(mb), _ok(""), PROFILE, 100).status == ERROR


def _pair(a, b, ok, rail=0):
    return CheckResult(
        "pairs",
        "ib_write_bw",
        f"{a}<->{b}",
        "mlx5_0/1<->mlx5_0/1",
        PASS if ok else FAIL,
        "m",
        details={"client": a, "server": b, "rail": rail},
    )


def test_blame_needs_failures_with_different_peers():
    # gpu03 fails with all three peers; each other host fails only with gpu03
    res = [
        _pair("gpu01", "gpu02", True),
        _pair("gpu01", "gpu03", False),
        _pair("gpu01", "gpu04", True),
        _pair("gpu02", "gpu03", False),
        _pair("gpu02", "gpu04", True),
        _pair("gpu03", "gpu04", False),
    ]
    assert pairs.blame(res) == {("gpu03", 0): ["gpu01", "gpu02", "gpu04"]}
    # a single failed pair blames nobody
    assert pairs.blame([_pair("gpu01", "gpu02", False), _pair("gpu03", "gpu04", True)]) == {}
    # two bad hosts: their common healthy peers are not blamed
    two = [
        _pair(a, b, not ({a, b} & {"gpu01", "gpu03"}))
        for a, b in [
            ("gpu01", "gpu02"),
            ("gpu01", "gpu03"),
            ("gpu01", "gpu04"),
            ("gpu02", "gpu03"),
            ("gpu02", "gpu04"),
            ("gpu03", "gpu04"),
        ]
    ]
    assert set(pairs.blame(two)) == {("gpu01", 0), ("gpu03", 0)}
    # rails are separate
    assert pairs.blame([_pair("a", "b", False, 0), _pair("a", "c", False, 1)]) == {}


def test_annotate_uses_host_check_cause():
    res = [_pair("gpu01", "gpu03", False), _pair("gpu02", "gpu03", False), _pair("gpu01", "gpu02", True)]
    host = [CheckResult("hosts", "hca_port", "gpu03", "mlx5_0/1", FAIL, "x", cause="link trained at 2X")]
    pairs.annotate(res, host, n_hosts=3)
    assert res[0].details["blamed"] == ["gpu03"]
    assert res[0].cause.startswith(
        "gpu03 mlx5_0/1: fails with 2 different peers (gpu01, gpu02); link trained at 2X"
    )


def test_commands_start_server_first_and_retry_connect():
    opts = {"bw_size": 8388608, "bw_qps": 4, "lat_size": 2, "timeout_s": 60, "connect_retries": 5}
    s = pairs.server_command("ib_write_bw", "mlx5_1/1", 18516, opts)
    c = pairs.client_command("ib_write_bw", "mlx5_1/1", 18516, "10.0.0.3", opts)
    assert "ib_write_bw -d mlx5_1 -i 1 -p 18516 --report_gbits -s 8388608 -q 4 &" in s
    assert "ib_write_bw -d mlx5_1 -i 1 -p 18516 --report_gbits -s 8388608 -q 4 10.0.0.3" in c
    assert "Couldn't connect" in c
    lat = pairs.client_command(
        "ib_write_lat", "mlx5_0/1", 18515, "h", dict(opts, env={"EMUL_PERFTEST_SECONDS": 0.1})
    )
    assert "env EMUL_PERFTEST_SECONDS=0.1 ib_write_lat -d mlx5_0 -i 1 -p 18515 -s 2 h" in lat


class FakeFabric:
    """Perftest from real captures; one host's rail 0 runs at half rate (a 2X port). The ports'
    data counters move by what each client reports (``counters``)."""

    def __init__(self, bad=None, flaky=None, counters=None):
        self.bad, self.flaky, self.calls = bad, set(flaky or ()), []
        self.counters = counters or PortCounters()

    def run(self, host, cmd, timeout=60):
        self.calls.append((host, cmd))
        answer = self.counters.answer(host, cmd)
        if answer is not None:
            return answer
        if "ib_write_bw" in cmd and "wait $p" not in cmd:  # client
            peer = re.search(r"addr-(gpu\d+)", cmd)[1]
            hca = re.search(r"-d (mlx5_\d+)", cmd)[1]
            text = BW
            if ("-d mlx5_0" in cmd and self.bad in (host, peer)) or (
                (host, peer) in self.flaky and self.flaky.discard((host, peer)) is None
            ):
                text = BW.replace("392.38             392.34", "196.20             196.17")
            self.counters.credit(host, hca, peer, hca, text)
            return _ok(text)
        if "ib_write_lat" in cmd and "wait $p" not in cmd:
            return _ok(LAT)
        if cmd.startswith("ibstat") or cmd == "ibstat":
            return _ok("")
        return _ok("")


HV = {
    "fabricops_hardware_profile": "hgx-h100-ndr",
    "fabricops_verify_perftest": {"server_start_s": 0},
    "fabricops_verify_ports": [
        {"hca": "mlx5_0", "port": 1, "link_layer": "InfiniBand"},
        {"hca": "mlx5_1", "port": 1, "link_layer": "InfiniBand"},
    ],
}


def _run(fake, n=4):
    hosts = [f"gpu0{i}" for i in range(1, n + 1)]
    hv = {h: dict(HV, ansible_host=f"addr-{h}") for h in hosts}
    return verify(fake.run, hosts, hv, Options(only="pairs"))


def test_pair_phase_rounds_rerun_and_blame():
    fake = FakeFabric(bad="gpu03")
    vr = _run(fake)
    assert vr.pairs.rounds == 3 and not vr.ok
    failed = [r for r in vr.results if not r.ok]
    assert {r.host for r in failed} == {"gpu01<->gpu03", "gpu02<->gpu03", "gpu03<->gpu04"}
    assert all(r.device == "mlx5_0/1<->mlx5_0/1" and r.details["rerun"] for r in failed)
    assert vr.pairs.reruns == 3
    assert all(r.details["blamed"] == ["gpu03"] for r in failed)
    assert len([r for r in vr.results if r.check == "ib_write_bw"]) == 12  # 6 pairs x 2 rails


def test_a_pair_that_passes_alone_is_not_a_failure():
    fake = FakeFabric(flaky={("gpu01", "gpu02")})
    vr = _run(fake)
    assert vr.ok and vr.pairs.reruns >= 1
    rerun = [r for r in vr.results if r.details.get("rerun")]
    assert rerun and rerun[0].details["first_attempt"]["status"] == FAIL


def test_one_host_cannot_pair_fails_closed():
    vr = _run(FakeFabric(), n=1)
    assert not vr.ok and vr.results[-1].status == ERROR and "at least two hosts" in vr.results[-1].message


def test_reports_junit_json_terminal():
    vr = _run(FakeFabric(bad="gpu03"))
    root = ET.fromstring(report.to_junit(vr))
    assert (
        root.tag == "testsuites" and root.get("failures") == "3"
    )  # ib_write_bw of the 3 pairs with gpu03 on rail 0
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == int(root.get("tests")) == len(vr.results)
    fails = root.findall("./testsuite/testcase/failure")
    assert all("likely cause: gpu03 mlx5_0/1" in f.text for f in fails if "ib_write_bw" in f.get("type"))
    data = json.loads(report.to_json(vr))
    assert data["schema"] == "fabricops.verify/1" and data["ok"] is False
    assert data["summary"]["failed"] == len(fails)
    assert data["blamed"] == [{"host": "gpu03", "rail": 0, "peers": ["gpu01", "gpu02", "gpu04"]}]
    assert {"name", "status", "measured", "threshold", "cause", "host", "device"} <= set(data["results"][0])
    text = report.terminal(vr)
    assert text.startswith("fabricops verify: FAIL")
    assert "ib_write_bw 196.17 Gb/s (>= 390)" in text and "ib_write_bw 392.34 Gb/s (>= 390)" in text
    assert "blamed by pair tests on rail(s) 0" in text


def test_empty_run_is_not_a_pass():
    vr = VerifyRun(hosts=[], profile=None, only=None)
    assert vr.ok is False
    assert json.loads(report.to_json(vr))["ok"] is False


def test_baseline_from_report():
    data = {
        "results": [
            {
                "check": "error_counters",
                "host": "gpu03",
                "device": "mlx5_0/1",
                "details": {"absolute": {"SymbolErrorCounter": 1000, "LinkDownedCounter": 16}},
            },
            {"check": "hca_port", "host": "gpu03", "device": "mlx5_0/1", "details": {}},
        ]
    }
    assert baseline_from_report(data) == {
        "gpu03": {"mlx5_0/1": {"SymbolErrorCounter": 1000, "LinkDownedCounter": 16}}
    }


def test_a_server_that_failed_stops_its_client():
    """A port that is down fails the perftest server at once: the engine tells that test's client
    to stop retrying (on the client's host, with the test's own token) instead of letting it
    spend ``connect_retries`` attempts on a server that is gone. A server that ran stops nobody."""
    calls, stopped = [], threading.Event()

    def run(host, cmd, timeout=60):
        calls.append((host, cmd))
        if "wait $p" in cmd:  # the server on gpu02: its port is down
            return {"rc": 1, "stdout": "", "stderr": " Port number 1 state is Down\n"}
        if "fabricops-verify-client." in cmd and ": >" in cmd:
            stopped.set()
            return _ok("")
        stopped.wait(5)  # the client retries until it is told to stop
        return {"rc": 1, "stdout": " Couldn't connect to addr-gpu02:18515\n", "stderr": ""}

    test = pairs.RailTest(0, "gpu01", "mlx5_0/1", "gpu02", "mlx5_0/1")
    opts = dict(PERFTEST_DEFAULTS, server_start_s=0)
    profile = load_profile("hgx-h100-ndr")
    pairs.run_test(run, test, {"gpu02": "addr-gpu02"}, profile, 400.0, opts, ("ib_write_lat",))
    clients = [c for h, c in calls if h == "gpu01" and "ib_write_lat" in c]
    token = re.search(r"fabricops-verify-client\.([0-9a-f]+)", clients[0])[1]
    assert [(h, c) for h, c in calls if ": >" in c] == [("gpu01", pairs.stop_client_command(token))]

    ok_calls = []

    def healthy(host, cmd, timeout=60):
        ok_calls.append(cmd)
        return _ok(LAT)

    pairs.run_test(healthy, test, {"gpu02": "addr-gpu02"}, profile, 400.0, opts, ("ib_write_lat",))
    assert not [c for c in ok_calls if "fabricops-verify-client." in c and ": >" in c]


def test_not_planned_lines_collapse_by_check_and_reason_with_the_host_count():
    """A check that is not applicable on every host is one line with the count, not one per host and
    device (24 lines for 4 hosts in the demo); a reason one host holds keeps its own message."""
    from fabricops.verify.result import PASS as OK
    from fabricops.verify.result import SKIP, CheckResult

    hosts = [f"gpu{i:02d}" for i in range(1, 9)]
    vr = VerifyRun(hosts=hosts, profile=None, only=None)
    for h in hosts:
        vr.results.append(CheckResult("hosts", "ofed_version", h, None, OK, f"{h}: 24.10"))
        for dev in ("mlx5_0", "mlx5_1", "mlx5_2"):
            vr.results.append(CheckResult("hosts", "nic_fw_config", h, dev, SKIP,
                                          f"{h}: device_config declared (only versions): not applicable"))
    vr.results.append(CheckResult("hosts", "dkms_modules", "gpu03", None, SKIP,
                                  "gpu03: mlnx_ofed_install_method repo (not a DKMS stack): not applicable"))
    text = report.terminal(vr)
    planned = text.split("NOT PLANNED (skipped)\n", 1)[1].splitlines()
    assert planned == [
        "  [hosts/nic_fw_config] device_config declared (only versions): not applicable "
        "(8 hosts: gpu01, gpu02, gpu03, gpu04, gpu05, gpu06 and 2 more)",
        "  [hosts/dkms_modules] gpu03: mlnx_ofed_install_method repo (not a DKMS stack): not applicable",
    ]
