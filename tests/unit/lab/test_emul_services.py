"""Emulated opensm / sminfo / nv-fabricmanager / modprobe+lsmod (fabricops_lab.emul.services)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from captures import read_fixture

from fabricops import services as svc
from fabricops.parsers import sminfo as sminfo_parser
from fabricops_lab.emul import hwctl
from fabricops_lab.emul import services as es

SRC = Path(__file__).resolve().parents[3] / "src"


def _hw(host: str, idx: int, mode: str | None) -> dict:
    hw = {
        "host": host,
        "kernel": "6.1.0",
        "driver_version": "550.54.15",
        "gpu_topology": "nvswitch",
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}],
        "hcas": [
            {
                "name": "mlx5_0",
                "node_guid": f"b83f:d203:00a0:0{idx}00",
                "fw_ver": "28.39.1002",
                "ports": [
                    {
                        "port": 1,
                        "link_layer": "InfiniBand",
                        "netdev": "ibp26s0",
                        "speed": "NDR",
                        "width": "4X",
                        "rate_gbps": 400,
                        "state": "ACTIVE",
                        "phys_state": "LinkUp",
                        "lid": idx + 1,
                        "sm_lid": 1,
                        "port_guid": f"b83f:d203:00a0:0{idx}00",
                    }
                ],
            }
        ],
    }
    if mode:
        hw["subnet_manager"] = mode
    return hw


@pytest.fixture
def rack(tmp_path):
    """Two hosts sharing one fabric directory (as the lab's bind mounts do)."""
    fabric = tmp_path / "fabric"
    (fabric / "sm").mkdir(parents=True)
    (fabric / "cabling.json").write_text(
        json.dumps(
            {
                "links": [
                    {
                        "host": f"gpu0{i}",
                        "netdev": "ibp26s0",
                        "hca": "mlx5_0",
                        "port": 1,
                        "switch": "ib-sw1",
                        "switch_port": str(i),
                    }
                    for i in (1, 2)
                ]
            }
        )
    )
    roots = {}
    for i in (1, 2):
        root = tmp_path / f"gpu0{i}"
        (root / "var/lib/emulated-hw").mkdir(parents=True)
        (root / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(_hw(f"gpu0{i}", i, "hosts")))
        (root / "var/lib").mkdir(exist_ok=True)
        os.symlink(fabric, root / "var/lib/emulated-fabric")
        (root / "usr/share/emulated-ofed").mkdir(parents=True)
        (root / "usr/share/emulated-ofed/release").write_text("MLNX_OFED_LINUX-24.10-1.1.4.0\n")
        roots[f"gpu0{i}"] = root
    return roots


def run_tool(root: Path, tool: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, EMUL_ROOT=str(root), PYTHONPATH=str(SRC))
    code = f"import sys; from fabricops_lab.emul.services import main; sys.exit(main({tool!r}, sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=30
    )


def start_opensm(root: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, EMUL_ROOT=str(root), PYTHONPATH=str(SRC))
    code = "import sys; from fabricops_lab.emul.services import main; sys.exit(main('opensm', sys.argv[1:]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for(pred, timeout=30.0):
    """True as soon as ``pred()`` is; the timeout only bounds a failure (a busy CI machine starts an
    emulated opensm in seconds, not tenths)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def sync(root: Path, monkeypatch) -> None:
    monkeypatch.setenv("EMUL_ROOT", str(root))
    hwctl.sync(mount=False)
    es.apply()


def port_state(root: Path) -> str:
    return (root / "sys/class/infiniband/mlx5_0/ports/1/state").read_text().strip()


def test_ports_init_until_sm_then_active(rack, monkeypatch):
    g1, g2 = rack["gpu01"], rack["gpu02"]
    for r in (g1, g2):
        sync(r, monkeypatch)
        assert port_state(r) == "2: INIT"
        assert (r / "sys/class/infiniband/mlx5_0/ports/1/lid").read_text().strip() == "0x0"
    bad = run_tool(g2, "sminfo")
    assert bad.returncode == 255 and "sminfo: iberror: failed: query" in bad.stderr
    (g1 / "etc/opensm").mkdir(parents=True)
    (g1 / "etc/opensm/opensm.conf").write_text(svc.render_conf("0xb83fd20300a00100", 15, "minhop"))
    proc = start_opensm(g1)
    try:
        assert wait_for(lambda: run_tool(g2, "sminfo").returncode == 0)
        rec = sminfo_parser.parse(run_tool(g2, "sminfo").stdout)
        assert (rec.lid, rec.guid, rec.priority, rec.state_name) == (
            2,
            "0xb83fd20300a00100",
            15,
            "SMINFO_MASTER",
        )
        sync(g2, monkeypatch)  # what the emulated-hw-sm path unit does on gpu02
        assert port_state(g2) == "4: ACTIVE"
        assert (g2 / "sys/class/infiniband/mlx5_0/ports/1/sm_lid").read_text().strip() == "0x2"
        assert (g2 / "sys/class/infiniband/mlx5_0/ports/1/lid").read_text().strip() == "0x3"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert "Entering MASTER state" in out and "SUBNET UP" in out and "Exiting SM" in out
    # the SM is gone: sminfo fails, ports stay ACTIVE (as on a real fabric)
    assert run_tool(g2, "sminfo").returncode == 255
    sync(g2, monkeypatch)
    assert port_state(g2) == "4: ACTIVE"


def _sm_state(guid: str) -> str | None:
    """The state subnet ib-sw1's record of SM ``guid`` says, None while it has none."""
    return (es.read_subnet("ib-sw1")["sms"].get(guid) or {}).get("state")


def test_master_standby_election_by_priority(rack, monkeypatch):
    g1, g2 = rack["gpu01"], rack["gpu02"]
    for r in (g1, g2):
        sync(r, monkeypatch)
    p1 = start_opensm(g1, "-p", "14", "-g", "0xb83fd20300a00100")
    p2 = start_opensm(g2, "-p", "15", "-g", "0xb83fd20300a00200")
    try:
        assert wait_for(lambda: run_tool(g1, "sminfo").stdout.startswith("sminfo: sm lid 3 "))
        rec = sminfo_parser.parse(run_tool(g1, "sminfo").stdout)
        assert (rec.guid, rec.priority) == ("0xb83fd20300a00200", 15)
        monkeypatch.setenv("EMUL_ROOT", str(g1))
        sms = es.read_subnet("ib-sw1")["sms"]
        # gpu01's SM may still be starting (a Python process on a busy machine) when gpu02's has won:
        # no record yet is "not standby yet", not an error (CI failed on the KeyError)
        assert wait_for(lambda: _sm_state("0xb83fd20300a00100") == "STANDBY")
        assert sms["0xb83fd20300a00200"]["state"] == "MASTER"
        p2.terminate()
        p2.communicate(timeout=10)
        assert wait_for(lambda: run_tool(g1, "sminfo").stdout.startswith("sminfo: sm lid 2 "))
        assert wait_for(lambda: _sm_state("0xb83fd20300a00100") == "MASTER")
    finally:
        outs = {}
        for name, p in (("p1", p1), ("p2", p2)):
            if p.poll() is None:
                p.terminate()
            if not p.stdout.closed:
                outs[name] = p.communicate(timeout=10)[0]
    out1 = outs["p1"]
    assert "Entering STANDBY state" in out1 and "Entering MASTER state" in out1  # standby, then took over


def test_opensm_bad_guid_and_version(rack):
    r = run_tool(rack["gpu01"], "opensm", "-g", "0x1234")
    assert r.returncode == 1 and "Bind to GUID 0x0000000000001234 failed" in r.stderr
    assert run_tool(rack["gpu01"], "opensm", "--version").stdout.splitlines()[1].startswith("OpenSM 5.18.0")


def test_switch_mode_default_unchanged(rack, monkeypatch):
    root = rack["gpu01"]
    (root / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(_hw("gpu01", 1, None)))
    sync(root, monkeypatch)
    assert port_state(root) == "4: ACTIVE"
    out = run_tool(root, "sminfo").stdout
    rec = sminfo_parser.parse(out)
    assert (rec.lid, rec.priority, rec.state_name) == (1, 15, "SMINFO_MASTER")
    # same line structure as a real capture: one line, the same words in the same places
    real = read_fixture("sminfo", "oracle-bda-switch-sm.txt").splitlines()[0].split()
    mine = out.splitlines()
    assert len(mine) == 1
    assert [w for i, w in enumerate(mine[0].split()) if i in (0, 1, 2, 4, 5, 7, 8, 10, 12, 14)] == [
        w for i, w in enumerate(real) if i in (0, 1, 2, 4, 5, 7, 8, 10, 12, 14)
    ]


def test_modprobe_lsmod_peermem(rack, monkeypatch):
    root = rack["gpu01"]
    monkeypatch.setenv("EMUL_ROOT", str(root))
    assert "nvidia_peermem" not in es.loaded_modules()
    assert es.modprobe(["nvidia-peermem"]) == 0
    assert "nvidia_peermem" in es.loaded_modules()
    r = run_tool(root, "lsmod")
    lines = r.stdout.splitlines()
    assert lines[0] == "Module                  Size  Used by"
    assert any(ln.split()[:3] == ["nvidia_peermem", "16384", "0"] for ln in lines)
    assert svc.lsmod_modules(r.stdout).count("nvidia_peermem") == 1
    # openibd stop: the RDMA stack goes, and nvidia_peermem with it
    (root / "run/emulated-hw").mkdir(parents=True, exist_ok=True)
    (root / "run/emulated-hw/driver-stopped").write_text("stopped\n")
    assert "nvidia_peermem" not in es.loaded_modules()
    r = run_tool(root, "modprobe", "nvidia_peermem")
    assert r.returncode == 1 and "could not insert 'nvidia_peermem': Invalid argument" in r.stderr


def test_fabric_manager_version_match_and_mismatch(rack, monkeypatch):
    root = rack["gpu01"]
    monkeypatch.setenv("EMUL_ROOT", str(root))
    vfile = root / es.FM_VERSION
    vfile.parent.mkdir(parents=True)
    vfile.write_text("550.54.14\n")
    r = run_tool(root, "nv-fabricmanager", "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg")
    assert r.returncode == 1
    assert (
        "fabric manager NVIDIA GPU driver interface version 550.54.14 don't match with driver version "
        "550.54.15"
    ) in r.stderr
    hw = json.loads((root / "var/lib/emulated-hw/hardware.json").read_text())
    hw["fabric_manager"] = {"required": True}
    assert es.fabric_state(hw) == ("Not Started", "N/A")
    (root / es.FM_STATE).parent.mkdir(parents=True, exist_ok=True)
    (root / es.FM_STATE).write_text(json.dumps({"pid": 0, "version": "550.54.15"}))
    assert es.fabric_state(hw) == ("Completed", "Success")
    assert es.fabric_state({"driver_version": "550.54.15"}) is None


def test_two_tier_fabric_is_one_subnet(rack, monkeypatch):
    """Hosts on different leaves of one fat tree (cabling.json isls) see one subnet manager: the
    same SM GUID from sminfo, as on a real two-tier fabric with one SM."""
    fabric = rack["gpu01"] / "var/lib/emulated-fabric"
    cab = json.loads((fabric / "cabling.json").read_text())
    cab["links"][1]["switch"] = "ib-leaf2"
    cab["links"][0]["switch"] = "ib-leaf1"
    (fabric / "cabling.json").write_text(json.dumps(cab))
    outs = {}
    for h in ("gpu01", "gpu02"):
        (rack[h] / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(_hw(h, int(h[-1]), None)))
        sync(rack[h], monkeypatch)
        outs[h] = run_tool(rack[h], "sminfo").stdout.split()
    assert outs["gpu01"][6] != outs["gpu02"][6]  # two switches, no links: two subnets
    cab["isls"] = [
        {"switch_a": leaf, "port_a": "33", "switch_b": "ib-spine1", "port_b": str(k)}
        for k, leaf in enumerate(("ib-leaf1", "ib-leaf2"), 1)
    ]
    (fabric / "cabling.json").write_text(json.dumps(cab))
    monkeypatch.setenv("EMUL_ROOT", str(rack["gpu01"]))
    assert es.subnet_of(_hw("gpu01", 1, None), "mlx5_0", 1) == "ib-leaf1"
    monkeypatch.setenv("EMUL_ROOT", str(rack["gpu02"]))
    assert es.subnet_of(_hw("gpu02", 2, None), "mlx5_0", 1) == "ib-leaf1"
    guids = {run_tool(rack[h], "sminfo").stdout.split()[6] for h in ("gpu01", "gpu02")}
    assert len(guids) == 1
