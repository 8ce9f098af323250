"""One emulated host for the emulated-tool tests: hardware.json (an NDR IB port and a 400GbE RoCE
port) and the sysfs/fabric tree a lab host has before hwctl renders it."""

from __future__ import annotations

import json
import os
from pathlib import Path


def _hca(name: str, guid: str, pci: str, port: dict) -> dict:
    """A ConnectX-7 (MT4129) with one ACTIVE port; ``port`` gives what differs by link layer."""
    return {"name": name, "hca_type": "MT4129", "vendor_id": "0x02c9", "vendor_part_id": 4129,
            "fw_ver": "28.39.1002", "board_id": "MT_0000000838", "psid": "MT_0000000838",
            "node_guid": guid, "sys_image_guid": guid, "pci": pci, "numa_node": 0,
            "node_desc": f"gpu01 {name}",
            "ports": [{"port": 1, "width": "4X", "rate_gbps": 400, "state": "ACTIVE",
                       "phys_state": "LinkUp", "active_mtu": 4096, "max_mtu": 4096, "link_flaps": 0,
                       "symbol_errors": 0, **port}]}


def _hw() -> dict:
    ib_guid, roce_guid = "b83f:d203:00a1:b2c0", "a088:c203:00ad:eab8"
    return {
        "host": "gpu01", "kernel": "6.1.0-18-amd64",
        "hcas": [
            _hca("mlx5_0", ib_guid, "0000:41:00.0",
                 {"link_layer": "InfiniBand", "netdev": "ibp65s0", "speed": "NDR", "lid": 5, "sm_lid": 1,
                  "port_guid": ib_guid, "mac": None}),
            _hca("mlx5_2", roce_guid, "0000:29:00.0",
                 {"link_layer": "Ethernet", "netdev": "enp41s0f0np0", "speed": "400GbE", "lid": 0,
                  "sm_lid": 0, "port_guid": None, "mac": "a0:88:c2:ad:ea:b8"}),
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
