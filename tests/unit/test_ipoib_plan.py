"""fabricops.ipoib: address plan + fabric facts -> a host's IPoIB interfaces; every refusal."""

from __future__ import annotations

import pytest

from fabricops.facts import build_facts
from fabricops.ipoib import (
    IpoibPlanError,
    address_conflicts,
    child_name,
    host_interfaces,
    ib_netdevs,
    max_mtu,
    parse_pkey,
    pending_changes,
    plan_errors,
)


def _port(link_layer):
    return {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
            "link_layer": link_layer, "lid": "0x5", "sm_lid": "0x1", "gids": []}


FACTS = build_facts({
    "infiniband": {
        "mlx5_0": {"netdevs": ["ibp26s0"], "ports": {"1": _port("InfiniBand")}},
        "mlx5_1": {"netdevs": ["ibp60s0"], "ports": {"1": _port("InfiniBand")}},
        "mlx5_2": {"netdevs": ["enp170s0f0np0"], "ports": {"1": _port("Ethernet")}},
    },
    "net": {
        "ibp26s0": {"type": "32", "mtu": "4092", "operstate": "up", "mode": "datagram"},
        "ibp60s0": {"type": "32", "mtu": "2044", "operstate": "up", "mode": "datagram"},
    },
})

PLAN = {"networks": {"ibp26s0": "198.18.0.0/16",
                     "storage": {"device": "mlx5_1", "prefix": "198.19.0.0/24", "pkey": "0x0010",
                                 "mode": "connected"}}}


def test_ib_netdevs_from_facts_skip_ethernet():
    assert ib_netdevs(FACTS) == {"mlx5_0": "ibp26s0", "mlx5_0:1": "ibp26s0",
                                 "mlx5_1": "ibp60s0", "mlx5_1:1": "ibp60s0"}


def test_max_mtu_per_mode():
    assert max_mtu("datagram") == 4092
    assert max_mtu("datagram", 2048) == 2044
    assert max_mtu("connected") == 65520


def test_pkey_full_membership_and_child_name():
    assert parse_pkey("0x0010") == 0x8010
    assert parse_pkey(0x8010) == 0x8010
    assert parse_pkey("16", full_membership=False) == 0x0010
    assert parse_pkey(None) is None
    assert child_name("ibp26s0", 0x8010) == "ibp26s0.8010"
    assert child_name("ib0", 0x0001) == "ib0.0001"


@pytest.mark.parametrize("value", [0, "0x0000", 0x8000, 0x10000, -1, "0xzz", True])
def test_pkey_out_of_range(value):
    with pytest.raises(IpoibPlanError, match="P_Key"):
        parse_pkey(value)


def test_pkey_membership_contradiction():
    with pytest.raises(IpoibPlanError, match="full-membership bit 0x8000 set but full_membership is false"):
        parse_pkey("0x8010", full_membership=False)


def test_plan_gives_addresses_from_host_index_and_resolves_hca():
    ifaces = host_interfaces("gpu03", plan=PLAN, host_index=13, facts=FACTS)
    assert ifaces == [
        {"name": "ibp26s0", "network": "ibp26s0", "device": "ibp26s0", "parent": None, "pkey": None,
         "pkey_hex": None, "mode": "datagram", "mtu": 4092, "address": "198.18.0.13/16",
         "connection": "fabricops-ipoib-ibp26s0"},
        {"name": "ibp60s0.8010", "network": "storage", "device": "ibp60s0", "parent": "ibp60s0",
         "pkey": 0x8010, "pkey_hex": "0x8010", "mode": "connected", "mtu": 65520,
         "address": "198.19.0.13/24", "connection": "fabricops-ipoib-ibp60s0.8010"},
    ]


def test_host_index_above_255_carries_into_the_next_octet():
    ifaces = host_interfaces("gpu300", plan={"networks": {"ibp26s0": "198.18.0.0/16"}}, host_index=300,
                             facts=FACTS)
    assert ifaces[0]["address"] == "198.18.1.44/16"
    again = host_interfaces("gpu300", plan={"networks": {"ibp26s0": "198.18.0.0/16"}}, host_index="300",
                            facts=FACTS)
    assert again[0]["address"] == "198.18.1.44/16"


def test_per_host_address_wins_over_index():
    ifaces = host_interfaces("gpu03", plan=PLAN, host_index=13, addresses={"storage": "198.19.0.200"},
                             facts=FACTS)
    assert [i["address"] for i in ifaces] == ["198.18.0.13/16", "198.19.0.200/24"]


def test_defaults_apply_and_ib_mtu_2048():
    ifaces = host_interfaces("gpu03", plan={"networks": {"ibp26s0": "198.18.0.0/16"}}, host_index=1,
                             facts=FACTS, defaults={"mode": "datagram", "ib_mtu": 2048})
    assert ifaces[0]["mtu"] == 2044
    ifaces = host_interfaces("gpu03", plan={"networks": {"ibp26s0": "198.18.0.0/16"}}, host_index=1,
                             facts=FACTS, defaults={"mode": "connected", "mtu": 9000})
    assert (ifaces[0]["mode"], ifaces[0]["mtu"]) == ("connected", 9000)


def test_explicit_interfaces_replace_the_plan():
    ifaces = host_interfaces(
        "gpu03", plan=PLAN, host_index=13, facts=FACTS,
        interfaces=[{"device": "ibp26s0", "address": "10.1.0.3/24", "mode": "connected", "mtu": 65520},
                    {"device": "ibp26s0", "pkey": 5, "full_membership": False}],
    )
    assert [(i["name"], i["address"], i["mode"], i["mtu"]) for i in ifaces] == [
        ("ibp26s0", "10.1.0.3/24", "connected", 65520),
        ("ibp26s0.0005", None, "datagram", 4092),
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"plan": {"networks": {"ibp26s0": {"prefix": "198.18.0.0/16", "mtu": 70000}}}, "host_index": 1},
         r"^gpu03 ibp26s0: MTU 70000 is too big for datagram mode \(at most 4092, IB MTU 4096 - 4\)"),
        ({"plan": {"networks": {"ibp26s0": {"prefix": "198.18.0.0/16", "mtu": 65521,
                                            "mode": "connected"}}}, "host_index": 1},
         r"^gpu03 ibp26s0: MTU 65521 is too big for connected mode \(at most 65520"),
        ({"plan": {"networks": {"ibp26s0": {"prefix": "198.18.0.0/16", "mtu": 60}}}, "host_index": 1},
         "below the IPv4 minimum"),
        ({"plan": {"networks": {"ibp26s0": {"prefix": "198.18.0.0/16", "mode": "bridged"}}}, "host_index": 1},
         "mode 'bridged' is not one of datagram, connected"),
        ({"plan": {"networks": {"ibp26s0": {"prefix": "198.18.0.0/16", "pkey": "0x8000"}}}, "host_index": 1},
         r"^gpu03 ibp26s0: P_Key '0x8000' is out of range"),
        ({"plan": {"networks": {"ibp26s0": {"prefix": "198.18.0.0/16", "pkey": 0x10000}}}, "host_index": 1},
         r"^gpu03 ibp26s0: P_Key 65536 is out of range"),
        ({"plan": {"networks": {"ibp26s0": "198.18.0.0/16"}}, "addresses": {"ibp26s0": "198.20.0.1"}},
         r"^gpu03 ibp26s0: address 198.20.0.1 is outside its network 198.18.0.0/16"),
        ({"plan": {"networks": {"ibp26s0": "198.18.0.0/16"}}, "addresses": {"ibp26s0": "198.18.0.1/24"}},
         "another prefix length"),
        ({"plan": {"networks": {"ibp26s0": "198.18.0.0/24"}}, "addresses": {"ibp26s0": "198.18.0.255"}},
         "network or broadcast address"),
        ({"plan": {"networks": {"ibp26s0": "198.18.0.0/16"}}, "addresses": {"ibp26s0": "fe80::1"}},
         "not an IPv4 address"),
        ({"plan": {"networks": {"ibp26s0": "198.18.0.0/16"}}},
         r"^gpu03 ibp26s0: no address: set ipoib_host_index"),
        ({"plan": {"networks": {"ibp26s0": "198.18.0.0/24"}}, "host_index": 255},
         r"ipoib_host_index 255 does not fit in 198.18.0.0/24 \(1-254\)"),
        ({"plan": {"networks": {"ibp26s0": "198.18.0.1/16"}}, "host_index": 1},
         "is not an IPv4 network"),
        ({"plan": {"networks": {"ibp99s0": "198.18.0.0/16"}}, "host_index": 1},
         r"^gpu03 ibp99s0: ibp99s0 is not an InfiniBand netdev or HCA on this host "
         r"\(have: ibp26s0, ibp60s0\)"),
        ({"plan": {"networks": {"enp170s0f0np0": "198.18.0.0/16"}}, "host_index": 1},
         "enp170s0f0np0 is not an InfiniBand netdev"),
        ({"plan": {"networks": {"ibp26s0": "198.18.0.0/16",
                                "mlx5_0": "198.19.0.0/16"}}, "host_index": 1},
         "interface ibp26s0 is also planned by"),
        ({"plan": {"networks": {"ibp26s0": "198.18.0.0/16",
                                "ibp60s0": "198.18.128.0/17"}}, "host_index": 1},
         r"network 198.18.0.0/16 overlaps 198.18.128.0/17 of ibp60s0 on the same host"),
        ({"plan": {"networks": {"ibp26s0": "198.18.0.0/16"}}, "host_index": 1,
          "addresses": {"other": "1.2.3.4"}},
         r"ipoib_addresses: other is not a network of ipoib_plan"),
        ({"interfaces": [{"device": "ibp26s0", "address": "198.18.0.1"}]}, "needs a prefix length"),
    ],
)
def test_bad_plans_are_refused_naming_host_and_interface(kwargs, message):
    with pytest.raises(IpoibPlanError, match=message):
        host_interfaces("gpu03", facts=FACTS, **kwargs)
    errors = plan_errors("gpu03", facts=FACTS, **kwargs)
    assert len(errors) == 1 and errors[0].startswith("gpu03 ")


def test_empty_plan_is_no_interfaces():
    assert host_interfaces("gpu03", facts=FACTS) == []
    assert plan_errors("gpu03", plan=PLAN, host_index=1, facts=FACTS) == []


def test_address_conflicts_across_hosts():
    plans = {
        "gpu01": host_interfaces("gpu01", plan=PLAN, host_index=1, facts=FACTS),
        "gpu02": host_interfaces("gpu02", plan=PLAN, host_index=2, facts=FACTS),
        "gpu03": host_interfaces("gpu03", plan=PLAN, host_index=2, addresses={"storage": "198.19.0.3"},
                                 facts=FACTS),
    }
    assert address_conflicts(plans) == ["gpu02 ibp26s0: address 198.18.0.2 is also planned for gpu03 ibp26s0"]
    assert address_conflicts(plans, host="gpu03") == [
        "gpu03 ibp26s0: address 198.18.0.2 is also planned for gpu02 ibp26s0"
    ]
    assert address_conflicts(plans, host="gpu01") == []
    del plans["gpu03"]
    assert address_conflicts(plans) == []


def test_pending_changes_compare_live_mode_mtu_address():
    ifaces = host_interfaces("gpu03", plan=PLAN, host_index=13, facts=FACTS)
    ansible_facts = {"ibp26s0": {"ipv4": {"address": "198.18.0.13", "prefix": "16"}}}
    pending = pending_changes(ifaces, FACTS["netdevs"], ansible_facts)
    assert pending == [{"name": "ibp60s0.8010", "reasons": ["absent"]}]
    netdevs = dict(FACTS["netdevs"], **{"ibp60s0.8010": {"mode": "datagram", "mtu": 2044}})
    ansible_facts["ibp26s0"]["ipv4"]["address"] = "198.18.0.14"
    ansible_facts["ibp60s0_8010"] = {"ipv4": {"address": "198.19.0.13", "prefix": "24"}}
    assert pending_changes(ifaces, netdevs, ansible_facts) == [
        {"name": "ibp26s0", "reasons": ["address 198.18.0.14/16 -> 198.18.0.13/16"]},
        {"name": "ibp60s0.8010", "reasons": ["mode datagram -> connected", "mtu 2044 -> 65520"]},
    ]
    converged = dict(netdevs, **{"ibp60s0.8010": {"mode": "connected", "mtu": 65520}})
    ansible_facts["ibp26s0"]["ipv4"]["address"] = "198.18.0.13"
    assert pending_changes(ifaces, converged, ansible_facts) == []
    ansible_facts["ibp26s0"] = {"device": "ibp26s0"}  # up, no IPv4 address yet
    assert pending_changes(ifaces, converged, ansible_facts) == [
        {"name": "ibp26s0", "reasons": ["address none -> 198.18.0.13/16"]}
    ]
