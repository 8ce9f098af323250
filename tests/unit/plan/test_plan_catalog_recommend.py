"""Switch catalogue data and the scenario recommendation."""

from __future__ import annotations

import pytest

from fabricops.model import rates
from fabricops.plan import catalog
from fabricops.plan.catalog import PlanInputError
from fabricops.plan.recommend import make_plan, recommend


@pytest.mark.parametrize(
    ("name", "ports", "rate"),
    [
        ("QM9700", 64, 400),
        ("QM8700", 40, 200),
        ("Q3400", 144, 800),
        ("SN5600", 64, 800),
        ("SN5400", 64, 400),
        ("SN4700", 32, 400),
        ("SN4600C", 64, 100),
        ("SN2700", 32, 100),
    ],
)
def test_catalogue_radix_and_port_rate(name, ports, rate):
    sw = catalog.switch(name)
    assert sw.ports == ports
    assert sw.port_rate_gbps == rate


def test_every_row_has_a_source_and_a_known_speed():
    for sw in catalog.SWITCHES.values():
        assert len(sw.source) > 20, sw.model
        assert sw.lab_os in ("ib", "onyx", "cumulus")
        assert (sw.lab_os == "ib") == (sw.link_layer == "InfiniBand")
        assert rates.port_rate(sw.link_layer, sw.speed, "4X") > 0


def test_port_rate_is_not_the_lane_rate():
    # REFERENCE.md: HDR is 50 Gb/s per lane, 200 per 4X port; NDR 100 per lane, 400 per port
    assert catalog.switch("QM8700").port_rate_gbps == 4 * rates.ib_lane_rate("HDR") == 200
    assert catalog.switch("QM9700").port_rate_gbps == 4 * rates.ib_lane_rate("NDR") == 400


@pytest.mark.parametrize("alias", ["qm9700", "MQM9790", "NVIDIA Quantum-2 QM9700", "quantum-2"])
def test_aliases(alias):
    assert catalog.switch(alias).model == "QM9700"


def test_unknown_switch_says_what_to_use():
    with pytest.raises(PlanInputError, match=r"unknown switch 'QM1234': use one of QM9700, "):
        catalog.switch("QM1234")


def test_rule_of_thumb_table():
    assert [r["max_gpus"] for r in catalog.topology_rules()] == [64, 512, 4096, None]
    assert catalog.rule_of_thumb(64)["topology"] == "single switch"
    assert catalog.rule_of_thumb(65)["topology"] == "two-tier fat tree"
    assert catalog.rule_of_thumb(4096)["topology"] == "three-tier fat tree"
    assert catalog.rule_of_thumb(4097)["topology"] == "Dragonfly+"


@pytest.mark.parametrize(
    ("gpus", "budget", "cloud", "scenario", "switch", "link_layer"),
    [
        (8, "high", False, "single_node", None, None),
        (8, "low", False, "single_node", None, None),
        (64, "high", True, "cloud", None, None),
        (64, "low", False, "tight_budget", "SN5400", "Ethernet"),
        (4096, "low", False, "tight_budget", "SN5400", "Ethernet"),
        (256, "medium", False, "small_cluster", "QM8700", "InfiniBand"),
        (256, "high", False, "small_cluster", "QM9700", "InfiniBand"),
        (4096, "medium", False, "large_cluster", "QM9700", "InfiniBand"),
        (16384, "high", False, "large_cluster", "QM9700", "InfiniBand"),
    ],
)
def test_scenarios(gpus, budget, cloud, scenario, switch, link_layer):
    rec = recommend(gpus, 8, budget, cloud)
    assert (rec.scenario, rec.switch, rec.link_layer) == (scenario, switch, link_layer)
    assert rec.reason


def test_reasons_use_port_rates():
    assert recommend(8).interconnect == "NVLink only"
    assert "200 Gb/s per 4X port" in recommend(256, budget="medium").interconnect
    assert "400 Gb/s per 4X port" in recommend(256).interconnect
    assert "DSCP 26" in recommend(64, budget="low").reason


def test_bad_budget():
    with pytest.raises(PlanInputError, match="unknown budget 'cheap': use one of low, medium, high"):
        recommend(64, budget="cheap")


def test_plan_roce_profile_and_explicit_switch():
    p = make_plan(256, budget="low")
    assert p.roce and p.hardware_profile == "roce-400g" and p.switch.model == "SN5400"
    p = make_plan(256, switch="SN5600")
    assert p.link_layer == "Ethernet" and p.host_speed == "800GbE"
    assert p.hardware_profile is None
    assert any("replaces the recommended QM9700" in n for n in p.notes)
    assert any("no shipped hardware profile for 800GbE" in n for n in p.notes)


def test_plan_hdr_uses_a100_profile():
    p = make_plan(256, budget="medium")
    assert p.hardware_profile == "hgx-a100-hdr" and p.gpu_model == "NVIDIA A100-SXM4-80GB"
    assert p.comm.busbw_gbs == 24  # 24 GB/s per 200G NIC, one per GPU


def test_plan_single_node():
    p = make_plan(8)
    assert p.switch is None and p.design.tiers == 0 and p.link_layer is None
    assert p.comm.busbw_gbs == 450
