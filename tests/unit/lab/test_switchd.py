"""The emulated Onyx / Cumulus switches, driven by netmiko's own drivers."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest
from captures import read_fixture
from netmiko import ConnectHandler
from netmiko.exceptions import ConfigInvalidException, NetmikoAuthenticationException, ReadTimeout

from fabricops.parsers.nvue import parse_config_diff, parse_qos_roce
from fabricops.parsers.onyx import parse_ecn, parse_pfc, parse_qos_trust, parse_running_config
from fabricops.roce.platforms.nvue import nvue_facts
from fabricops_lab.switchd.nvue import NvueSession, NvueSwitch
from fabricops_lab.switchd.onyx import OnyxSession, OnyxSwitch
from fabricops_lab.switchd.server import close, serve

PASSWORD = "lab-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A switch server on its own event-loop thread; restart keeps the state dir."""

    def __init__(self, tmp_path, os_name, ports, **serve_kw):
        self.tmp, self.os_name, self.ports = tmp_path, os_name, ports
        self.serve_kw = serve_kw  # release=, api_port= (Cumulus)
        self.port = _free_port()
        self.fabric = tmp_path / "fabric" / "switches" / "sw1.json"
        self.state = tmp_path / "state"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.start()

    def start(self):
        name = "leaf-onyx" if self.os_name == "onyx" else "leaf-cumulus"
        fut = asyncio.run_coroutine_threadsafe(
            serve(
                self.os_name,
                name,
                self.ports,
                "127.0.0.1",
                self.port,
                str(self.tmp / "hostkey"),
                PASSWORD,
                str(self.state),
                str(self.fabric),
                **self.serve_kw,
            ),
            self.loop,
        )
        self.acceptor = fut.result(10)
        self.switch = self.acceptor._fabricops_switch

    def stop(self):
        asyncio.run_coroutine_threadsafe(close(self.acceptor), self.loop).result(10)

    def connect(self, device_type, **kw):
        user = "admin" if self.os_name == "onyx" else "cumulus"
        return ConnectHandler(
            device_type=device_type,
            host="127.0.0.1",
            port=self.port,
            username=user,
            password=kw.pop("password", PASSWORD),
            fast_cli=True,
            **kw,
        )

    def fabric_state(self):
        return json.loads(self.fabric.read_text())

    def close(self):
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def onyx(tmp_path):
    lab = Lab(tmp_path, "onyx", [f"Eth1/{n}" for n in range(1, 5)])
    yield lab
    lab.close()


@pytest.fixture
def cumulus(tmp_path):
    lab = Lab(tmp_path, "cumulus", [f"swp{n}" for n in range(1, 5)])
    yield lab
    lab.close()


@pytest.fixture
def cumulus54(tmp_path):
    """Cumulus Linux 5.4: nv config apply does not save (auto-save is off before 5.9)."""
    lab = Lab(tmp_path, "cumulus", [f"swp{n}" for n in range(1, 5)], release="5.4")
    yield lab
    lab.close()


PFC_ECN = [
    "dcb priority-flow-control enable force",
    "dcb priority-flow-control priority 3 enable",
    "interface ethernet 1/1-1/2",
    "dcb priority-flow-control mode on force",
    "qos trust L3",
    "traffic-class 3 congestion-control ecn minimum-absolute 150 maximum-absolute 1500",
    "exit",
]


def test_onyx_prompts_config_and_readback(onyx):
    c = onyx.connect("mellanox_mlnxos")
    assert c.find_prompt() == "leaf-onyx [standalone: master] >"
    c.enable()
    assert c.find_prompt() == "leaf-onyx [standalone: master] #"
    out = c.send_config_set(PFC_ECN)
    assert "(config interface ethernet 1/1-1/2) #" in out and "Unrecognized" not in out
    pfc = parse_pfc(c.send_command("show dcb priority-flow-control | json-print"))
    assert pfc.enabled and pfc.priorities_enabled == [3]
    assert pfc.interfaces["Eth1/1"].enabled and not pfc.interfaces["Eth1/3"].enabled
    text = parse_pfc(c.send_command("show dcb priority-flow-control"))
    assert text.format == "text" and text.interfaces == pfc.interfaces
    ecn = parse_ecn(c.send_command("show interfaces ethernet 1/1 congestion-control | json-print"))
    assert ecn.traffic_classes[3].ecn and (
        ecn.traffic_classes[3].min_threshold,
        ecn.traffic_classes[3].max_threshold,
    ) == (150, 1500)
    assert parse_ecn(c.send_command("show interfaces ethernet 1/1 congestion-control")).traffic_classes[3].ecn
    q = parse_qos_trust(c.send_command("show qos interface ethernet 1/1 | json-print"))
    assert q.interfaces["Eth1/1"].trust == "L3"
    assert parse_qos_trust(c.send_command("show qos")).interfaces["Eth1/3"].trust == "L2"
    rc = parse_running_config(c.send_command("show running-config"))
    assert rc.pfc_enabled and rc.pfc_priorities == [3]
    assert rc.interface_has("Eth1/2", "dcb priority-flow-control mode on force")
    assert not rc.interface_has("Eth1/3", "dcb priority-flow-control mode on force")
    c.disconnect()
    st = onyx.fabric_state()
    assert st["os"] == "onyx" and st["name"] == "leaf-onyx"
    assert st["ports"]["Eth1/1"] == {
        "trust": "l3",
        "pfc": [0, 0, 0, 1, 0, 0, 0, 0],
        "ecn": {"3": {"enabled": True, "min_kb": 150, "max_kb": 1500}},
        "link": "up",
    }
    assert st["ports"]["Eth1/3"]["pfc"] == [0] * 8 and st["ports"]["Eth1/3"]["trust"] == "l2"


def test_onyx_json_print_matches_real_capture(onyx):
    c = onyx.connect("mellanox_mlnxos")
    c.enable()
    c.send_config_set(
        [
            "interface ethernet 1/1 traffic-class 3 congestion-control ecn "
            "minimum-absolute 500 maximum-absolute 1550"
        ]
    )
    raw = c.send_command("show interfaces ethernet 1/1 congestion-control | json-print")
    emulated = json.loads(raw)
    real = json.loads(read_fixture("onyx-ecn", "ansible-congestion-control.json"))
    # the interface block, idle TCs and the ECN TC-3 block are the real capture's, key for key
    assert emulated[0] == real[0] and emulated[1] == real[1] and emulated[4] == real[4]
    assert len(emulated) == len(real) == 9
    # and the same parser reads both
    assert parse_ecn(raw).traffic_classes[3] == parse_ecn(json.dumps(real)).traffic_classes[3]
    c.disconnect()


def test_onyx_save_restart_and_unsaved_lost(onyx):
    c = onyx.connect("mellanox_mlnxos")
    c.enable()
    c.send_config_set(PFC_ECN)
    c.save_config()
    c.send_config_set(["interface ethernet 1/4 qos trust L3", "roce lossless"])  # not saved
    assert onyx.fabric_state()["ports"]["Eth1/4"]["pfc"][3] == 1
    c.disconnect()
    onyx.stop()
    onyx.start()
    c = onyx.connect("mellanox_mlnxos")
    c.enable()
    rc = parse_running_config(c.send_command("show running-config"))
    assert rc.pfc_priorities == [3] and rc.interface_has("Eth1/1", "qos trust L3")
    assert rc.roce is None and not rc.interface_has("Eth1/4", "qos trust L3")
    c.disconnect()
    st = onyx.fabric_state()
    assert st["ports"]["Eth1/4"]["trust"] == "l2" and st["ports"]["Eth1/1"]["pfc"][3] == 1


def test_onyx_roce_one_shot_and_no_roce(onyx):
    c = onyx.connect("mellanox_mlnxos")
    c.enable()
    c.send_config_set(["roce lossless"])
    st = onyx.fabric_state()["ports"]["Eth1/4"]
    assert st["trust"] == "l3" and st["pfc"][3] == 1 and st["ecn"]["3"]["max_kb"] == 1500
    c.send_config_set(["no roce"])
    assert onyx.fabric_state()["ports"]["Eth1/4"]["pfc"] == [0] * 8
    c.disconnect()


def test_onyx_unknown_command_error_text(onyx):
    c = onyx.connect("mellanox_mlnxos")
    c.enable()
    assert c.send_command("foo") == '% Unrecognized command "foo".\nType "?" for help.'
    with pytest.raises(ConfigInvalidException, match="Unrecognized"):
        c.send_config_set(["dcb priority-flow-control priority 9 enable"], error_pattern=r"% Unrecognized")
    out = c.send_config_set(["interface ethernet 1/1 qos trust bogus"])
    assert '% Unrecognized command "bogus".' in out
    assert onyx.switch.cfg["ports"]["Eth1/1"]["trust"] is None
    c.disconnect()


def test_onyx_wrong_password(onyx):
    with pytest.raises(NetmikoAuthenticationException):
        onyx.connect("mellanox_mlnxos", password="wrong")


def test_onyx_drop_after_commands_and_ports_down(onyx):
    onyx.state.mkdir(exist_ok=True)
    (onyx.state / "faults.json").write_text(json.dumps({"drop_after_commands": 2, "ports_down": ["Eth1/3"]}))
    c = onyx.connect("mellanox_mlnxos", read_timeout_override=2)
    c.enable()
    assert "Operational state                : Down" in c.send_command("show interfaces ethernet 1/3")
    with pytest.raises(Exception):  # noqa: B017 - netmiko raises OSError/EOFError/ReadTimeout variants
        c.send_config_set(
            [
                "dcb priority-flow-control enable force",
                "dcb priority-flow-control priority 3 enable",
                "roce lossless",
                "interface ethernet 1/1 qos trust L3",
            ]
        )
        c.send_command("show running-config")
    st = onyx.fabric_state()["ports"]
    assert st["Eth1/3"]["link"] == "down" and st["Eth1/1"]["link"] == "up"
    assert onyx.switch.cfg["pfc_prios"] == [3] and onyx.switch.cfg["roce"] is None  # dropped after 2


NV_SET = [
    "nv set qos roce mode lossless",
    "nv set qos pfc default-global switch-priority 3",
    "nv set qos congestion-control default-global traffic-class 3 min-threshold 150KB",
    "nv set qos congestion-control default-global traffic-class 3 max-threshold 1500KB",
    "nv set qos mapping default-global trust l3",
]


def test_cumulus_set_diff_apply_state(cumulus):
    c = cumulus.connect("cumulus_linux")
    assert c.find_prompt() == "cumulus@leaf-cumulus:mgmt:~$"
    assert parse_config_diff(c.send_command("nv config diff")).empty
    for cmd in NV_SET:
        assert c.send_command(cmd) == ""
    diff = parse_config_diff(c.send_command("nv config diff"))
    assert diff.set["qos"]["roce"]["mode"] == "lossless"
    assert "set qos mapping default-global trust l3" in diff.changes
    assert cumulus.fabric_state()["ports"]["swp1"]["pfc"] == [0] * 8  # pending does not count
    out = c.save_config()  # netmiko's cumulus_linux save_config = `nv config apply`
    assert "applied [rev_id:" in out
    assert parse_config_diff(c.send_command("nv config diff")).empty
    st = cumulus.fabric_state()
    assert st["os"] == "cumulus" and st["ports"]["swp2"]["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert st["ports"]["swp2"]["trust"] == "l3" and st["ports"]["swp2"]["ecn"]["3"] == {
        "enabled": True,
        "min_kb": 150,
        "max_kb": 1500,
    }
    roce = parse_qos_roce(c.send_command("nv show qos roce"))
    assert roce.mode == "lossless" and roce.pfc_priority == 3 and roce.min_threshold_bytes == 149996
    as_json = parse_qos_roce(c.send_command("nv show qos roce -o json"))
    assert (
        as_json.source_column == "json"
        and as_json.mode == "lossless"
        and as_json.ecn_traffic_classes == [0, 3]
    )
    c.send_command("nv set qos roce mode lossy")
    assert parse_qos_roce(c.send_command("nv show qos roce --rev=pending")).mode == "lossy"
    assert parse_qos_roce(c.send_command("nv show qos roce --rev=applied")).mode == "lossless"
    c.send_command("nv config detach")
    assert parse_config_diff(c.send_command("nv config diff")).empty
    c.disconnect()


def test_cumulus_show_layout_matches_real_capture(cumulus):
    c = cumulus.connect("cumulus_linux")
    c.send_command("nv set qos roce")
    c.send_command("nv config apply -y")
    emulated = c.send_command("nv show qos roce").splitlines()
    real = read_fixture("nvue-qos-roce", "cl514-lossless-single-ipool.txt").splitlines()[1:]
    first_col = [ln[:20].rstrip() for ln in emulated[:22]]
    assert first_col == [ln[:20].rstrip() for ln in real[:22]]
    c.disconnect()


def test_cumulus_confirm_rolls_back(cumulus):
    c = cumulus.connect("cumulus_linux")
    c.send_command("nv set qos roce mode lossless")
    assert "applied" in c.send_command("nv config apply --confirm 1s -y")
    assert cumulus.fabric_state()["ports"]["swp1"]["pfc"][3] == 1
    time.sleep(1.6)
    assert cumulus.fabric_state()["ports"]["swp1"]["pfc"] == [0] * 8
    assert parse_qos_roce(c.send_command("nv show qos roce")).enable == "off"
    # confirmed in time: stays
    c.send_command("nv set qos roce mode lossless")
    c.send_command("nv config apply --confirm 2s -y")
    c.send_command("nv config apply --confirm-yes")
    time.sleep(2.4)
    assert cumulus.fabric_state()["ports"]["swp1"]["pfc"][3] == 1
    c.disconnect()


def test_cumulus_save_restart_and_errors(cumulus54):
    cumulus = cumulus54  # a release without auto-save: "applied, not saved" holds
    c = cumulus.connect("cumulus_linux")
    c.send_command("nv set qos roce mode lossless")
    c.send_command("nv config apply -y")
    assert c.send_command("nv config save") == "saved"
    c.send_command("nv set qos mapping default-global trust l2")
    c.send_command("nv config apply -y")  # applied, not saved
    assert "is not one of" in c.send_command("nv set qos roce mode bogus")
    assert c.send_command("foo") == "-bash: foo: command not found"
    assert "Unknown command" in c.send_command("nv frobnicate")
    c.disconnect()
    cumulus.stop()
    cumulus.start()
    c = cumulus.connect("cumulus_linux")
    assert parse_qos_roce(c.send_command("nv show qos roce")).mode == "lossless"
    assert cumulus.fabric_state()["ports"]["swp1"]["trust"] == "l3"  # the unsaved trust l2 is gone
    c.disconnect()


def test_cumulus_wrong_password_and_port_fault(cumulus):
    with pytest.raises(NetmikoAuthenticationException):
        cumulus.connect("cumulus_linux", password="nope")
    cumulus.state.mkdir(exist_ok=True)
    (cumulus.state / "faults.json").write_text(json.dumps({"ports_down": ["swp3"], "drop_after_commands": 1}))
    c = cumulus.connect("cumulus_linux", read_timeout_override=2)
    c.send_command("nv show qos roce")  # reads the fault file
    with pytest.raises(Exception):  # noqa: B017
        c.send_command("nv set interface swp1 link state down")
        c.send_command("nv config diff")
    assert cumulus.fabric_state()["ports"]["swp3"]["link"] == "down"
    assert cumulus.fabric_state()["ports"]["swp1"]["link"] == "up"  # dropped before it was applied


# ---------------------------------------------------------------- CLI fidelity (engines in-process)


def _onyx(tmp_path, fabric=True):
    sw = OnyxSwitch(
        "leaf-onyx",
        [f"Eth1/{n}" for n in range(1, 5)],
        tmp_path / "onyx",
        tmp_path / "onyx.json" if fabric else None,
    )
    sess = OnyxSession(sw)
    # every real client turns paging off first (netmiko, Ansible's onyx terminal plugin)
    for line in ("no cli session paging enable", "enable", "configure terminal"):
        assert sess.handle(line) == ("", False)
    return sw, sess


def _cfg(sess, *lines):
    return [sess.handle(ln)[0] for ln in lines]


def _rc_lines(sw):
    return [ln for ln in sw.running_config().splitlines() if "Generated at" not in ln]


def test_onyx_ets_strict_wrr_and_no_form(tmp_path):
    sw, sess = _onyx(tmp_path)
    assert (
        _cfg(
            sess,
            "interface ethernet 1/1-1/2 traffic-class 6 dcb ets strict",
            "interface ethernet 1/1 traffic-class 3 dcb ets wrr 50",
            "interface ethernet 1/2",
            "traffic-class 0 dcb ets wrr 50",
            "exit",
        )
        == [""] * 5
    )
    rc = parse_running_config(sw.running_config())
    assert rc.interface_has("Eth1/2", "traffic-class 6 dcb ets strict")
    assert rc.interface_has("Eth1/1", "traffic-class 3 dcb ets wrr 50")
    assert rc.interface_has("Eth1/2", "traffic-class 0 dcb ets wrr 50")
    # the no form, one-liner and inside the interface context: the line goes away
    assert _cfg(sess, "interface ethernet 1/1-1/2 no traffic-class 6 dcb ets") == [""]
    assert _cfg(sess, "interface ethernet 1/1", "no traffic-class 3 dcb ets", "exit") == ["", "", ""]
    text = sw.running_config()
    assert "dcb ets strict" not in text and "traffic-class 3 dcb ets" not in text
    assert parse_running_config(text).interface_has("Eth1/2", "traffic-class 0 dcb ets wrr 50")
    assert sw.cfg["ports"]["Eth1/1"]["ets"] == {} and sw.cfg["ports"]["Eth1/2"]["ets"] == {0: "wrr 50"}
    # what the real CLI refuses
    bad = _cfg(
        sess,
        "interface ethernet 1/1 traffic-class 3 dcb ets wrr",
        "interface ethernet 1/1 traffic-class 3 dcb ets wrr 101",
        "interface ethernet 1/1 traffic-class 8 dcb ets strict",
        "interface ethernet 1/1 no traffic-class 3 dcb ets strict",
    )
    assert bad[0] == '% Incomplete command.\nType "?" for help.\n'
    assert bad[1].startswith('% Unrecognized command "101".')
    assert bad[2].startswith('% Unrecognized command "8".')
    assert bad[3].startswith('% Unrecognized command "strict".')
    assert sw.cfg["ports"]["Eth1/1"]["ets"] == {}


def test_onyx_no_congestion_control_removes_the_line(tmp_path):
    sw, sess = _onyx(tmp_path)
    ecn = "traffic-class 3 congestion-control ecn minimum-absolute 150 maximum-absolute 1500"
    assert _cfg(sess, f"interface ethernet 1/1-1/2 {ecn}") == [""]
    assert parse_running_config(sw.running_config()).interface_has("Eth1/1", ecn)
    assert _cfg(sess, "interface ethernet 1/1-1/2 no traffic-class 3 congestion-control") == [""]
    text = sw.running_config()
    assert "congestion-control" not in text  # no `no traffic-class ...` line is left behind
    fabric = json.loads((tmp_path / "onyx.json").read_text())
    assert fabric["ports"]["Eth1/1"]["ecn"] == {}
    ecn_json = parse_ecn(sess.handle("show interfaces ethernet 1/1 congestion-control | json-print")[0])
    assert ecn_json.traffic_classes[3].mode == "none"
    # with the `roce` one-shot, removing the explicit line falls back to roce's ECN TC3 150/1500
    assert _cfg(
        sess,
        "roce lossless",
        "interface ethernet 1/1 traffic-class 3 congestion-control ecn "
        "minimum-absolute 300 maximum-absolute 3000",
    ) == ["", ""]
    st = json.loads((tmp_path / "onyx.json").read_text())["ports"]["Eth1/1"]["ecn"]["3"]
    assert (st["min_kb"], st["max_kb"]) == (300, 3000)
    assert _cfg(sess, "interface ethernet 1/1 no traffic-class 3 congestion-control") == [""]
    st = json.loads((tmp_path / "onyx.json").read_text())["ports"]["Eth1/1"]["ecn"]["3"]
    assert (st["min_kb"], st["max_kb"]) == (150, 1500)
    # RED is kept as a RED line (drops, no marking): no ECN in the fabric file, Mode RED in the show
    red = "traffic-class 3 congestion-control red minimum-absolute 100 maximum-absolute 900"
    assert _cfg(sess, f"interface ethernet 1/2 {red}") == [""]
    assert parse_running_config(sw.running_config()).interface_has("Eth1/2", red)
    assert json.loads((tmp_path / "onyx.json").read_text())["ports"]["Eth1/2"]["ecn"] == {}
    tc3 = parse_ecn(sess.handle("show interfaces ethernet 1/2 congestion-control | json-print")[0])
    assert tc3.traffic_classes[3].mode == "RED" and not tc3.traffic_classes[3].ecn
    assert tc3.traffic_classes[3].max_threshold == 900
    # a saved configuration replays
    sess.handle("configuration write")
    again = OnyxSwitch("leaf-onyx", sw.ports, tmp_path / "onyx", None)
    assert _rc_lines(again) == _rc_lines(sw)


POOL = [
    "traffic pool roce type lossless",
    "traffic pool roce memory percent 50.00",
    "traffic pool roce map switch-priority 3",
]


def test_onyx_traffic_pool_commands_running_config_and_state(tmp_path):
    sw, sess = _onyx(tmp_path)
    assert _cfg(sess, *POOL) == ["", "", ""]
    lines = _rc_lines(sw)
    i = lines.index("## Interface Ethernet buffer configuration")
    # the section exactly as a real Onyx running-config prints it (see docs/lab-switches.md)
    assert lines[i - 1 : i + 5] == [
        "##",
        "## Interface Ethernet buffer configuration",
        "##",
        *(f"   {ln}" for ln in POOL),
    ]
    assert parse_running_config(sw.running_config()).traffic_pool_lines == POOL
    fabric = json.loads((tmp_path / "onyx.json").read_text())
    assert fabric["buffer_pools"] == {
        "roce": {"type": "lossless", "switch_priorities": [3], "memory_percent": 50.0}
    }
    # list form, moving a priority to another pool, the no forms
    assert (
        _cfg(
            sess,
            "traffic pool roce map switch-priority 4 5",
            "traffic pool bulk map switch-priority 5",
            "no traffic pool roce map switch-priority 4",
            "traffic pool roce memory percent 40",
        )
        == [""] * 4
    )
    pools = json.loads((tmp_path / "onyx.json").read_text())["buffer_pools"]
    assert pools["roce"] == {"type": "lossless", "switch_priorities": [3], "memory_percent": 40.0}
    assert pools["bulk"] == {"type": "lossy", "switch_priorities": [5], "memory_percent": None}
    assert "   traffic pool roce memory percent 40.00" in _rc_lines(sw)
    assert _cfg(sess, "no traffic pool roce memory percent", "no traffic pool roce type lossless") == ["", ""]
    assert json.loads((tmp_path / "onyx.json").read_text())["buffer_pools"]["roce"] == {
        "type": "lossy",
        "switch_priorities": [3],
        "memory_percent": None,
    }
    # saved and replayed
    assert _cfg(sess, "traffic pool roce type lossless", "configuration write") == ["", ""]
    again = OnyxSwitch("leaf-onyx", sw.ports, tmp_path / "onyx", None)
    assert again.cfg["pools"] == sw.cfg["pools"]
    assert _cfg(sess, "no traffic pool bulk", "no traffic pool roce force") == ["", ""]
    assert json.loads((tmp_path / "onyx.json").read_text())["buffer_pools"] == {}
    assert "traffic pool" not in sw.running_config()
    # errors
    bad = _cfg(
        sess,
        "traffic pool roce type lossful",
        "traffic pool roce map switch-priority 8",
        "traffic pool roce memory percent 120",
        "traffic pool roce map",
        "no traffic pool nopool",
    )
    assert bad[0].startswith('% Unrecognized command "lossful".')
    assert bad[1].startswith('% Unrecognized command "8".')
    assert bad[2].startswith('% Unrecognized command "120".')
    assert bad[3] == '% Incomplete command.\nType "?" for help.\n'
    assert bad[4] == "% Traffic pool nopool does not exist\n"
    assert sw.cfg["pools"] == {}


def _nvue(tmp_path):
    sw = NvueSwitch("leaf-cumulus", [f"swp{n}" for n in range(1, 5)], tmp_path / "nv", tmp_path / "nv.json")
    return sw, NvueSession(sw)


def test_nvue_bw_percent_is_a_leaf(tmp_path):
    sw, sess = _nvue(tmp_path)
    for cmd in (
        "nv set qos egress-scheduler default-global traffic-class 3 mode dwrr",
        "nv set qos egress-scheduler default-global traffic-class 3 bw-percent 50",
        "nv set qos egress-scheduler default-global traffic-class 0 bw-percent 50",
        "nv config apply -y",
    ):
        assert sess.handle(cmd)[0] in ("", f"applied [rev_id: {sw.rev}]\n")
    tc = sw.applied["qos"]["egress-scheduler"]["default-global"]["traffic-class"]
    assert tc == {"3": {"mode": "dwrr", "bw-percent": 50}, "0": {"bw-percent": 50}}
    shown = json.loads(sess.handle("nv show qos egress-scheduler default-global traffic-class 3 -o json")[0])
    assert shown == {"mode": "dwrr", "bw-percent": 50}
    facts = nvue_facts(sw.applied["qos"], {})
    assert facts[("ets_bw", 3)] == 50 and facts[("ets_mode", 3)] == "dwrr"
    # a new value replaces the leaf (no second key appears)
    sess.handle("nv set qos egress-scheduler default-global traffic-class 3 bw-percent 40")
    assert sw.pending["qos"]["egress-scheduler"]["default-global"]["traffic-class"]["3"]["bw-percent"] == 40
    out = sess.handle("nv set qos egress-scheduler default-global traffic-class 3 bw-percent 150")[0]
    assert out.startswith("Error: Invalid config") and "bw-percent: '150'" in out
    sess.handle("nv unset qos egress-scheduler default-global traffic-class 3 bw-percent")
    assert sw.pending["qos"]["egress-scheduler"]["default-global"]["traffic-class"]["3"] == {"mode": "dwrr"}


def test_nvue_pfc_switch_priority_is_a_set(tmp_path):
    sw, sess = _nvue(tmp_path)
    sess.handle("nv set qos roce mode lossless")
    sess.handle("nv set qos pfc default-global switch-priority 3")
    sess.handle("nv set qos pfc default-global switch-priority 4")  # adds a member, keeps 3
    pfc = sw.pending["qos"]["pfc"]["default-global"]
    assert pfc["switch-priority"] == {"3": {}, "4": {}}
    assert sw.roce_view(sw.pending)["pfc"] == [3, 4]
    sess.handle("nv unset qos pfc default-global switch-priority 3")  # only that member goes
    assert pfc["switch-priority"] == {"4": {}}
    assert sw.roce_view(sw.pending)["pfc"] == [4]
    diff = parse_config_diff(sess.handle("nv config diff")[0])
    assert diff.set["qos"]["pfc"]["default-global"]["switch-priority"] == {"4": {}}
    sess.handle("nv config apply -y")
    assert json.loads((tmp_path / "nv.json").read_text())["ports"]["swp1"]["pfc"] == [0, 0, 0, 0, 1, 0, 0, 0]
    shown = json.loads(sess.handle("nv show qos pfc default-global -o json")[0])
    assert shown == {"switch-priority": {"4": {}}}
    assert sess.handle("nv config show -o commands")[0].count("switch-priority 4\n") == 1
    sess.handle("nv set qos pfc default-global switch-priority 0,2-3")
    assert set(sw.pending["qos"]["pfc"]["default-global"]["switch-priority"]) == {"0", "2", "3", "4"}
    for sp in ("0", "2", "3", "4"):
        sess.handle(f"nv unset qos pfc default-global switch-priority {sp}")
    assert "switch-priority" not in sw.pending["qos"]["pfc"]["default-global"]  # back to roce's default
    assert sw.roce_view(sw.pending)["pfc"] == [3]
    # elsewhere switch-priority stays a leaf: the DSCP map
    sess.handle("nv set qos mapping default-global dscp 26 switch-priority 3")
    sess.handle("nv set qos mapping default-global dscp 26 switch-priority 5")
    assert sw.pending["qos"]["mapping"]["default-global"]["dscp"]["26"] == {"switch-priority": "5"}


def test_dropped_session_engines_close(tmp_path):
    _sw, sess = _onyx(tmp_path, fabric=False)
    (tmp_path / "onyx" / "faults.json").write_text(json.dumps({"drop_after_commands": 1}))
    assert sess.handle("hostname x") == ("", True)
    assert sess.closed and sess.handle("show version") == ("", True)
    _nsw, nsess = _nvue(tmp_path)
    (tmp_path / "nv" / "faults.json").write_text(json.dumps({"drop_after_commands": 1}))
    assert nsess.handle("nv set qos roce") == ("", True)
    assert nsess.closed and nsess.handle("nv show qos roce") == ("", True)


def test_onyx_drop_closes_the_connection_netmiko_view(onyx):
    """What netmiko raises when the switch drops the session (as docs/lab-switches.md describes)."""
    onyx.state.mkdir(exist_ok=True)
    (onyx.state / "faults.json").write_text(json.dumps({"drop_after_commands": 1}))
    c = onyx.connect("mellanox_mlnxos", read_timeout_override=2)
    c.enable()
    assert c.is_alive()
    t0 = time.monotonic()
    with pytest.raises(ReadTimeout, match="Pattern not detected"):
        c.send_config_set(["dcb priority-flow-control enable force", "roce lossless"])
    assert time.monotonic() - t0 < 10  # bounded by read_timeout, not a hang
    assert not c.is_alive()  # the transport saw the connection end
    with pytest.raises(OSError, match="Socket is closed"):
        c.send_command("show version")
    assert onyx.switch.cfg["pfc_enabled"] and onyx.switch.cfg["roce"] is None
    c.disconnect()
    c = onyx.connect("mellanox_mlnxos")  # fires once per arming: a new session works
    c.enable()
    assert "Onyx" in c.send_command("show version")
    c.disconnect()


def test_cumulus_drop_closes_the_connection_netmiko_view(cumulus):
    cumulus.state.mkdir(exist_ok=True)
    (cumulus.state / "faults.json").write_text(json.dumps({"drop_after_commands": 1}))
    c = cumulus.connect("cumulus_linux", read_timeout_override=2)
    with pytest.raises(ReadTimeout):
        c.send_command("nv set qos roce mode lossless")
    assert not c.is_alive()
    with pytest.raises(OSError, match="Socket is closed"):
        c.send_command("nv config diff")
    assert cumulus.switch.pending["qos"]["roce"]["mode"] == "lossless"  # ran, then the session went


def _slow_onyx(monkeypatch, seconds: float) -> None:
    """Each Onyx command line takes SECONDS: a busy switch, or a busy machine under the emulator."""
    handle = OnyxSession.handle

    def slow(self, line):
        time.sleep(seconds)
        return handle(self, line)

    monkeypatch.setattr(OnyxSession, "handle", slow)


def test_onyx_typeahead_is_echoed_when_the_cli_reads_it(onyx, monkeypatch):
    """Lines typed while the CLI is busy appear after its prompt, each on its own line (a raw-mode CLI
    echoes what it reads); CR, LF and CR LF each end one line. Echoed on arrival, the RETURNs ran ahead
    and the prompts came glued on one line, which netmiko's find_prompt (it sends RETURN again while
    the prompt is slow, then takes the last line) took for the prompt: CI saw save_config's next
    command wait for that line until ReadTimeout."""
    import paramiko

    _slow_onyx(monkeypatch, 0.2)
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect("127.0.0.1", port=onyx.port, username="admin", password=PASSWORD,
                   look_for_keys=False, allow_agent=False)
    try:
        chan = client.invoke_shell(width=511)
        chan.settimeout(10)
        prompt = "leaf-onyx [standalone: master] > "
        out = ""
        while prompt not in out:
            out += chan.recv(65536).decode()
        chan.sendall(b"\n\n\nshow clock\rshow clock\r\nshow clock\n")
        out = ""
        while out.count(prompt) < 6:
            out += chan.recv(65536).decode()
    finally:
        client.close()
    lines = out.split("\r\n")
    assert lines[:4] == ["", prompt, prompt, prompt + "show clock"], lines
    assert prompt + prompt.strip() not in out  # no prompts glued on one line
    assert out.count(prompt + "show clock") == 3 and out.count(prompt) == 6, out  # CR LF is one line end

