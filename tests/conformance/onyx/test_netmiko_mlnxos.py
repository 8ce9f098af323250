"""netmiko's mellanox_mlnxos driver, through its default methods, against the emulated Onyx switch."""

from __future__ import annotations

import json

import pytest
from netmiko import ConnectHandler
from onyx_emulated import NAME, PASSWORD, OnyxUnderTest

CLIENT = "netmiko mellanox_mlnxos"


@pytest.fixture
def onyx(tmp_path):
    sw = OnyxUnderTest(tmp_path, None)  # the default release
    yield sw
    sw.close()


def _connect(sw):
    return ConnectHandler(
        device_type="mellanox_mlnxos", host="127.0.0.1", port=sw.port, username="admin",
        password=PASSWORD, ssh_strict=True, system_host_keys=False, alt_host_keys=True,
        alt_key_file=str(sw.known_hosts),
    )


def test_default_methods(onyx, client_calls):
    calls = 0
    c = _connect(onyx)  # session preparation: prompt, `terminal width`, `no cli session paging enable`
    calls += 1
    try:
        assert c.find_prompt() == f"{NAME} [standalone: master] >"
        assert not c.check_enable_mode()
        # standard mode: the restricted set (the identity shows); show running-config needs enable
        assert "Product release:   3.10.4504" in c.send_command("show version")
        assert c.send_command("show running-config").startswith('% Unrecognized command "running-config".')
        calls += 3
        c.enable()
        assert c.check_enable_mode()
        version = json.loads(c.send_command("show version | json-print"))
        assert len(version) == 17 and version["Product name"] == "Onyx"
        assert "## Running database" in c.send_command("sh run")  # abbreviation
        calls += 4
        out = c.send_config_set([
            "interface ethernet 1/1 qos trust L3",
            "interface ethernet 1/2",
            "mtu 9216 force",
            "exit",
            "dcb priority-flow-control enable force",
        ])
        assert "% " not in out, out
        assert not c.check_config_mode()  # send_config_set left config mode (exit_config_mode)
        calls += 1
        c.save_config()  # enable, config term, configuration write, exit
        calls += 1
        assert "interface ethernet 1/2 mtu 9216 force" in onyx.switch.saved_path.read_text()
        ifaces = json.loads(c.send_command("show interfaces ethernet 1/2 | json-print"))
        assert ifaces[0]["Eth1/2"][0]["MTU"] == "9216 bytes(Maximum packet size 9238 bytes)"
        lines = c.send_command("show running-config | include trust").splitlines()
        assert [ln.strip() for ln in lines if ln.strip()] == ["interface ethernet 1/1 qos trust L3"]
        calls += 2
        c.exit_enable_mode()
        assert c.find_prompt().endswith(">")
        calls += 2
    finally:
        c.disconnect()
    client_calls(CLIENT, calls)


def test_send_command_long_output_paged_only_when_paging_is_on(onyx, client_calls):
    """netmiko turns paging off at login, so a long show comes whole; with paging back on it stops
    after one page under the pager's prompt (what a client that forgot to disable paging would see)."""
    c = _connect(onyx)
    try:
        c.enable()
        full = c.send_command("show qos interface ethernet 1/1-1/4")
        assert full.count("Trust mode") == 4
        c.send_command("cli session paging enable")
        c.send_command("terminal length 10")
        paged = c.send_command_timing("show qos interface ethernet 1/1-1/4", read_timeout=5)
        assert "lines 1-9" in paged and paged.count("Trust mode") < 4
        c.send_command_timing("q", read_timeout=5)
        c.send_command("no cli session paging enable")
        assert c.send_command("show qos interface ethernet 1/1-1/4").count("Trust mode") == 4
    finally:
        c.disconnect()
    client_calls(CLIENT, 8)
