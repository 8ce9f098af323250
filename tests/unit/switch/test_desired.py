"""fabricops.roce.desired: the effective, validated RoCE state of a switch or host."""

from __future__ import annotations

import pytest

from fabricops.roce.desired import DesiredStateError, desired_state, effective_definition
from fabricops.roce.switchspec import want_facts

CABLING = [
    {"host": "gpu01", "switch": "leaf-a", "switch_port": "swp2"},
    {"host": "gpu02", "switch": "leaf-a", "switch_port": "swp1"},
    {"host": "gpu03", "switch": "leaf-b", "switch_port": "swp9"},
]


def _switch(**extra):
    return {"inventory_hostname": "leaf-a", "ansible_network_os": "nvidia.nvue.nvue",
            "fabricops_roce": {"lossless_priority": 3, "dscp": 26}, "fabricops_cabling": CABLING, **extra}


def test_switch_gets_its_spec_with_the_role_defaults():
    d = desired_state(_switch())
    assert d.kind == "switch" and d.source == "fabricops_roce"
    spec = d.switch
    assert spec.os == "cumulus" and spec.ports == ["swp1", "swp2"]  # this switch's cabling only
    assert spec.pfc_watchdog is True and spec.ets_lossless_percent == 50 and spec.buffer_pool == "lossless"
    assert want_facts(spec)[("pfc_priority", 3)] is True


def test_switch_role_variables_override():
    d = desired_state(_switch(
        roce_switch_roce={"lossless_priority": 4, "dscp": 34},
        roce_switch_ports=["swp7"],
        roce_switch_pfc_watchdog="false",  # -e / INI text: Ansible's boolean, not bool("false")
        roce_switch_ets_lossless_percent="60",
        roce_switch_buffer_pool="lossless-single-ipool",
    ))
    assert d.source == "roce_switch_roce" and d.roce.lossless_priority == 4
    spec = d.switch
    assert spec.ports == ["swp7"] and spec.pfc_watchdog is False
    assert spec.ets_lossless_percent == 60 and spec.buffer_pool == "lossless-single-ipool"
    assert ("port_pfc_wd", "swp7") not in want_facts(spec)


def test_host_gets_roce_host_roce_not_the_switch_override():
    hv = {"fabricops_roce": {"dscp": 26}, "roce_switch_roce": {"lossless_priority": 5, "dscp": 40}}
    d = desired_state(hv, "gpu01")
    assert d.kind == "host" and d.switch is None and d.roce.lossless_priority == 3
    hv["roce_host_roce"] = {"lossless_priority": 5, "dscp": 40}
    assert desired_state(hv, "gpu01").roce.lossless_priority == 5
    assert effective_definition(hv, "gpu01") == ("roce_host_roce", {"lossless_priority": 5, "dscp": 40})
    assert desired_state({}, "gpu01").roce is None  # nothing planned


@pytest.mark.parametrize(
    ("extra", "sentence"),
    [
        ({"roce_switch_roce": {"lossless_priority": 8}},
         "leaf-a: roce_switch_roce does not validate: roce_switch_roce.lossless_priority is 8"),
        ({"roce_switch_pfc_watchdog": "maybe"},
         "leaf-a: roce_switch_pfc_watchdog is 'maybe'; use true or false."),
        ({"roce_switch_ets_lossless_percent": 100}, "roce_switch_ets_lossless_percent is 100; use 1 to 99."),
        ({"roce_switch_buffer_pool": "huge"}, "roce_switch_buffer_pool 'huge' is not available on cumulus"),
        ({"roce_switch_ports": ["Eth1/1"]}, "'Eth1/1' is not a Cumulus switch port (write swp1)."),
        ({"ansible_network_os": "onyx", "fabricops_roce": {"dscp": 40}, "roce_switch_ports": ["Eth1/1"]},
         "Onyx trust L3 maps DSCP d to priority d/8"),
        ({"roce_switch_roce": "{{ undefined_variable_xyz }}"},
         "leaf-a: roce_switch_roce could not be resolved"),
    ],
)
def test_bad_switch_state_is_one_sentence(extra, sentence):
    with pytest.raises(DesiredStateError) as err:
        desired_state(_switch(**extra))
    assert sentence in str(err.value) and "\n" not in str(err.value)


def test_lab_inventory_writes_a_validated_definition():
    from fabricops_lab import inventory

    topo = {
        "hosts": [{"name": "gpu01", "hcas": [{"name": "mlx5_0", "ports": [
            {"link_layer": "Ethernet", "netdev": "eth0", "address": "10.0.0.1", "prefix": 24}]}]}],
        "cabling": [],
        "switches": [],
    }
    try:
        data = inventory.all_yml({"topology": topo}, None)
    except (KeyError, TypeError):  # pragma: no cover - the topology needs more than this test gives
        pytest.skip("all_yml needs a full topology")
    assert data["fabricops_roce"] == inventory.ROCE
    assert desired_state(data, "gpu01").roce.tos == 106
