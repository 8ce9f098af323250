"""The probes: each piece of host evidence, named once with what to read and the parser that reads it.

A :class:`Probe` is a command (``argv``, run without a shell; ``{name}`` fields filled from
:meth:`Probe.argv` keywords) or a set of files (``files``, shell globs read with ``grep -H ''``, the
``PATH:value`` lines :func:`~fabricops.evidence.hostfiles.parse_sysfs` and its kind read), and the
evidence parser of its output. verify's host phase takes its commands from here where they are the
same evidence (fabricops.verify.hostchecks.commands); tests/unit/evidence keeps the collector's
commands equal to these.

Stdlib-only and Python 3.8, like the parsers it names.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricops.evidence import hostfiles, tools

__all__ = ["PROBES", "Probe"]


@dataclass(frozen=True)
class Probe:
    """One piece of host evidence: what to run or read on the host, and the parser of its output."""

    name: str
    parser: Callable[[str], Any]
    #: the command; an item ``{key}`` is filled from :meth:`argv`'s keywords or :attr:`defaults`
    argv: tuple[str, ...] = ()
    #: files (shell globs) printed as ``PATH:value`` lines by ``grep -H ''``
    files: tuple[str, ...] = ()
    #: files: none there (no such driver, no such device) reads as empty, not as a failure
    missing_ok: bool = False
    defaults: Mapping[str, str] = field(default_factory=dict)

    def argv_for(self, **params: str) -> list[str]:
        """The command as an argument list (a command probe only)."""
        if not self.argv:
            raise ValueError(f"probe {self.name} reads files, it has no argv")
        values = {**self.defaults, **params}
        return [a.format(**values) if "{" in a else a for a in self.argv]

    def command(self, **params: str) -> str:
        """The shell line that prints this evidence."""
        if self.argv:
            return shlex.join(self.argv_for(**params))
        line = "grep -H '' " + " ".join(self.files)
        return line + " 2>/dev/null; true" if self.missing_ok else line

    def read(self, text: str) -> Any:
        """The output of :meth:`command`, parsed."""
        return self.parser(text)


_TABLE = (
    # files in sysfs
    Probe("ib_rates", hostfiles.parse_sysfs, files=("/sys/class/infiniband/*/ports/*/rate",)),
    Probe(
        "ecn",
        hostfiles.parse_ecn_points,
        files=("/sys/class/net/*/ecn/roce_np/enable/*", "/sys/class/net/*/ecn/roce_rp/enable/*"),
        missing_ok=True,
    ),
    # files elsewhere
    Probe(
        "nccl_conf", hostfiles.parse_nccl_conf, argv=("cat", "{path}"), defaults={"path": "/etc/nccl.conf"}
    ),
    # tools
    Probe("ip_addr", hostfiles.parse_ipv4, argv=("ip", "-j", "addr", "show")),
    Probe("ethtool_stats", tools.parse_ethtool_stats, argv=("ethtool", "-S", "{netdev}")),
    Probe("nvlink_status", tools.parse_nvlink_status, argv=("nvidia-smi", "nvlink", "--status")),
    Probe("nvlink_errors", tools.parse_nvlink_errors, argv=("nvidia-smi", "nvlink", "-e")),
    Probe(
        "gpu_pci",
        tools.parse_gpu_addresses,
        argv=("nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"),
    ),
    Probe("lspci", tools.parse_lspci_acs, argv=("lspci", "-D", "-vvv")),
    Probe("mlxconfig", tools.parse_mlxconfig_pending, argv=("mlxconfig", "-d", "{bdf}", "-e", "q")),
    Probe("mlxfwmanager", tools.parse_mlxfwmanager, argv=("mlxfwmanager", "--query")),
    Probe("dkms_status", tools.parse_dkms_status, argv=("dkms", "status")),
    Probe("sb_state", tools.parse_sb_state, argv=("mokutil", "--sb-state")),
)

#: name -> :class:`Probe`
PROBES: dict[str, Probe] = {p.name: p for p in _TABLE}
