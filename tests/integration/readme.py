"""The README's fenced command blocks, as written: what the tests that run them verbatim read."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_blocks(section: str) -> list[str]:
    """The fenced ``sh`` blocks of one README section (``## SECTION`` up to the next ``## ``)."""
    text = README.read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```sh\n(.*?)^```$", body, re.M | re.S)
