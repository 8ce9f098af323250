# SPDX-License-Identifier: Apache-2.0
"""The one message for a controller without the fabricops Python package.

The collection's plugins are thin shims over the ``fabricops`` package, which must be importable by
the Python that runs ansible-playbook. The package ships as a wheel of the same release as the
collection (README, "Install on your controller"); the message names the exact pip for this
controller and the wheel's file name.
"""

from __future__ import annotations

import json
import os
import re
import sys


def collection_dir() -> str:
    """This collection's root (plugins/plugin_utils/package.py -> the collection)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def collection_version() -> str:
    """The collection's version: MANIFEST.json (installed) or galaxy.yml (a checkout); '<version>'."""
    root = collection_dir()
    try:
        with open(os.path.join(root, "MANIFEST.json"), encoding="utf-8") as fh:
            return str(json.load(fh)["collection_info"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as fh:
            m = re.search(r"^version:\s*([0-9A-Za-z.+-]+)\s*$", fh.read(), re.M)
            if m:
                return m.group(1)
    except OSError:
        pass
    return "<version>"


def missing_package(plugin: str, exc: BaseException) -> str:
    """One sentence: what is missing, where, and the command that installs it."""
    return (
        f"{plugin} needs the fabricops Python package in the Python that runs Ansible "
        f"({sys.executable}), which cannot import it ({exc}); install the wheel of this release with "
        f"`{sys.executable} -m pip install fabricops-{collection_version()}-py3-none-any.whl` (built from "
        "the fabricops source with `python3 -m pip wheel --no-deps .`; README, Install on your controller)"
    )


class LazyModule:
    """A module of the fabricops package that is imported when a plugin first uses it.

    Ansible runs each task for each host in a forked worker, and the worker, not the parent,
    loads the filter plugins; on the first collection filter it loads every filter file of the
    collection. A fabricops import at the top of a filter file is therefore paid again by every
    task and host whose templates use any of the collection's filters (on the 2-core lab, about
    150 ms for all of them, more than the rest of a set_fact). Imported on first use, a task pays
    only for the module its own filter calls. ``fabricops.errors`` (small) stays a plain import:
    it is the check that the package is there at all (``missing_package``).
    """

    def __init__(self, name: str):
        self._name = name
        self._module = None

    def __getattr__(self, attr: str):  # called only for names the proxy itself does not have
        if self._module is None:
            import importlib

            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)
