"""fabricops.hostqos.plan: RoCE ports from the fabric facts, and the per-port desired state."""

from __future__ import annotations

import pytest

from fabricops.hostqos.plan import PlanError, host_plan, select_ports
from fabricops.model.roce import RoceConfigError

HCAS = [
    {
        "name": "mlx5_0",
        "ports": [{"port": 1, "link_layer": "InfiniBand", "netdev": "ibp26s0", "state": "ACTIVE"}],
    },
    {
        "name": "mlx5_2",
        "ports": [{"port": 1, "link_layer": "Ethernet", "netdev": "enp170s0f0np0", "state": "ACTIVE"}],
    },
    {
        "name": "mlx5_3",
        "ports": [{"port": 1, "link_layer": "Ethernet", "netdev": "enp170s0f1np1", "state": "DOWN"}],
    },
    {"name": "mlx5_4", "ports": [{"port": 1, "link_layer": "Ethernet", "netdev": None, "state": "DOWN"}]},
]


def test_every_ethernet_port_with_a_netdev():
    assert [(p["netdev"], p["device"], p["port"]) for p in select_ports(HCAS)] == [
        ("enp170s0f0np0", "mlx5_2", 1),
        ("enp170s0f1np1", "mlx5_3", 1),
    ]


def test_override_list():
    assert [p["netdev"] for p in select_ports(HCAS, ["enp170s0f1np1"])] == ["enp170s0f1np1"]
    with pytest.raises(PlanError, match=r"names ibp26s0, which is not an Ethernet .*found: enp170s0f0np0"):
        select_ports(HCAS, ["ibp26s0"])


def test_no_roce_port():
    with pytest.raises(PlanError, match="no Ethernet \\(RoCE\\) HCA port"):
        select_ports(HCAS[:1])


def test_host_plan_per_port():
    plan = host_plan(
        {"lossless_priority": 3, "dscp": 26, "cable_length_m": 7, "ecn": {"other_priorities": "unmanaged"}},
        HCAS,
        ["enp170s0f0np0"],
    )
    assert plan["roce"]["derived"]["tos"] == 106
    (port,) = plan["ports"]
    assert port["mlnx_qos"] == {
        "trust": "dscp",
        "pfc": [0, 0, 0, 1, 0, 0, 0, 0],
        "dscp2prio": {"26": 3, "48": 6},
        "cable_len": 7,
    }
    assert port["sysfs"] == {
        "ecn_np": [None, None, None, True, None, None, None, None],
        "ecn_rp": [None, None, None, True, None, None, None, None],
        "cnp_dscp": 48,
        "cnp_priority": 6,
        "traffic_class": 106,
        "rdma_cm_tos": 106,
        "roce_mode": 2,
    }


def test_trust_pcp_manages_no_dscp_map_and_no_cable_by_default():
    (port, _) = host_plan({"trust": "pcp"}, HCAS)["ports"]
    assert port["mlnx_qos"] == {"trust": "pcp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "dscp2prio": {}}


def test_bad_definition_fails_before_ports():
    with pytest.raises(RoceConfigError, match="lossless_priority is 9"):
        host_plan({"lossless_priority": 9}, HCAS)
