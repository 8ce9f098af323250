"""hardware.json generation: the contract's schema, deterministic identifiers, affinities."""

from __future__ import annotations

import json

import pytest
import yaml

from fabricops_lab import hardware, topology

HCA_KEYS = {
    "name",
    "hca_type",
    "vendor_id",
    "vendor_part_id",
    "fw_ver",
    "board_id",
    "psid",
    "node_guid",
    "sys_image_guid",
    "pci",
    "numa_node",
    "node_desc",
    "ports",
}
PORT_KEYS = {
    "port",
    "link_layer",
    "netdev",
    "speed",
    "width",
    "rate_gbps",
    "state",
    "phys_state",
    "lid",
    "sm_lid",
    "port_guid",
    "active_mtu",
    "max_mtu",
    "mac",
    "link_flaps",
    "symbol_errors",
}
GPU_KEYS = {
    "index",
    "name",
    "uuid",
    "serial",
    "pci_bus_id",
    "memory_mib",
    "numa_node",
    "cpu_affinity",
    "nvlink_gen",
    "nvlinks",
    "inactive_nvlinks",
}


@pytest.fixture(scope="module")
def topo():
    return topology.load()


@pytest.fixture(scope="module")
def hw2(topo):
    return hardware.hardware_json(topo, topo["hosts"][1], kernel="6.1.0-18-amd64")


def test_schema(hw2):
    assert set(hw2) == {
        "host",
        "kernel",
        "hcas",
        "gpus",
        "gpu_topology",
        "driver_version",
        "cuda_version",
        "nic_affinity",
        "subnet_manager",
        "pcie",
        "gpu_kernel_module",
    }
    assert hw2["gpu_kernel_module"] == "open"
    assert hw2["host"] == "gpu02" and hw2["kernel"] == "6.1.0-18-amd64"
    assert hw2["subnet_manager"] == "switch"  # the default rack's Quantum-2 runs the SM
    assert (hw2["driver_version"], hw2["cuda_version"], hw2["gpu_topology"]) == (
        "550.54.15",
        "12.4",
        "nvswitch",
    )
    for hca in hw2["hcas"]:
        assert set(hca) == HCA_KEYS
        for p in hca["ports"]:
            assert set(p) == PORT_KEYS
    for g in hw2["gpus"]:
        assert set(g) == GPU_KEYS
    json.dumps(hw2)  # serialisable


def test_ib_port(hw2):
    hca = hw2["hcas"][0]
    assert (hca["name"], hca["hca_type"], hca["vendor_part_id"], hca["fw_ver"]) == (
        "mlx5_0",
        "MT4129",
        4129,
        "28.39.1002",
    )
    assert hca["node_guid"] == "b83f:d203:00a0:0200" == hca["sys_image_guid"]
    assert hca["pci"] == "0000:1a:00.0" and hca["numa_node"] == 0  # ibp26s0 = bus 0x1a
    assert hca["node_desc"] == "gpu02 mlx5_0"
    p = hca["ports"][0]
    assert (p["state"], p["phys_state"], p["rate_gbps"], p["width"], p["speed"]) == (
        "ACTIVE",
        "LinkUp",
        400,
        "4X",
        "NDR",
    )
    assert p["port_guid"] == hca["node_guid"] and p["mac"] is None
    # LIDs: SM switch is 1, gpu01 has 2 and 3, so gpu02's first IB port is 4
    assert (p["lid"], p["sm_lid"]) == (4, 1)
    assert hw2["hcas"][1]["ports"][0]["lid"] == 5


def test_roce_port(hw2):
    hca = hw2["hcas"][2]
    assert hca["pci"] == "0000:aa:00.0" and hca["numa_node"] == 1  # enp170s0f0np0
    assert hw2["hcas"][3]["pci"] == "0000:aa:00.1"
    p = hca["ports"][0]
    assert (p["link_layer"], p["speed"], p["rate_gbps"], p["lid"]) == ("Ethernet", "400GbE", 400, 0)
    assert p["mac"] == "b8:3f:d2:a0:02:20"  # node GUID without its 03:00
    assert hca["node_guid"] == "b83f:d203:00a0:0220"


def test_gpus(hw2):
    gpus = hw2["gpus"]
    assert len(gpus) == 8 and all(g["name"] == "NVIDIA H100 80GB HBM3" for g in gpus)
    assert [g["pci_bus_id"] for g in gpus] == [
        f"00000000:{b}:00.0" for b in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
    ]
    assert [g["numa_node"] for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert gpus[0]["cpu_affinity"] == "0-55,112-167" and gpus[7]["cpu_affinity"] == "56-111,168-223"
    assert all(g["memory_mib"] == 81559 and g["nvlinks"] == 18 and g["nvlink_gen"] == 4 for g in gpus)
    assert len({g["uuid"] for g in gpus}) == 8 and all(g["uuid"].startswith("GPU-") for g in gpus)


def test_nic_affinity(hw2):
    assert hw2["nic_affinity"] == {"mlx5_0": [0, 1], "mlx5_1": [2, 3], "mlx5_2": [4, 5], "mlx5_3": [6, 7]}


def test_deterministic_and_unique(topo):
    a = [hardware.hardware_json(topo, h, kernel="k") for h in topo["hosts"]]
    b = [hardware.hardware_json(topo, h, kernel="k") for h in topo["hosts"]]
    assert a == b
    guids = [hca["node_guid"] for hw in a for hca in hw["hcas"]]
    macs = [p["mac"] for hw in a for hca in hw["hcas"] for p in hca["ports"] if p["mac"]]
    lids = [p["lid"] for hw in a for hca in hw["hcas"] for p in hca["ports"] if p["lid"]]
    uuids = [g["uuid"] for hw in a for g in hw["gpus"]]
    for seq in (guids, macs, lids, uuids):
        assert len(seq) == len(set(seq))
    assert lids == list(range(2, 10))


def test_kernel_defaults_to_uname(topo):
    import os

    assert hardware.hardware_json(topo, topo["hosts"][0])["kernel"] == os.uname().release


def test_cabling_and_addresses(topo):
    cab = hardware.cabling_json(topo)
    assert cab["links"][0] == {
        "host": "gpu01",
        "netdev": "ibp26s0",
        "hca": "mlx5_0",
        "port": 1,
        "switch": "ib-sw1",
        "switch_port": "1",
    }
    addr = hardware.addresses_json(topo, topo["hosts"][2])
    assert addr["host"] == "gpu03" and addr["mgmt"] == {"eth0": "198.51.100.13"}
    assert addr["netdevs"]["enp170s0f0np0"]["ipv4"] == "203.0.113.3"
    assert addr["netdevs"]["enp170s0f1np1"] == {
        "hca": "mlx5_3",
        "port": 1,
        "link_layer": "Ethernet",
        "mac": "b8:3f:d2:a0:03:30",
        "ipv4": "203.0.113.67",
        "prefix": 26,
        "rail": 1,
    }
    assert addr["netdevs"]["ibp26s0"]["ipv4"] is None


def test_fixed_mgmt_macs():
    assert hardware.mgmt_mac(3) == "02:fb:00:00:00:03"
    assert hardware.mgmt_mac(3, "bridge") == "02:fb:01:00:00:03"
    assert hardware.mgmt_mac(300) == "02:fb:00:00:01:2c"


def test_pci_fallback_for_unpredictable_names():
    hca = {"ports": [{"netdev": "ib0"}]}
    assert hardware.hca_pci(hca, 1) == "0000:40:00.0"
    assert hardware.hca_pci({"pci": "0000:c1:00.0", "ports": [{"netdev": "x"}]}, 0) == "0000:c1:00.0"


def test_other_gpu_count():
    topo = topology.normalise(
        {
            "hosts": [
                {
                    "name": "a1",
                    "gpus": {"model": "NVIDIA A100-SXM4-80GB", "count": 4, "topology": "direct"},
                    "hcas": [
                        {
                            "name": "mlx5_0",
                            "ports": [{"link_layer": "InfiniBand", "speed": "HDR", "netdev": "ibp12s0"}],
                        }
                    ],
                }
            ],
            "switches": [{"name": "qm", "os": "ib", "ports": ["1"]}],
            "cabling": [{"host": "a1", "netdev": "ibp12s0", "switch": "qm", "port": "1"}],
        }
    )
    hw = hardware.hardware_json(topo, topo["hosts"][0], kernel="k")
    assert [g["numa_node"] for g in hw["gpus"]] == [0, 0, 1, 1]
    assert hw["gpu_topology"] == "direct" and hw["gpus"][0]["memory_mib"] == 81920
    assert hw["hcas"][0]["ports"][0]["rate_gbps"] == 200
    assert hw["nic_affinity"] == {"mlx5_0": [0, 1]}


def test_subnet_manager_placement_reaches_every_host():
    raw = yaml.safe_load(topology.DEFAULT_TOPOLOGY.read_text())
    raw["subnet_manager"] = "hosts"
    topo = topology.normalise(raw)
    assert {hardware.hardware_json(topo, h, kernel="k")["subnet_manager"] for h in topo["hosts"]} == {"hosts"}
    del raw["subnet_manager"]
    topo = topology.normalise(raw)
    assert hardware.hardware_json(topo, topo["hosts"][0], kernel="k")["subnet_manager"] == "switch"
    # an older normalised topology (lab.json from before the key existed) gives the default
    old = {k: v for k, v in topo.items() if k != "subnet_manager"}
    assert hardware.hardware_json(old, old["hosts"][0], kernel="k")["subnet_manager"] == "switch"
