"""``fabricops diagnose``: collect the fabric evidence of hosts and name the likely cause.

Evidence (per host, over the inventory's SSH, read-only commands): ``ibv_devinfo -v``, ``ibstat``,
the port state, rate and error counters in sysfs, the RoCE hw_counters, ``mlnx_qos`` and
``ethtool -S`` (two samples) per RoCE netdev, the DCQCN (ECN) switches in sysfs,
``nvidia-smi nvlink --status``, ``ip -j addr``, ``/etc/nccl.conf``; the GPU path (PCIe link
width/speed in sysfs, ``lspci -D -vvv`` ACS control, IOMMU group types, ``lsmod``/``uname -r``/
``modinfo -F license nvidia`` for the GPUDirect mechanism); IPoIB reachability between
the hosts diagnosed; and, for switches in the inventory, their PFC/ECN state.

Analysis (:func:`analyse`, pure, unit-tested) maps the evidence to the troubleshooting table in
docs/troubleshooting.md. Each finding is a failed :class:`fabricops.result.Result` (the one verdict
type): its check is the finding's kind, its message the symptom, with evidence, cause and the remedy
as its action; findings are ordered by likelihood (a hard fault before the misconfiguration it would
mask). A healthy fabric gives no finding. Exit status (docs/cli.md): 0 every host gave evidence and
none shows a fault; 1 a fault was found; 4 could not run: no evidence (no host, every command failed,
an unreachable host and no fault elsewhere: such hosts are listed, never called healthy), a missing
file or inventory; 5 the evidence or its context is malformed; 2 usage error.

The rooms: :mod:`~fabricops.diagnose.collect` (the commands, collecting, switch state, evidence
files), :mod:`~fabricops.diagnose.rules` (evidence -> findings), :mod:`~fabricops.diagnose.report`
(exit status, JSON, JUnit, terminal) and :mod:`~fabricops.diagnose.cli` (the subcommand). Host files
are parsed by fabricops.evidence. The names below are the package's public face; the collecting
function is ``fabricops.diagnose.collect.collect`` (the package attribute ``collect`` stays the module).
"""

from __future__ import annotations

from fabricops.diagnose.cli import cmd_diagnose, context_from_file, register
from fabricops.diagnose.collect import (
    BASE_COMMANDS,
    ETHTOOL_GAP_S,
    SYSFS_CMD,
    ContextError,
    DiagnoseError,
    Raw,
    Run,
    from_ansible,
    host_commands,
    load_evidence_dir,
    switch_states,
)
from fabricops.diagnose.report import (
    CORE_EVIDENCE,
    exit_status,
    finding_data,
    no_evidence,
    terminal,
    to_json,
    to_junit,
)
from fabricops.diagnose.rules import (
    LIKELIHOOD,
    SYMPTOM_HANG,
    SYMPTOM_NVLINK,
    SYMPTOM_SLOW,
    SYMPTOM_STORM,
    Context,
    analyse,
    analyse_fabric,
    analyse_host,
    context_from_hostvars,
    ctx_pings,
    likelihood,
)

__all__ = [
    "BASE_COMMANDS",
    "CORE_EVIDENCE",
    "ETHTOOL_GAP_S",
    "LIKELIHOOD",
    "SYMPTOM_HANG",
    "SYMPTOM_NVLINK",
    "SYMPTOM_SLOW",
    "SYMPTOM_STORM",
    "SYSFS_CMD",
    "Context",
    "ContextError",
    "DiagnoseError",
    "Raw",
    "Run",
    "analyse",
    "analyse_fabric",
    "analyse_host",
    "cmd_diagnose",
    "context_from_file",
    "context_from_hostvars",
    "ctx_pings",
    "exit_status",
    "finding_data",
    "from_ansible",
    "host_commands",
    "likelihood",
    "load_evidence_dir",
    "no_evidence",
    "register",
    "switch_states",
    "terminal",
    "to_json",
    "to_junit",
]
