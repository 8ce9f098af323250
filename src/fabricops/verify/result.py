"""verify's name for the one result type (:class:`fabricops.result.Result`), kept for its importers.

A check that could not run (tool missing, output unreadable, expectation missing) is ``error``,
and ``error`` counts as a failure: verification fails closed.
"""

from __future__ import annotations

from fabricops.result import ERROR, FAIL, PASS, SKIP, Component, Result, passed

CheckResult = Result
CATEGORIES = ("hosts", "gpus", "pairs", "nccl")

__all__ = ["CATEGORIES", "ERROR", "FAIL", "PASS", "SKIP", "CheckResult", "Component", "Result", "passed"]
