"""The conformance suite: real clients nobody on this project wrote, against the emulated switches.

Clients that need their own pins (Ansible 7 with mellanox.onyx) run from the conformance venv that
scripts/conformance-venv.sh builds ($FABRICOPS_CONFORMANCE_VENV, default .venv-conformance). Without
it a test skips and says how to build it; in CI (CI=true) a missing venv is a failure, never a skip.
Each test adds its real-client calls to a tally printed at the end of the run (per client).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_TALLY: Counter = Counter()


@pytest.fixture(scope="session")
def conformance_venv() -> Path:
    venv = Path(os.environ.get("FABRICOPS_CONFORMANCE_VENV") or REPO / ".venv-conformance")
    if (venv / "bin" / "ansible-playbook").is_file():
        return venv
    msg = f"the conformance venv {venv} is missing: build it with bash scripts/conformance-venv.sh"
    if os.environ.get("CI") == "true":
        pytest.fail(msg + " (CI must run the real clients, a skip would hide them)")
    pytest.skip(msg)


@pytest.fixture
def client_calls():
    """``client_calls(client, passed, failed=0)``: count real-client calls for the end-of-run tally."""

    def add(client: str, passed: int, failed: int = 0) -> None:
        _TALLY[(client, "pass")] += passed
        _TALLY[(client, "fail")] += failed

    return add


def pytest_terminal_summary(terminalreporter):
    clients = sorted({c for c, _ in _TALLY})
    if not clients:
        return
    terminalreporter.section("real-client calls (conformance)")
    for c in clients:
        terminalreporter.line(f"{c}: {_TALLY[(c, 'pass')]} passed, {_TALLY[(c, 'fail')]} failed")
