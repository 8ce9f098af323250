"""fabricops.services and the sminfo parser (docs/fabric-services.md)."""

from __future__ import annotations

import pytest
from captures import read_fixture

from fabricops import services as svc
from fabricops.errors import ParseError
from fabricops.parsers import sminfo

# --- sminfo -------------------------------------------------------------------------------------


def test_sminfo_real_switch_sm():
    rec = sminfo.parse(read_fixture("sminfo", "oracle-bda-switch-sm.txt"))
    assert (rec.lid, rec.guid, rec.activity_count, rec.priority, rec.state, rec.state_name) == (
        15,
        "0x0010e0406d5aa0a0",
        26263191,
        14,
        3,
        "SMINFO_MASTER",
    )
    assert rec.is_master


def test_sminfo_real_wrapped_line():
    rec = sminfo.parse(read_fixture("sminfo", "ompi-users-2008-n01.txt"))
    assert (rec.lid, rec.guid, rec.activity_count, rec.priority, rec.state) == (
        2,
        "0x0002c90200259201",
        6881,
        0,
        3,
    )


def test_sminfo_standby_crlf_and_ibwarn():
    text = (
        "ibwarn: [123] something\r\nsminfo: sm lid 7 sm guid 0xb83fd20300a00200, activity count 5 "
        "priority 14 state 2 SMINFO_STANDBY\r\n"
    )
    rec = sminfo.parse(text)
    assert (rec.lid, rec.priority, rec.state_name, rec.is_master) == (7, 14, "SMINFO_STANDBY", False)


@pytest.mark.parametrize(
    "text, detail",
    [
        ("", "empty"),
        ("sminfo: iberror: failed: query", "no SMInfo answer"),
        ("CA 'mlx5_0'\n\tCA type: MT4129\n", "got"),
        ("sminfo: sm lid 1 sm guid 0x1, activity count 3 priority 15 state 3", "no state name"),
        ("sminfo: sm lid 1 sm guid 0x1, activity count 3 priority 15 state 3 SMINFO_STANDBY", "printed as"),
        ("sminfo: sm lid 1 sm guid 0x1, activity", "truncated"),
    ],
)
def test_sminfo_refuses(text, detail):
    with pytest.raises(ParseError, match=detail):
        sminfo.parse(text)


# --- subnet manager -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "topology, engine", [("fat_tree", "ftree"), ("single_switch", "minhop"), ("other", "updn")]
)
def test_routing_engine_for_topology(topology, engine):
    assert svc.routing_engine(topology) == engine


def test_routing_engine_override_and_errors():
    assert svc.routing_engine("fat_tree", "updn") == "updn"
    with pytest.raises(ValueError, match="not one of OpenSM"):
        svc.routing_engine("fat_tree", "fasttree")
    with pytest.raises(ValueError, match="topology 'torus'"):
        svc.routing_engine("torus")


def test_plan_refuses_same_priority_and_bad_values():
    errs = svc.plan_errors([{"host": "a", "priority": 15}, {"host": "b", "priority": 15}])
    assert errs == [
        "b and a both run OpenSM with priority 15: give the master a higher priority than the "
        "standby (e.g. 15 and 14)"
    ]
    assert svc.plan_errors([{"host": "a", "priority": 15}, {"host": "b", "priority": 14}]) == []
    assert "outside 0..15" in svc.plan_errors([{"host": "a", "priority": 16}])[0]
    assert svc.plan_errors([]) and "no host" in svc.plan_errors([])[0]
    dup = svc.plan_errors(
        [{"host": "a", "priority": 15, "guid": "0x1"}, {"host": "b", "priority": 14, "guid": "1"}]
    )
    assert dup == ["b and a bind OpenSM to the same port GUID 0x0000000000000001"]


FABRIC = {
    "gpu_count": 8,
    "hcas": [
        {
            "name": "mlx5_0",
            "node_guid": "b83f:d203:00a0:0200",
            "ports": [
                {
                    "port": 1,
                    "link_layer": "InfiniBand",
                    "state": "INIT",
                    "phys_state": "LinkUp",
                    "netdev": "ibp26s0",
                    "gids": [{"index": 0, "gid": "fe80:0000:0000:0000:b83f:d203:00a0:0200"}],
                }
            ],
        },
        {
            "name": "mlx5_1",
            "node_guid": "b83f:d203:00a0:0210",
            "ports": [
                {
                    "port": 1,
                    "link_layer": "InfiniBand",
                    "state": "ACTIVE",
                    "phys_state": "LinkUp",
                    "netdev": "ibp60s0",
                    "gids": [],
                }
            ],
        },
        {
            "name": "mlx5_2",
            "ports": [{"port": 1, "link_layer": "Ethernet", "state": "ACTIVE", "phys_state": "LinkUp"}],
        },
    ],
}


def test_ib_ports_and_bind_port():
    ports = svc.ib_ports(FABRIC)
    assert [(p["hca"], p["guid"]) for p in ports] == [
        ("mlx5_0", "0xb83fd20300a00200"),
        ("mlx5_1", "0xb83fd20300a00210"),
    ]
    assert svc.bind_port(FABRIC)["hca"] == "mlx5_0"
    assert svc.bind_port(FABRIC, hca="mlx5_1")["guid"] == "0xb83fd20300a00210"
    assert svc.bind_port(FABRIC, port_guid="b83f:d203:00a0:0210")["hca"] == "mlx5_1"
    with pytest.raises(ValueError, match="no local InfiniBand port has GUID 0x0000000000000abc"):
        svc.bind_port(FABRIC, port_guid="0xabc")
    with pytest.raises(ValueError, match="no InfiniBand port on this host"):
        svc.bind_port({"hcas": []})


def test_conflict_same_priority_other_port():
    other = sminfo.parse("sminfo: sm lid 1 sm guid 0xaa, activity count 1 priority 15 state 3 SMINFO_MASTER")
    assert "refusing to start a second SM of the same priority" in svc.conflict(other, 15, "0xbb")
    assert svc.conflict(other, 14, "0xbb") is None  # a standby of lower priority is fine
    assert svc.conflict(other, 15, "0xaa") is None  # that is us (re-run)
    assert svc.conflict(None, 15, "0xbb") is None


def test_render_and_parse_conf_roundtrip():
    text = svc.render_conf("b83f:d203:00a0:0200", 15, "ftree", header="managed")
    conf = svc.parse_conf(text)
    assert conf["guid"] == "0xb83fd20300a00200"
    assert conf["sm_priority"] == "15"
    assert conf["routing_engine"] == "ftree"
    assert conf["sweep_interval"] == "10"
    assert text.startswith("# managed\n")
    assert svc.render_conf("0x1", 15, "ftree", header="managed") == svc.render_conf(
        "0x1", 15, "ftree", header="managed"
    )
    with pytest.raises(ValueError):
        svc.render_conf("0x1", 16, "ftree")


def test_verify():
    master = sminfo.parse(
        "sminfo: sm lid 2 sm guid 0xb83fd20300a00200, activity count 1 priority 15 state 3 SMINFO_MASTER"
    )
    ports = svc.ib_ports(FABRIC)
    errs = svc.verify(master, ports, "0xb83fd20300a00200", 15)
    assert errs == ["mlx5_0/1 is INIT with a physical link: no SM has brought it to ACTIVE"]
    active = [dict(p, state="ACTIVE") for p in ports]
    assert svc.verify(master, active, "0xb83fd20300a00200", 15) == []
    assert svc.verify(master, active, "0x5", 15) == [
        "the master SM is 0xb83fd20300a00200, expected 0x0000000000000005"
    ]
    assert svc.verify(None, active) == ["no subnet manager answers sminfo on this subnet"]


# --- fabric manager -----------------------------------------------------------------------------


def test_fm_package_and_upstream():
    assert svc.fm_package("550.54.15") == "nvidia-fabricmanager-550"
    assert svc.upstream("550.54.15-1") == "550.54.15"
    assert svc.upstream("1:535.183.01-1ubuntu1") == "535.183.01"
    with pytest.raises(ValueError):
        svc.driver_branch("banana")


def test_fm_choice_exact_match():
    c = svc.fm_choice("550.54.15", ["550.54.14-1", "550.54.15-1"])
    assert c == {
        "ok": True,
        "version": "550.54.15-1",
        "change": True,
        "msg": "install nvidia-fabricmanager 550.54.15 for driver 550.54.15",
    }
    assert svc.fm_choice("550.54.15", ["550.54.15-1"], "550.54.15-1")["change"] is False


def test_fm_choice_mismatch_names_both_versions():
    c = svc.fm_choice("550.90.07", ["550.54.14-1", "550.54.15-1"])
    assert c["ok"] is False and c["change"] is False
    assert "550.90.07" in c["msg"] and "550.54.14, 550.54.15" in c["msg"]
    c = svc.fm_choice("550.90.07", ["550.54.15-1"], "550.54.15-1")
    assert c["ok"] is False
    assert "nvidia-fabricmanager 550.54.15 is installed but the driver is 550.90.07" in c["msg"]


def test_nvswitch_and_fabric_errors():
    gpus = [
        {"pci_bus_id": "0:18", "fabric_state": "Completed", "fabric_status": "Success"},
        {"pci_bus_id": "0:2A", "fabric_state": "In Progress", "fabric_status": None},
    ]
    assert svc.is_nvswitch_system(gpus)
    assert not svc.is_nvswitch_system([{"fabric_state": None}])
    assert svc.fabric_errors(gpus) == ["GPU 0:2A: Fabric State In Progress, Status None"]


def test_lsmod_modules():
    text = (
        "Module                  Size  Used by\n"
        "nvidia_peermem         16384  0\n"
        "ib_core               434176  2 x,y\n"
    )
    assert svc.lsmod_modules(text) == ["nvidia_peermem", "ib_core"]
    assert svc.gpudirect_applicable(FABRIC)
    assert not svc.gpudirect_applicable({"gpu_count": 0, "hcas": FABRIC["hcas"]})


# `dpkg-query -W -f='${Package}|${Version}|${Status}\n' 'nvidia-fabricmanager-*'`: the Status field
# is dpkg's "want ok state" triplet (dpkg-query(1)); a package dpkg knows but has not installed has
# an empty Version; the first line is the lab host gpu01's real output.
FM_LISTING = (
    "nvidia-fabricmanager-550|550.54.15-1|hold ok installed\n"
    "nvidia-fabricmanager-535|535.183.01-1|deinstall ok config-files\n"
    "nvidia-fabricmanager-5500||unknown ok not-installed\n"
)


def test_fm_installed_reads_one_package_as_dpkg_query_of_it():
    got = svc.fm_installed(FM_LISTING, "nvidia-fabricmanager-550")
    assert got == {"version": {"rc": 0, "stdout": "550.54.15-1"},
                   "selection": {"rc": 0, "stdout": "hold ok installed"}}
    assert svc.fm_installed(FM_LISTING, "nvidia-fabricmanager-535")["selection"]["stdout"] == (
        "deinstall ok config-files")
    # a prefix of another name is not that package; absent (or no listing): rc 1, as dpkg-query says
    absent = {"version": {"rc": 1, "stdout": ""}, "selection": {"rc": 1, "stdout": ""}}
    assert svc.fm_installed(FM_LISTING, "nvidia-fabricmanager-55") == absent
    assert svc.fm_installed("", "nvidia-fabricmanager-550") == absent
    assert svc.fm_installed(FM_LISTING, "nvidia-fabricmanager-5500") == {
        "version": {"rc": 0, "stdout": ""}, "selection": {"rc": 0, "stdout": "unknown ok not-installed"}}


# --- fabric services per GPU platform (issue 38: the one table) -----------------------------------

from fabricops.model.profiles import list_profiles, load_profile  # noqa: E402

EXPECTED_SERVICES = {
    "edr-100": (),
    "hgx-a100-hdr": ("fabric_manager",),
    "hgx-h100-ndr": ("fabric_manager",),
    "hgx-h200-ndr": ("fabric_manager",),
    "roce-400g": ("fabric_manager",),
    "hgx-b200-ndr": ("fabric_manager", "nvlink_subnet_manager"),
    "hgx-b300-xdr": ("fabric_manager", "nvlink_subnet_manager"),
    "gb200-nvl72": ("imex",),
    "gb300-nvl72": ("imex",),
}


def test_every_profile_resolves_to_exactly_one_services_set():
    assert set(list_profiles()) == set(EXPECTED_SERVICES)
    for name in list_profiles():
        row = svc.profile_services(name)
        assert row is not None and row.platform == load_profile(name).platform, name
        assert row.services == EXPECTED_SERVICES[name], name
        assert row.source, name
    # never the host fabric manager and IMEX together; a platform without FM but with an NVLink fabric
    # names what to use instead
    for row in svc.platform_table().values():
        assert not (row.fabric_manager and "imex" in row.services), row.platform
        assert (row.instead is not None) == ("imex" in row.services), row.platform


def test_table_refuses_unknown_platforms_and_services():
    with pytest.raises(ValueError, match=r"GPU platform 'hgx-z100' is not one of .*gb200-nvl72"):
        svc.platform_services("hgx-z100")
    with pytest.raises(ValueError, match="service 'opensm' is not one of fabric_manager"):
        svc.service_packages("opensm", "570.124.06")


def test_fm_refusal_names_host_profile_and_imex():
    assert svc.fm_refusal("gpu-07", "gb200-nvl72") == (
        "gpu-07: hardware profile gb200-nvl72 is a GB200 NVL72 platform, which runs no host fabric "
        "manager (starting one fails provisioning), so use IMEX (nvidia-imex) for multi-node NVLink "
        "instead and leave nvidia_fabric_manager off (fabricops_site_fabric_manager: false)."
    )
    assert "GB300 NVL72" in svc.fm_refusal("t", "gb300-nvl72")
    for allowed in ("", "hgx-h100-ndr", "hgx-b200-ndr", "hgx-b300-xdr", "hgx-a100-hdr", "edr-100"):
        assert svc.fm_refusal("h", allowed) == "", allowed
    assert svc.fm_refusal("h", "hgx-z100").startswith("h: unknown hardware profile 'hgx-z100'")


def test_b200_package_set():
    driver = "570.124.06"
    assert svc.service_packages("fabric_manager", driver) == [
        {"name": "nvidia-fabricmanager-570", "version": driver}]
    assert svc.service_packages("nvlink_subnet_manager", driver) == [
        {"name": "nvlsm", "version": None}, {"name": "libnvsdm-570", "version": driver}]
    assert svc.service_packages("imex", driver) == [{"name": "nvidia-imex-570", "version": driver}]
    # the FM's own package name is the same as fm_package picks
    assert svc.service_packages("fabric_manager", driver)[0]["name"] == svc.fm_package(driver)
    assert svc.fm_companion_patterns("hgx-b200-ndr") == ["nvlsm", "libnvsdm-*"]
    assert svc.fm_companion_patterns("hgx-h100-ndr") == [] and svc.fm_companion_patterns("") == []
    assert [c["spec"] for c in svc.fm_companions("hgx-b200-ndr", driver, "")] == [
        "nvlsm", "libnvsdm-570=570.124.06-*"]
    assert svc.fm_companions("hgx-h100-ndr", driver, "") == []


def test_companions_only_what_is_not_installed_as_wanted():
    driver = "570.124.06"
    done = ("nvidia-fabricmanager-570|570.124.06-1|hold ok installed\n"
            "nvlsm|2025.06.5-1|install ok installed\n"
            "libnvsdm-570|570.124.06-1|install ok installed\n")
    assert svc.fm_companions("hgx-b300-xdr", driver, done) == []  # idempotent: a second run installs nothing
    old = done.replace("libnvsdm-570|570.124.06-1", "libnvsdm-570|570.86.15-1")
    assert svc.fm_companions("hgx-b200-ndr", driver, old) == [
        {"name": "libnvsdm-570", "version": driver, "spec": "libnvsdm-570=570.124.06-*"}]
    removed = done.replace("nvlsm|2025.06.5-1|install ok installed", "nvlsm||deinstall ok config-files")
    assert [c["name"] for c in svc.fm_companions("hgx-b200-ndr", driver, removed)] == ["nvlsm"]
