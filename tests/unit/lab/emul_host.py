"""One emulated host for the emulated-tool tests: hardware.json (an NDR IB port and a 400GbE RoCE
port) and the sysfs/fabric tree a lab host has before hwctl renders it."""

from __future__ import annotations

import json
import os
from pathlib import Path


def _hw() -> dict:
    return {
        "host": "gpu01", "kernel": "6.1.0-18-amd64",
        "hcas": [
            {"name": "mlx5_0", "hca_type": "MT4129", "vendor_id": "0x02c9", "vendor_part_id": 4129,
             "fw_ver": "28.39.1002", "board_id": "MT_0000000838", "psid": "MT_0000000838",
             "node_guid": "b83f:d203:00a1:b2c0", "sys_image_guid": "b83f:d203:00a1:b2c0",
             "pci": "0000:41:00.0", "numa_node": 0, "node_desc": "gpu01 mlx5_0",
             "ports": [{"port": 1, "link_layer": "InfiniBand", "netdev": "ibp65s0", "speed": "NDR",
                        "width": "4X", "rate_gbps": 400, "state": "ACTIVE", "phys_state": "LinkUp",
                        "lid": 5, "sm_lid": 1, "port_guid": "b83f:d203:00a1:b2c0", "active_mtu": 4096,
                        "max_mtu": 4096, "mac": None, "link_flaps": 0, "symbol_errors": 0}]},
            {"name": "mlx5_2", "hca_type": "MT4129", "vendor_id": "0x02c9", "vendor_part_id": 4129,
             "fw_ver": "28.39.1002", "board_id": "MT_0000000838", "psid": "MT_0000000838",
             "node_guid": "a088:c203:00ad:eab8", "sys_image_guid": "a088:c203:00ad:eab8",
             "pci": "0000:29:00.0", "numa_node": 0, "node_desc": "gpu01 mlx5_2",
             "ports": [{"port": 1, "link_layer": "Ethernet", "netdev": "enp41s0f0np0", "speed": "400GbE",
                        "width": "4X", "rate_gbps": 400, "state": "ACTIVE", "phys_state": "LinkUp",
                        "lid": 0, "sm_lid": 0, "port_guid": None, "active_mtu": 4096, "max_mtu": 4096,
                        "mac": "a0:88:c2:ad:ea:b8", "link_flaps": 0, "symbol_errors": 0}]},
        ],
    }


def write_hw(root: Path, hw: dict) -> None:
    (root / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(hw))


def host_tree(root: Path) -> Path:
    """hardware.json, the host's data-plane address and its netdevs under EMUL_ROOT=root."""
    (root / "var/lib/emulated-hw").mkdir(parents=True)
    write_hw(root, _hw())
    addr = root / "var/lib/emulated-fabric/hosts/gpu01"
    addr.mkdir(parents=True)
    (addr / "addresses.json").write_text(json.dumps({"enp41s0f0np0": ["10.0.0.1/24"]}))
    (root / "sys/class/net").mkdir(parents=True)
    for nd in ("ibp65s0", "enp41s0f0np0"):
        (root / f"sys/devices/virtual/net/{nd}").mkdir(parents=True)
        os.symlink(f"../../devices/virtual/net/{nd}", root / f"sys/class/net/{nd}")
    return root
