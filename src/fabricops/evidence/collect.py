"""Collecting a host's evidence: one batched run per host where the transport offers it.

``run`` is the transport's ``run(host, command, timeout) -> {"rc", "stdout", "stderr"}``. Where it
has a ``batch(host, commands, timeout)`` (fabricops.verify.transport.Fabric, or a wrapper such as
verify's ``Reach``), or is a bound ``run`` of an object that has one (``fabric.run``), the whole
mapping goes to the host in one session; else (unit tests' plain functions) each command is run in
order, one call each. The answer is the same either way (docs/verify.md, "Transport").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Result = Mapping[str, Any]
Run = Callable[[str, str, float], Result]
Batch = Callable[[str, Mapping[str, str], float], Mapping[str, Result]]


def batch_of(run: Any) -> Batch | None:
    """``run``'s batch: its own ``batch`` attribute, or that of the object ``run`` is bound to."""
    batch = getattr(run, "batch", None)
    if batch is None:
        batch = getattr(getattr(run, "__self__", None), "batch", None)
    return batch if callable(batch) else None


def collect(run: Run, host: str, commands: Mapping[str, str], timeout: float) -> dict[str, dict]:
    """{key: {"rc", "stdout", "stderr"}} for every key of ``commands``, in their order."""
    if not commands:
        return {}
    batch = batch_of(run)
    if batch is None:
        return {key: dict(run(host, cmd, timeout)) for key, cmd in commands.items()}
    answer = batch(host, commands, timeout)
    # a key the batch did not answer is no evidence: the transport's failure, never a silent gap
    missing = {"rc": 255, "stdout": "", "stderr": f"{host}: no answer for this command in the batch"}
    return {key: dict(answer.get(key) or missing) for key in commands}
