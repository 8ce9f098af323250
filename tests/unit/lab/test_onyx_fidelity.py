"""The emulated Onyx CLI against NVIDIA's manual and real captures (tests/fixtures/onyx-show/), per
release; in-process (the same engine the SSH server runs)."""

from __future__ import annotations

import json
import re

import pytest
from captures import read_fixture

from fabricops.parsers.onyx import parse_ecn, parse_pfc, parse_qos_trust, parse_running_config
from fabricops_lab.switchd.onyx import OnyxSession, OnyxSwitch

UNREC = '% Unrecognized command "{}".\nType "?" for help.\n'


def _switch(tmp_path, release=None):
    return OnyxSwitch("leaf-onyx", [f"Eth1/{n}" for n in range(1, 5)], tmp_path / "st", None, release=release)


def _session(sw, *lines, paging=False):
    sess = OnyxSession(sw)
    if not paging:
        assert sess.handle("no cli session paging enable") == ("", False)
    for ln in lines:
        out, _ = sess.handle(ln)
        assert out == "", (ln, out)
    return sess


def _out(sess, line):
    return sess.handle(line)[0]


def _json(sess, line):
    return json.loads(_out(sess, line))


def _shape(doc):
    """The key structure of a JSON document (values dropped): what a client indexes."""
    if isinstance(doc, dict):
        return {k: _shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_shape(v) for v in doc]
    return type(doc).__name__


def test_standard_mode_is_restricted(tmp_path):
    sess = _session(_switch(tmp_path))
    assert sess.prompt().endswith("] > ")
    # the identity shows real clients read at login work in standard mode
    assert "Product release:   3.10.4504" in _out(sess, "show version")
    assert _out(sess, "show hosts | include Hostname") == "Hostname: leaf-onyx\n"
    # running-config and the RoCE shows need enable; configuration mode too
    assert _out(sess, "show running-config") == UNREC.format("running-config")
    assert _out(sess, "show dcb priority-flow-control | json-print") == UNREC.format("dcb")
    assert _out(sess, "configure terminal") == UNREC.format("configure")
    assert _out(sess, "enable") == "" and sess.prompt().endswith("] # ")
    assert "## Running database" in _out(sess, "show running-config")


def test_config_mode_takes_enable_commands_and_no_configure(tmp_path):
    sw = _switch(tmp_path)
    sess = _session(sw, "enable", "configure terminal", "interface ethernet 1/1")
    assert "(config interface ethernet 1/1) #" in sess.prompt()
    assert parse_pfc(_out(sess, "show dcb priority-flow-control | json-print")).enabled is False
    assert _out(sess, "configure terminal") == ""  # an enable-mode command: accepted, mode unchanged
    assert "(config interface" in sess.prompt()
    assert _out(sess, "no configure") == "" and sess.mode == "enable"
    assert _out(sess, "qos trust L3") == UNREC.format("qos")  # not a command outside config mode
    assert _out(sess, "configure terminal") == "" and sess.mode == "config"
    assert _out(sess, "configuration write") == "" and sw.saved_path.exists()
    assert _out(sess, "exit") == "" and sess.mode == "enable"
    assert _out(sess, "configuration write") == UNREC.format("configuration")  # config mode only


def test_unique_prefix_abbreviations(tmp_path):
    sw = _switch(tmp_path)
    sess = _session(sw, "ena", "conf t", "int eth 1/2", "mtu 9216 force", "exit")
    assert sw.cfg["ports"]["Eth1/2"]["mtu"] == 9216
    assert "interface ethernet 1/2 mtu 9216 force" in _out(sess, "sh run")
    assert _out(sess, "sh run int eth 1/2") == "interface ethernet 1/2 mtu 9216 force\n"
    assert _out(sess, "d") == '% Ambiguous command "d".\nType "?" for help.\n'  # dcb / disable
    assert _out(sess, "no conf") == '% Ambiguous command "conf".\nType "?" for help.\n'  # configuration
    assert _out(sess, "no configure") == "" and sess.mode == "enable"
    assert _out(sess, "c") == '% Ambiguous command "c".\nType "?" for help.\n'  # cli / configure


def test_pipes_on_every_show(tmp_path):
    sess = _session(_switch(tmp_path), "enable")
    shows = [
        "show running-config", "show version", "show hosts", "show dcb priority-flow-control",
        "show dcb ets interface ethernet 1/1", "show interfaces ethernet", "show interfaces ethernet 1/1",
        "show interfaces ethernet 1/1 congestion-control", "show qos", "show qos interface ethernet 1/1",
        "show traffic pool", "show roce", "show module", "show running-config interface ethernet 1/1",
    ]
    def steady(text):  # show version's Uptime ticks (in ms) between the three commands, as on a switch
        return re.sub(r"(?m)^(Uptime:\s+).*$", r"\1(ticks)", text)

    for show in shows:
        full = steady(_out(sess, show))
        assert not full.startswith("%"), show
        inc = steady(_out(sess, f"{show} | include e"))
        exc = steady(_out(sess, f"{show} | exclude e"))
        assert sorted(inc.splitlines() + exc.splitlines()) == sorted(full.splitlines()), show
        assert all("e" in ln for ln in inc.splitlines()) and not any("e" in ln for ln in exc.splitlines())
    for show in shows[1:]:
        if show in {"show hosts", "show roce", "show running-config interface ethernet 1/1"}:
            continue  # text only
        json.loads(_out(sess, f"{show} | json-print"))
    assert _out(sess, "show version | bogus") == UNREC.format("bogus")
    assert _out(sess, "show version | json-print | include Product").count("Product") == 3


def test_paging_on_by_default_off_with_the_real_commands(tmp_path):
    sw = _switch(tmp_path)
    sess = _session(sw, "enable", paging=True)
    out = _out(sess, "show qos interface ethernet 1/1-1/4")
    assert out.endswith("lines 1-23 ") and len(out.splitlines()) == 24 and sess.prompt() == ""
    rest = _out(sess, " ")  # any key line: the rest, then the prompt again
    assert rest.count("Trust mode") + out.count("Trust mode") == 4 and sess.prompt().endswith("# ")
    _out(sess, "show qos interface ethernet 1/1-1/4")
    assert _out(sess, "q") == "" and sess.prompt().endswith("# ")  # q quits the pager
    assert _out(sess, "terminal length 0") == ""
    assert _out(sess, "show qos interface ethernet 1/1-1/4").count("Trust mode") == 4
    sess2 = _session(sw, "enable")  # `no cli session paging enable`, as netmiko / Ansible send it
    assert _out(sess2, "show qos interface ethernet 1/1-1/4").count("Trust mode") == 4


def test_show_version_matches_the_capture_fields(tmp_path):
    real = json.loads(read_fixture("onyx-show", "show-version-3.6.5000.json"))
    for release, name in (("3.6.5000", "MLNX-OS"), ("3.10.4504", "Onyx")):
        sess = _session(_switch(tmp_path / release, release))
        doc = _json(sess, "show version | json-print")
        assert set(doc) == set(real) and len(doc) == 17
        assert doc["Product release"] == release and doc["Product name"] == name
        assert doc["Version summary"].split()[1] == release
        text = _out(sess, "show version")
        real_text = read_fixture("onyx-show", "show-version-3.6.5000.txt")
        keys = [ln.split(":")[0] for ln in text.splitlines()]
        assert keys == [ln.split(":")[0] for ln in real_text.splitlines()]
    legacy = _json(_session(_switch(tmp_path / "x", "3.6.5000")), "show version | json-print")
    for k in ("Product name", "Product release", "Build ID", "Build date", "Target arch", "Built by",
              "Version summary", "Product model"):
        assert legacy[k] == real[k], k


def test_interfaces_json_per_release_and_mtu_default(tmp_path):
    real_old = json.loads(read_fixture("onyx-show", "show-interfaces-3.6.5000.json"))[0]
    sw_new, sw_old = _switch(tmp_path / "a"), _switch(tmp_path / "b", "3.6.5000")
    new = _json(_session(sw_new, "enable"), "show interfaces ethernet | json-print")
    old = _json(_session(sw_old, "enable"), "show interfaces ethernet | json-print")
    # from 3.6.6000: a list of one-key dicts; before: flat blocks with "header" (the capture)
    assert [list(d) for d in new] == [["Eth1/1"], ["Eth1/2"], ["Eth1/3"], ["Eth1/4"]]
    assert _shape(new[0]["Eth1/1"][0]) == _shape({k: v for k, v in real_old.items() if k != "header"})
    assert _shape(old[0]) == _shape(real_old) and old[0]["header"] == "Eth1/1"
    assert new[0]["Eth1/1"][0]["MTU"] == real_old["MTU"] == "1500 bytes(Maximum packet size 1522 bytes)"
    sess = _session(sw_new, "enable", "configure terminal")
    assert _out(sess, "interface ethernet 1/1 mtu 1499 force") == UNREC.format("1499")
    assert _out(sess, "interface ethernet 1/1 mtu 9217 force") == UNREC.format("9217")
    assert _out(sess, "interface ethernet 1/1 mtu 9216 force") == ""
    assert _json(sess, "show interfaces ethernet 1/1 | json-print")[0]["Eth1/1"][0]["MTU"] == (
        "9216 bytes(Maximum packet size 9238 bytes)"
    )


def test_pfc_json_per_release(tmp_path):
    sw = _switch(tmp_path / "a")
    sess = _session(sw, "enable", "configure terminal", "dcb priority-flow-control enable force",
                    "dcb priority-flow-control priority 3 enable",
                    "interface ethernet 1/1 dcb priority-flow-control mode on force")
    doc = _json(sess, "show dcb priority-flow-control | json-print")
    assert len(doc) == 3 and doc[2]["Eth1/1"] == [{"PFC admin": "on", "PFC oper": "Enabled"}]
    rec = parse_pfc(json.dumps(doc))
    assert rec.enabled and rec.priorities_enabled == [3] and rec.interfaces["Eth1/1"].enabled
    old = _switch(tmp_path / "b", "3.6.5000")
    sess = _session(old, "enable", "configure terminal", "dcb priority-flow-control enable force",
                    "interface ethernet 1/1 dcb priority-flow-control mode on force")
    doc = _json(sess, "show dcb priority-flow-control | json-print")
    real = json.loads(read_fixture("onyx-show", "show-dcb-pfc-3.6.5000.json"))
    assert isinstance(doc, dict) and doc["Eth1/1"] == real["Eth1/1"]
    assert parse_pfc(json.dumps(doc)).interfaces["Eth1/1"].enabled


def test_qos_interface_equals_the_capture(tmp_path):
    sess = _session(_switch(tmp_path), "enable", "configure terminal",
                    "interface ethernet 1/1 qos trust both", "interface ethernet 1/1 qos rewrite pcp")
    doc = _json(sess, "show qos interface ethernet 1/1 | json-print")
    assert doc == json.loads(read_fixture("onyx-show", "show-qos-interface-ethernet.json"))
    assert parse_qos_trust(json.dumps(doc)).interfaces["Eth1/1"].trust == "both"
    assert "qos rewrite pcp" in _out(sess, "show running-config interface ethernet 1/1")


def test_relative_ecn_and_red_equal_the_capture(tmp_path):
    sess = _session(_switch(tmp_path), "enable", "configure terminal",
                    "interface ethernet 1/1 traffic-class 2 congestion-control red minimum-relative 9 "
                    "maximum-relative 90",
                    "interface ethernet 1/1 traffic-class 3 congestion-control ecn minimum-absolute 500 "
                    "maximum-absolute 1550")
    doc = _json(sess, "show interfaces ethernet 1/1 congestion-control | json-print")
    assert doc == json.loads(read_fixture("onyx-show", "show-congestion-control-relative.json"))
    tc2 = parse_ecn(json.dumps(doc)).traffic_classes[2]
    assert (tc2.mode, tc2.threshold_mode) == ("RED", "relative")
    assert (tc2.min_threshold, tc2.max_threshold) == (9, 90)
    bad = _out(sess, "interface ethernet 1/1 traffic-class 2 congestion-control ecn minimum-relative 9 "
                     "maximum-relative 101")
    assert bad == UNREC.format("101")
    rc = parse_running_config(_out(sess, "show running-config"))
    line = "traffic-class 2 congestion-control red minimum-relative 9 maximum-relative 90"
    assert rc.interface_has("Eth1/1", line)


def test_ets_and_traffic_pool_equal_the_captures(tmp_path):
    sess = _session(_switch(tmp_path), "enable", "configure terminal",
                    "interface ethernet 1/1 traffic-class 2 dcb ets strict",
                    "interface ethernet 1/1 traffic-class 3 dcb ets strict",
                    "traffic pool roce type lossless", "traffic pool roce memory percent 50.00",
                    "traffic pool roce map switch-priority 3")
    ets = _json(sess, "show dcb ets interface ethernet 1/1 | json-print")
    real = json.loads(read_fixture("onyx-show", "show-dcb-ets-interface.json"))
    assert _shape(ets) == _shape(real)
    got = {tc: (v[0]["S.Mode"], v[0]["W"]) for tc, v in ets[0]["Eth1/1"][2]["ETS per TC"][0].items()}
    want = {tc: (v[0]["S.Mode"], v[0]["W"]) for tc, v in real[0]["Eth1/1"][2]["ETS per TC"][0].items()}
    assert got == want  # the capture's defaults and its two strict TCs
    pool = _json(sess, "show traffic pool roce | json-print")
    assert pool == json.loads(read_fixture("onyx-show", "show-traffic-pool-roce.json"))
    assert _out(sess, "show traffic pool nope") == "% Traffic pool nope does not exist\n"
    module = json.loads(read_fixture("onyx-show", "show-module.json"))
    assert _json(sess, "show module | json-print") == module


def test_topology_release_field():
    import yaml

    from fabricops_lab import topology
    from fabricops_lab.switches import switchd_command

    def with_release(name, value):
        raw = yaml.safe_load(topology.DEFAULT_TOPOLOGY.read_text())
        for sw in raw["switches"]:
            if sw["name"] == name:
                sw["release"] = value
        return raw

    topo = topology.normalise(with_release("leaf-onyx", "3.6.5000"))
    sw = next(s for s in topo["switches"] if s["name"] == "leaf-onyx")
    assert sw["release"] == "3.6.5000"
    argv = switchd_command(sw, {"mgmt_ip": "10.0.0.1", "host_key": "k", "password_file": "p",
                                "state_dir": "s", "fabric_file": "f"})
    assert argv[-2:] == ["--release", "3.6.5000"]
    default = next(s for s in topology.load()["switches"] if s["name"] == "leaf-onyx")
    assert "release" not in default and "--release" not in switchd_command(default, {
        "mgmt_ip": "10.0.0.1", "host_key": "k", "password_file": "p", "state_dir": "s", "fabric_file": "f"})
    with pytest.raises(topology.TopologyError, match=r"release.*'9\.9\.9' is not an emulated Onyx release"):
        topology.normalise(with_release("leaf-onyx", "9.9.9"))
    cumulus = next(s["name"] for s in topo["switches"] if s["os"] == "cumulus")
    # an Onyx release on a Cumulus switch: not one of Cumulus' releases (5.4, 5.14)
    with pytest.raises(topology.TopologyError, match=r"release.*'3\.6\.5000' is not a release"):
        topology.normalise(with_release(cumulus, "3.6.5000"))


def test_unknown_release_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"unknown Onyx release '1\.2\.3'"):
        _switch(tmp_path, "1.2.3")
