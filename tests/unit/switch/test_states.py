"""Resource states against the emulated switch engines, each with its idempotent twin."""

from __future__ import annotations

import pytest
from captures import read_fixture

from fabricops.errors import FabricopsError
from fabricops.roce.resource import apply_facts, compute
from fabricops.roce.runner import run
from fabricops.roce.switchspec import switch_spec, want_facts

ROCE = {"lossless_priority": 3, "dscp": 26}
ROCE4 = {"lossless_priority": 4, "dscp": 34, "ecn": {"min_kb": 200, "max_kb": 2000}}


def _ports(rack, n):
    if rack.os == "onyx":
        return [f"Eth1/{i}" for i in range(1, n + 1)]
    return [f"swp{i}" for i in range(1, n + 1)]


def _run(rack, **kw):
    kw.setdefault("roce", ROCE)
    kw.setdefault("ports", _ports(rack, 4))
    return run(switch=rack.switch.name, os_name=rack.os, connector=rack.connect, **kw)


@pytest.mark.parametrize("state", ["merged", "replaced", "overridden"])
def test_state_then_twin_sends_nothing(rack, state):
    first = _run(rack, state=state)
    assert first["changed"] is True and first["commands"]
    rack.log.clear()
    twin = _run(rack, state=state)
    assert twin["changed"] is False and twin["commands"] == []
    assert rack.config_lines() == []  # only show commands went out


def test_overridden_moves_the_class_and_clears_other_ports(rack):
    _run(rack, state="merged")
    res = _run(rack, state="overridden", roce=ROCE4, ports=_ports(rack, 2))
    assert res["changed"]
    if rack.os == "onyx":
        assert "no dcb priority-flow-control priority 3 enable" in res["commands"]
        assert "interface ethernet 1/3-1/4 no qos trust" in res["commands"]
        assert ("interface ethernet 1/1-1/2 traffic-class 4 congestion-control ecn minimum-absolute 200 "
                "maximum-absolute 2000") in res["commands"]
        rc = "\n".join(rack.state())
        assert "priority 3 enable" not in rc and "interface ethernet 1/1-1/2 qos trust L3" in rc
    else:
        assert "nv set qos pfc default-global switch-priority 4" in res["commands"]
        assert "nv unset interface swp3-4 qos pfc-watchdog" in res["commands"]
        assert rack.switch.roce_view(rack.switch.applied)["pfc"] == [4]
    rack.log.clear()
    assert _run(rack, state="overridden", roce=ROCE4, ports=_ports(rack, 2))["commands"] == []
    assert rack.config_lines() == []


def test_replaced_leaves_other_ports_alone(onyx_rack):
    _run(onyx_rack, state="merged", ports=["Eth1/1", "Eth1/2", "Eth1/3"])
    res = _run(onyx_rack, state="replaced", ports=["Eth1/1"], roce=ROCE)
    assert res["commands"] == []  # Eth1/2-3 are out of scope for replaced
    res = _run(onyx_rack, state="overridden", ports=["Eth1/1"])
    assert "interface ethernet 1/2-1/3 no qos trust" in res["commands"]


def test_deleted_then_twin(rack):
    _run(rack, state="merged")
    res = _run(rack, state="deleted")
    assert res["changed"] and all(("no " in c or "unset" in c) for c in res["commands"] if "ets" not in c)
    rack.log.clear()
    twin = _run(rack, state="deleted")
    assert twin["commands"] == [] and rack.config_lines() == []
    if rack.os == "cumulus":
        assert rack.switch.applied.get("qos", {}).get("roce") is None


def test_merged_keeps_foreign_settings(onyx_rack):
    conn = onyx_rack.connect()
    conn.enable()
    conn.send_config_set(["roce lossless", "interface ethernet 1/7 qos trust L2"])
    res = _run(onyx_rack, state="merged")
    assert not any("roce" in c or "1/7" in c for c in res["commands"])
    assert "roce lossless" in "\n".join(onyx_rack.state())
    res = _run(onyx_rack, state="overridden")
    assert "no roce" in res["commands"] and "interface ethernet 1/7 no qos trust" in res["commands"]


def test_check_mode_sends_only_show_commands(rack):
    res = _run(rack, check_mode=True)
    assert res["changed"] and res["commands"]
    assert rack.config_lines() == []
    assert "+" not in res["diff"]["before"] and res["diff"]["after"].count("\n") >= len(res["commands"])
    assert res["after"] != res["before"]


def test_gathered_and_rendered(rack):
    _run(rack, state="merged")
    got = _run(rack, state="gathered")
    # the raw per-knob facts are under `knobs` (the rest is the shape users write)
    assert got["commands"] == [] and got["gathered"]["knobs"] == got["before"]
    if rack.os == "onyx":
        assert got["gathered"]["knobs"]["global"]["pfc_priority"] == {"3": True}
        assert got["gathered"]["knobs"]["ports"]["Eth1/2"]["port_trust"] == "L3"
        assert got["operational"]["ports"]["Eth1/2"]["ecn"] == {"3": [150, 1500]}
    else:
        assert got["gathered"]["knobs"]["global"]["ecn_min"] == {"3": 150000}
        assert got["operational"]["pfc_priority"] == 3
    rendered = run(switch="x", os_name=rack.os, state="rendered", roce=ROCE, ports=_ports(rack, 2))
    assert rendered["rendered"] == rendered["commands"] and rendered["commands"]


def _written(got):
    """gathered -> the roce_switch arguments a user writes (roce, ports, options)."""
    g = got["gathered"]
    kw = {k: g[k] for k in ("roce", "ports", "pfc_watchdog", "ets_lossless_percent") if k in g}
    if "buffer_pool" in g:
        kw["buffer_pool"] = g["buffer_pool"]
    return kw


@pytest.mark.parametrize("roce", [ROCE, ROCE4], ids=["prio3", "prio4"])
def test_gathered_is_the_shape_users_write(rack, roce):
    """gathered returns fabricops_roce fields, ports and switch options (no internal knob keys), and
    merging what it returns sends nothing: it is the inverse of the desired facts."""
    _run(rack, state="merged", roce=roce, ets_lossless_percent=60)
    got = _run(rack, state="gathered")
    g = got["gathered"]
    assert "notes" not in g
    assert g["ports"] == _ports(rack, 4)
    assert g["pfc_watchdog"] is True and g["ets_lossless_percent"] == 60
    want = {"lossless_priority": roce["lossless_priority"], "trust": "dscp", "cnp_priority": 6}
    assert {k: g["roce"][k] for k in want} == want
    assert g["roce"]["ecn"]["min_kb"] == roce.get("ecn", {}).get("min_kb", 150)
    assert g["roce"]["ecn"]["max_kb"] == roce.get("ecn", {}).get("max_kb", 1500)
    assert not any(k in g for k in ("port_ecn", "sp_tc", "global")) and "port_ecn" not in g["roce"]
    if rack.os == "cumulus":
        assert g["roce"]["dscp"] == roce["dscp"] and g["roce"]["cnp_dscp"] == 48
        assert g["roce"]["ecn"]["probability"] == 100 and g["buffer_pool"] == "lossless"
    kw = _written(got)
    if rack.os == "onyx":  # Onyx holds no DSCP value (trust L3 maps DSCP d to priority d/8)
        assert "dscp" not in g["roce"]
        kw["roce"] = {**kw["roce"], "dscp": roce["dscp"]}
    rack.log.clear()
    again = _run(rack, state="merged", **kw)
    assert again["commands"] == [] and rack.config_lines() == []


def test_gathered_names_ports_that_differ(onyx_rack):
    _run(onyx_rack, state="merged")
    _run(onyx_rack, state="merged", ports=["Eth1/2"], ets_lossless_percent=70)
    g = _run(onyx_rack, state="gathered")["gathered"]
    assert "ets_lossless_percent" not in g
    assert any("ETS of traffic class 3" in n and "Eth1/2: wrr 70" in n for n in g["notes"])


def test_parsed_real_onyx_capture_and_nvue_config_show(nvue_rack):
    text = read_fixture("onyx-running-config", "ansible-onyx-config.txt")
    out = run(switch="sw", os_name="onyx", state="parsed", running_config=text)
    assert out["parsed"]["global"]["pfc"] is True
    assert set(out["parsed"]["ports"]) == {"Eth1/7", "Eth1/8", "Po1"}
    _run(nvue_rack, state="merged")
    shown = nvue_rack.connect().send_command("nv config show")
    parsed = run(switch="sw", os_name="cumulus", state="parsed", running_config=shown)
    assert parsed["parsed"]["global"]["pfc_priority"] == {"3": True}
    assert parsed["parsed"]["ports"]["swp4"] == {"port_pfc_wd": True}


@pytest.mark.parametrize("os_name", ["onyx", "cumulus"])
@pytest.mark.parametrize("state", ["merged", "replaced", "overridden", "deleted"])
def test_model_twin_predicted_after_needs_nothing(os_name, state):
    ports = ["Eth1/1", "Eth1/2"] if os_name == "onyx" else ["swp1", "swp2"]
    other = ["Eth1/3"] if os_name == "onyx" else ["swp3"]
    have = want_facts(switch_spec(os_name, ROCE4, ports + other))
    want = want_facts(switch_spec(os_name, ROCE, ports))
    after = apply_facts(state, want, have, os_name, ports)
    assert compute(state, want, after, os_name, ports) == []


def test_bad_input_fails_with_one_sentence(onyx_rack):
    with pytest.raises(FabricopsError, match="leaf-onyx: no ports to configure"):
        run(switch="leaf-onyx", os_name="onyx", roce=ROCE, connector=onyx_rack.connect)
    with pytest.raises(FabricopsError, match=r"step 'validate' failed: fabricops_roce\.dscp"):
        _run(onyx_rack, roce={"dscp": 99})
    with pytest.raises(FabricopsError, match="not supported"):
        run(switch="s", os_name="eos", state="rendered", roce=ROCE, ports=["Eth1/1"])
