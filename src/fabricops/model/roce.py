"""The fabric-wide RoCE definition (inventory variable ``fabricops_roce``), one copy for hosts and switches.

The host role (``roce_host``) and the switch role (``roce_switch``) both read the definition through
:func:`validate`, so the lossless priority, the DSCP values and the ECN thresholds cannot disagree
between a NIC and the switch port it is cabled to. Schema and defaults: docs/roce.md.

>>> r = validate({"lossless_priority": 3, "dscp": 26})
>>> r.tos, r.pfc_vector, r.dscp2prio
(106, [0, 0, 0, 1, 0, 0, 0, 0], {26: 3, 48: 6})
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import FabricopsError

__all__ = ["DEFAULTS", "EcnConfig", "RoceConfig", "RoceConfigError", "validate"]

#: NVIDIA's "lossless" defaults (Onyx "RoCE Commands", Cumulus "RDMA over Converged Ethernet"):
#: RoCE data DSCP 26 on priority 3 (PFC there only), CNP on DSCP 48 / priority 6, ECN 150/1500 KB.
DEFAULTS: dict[str, Any] = {
    "lossless_priority": 3,
    "dscp": 26,
    "cnp_dscp": 48,
    "cnp_priority": 6,
    "trust": "dscp",
    "ecn": {"min_kb": 150, "max_kb": 1500, "probability": 100, "other_priorities": "enabled"},
    "cable_length_m": None,
    "roce_mode": 2,
    "dscp_map": {},
}
_TOP_KEYS = tuple(DEFAULTS)
_ECN_KEYS = tuple(DEFAULTS["ecn"])
TRUST_STATES = ("dscp", "pcp")
ECN_OTHER = ("enabled", "disabled", "unmanaged")
ROCE_MODES = {1: "IB/RoCE v1", 2: "RoCE v2"}
#: The ECN field value "ECN-capable transport" ECT(0), RFC 3168; DCQCN needs ECN-capable RoCE packets.
ECT0 = 0b10


class RoceConfigError(FabricopsError):
    """A RoCE definition that does not validate; the message is one sentence that says what to fix."""


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

    @property
    def tos(self) -> int:
        """IP ToS byte of RoCE data: DSCP in the upper six bits, ECT(0) in the two ECN bits
        (``DSCP << 2 | 0b10``), so DSCP 26 -> 106, the value NVIDIA documents for ``cma_roce_tos``,
        the traffic_class file and ``NCCL_IB_TC``. (``26 << 2`` alone is 104: same DSCP, not ECN-capable.)"""
        return self.dscp << 2 | ECT0

    @property
    def pfc_vector(self) -> list[int]:
        """``mlnx_qos --pfc`` vector: 1 on the lossless priority only."""
        return [1 if p == self.lossless_priority else 0 for p in range(8)]

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
        """The effective definition plus its derived values, as plain data (for templates, JSON)."""
        return {
            "lossless_priority": self.lossless_priority,
            "dscp": self.dscp,
            "cnp_dscp": self.cnp_dscp,
            "cnp_priority": self.cnp_priority,
            "trust": self.trust,
            "ecn": {
                "min_kb": self.ecn.min_kb,
                "max_kb": self.ecn.max_kb,
                "probability": self.ecn.probability,
                "other_priorities": self.ecn.other_priorities,
            },
            "cable_length_m": self.cable_length_m,
            "roce_mode": self.roce_mode,
            "dscp_map": {str(k): v for k, v in sorted(self.dscp_map.items())},
            "derived": {
                "tos": self.tos,
                "pfc_vector": self.pfc_vector,
                "dscp2prio": {str(k): v for k, v in self.dscp2prio.items()},
                "roce_mode_name": self.roce_mode_name,
                "ecn_enable": [self.ecn_enabled(p) for p in range(8)],
            },
        }


def _int(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise RoceConfigError(f"fabricops_roce.{name} must be an integer from {lo} to {hi}, not {value!r}.")
    try:
        number = int(value)
    except ValueError:
        raise RoceConfigError(
            f"fabricops_roce.{name} must be an integer from {lo} to {hi}, not {value!r}."
        ) from None
    if not lo <= number <= hi:
        raise RoceConfigError(f"fabricops_roce.{name} is {number}; it must be from {lo} to {hi}.")
    return number


def _unknown(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    extra = sorted(str(k) for k in data if k not in allowed)
    if extra:
        raise RoceConfigError(
            f"{where} has unknown key(s) {', '.join(extra)}; allowed: {', '.join(allowed)}."
        )


def validate(data: Mapping[str, Any] | None) -> RoceConfig:
    """Merge ``data`` over :data:`DEFAULTS`, check every field and cross-field rule, return the config.

    Raises :class:`RoceConfigError` with one sentence naming the field and what to fix.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise RoceConfigError(f"fabricops_roce must be a mapping, not {type(data).__name__}.")
    _unknown(data, _TOP_KEYS, "fabricops_roce")
    merged = copy.deepcopy(DEFAULTS)
    for key, value in data.items():
        if key == "ecn" and value is not None:
            if not isinstance(value, Mapping):
                raise RoceConfigError("fabricops_roce.ecn must be a mapping (min_kb, max_kb, probability).")
            _unknown(value, _ECN_KEYS, "fabricops_roce.ecn")
            merged["ecn"].update(value)
        elif key == "dscp_map" and value is None:
            merged["dscp_map"] = {}
        else:
            merged[key] = value

    lossless = _int(merged["lossless_priority"], "lossless_priority", 0, 7)
    dscp = _int(merged["dscp"], "dscp", 0, 63)
    cnp_dscp = _int(merged["cnp_dscp"], "cnp_dscp", 0, 63)
    cnp_prio = _int(merged["cnp_priority"], "cnp_priority", 0, 7)
    trust = merged["trust"]
    if trust not in TRUST_STATES:
        raise RoceConfigError(
            f"fabricops_roce.trust is {trust!r}; it must be one of {', '.join(TRUST_STATES)}."
        )
    roce_mode = _int(merged["roce_mode"], "roce_mode", 1, 2)
    cable = merged["cable_length_m"]
    cable = None if cable is None else _int(cable, "cable_length_m", 1, 1000)

    ecn = merged["ecn"]
    min_kb = _int(ecn["min_kb"], "ecn.min_kb", 1, 100_000)
    max_kb = _int(ecn["max_kb"], "ecn.max_kb", 1, 100_000)
    prob = _int(ecn["probability"], "ecn.probability", 1, 100)
    other = ecn["other_priorities"]
    if other not in ECN_OTHER:
        raise RoceConfigError(
            f"fabricops_roce.ecn.other_priorities is {other!r}; it must be one of {', '.join(ECN_OTHER)}."
        )
    if min_kb > max_kb:
        raise RoceConfigError(
            f"fabricops_roce.ecn.min_kb ({min_kb}) is above ecn.max_kb ({max_kb}); min must not exceed max."
        )

    if cnp_prio == lossless:
        raise RoceConfigError(
            f"fabricops_roce.cnp_priority ({cnp_prio}) equals lossless_priority; CNPs need their own "
            "priority so they are not paused behind the data they throttle."
        )
    if cnp_dscp == dscp:
        raise RoceConfigError(
            f"fabricops_roce.cnp_dscp ({cnp_dscp}) equals dscp; give CNPs a DSCP of their own (usually 48)."
        )

    raw_map = merged["dscp_map"]
    if not isinstance(raw_map, Mapping):
        raise RoceConfigError("fabricops_roce.dscp_map must be a mapping of DSCP to priority, e.g. {46: 5}.")
    dscp_map: dict[int, int] = {}
    for key, prio in raw_map.items():
        d = _int(key, f"dscp_map key {key!r}", 0, 63)
        dscp_map[d] = _int(prio, f"dscp_map[{d}]", 0, 7)
    if dscp_map.get(dscp, lossless) != lossless:
        raise RoceConfigError(
            f"fabricops_roce.dscp_map maps the RoCE DSCP {dscp} to priority {dscp_map[dscp]}, "
            f"but RoCE must land on lossless_priority {lossless}."
        )
    if dscp_map.get(cnp_dscp, cnp_prio) != cnp_prio:
        raise RoceConfigError(
            f"fabricops_roce.dscp_map maps the CNP DSCP {cnp_dscp} to priority {dscp_map[cnp_dscp]}, "
            f"but CNPs must land on cnp_priority {cnp_prio}."
        )
    return RoceConfig(
        lossless_priority=lossless,
        dscp=dscp,
        cnp_dscp=cnp_dscp,
        cnp_priority=cnp_prio,
        trust=trust,
        ecn=EcnConfig(min_kb=min_kb, max_kb=max_kb, probability=prob, other_priorities=other),
        cable_length_m=cable,
        roce_mode=roce_mode,
        dscp_map=dict(sorted(dscp_map.items())),
    )
