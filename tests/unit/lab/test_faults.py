"""fabricops lab fault: each kind's exact mutation, the exit status of bad requests, clear restores bytes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fabricops import cli
from fabricops.errors import EXIT_NORUN, FabricopsError
from fabricops_lab import faults, hardware, paths, topology

# Written in another layout than faults.py writes, so "restores the original bytes" is a real check.
ORIGINAL_FORMAT = {"indent": 1, "sort_keys": True}


class FakeHosts:
    """The seam: what faults.py would run inside hosts, and the hosts' /usr/share/emulated-ofed/release."""

    def __init__(self):
        self.calls: list[tuple[str, list[str]]] = []
        self.resyncs: list[str] = []
        self.release: dict[str, str | None] = {}

    def exec(self, name, argv, check=True):
        self.calls.append((name, list(argv)))
        if argv[:1] == ["cat"]:
            content = self.release.get(name)
            return subprocess.CompletedProcess(argv, 0 if content is not None else 1,
                                               stdout=content or "", stderr="")
        if argv[:2] == ["sh", "-c"] and "printf" in argv[2]:
            self.release[name] = argv[-1] + "\n"
        if argv[:2] == ["rm", "-f"] and argv[2].endswith("release"):
            self.release[name] = None
        return subprocess.CompletedProcess(argv, 0, stdout="", stderr="")

    def resync(self, name):
        self.resyncs.append(name)


@pytest.fixture
def lab(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("FABRICOPS_LAB_DIR", str(state))
    monkeypatch.setattr(paths, "STATE_DIR", state)
    topo = topology.load()
    lab = {"name": topo["name"], "topology": topo,
           "hosts": {h["name"]: {"mgmt_ip": h["mgmt_ip"]} for h in topo["hosts"]}, "switches": {}}
    paths.save_lab(lab)
    for h in topo["hosts"]:
        hw = hardware.hardware_json(topo, h, kernel="6.1.0-18-amd64")
        p = paths.host_dir(h["name"]) / "hw" / "hardware.json"
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps(hw, **ORIGINAL_FORMAT))
    fake = FakeHosts()
    fake.release = {h["name"]: "MLNX_OFED_LINUX-24.10-1.1.4.0\n" for h in topo["hosts"]}
    monkeypatch.setattr(faults, "_host_exec", fake.exec)
    monkeypatch.setattr(faults, "_resync", fake.resync)
    return lab, fake


def hw_path(host="gpu01") -> Path:
    return paths.host_dir(host) / "hw" / "hardware.json"


def hw(host="gpu01") -> dict:
    return json.loads(hw_path(host).read_text())


def port(data, dev, n=1) -> dict:
    hca = next(h for h in data["hcas"] if h["name"] == dev)
    return next(p for p in hca["ports"] if p["port"] == n)


def run(*argv: str) -> int:
    return cli.main(["lab", "fault", *argv])


def assert_only_changed(before: dict, after: dict, changes: dict[tuple, object]):
    """after == before with exactly `changes` applied (paths are key tuples)."""
    expected = json.loads(json.dumps(before))
    for keys, value in changes.items():
        node = expected
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    assert after == expected


# --- host kinds ---------------------------------------------------------------------------------

def test_port_down_ib(lab):
    _, fake = lab
    before = hw()
    original = hw_path().read_bytes()
    assert run("gpu01", "port-down", "mlx5_0/1") == 0
    after = hw()
    base = ("hcas", 0, "ports", 0)
    assert_only_changed(before, after, {
        (*base, "state"): "DOWN", (*base, "phys_state"): "Disabled", (*base, "rate_gbps"): 10,
        (*base, "speed"): "SDR", (*base, "width"): "4X", (*base, "lid"): 0, (*base, "sm_lid"): 0})
    assert ("gpu01", ["ip", "link", "set", "dev", "ibp26s0", "down"]) in fake.calls
    assert fake.resyncs == ["gpu01"]
    rec = json.loads((paths.STATE_DIR / "faults.json").read_text())
    assert [(r["target"], r["kind"], r["args"]) for r in rec] == [("gpu01", "port-down", ["mlx5_0/1"])]
    assert run("clear", "gpu01") == 0
    assert hw_path().read_bytes() == original
    assert ("gpu01", ["ip", "link", "set", "dev", "ibp26s0", "up"]) in fake.calls
    assert fake.resyncs == ["gpu01", "gpu01"]
    assert not (paths.STATE_DIR / "faults.json").exists()


def test_port_down_roce_by_netdev(lab):
    before = hw()
    assert run("gpu02", "port-down", "enp170s0f0np0") == 0
    p = port(hw("gpu02"), "mlx5_2")
    assert (p["state"], p["phys_state"], p["rate_gbps"], p["speed"]) == ("DOWN", "Disabled", 40, "400GbE")
    assert hw() == before  # other hosts untouched


def test_port_width_halves_the_rate(lab):
    before = hw()
    assert run("gpu01", "port-width", "mlx5_1", "2x") == 0
    base = ("hcas", 1, "ports", 0)
    assert_only_changed(before, hw(), {(*base, "width"): "2X", (*base, "rate_gbps"): 200})


def test_port_width_on_roce_scales_the_rate(lab):
    assert run("gpu01", "port-width", "mlx5_3", "1X") == 0
    p = port(hw(), "mlx5_3")
    assert (p["width"], p["rate_gbps"]) == ("1X", 100)


def test_port_speed_hdr_on_a_4x_port(lab):
    before = hw()
    assert run("gpu01", "port-speed", "mlx5_0", "HDR") == 0
    base = ("hcas", 0, "ports", 0)
    assert_only_changed(before, hw(), {(*base, "speed"): "HDR", (*base, "rate_gbps"): 200})


def test_port_speed_roce_and_variant(lab):
    assert run("gpu01", "port-speed", "mlx5_2", "200GbE") == 0
    assert (port(hw(), "mlx5_2")["speed"], port(hw(), "mlx5_2")["rate_gbps"]) == ("200GbE", 200)
    assert run("gpu01", "port-speed", "mlx5_1", "HDR100") == 0
    p = port(hw(), "mlx5_1")
    assert (p["speed"], p["width"], p["rate_gbps"]) == ("HDR", "2X", 100)


def test_flapping_sets_counters(lab):
    before = hw()
    assert run("gpu03", "flapping", "mlx5_0") == 0
    p = port(hw("gpu03"), "mlx5_0")
    assert p["link_flaps"] == faults.FLAPS >= 6
    assert p["symbol_errors"] == faults.SYMBOL_ERRORS > 0
    assert p["state"] == "ACTIVE"
    assert hw() == before


def test_nvlink_inactive_one_link_and_all(lab):
    before = hw()
    assert run("gpu01", "nvlink-inactive", "3", "5") == 0
    assert_only_changed(before, hw(), {("gpus", 3, "inactive_nvlinks"): [5]})
    assert run("gpu01", "nvlink-inactive", "2") == 0
    assert hw()["gpus"][2]["inactive_nvlinks"] == list(range(18))


def test_gpu_missing_removes_it(lab):
    before = hw()
    assert run("gpu01", "gpu-missing", "7") == 0
    after = hw()
    assert [g["index"] for g in after["gpus"]] == list(range(7))
    assert after["gpus"] == before["gpus"][:7]


def test_wrong_firmware(lab):
    before = hw()
    assert run("gpu01", "wrong-firmware", "mlx5_2", "28.36.1010") == 0
    assert_only_changed(before, hw(), {("hcas", 2, "fw_ver"): "28.36.1010"})


def test_wrong_device_writes_the_mapping_and_clear_removes_it(lab):
    before = hw_path().read_bytes()
    state = faults.wrong_device_path("gpu01")
    assert state == hw_path().parent / "wrong-device.json"  # /var/lib/emulated-hw in the host
    assert run("gpu01", "wrong-device", "mlx5_2", "mlx5_0") == 0
    assert json.loads(state.read_text()) == {"mlx5_2": "mlx5_0"}
    assert run("gpu01", "wrong-device", "mlx5_3", "mlx5_0") == 0  # a second one adds to the map
    assert json.loads(state.read_text()) == {"mlx5_2": "mlx5_0", "mlx5_3": "mlx5_0"}
    assert hw_path().read_bytes() == before  # the silicon is untouched
    assert [r["kind"] for r in faults.active()] == ["wrong-device", "wrong-device"]
    assert run("clear", "gpu01") == 0
    assert not state.exists() and hw_path().read_bytes() == before


def test_driver_version_changes_the_silicon_and_clear_restores_it(lab):
    _, fake = lab
    original = hw_path("gpu02").read_bytes()
    before = hw("gpu02")
    assert before["driver_version"] == "550.54.15"
    assert run("gpu02", "driver-version", "550.90.07") == 0
    assert_only_changed(before, hw("gpu02"), {("driver_version",): "550.90.07"})
    assert fake.resyncs == ["gpu02"]
    assert faults.active()[-1]["kind"] == "driver-version"
    assert run("clear", "gpu02") == 0
    assert hw_path("gpu02").read_bytes() == original
    assert fake.resyncs == ["gpu02", "gpu02"]


def test_wrong_ofed_rewrites_release_and_clear_restores_it(lab):
    _, fake = lab
    assert run("gpu02", "wrong-ofed", "5.8-3.0.7.0") == 0
    assert fake.release["gpu02"] == "MLNX_OFED_LINUX-5.8-3.0.7.0\n"
    writes = [c for c in fake.calls if c[1][:2] == ["sh", "-c"]]
    assert writes[-1][1][-2:] == ["/usr/share/emulated-ofed/release", "MLNX_OFED_LINUX-5.8-3.0.7.0"]
    assert run("gpu02", "wrong-ofed", "MLNX_OFED_LINUX-23.10-1.1.9.0") == 0
    assert fake.release["gpu02"] == "MLNX_OFED_LINUX-23.10-1.1.9.0\n"
    assert run("clear", "gpu02") == 0
    assert fake.release["gpu02"] == "MLNX_OFED_LINUX-24.10-1.1.4.0\n"
    assert fake.resyncs == []  # no silicon changed


def test_wrong_ofed_before_install_clear_removes_the_file(lab):
    _, fake = lab
    fake.release["gpu03"] = None
    assert run("gpu03", "wrong-ofed", "5.8-3.0.7.0") == 0
    assert run("clear") == 0
    assert fake.release["gpu03"] is None


def test_host_unreachable_stops_and_starts_sshd(lab):
    _, fake = lab
    assert run("gpu04", "host-unreachable") == 0
    name, argv = fake.calls[-1]
    assert name == "gpu04" and argv[:2] == ["sh", "-c"]
    assert "systemctl stop ssh.socket ssh.service" in argv[2] and '= sshd ] && kill "$p"' in argv[2]
    assert '[ "$p" = 1 ] && continue' in argv[2]  # never PID 1
    assert run("clear", "gpu04") == 0
    assert "systemctl start ssh.service" in fake.calls[-1][1][2]


def test_qos_reset_and_clear_is_a_noop(lab):
    _, fake = lab
    before = hw_path().read_bytes()
    assert run("gpu01", "qos-reset", "enp170s0f0np0") == 0
    assert fake.calls[-1] == ("gpu01", ["rm", "-f", "/run/emulated-hw/qos/enp170s0f0np0.json"])
    n = len(fake.calls)
    assert run("clear", "gpu01") == 0
    assert len(fake.calls) == n and hw_path().read_bytes() == before


def test_several_faults_on_one_host_clear_to_the_original_bytes(lab):
    original = hw_path().read_bytes()
    assert run("gpu01", "port-down", "mlx5_0") == 0
    assert run("gpu01", "gpu-missing", "0") == 0
    assert run("gpu01", "wrong-firmware", "mlx5_1", "28.1.1") == 0
    assert run("gpu02", "flapping", "mlx5_1") == 0
    assert len(faults.active()) == 4
    assert run("clear", "gpu01") == 0
    assert hw_path().read_bytes() == original
    assert [r["target"] for r in faults.active()] == ["gpu02"]
    assert port(hw("gpu02"), "mlx5_1")["link_flaps"] == faults.FLAPS


# --- switch kinds -------------------------------------------------------------------------------

def test_switch_session_drop_and_port_down(lab):
    sw_faults = paths.switch_dir("leaf-onyx") / "faults.json"
    assert run("leaf-onyx", "session-drop", "3") == 0
    assert json.loads(sw_faults.read_text()) == {"drop_after_commands": 3}
    assert run("leaf-onyx", "port-down", "Eth1/3") == 0
    assert json.loads(sw_faults.read_text()) == {"drop_after_commands": 3, "ports_down": ["Eth1/3"]}
    assert run("clear", "leaf-onyx") == 0
    assert not sw_faults.exists()  # there was none before


def test_switch_faults_restore_existing_bytes(lab):
    sw_faults = paths.switch_dir("leaf-cumulus") / "faults.json"
    sw_faults.parent.mkdir(parents=True)
    sw_faults.write_text('{"ports_down": []}')
    assert run("leaf-cumulus", "port-down", "swp2") == 0
    assert json.loads(sw_faults.read_text())["ports_down"] == ["swp2"]
    assert run("clear") == 0
    assert sw_faults.read_text() == '{"ports_down": []}'


def test_ib_switch_port_down_edits_the_fabric_file(lab):
    fabric = paths.fabric_dir() / "switches" / "ib-sw1.json"
    fabric.parent.mkdir(parents=True)
    original = json.dumps({"name": "ib-sw1", "os": "ib", "ports": {"1": {"link": "up"}, "2": {"link": "up"}}})
    fabric.write_text(original)
    assert run("ib-sw1", "port-down", "2") == 0
    assert json.loads(fabric.read_text())["ports"] == {"1": {"link": "up"}, "2": {"link": "down"}}
    assert run("clear", "ib-sw1") == 0
    assert fabric.read_text() == original


# --- bad requests: one sentence, exit 2, nothing changed ----------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["gpu99", "port-down", "mlx5_0"], "no host or switch named 'gpu99' in the lab"),
    (["gpu01", "melt", "mlx5_0"], "'melt' is not a host fault"),
    (["leaf-onyx", "gpu-missing", "0"], "'gpu-missing' is not a switch fault"),
    (["gpu01", "port-down", "mlx5_9"], "gpu01 has no device 'mlx5_9'"),
    (["gpu01", "port-down", "mlx5_0/2"], "mlx5_0 has no port '2'"),
    (["gpu01", "port-width", "mlx5_0", "3X"], "'3X' is not a link width"),
    (["gpu01", "port-speed", "mlx5_0", "400GbE"], "'400GbE' is not an InfiniBand speed"),
    (["gpu01", "port-speed", "mlx5_2", "NDR"], "'NDR' is not an Ethernet speed"),
    (["gpu01", "gpu-missing", "8"], "gpu01 has no GPU 8"),
    (["gpu01", "nvlink-inactive", "0", "18"], "LINK must be 0..17"),
    (["gpu01", "wrong-firmware", "mlx5_0", "new"], "'new' is not a firmware version"),
    (["gpu01", "wrong-ofed", "latest"], "'latest' is not an MLNX_OFED version"),
    (["gpu01", "driver-version", "550"], "'550' is not an NVIDIA driver version"),
    (["gpu01", "driver-version"], "driver-version takes VERSION"),
    (["gpu01", "host-unreachable", "now"], "host-unreachable takes no arguments"),
    (["gpu01", "qos-reset", "eth9"], "gpu01 has no netdev 'eth9'"),
    (["gpu01", "wrong-device", "mlx5_2", "mlx5_9"], "gpu01 has no device 'mlx5_9'"),
    (["gpu01", "wrong-device", "mlx5_2", "mlx5_2"], "two different devices"),
    (["gpu01", "wrong-device", "mlx5_2"], "wrong-device takes DEV OTHER"),
    (["leaf-onyx", "session-drop", "0"], "N must be a positive number"),
    (["ib-sw1", "session-drop", "2"], "ib-sw1 is an InfiniBand switch"),
    (["leaf-onyx", "port-down", "Eth9/9"], "leaf-onyx has no port 'Eth9/9'"),
    (["gpu01"], "give a fault kind after gpu01"),
    (["clear", "nosuch"], "no host or switch named 'nosuch'"),
])
def test_bad_request_exits_2_and_changes_nothing(lab, capsys, argv, message):
    _, fake = lab
    before = {p: p.read_bytes() for p in paths.STATE_DIR.rglob("*") if p.is_file()}
    assert run(*argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert err.count("\n") == 0 and err.startswith("fabricops lab: ")
    after = {p: p.read_bytes() for p in paths.STATE_DIR.rglob("*") if p.is_file()}
    assert after == before
    assert [c for c in fake.calls if c[1][:1] != ["cat"]] == [] and fake.resyncs == []


def test_list_shows_active_faults(lab, capsys):
    assert run("list") == 0
    assert capsys.readouterr().out == "no active faults\n"
    assert run("gpu01", "port-width", "mlx5_0", "2X") == 0
    capsys.readouterr()
    assert run("list") == 0
    out = capsys.readouterr().out
    assert out.startswith("gpu01: port-width mlx5_0 2X (mlx5_0 port 1 at 2X: 200 Gb/s) since ")
    assert run("--json", "list") == 0
    records = json.loads(capsys.readouterr().out)
    assert records[0]["kind"] == "port-width" and records[0]["target_type"] == "host"


def test_no_lab_is_one_sentence(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "none")
    assert run("gpu01", "port-down", "mlx5_0") == EXIT_NORUN  # no lab: could not run (docs/cli.md)
    assert "no lab is up; run fabricops lab up" in capsys.readouterr().err


def test_undo_failure_still_restores_files(lab, monkeypatch):
    original = hw_path().read_bytes()
    assert run("gpu01", "port-down", "mlx5_0") == 0

    def broken(name, argv, check=True):
        raise FabricopsError("gpu01 is not running")

    monkeypatch.setattr(faults, "_host_exec", broken)
    with pytest.raises(FabricopsError, match="cleared, but some undo steps failed"):
        faults.clear("gpu01")
    assert hw_path().read_bytes() == original
    assert faults.active() == []


# --- switch port faults on a two-tier lab: host-facing and inter-switch ports alike ----------------

@pytest.fixture
def two_tier(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("FABRICOPS_LAB_DIR", str(state))
    monkeypatch.setattr(paths, "STATE_DIR", state)
    topo = topology.resolve("two-tier")
    lab = {"name": topo["name"], "topology": topo, "hosts": {}, "switches": {}}
    paths.save_lab(lab)
    from fabricops_lab import switches

    for sw in topo["switches"]:
        if sw["os"] == "ib":
            switches.write_ib_switch(sw)
    fake = FakeHosts()
    monkeypatch.setattr(faults, "_host_exec", fake.exec)
    monkeypatch.setattr(faults, "_resync", fake.resync)
    return topo


def ib_fabric(name: str) -> Path:
    return paths.fabric_dir() / "switches" / f"{name}.json"


def sw_faults(name: str) -> Path:
    return paths.switch_dir(name) / "faults.json"


@pytest.mark.parametrize("port", ["33", "1"])  # ib-leaf1: its ISL to ib-spine1, gpu01's host cable
def test_ib_switch_port_width_speed_flapping(two_tier, port):
    path = ib_fabric("ib-leaf1")
    original = path.read_bytes()
    before = json.loads(original)
    assert run("ib-leaf1", "port-width", port, "2X") == 0
    assert_only_changed(before, json.loads(path.read_text()), {
        ("ports", port): {"link": "up", "speed": "NDR", "width": "2X", "gbps": 200}})
    assert run("ib-leaf1", "port-speed", port, "HDR") == 0  # keeps the width the first fault left
    entry = json.loads(path.read_text())["ports"][port]
    assert entry == {"link": "up", "speed": "HDR", "width": "2X", "gbps": 100}
    assert run("ib-leaf1", "flapping", port) == 0
    assert run("ib-leaf1", "flapping", port, "3") == 0
    entry = json.loads(path.read_text())["ports"][port]
    assert (entry["flaps"], entry["symbol_errors"]) == (11, 1000)
    assert run("clear", "ib-leaf1") == 0
    assert path.read_bytes() == original


def test_isl_fault_changes_both_ends_and_clear_restores_both(two_tier):
    """A link trains, flaps and goes down at both ends: ib-leaf2 33 is ib-spine1 port 2, leaf3 Eth1/18
    is spine2 swp3 (Onyx leaf, Cumulus spine); pfc-off stays on the one end named."""
    leaf, spine = ib_fabric("ib-leaf2"), ib_fabric("ib-spine1")
    orig = leaf.read_bytes(), spine.read_bytes()
    assert run("ib-leaf2", "port-width", "33", "1X") == 0
    one_lane = {"link": "up", "speed": "NDR", "width": "1X", "gbps": 100}
    assert json.loads(leaf.read_text())["ports"]["33"] == one_lane
    assert json.loads(spine.read_text())["ports"]["2"] == one_lane
    assert run("ib-spine1", "port-down", "2") == 0  # from the spine side this time
    assert json.loads(leaf.read_text())["ports"]["33"]["link"] == "down"
    assert run("leaf3", "flapping", "Eth1/18") == 0
    entry = {"flaps": 8, "symbol_errors": 500}
    assert json.loads(sw_faults("leaf3").read_text()) == {"port_faults": {"Eth1/18": entry}}
    assert json.loads(sw_faults("spine2").read_text()) == {"port_faults": {"swp3": entry}}
    assert run("leaf3", "pfc-off", "Eth1/18") == 0
    assert "pfc_off" not in json.loads(sw_faults("spine2").read_text())
    assert run("clear") == 0
    assert (leaf.read_bytes(), spine.read_bytes()) == orig
    assert not sw_faults("leaf3").exists() and not sw_faults("spine2").exists()


def test_ib_port_speed_variant_sets_the_width(two_tier):
    assert run("ib-spine2", "port-speed", "1", "HDR100") == 0  # ib-spine2 port 1: ib-leaf1's uplink
    assert json.loads(ib_fabric("ib-spine2").read_text())["ports"]["1"] == {
        "link": "up", "speed": "HDR", "width": "2X", "gbps": 100}


def test_ib_isl_port_down(two_tier):
    assert run("ib-spine1", "port-down", "4") == 0  # ib-leaf4's uplink, spine side
    assert json.loads(ib_fabric("ib-spine1").read_text())["ports"]["4"] == {"link": "down"}


@pytest.mark.parametrize(("switch", "port"), [("leaf3", "Eth1/17"), ("leaf3", "Eth1/1"), ("spine1", "swp2"),
                                              ("leaf1", "swp1")])
def test_roce_switch_port_faults_write_port_faults(two_tier, switch, port):
    assert run(switch, "port-width", port, "2X") == 0
    assert json.loads(sw_faults(switch).read_text()) == {
        "port_faults": {port: {"speed": "400GbE", "width": "2X", "gbps": 200}}}
    assert run(switch, "port-speed", port, "100GbE") == 0
    assert run(switch, "flapping", port, "2") == 0
    assert run(switch, "port-down", port) == 0
    assert run(switch, "pfc-off", port) == 0
    assert json.loads(sw_faults(switch).read_text()) == {
        "port_faults": {
            port: {"speed": "100GbE", "width": "2X", "gbps": 100, "flaps": 2, "symbol_errors": 500}
        },
        "ports_down": [port],
        "pfc_off": [port],
    }
    assert run("clear", switch) == 0
    assert not sw_faults(switch).exists()


def _onyx(two_tier, name="leaf3"):
    from fabricops_lab.switchd.onyx import OnyxSession, OnyxSwitch

    sw = next(s for s in two_tier["switches"] if s["name"] == name)
    emu = OnyxSwitch(name, sw["ports"], paths.switch_dir(name), ib_fabric(name))
    sess = OnyxSession(emu)
    for line in ("enable", "no cli session paging enable", "configure terminal", "roce lossless", "exit"):
        sess.handle(line)
    return emu, sess


def _nvue(two_tier, name="spine1"):
    from fabricops_lab.switchd.nvue import NvueSession, NvueSwitch

    sw = next(s for s in two_tier["switches"] if s["name"] == name)
    emu = NvueSwitch(name, sw["ports"], paths.switch_dir(name), ib_fabric(name))
    sess = NvueSession(emu)
    for line in ("nv set qos roce mode lossless", "nv config apply -y"):
        sess.handle(line)
    return emu, sess


def test_onyx_emulator_applies_port_faults_and_pfc_off_and_restores(two_tier):
    """What the physics reads (switches/leaf3.json) and what the switch's CLI shows, after the lab's
    fault and after clear, with no CLI session in between (switchd's ticker runs sync_faults)."""
    from fabricops_lab.switchd.state import sync_faults

    emu, sess = _onyx(two_tier)
    fabric = ib_fabric("leaf3")
    healthy = json.loads(fabric.read_text())["ports"]
    assert healthy["Eth1/17"]["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]
    running = sess.handle("show running-config")[0]
    assert run("leaf3", "pfc-off", "Eth1/17") == 0
    assert run("leaf3", "port-width", "Eth1/17", "2X") == 0
    assert sync_faults(emu) is True
    ports = json.loads(fabric.read_text())["ports"]
    degraded = {"pfc": [0] * 8, "speed": "400GbE", "width": "2X", "gbps": 200}
    assert ports["Eth1/17"] == {**healthy["Eth1/17"], **degraded}
    assert ports["Eth1/18"] == healthy["Eth1/18"] and ports["Eth1/1"] == healthy["Eth1/1"]
    running_now = sess.handle("show running-config")[0]
    assert "interface ethernet 1/17 no dcb priority-flow-control mode" in running_now
    pfc = sess.handle("show dcb priority-flow-control")[0]
    rows = [ln.split() for ln in pfc.splitlines() if ln.startswith("Eth1/17 ")]
    assert rows == [["Eth1/17", "Auto", "Disabled"]]
    assert sync_faults(emu) is False  # nothing changed since
    assert run("clear", "leaf3") == 0
    assert sync_faults(emu) is True
    assert json.loads(fabric.read_text())["ports"] == healthy
    after = sess.handle("show running-config")[0]
    assert after.split("\n")[3:] == running.split("\n")[3:]  # lines past the timestamp


def test_nvue_emulator_applies_pfc_off_as_a_pfc_profile_and_restores(two_tier):
    from fabricops_lab.switchd.state import sync_faults

    emu, sess = _nvue(two_tier)
    fabric = ib_fabric("spine1")
    healthy = json.loads(fabric.read_text())["ports"]
    applied, pending = json.dumps(emu.applied, sort_keys=True), json.dumps(emu.pending, sort_keys=True)
    assert healthy["swp1"]["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert run("spine1", "pfc-off", "swp1") == 0  # the spine side of leaf1's uplink
    assert run("spine1", "flapping", "swp1") == 0
    assert sync_faults(emu) is True
    ports = json.loads(fabric.read_text())["ports"]
    assert ports["swp1"] == {**healthy["swp1"], "pfc": [0] * 8, "flaps": 8, "symbol_errors": 500}
    assert ports["swp2"] == healthy["swp2"]
    assert sess.handle("nv show interface swp1 qos pfc")[0].strip() == "profile: pfc-off"
    assert emu.applied["qos"]["pfc"]["pfc-off"] == {"tx": "disable", "rx": "disable"}
    assert emu.pending["interface"]["swp1"]["qos"]["pfc"] == {"profile": "pfc-off"}  # a later apply keeps it
    assert run("clear") == 0
    assert sync_faults(emu) is True
    assert json.loads(fabric.read_text())["ports"] == healthy
    assert json.dumps(emu.applied, sort_keys=True) == applied
    assert json.dumps(emu.pending, sort_keys=True) == pending


def test_switchd_ticker_applies_a_fault_without_a_session(two_tier, tmp_path):
    """The real server: a fault reaches the fabric file within a tick, no login needed."""
    import asyncio
    import time

    from fabricops_lab.switchd import server

    sw = next(s for s in two_tier["switches"] if s["name"] == "leaf4")
    fabric = ib_fabric("leaf4")

    async def main():
        acc = await server.serve("onyx", "leaf4", sw["ports"], "127.0.0.1", 0, str(tmp_path / "hk"), "pw",
                                 str(paths.switch_dir("leaf4")), str(fabric))
        try:
            assert json.loads(fabric.read_text())["ports"]["Eth1/18"]["link"] == "up"
            assert run("leaf4", "port-down", "Eth1/18") == 0
            assert run("leaf4", "port-speed", "Eth1/18", "200GbE") == 0
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                entry = json.loads(fabric.read_text())["ports"]["Eth1/18"]
                if entry["link"] == "down" and entry.get("gbps") == 200:
                    return entry
                await asyncio.sleep(0.05)
            return json.loads(fabric.read_text())["ports"]["Eth1/18"]
        finally:
            await server.close(acc)

    entry = asyncio.run(main())
    assert entry["link"] == "down"
    assert (entry["speed"], entry["width"], entry["gbps"]) == ("200GbE", "4X", 200)


@pytest.mark.parametrize("argv, message", [
    (["ib-leaf1", "pfc-off", "33"], "ib-leaf1 is an InfiniBand switch: PFC is an Ethernet (RoCE) setting"),
    (["ib-leaf1", "port-width", "40", "2X"], "ib-leaf1 port 40 is not cabled (no host cable or link uses"),
    (["leaf3", "port-speed", "Eth1/30", "200GbE"], "leaf3 port Eth1/30 is not cabled"),
    (["ib-leaf1", "port-width", "33", "3X"], "'3X' is not a link width"),
    (["ib-leaf1", "port-width", "33"], "port-width takes PORT WIDTH"),
    (["ib-leaf1", "port-speed", "33", "400GbE"], "'400GbE' is not an InfiniBand speed"),
    (["spine1", "port-speed", "swp1", "NDR"], "'NDR' is not an Ethernet speed like 200GbE (spine1 port swp1"),
    (["spine1", "flapping", "swp1", "0"], "FLAPS must be a positive number"),
    (["spine1", "pfc-off", "swp99"], "spine1 has no port 'swp99'"),
    (["spine1", "pfc-off"], "pfc-off takes PORT"),
    (["leaf4", "port-width", "Eth1/99", "2X"], "leaf4 has no port 'Eth1/99'"),
])
def test_bad_switch_port_fault_exits_2_and_changes_nothing(two_tier, capsys, argv, message):
    before = {p: p.read_bytes() for p in paths.STATE_DIR.rglob("*") if p.is_file()}
    assert run(*argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert err.count("\n") == 0 and err.startswith("fabricops lab: ")
    assert {p: p.read_bytes() for p in paths.STATE_DIR.rglob("*") if p.is_file()} == before


def test_two_faults_injected_at_once_on_two_hosts_both_stay_recorded(lab, monkeypatch):
    """faults.json is read, changed and written back: two injections at once (test files side by side
    on different hosts, or two operators) lost one record, and with it the undo of an armed fault.
    The second injection reads faults.json while the first is between its read and its write (held
    there until the second has had its chance); with the lock it waits instead."""
    import threading

    first_read = threading.Event()
    original_active = faults.active

    def active_then_pause():
        records = original_active()
        if threading.current_thread().name == "first":
            first_read.set()
            second_started.wait(5)
            second_done.wait(0.5)  # the second may not get in while the first holds the lock
        return records

    second_started, second_done = threading.Event(), threading.Event()
    monkeypatch.setattr(faults, "active", active_then_pause)
    errors: list[BaseException] = []

    def first():
        try:
            faults.inject("gpu01", "port-down", ["mlx5_0"], lab[0])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=first, name="first")
    t.start()
    assert first_read.wait(5)
    second_started.set()
    faults.inject("gpu02", "port-down", ["mlx5_0"], lab[0])
    second_done.set()
    t.join(10)
    assert not errors
    recorded = {(r["target"], r["kind"]) for r in original_active()}
    assert recorded == {("gpu01", "port-down"), ("gpu02", "port-down")}
    assert run("clear") == 0
    assert port(hw("gpu01"), "mlx5_0")["state"] == port(hw("gpu02"), "mlx5_0")["state"]
