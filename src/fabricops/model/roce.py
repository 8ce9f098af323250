"""The fabric-wide RoCE definition (inventory variable ``fabricops_roce``), one copy for hosts and switches.

The host role (``roce_host``) and the switch role (``roce_switch``) both read the definition through
:func:`validate`, so the lossless priority, the DSCP values and the ECN thresholds cannot disagree
between a NIC and the switch port it is cabled to. Every field is declared once in
:mod:`fabricops.model.roce_schema` (validation, defaults, ``to_data``); docs/roce.md shows the table.

>>> r = validate({"lossless_priority": 3, "dscp": 26})
>>> r.tos, r.pfc_vector, r.dscp2prio
(106, [0, 0, 0, 1, 0, 0, 0, 0], {26: 3, 48: 6})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricops.model import roce_schema as schema
from fabricops.model.roce_schema import RoceConfigError

__all__ = ["DEFAULTS", "EcnConfig", "RoceConfig", "RoceConfigError", "validate"]

#: The declared defaults (:data:`fabricops.model.roce_schema.FIELDS`), as the nested mapping users write.
DEFAULTS: dict[str, Any] = schema.defaults()
_BY_PATH = {f.path: f for f in schema.FIELDS}
TRUST_STATES = _BY_PATH["trust"].choices
ECN_OTHER = _BY_PATH["ecn.other_priorities"].choices
ROCE_MODES = {1: "IB/RoCE v1", 2: "RoCE v2"}
#: The ECN field value "ECN-capable transport" ECT(0), RFC 3168; DCQCN needs ECN-capable RoCE packets.
ECT0 = 0b10


@dataclass(frozen=True)
class EcnConfig:
    min_kb: int  #: switch WRED/ECN marking starts at this queue depth (KB)
    max_kb: int  #: marking reaches ``probability`` at this queue depth (KB)
    probability: int  #: marking probability at ``max_kb`` (percent, 1..100)
    other_priorities: str  #: host DCQCN on priorities other than the lossless one: enabled|disabled|unmanaged


@dataclass(frozen=True)
class RoceConfig:
    lossless_priority: int  #: the one priority with PFC (0..7)
    dscp: int  #: DSCP of RoCE data packets (0..63)
    cnp_dscp: int  #: DSCP of congestion notification packets (0..63)
    cnp_priority: int  #: priority of CNPs (0..7, not the lossless one)
    trust: str  #: "dscp" (L3, the usual RoCE v2 choice) or "pcp" (L2, VLAN priority)
    ecn: EcnConfig
    cable_length_m: int | None  #: mlnx_qos --cable_len (headroom sizing); None = leave as it is
    roce_mode: int  #: rdma_cm default RoCE mode: 1 (v1) or 2 (v2)
    dscp_map: dict[int, int] = field(default_factory=dict)  #: extra DSCP -> priority entries
    lossless: bool = True  #: PFC on the lossless priority; False: lossy RoCE (ECN only, no PFC)

    @property
    def tos(self) -> int:
        """IP ToS byte of RoCE data: DSCP in the upper six bits, ECT(0) in the two ECN bits
        (``DSCP << 2 | 0b10``), so DSCP 26 -> 106, the value NVIDIA documents for ``cma_roce_tos``,
        the traffic_class file and ``NCCL_IB_TC``. (``26 << 2`` alone is 104: same DSCP, not ECN-capable.)"""
        return self.dscp << 2 | ECT0

    @property
    def pfc_vector(self) -> list[int]:
        """``mlnx_qos --pfc`` vector: 1 on the lossless priority only (all 0 for lossy RoCE)."""
        return [1 if self.lossless and p == self.lossless_priority else 0 for p in range(8)]

    @property
    def dscp2prio(self) -> dict[int, int]:
        """The DSCP -> priority entries the fabric relies on (RoCE, CNP, then ``dscp_map``)."""
        entries = {self.dscp: self.lossless_priority, self.cnp_dscp: self.cnp_priority}
        entries.update(self.dscp_map)
        return dict(sorted(entries.items()))

    @property
    def roce_mode_name(self) -> str:
        """What rdma_cm prints for the mode (``cma_roce_mode``, configfs ``default_roce_mode``)."""
        return ROCE_MODES[self.roce_mode]

    def ecn_enabled(self, priority: int) -> bool | None:
        """Desired host DCQCN (roce_np / roce_rp enable) on a priority; None = not managed."""
        if priority == self.lossless_priority:
            return True
        other = self.ecn.other_priorities
        return None if other == "unmanaged" else other == "enabled"

    def to_data(self) -> dict[str, Any]:
        """The effective definition (every declared field) plus its derived values, as plain data."""
        values = {
            **{f.name: getattr(self, f.name) for f in schema.FIELDS if not f.group},
            "ecn": {f.name: getattr(self.ecn, f.name) for f in schema.FIELDS if f.group == "ecn"},
        }
        data = schema.plain_data(values)
        data["derived"] = {
            "tos": self.tos,
            "pfc_vector": self.pfc_vector,
            "dscp2prio": {str(k): v for k, v in self.dscp2prio.items()},
            "roce_mode_name": self.roce_mode_name,
            "ecn_enable": [self.ecn_enabled(p) for p in range(8)],
        }
        return data


def validate(data: Mapping[str, Any] | None) -> RoceConfig:
    """Merge ``data`` over :data:`DEFAULTS`, check every declared field and cross-field rule
    (:func:`fabricops.model.roce_schema.validate_definition`), return the config.

    Raises :class:`RoceConfigError` with one sentence naming the field and what to fix.
    """
    v = schema.validate_definition(data)
    # every declared field is a RoceConfig attribute (a field added to the schema only fails here)
    return RoceConfig(**{**v, "ecn": EcnConfig(**v["ecn"])})
