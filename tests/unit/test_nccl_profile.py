"""fabricops.nccl: named profile + fabric facts (built by fabricops.facts) + overrides -> NCCL env."""

from __future__ import annotations

import copy

import pytest
from captures import read_fixture

from fabricops.facts import build_facts
from fabricops.nccl import (
    NcclProfileError,
    nccl_env,
    nccl_errors,
    roce_tos,
    route_interface,
    socket_ifname_default,
)

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


@pytest.mark.parametrize(("name", "iface"), [("debian12-iproute2-6.1-via-gateway.txt", "eth0"),
                                             ("debian12-iproute2-6.1-on-link.txt", "eth0")])
def test_socket_ifname_default_from_a_live_route_read(name, iface):
    route = read_fixture("ip-route-get", name)
    assert route_interface(route) == iface
    # the live read wins over a gathered (possibly cached) fact
    assert socket_ifname_default({"default_ipv4": {"interface": "eno9"}}, route=route) == f"={iface}"


def test_no_route_gives_no_default():
    # `ip -4 route get` with no route: rc 2, nothing on stdout (the role passes '')
    assert route_interface("") is None
    assert socket_ifname_default({"default_ipv4": {"interface": "eno9"}}, route="") is None
    assert route_interface("8.8.8.8 via 10.0.0.1 src 10.0.0.5 uid 0") is None


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


# --- issue 19: rules that follow the NCCL version and the rail plan ------------------------------

from fabricops.nccl import build, installed_version, nccl_notes, parse_version, rail_optimised  # noqa: E402


def _mixed_gids():
    raw = _raw()
    raw["infiniband"]["mlx5_5"]["ports"]["1"]["gids"] = _roce_gids("enp170s0f1np1", v2_index=7)
    return build_facts(raw)


@pytest.mark.parametrize("version", ["2.21.5", "2.21.5-1", "2.23.4", "2.30.7"])
def test_nccl_that_selects_the_gid_itself_gets_no_gid_index(version):
    """From 2.21.5 on NCCL picks each HCA's GID (AF_INET, RoCE v2): mixed indexes are fine."""
    env, notes = build("roce", _mixed_gids(), roce=ROCE, nccl_version=version)
    assert "NCCL_IB_GID_INDEX" not in env
    assert env["NCCL_IB_ADDR_FAMILY"] == "AF_INET" and env["NCCL_IB_ROCE_VERSION_NUM"] == "2"
    assert any("selects each HCA" in n and "mlx5_4:1 3, mlx5_5:1 7" in n for n in notes), notes


@pytest.mark.parametrize("version", ["2.21.4", "2.20.5", "2.18.6-1"])
def test_older_nccl_with_mixed_gid_indexes_is_refused_naming_hcas_and_fix(version):
    with pytest.raises(NcclProfileError) as exc:
        nccl_env("roce", _mixed_gids(), roce=ROCE, nccl_version=version)
    msg = str(exc.value)
    assert "GID indexes (3: mlx5_4:1; 7: mlx5_5:1)" in msg
    assert f"NCCL {parse_version(version)[0]}." in msg and "upgrade NCCL to 2.21.5" in msg
    assert "\n" not in msg


def test_older_nccl_with_one_gid_index_pins_it(facts):
    env, notes = build("roce", facts, roce=ROCE, nccl_version="2.21.4")
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert "NCCL_IB_ADDR_FAMILY" not in env and "NCCL_IB_ROCE_VERSION_NUM" not in env
    assert any("older than 2.21.5" in n for n in notes)


def test_unknown_nccl_version_is_the_conservative_rule_and_says_so(facts):
    env, notes = build("roce", facts, roce=ROCE, nccl_version="")
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert any("NCCL version is unknown" in n and "conservative" in n for n in notes), notes
    with pytest.raises(NcclProfileError, match="the NCCL version is unknown"):
        nccl_env("roce", _mixed_gids(), roce=ROCE)


def test_gid_index_override_wins_over_the_version_rule():
    env = nccl_env("roce", _mixed_gids(), roce=ROCE, nccl_version="2.23.4",
                   overrides={"NCCL_IB_GID_INDEX": 7})
    assert env["NCCL_IB_GID_INDEX"] == "7"


def test_a_port_without_ipv4_gid_is_refused_whatever_the_version():
    raw = _raw()
    raw["infiniband"]["mlx5_5"]["ports"]["1"]["gids"] = _roce_gids("enp170s0f1np1", ipv4_mapped=False)
    with pytest.raises(NcclProfileError, match=r"mlx5_5:1 \(enp170s0f1np1\) has no IPv4 RoCE v2 GID"):
        nccl_env("roce", build_facts(raw), roce=ROCE, nccl_version="2.23.4")


def test_installed_version_is_the_newest_library_file():
    assert installed_version([
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2.18.6",
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2.23.4",
        "/usr/local/cuda/lib64/libnccl.so.2.9.10",
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
        "/usr/lib/x86_64-linux-gnu/libnccl-net.so",
    ]) == "2.23.4"
    assert installed_version(["libnccl.so.2", "libnccl.so"]) is None
    assert installed_version([]) is None
    with pytest.raises(NcclProfileError, match="not an NCCL version"):
        parse_version("2.23")


def _cabling(host="gpu01"):
    """The lab's plan: IB on one switch, RoCE one leaf per NIC index (rail-optimised)."""
    out = []
    for h, n in ((host, 1), ("gpu02", 3)):
        out += [
            {"host": h, "hca": "mlx5_2", "port": 1, "switch": "ib-sw1", "switch_port": str(n)},
            {"host": h, "hca": "mlx5_10", "port": 1, "switch": "ib-sw1", "switch_port": str(n + 1)},
            {"host": h, "hca": "mlx5_4", "port": 1, "switch": "leaf-a", "switch_port": f"Eth1/{n}"},
            {"host": h, "hca": "mlx5_5", "port": 1, "switch": "leaf-b", "switch_port": f"swp{n}"},
        ]
    return out


def test_ib_hca_is_the_active_ports_of_the_planned_rails():
    raw = _raw()
    raw["infiniband"]["mlx5_1"]["ports"]["1"]["state"] = "4: ACTIVE"  # up, but on no planned rail
    env, notes = build("ib", build_facts(raw), cabling=_cabling(), host="gpu01")
    assert env["NCCL_IB_HCA"] == "=mlx5_2:1,mlx5_10:1"
    assert any("mlx5_1:1 ACTIVE but on no planned rail" in n for n in notes), notes


def test_a_planned_port_that_is_down_is_reported_not_silently_dropped():
    raw = _raw()
    raw["infiniband"]["mlx5_5"]["ports"]["1"]["state"] = "1: DOWN"
    env, notes = build("roce", build_facts(raw), roce=ROCE, cabling=_cabling(), host="gpu01")
    assert env["NCCL_IB_HCA"] == "=mlx5_4:1"
    warn = [n for n in notes if n.startswith("WARNING:")]
    assert warn == ["WARNING: planned port mlx5_5:1 (rail on leaf-b) is not ACTIVE: left out of "
                    "NCCL_IB_HCA; bring it up and run the role again"]


def test_every_planned_port_down_is_refused():
    raw = _raw()
    for dev in ("mlx5_4", "mlx5_5"):
        raw["infiniband"][dev]["ports"]["1"]["state"] = "1: DOWN"
    raw["infiniband"]["mlx5_9"] = {"netdevs": ["enp9"], "ports": {"1": _port("4: ACTIVE", "Ethernet",
                                                                              _roce_gids("enp9"))}}
    with pytest.raises(NcclProfileError, match="no port of the planned rails is ACTIVE"):
        nccl_env("roce", build_facts(raw), roce=ROCE, cabling=_cabling(), host="gpu01")


def test_a_planned_hca_missing_from_the_host_is_reported(facts):
    cabling = [*_cabling(), {"host": "gpu01", "hca": "mlx5_7", "port": 1, "switch": "leaf-c"}]
    _env, notes = build("roce", facts, roce=ROCE, cabling=cabling, host="gpu01")
    assert any(n.startswith("WARNING: planned port mlx5_7:1 (cabled to leaf-c) is not on this host")
               for n in notes), notes


def test_without_a_plan_for_the_host_every_active_port_is_listed(facts):
    env, notes = build("ib", facts, cabling=_cabling(host="gpu09")[4:], host="gpu01")
    assert env["NCCL_IB_HCA"] == "=mlx5_2:1,mlx5_10:1"
    assert "NCCL_CROSS_NIC" not in env
    assert any("plans no port of this host" in n for n in notes)


def test_cross_nic_0_on_a_rail_optimised_plan_only(facts):
    roce_env, roce_notes = build("roce", facts, roce=ROCE, cabling=_cabling(), host="gpu01")
    assert roce_env["NCCL_CROSS_NIC"] == "0"
    assert any("rail-optimised (mlx5_4:1 on leaf-a, mlx5_5:1 on leaf-b)" in n for n in roce_notes)
    ib_env, ib_notes = build("ib", facts, cabling=_cabling(), host="gpu01")
    assert "NCCL_CROSS_NIC" not in ib_env  # both IB ports on ib-sw1: NCCL's default
    assert any("not rail-optimised (mlx5_2:1, mlx5_10:1 on ib-sw1)" in n for n in ib_notes), ib_notes


def test_a_leaf_that_carries_two_nic_indexes_is_warned_about(facts):
    cabling = _cabling()
    cabling[-1]["switch"] = "leaf-a"  # gpu02's mlx5_5 on gpu01's mlx5_4 leaf
    env, notes = build("roce", facts, roce=ROCE, cabling=cabling, host="gpu01")
    assert env["NCCL_CROSS_NIC"] == "0"  # this host follows the rails; verify judges the same way
    assert [n for n in notes if n.startswith("WARNING:")] == [
        "WARNING: leaf-a (rail of mlx5_4:1) also carries mlx5_5:1 of other hosts: the cabling does not "
        "follow the rails; check it with fabricops verify --only cabling"]
    _env, notes = build("roce", facts, roce=ROCE, cabling=_cabling(), host="gpu01")
    assert not [n for n in notes if n.startswith("WARNING:")]
    assert rail_optimised({"mlx5_4:1": "leaf-a", "mlx5_5:1": "leaf-b"})[0]
    assert not rail_optimised({"mlx5_4:1": "leaf-a"})[0]
    assert not rail_optimised({"mlx5_4:1": "leaf-a", "mlx5_5:1": None})[0]


def test_cross_nic_can_be_chosen_or_refused(facts):
    assert nccl_env("ib", facts, cabling=_cabling(), host="gpu01", cross_nic=1)["NCCL_CROSS_NIC"] == "1"
    assert "NCCL_CROSS_NIC" not in nccl_env("roce", facts, roce=ROCE, cabling=_cabling(), host="gpu01",
                                            cross_nic=None)
    with pytest.raises(NcclProfileError, match="must be auto, 0, 1 or 2"):
        nccl_env("ib", facts, cross_nic="yes")


def test_net_plugin_is_written_when_decided(facts):
    env, notes = build("ib", facts, net_plugin="none")
    assert env["NCCL_NET_PLUGIN"] == "none"
    assert any("internal IB/socket transport" in n for n in notes)
    sharp = "libnccl-net-sharp.so"
    assert nccl_env("ib", facts, net_plugin=sharp)["NCCL_NET_PLUGIN"] == sharp
    assert "NCCL_NET_PLUGIN" not in nccl_env("ib", facts, net_plugin="")
    with pytest.raises(NcclProfileError, match="not a plugin suffix"):
        nccl_env("ib", facts, net_plugin="x;id")


def test_notes_are_empty_when_the_profile_cannot_be_built(facts):
    assert nccl_notes("bogus", facts) == []


def _filters():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "plugins" / "filter" / "fabricops.py"
    spec = importlib.util.spec_from_file_location("fabricops_filters_19", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_filters_take_the_plan_as_the_role_passes_it():
    module = _filters()
    facts = _mixed_gids()
    plan = {"nccl_version": "2.23.4", "cabling": _cabling(), "host": "gpu01", "cross_nic": "auto",
            "net_plugin": "none"}
    env = module.nccl_env(facts, "roce", ROCE, "", {}, False, False, plan)
    assert "NCCL_IB_GID_INDEX" not in env and env["NCCL_CROSS_NIC"] == "0"
    assert env["NCCL_NET_PLUGIN"] == "none"
    old = dict(plan, nccl_version="2.20.5")
    errors = module.nccl_profile_errors(facts, "roce", ROCE, "", {}, False, False, old)
    assert len(errors) == 1 and "upgrade NCCL to 2.21.5" in errors[0]
    assert any("NCCL_CROSS_NIC=0" in n for n in module.nccl_profile_notes(facts, "roce", ROCE, "", {}, False,
                                                                          False, plan))
    assert module.nccl_profile_errors(facts, "roce", ROCE, "", {}, False, False, {"bogus": 1}) != []
    found = [{"path": "/usr/lib64/libnccl.so.2.23.4"}, "libnccl.so.2"]
    assert module.nccl_installed_version(found) == "2.23.4"
    assert module.nccl_installed_version([]) == ""


def test_gid_index_is_the_lowest_ipv4_roce_v2_entry_as_nccl_picks_it():
    """Two IPv4 addresses on a netdev, the table read out of order: the lowest index wins (NCCL's scan)."""
    raw = _raw()
    for dev in ("mlx5_4", "mlx5_5"):
        netdev = raw["infiniband"][dev]["netdevs"][0]
        gids = _roce_gids(netdev, v2_index=5) + _roce_gids(netdev, v2_index=3)[2:]
        raw["infiniband"][dev]["ports"]["1"]["gids"] = gids  # indexes 0, 1, 4, 5, 2, 3
    assert nccl_env("roce", build_facts(raw), roce=ROCE)["NCCL_IB_GID_INDEX"] == "3"
