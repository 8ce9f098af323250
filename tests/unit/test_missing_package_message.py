"""A controller without the fabricops package gets one sentence with the command that fixes it."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("fo_package", REPO / "plugins/plugin_utils/package.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_message_names_this_python_and_the_collection_to_pip_install():
    mod = _load()
    msg = mod.missing_package("fabricops.fabric.roce_plan", ImportError("No module named 'fabricops'"))
    assert msg.startswith("fabricops.fabric.roce_plan needs the fabricops Python package")
    import tomllib

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    # the wheel's real file name: the collection and the package share one version
    assert f"`{sys.executable} -m pip install fabricops-{version}-py3-none-any.whl`" in msg
    assert "No module named 'fabricops'" in msg and "\n" not in msg
    assert mod.collection_version() == version


def test_every_plugin_that_needs_the_package_says_so_the_same_way():
    for f in sorted((REPO / "plugins").glob("*/*.py")):
        text = f.read_text()
        if re.search(r"^\s+from fabricops[ .]", text, re.M):
            assert "missing_package(" in text, f"{f.relative_to(REPO)} has its own missing-package message"
            assert "pip install fabricops)" not in text
