"""Every captured fixture names its public source on its first line."""

from captures import FIXTURES


def test_every_fixture_names_its_source():
    files = [p for p in FIXTURES.rglob("*") if p.is_file()]
    assert files, "no fixtures found"
    for path in files:
        first = path.read_text(encoding="utf-8").split("\n", 1)[0]
        assert first.startswith("# source: ") and len(first) > len("# source: ") + 5, path
