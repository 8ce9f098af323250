"""An emulated host in-process: the lab's hardware.json for gpu03 of the default topology, the
emulated tools (fabricops_lab.emul) run against a temporary EMUL_ROOT, and a ``run`` function with
the transport's signature. Faults are applied to hardware.json as docs/lab-faults.md describes."""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from fabricops_lab import hardware, topology
from fabricops_lab.emul import hwctl, services, tools


class EmuHost:
    """A converged host: with MLNX_OFED, nvidia_peermem is loaded (as the gpudirect role leaves it)."""

    def __init__(self, root: Path, name: str = "gpu03", ofed: str | None = "24.10-1.1.4.0"):
        self.root = root
        topo = topology.load()
        host = next(h for h in topo["hosts"] if h["name"] == name)
        self.hw = hardware.hardware_json(topo, host, kernel="6.1.0-test")
        (root / "var/lib/emulated-hw").mkdir(parents=True)
        if ofed:
            (root / "usr/share/emulated-ofed").mkdir(parents=True)
            (root / "usr/share/emulated-ofed/release").write_text(f"MLNX_OFED_LINUX-{ofed}\n")
        (root / "sys/class/net").mkdir(parents=True)
        for h in self.hw["hcas"]:
            for p in h["ports"]:
                nd = p["netdev"]
                (root / f"sys/devices/virtual/net/{nd}").mkdir(parents=True)
                os.symlink(f"../../devices/virtual/net/{nd}", root / f"sys/class/net/{nd}")
        self.sync()
        if ofed:
            assert self.run(name, "modprobe nvidia_peermem")["rc"] == 0

    def sync(self) -> None:
        (self.root / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(self.hw))
        hwctl.sync()

    def port(self, hca: str) -> dict:
        return next(h for h in self.hw["hcas"] if h["name"] == hca)["ports"][0]

    def run(self, host: str, command: str, timeout: float = 60) -> dict:
        argv = shlex.split(command)
        if argv[:2] == ["grep", "-H"]:
            lines = []
            for pattern in argv[3:]:
                for path in sorted(glob.glob(str(self.root) + pattern)):
                    for line in Path(path).read_text().splitlines():
                        lines.append(f"{path[len(str(self.root)) :]}:{line}")
            return {"rc": 0 if lines else 2, "stdout": "\n".join(lines) + "\n", "stderr": ""}
        if argv[0] == "cat":
            p = self.root / argv[1].lstrip("/")
            if not p.exists():
                return {"rc": 1, "stdout": "", "stderr": f"cat: {argv[1]}: No such file or directory"}
            return {"rc": 0, "stdout": p.read_text(), "stderr": ""}
        if argv[0] in ("lsmod", "modprobe"):  # the lab's kernel-module front-ends (/usr/local/sbin)
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = services.main(argv[0], argv[1:])
            return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}
        if argv[0] not in tools.TOOLS or (
            argv[0] != "nvidia-smi"
            and argv[0] != "ibstat"
            and not (self.root / "usr/share/emulated-ofed/release").exists()
        ):
            return {"rc": 127, "stdout": "", "stderr": f"sh: 1: {argv[0]}: not found"}
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = tools.main(argv[0], argv[1:])
        return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}


@pytest.fixture
def emu(tmp_path, monkeypatch) -> EmuHost:
    monkeypatch.setenv("EMUL_ROOT", str(tmp_path))
    return EmuHost(tmp_path)


CABLING = [
    {
        "host": "gpu03",
        "netdev": "ibp26s0",
        "hca": "mlx5_0",
        "port": 1,
        "switch": "ib-sw1",
        "switch_port": "5",
    },
    {
        "host": "gpu03",
        "netdev": "ibp60s0",
        "hca": "mlx5_1",
        "port": 1,
        "switch": "ib-sw1",
        "switch_port": "6",
    },
    {
        "host": "gpu03",
        "netdev": "enp170s0f0np0",
        "hca": "mlx5_2",
        "port": 1,
        "switch": "leaf-onyx",
        "switch_port": "Eth1/3",
    },
    {
        "host": "gpu03",
        "netdev": "enp170s0f1np1",
        "hca": "mlx5_3",
        "port": 1,
        "switch": "leaf-cumulus",
        "switch_port": "swp3",
    },
]
SWITCH_LAYERS = {"ib-sw1": "InfiniBand", "leaf-onyx": "Ethernet", "leaf-cumulus": "Ethernet"}


@pytest.fixture
def hostvars() -> dict:
    """What the lab inventory gives gpu03 (inventories/lab, written by fabricops_lab.inventory)."""
    return {
        "ansible_host": "198.51.100.13",
        "fabricops_hardware_profile": "hgx-h100-ndr",
        "mlnx_ofed_version": "24.10-1.1.4.0",
        "fabricops_cabling": CABLING,
        "subnet_manager_mode": "switch",
        "fabricops_roce": {
            "lossless_priority": 3,
            "dscp": 26,
            "cnp_dscp": 48,
            "cnp_priority": 6,
            "trust": "dscp",
            "ecn": {"min_kb": 150, "max_kb": 1500, "probability": 100},
            "roce_mode": 2,
        },
    }


@pytest.fixture
def collect(emu) -> Callable:
    from fabricops.verify import hostchecks

    def _collect(expect, only=None) -> dict:
        return {k: emu.run(expect.host, c) for k, c in hostchecks.commands(expect, only).items()}

    return _collect
