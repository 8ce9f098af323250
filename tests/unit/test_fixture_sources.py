"""Every captured fixture names its public source on its first line."""

from captures import FIXTURES


def test_every_fixture_names_its_source():
    files = [p for p in FIXTURES.rglob("*") if p.is_file()]
    assert files, "no fixtures found"
    for path in files:
        first = path.read_text(encoding="utf-8").split("\n", 1)[0]
        assert first.startswith("# source: ") and len(first) > len("# source: ") + 5, path


def test_no_test_imports_from_conftest():
    """Several folders have a conftest.py; `from conftest import` picks whichever pytest loaded last."""
    root = FIXTURES.parent
    offenders = [
        str(p.relative_to(root))
        for folder in ("unit", "integration")
        for p in (root / folder).rglob("*.py")
        if any(ln.startswith(("from conftest", "import conftest")) for ln in p.read_text().splitlines())
    ]
    assert offenders == []
