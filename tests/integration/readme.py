"""The README's fenced command blocks, as written: what the tests that run them verbatim read."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_blocks(section: str) -> list[str]:
    """The fenced ``sh`` blocks of one README section: from the heading ``## SECTION`` (or ``## SECTION
    (...)``) up to the next ``## `` heading. A missing section fails here, by name."""
    text = README.read_text()
    m = re.search(rf"^## {re.escape(section)}(?: \([^\n]*\))?\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"README.md has no section '## {section}'"
    return re.findall(r"^```sh\n(.*?)^```$", m.group(1), re.M | re.S)
