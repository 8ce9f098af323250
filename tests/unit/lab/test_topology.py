"""Topology files: the default rack, scaling, and one clear error per kind of mistake."""

from __future__ import annotations

import copy

import pytest
import yaml

from fabricops.errors import FabricopsError
from fabricops_lab import topology
from fabricops_lab.topology import TopologyError


@pytest.fixture
def raw():
    return yaml.safe_load(topology.DEFAULT_TOPOLOGY.read_text())


def test_default_rack_shape():
    topo = topology.load()
    assert [h["name"] for h in topo["hosts"]] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert [h["mgmt_ip"] for h in topo["hosts"]] == [f"198.51.100.{10 + i}" for i in range(1, 5)]
    h = topo["hosts"][0]
    assert h["gpus"] == {
        "model": "NVIDIA H100 80GB HBM3",
        "count": 8,
        "nvlink_gen": 4,
        "topology": "nvswitch",
        "memory_mib": 81559,
        "nvlinks": 18,
    }
    ports = {p["netdev"]: (hca["name"], p) for hca in h["hcas"] for p in hca["ports"]}
    assert set(ports) == {"ibp26s0", "ibp60s0", "enp170s0f0np0", "enp170s0f1np1"}
    ib = ports["ibp26s0"][1]
    assert (ib["link_layer"], ib["speed"], ib["width"], ib["rate_gbps"]) == ("InfiniBand", "NDR", "4X", 400)
    roce = ports["enp170s0f1np1"][1]
    assert (roce["link_layer"], roce["rate_gbps"], roce["rail"], roce["address"], roce["prefix"]) == (
        "Ethernet",
        400,
        1,
        "203.0.113.65",
        26,
    )
    sw = {s["name"]: s for s in topo["switches"]}
    assert sw["ib-sw1"]["os"] == "ib" and len(sw["ib-sw1"]["ports"]) == 64
    assert sw["leaf-onyx"]["ports"][0] == "Eth1/1" and sw["leaf-onyx"]["ports"][-1] == "Eth1/32"
    assert sw["leaf-cumulus"]["ports"][63] == "swp64" and sw["leaf-cumulus"]["os"] == "cumulus"
    assert [s["mgmt_ip"] for s in topo["switches"]] == ["198.51.100.201", "198.51.100.202", "198.51.100.203"]
    onyx = [c for c in topo["cabling"] if c["switch"] == "leaf-onyx"]
    assert [(c["host"], c["netdev"], c["hca"], c["switch_port"]) for c in onyx] == [
        (f"gpu0{i}", "enp170s0f0np0", "mlx5_2", f"Eth1/{i}") for i in range(1, 5)
    ]
    assert all(c["netdev"] == "enp170s0f1np1" for c in topo["cabling"] if c["switch"] == "leaf-cumulus")


def test_load_is_deterministic():
    assert topology.load() == topology.load()


@pytest.mark.parametrize("n", [1, 4, 16, 40])
def test_scaled_keeps_shape_and_grows_ports(n):
    topo = topology.scaled(n)
    assert len(topo["hosts"]) == n
    assert topo["hosts"][-1]["name"] == f"gpu{n:02d}"
    assert len(topo["cabling"]) == 4 * n
    sw = {s["name"]: s for s in topo["switches"]}
    assert len(sw["leaf-onyx"]["ports"]) == max(32, n)
    assert len(sw["ib-sw1"]["ports"]) == max(64, 2 * n)
    last = [c for c in topo["cabling"] if c["host"] == f"gpu{n:02d}"]
    assert {(c["switch"], c["switch_port"]) for c in last} == {
        ("ib-sw1", str(2 * n - 1)),
        ("ib-sw1", str(2 * n)),
        ("leaf-onyx", f"Eth1/{n}"),
        ("leaf-cumulus", f"swp{n}"),
    }


def test_scaled_4_equals_default():
    assert topology.scaled(4)["cabling"] == topology.load()["cabling"]


@pytest.mark.parametrize("n", [0, 64, -1])
def test_scaled_out_of_range(n):
    with pytest.raises(TopologyError, match=r"--hosts: .* out of range 1\.\.63"):
        topology.scaled(n)


def _err(raw) -> str:
    with pytest.raises(TopologyError) as info:
        topology.normalise(raw, source="t.yml")
    msg = str(info.value)
    assert msg.startswith("topology t.yml: ")
    assert "\n" not in msg
    return msg


def test_unknown_top_key(raw):
    raw["hostz"] = []
    assert "hostz: unknown key" in _err(raw)


def test_missing_section(raw):
    del raw["switches"]
    assert _err(raw).endswith("switches: is required")


def test_bad_ib_speed_names_key_path(raw):
    raw["host_profiles"]["hgx-h100"]["hcas"][0]["ports"][0]["speed"] = "NDX"
    msg = _err(raw)
    assert "host_profiles.hgx-h100.hcas[0].ports[0].speed: 'NDX' is not an InfiniBand speed" in msg


def test_bad_ethernet_speed(raw):
    raw["host_profiles"]["hgx-h100"]["hcas"][2]["ports"][0]["speed"] = "NDR"
    assert "hcas[2].ports[0].speed: 'NDR' is not an Ethernet speed" in _err(raw)


def test_bad_link_layer(raw):
    raw["host_profiles"]["hgx-h100"]["hcas"][1]["ports"][0]["link_layer"] = "Infiniband"
    assert "hcas[1].ports[0].link_layer: 'Infiniband' is not a link layer" in _err(raw)


def test_host_override_path(raw):
    raw["hosts"][2]["hcas"] = [
        {
            "name": "mlx5_0",
            "ports": [{"link_layer": "InfiniBand", "speed": "HDR", "width": "3X", "netdev": "ibp26s0"}],
        }
    ]
    assert "hosts[2].hcas[0].ports[0].width: '3X' is not a link width" in _err(raw)


def test_duplicate_host(raw):
    raw["hosts"][3]["name"] = "gpu01"
    assert "hosts[3].name: 'gpu01' is already used by hosts[0]" in _err(raw)


def test_bad_host_name(raw):
    raw["hosts"][0]["name"] = "GPU_01"
    assert "hosts[0].name: 'GPU_01' is not a valid host name" in _err(raw)


def test_unknown_profile(raw):
    raw["hosts"][1]["profile"] = "dgx"
    assert "hosts[1].profile: 'dgx' is not defined under host_profiles" in _err(raw)


def test_netdev_too_long(raw):
    raw["host_profiles"]["hgx-h100"]["hcas"][0]["ports"][0]["netdev"] = "ibp26s0verylongname"
    assert "ports[0].netdev: 'ibp26s0verylongname' is not a valid netdev name" in _err(raw)


def test_duplicate_netdev(raw):
    raw["host_profiles"]["hgx-h100"]["hcas"][1]["ports"][0]["netdev"] = "ibp26s0"
    assert "hcas[1].ports[0].netdev: 'ibp26s0' appears twice on this host" in _err(raw)


def test_unknown_gpu_model(raw):
    raw["host_profiles"]["hgx-h100"]["gpus"]["model"] = "NVIDIA X999"
    assert "gpus.model: 'NVIDIA X999' is not a known GPU model" in _err(raw)


def test_gpu_count_type(raw):
    raw["host_profiles"]["hgx-h100"]["gpus"]["count"] = "eight"
    assert "gpus.count: must be an integer, not a string" in _err(raw)


def test_bad_switch_os(raw):
    raw["switches"][1]["os"] = "eos"
    assert "switches[1].os: 'eos' is not a switch OS (one of onyx, cumulus, ib)" in _err(raw)


def test_port_format_needs_n(raw):
    raw["switches"][0]["ports"] = {"format": "Eth1/", "count": 4}
    assert "switches[0].ports.format: 'Eth1/' must contain {n}" in _err(raw)


def test_cable_to_missing_switch_port(raw):
    raw["cabling"][2]["port"] = "Eth1/99"
    assert "cabling[2].port: leaf-onyx has no port 'Eth1/99'" in _err(raw)


def test_cable_unknown_netdev(raw):
    raw["cabling"][0]["netdev"] = "ib0"
    assert "cabling[0].netdev: gpu01 has no HCA port with netdev 'ib0'" in _err(raw)


def test_cable_link_layer_mismatch(raw):
    raw["cabling"][0]["switch"] = "leaf-onyx"
    raw["cabling"][0]["port"] = "Eth1/20"
    assert (
        "cabling[0].switch: InfiniBand port gpu01:ibp26s0 cannot be cabled to onyx switch leaf-onyx"
        in _err(raw)
    )


def test_switch_port_cabled_twice(raw):
    raw["cabling"][6]["port"] = "Eth1/1"
    assert "cabling[6].port: leaf-onyx:Eth1/1 is already cabled by cabling[2]" in _err(raw)


def test_not_a_mapping():
    assert "must be a mapping, not a list" in _err([1, 2])


def test_load_missing_file(tmp_path):
    with pytest.raises(FabricopsError, match="cannot read"):
        topology.load(tmp_path / "nope.yml")


def test_load_invalid_yaml(tmp_path):
    f = tmp_path / "t.yml"
    f.write_text("hosts: [\n  - name: x\n bad")
    with pytest.raises(TopologyError, match=r"is not valid YAML at line \d+"):
        topology.load(f)


def test_small_custom_topology(raw):
    custom = {
        "name": "tiny",
        "hosts": [
            {
                "name": "a1",
                "gpus": {"model": "NVIDIA A100-SXM4-80GB", "count": 4},
                "hcas": [
                    {
                        "name": "mlx5_0",
                        "model": "ConnectX-6",
                        "ports": [
                            {"link_layer": "InfiniBand", "speed": "HDR", "width": "2X", "netdev": "ib0"}
                        ],
                    }
                ],
            }
        ],
        "switches": [{"name": "qm", "os": "ib", "ports": ["p1", "p2"]}],
        "cabling": [{"host": "a1", "netdev": "ib0", "switch": "qm", "port": "p2"}],
    }
    topo = topology.normalise(copy.deepcopy(custom))
    port = topo["hosts"][0]["hcas"][0]["ports"][0]
    assert port["rate_gbps"] == 100  # HDR100: two HDR lanes
    assert topo["hosts"][0]["gpus"]["nvlink_gen"] == 3 and topo["hosts"][0]["gpus"]["nvlinks"] == 12
    assert topo["cabling"] == [
        {"host": "a1", "netdev": "ib0", "hca": "mlx5_0", "port": 1, "switch": "qm", "switch_port": "p2"}
    ]


def test_subnet_manager_default_and_explicit(raw):
    assert raw["subnet_manager"] == "switch"  # written out in the default rack
    assert topology.normalise(raw)["subnet_manager"] == "switch"
    del raw["subnet_manager"]
    assert topology.normalise(raw)["subnet_manager"] == "switch"
    raw["subnet_manager"] = "hosts"
    assert topology.normalise(raw)["subnet_manager"] == "hosts"


def test_subnet_manager_bad_value(raw):
    raw["subnet_manager"] = "ufm"
    assert "subnet_manager: 'ufm' is not a subnet manager placement (one of switch, hosts)" in _err(raw)


def test_subnet_manager_hosts_needs_one_ib_switch(raw):
    raw["subnet_manager"] = "hosts"
    raw["switches"].append({"name": "ib-sw2", "os": "ib", "model": "QM9700",
                            "ports": {"format": "{n}", "count": 64}})
    for c in raw["cabling"]:
        if c["netdev"] == "ibp60s0":
            c["switch"] = "ib-sw2"
    msg = _err(raw)
    assert "subnet_manager: 'hosts' needs every InfiniBand cable on one ib switch" in msg
    assert msg.endswith("cabled to ib-sw1, ib-sw2")
    raw["subnet_manager"] = "switch"  # a switch per subnet runs its SM: fine
    assert topology.normalise(raw)["subnet_manager"] == "switch"
