"""Dispatch an emulated vendor tool name to its implementation.

Each entry is ``module:function``; the function takes argv (without the program name) and
returns the exit status. Modules are imported lazily so a tool starts fast.
"""

from __future__ import annotations

import importlib
import sys

TOOLS: dict[str, str] = {
    # MLNX_OFED userspace (installed by the emulated OFED packages)
    "ofed_info": "rdma:ofed_info",
    "ibv_devinfo": "rdma:ibv_devinfo",
    "ibv_devices": "rdma:ibv_devices",
    "ibstat": "rdma:ibstat",
    "ibstatus": "rdma:ibstatus",
    "mlnx_qos": "rdma:mlnx_qos",
    "cma_roce_tos": "rdma:cma_roce_tos",
    "cma_roce_mode": "rdma:cma_roce_mode",
    "ibqueryerrors": "rdma:ibqueryerrors",
    "perfquery": "rdma:perfquery",
    "openibd": "rdma:openibd",
    "sminfo": "services:sminfo",
    "ibnetdiscover": "fabricdisc:ibnetdiscover",
    "iblinkinfo": "fabricdisc:iblinkinfo",
    # MLNX_OFED's opensm package (docs/fabric-services.md)
    "opensm": "services:opensm",
    # perftest
    "ib_write_bw": "perftest:ib_write_bw",
    "ib_read_bw": "perftest:ib_read_bw",
    "ib_send_bw": "perftest:ib_send_bw",
    "ib_write_lat": "perftest:ib_write_lat",
    "ib_read_lat": "perftest:ib_read_lat",
    "ib_send_lat": "perftest:ib_send_lat",
    # NVIDIA MFT (the `mft` package of the emulated MLNX_OFED; emul/firmware.py)
    "mlxconfig": "firmware:mlxconfig",
    "mlxfwmanager": "firmware:mlxfwmanager",
    "mlxfwreset": "firmware:mlxfwreset",
    # NVIDIA driver
    "nvidia-smi": "nvidia:nvidia_smi",
    # nvidia-fabricmanager-<branch> (the lab's fabric manager repository)
    "nv-fabricmanager": "services:nv_fabricmanager",
    # lldpd's client (the lab's server image has lldpd; hosts.install_emulated_software)
    "lldpctl": "fabricdisc:lldpctl",
    # mlx5 driver statistics for `ethtool -S` (other netdevs and options: the real ethtool)
    "ethtool": "ethtool:main",
    # pciutils: the emulated PCIe tree (hardware.json "pcie"; docs/lab-device-contract.md)
    "lspci": "pci:lspci",
    # nccl-tests, Open MPI's launcher and the helper it reaches hosts with (docs/lab.md,
    # "Multi-node NCCL in the lab")
    "all_reduce_perf": "nccl:all_reduce_perf",
    "all_gather_perf": "nccl:all_gather_perf",
    "reduce_scatter_perf": "nccl:reduce_scatter_perf",
    "mpirun": "nccl:mpirun",
    "nccl-rank-info": "nccl:nccl_rank_info",
    # DKMS (Debian's dkms package, carried by the DOCA-Host mirror) and shim's mokutil (in every
    # host, as on a Secure Boot capable Debian): docs/lab-ofed.md, "DOCA-Host mirror, DKMS and Secure Boot"
    "dkms": "dkms:main",
    "mokutil": "mokutil:main",
}


def main(tool: str, argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    module_name, func_name = TOOLS[tool].split(":")
    module = importlib.import_module(f"{__package__}.{module_name}")
    return int(getattr(module, func_name)(list(argv)) or 0)
