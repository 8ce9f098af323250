"""The one verdict type: every check, finding and judgement of the product is a :class:`Result`.

A result says what was judged (``category``/``check``), about which component (a host, an HCA port, a
GPU, a cable, a switch port, a switch, a pair of hosts, the fabric), with which status, how severe it
is, what the evidence was, when it was observed and what to do about it. Reports, exit statuses and
scheduler actions are derived from results, never decided again in each command
(docs/architecture.md, "One result type").

``status`` is one of pass / fail / error / skip. A check that could not run (tool missing, output
unreadable, expectation missing) is ``error``, and ``error`` counts as a failure: verification fails
closed. ``skip`` is not applicable, with the reason in ``message``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

PASS, FAIL, ERROR, SKIP = "pass", "fail", "error", "skip"
STATUSES = (PASS, FAIL, ERROR, SKIP)

CRITICAL, WARNING, INFO = "critical", "warning", "info"
SEVERITIES = (CRITICAL, WARNING, INFO)

#: what a verdict can be about
COMPONENT_KINDS = ("host", "hca_port", "gpu", "cable", "switch_port", "switch", "pair", "fabric")

#: the action of a result that needs none
NO_ACTION = "none"


def clock() -> str:
    """Now, ISO-8601 UTC to the second (``2025-01-31T12:00:00Z``). Tests pin it with monkeypatch."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _observed_now() -> str:
    return clock()  # looked up at call time, so a pinned clock is used


@dataclass(frozen=True)
class Component:
    """What a verdict is about. ``host``: the host (or switch) it lives on; None for a pair or the fabric."""

    kind: str  #: one of COMPONENT_KINDS
    name: str  #: mlx5_0/1, GPU3, Eth1/4, gpu01, "a<->b", "a,b"
    host: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in COMPONENT_KINDS:
            raise ValueError(f"component kind {self.kind!r} is not one of {', '.join(COMPONENT_KINDS)}")

    def to_data(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "host": self.host}


# device name -> component kind, first match wins (the device names the product's checks use)
_DEVICE_KINDS: tuple[tuple[re.Pattern[str], str], ...] = (
    # an RDMA device or one of its ports: mlx5_0, mlx5_0/1 (and the other RDMA providers' names)
    (re.compile(r"^(mlx\d+_\d+|bnxt_re\d+|irdma\d+|rxe\d+|efa_?\d+|hfi1_\d+|qedr\d+)(/\d+)?$"), "hca_port"),
    (re.compile(r"^gpu\d+$", re.IGNORECASE), "gpu"),
    # a switch port: Onyx Eth1/4 (Eth1/1/2 split), Cumulus swp1 (swp1s0), SONiC Ethernet0
    (re.compile(r"^(Eth\d+/\d+(/\d+)?|swp\d+(s\d+)?|Ethernet\d+)$"), "switch_port"),
    # a port's netdev (RoCE enp..np0, IPoIB ib0 / ibp26s0): the HCA port seen from the kernel
    (re.compile(r"^(ib[a-z]*\d\w*|en[a-z]+\d\w*)$"), "hca_port"),
)


def component_of(host: str | None, device: str | None) -> Component:
    """The component a verdict on ``host``/``device`` is about (the one derivation; see test_result).

    host ``a<->b`` -> pair; several hosts ``a,b`` (or none, ``-``) -> fabric; no device -> host;
    ``mlx5_0/1``, ``mlx5_0`` or a port's netdev -> hca_port; ``GPU3`` -> gpu (named ``GPU3``);
    ``Eth1/4``, ``swp1`` -> switch_port on that switch; another device (a kernel release, a PCI
    bridge) -> the host it was found on.
    """
    who = (host or "").strip()
    if "<->" in who:
        return Component("pair", who)
    if "," in who or who in ("", "-"):
        return Component("fabric", who or "-")
    dev = (device or "").strip()
    if not dev:
        return Component("host", who, who)
    for pattern, kind in _DEVICE_KINDS:
        if pattern.match(dev):
            return Component(kind, dev.upper() if kind == "gpu" else dev, who)
    return Component("host", who, who)


def severity_of(status: str) -> str:
    """The default severity: a failure or an error is critical, a pass or a skip is information."""
    return CRITICAL if status in (FAIL, ERROR) else INFO


@dataclass
class Result:
    category: str  #: hosts | gpus | pairs | nccl (verify), diagnose, ...
    check: str  #: e.g. ofed_version, hca_port, nvlink, ib_write_bw; a diagnose finding's kind
    host: str  #: host name; for a pair "a<->b"; several hosts "a,b"
    device: str | None  #: mlx5_0/1, GPU3, netdev; None for host-wide checks
    status: str  #: pass | fail | error | skip
    message: str  #: one line naming host, device and what was found (diagnose: the symptom)
    measured: Any = None
    threshold: Any = None
    op: str | None = None  #: ">=", "<=", "==" (how measured compares with threshold)
    unit: str | None = None
    cause: str | None = None  #: likely cause of a failure
    source: str | None = None  #: where the threshold comes from
    details: dict[str, Any] = field(default_factory=dict)
    component: Component | None = None  #: None: derived from host and device (component_of)
    severity: str | None = None  #: critical | warning | info; None: derived from status (severity_of)
    action: str | None = None  #: the recommended action, a short sentence ("run the ipoib role", "none")
    evidence: list[str] = field(default_factory=list)  #: the observations behind it, with their source
    observed_at: str = field(default_factory=_observed_now)  #: ISO-8601 UTC
    caused_by: str | None = None  #: another result's component/check that explains this one

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"result status {self.status!r} is not one of {', '.join(STATUSES)}")
        if self.component is None:
            self.component = component_of(self.host, self.device)
        if self.severity is None:
            self.severity = severity_of(self.status)
        elif self.severity not in SEVERITIES:
            raise ValueError(f"result severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")

    @property
    def ok(self) -> bool:
        return self.status in (PASS, SKIP)

    @property
    def name(self) -> str:
        return "/".join(x for x in (self.category, self.check, self.host, self.device) if x)

    def to_data(self) -> dict[str, Any]:
        data = asdict(self)  # component (a dataclass) becomes {"kind", "name", "host"}
        data["name"] = self.name
        return data


def passed(results: Sequence[Result]) -> bool:
    """True only when there is at least one result and none failed or errored."""
    return bool(results) and all(r.ok for r in results)
