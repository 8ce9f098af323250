"""mlxfwreset query parser on a real capture (tests/fixtures/mlxfwreset/)."""

from __future__ import annotations

import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers import mlxfwreset


def test_bluefield3_query():
    r = mlxfwreset.parse_query(read_fixture("mlxfwreset", "bf3_dpu_query.txt"))
    assert [lv["level"] for lv in r["levels"]] == [0, 1, 3, 4]
    assert r["levels"][2] == {
        "id": 3, "level": 3, "description": "Driver restart and PCI reset",
        "supported": True, "default": False,
    }
    assert r["levels"][0]["default"] is True and r["levels"][1]["supported"] is False
    assert mlxfwreset.supported_levels(r) == [0, 3, 4]
    assert [t["supported"] for t in r["types"]] == [True, False, False, False, False]
    assert r["syncs"][0]["supported"] is False  # '-Not supported', lower case s
    assert r["syncs"][1]["default"] is True
    assert r["methods"] == []
    assert r["raw"][0] == "Reset-levels:"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("3: Driver restart and PCI reset   -Supported\n", "Reset-levels"),
        ("Reset-levels:\n", "Reset-levels"),
        ("Reset-levels:\n3: Driver restart and PCI re\n", "mark"),
    ],
)
def test_refusals(text, why):
    with pytest.raises(ParseError, match=why):
        mlxfwreset.parse_query(text)
