"""Real captured tool output under tests/fixtures/<tool>/.

Each file's first line names its public source (``# source: ...``) and is not part of the capture.
(A plain module, not conftest.py: several test folders have a conftest of their own, and a
``from conftest import`` would pick whichever pytest loaded last.)
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def read_fixture(tool: str, name: str) -> str:
    """The capture in tests/fixtures/<tool>/<name>, without its source line."""
    text = (FIXTURES / tool / name).read_text(encoding="utf-8")
    first, _, rest = text.partition("\n")
    if not first.startswith("# source:"):
        raise AssertionError(f"fixture {tool}/{name} must start with '# source: <public source>'")
    return rest


def fixture_names(tool: str) -> list[str]:
    return sorted(p.name for p in (FIXTURES / tool).iterdir() if p.is_file())
