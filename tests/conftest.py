"""Shared test helpers; real captures are read through tests/captures.py."""

from __future__ import annotations

import pytest
from captures import FIXTURES, fixture_names, read_fixture

__all__ = ["FIXTURES", "fixture_names", "read_fixture"]


@pytest.fixture
def fixture_text():
    return read_fixture
