"""One SSH session per switch for a whole verify run (fabricops.verify.switchstate.SwitchReader.
keep_sessions): the port-state read and every ISL counter read reuse it, a session that died between
reads is reopened once and the read retried, no two threads share a session, and the sessions are
closed at the end of the run, also when it raises.

The sessions are the lab's emulated Onyx / NVUE CLIs (test_switch_ports._emulated), wrapped to count
logins, drop a session, and watch the threads on it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_switch_ports import PROFILE, _emulated

from fabricops.verify import engine, switchports
from fabricops.verify.engine import Options


class Watched:
    """A session (the emulator's, through EmuConn) that counts its users and can be dropped."""

    def __init__(self, conn, switch, log):
        self.conn, self.switch, self.log = conn, switch, log
        self.dead = False
        self.closed = False
        self.active = 0
        self.most = 0  #: the most threads ever inside this session at once
        self.delay = 0.0
        self.meet: threading.Event | None = None  #: set by the other switch's session (parallelism)
        self.met = False

    @property
    def sent(self):
        return self.conn.sent

    def send_command(self, cmd, **kw):
        if self.dead or self.closed:
            raise OSError("Socket is closed")
        with self.log["lock"]:
            self.active += 1
            self.most = max(self.most, self.active)
        try:
            if self.meet is not None:
                self.log["ready"][self.switch].set()
                other = next(s for s in self.log["ready"] if s != self.switch)
                self.met = self.log["ready"][other].wait(5)
            time.sleep(self.delay)
            return self.conn.send_command(cmd, **kw)
        finally:
            with self.log["lock"]:
                self.active -= 1

    def enable(self):
        if self.dead or self.closed:
            raise OSError("Socket is closed")
        self.conn.enable()

    def disconnect(self):
        self.closed = True


def _reader(tmp_path, faults=None):
    reader, plan = _emulated(tmp_path, faults or {})
    orig = reader.connector
    log = {"lock": threading.Lock(), "opened": [], "refuse": set(), "ready": {}}

    def connector(switch, os_name, hv):
        if switch in log["refuse"]:
            raise OSError(f"TCP connection to {switch}:22 timed out")
        conn = Watched(orig(switch, os_name, hv), switch, log)
        with log["lock"]:
            log["opened"].append(conn)
        return conn

    reader.connector = connector
    ports = {sw: plan.ports_of(sw) for sw in plan.switches}
    return reader, plan, ports, log


def _logins(log):
    out = {}
    for c in log["opened"]:
        out[c.switch] = out.get(c.switch, 0) + 1
    return out


def _isls(plan):
    (a, b), = plan.isls
    return [((a.switch, a.port), (b.switch, b.port)), ((b.switch, b.port), (a.switch, a.port))]


def test_one_login_per_switch_for_the_port_read_and_every_counter_read(tmp_path):
    reader, plan, ports, log = _reader(tmp_path, {"leaf3": {"port_faults": {"Eth1/18": {"flaps": 8}}}})
    fresh = switchports.read_switches(reader, ports)  # no kept sessions: a login per read, as before
    assert _logins(log) == {"leaf3": 1, "spine2": 1}
    log["opened"].clear()
    k = 6
    with reader.keep_sessions():
        kept = switchports.read_switches(reader, ports, qos=True)
        counters = switchports.IslCounters(reader, known_errors=kept.errors)
        bytes_seen = [counters(None, _isls(plan)) for _ in range(k)]
        assert _logins(log) == {"leaf3": 1, "spine2": 1}
        assert not any(c.closed for c in log["opened"])
    assert all(c.closed for c in log["opened"])  # closed at the end of the block
    # every read went through the one session of its switch ...
    onyx = next(c for c in log["opened"] if c.switch == "leaf3")
    assert onyx.sent.count("show interfaces ethernet | json-print") == 1 + k
    # ... and read what a session per read reads
    assert kept.reads.keys() == fresh.reads.keys() and not kept.errors
    for sw in fresh.reads:
        assert kept.reads[sw].states == fresh.reads[sw].states
    assert switchports.judge(plan, kept, PROFILE)[0] == switchports.judge(plan, fresh, PROFILE)[0]
    assert all(b == bytes_seen[0] and len(b) == 2 for b in bytes_seen)
    # after the run: a session per read again
    switchports.read_switches(reader, ports)
    assert _logins(log) == {"leaf3": 2, "spine2": 2}


def test_a_dropped_session_is_reopened_once_and_the_read_retried(tmp_path):
    reader, plan, ports, log = _reader(tmp_path)
    with reader.keep_sessions():
        first = switchports.read_switches(reader, ports)
        for c in log["opened"]:
            c.dead = True  # the switch (or an idle timeout) dropped both sessions between reads
        again = switchports.read_switches(reader, ports)
        assert not again.errors
        assert {sw: again.reads[sw].states for sw in again.reads} == {
            sw: first.reads[sw].states for sw in first.reads}
        assert _logins(log) == {"leaf3": 2, "spine2": 2}  # reopened once each
        assert all(c.closed for c in log["opened"] if c.dead)  # the dead ones were let go
        # dropped again and the switch now refuses: the read fails as a read fails today
        for c in log["opened"]:
            c.dead = True
        log["refuse"].add("spine2")
        got = switchports.read_switches(reader, ports)
        assert got.errors == {"spine2": "TCP connection to spine2:22 timed out"}
        assert "leaf3" in got.reads
        assert _logins(log) == {"leaf3": 3, "spine2": 2}
        # the ISL counters: that link's spine end unread, the leaf end still counts both directions
        counters = switchports.IslCounters(reader)
        assert len(counters(None, _isls(plan))) == 2
        assert counters.errors == {"spine2": "TCP connection to spine2:22 timed out"}
        # the switch is back: the next read logs in again
        log["refuse"].clear()
        assert not switchports.read_switches(reader, ports).errors
        assert _logins(log) == {"leaf3": 3, "spine2": 3}


def test_a_read_failing_on_a_session_just_opened_is_not_retried(tmp_path):
    reader, _plan, ports, log = _reader(tmp_path)
    orig = reader.connector

    def dead_on_arrival(switch, os_name, hv):
        conn = orig(switch, os_name, hv)
        conn.dead = True
        return conn

    reader.connector = dead_on_arrival
    with reader.keep_sessions():
        got = switchports.read_switches(reader, ports)
    assert got.errors == {"leaf3": "Socket is closed", "spine2": "Socket is closed"}
    assert _logins(log) == {"leaf3": 1, "spine2": 1}


def test_no_two_threads_on_one_session_and_switches_still_read_in_parallel(tmp_path):
    reader, _plan, ports, log = _reader(tmp_path)
    with reader.keep_sessions():
        switchports.read_switches(reader, ports)
        for c in log["opened"]:
            c.delay = 0.02
        with ThreadPoolExecutor(max_workers=8) as pool:  # 8 threads read leaf3 at once
            list(pool.map(lambda _i: reader.port_states("leaf3", ports["leaf3"]), range(8)))
        (leaf,) = [c for c in log["opened"] if c.switch == "leaf3"]
        assert leaf.most == 1 and len(leaf.sent) == 9
        # two switches: their reads overlap (each session waits to meet the other's read)
        log["ready"] = {sw: threading.Event() for sw in ports}
        for c in log["opened"]:
            c.meet = threading.Event()
        assert not switchports.read_switches(reader, ports).errors
        assert all(c.met for c in log["opened"])
    assert _logins(log) == {"leaf3": 1, "spine2": 1}


class _Raising(dict):
    """Hostvars whose first look-up reads the switches (a session opens) and then fails."""

    def __init__(self, reader, ports, exc, log):
        super().__init__()
        self.reader, self.ports, self.exc, self.log = reader, ports, exc, log
        self.open_in_run = None

    def get(self, key, default=None):
        switchports.read_switches(self.reader, self.ports)
        self.open_in_run = [not c.closed for c in self.log["opened"]]
        if self.exc is not None:
            raise self.exc
        return default


@pytest.mark.parametrize("exc", [RuntimeError("boom"), None])
def test_verify_closes_the_sessions_at_the_end_also_when_it_raises(tmp_path, exc):
    reader, _plan, ports, log = _reader(tmp_path)
    hv = _Raising(reader, ports, exc, log)
    if exc is not None:
        with pytest.raises(RuntimeError, match="boom"):
            engine.verify(lambda *_a, **_k: {}, ["gpu03"], hv, Options(only="hosts"), switch_reader=reader)
    else:
        engine.verify(lambda *_a, **_k: {}, ["gpu03"], hv, Options(only="hosts"), switch_reader=reader)
    assert hv.open_in_run == [True, True]  # kept open while the run goes on ...
    assert log["opened"] and all(c.closed for c in log["opened"])  # ... and closed at its end
    assert reader._kept is None  # nothing kept after the run
