"""Shared test helpers; real captures are read through tests/captures.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.plugins.loader import init_plugin_loader
from ansible.utils.collection_loader import AnsibleCollectionConfig
from captures import FIXTURES, fixture_names, read_fixture

# Ansible's collection finder, installed once for the whole run with this checkout as
# fabricops.fabric: code under test that renders with Ansible's Templar installs the finder when
# it is absent (fabricops.switch.access.ansible_render), and a finder installed from inside a test
# (another cwd, no ansible.cfg) would not know the collection, so later imports of
# ansible_collections.fabricops.fabric.* would depend on the test order.
if AnsibleCollectionConfig.collection_finder is None:  # this file may be imported twice
    init_plugin_loader([str(Path(__file__).resolve().parents[1] / ".collections")])

__all__ = ["FIXTURES", "fixture_names", "read_fixture"]


@pytest.fixture
def fixture_text():
    return read_fixture



# the runtime directory of each test process, and the order tests run in (tests/isolation.py)
from isolation import (  # noqa: E402
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_unconfigure,
)

__all__ += ["pytest_collection_modifyitems", "pytest_configure", "pytest_unconfigure"]
