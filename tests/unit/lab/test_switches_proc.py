"""Switch processes: namespaces, veths, keys, known_hosts, start/stop (root; fo-test-* names only)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabricops.errors import FabricopsError
from fabricops_lab import paths, procs, switches

BRIDGE = "fo-test-br0"
NET = "198.18.99"  # RFC 2544 benchmarking range: nothing on this machine uses it
NETNS_LOCK = "/run/lock/fabricops-test-netns.lock"  # see the bridge fixture

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="needs root and iproute2 (network namespaces)")

STANDIN = """
import socket, sys, threading
ip, name = sys.argv[1], sys.argv[2]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((ip, 22))
srv.listen(8)
while True:
    c, _ = srv.accept()
    c.sendall(b"SSH-2.0-standin_" + name.encode() + b"\\r\\n")
    c.close()
"""


def _test_net(tmp_path: Path, script: str = STANDIN) -> switches.Net:
    standin = tmp_path / "standin.py"
    standin.write_text(script)

    def command(sw, info):
        return [sys.executable, str(standin), info["mgmt_ip"], sw["name"]]

    return switches.Net(bridge=BRIDGE, netns_prefix="fo-test-s", veth_prefix="fo-test-v",
                        peer_prefix="fo-test-p", command=command)


def _lab() -> dict:
    return {"topology": {"switches": [
        {"name": "ib-sw1", "os": "ib", "index": 1, "mgmt_ip": f"{NET}.201", "ports": ["1", "2", "3"]},
        {"name": "leaf-onyx", "os": "onyx", "index": 2, "mgmt_ip": f"{NET}.202",
         "ports": ["Eth1/1", "Eth1/2"]},
        {"name": "leaf-cumulus-long-name", "os": "cumulus", "index": 3, "mgmt_ip": f"{NET}.203",
         "ports": ["swp1", "swp2"]},
    ]}}


@pytest.fixture
def bridge():
    """The test bridge, held under a machine-wide lock: its name, its subnet and the fo-test-s*
    namespaces are one per machine, and under xdist two workers would otherwise delete each other's
    (the clean-up below removes every fo-test-s* namespace)."""
    lock = os.open(NETNS_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        yield from _bridge()
    finally:
        os.close(lock)


def _bridge():
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
    subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    subprocess.run(["ip", "addr", "add", f"{NET}.1/24", "dev", BRIDGE], check=True)
    subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)
    yield BRIDGE
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
    for ns in os.listdir("/run/netns") if os.path.isdir("/run/netns") else []:
        if ns.startswith("fo-test-s"):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    return tmp_path / "state"


def _ip_json(*args: str) -> list[dict]:
    return json.loads(subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True).stdout)


def test_names_fit_in_interface_names():
    assert switches.short_name("fo-sw-", "leaf1") == "fo-sw-leaf1"
    long = switches.short_name("fo-sw-", "leaf-cumulus-long-name")
    assert len(long) == 15 and long.startswith("fo-sw-leaf")
    assert long != switches.short_name("fo-sw-", "leaf-cumulus-long-other")
    mac = switches.mac_for("leaf-onyx", "mgmt")
    assert mac == switches.mac_for("leaf-onyx", "mgmt") and mac.startswith("02:")
    assert mac != switches.mac_for("leaf-onyx", "outer")


def test_known_hosts_replaces_only_its_lines(tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("gpu01,198.51.100.11 ssh-ed25519 AAAAhost\nleaf-onyx,198.51.100.202 ssh-ed25519 AAAAold\n")
    switches.update_known_hosts(kh, {("leaf-onyx", "198.51.100.202"): "ssh-ed25519 AAAAnew"})
    assert kh.read_text() == ("gpu01,198.51.100.11 ssh-ed25519 AAAAhost\n"
                              "leaf-onyx,198.51.100.202 ssh-ed25519 AAAAnew\n")
    switches.update_known_hosts(kh, {("leaf-onyx", "198.51.100.202"): None})
    assert kh.read_text() == "gpu01,198.51.100.11 ssh-ed25519 AAAAhost\n"


def test_start_plumbs_namespaces_and_stop_removes_them(bridge, state, tmp_path):
    net = _test_net(tmp_path)
    lab = _lab()
    known = state / "ssh" / "known_hosts"
    known.parent.mkdir(parents=True)
    known.write_text("gpu01,198.51.100.11 ssh-ed25519 AAAAhost\n")
    result = switches.start(lab, net)
    try:
        assert set(result) == {"ib-sw1", "leaf-onyx", "leaf-cumulus-long-name"}
        # the IB switch: no process, every port up for the physics
        assert result["ib-sw1"]["pid"] is None
        ib = json.loads((state / "fabric" / "switches" / "ib-sw1.json").read_text())
        assert ib == {"name": "ib-sw1", "os": "ib", "ports": {p: {"link": "up"} for p in ("1", "2", "3")}}

        onyx = result["leaf-onyx"]
        assert onyx["netns"] == switches.short_name("fo-test-s", "leaf-onyx")
        assert onyx["mgmt_ip"] == f"{NET}.202"
        assert onyx["netns"].startswith("fo-test-sle") and len(onyx["netns"]) == 15
        assert onyx["port"] == 22 and onyx["user"] == "admin"
        assert result["leaf-cumulus-long-name"]["user"] == "cumulus"
        assert len(result["leaf-cumulus-long-name"]["netns"]) <= 15
        for name, os_if in (("leaf-onyx", "mgmt0"), ("leaf-cumulus-long-name", "eth0")):
            info = result[name]
            link = _ip_json("-n", info["netns"], "addr", "show", "dev", os_if)[0]
            assert link["address"] == switches.mac_for(name, "mgmt")
            assert {"local": info["mgmt_ip"], "prefixlen": 24} in [
                {"local": a["local"], "prefixlen": a["prefixlen"]} for a in link["addr_info"]]
            outer = _ip_json("link", "show", "dev", info["veth"])[0]
            assert outer["master"] == BRIDGE and outer["address"] == switches.mac_for(name, "outer")
            assert Path(f"/proc/{info['pid']}").exists()
            # through the bridge from the controller side
            with socket.create_connection((info["mgmt_ip"], 22), timeout=2) as s:
                assert s.recv(64) == f"SSH-2.0-standin_{name}\r\n".encode()
            for secret in ("password", "host_key"):
                p = state / "switches" / name / secret
                assert stat.S_IMODE(p.stat().st_mode) == 0o600 and p.read_text().strip()
            assert info["password_file"] == str(state / "switches" / name / "password")

        lines = known.read_text().splitlines()
        assert lines[0] == "gpu01,198.51.100.11 ssh-ed25519 AAAAhost"
        pub = (state / "switches" / "leaf-onyx" / "host_key.pub").read_text().split()
        assert f"leaf-onyx,{NET}.202 {pub[0]} {pub[1]}" in lines
        assert pub[0] == "ssh-ed25519"
        assert len(lines) == 3
    finally:
        switches.stop({"topology": lab["topology"], "switches": result}, net)
    for name in ("leaf-onyx", "leaf-cumulus-long-name"):
        info = result[name]
        assert not Path("/run/netns", info["netns"]).exists()
        assert not Path("/sys/class/net", info["veth"]).exists()
        assert not procs.alive(info["pid"])
    # stop twice is fine
    switches.stop({"topology": lab["topology"], "switches": result}, net)


def test_restart_keeps_the_host_key_and_password(bridge, state, tmp_path):
    net = _test_net(tmp_path)
    lab = {"topology": {"switches": [_lab()["topology"]["switches"][1]]}}
    first = switches.start(lab, net)
    key = (state / "switches" / "leaf-onyx" / "host_key.pub").read_text()
    pw = (state / "switches" / "leaf-onyx" / "password").read_text()
    switches.stop({**lab, "switches": first}, net)
    second = switches.start(lab, net)
    try:
        assert (state / "switches" / "leaf-onyx" / "host_key.pub").read_text() == key
        assert (state / "switches" / "leaf-onyx" / "password").read_text() == pw
        assert second["leaf-onyx"]["pid"] != first["leaf-onyx"]["pid"]
        assert len((state / "ssh" / "known_hosts").read_text().splitlines()) == 1
    finally:
        switches.stop({**lab, "switches": second}, net)


def test_an_emulator_that_dies_fails_start_and_cleans_up(bridge, state, tmp_path):
    net = _test_net(tmp_path, "import sys; print('boom: cannot bind'); sys.exit(3)\n")
    lab = {"topology": {"switches": [_lab()["topology"]["switches"][1]]}}
    with pytest.raises(FabricopsError, match=r"leaf-onyx.s emulator exited with status 3 \(boom"):
        switches.start(lab, net)
    assert not Path("/run/netns", switches.short_name("fo-test-s", "leaf-onyx")).exists()
    assert not Path("/sys/class/net", switches.short_name("fo-test-v", "leaf-onyx")).exists()


def test_missing_bridge_is_one_sentence(state, tmp_path):
    net = switches.Net(bridge="fo-test-nobr", netns_prefix="fo-test-s", veth_prefix="fo-test-v")
    with pytest.raises(FabricopsError, match="management bridge fo-test-nobr does not exist"):
        switches.start(_lab(), net)


def test_stop_spares_a_recycled_pid(bridge, state, tmp_path):
    other = subprocess.Popen(["sleep", "30"])
    try:
        switches.stop({"switches": {"leaf-onyx": {"os": "onyx", "pid": other.pid,
                                                  "netns": "fo-test-sgone", "veth": "fo-test-vgone"}}})
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_real_switchd_answers_ssh(bridge, state, tmp_path):
    pytest.importorskip("fabricops_lab.switchd.__main__")
    pytest.importorskip("asyncssh")
    net = switches.Net(bridge=BRIDGE, netns_prefix="fo-test-s", veth_prefix="fo-test-v",
                       peer_prefix="fo-test-p")
    lab = {"topology": {"switches": [_lab()["topology"]["switches"][1]]}}
    result = switches.start(lab, net)
    try:
        info = result["leaf-onyx"]
        with socket.create_connection((info["mgmt_ip"], 22), timeout=5) as s:
            assert s.recv(64).startswith(b"SSH-2.0-")
        time.sleep(0.2)
        assert "fabricops_lab.switchd" in switches._cmdline(info["pid"])
    finally:
        switches.stop({**lab, "switches": result}, net)
    assert not Path("/run/netns", result["leaf-onyx"]["netns"]).exists()
