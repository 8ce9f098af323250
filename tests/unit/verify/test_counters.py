"""Negative controls: a bandwidth test is an error unless its named ports counted its bytes.

Counter readings are real captures (perfquery -x) or the sysfs format; perftest results are real
captures; the transports are fakes that answer as the tools do (fake_counters)."""

from __future__ import annotations

import json
import re

import pytest
from captures import read_fixture
from fake_counters import PortCounters

from fabricops.model.profiles import load_profile
from fabricops.parsers import parse
from fabricops.verify import counters, pairs
from fabricops.verify.counters import Snapshot, judge, read_snapshot, snapshot_command, switch_port_bytes
from fabricops.verify.engine import Options, verify
from fabricops.verify.result import ERROR, FAIL, PASS
from fabricops_lab import faults

PROFILE = load_profile("hgx-h100-ndr")
BW = read_fixture("perftest-bw", "csegpu_ndr_write_bw_gbits_client.txt")  # 65536 B x 5000, 392.34 Gb/s
MOVED = 65536 * 5000  # 327.68 MB
PQ = read_fixture("perfquery", "extended_rhel75_infiniband_diags16.txt")  # Lid 10 port 1, all zero
T = pairs.RailTest(0, "gpu01", "mlx5_0/1", "gpu03", "mlx5_0/1")


def _ok(text):
    return {"rc": 0, "stdout": text, "stderr": ""}


def _moved(text, xmit_words=0, rcv_words=0):
    """A real perfquery -x capture with its data counters advanced (in 4-octet words)."""
    text = re.sub(r"(PortXmitData:\.+)(\d+)", lambda m: m[1] + str(int(m[2]) + xmit_words), text)
    return re.sub(r"(PortRcvData:\.+)(\d+)", lambda m: m[1] + str(int(m[2]) + rcv_words), text)


def sides(snaps):
    return dict(zip(("client", "server"), snaps, strict=True))


def _snaps(client_words=(0, 0), server_words=(0, 0), layer="InfiniBand"):
    """(before, after) for client gpu01 mlx5_0/1 and server gpu03 mlx5_0/1 from real perfquery text."""
    before = [read_snapshot("gpu01", "mlx5_0/1", layer, _ok(PQ)),
              read_snapshot("gpu03", "mlx5_0/1", layer, _ok(PQ))]
    after = [read_snapshot("gpu01", "mlx5_0/1", layer, _ok(_moved(PQ, *client_words))),
             read_snapshot("gpu03", "mlx5_0/1", layer, _ok(_moved(PQ, *server_words)))]
    return before, after


# --- reading -------------------------------------------------------------------------------------


def test_commands_read_the_named_port_only():
    assert snapshot_command("mlx5_2/1", "InfiniBand") == "perfquery -x -C mlx5_2 -P 1"
    assert snapshot_command("mlx5_3", "Ethernet") == (
        "cat /sys/class/infiniband/mlx5_3/ports/1/counters/port_xmit_data "
        "/sys/class/infiniband/mlx5_3/ports/1/counters/port_rcv_data")
    assert "'" in snapshot_command("mlx5_0;reboot/1", "InfiniBand")  # quoted, never run


def test_readings_are_in_octets_from_4_octet_words():
    two = read_fixture("perfquery", "extended_two_ports_switch_exporter.txt")
    s = read_snapshot("sw", "x/2", "InfiniBand", _ok(two))  # the block of the named port, not the first
    assert (s.xmit, s.rcv, s.error) == (4 * 26006570014026, 4 * 39078804993378, None)
    r = read_snapshot("gpu03", "mlx5_2/1", "Ethernet", _ok("1000\n250\n"))
    assert (r.xmit, r.rcv) == (4000, 1000) and r.names == ("port_xmit_data", "port_rcv_data")


@pytest.mark.parametrize("layer,res,why", [
    ("InfiniBand", {"rc": 255, "stdout": "", "stderr": "perfquery: iberror: failed: Failed to open 'x'"},
     "exit 255: perfquery: iberror"),
    ("InfiniBand", {"rc": 127, "stdout": "", "stderr": "sh: 1: perfquery: not found"}, "not found"),
    ("InfiniBand", _ok("hello\n"), "perfquery -x:"),
    ("InfiniBand", _ok(PQ.replace("port 1", "port 2")), "no extended counters for port 1"),
    ("InfiniBand", _ok(read_fixture("perfquery", "rcv_error_details_switch_exporter.txt")),
     "no extended counters"),
    ("Ethernet", {"rc": 1, "stdout": "", "stderr": "cat: /sys/...: No such file or directory"},
     "No such file"),
    ("Ethernet", _ok("12\n"), "expected two counter values"),
    ("Ethernet", _ok("12\nabc\n"), "expected two counter values"),
])
def test_unreadable_counters_are_errors_not_zeros(layer, res, why):
    s = read_snapshot("gpu01", "mlx5_0/1", layer, res)
    assert s.xmit is None and s.rcv is None and why in s.error


def test_a_transport_failure_is_a_failed_read():
    def run(host, cmd, timeout):
        raise OSError("ssh: connect to host gpu03 port 22: Connection refused")

    (s,) = counters.snapshot(run, [("gpu03", "mlx5_0/1", "InfiniBand")])
    assert "Connection refused" in s.error


# --- judging ----------------------------------------------------------------------------------------


def test_healthy_test_counted_on_both_ports_passes_unchanged():
    before, after = _snaps(client_words=(MOVED // 4 + 900, 10), server_words=(10, MOVED // 4 + 900))
    plain = pairs.evaluate(T, "ib_write_bw", _ok(BW), _ok(""), PROFILE, 400)
    r = pairs.evaluate(T, "ib_write_bw", _ok(BW), _ok(""), PROFILE, 400, counters=(before, after))
    assert r.status == PASS == plain.status and r.message == plain.message and r.measured == 392.34
    c = r.details["counters"]
    assert c["reported_bytes"] == MOVED and c["client"]["xmit_moved"] == MOVED + 3600
    assert c["server"]["rcv_moved"] == MOVED + 3600


def test_reported_bytes_without_counter_move_is_an_error_naming_the_port():
    before, after = _snaps(client_words=(0, 0), server_words=(0, MOVED // 4))
    r = pairs.evaluate(T, "ib_write_bw", _ok(BW), _ok(""), PROFILE, 400, counters=(before, after))
    assert r.status == ERROR and r.measured == 392.34
    assert "traffic did not cross mlx5_0/1 on gpu01 (PortXmitData moved 0 B, the test reports 327.7 MB)" in (
        r.message)
    assert "gpu03" not in r.cause  # the server's port did count it
    # a bandwidth that fails the floor is still an error when its ports did not carry it
    slow = BW.replace("392.38             392.34", "196.20             196.17")
    r = pairs.evaluate(T, "ib_write_bw", _ok(slow), _ok(""), PROFILE, 400, counters=(before, after))
    assert r.status == ERROR


def test_a_partial_move_is_not_enough():
    short = MOVED // 4 - 1000  # 4 kB short of the report
    before, after = _snaps(client_words=(short, 0), server_words=(0, short))
    v = judge("ib_write_bw", sides(before), sides(after), MOVED)
    assert not v.ok and v.message.count("traffic did not cross") == 2
    assert "PortRcvData moved 327.7 MB" in v.message  # rounded in the text, compared exactly


def test_read_verb_sends_from_the_server_and_bidirectional_needs_both_directions():
    b, a = _snaps(client_words=(0, MOVED // 4), server_words=(MOVED // 4, 0))
    assert judge("ib_read_bw", sides(b), sides(a), MOVED).ok
    assert not judge("ib_write_bw", sides(b), sides(a), MOVED).ok
    one_way = judge("ib_write_bw", *map(sides, _snaps((MOVED // 4, 0), (0, MOVED // 4))), MOVED, True)
    assert not one_way.ok and "PortRcvData" in one_way.message and "PortXmitData" in one_way.message
    both = _snaps((MOVED // 4, MOVED // 4), (MOVED // 4, MOVED // 4))
    assert judge("ib_write_bw", *map(sides, both), MOVED, bidirectional=True).ok


def test_counters_that_went_backwards_or_are_missing_fail_closed():
    before, after = _snaps()  # after: the real capture's zeros (perfquery -R ran during the test)
    reset = [Snapshot("gpu01", "mlx5_0/1", "InfiniBand", 10**9, 10**9), before[1]]
    v = judge("ib_write_bw", sides(reset), sides(after), 0)
    assert not v.ok and "went backwards" in v.message
    v = judge("ib_write_bw", {"client": before[0]}, {"client": after[0]}, 0)
    assert not v.ok and "no server counter snapshot" in v.message


def test_a_failed_read_makes_the_test_an_error():
    before, after = _snaps(client_words=(MOVED // 4, 0), server_words=(0, MOVED // 4))
    failed = {"rc": 255, "stdout": "", "stderr": "timeout"}
    after[1] = read_snapshot("gpu03", "mlx5_0/1", "InfiniBand", failed)
    r = pairs.evaluate(T, "ib_write_bw", _ok(BW), _ok(""), PROFILE, 400, counters=(before, after))
    assert r.status == ERROR
    assert "counters of mlx5_0/1 on gpu03 could not be read after the test (exit 255: timeout)" in r.message


def test_latency_tests_and_failed_clients_are_not_judged_by_counters():
    lat = read_fixture("perftest-lat", "csegpu_ndr_send_lat_client.txt")
    before, after = _snaps()
    r = pairs.evaluate(T, "ib_write_lat", _ok(lat), _ok(""), PROFILE, 400, counters=(before, after))
    assert r.status in (PASS, FAIL) and "counters" not in r.details
    down = {"rc": 1, "stdout": " Port number 1 state is Down\n", "stderr": ""}
    r = pairs.evaluate(T, "ib_write_bw", down, _ok(""), PROFILE, 400, counters=(before, after))
    assert r.status == FAIL


def test_switch_ports_on_the_path():
    both = {"swp1": 100 + MOVED, "swp31": 5 + MOVED}
    assert switch_port_bytes({"swp1": 100, "swp31": 5}, both, MOVED) == []
    probs = switch_port_bytes({"swp1": 100, "swp31": 5}, {"swp1": 100 + MOVED, "swp31": 5}, MOVED, "leaf1")
    assert probs == ["traffic did not cross leaf1 swp31 (moved 0 B, the test reports 327.7 MB)"]
    assert "counter not read" in switch_port_bytes({"swp1": 1}, {"swp1": None}, 0)[0]
    assert "went backwards" in switch_port_bytes({"swp1": 9}, {"swp1": 1}, 0)[0]
    assert switch_port_bytes({}, {}, 0) != []
    # ECMP uplinks: the flows may take any of them; together they carry the test
    up_b, up_a = {"swp31": 0, "swp32": 0}, {"swp31": MOVED // 2, "swp32": MOVED - MOVED // 2}
    assert counters.switch_ports_total(up_b, up_a, MOVED) == []
    one = counters.switch_ports_total(up_b, {"swp31": MOVED // 2, "swp32": 0}, MOVED, "leaf1")
    assert one[0].startswith("traffic did not cross leaf1 swp31, swp32 (together moved 163.8 MB")


# --- the pair phase ------------------------------------------------------------------------------


class Fabric:
    """Two hosts, two IB rails; the ports count what the fake perftest clients report."""

    def __init__(self, counters=None):
        self.counters = counters or PortCounters()
        self.calls = []

    def run(self, host, cmd, timeout=60):
        self.calls.append((host, cmd))
        answer = self.counters.answer(host, cmd)
        if answer is not None:
            return answer
        if "ib_write_bw" in cmd and "wait $p" not in cmd:
            peer = re.search(r"addr-(gpu\d+)", cmd)[1]
            hca = re.search(r"-d (mlx5_\d+)", cmd)[1]
            self.counters.credit(host, hca, peer, hca, BW)
            return _ok(BW)
        if "ib_write_lat" in cmd and "wait $p" not in cmd:
            return _ok(read_fixture("perftest-lat", "csegpu_ndr_send_lat_client.txt"))
        return _ok("")


HV = {
    "fabricops_hardware_profile": "hgx-h100-ndr",
    "fabricops_verify_perftest": {"server_start_s": 0},
    "fabricops_verify_ports": [
        {"hca": "mlx5_0", "port": 1, "link_layer": "InfiniBand"},
        {"hca": "mlx5_1", "port": 1, "link_layer": "InfiniBand"},
    ],
}


def _verify(fabric):
    hosts = ["gpu01", "gpu02"]
    hv = {h: dict(HV, ansible_host=f"addr-{h}") for h in hosts}
    return verify(fabric.run, hosts, hv, Options(only="pairs"))


def test_every_bandwidth_test_reads_both_ports_before_and_after():
    fab = Fabric()
    vr = _verify(fab)
    assert vr.ok, [r.message for r in vr.results if not r.ok]
    bw = [r for r in vr.results if r.check == "ib_write_bw"]
    assert len(bw) == 2 and all(r.details["counters"]["client"]["xmit_moved"] >= MOVED for r in bw)
    for hca in ("mlx5_0", "mlx5_1"):
        cmds = [(h, c) for h, c in fab.calls if f"-d {hca} " in c or f"-C {hca} " in c]
        kinds = ["read" if c.startswith("perfquery") else "server" if "wait $p" in c else "client"
                 for _h, c in cmds if "ib_write_lat" not in c]
        assert kinds == ["read", "read", "server", "client", "read", "read"], kinds


def test_wrong_device_fault_makes_the_test_an_error_naming_the_device(tmp_path, monkeypatch):
    """gpu02's tests on mlx5_1 run on mlx5_0 (the mapping `fabricops lab fault gpu02 wrong-device
    mlx5_1 mlx5_0` writes, as the emulated perftest reads it): mlx5_1's counters stay still and the
    test is an error, not a pass."""
    hw = {"host": "gpu02", "hcas": [{"name": "mlx5_0", "ports": []}, {"name": "mlx5_1", "ports": []}]}
    monkeypatch.setattr(faults, "_load_hw", lambda host: hw)
    monkeypatch.setattr(faults, "wrong_device_path", lambda host: tmp_path / host / "wrong-device.json")
    plan = faults.plan_wrong_device("gpu02", ["mlx5_1", "mlx5_0"])
    (data,) = plan.files.values()
    mapping = {("gpu02", dev): other for dev, other in json.loads(data).items()}
    vr = _verify(Fabric(PortCounters(wrong=mapping)))
    bad = [r for r in vr.results if not r.ok]
    assert not vr.ok and [r.status for r in bad] == [ERROR]
    (r,) = bad
    assert r.device == "mlx5_1/1<->mlx5_1/1" and r.details["rerun"]  # re-run alone: still not counted
    assert "traffic did not cross mlx5_1/1 on gpu02 (PortRcvData moved 0 B, the test reports 327.7 MB)" in (
        r.message)
    assert "gpu01" not in r.details["counters"]["problems"][0]


def test_counter_reads_that_fail_make_every_bandwidth_test_an_error():
    fab = Fabric()
    real = fab.counters.answer

    def broken(host, cmd):
        res = real(host, cmd)
        if res is not None and host == "gpu02":
            return {"rc": 255, "stdout": "", "stderr": "ibwarn: mad_rpc_open_port: can't open UMAD port"}
        return res

    fab.counters.answer = broken
    vr = _verify(fab)
    bw = [r for r in vr.results if r.check == "ib_write_bw"]
    assert bw and all(r.status == ERROR and "could not be read before the test" in r.message for r in bw)
    assert all(r.ok for r in vr.results if r.check == "ib_write_lat")


def test_parsed_perftest_bytes_are_size_times_iterations_of_all_rows():
    rec = parse("perftest-bw", read_fixture("perftest-bw", "a100_hdr_write_bw_sweep_mbsec_client.txt"))
    assert len(rec.results) > 3
    assert counters.reported_bytes(rec.results) == sum(r.bytes * r.iterations for r in rec.results)
    assert counters.human_bytes(7_300_000_000) == "7.3 GB" and counters.human_bytes(999) == "999 B"
