"""Test-process hygiene, loaded by tests/conftest.py (a plain module so a test can load it as a
plugin, ``-p isolation``, into a pytest of its own):

- each test process (the xdist controller and every worker) gets a runtime directory of its own;
- ``FABRICOPS_TEST_ORDER`` reorders the tests to hunt order dependencies.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile

import pytest


def pytest_configure(config):
    """Each test process (the xdist controller and every worker) gets a runtime directory of its own.

    The switch lock (fabricops.switch.lock) lives in $XDG_RUNTIME_DIR/fabricops/locks (as root only
    when that directory is root's own, 0700: this one is), per device address and port; the tests'
    emulated switches listen on loopback and share names (leaf-onyx, leaf-cumulus), so two workers
    changing "their" leaf-cumulus at once could find each other's lock and fail with "another change
    is running on this switch". Within one process tests run one at a time, as changes from one
    controller do. Child processes (fabricops, ansible-playbook) inherit the directory.
    """
    if not hasattr(config, "_fabricops_runtime_dir"):
        runtime = tempfile.mkdtemp(prefix="fabricops-test-run-")
        os.chmod(runtime, 0o700)
        config._fabricops_runtime_dir = runtime
        os.environ["XDG_RUNTIME_DIR"] = runtime


def pytest_unconfigure(config):
    runtime = getattr(config, "_fabricops_runtime_dir", None)
    if runtime:
        shutil.rmtree(runtime, ignore_errors=True)


# --- the order tests run in: FABRICOPS_TEST_ORDER = forward (default) | reverse | random:SEED -------

#: scenario files: their tests are steps of one story on shared lab hosts (install, run again,
#: check...), so their own order is kept; the files themselves are reordered
ORDERED_DIRS = ("integration",)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Reorder the collected tests to hunt order dependencies (scripts/test.sh, docs/development.md).

    Files are reversed or shuffled, and the tests inside a unit or conformance file too; an
    integration file keeps its own order. Every xdist worker computes the same order (same seed).
    """
    order = os.environ.get("FABRICOPS_TEST_ORDER", "forward")
    if order == "forward":
        return
    if order == "reverse":
        rng = None
    elif order.startswith("random:") and order[7:].isdigit():
        rng = random.Random(int(order[7:]))
    else:
        raise pytest.UsageError(f"FABRICOPS_TEST_ORDER={order!r}: use forward, reverse or random:SEED")
    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    files = list(by_file)
    if rng is None:
        files.reverse()
    else:
        rng.shuffle(files)
    ordered = []
    for f in files:
        tests = by_file[f]
        if not any(f"/{d}/" in f"/{f}" for d in ORDERED_DIRS):
            if rng is None:
                tests.reverse()
            else:
                rng.shuffle(tests)
        ordered.extend(tests)
    items[:] = ordered
