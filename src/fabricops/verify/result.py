"""One verification result: what was checked, on which host and device, measured against what.

A check that could not run (tool missing, output unreadable, expectation missing) is ``error``,
and ``error`` counts as a failure: verification fails closed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

PASS, FAIL, ERROR, SKIP = "pass", "fail", "error", "skip"
CATEGORIES = ("hosts", "gpus", "pairs", "nccl")


@dataclass
class CheckResult:
    category: str  #: hosts | gpus | pairs | nccl
    check: str  #: e.g. ofed_version, hca_port, nvlink, ib_write_bw
    host: str  #: host name; for a pair "a<->b"
    device: str | None  #: mlx5_0/1, GPU3, netdev; None for host-wide checks
    status: str  #: pass | fail | error | skip
    message: str  #: one line naming host, device and what was found
    measured: Any = None
    threshold: Any = None
    op: str | None = None  #: ">=", "<=", "==" (how measured compares with threshold)
    unit: str | None = None
    cause: str | None = None  #: likely cause of a failure
    source: str | None = None  #: where the threshold comes from
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in (PASS, SKIP)

    @property
    def name(self) -> str:
        return "/".join(x for x in (self.category, self.check, self.host, self.device) if x)

    def to_data(self) -> dict[str, Any]:
        data = asdict(self)
        data["name"] = self.name
        return data


def passed(results: list[CheckResult]) -> bool:
    """True only when there is at least one result and none failed or errored."""
    return bool(results) and all(r.ok for r in results)
