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
from netmiko.exceptions import ConfigInvalidException, NetmikoAuthenticationException

from fabricops.lab.switchd.server import serve
from fabricops.parsers.nvue import parse_config_diff, parse_qos_roce
from fabricops.parsers.onyx import parse_ecn, parse_pfc, parse_qos_trust, parse_running_config

PASSWORD = "lab-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A switch server on its own event-loop thread; restart keeps the state dir."""

    def __init__(self, tmp_path, os_name, ports):
        self.tmp, self.os_name, self.ports = tmp_path, os_name, ports
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
            ),
            self.loop,
        )
        self.acceptor = fut.result(10)
        self.switch = self.acceptor._fabricops_switch

    def stop(self):
        async def _close():
            ticker = getattr(self.acceptor, "_fabricops_ticker", None)
            if ticker:
                ticker.cancel()
            self.acceptor.close()
            await self.acceptor.wait_closed()

        asyncio.run_coroutine_threadsafe(_close(), self.loop).result(10)

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


def test_cumulus_save_restart_and_errors(cumulus):
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
