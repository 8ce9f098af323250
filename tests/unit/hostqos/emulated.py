"""An emulated RoCE host for hostqos tests: the lab's emulated mlnx_qos / cma_roce_* and sysfs knobs
(fabricops_lab.emul) under a temporary EMUL_ROOT, reached through the same calls a host offers."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from fabricops_lab.emul import devstate, hwctl, tools

NETDEV, DEVICE = "enp41s0f0np0", "mlx5_2"


def hardware() -> dict:
    return {
        "host": "gpu04",
        "kernel": "6.1.0-18-amd64",
        "hcas": [
            {
                "name": DEVICE,
                "hca_type": "MT4129",
                "vendor_id": "0x02c9",
                "vendor_part_id": 4129,
                "fw_ver": "28.39.1002",
                "board_id": "MT_0000000838",
                "psid": "MT_0000000838",
                "node_guid": "a088:c203:00ad:eab8",
                "sys_image_guid": "a088:c203:00ad:eab8",
                "pci": "0000:29:00.0",
                "numa_node": 0,
                "node_desc": "gpu04 mlx5_2",
                "ports": [
                    {
                        "port": 1,
                        "link_layer": "Ethernet",
                        "netdev": NETDEV,
                        "speed": "400GbE",
                        "width": "4X",
                        "rate_gbps": 400,
                        "state": "ACTIVE",
                        "phys_state": "LinkUp",
                        "lid": 0,
                        "sm_lid": 0,
                        "port_guid": None,
                        "active_mtu": 4096,
                        "max_mtu": 4096,
                        "mac": "a0:88:c2:ad:ea:b8",
                        "link_flaps": 0,
                        "symbol_errors": 0,
                    }
                ],
            }
        ],
    }


def make_root(tmp_path: Path) -> Path:
    (tmp_path / "var/lib/emulated-hw").mkdir(parents=True)
    (tmp_path / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(hardware()))
    rel = tmp_path / "usr/share/emulated-ofed"
    rel.mkdir(parents=True)
    (rel / "release").write_text("MLNX_OFED_LINUX-23.10-1.1.9.0\n")
    (tmp_path / "sys/class/net").mkdir(parents=True)
    (tmp_path / f"sys/devices/virtual/net/{NETDEV}").mkdir(parents=True)
    os.symlink(f"../../devices/virtual/net/{NETDEV}", tmp_path / f"sys/class/net/{NETDEV}")
    hwctl.sync()
    return tmp_path


class EmulatedSystem:
    """What a host offers: run a tool, read/write a file under /sys (mapped into EMUL_ROOT)."""

    def __init__(self) -> None:
        self.ran: list[list[str]] = []

    def run(self, argv: list[str]) -> tuple[int, str]:
        self.ran.append(list(argv))
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = tools.main(argv[0], list(argv[1:]))
        return rc, buf.getvalue()

    @staticmethod
    def _rel(path: str) -> str:
        assert path.startswith("/sys/"), path
        return path[len("/sys/") :]

    def read(self, path: str) -> str | None:
        return devstate.read_sysfs(self._rel(path))

    def write(self, path: str, value) -> None:
        target = devstate.sysfs(self._rel(path))
        if not target.exists():
            raise OSError(f"no such knob {path}")
        devstate.write_sysfs(self._rel(path), str(value))

    def exists(self, path: str) -> bool:
        return devstate.sysfs(self._rel(path)).exists()

    def openibd_restart(self) -> None:
        self.run(["openibd", "restart"])


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A fresh emulated RoCE host (firmware defaults: trust pcp, no PFC, DCQCN on, ToS unset)."""
    monkeypatch.setenv("EMUL_ROOT", str(tmp_path))
    make_root(tmp_path)
    return EmulatedSystem()
