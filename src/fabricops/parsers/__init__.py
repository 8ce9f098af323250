"""Parsers: one module per tool, text -> typed records (dataclasses).

Every parser is a function ``parse(text: str) -> Record`` that raises
:class:`fabricops.errors.ParseError` when the text is not that tool's output (including empty
input), never returns a silently empty record, and handles what real machines print (tabs vs
spaces, warning lines, optional headers, version differences).

``PARSERS`` maps the names used by ``fabricops parse TOOL`` to ``module:function``; modules are
imported lazily so the CLI starts fast.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from fabricops.errors import ParseError

__all__ = ["PARSERS", "ParseError", "get_parser", "max_bytes", "parse", "to_data"]

PARSERS: dict[str, str] = {
    # perftest
    "perftest-bw": "fabricops.parsers.perftest:parse_bw",
    "perftest-lat": "fabricops.parsers.perftest:parse_lat",
    # rdma-core / infiniband-diags / MLNX_OFED
    "ibv_devinfo": "fabricops.parsers.ibv_devinfo:parse",
    "ibstat": "fabricops.parsers.ibstat:parse",
    "ibstatus": "fabricops.parsers.ibstatus:parse",
    "ofed_info": "fabricops.parsers.ofed_info:parse",
    "mlnx_qos": "fabricops.parsers.mlnx_qos:parse",
    "ibqueryerrors": "fabricops.parsers.ibqueryerrors:parse",
    "perfquery": "fabricops.parsers.perfquery:parse",
    # NVIDIA MFT (NIC firmware: configuration, images, reset)
    "mlxconfig": "fabricops.parsers.mlxconfig:parse_query",
    "mlxfwmanager": "fabricops.parsers.mlxfwmanager:parse_query",
    "mlxfwreset": "fabricops.parsers.mlxfwreset:parse_query",
    "sminfo": "fabricops.parsers.sminfo:parse",
    "ibnetdiscover": "fabricops.parsers.ibnetdiscover:parse",
    "iblinkinfo": "fabricops.parsers.iblinkinfo:parse",
    # iproute2 (the live addresses the ipoib role compares)
    "ip-addr": "fabricops.parsers.ip_addr:parse",
    # lldpd (host side LLDP)
    "lldpctl": "fabricops.parsers.lldp:parse_keyvalue",
    # NVIDIA driver
    "nvidia-smi-topo": "fabricops.parsers.nvidia_smi:parse_topo",
    "nvidia-smi-nvlink": "fabricops.parsers.nvidia_smi:parse_nvlink",
    "nvidia-smi-query": "fabricops.parsers.nvidia_smi:parse_query",
    "nvidia-smi-q": "fabricops.parsers.nvidia_smi:parse_q",
    # NVIDIA IMEX (multi-node NVLink: the domain status, docs/parsers.md "nvidia-imex-ctl")
    "nvidia-imex-ctl": "fabricops.parsers.nvidia_imex_ctl:parse_text",
    "nvidia-imex-ctl-json": "fabricops.parsers.nvidia_imex_ctl:parse_json",
    # DKMS and Secure Boot (docs/parsers.md "DKMS and Secure Boot")
    "dkms-status": "fabricops.parsers.dkms:parse_status",
    "mokutil-sb-state": "fabricops.parsers.mokutil:sb_state",
    "mokutil-test-key": "fabricops.parsers.mokutil:test_key",
    # pciutils (lspci -vvv: PCIe tree, link and ACS state)
    "lspci": "fabricops.parsers.lspci:parse",
    # nccl-tests
    "nccl-tests": "fabricops.parsers.nccl_tests:parse",
    # Spectrum switches (documented in docs/parsers.md)
    "onyx-pfc": "fabricops.parsers.onyx:parse_pfc",
    "onyx-ecn": "fabricops.parsers.onyx:parse_ecn",
    "onyx-qos-trust": "fabricops.parsers.onyx:parse_qos_trust",
    "onyx-running-config": "fabricops.parsers.onyx:parse_running_config",
    "nvue-qos-roce": "fabricops.parsers.nvue:parse_qos_roce",
    "nvue-config-diff": "fabricops.parsers.nvue:parse_config_diff",
    "nvue-lldp-neighbor": "fabricops.parsers.lldp:parse_nvue_neighbor",
}


def max_bytes(tool: str) -> int:
    """The input size cap of a tool's parser, in bytes (docs/parsers.md lists them)."""
    return get_parser(tool).max_bytes  # type: ignore[attr-defined]


def get_parser(tool: str) -> Callable[[str], Any]:
    """Return the parse function for a tool name from :data:`PARSERS`."""
    try:
        target = PARSERS[tool]
    except KeyError:
        known = ", ".join(sorted(PARSERS))
        raise ParseError(tool, f"one of the known tools: {known}") from None
    module_name, func_name = target.split(":")
    return getattr(importlib.import_module(module_name), func_name)


def parse(tool: str, text: str) -> Any:
    """Parse ``text`` as the output of ``tool``; a ParseError always names ``tool`` as given."""
    func = get_parser(tool)
    try:
        return func(text)
    except ParseError as exc:
        if exc.tool == tool:
            raise
        raise type(exc)(tool, exc.expected, exc.detail) from None


def to_data(record: Any) -> Any:
    """Turn a record (dataclass, list, dict, scalar) into plain JSON-able data."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: to_data(getattr(record, f.name)) for f in dataclasses.fields(record)}
    if isinstance(record, dict):
        return {str(k): to_data(v) for k, v in record.items()}
    if isinstance(record, (list, tuple)):
        return [to_data(v) for v in record]
    return record
