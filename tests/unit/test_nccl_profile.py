"""fabricops.nccl: named profile + fabric facts (built by fabricops.facts) + overrides -> NCCL env."""

from __future__ import annotations

import copy

import pytest

from fabricops.facts import build_facts
from fabricops.nccl import NcclProfileError, nccl_env, nccl_errors, roce_tos, socket_ifname_default

ROCE = {"lossless_priority": 3, "dscp": 26}


def _port(state, link_layer, gids=()):
    return {
        "state": state,
        "phys_state": "5: LinkUp" if state.endswith("ACTIVE") else "3: Disabled",
        "rate": "400 Gb/sec (4X NDR)",
        "link_layer": link_layer,
        "lid": "0x5" if link_layer == "InfiniBand" else "0x0",
        "sm_lid": "0x1",
        "gids": list(gids),
    }


def _roce_gids(netdev, ipv4_mapped=True, v2_index=3):
    gids = [
        {"index": 0, "gid": "fe80:0000:0000:0000:b83f:d2ff:fea1:b2c2", "type": "IB/RoCE v1", "ndev": netdev},
        {"index": 1, "gid": "fe80:0000:0000:0000:b83f:d2ff:fea1:b2c2", "type": "RoCE v2", "ndev": netdev},
    ]
    if ipv4_mapped:
        gids += [
            {"index": v2_index - 1, "gid": "0000:0000:0000:0000:0000:ffff:cb00:7101",
             "type": "IB/RoCE v1", "ndev": netdev},
            {"index": v2_index, "gid": "0000:0000:0000:0000:0000:ffff:cb00:7101",
             "type": "RoCE v2", "ndev": netdev},
        ]
    return gids


def _raw():
    """Three IB HCAs (mlx5_10 up, mlx5_2 up, mlx5_1 down) and two RoCE ports, all up."""
    return {
        "infiniband": {
            "mlx5_10": {"netdevs": ["ibp200s0"], "ports": {"1": _port("4: ACTIVE", "InfiniBand")}},
            "mlx5_1": {"netdevs": ["ibp60s0"], "ports": {"1": _port("1: DOWN", "InfiniBand")}},
            "mlx5_2": {"netdevs": ["ibp26s0"], "ports": {"1": _port("4: ACTIVE", "InfiniBand")}},
            "mlx5_4": {"netdevs": ["enp170s0f0np0"],
                       "ports": {"1": _port("4: ACTIVE", "Ethernet", _roce_gids("enp170s0f0np0"))}},
            "mlx5_5": {"netdevs": ["enp170s0f1np1"],
                       "ports": {"1": _port("4: ACTIVE", "Ethernet", _roce_gids("enp170s0f1np1"))}},
        },
        "net": {},
        "ofed_info": None,
        "nvidia_smi_query": None,
    }


@pytest.fixture
def facts():
    return build_facts(_raw())


def test_ib_profile_lists_only_active_ib_ports_exact_and_naturally_sorted(facts):
    env = nccl_env("ib", facts, socket_ifname="=eno1")
    assert env == {
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": "=mlx5_2:1,mlx5_10:1",
        "NCCL_SOCKET_IFNAME": "=eno1",
    }
    assert list(env) == sorted(env)


def test_roce_profile_uses_gid_table_and_lossless_tos(facts):
    env = nccl_env("roce", facts, roce=ROCE)
    assert env["NCCL_IB_HCA"] == "=mlx5_4:1,mlx5_5:1"
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert env["NCCL_IB_TC"] == "106"
    assert env["NCCL_IB_DISABLE"] == "0"
    assert "NCCL_SOCKET_IFNAME" not in env


def test_roce_gid_index_is_read_not_guessed():
    raw = _raw()
    for dev in ("mlx5_4", "mlx5_5"):
        netdev = raw["infiniband"][dev]["netdevs"][0]
        raw["infiniband"][dev]["ports"]["1"]["gids"] = _roce_gids(netdev, v2_index=5)
    env = nccl_env("roce", build_facts(raw), roce={"dscp": 26})
    assert env["NCCL_IB_GID_INDEX"] == "5"


def test_roce_without_ipv4_gid_fails_naming_port_and_netdev():
    raw = _raw()
    raw["infiniband"]["mlx5_5"]["ports"]["1"]["gids"] = _roce_gids("enp170s0f1np1", ipv4_mapped=False)
    with pytest.raises(NcclProfileError, match=r"mlx5_5:1 \(enp170s0f1np1\) has no IPv4 RoCE v2 GID"):
        nccl_env("roce", build_facts(raw), roce=ROCE)


def test_roce_ports_with_different_gid_indexes_fail_unless_overridden():
    raw = _raw()
    raw["infiniband"]["mlx5_5"]["ports"]["1"]["gids"] = _roce_gids("enp170s0f1np1", v2_index=5)
    facts = build_facts(raw)
    with pytest.raises(NcclProfileError, match=r"GID indexes \(3: mlx5_4:1; 5: mlx5_5:1\)"):
        nccl_env("roce", facts, roce=ROCE)
    env = nccl_env("roce", facts, roce=ROCE, overrides={"NCCL_IB_GID_INDEX": 3})
    assert env["NCCL_IB_GID_INDEX"] == "3"


def test_roce_needs_the_fabric_roce_definition(facts):
    with pytest.raises(NcclProfileError, match="needs fabricops_roce"):
        nccl_env("roce", facts, roce=None)


def test_tos_comes_from_the_fabric_definition():
    assert roce_tos({"dscp": 26}) == 106  # 26 << 2 = 104, plus ECT(0)
    assert roce_tos({"dscp": 24, "cnp_dscp": 48}) == 98
    assert roce_tos({}) == 106  # NVIDIA's lossless default, DSCP 26
    with pytest.raises(NcclProfileError, match="dscp"):
        roce_tos({"dscp": 64})
    with pytest.raises(NcclProfileError, match="unknown key"):
        roce_tos({"dscp": 26, "tos": 96})


def test_socket_profile_disables_ib_and_needs_an_interface(facts):
    assert nccl_env("socket", facts, socket_ifname="=eno1") == {
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "=eno1",
    }
    with pytest.raises(NcclProfileError, match="profile socket needs an interface"):
        nccl_env("socket", facts)


def test_socket_ifname_default_from_ansible_facts():
    assert socket_ifname_default({"default_ipv4": {"interface": "eno1"}}) == "=eno1"
    assert socket_ifname_default({"default_ipv4": {}}) is None
    assert socket_ifname_default(None) is None


def test_bad_socket_ifname_is_refused(facts):
    with pytest.raises(NcclProfileError, match="not an NCCL interface list"):
        nccl_env("ib", facts, socket_ifname="eth0; rm -rf /")


def test_unknown_profile(facts):
    expected = r"^unknown NCCL profile 'ethernet': choose one of ib, roce, socket$"
    with pytest.raises(NcclProfileError, match=expected):
        nccl_env("ethernet", facts)


def test_no_active_port_for_profile():
    raw = _raw()
    for dev in ("mlx5_10", "mlx5_2"):
        raw["infiniband"][dev]["ports"]["1"]["state"] = "1: DOWN"
    with pytest.raises(NcclProfileError, match=r"profile ib: no InfiniBand port is ACTIVE"):
        nccl_env("ib", build_facts(raw))


def test_missing_facts_say_to_run_fabric_facts():
    with pytest.raises(NcclProfileError, match=r"run fabricops\.fabric\.fabric_facts"):
        nccl_env("ib", {})


def test_overrides_merge_on_top_and_none_removes(facts):
    env = nccl_env(
        "ib", facts, socket_ifname="=eno1",
        overrides={"NCCL_IB_HCA": "=mlx5_2:1", "NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": None,
                   "NCCL_CROSS_NIC": 0, "NCCL_IB_PCI_RELAXED_ORDERING": True},
    )
    assert env == {
        "NCCL_CROSS_NIC": "0",
        "NCCL_DEBUG": "WARN",
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": "=mlx5_2:1",
        "NCCL_IB_PCI_RELAXED_ORDERING": "1",
    }


def test_benchmark_settings_refused_unless_allowed(facts):
    with pytest.raises(NcclProfileError, match="sets NCCL_ALGO, a benchmarking-only setting"):
        nccl_env("ib", facts, overrides={"NCCL_ALGO": "Ring"})
    with pytest.raises(NcclProfileError, match="sets NCCL_PROTO"):
        nccl_env("ib", facts, overrides={"NCCL_PROTO": "Simple"})
    env = nccl_env("ib", facts, overrides={"NCCL_ALGO": "Ring"}, allow_benchmark=True)
    assert env["NCCL_ALGO"] == "Ring"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"nccl_debug": "INFO"}, "not an NCCL variable name"),
        ({"CUDA_VISIBLE_DEVICES": "0"}, "not an NCCL variable name"),
        ({"NCCL_DEBUG": "INFO\nNCCL_ALGO=Ring"}, "must be one line"),
        ({"NCCL_DEBUG": ["INFO"]}, "string, integer or boolean, got list"),
    ],
)
def test_bad_overrides(facts, overrides, message):
    with pytest.raises(NcclProfileError, match=message):
        nccl_env("ib", facts, overrides=overrides)


def test_nccl_errors_is_empty_or_one_line(facts):
    assert nccl_errors("ib", facts) == []
    errors = nccl_errors("bogus", facts)
    assert len(errors) == 1 and "\n" not in errors[0] and "bogus" in errors[0]


def test_env_does_not_mutate_inputs(facts):
    before = copy.deepcopy(facts)
    overrides = {"NCCL_DEBUG": "WARN"}
    nccl_env("roce", facts, roce=ROCE, overrides=overrides)
    assert facts == before and overrides == {"NCCL_DEBUG": "WARN"}


def test_filter_reads_string_booleans_as_ansible_does(facts):
    """`-e nccl_profile_allow_benchmark_settings=false` arrives as the string "false"."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "plugins" / "filter" / "fabricops.py"
    spec = importlib.util.spec_from_file_location("fabricops_filters", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(Exception, match="NCCL_ALGO"):
        module.nccl_env(facts, "ib", overrides={"NCCL_ALGO": "Ring"}, allow_benchmark="false")
    env = module.nccl_env(facts, "ib", overrides={"NCCL_ALGO": "Ring"}, allow_benchmark="true")
    assert env["NCCL_ALGO"] == "Ring"


def test_gpudirect_sets_gdr_level_phb_in_ib_transport_profiles_only(facts):
    assert "NCCL_NET_GDR_LEVEL" not in nccl_env("ib", facts)
    assert nccl_env("ib", facts, gpudirect=True)["NCCL_NET_GDR_LEVEL"] == "PHB"
    assert nccl_env("roce", facts, roce=ROCE, gpudirect=True)["NCCL_NET_GDR_LEVEL"] == "PHB"
    # TCP only: no NIC to do GPUDirect RDMA through
    assert "NCCL_NET_GDR_LEVEL" not in nccl_env("socket", facts, socket_ifname="=eno1", gpudirect=True)
    # the site's own choice wins, and null removes it
    env = nccl_env("ib", facts, gpudirect=True, overrides={"NCCL_NET_GDR_LEVEL": "SYS"})
    assert env["NCCL_NET_GDR_LEVEL"] == "SYS"
    assert "NCCL_NET_GDR_LEVEL" not in nccl_env("ib", facts, gpudirect=True,
                                                 overrides={"NCCL_NET_GDR_LEVEL": None})
    assert list(nccl_env("ib", facts, gpudirect=True)) == sorted(nccl_env("ib", facts, gpudirect=True))


def test_filter_passes_the_gpudirect_fact(facts):
    """nccl_profile_gpudirect is a bool (the role's lsmod check) or, from -e, a string."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "plugins" / "filter" / "fabricops.py"
    spec = importlib.util.spec_from_file_location("fabricops_filters", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.nccl_env(facts, "ib", None, "", {}, False, True)["NCCL_NET_GDR_LEVEL"] == "PHB"
    assert "NCCL_NET_GDR_LEVEL" not in module.nccl_env(facts, "ib", None, "", {}, False, "false")
    assert "NCCL_NET_GDR_LEVEL" not in module.nccl_env(facts, "ib")
    assert module.nccl_profile_errors(facts, "ib", None, "", {}, False, "true") == []
