"""The conformance suite: real clients nobody on this project wrote, against the emulated switches.

Clients that need their own pins (Ansible 7 with mellanox.onyx) run from the conformance venv that
scripts/conformance-venv.sh builds ($FABRICOPS_CONFORMANCE_VENV, default .venv-conformance). Without
it a test skips and says how to build it; in CI (CI=true) a missing venv is a failure, never a skip.
Each test adds its real-client calls to a tally printed at the end of the run (per client). Under
xdist each worker sends its tally to the controller when it finishes (``workeroutput``), so the
printed tally is the whole run's.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_TALLY: Counter = Counter()
#: test modules that count their client calls in a module-level CALLS list -> the client's name
CALL_LISTS = {"test_netmiko_cumulus": "netmiko cumulus_linux", "test_rest_api": "REST (urllib)"}
_WORKERS: Counter = Counter()  # on the xdist controller: what the workers counted
_KEY = "fabricops_conformance_tally"


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


def _module(name: str):
    for mod_name, mod in list(sys.modules.items()):
        if mod_name == name or mod_name.endswith("." + name):
            return mod
    return None


def _counts() -> Counter:
    """This process's tally: (client, "pass"/"fail") and (client, "calls") for the CALLS lists."""
    counts = Counter(_TALLY)
    for mod, client in CALL_LISTS.items():
        calls = getattr(_module(mod), "CALLS", None)
        if calls:
            counts[(client, "calls")] += len(calls)
    return counts


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the tally to the controller
        workeroutput[_KEY] = json.dumps([[c, k, n] for (c, k), n in _counts().items()])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    for client, kind, n in json.loads(getattr(node, "workeroutput", {}).get(_KEY, "[]")):
        _WORKERS[(client, kind)] += n


def pytest_terminal_summary(terminalreporter):
    counts = _counts() + _WORKERS
    clients = sorted({c for c, k in counts if k in ("pass", "fail")})
    if clients:
        terminalreporter.section("real-client calls (conformance)")
        for c in clients:
            terminalreporter.line(f"{c}: {counts[(c, 'pass')]} passed, {counts[(c, 'fail')]} failed")
    reports = terminalreporter.stats.get("failed", []) + terminalreporter.stats.get("error", [])
    for mod, client in CALL_LISTS.items():
        if counts[(client, "calls")]:
            failed = sum(1 for r in reports if f"nvue/{mod}.py" in getattr(r, "nodeid", ""))
            n = counts[(client, "calls")]
            line = f"NVUE conformance: {client}: {n} calls ({failed} of its tests failed)"
            terminalreporter.write_line(line)
