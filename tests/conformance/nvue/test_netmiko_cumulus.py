"""netmiko's own ``cumulus_linux`` driver, through its default methods, against the emulated NVUE switch.

Nothing here is fabricops code: ConnectHandler's session preparation, ``send_command``,
``enable()`` / ``config_mode()`` (both send ``sudo -s`` and wait for ``ssword`` or ``#``),
``send_config_set`` (enters config mode, sends, exits), ``save_config`` (``nv config apply``),
``exit_enable_mode``, ``send_command_timing`` and ``disconnect``. Each call is counted in CALLS so the
closing note can say how many real-client calls pass."""

from __future__ import annotations

import json

import pytest
from netmiko import ConnectHandler

CALLS: list[str] = []


def _connect(lab, **kw):
    conn = ConnectHandler(
        device_type="cumulus_linux",
        host="127.0.0.1",
        port=lab.port,
        username="cumulus",
        password=lab.password,
        secret=kw.pop("secret", lab.password),
        fast_cli=True,
        **kw,
    )
    CALLS.append("ConnectHandler")
    return conn


def test_session_preparation_and_reads(nvue_lab):
    c = _connect(nvue_lab)
    assert c.find_prompt() == "cumulus@leaf-nv:mgmt:~$"
    CALLS.append("find_prompt")
    # a fresh switch: empty shapes, no "Error:"
    out = c.send_command("nv show interface")
    assert "Error" not in out and "swp1" in out
    doc = json.loads(c.send_command("nv show interface -o json"))
    # link state is a one-key set, as a real switch prints it (GET /nvue_v1/interface in the 5.12 NVUE
    # API guide: tests/fixtures/nvue-interface-link/cl512-api-interface.json)
    assert set(doc) == {"swp1", "swp2", "swp3", "swp4"} and doc["swp1"]["link"]["state"] == {"up": {}}
    assert json.loads(c.send_command("nv show interface --applied -o json")) == {}
    assert json.loads(c.send_command("nv show qos pfc -o json")) == {}
    assert json.loads(c.send_command("nv config diff -o json")) == []
    # abbreviations: unique prefixes of verbs and fixed names
    assert json.loads(c.send_command("nv sh q ro -o json"))["enable"] == "off"
    CALLS.extend(["send_command"] * 6)
    c.disconnect()
    CALLS.append("disconnect")


def test_enable_and_config_mode_via_sudo(nvue_lab):
    c = _connect(nvue_lab)
    assert not c.check_enable_mode()
    c.enable()  # sudo -s, "[sudo] password for cumulus:", the secret, then the root '#' prompt
    assert c.check_enable_mode() and c.base_prompt.startswith("root@leaf-nv")
    assert c.send_command("whoami").strip() == "root"
    c.exit_enable_mode()
    assert not c.check_enable_mode() and c.find_prompt() == "cumulus@leaf-nv:mgmt:~$"
    c.config_mode()
    assert c.check_config_mode()
    c.exit_config_mode()
    assert not c.check_config_mode()
    CALLS.extend(["enable", "send_command", "exit_enable_mode", "config_mode", "exit_config_mode"])
    c.disconnect()


def test_send_config_set_then_save_config_applies(nvue_lab):
    c = _connect(nvue_lab)
    out = c.send_config_set(
        [
            "nv set qos roce mode lossless",
            "nv set qos pfc default-global switch-priority 3",
            "nv set qos mapping default-global trust l3",
        ]
    )
    assert "Error" not in out
    assert not c.check_config_mode()  # send_config_set left the root shell again
    diff = json.loads(c.send_command("nv config diff -o json"))
    assert diff[0]["set"]["qos"]["roce"]["mode"] == "lossless"
    out = c.save_config()  # netmiko's default: `nv config apply` (no -y; no warning, so no prompt)
    assert "applied [rev_id:" in out
    assert nvue_lab.fabric_state()["ports"]["swp1"]["pfc"][3] == 1
    saved = nvue_lab.switch.startup() == nvue_lab.switch.applied
    assert saved is (nvue_lab.switch.release == "5.14")  # auto-save from Cumulus Linux 5.9
    history = json.loads(c.send_command("nv config history -o json"))
    assert history[max(history, key=int)]["state"] == ("applied_and_saved" if saved else "applied")
    CALLS.extend(["send_config_set", "send_command", "save_config", "send_command"])
    c.disconnect()


def test_strict_object_model_refuses_what_real_nvue_refuses(nvue_lab):
    c = _connect(nvue_lab)
    for cmd, text in [
        ("nv set qos bogus thing 1", "Error: Unknown command: bogus"),
        ("nv set qos roce mode fast", "is not one of"),
        ("nv set qos egress-scheduler default-global traffic-class 9 bw-percent 50", "Error: Invalid config"),
        ("nv set interface swp1 link mtu 20000", "is not an integer in 552-9216"),
        ("nv set router adaptive-routing enable maybe", "is not one of"),
    ]:
        assert text in c.send_command(cmd), cmd
        CALLS.append("send_command")
    assert json.loads(c.send_command("nv config diff -o json")) == []  # nothing was staged
    CALLS.append("send_command")
    c.disconnect()


def test_apply_prompt_without_yes(nvue_lab):
    c = _connect(nvue_lab)
    c.send_command("nv set interface eth0 link mtu 1500")
    out = c.send_command_timing("nv config apply")
    assert "Are you sure? [y/N]" in out and "management interface config is changed" in out
    out = c.send_command_timing("y")
    assert "applied [rev_id:" in out
    assert c.find_prompt() == "cumulus@leaf-nv:mgmt:~$"
    CALLS.extend(["send_command", "send_command_timing", "send_command_timing", "find_prompt"])
    c.disconnect()


def test_wrong_sudo_password_is_refused_like_sudo(nvue_lab):
    c = _connect(nvue_lab, secret="wrong", read_timeout_override=3)
    with pytest.raises(ValueError, match="failed to elevate privileges"):
        c.enable()
    CALLS.append("enable (refused, as a real host refuses a wrong sudo password)")
    c.disconnect()
