"""fabricops.facts: the sysfs and tool output a host shows -> the facts roles use."""

from __future__ import annotations

from captures import read_fixture

from fabricops.facts import build_facts, gid_to_ipv4, sysfs_rate, sysfs_value


def _port(state, rate, link_layer, gids=()):
    return {
        "state": state,
        "phys_state": "5: LinkUp" if state.endswith("ACTIVE") else "3: Disabled",
        "rate": rate,
        "link_layer": link_layer,
        "lid": "0x5" if link_layer == "InfiniBand" else "0x0",
        "sm_lid": "0x1",
        "gids": list(gids),
    }


RAW = {
    "infiniband": {
        "mlx5_0": {
            "fw_ver": "28.39.1002", "node_guid": "b83f:d203:00a1:b2c0", "numa_node": "0",
            "netdevs": ["ibp26s0"],
            "ports": {"1": _port("4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand")},
        },
        "mlx5_1": {
            "fw_ver": "28.39.1002", "node_guid": "b83f:d203:00a1:b2c1", "numa_node": "1",
            "netdevs": ["ibp60s0"],
            "ports": {"1": _port("1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand")},
        },
        "mlx5_2": {
            "fw_ver": "28.39.1002", "node_guid": "b83f:d203:00a1:b2c2", "numa_node": "0",
            "netdevs": ["enp86s0f0np0"],
            "ports": {
                "1": _port(
                    "4: ACTIVE",
                    "400 Gb/sec (4X NDR)",
                    "Ethernet",
                    gids=[
                        {"index": 0, "gid": "fe80:0000:0000:0000:b83f:d2ff:fea1:b2c2",
                         "type": "IB/RoCE v1", "ndev": "enp86s0f0np0"},
                        {"index": 1, "gid": "fe80:0000:0000:0000:b83f:d2ff:fea1:b2c2",
                         "type": "RoCE v2", "ndev": "enp86s0f0np0"},
                        {"index": 2, "gid": "0000:0000:0000:0000:0000:ffff:cb00:7101",
                         "type": "IB/RoCE v1", "ndev": "enp86s0f0np0"},
                        {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:cb00:7101",
                         "type": "RoCE v2", "ndev": "enp86s0f0np0"},
                    ],
                )
            },
        },
    },
    "net": {"ibp26s0": {"type": "32", "mtu": "4092", "operstate": "up", "mode": "datagram"}},
    "ofed_info": None,
    "nvidia_smi_query": None,
}


def test_sysfs_helpers():
    assert sysfs_value("4: ACTIVE") == "ACTIVE"
    assert sysfs_value("InfiniBand") == "InfiniBand"
    assert sysfs_rate("400 Gb/sec (4X NDR)") == {"rate_gbps": 400, "width": "4X", "speed": "NDR"}
    assert sysfs_rate("200 Gb/sec (2X NDR)") == {"rate_gbps": 200, "width": "2X", "speed": "NDR"}
    assert sysfs_rate("56 Gb/sec (4X FDR)")["rate_gbps"] == 56
    assert sysfs_rate(None)["rate_gbps"] is None
    assert gid_to_ipv4("0000:0000:0000:0000:0000:ffff:cb00:7101") == "203.0.113.1"
    assert gid_to_ipv4("fe80:0000:0000:0000:b83f:d2ff:fea1:b2c2") is None


def test_facts_without_ofed_are_empty_and_honest():
    facts = build_facts(RAW)
    assert facts["ofed"] == {"installed": False, "version": None}
    assert [h["name"] for h in facts["hcas"]] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert facts["ib_ports_up"] == ["mlx5_0:1"]
    assert facts["roce_ports_up"] == ["mlx5_2:1"]
    assert facts["gpus"] == [] and facts["gpu_count"] == 0
    roce = facts["hcas"][2]["ports"][0]
    assert roce["netdev"] == "enp86s0f0np0"
    # The RoCE v2 IPv4 GID is read from the GID table, not guessed as 3.
    assert roce["roce_v2_ipv4_gid_index"] == 3 and roce["roce_v2_ipv4"] == "203.0.113.1"
    down = facts["hcas"][1]["ports"][0]
    assert down["state"] == "DOWN" and down["phys_state"] == "Disabled"
    assert facts["netdevs"]["ibp26s0"] == {
        "type": 32, "mtu": 4092, "operstate": "up", "mode": "datagram", "address": None
    }


def test_facts_read_real_tool_output():
    raw = dict(RAW)
    raw["ofed_info"] = {"rc": 0, "stdout": read_fixture("ofed_info", "s_23.10_azure.txt"), "stderr": ""}
    raw["nvidia_smi_query"] = {
        "rc": 0,
        "stdout": read_fixture("nvidia-smi-query", "five_gpu_name_bus_index_uuid.txt"),
        "stderr": "",
    }
    facts = build_facts(raw)
    assert facts["ofed"] == {"installed": True, "version": "MLNX_OFED_LINUX-23.10-1.1.9.0"}
    assert facts["gpu_count"] == 5
    assert facts["gpus"][1]["name"] == "GeForce GTX 1080 Ti"
    assert facts["gpus"][1]["uuid"] == "GPU-15ea7bf9-1a0e-2d7f-9c62-c28e5ca1aaf1"
    assert facts["errors"] == []


def test_unreadable_tool_output_is_reported_not_guessed():
    raw = dict(RAW)
    raw["ofed_info"] = {"rc": 0, "stdout": "something else entirely\n", "stderr": ""}
    facts = build_facts(raw)
    assert facts["ofed"]["installed"] is False
    assert len(facts["errors"]) == 1 and facts["errors"][0].startswith("ofed_info:")
