"""tests/integration/streams.py: every integration file runs exactly once, and no two streams that
run side by side name the same host or switch in their files."""

from __future__ import annotations

import re
from pathlib import Path

from integration import streams

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
NAMES = re.compile(r"\b(gpu0[1-4]|leaf-onyx|leaf-cumulus|ib-sw1)\b")


def test_every_integration_file_is_in_exactly_one_place():
    placed = [f for files in streams.STREAMS.values() for f in files] + streams.WHOLE_RACK
    on_disk = sorted(p.name for p in INTEGRATION.glob("test_*.py"))
    assert sorted(placed) == on_disk, "add the new file to a stream or to WHOLE_RACK"
    assert len(placed) == len(set(placed))
    assert streams.WHOLE_RACK[-1] == "test_lab_down.py"


def test_side_by_side_streams_touch_disjoint_hosts_and_switches():
    touched = {}
    for name, files in streams.STREAMS.items():
        found = set()
        for f in files:
            found |= set(NAMES.findall((INTEGRATION / f).read_text()))
        allowed = set(name.split("-")) if name.startswith("gpu") else {"leaf-onyx", "leaf-cumulus"}
        assert found <= allowed, f"stream {name} names {sorted(found - allowed)}: move the file to WHOLE_RACK"
        touched[name] = found
    names = list(touched)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not touched[a] & touched[b], (a, b)
