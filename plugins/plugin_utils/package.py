# SPDX-License-Identifier: Apache-2.0
"""The one message for a controller without the fabricops Python package.

The collection's plugins are thin shims over the ``fabricops`` package, which runs in the Python
that runs ansible-playbook. Installed from its tarball, the collection carries the package's
source, so the message names the exact command for this controller: pip of that Python, on this
collection's own directory (or the wheel built from it).
"""

from __future__ import annotations

import os
import sys


def collection_dir() -> str:
    """This collection's root (plugins/plugin_utils/package.py -> the collection)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def missing_package(plugin: str, exc: BaseException) -> str:
    """One sentence: what is missing, where, and the command that installs it."""
    return (
        f"{plugin} needs the fabricops Python package in the Python that runs Ansible "
        f"({sys.executable}), which cannot import it ({exc}); install it with "
        f"`{sys.executable} -m pip install {collection_dir()}` (the collection carries the package), "
        "or pip install the fabricops-<version>-py3-none-any.whl built from the same release"
    )
