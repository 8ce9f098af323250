"""Test-process hygiene (tests/isolation.py): what the parallel suite needs to be deterministic.

The race this reproduces: under xdist, two workers each ran a switch-change test against their own
emulated "leaf-cumulus"; both took the controller's switch lock in the one per-user lock directory,
and the second failed with "another change is running on this switch". Here two tests on two
workers hold that lock at the same time, in lock step (each waits until the other holds it), so
without a runtime directory per process the second always fails; nothing depends on timing luck.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

BOTH_HOLD = '''
import os, time
from pathlib import Path
import pytest
from fabricops.switch.lock import lock_dir, switch_lock

BARRIER = Path(os.environ["BARRIER_DIR"])


@pytest.mark.parametrize("me,other", [("a", "b"), ("b", "a")])
def test_hold(me, other):
    assert str(lock_dir()).startswith(os.environ["XDG_RUNTIME_DIR"])
    try:
        with switch_lock("leaf-cumulus", "test " + me):
            (BARRIER / me).touch()
            deadline = time.monotonic() + 30
            while not (BARRIER / other).exists() and not (BARRIER / "refused").exists():
                assert time.monotonic() < deadline, "the other worker never held its lock"
                time.sleep(0.02)
    except Exception:
        (BARRIER / "refused").touch()  # the other test stops waiting
        raise
'''


def _run(tmp_path, *plugins: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_both_hold.py").write_text(BOTH_HOLD)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "BARRIER_DIR": str(barrier), "PYTHONPATH": str(TESTS),
           "XDG_RUNTIME_DIR": str(tmp_path)}  # one directory for both, as a user's session has
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "worksteal",
            "--rootdir", str(tmp_path), "-c", os.devnull]
    for plugin in plugins:
        argv += ["-p", plugin]
    return subprocess.run([*argv, str(tmp_path / "test_both_hold.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_two_workers_hold_the_same_switch_lock_each_in_its_own_runtime_dir(tmp_path):
    proc = _run(tmp_path, "isolation")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 passed" in proc.stdout


def test_without_the_plugin_the_second_worker_is_refused(tmp_path):
    """The reproduction: the same two tests, sharing the user's runtime directory, collide."""
    proc = _run(tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "another change is running on this switch" in proc.stdout


@pytest.mark.parametrize(
    ("order", "first"),
    [("reverse", "test_z"), ("random:7", None)],
)
def test_order_reverses_or_shuffles_files_and_unit_tests_but_keeps_integration_files(tmp_path, order, first):
    for d in ("unit", "integration"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "__init__.py").write_text("")
    (tmp_path / "unit" / "test_u.py").write_text(
        "".join(f"def test_{c}():\n    pass\n" for c in "abcdefghijklmnopqrstuvwxyz")
    )
    (tmp_path / "integration" / "test_i.py").write_text(
        "".join(f"def test_{c}():\n    pass\n" for c in "abcdefghijklmnopqrstuvwxyz")
    )
    env = {**os.environ, "PYTHONPATH": str(TESTS), "FABRICOPS_TEST_ORDER": order}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "isolation",
         "--rootdir", str(tmp_path), "-c", os.devnull, "unit", "integration"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [ln for ln in proc.stdout.splitlines() if "::" in ln]
    unit = [i.rsplit("::", 1)[1] for i in ids if i.startswith("unit/")]
    integration = [i.rsplit("::", 1)[1] for i in ids if i.startswith("integration/")]
    assert sorted(unit) == [f"test_{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    assert unit != sorted(unit)  # reordered
    if first:
        assert unit[0] == first
    assert integration == sorted(integration)  # a scenario file keeps its own order
