"""roce_switch configures the inter-switch links too: a switch's ports are its host-facing ports
(``fabricops_cabling``) plus its ends of ``fabricops_switch_links``, with the same PFC / ECN / trust,
in the platform's port order; a half-written link entry stops the task before the switch is read."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from unittest import mock

import pytest

from fabricops.errors import FabricopsError
from fabricops.roce.desired import DesiredStateError, desired_state
from fabricops.roce.runner import run
from fabricops.roce.switchspec import SwitchError, isl_ports, ports_from_cabling, switch_spec, want_facts

ROCE = {"lossless_priority": 3, "dscp": 26}

#: leaf-cumulus: hosts on swp2 and swp1, uplinks swp8 (spine1) and swp7 (spine2); as the planner writes
CABLING = [
    {"host": "gpu01", "netdev": "enp170s0f0np0", "hca": "mlx5_1", "port": 1, "switch": "leaf-cumulus",
     "switch_port": "swp2"},
    {"host": "gpu02", "netdev": "enp170s0f0np0", "hca": "mlx5_1", "port": 1, "switch": "leaf-cumulus",
     "switch_port": "swp1"},
    {"host": "gpu03", "netdev": "enp170s0f0np0", "hca": "mlx5_1", "port": 1, "switch": "leaf-b",
     "switch_port": "swp1"},
]
LINKS = [
    {"switch_a": "leaf-cumulus", "port_a": "swp8", "switch_b": "spine1", "port_b": "swp1", "tier": "leaf"},
    {"switch_a": "leaf-cumulus", "port_a": "swp7", "switch_b": "spine2", "port_b": "swp1"},
    {"switch_a": "leaf-b", "port_a": "swp31", "switch_b": "spine1", "port_b": "swp10", "tier": "leaf_spine"},
    {"switch_a": "leaf-b", "port_a": "swp32", "switch_b": "spine2", "port_b": "swp2"},
]


def test_a_leaf_gets_its_host_ports_and_its_uplinks_in_port_order():
    raw = ports_from_cabling(CABLING, "leaf-cumulus", LINKS)
    assert sorted(raw) == ["swp1", "swp2", "swp7", "swp8"]
    spec = switch_spec("cumulus", ROCE, raw)
    assert spec.ports == ["swp1", "swp2", "swp7", "swp8"]  # natural order, not the order of the lists
    # a spine has no host cable: its ends of the links only, whichever side of the entry it is on
    spine = switch_spec("cumulus", ROCE, ports_from_cabling(CABLING, "spine1", LINKS))
    assert spine.ports == ["swp1", "swp10"]
    assert isl_ports(LINKS, "spine2") == ["swp1", "swp2"]
    assert ports_from_cabling(CABLING, "leaf-b", LINKS) == ["swp1", "swp31", "swp32"]
    # no links given: the host ports alone (as before)
    assert ports_from_cabling(CABLING, "leaf-cumulus") == ["swp2", "swp1"]


def test_onyx_isl_ports_in_any_spelling_sort_numerically():
    links = [{"switch_a": "leaf-onyx", "port_a": "1/31", "switch_b": "spine1", "port_b": "swp3"},
             {"switch_a": "spine9", "port_a": "swp4", "switch_b": "leaf-onyx", "port_b": "ethernet 1/9"}]
    cabling = [{"host": "gpu01", "switch": "leaf-onyx", "switch_port": "Eth1/10"}]
    spec = switch_spec("onyx", ROCE, ports_from_cabling(cabling, "leaf-onyx", links))
    assert spec.ports == ["Eth1/9", "Eth1/10", "Eth1/31"]
    facts = want_facts(spec)
    for port in spec.ports:  # the ISL ends get the same per-port PFC and trust as the host port
        assert facts[("port_pfc", port)] == facts[("port_pfc", "Eth1/10")]
        assert facts[("port_trust", port)] == "L3"


@pytest.mark.parametrize(
    ("links", "sentence"),
    [
        ([{"switch_a": "leaf-cumulus", "port_a": "swp8", "switch_b": "spine1"}],
         "leaf-cumulus: fabricops_switch_links entry {'switch_a': 'leaf-cumulus', 'port_a': 'swp8', "
         "'switch_b': 'spine1'} has no port_b; each entry needs switch_a, port_a, switch_b, port_b."),
        # an entry of other switches is checked too: without switch_a it could be this switch's uplink
        ([{"port_a": "swp9", "switch_b": "spine1", "port_b": ""}],
         "leaf-cumulus: fabricops_switch_links entry "
         "{'port_a': 'swp9', 'switch_b': 'spine1', 'port_b': ''} has no switch_a or port_b; each entry needs "
         "switch_a, port_a, switch_b, port_b."),
        (["leaf-cumulus:swp8"],
         "leaf-cumulus: fabricops_switch_links entry 'leaf-cumulus:swp8' is not a mapping; each entry is "
         "{switch_a, port_a, switch_b, port_b}."),
        ("leaf-cumulus:swp8",
         "leaf-cumulus: fabricops_switch_links must be a list of "
         "{switch_a, port_a, switch_b, port_b} items."),
    ],
)
def test_a_half_written_link_is_one_sentence_naming_the_entry(links, sentence):
    with pytest.raises(SwitchError) as err:
        ports_from_cabling(CABLING, "leaf-cumulus", links)
    assert str(err.value) == sentence


def _isl(rack):
    if rack.os == "onyx":
        links = [{"switch_a": rack.switch.name, "port_a": "Eth1/8", "switch_b": "spine1", "port_b": "Eth1/1"}]
        return [{"host": "gpu01", "switch": rack.switch.name, "switch_port": "Eth1/1"}], links, "Eth1/8"
    links = [{"switch_a": "spine1", "port_a": "swp1", "switch_b": rack.switch.name, "port_b": "swp8"}]
    return [{"host": "gpu01", "switch": rack.switch.name, "switch_port": "swp1"}], links, "swp8"


def test_merged_configures_the_uplink_like_a_host_port_and_the_twin_sends_nothing(rack):
    cabling, links, uplink = _isl(rack)
    host_port = cabling[0]["switch_port"]
    kw = {"switch": rack.switch.name, "os_name": rack.os, "roce": ROCE, "cabling": cabling,
          "connector": rack.connect}
    # check mode first: the commands name the uplink, nothing but show commands reach the switch
    check = run(state="merged", check_mode=True, links=links, **kw)
    assert check["changed"] and check["ports"] == [host_port, uplink]
    assert rack.config_lines() == []
    # the same predicted configuration as an explicit port list with the uplink (diff unchanged)
    explicit = run(state="merged", check_mode=True, **{**kw, "cabling": None}, ports=[uplink, host_port])
    assert explicit["commands"] == check["commands"] and explicit["diff"] == check["diff"]
    first = run(state="merged", links=links, **kw)
    assert first["changed"] and first["commands"] == check["commands"]
    got = run(state="gathered", links=links, **kw)["gathered"]["knobs"]["ports"]
    # every per-port fact of the host port, on the uplink too (Onyx: PFC, trust, ECN, ETS, watchdog;
    # NVUE: the watchdog; its PFC / trust / ECN are the global `qos roce` of every port)
    assert got[uplink] == got[host_port] and got[uplink]
    if rack.os == "onyx":
        assert got[uplink]["port_trust"] == "L3" and got[uplink]["port_pfc"] is True
    rack.log.clear()
    twin = run(state="merged", links=links, **kw)
    assert twin["changed"] is False and twin["commands"] == [] and rack.config_lines() == []
    # without the links the uplink is not this run's business: merged leaves it configured
    rack.log.clear()
    assert run(state="merged", **kw)["commands"] == []


def test_a_bad_link_entry_stops_before_the_switch_is_contacted(rack):
    cabling, links, _uplink = _isl(rack)
    bad = [{k: v for k, v in links[0].items() if k != "port_a"}]
    with pytest.raises(FabricopsError, match=r"fabricops_switch_links entry .* has no port_a"):
        run(switch=rack.switch.name, os_name=rack.os, roce=ROCE, cabling=cabling, links=bad,
            connector=rack.connect)
    assert rack.sessions == 0 and rack.log == []


def test_a_spine_with_only_links_has_ports_to_configure(rack):
    down = ["Eth1/3", "Eth1/12"] if rack.os == "onyx" else ["swp3", "swp12"]
    spine_links = [{"switch_a": "leaf9", "port_a": "x", "switch_b": rack.switch.name, "port_b": down[1]},
                   {"switch_a": rack.switch.name, "port_a": down[0], "switch_b": "leaf10", "port_b": "y"}]
    res = run(switch=rack.switch.name, os_name=rack.os, state="rendered", roce=ROCE, links=spine_links)
    assert res["ports"] == down and any(down[1].split("/")[-1] in c for c in res["commands"])
    with pytest.raises(FabricopsError, match=r"no ports to configure: .*fabricops_switch_links none"):
        run(switch=rack.switch.name, os_name=rack.os, roce=ROCE, links=[], connector=rack.connect)


# ---- desired_state (what verify and diagnose read, the role's defaults) ----------------------------


def _switch(name, **extra):
    return {"inventory_hostname": name, "ansible_network_os": "nvidia.nvue.nvue", "fabricops_roce": ROCE,
            "fabricops_cabling": CABLING, "fabricops_switch_links": LINKS, **extra}


def test_desired_state_has_the_isl_ports():
    assert desired_state(_switch("leaf-cumulus")).switch.ports == ["swp1", "swp2", "swp7", "swp8"]
    assert desired_state(_switch("spine1")).switch.ports == ["swp1", "swp10"]
    # roce_switch_links over fabricops_switch_links (the role default), roce_switch_ports over both
    only = [LINKS[0]]
    got = desired_state(_switch("leaf-cumulus", roce_switch_links=only)).switch.ports
    assert got == ["swp1", "swp2", "swp8"]
    assert desired_state(_switch("leaf-cumulus", roce_switch_ports=["swp5"])).switch.ports == ["swp5"]


def test_desired_state_names_a_bad_link_entry():
    with pytest.raises(DesiredStateError, match=r"^spine1: spine1: fabricops_switch_links entry .* has no "
                                                r"port_b; each entry needs"):
        desired_state(_switch("spine1", fabricops_switch_links=[{"switch_a": "leaf-b", "port_a": "swp31",
                                                                 "switch_b": "spine1"}]))


# ---- the action plugin passes `links` through -------------------------------------------------------

ACTION = Path(__file__).resolve().parents[3] / "plugins" / "action" / "roce_switch.py"


def test_action_links_option_reaches_the_runner():
    spec = importlib.util.spec_from_file_location("action_roce_switch_isl", ACTION)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = {"state": "rendered", "roce": ROCE, "cabling": CABLING, "links": LINKS}
    task = mock.MagicMock(args=args, check_mode=False, async_val=0, diff=False)
    action = mod.ActionModule(task, mock.MagicMock(), mock.MagicMock(), None, None, None)
    action._templar = mock.MagicMock(template=lambda v: v)
    tv = {"inventory_hostname": "leaf-cumulus", "fabricops_switch_os": "cumulus"}
    with mock.patch("ansible.plugins.action.ActionBase.run", return_value={}):
        out = action.run(task_vars=tv)
    assert not out.get("failed"), out
    assert out["ports"] == ["swp1", "swp2", "swp7", "swp8"]
    assert any("swp7" in c for c in out["commands"])
    task.args = {**args, "links": [{"switch_a": "leaf-cumulus", "port_a": "swp7"}]}
    with mock.patch("ansible.plugins.action.ActionBase.run", return_value={}):
        out = action.run(task_vars=tv)
    assert out["failed"] is True and "\n" not in out["msg"]
    assert "fabricops_switch_links entry" in out["msg"] and "has no switch_b or port_b" in out["msg"]


# ---- verify's switch reader checks the same ports ---------------------------------------------------


def test_verify_reader_checks_the_isl_ends_the_role_configures(onyx_rack):
    from fabricops.verify.switchstate import SwitchReader

    cabling, links, uplink = _isl(onyx_rack)
    name = onyx_rack.switch.name
    hv = {"inventory_hostname": name, "fabricops_switch_os": "onyx", "fabricops_roce": ROCE,
          "fabricops_cabling": cabling, "fabricops_switch_links": links}
    reader = SwitchReader(lambda _n: hv, None, connector=lambda _sw, _os, _hv: onyx_rack.connect())
    assert reader.roce_ports(name) == ["Eth1/1", uplink]  # desired_state: the role's own port list
    # the role run before ISLs were known: host port only; the reader finds the uplink lossy
    run(switch=name, os_name="onyx", roce=ROCE, ports=["Eth1/1"], connector=onyx_rack.connect)
    got = reader.check_switch(name)
    assert got["Eth1/1"] == []
    assert got[uplink] == ["PFC off on priority 3 (fabricops_roce.lossless_priority)",
                           "trust not set, want L3 (fabricops_roce.trust)",
                           "no ECN on traffic class 3 (fabricops_roce.ecn)"]
    # the role with the links: nothing left to report on any port
    run(switch=name, os_name="onyx", roce=ROCE, cabling=cabling, links=links, connector=onyx_rack.connect)
    assert reader.check_switch(name) == {"Eth1/1": [], uplink: []}
    assert [e[:2] for e in reader.isl_path(name, "spine1")] == [(name, uplink), ("spine1", "Eth1/1")]
