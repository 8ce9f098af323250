"""The platform registry: every OS spelling to one platform, and what each platform owns."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from fabricops.roce import resource
from fabricops.roce.platforms import OS_NAMES, platform, switch_platform
from fabricops.roce.resource import compute
from fabricops.roce.switchspec import SwitchError, normalize_os, switch_spec, want_facts
from fabricops.switch import knobs, transport

ROOT = Path(__file__).parents[3]


@pytest.mark.parametrize("spelling", sorted(OS_NAMES))
def test_every_os_spelling_maps_to_one_platform(spelling):
    plat = platform(spelling)
    assert plat.name == OS_NAMES[spelling] == normalize_os(spelling)
    assert platform(spelling.upper()) is plat  # one object per OS, any case
    assert plat.netmiko_device_type == transport.NETMIKO_DEVICE_TYPES[plat.name]


def test_host_platform_and_unknown_names():
    host = platform("host")
    assert host.name == "host"
    knobs_ = host.knobs("eth0", "mlx5_0", 1, {"traffic_class": 106, "cnp_priority": 6})
    assert {k.name: k.desired for k in knobs_} == {"cnp_priority": "6", "traffic_class": "106"}
    assert host.verify("eth0", knobs_, {"traffic_class": "104", "cnp_priority": "6"}) == [
        "eth0: traffic_class is 104, want 106"
    ]
    assert host.metric("ecn_np[3]") == "fabricops_roce_ecn_marked_packets_total"
    with pytest.raises(SwitchError, match="'ios' is not supported; set fabricops_switch_os"):
        platform("ios")
    with pytest.raises(SwitchError, match="not supported"):
        switch_platform("host")  # roce_switch drives switches only


def test_knob_tables_live_in_the_platforms_and_the_machinery_knows_none():
    """switch.knobs is below the platforms (issue 39 point 2): no table, no re-export of one."""
    from fabricops.roce.platforms import nvue, onyx

    assert onyx.ONYX_KNOBS is platform("onyx").knobs and nvue.NVUE_KNOBS is platform("nvue").knobs
    for name in ("ONYX_KNOBS", "NVUE_KNOBS", "onyx_facts", "nvue_facts", "onyx_knob", "nvue_knob"):
        assert not hasattr(knobs, name), name


def test_access_knows_the_same_oses_as_the_platforms():
    """The OS table access and transports use (switch.oses) is the one the registry keys on."""
    from fabricops.switch import oses

    assert OS_NAMES is oses.OS_NAMES
    assert {platform(o).name for o in oses.SWITCH_OS} == set(oses.SWITCH_OS)
    assert {o for o in oses.SWITCH_OS if platform(o).rest_api} == oses.REST_API_OS


def test_no_os_branching_outside_the_platforms():
    """issue 16: `if os_name == "onyx"` lives in the platform classes only."""
    out = subprocess.run(
        ["grep", "-rnE", r'(os_name|\.os) [=!]= "(onyx|cumulus)"|[=!]= "onyx"|[=!]= "cumulus"',
         "src", "plugins", "--include=*.py"],
        cwd=ROOT, capture_output=True, text=True,
    ).stdout.splitlines()
    outside = [ln for ln in out if "/lab/" not in ln and "src/fabricops/roce/platforms/" not in ln]
    assert outside == []


@pytest.mark.parametrize(
    ("os_name", "raw", "want"),
    [
        ("onyx", ["ethernet 1/2", "1/1", "Eth1/10", "eth1/2"], ["Eth1/1", "Eth1/2", "Eth1/10"]),
        ("cumulus", ["swp10", "swp2", "swp1s0", "swp2"], ["swp1s0", "swp2", "swp10"]),
    ],
)
def test_port_naming_is_the_platforms(os_name, raw, want):
    assert platform(os_name).normalize_ports(raw) == want
    with pytest.raises(SwitchError, match=r"is not an? (Onyx Ethernet|Cumulus switch) port"):
        platform(os_name).normalize_ports(["swp1" if os_name == "onyx" else "Eth1/1"])


def test_port_ranges_render_through_the_platform():
    spec = switch_spec("onyx", {}, ["Eth1/1", "Eth1/2", "Eth1/4"])
    lines = compute("rendered", want_facts(spec), {}, "onyx")
    assert "interface ethernet 1/1-1/2 qos trust L3" in lines
    assert "interface ethernet 1/4 qos trust L3" in lines
    spec = switch_spec("cumulus", {}, ["swp1", "swp2", "swp4", "swp5s1"])
    lines = compute("rendered", want_facts(spec), {}, "cumulus")
    assert "nv set interface swp1-2,swp4,swp5s1 qos pfc-watchdog" in lines


def _strict(rack, log):
    """An Onyx session (conftest's engine connection) that refuses every show in standard (``>``)
    mode, as the Onyx manual's restricted standard mode does."""
    base = type(rack.connect())

    class StrictOnyx(base):
        def send_command(self, command, **kw):
            if command.startswith("show ") and self.session.mode == "user":
                return "% Unrecognized command \"show\".\n"
            return super().send_command(command, **kw)

    return StrictOnyx(rack.switch, "onyx", log)


class _NoEnable:
    """A transport without netmiko's enable(): the read must send `enable` itself."""

    def __init__(self, conn):
        self.conn, self.sent = conn, []

    def send_command(self, command, **kw):
        self.sent.append(command)
        return self.conn.send_command(command, **kw)


def test_onyx_read_enters_enable_mode_before_any_show(onyx_rack):
    from fabricops.roce.runner import run

    run(switch=onyx_rack.switch.name, os_name="onyx", state="merged", roce={}, ports=["Eth1/1"],
        connector=onyx_rack.connect)
    conn = _strict(onyx_rack, onyx_rack.log)
    assert conn.session.mode == "user"
    data = resource.get_roce_data(conn, "onyx", ["Eth1/1"])
    assert conn.session.mode == "enable"
    assert "dcb priority-flow-control enable" in data["running-config"]
    assert not any(v.startswith("%") for v in data.values())
    # already in `#`: reading again works and sends no second enable through netmiko's enable()
    onyx_rack.log.clear()
    resource.get_roce_data(conn, "onyx", ["Eth1/1"])
    assert onyx_rack.log[0] == "show running-config"
    bare = _NoEnable(_strict(onyx_rack, []))
    resource.get_roce_data(bare, "onyx", ["Eth1/1"])
    assert bare.sent[0] == "enable" and all(re.match("show ", c) for c in bare.sent[1:])


def test_nvue_read_sends_no_enable(nvue_rack):
    conn = _NoEnable(nvue_rack.connect())
    resource.get_roce_data(conn, "cumulus", ["swp1"])
    assert conn.sent[0].startswith("nv show") and "enable" not in conn.sent


@pytest.mark.parametrize("os_name", ["onyx", "cumulus"])
def test_user_shape_of_an_empty_switch_says_nothing_is_configured(os_name):
    shape = platform(os_name).user_shape({})
    assert shape["roce"] == {} and shape["ports"] == [] and shape["pfc_watchdog"] is False
    assert "notes" not in shape


@pytest.mark.parametrize("os_name", ["onyx", "cumulus"])
def test_user_shape_is_the_inverse_of_want_facts(os_name):
    ports = ["Eth1/1", "Eth1/3"] if os_name == "onyx" else ["swp1", "swp3"]
    roce = {"lossless_priority": 5, "dscp": 40, "cnp_priority": 1, "cnp_dscp": 8,
            "ecn": {"min_kb": 300, "max_kb": 900, "probability": 40}}
    spec = switch_spec(os_name, roce, ports, ets_lossless_percent=70, pfc_watchdog=False)
    facts = want_facts(spec)
    shape = platform(os_name).user_shape(facts)
    assert shape["roce"]["lossless_priority"] == 5 and shape["roce"]["cnp_priority"] == 1
    assert shape["ets_lossless_percent"] == 70 and shape["pfc_watchdog"] is False
    if os_name == "onyx":
        assert shape["ports"] == ports
        ecn = {**shape["roce"]["ecn"], "probability": 40}  # Onyx holds no DSCP nor probability
        back = {**shape["roce"], "dscp": 40, "cnp_dscp": 8, "ecn": ecn}
    else:
        assert shape["ports"] == []  # NVUE's profiles are global; only the watchdog is per port
        assert shape["roce"]["dscp"] == 40 and shape["roce"]["cnp_dscp"] == 8
        back, ports = shape["roce"], []
    again = switch_spec(os_name, back, ports, ets_lossless_percent=shape["ets_lossless_percent"],
                        pfc_watchdog=shape["pfc_watchdog"], buffer_pool=shape.get("buffer_pool", "default"))
    assert want_facts(again) == facts


def test_user_shape_names_what_one_definition_cannot_say():
    facts = want_facts(switch_spec("cumulus", {}, ["swp1"]))
    facts[("pfc_priority", 4)] = True
    shape = platform("cumulus").user_shape(facts)
    assert "lossless_priority" not in shape["roce"]
    assert shape["notes"] == ["PFC is on for priorities [3, 4]; fabricops_roce has one lossless priority"]
    facts = want_facts(switch_spec("onyx", {}, ["Eth1/1", "Eth1/2"]))
    del facts[("port_ecn", "Eth1/2", 3)]
    shape = platform("onyx").user_shape(facts)
    assert "ecn" not in shape["roce"]
    assert shape["notes"] == [
        "the ports differ in ECN on traffic class 3 (Eth1/1: (150, 1500), Eth1/2: none)"
    ]
