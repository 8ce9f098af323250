"""The changelog is antsibull-changelog's (docs/development.md, "Changelog"): every fragment in
changelogs/fragments/ is valid and names a section of changelogs/config.yaml, changelogs/changelog.yaml
is valid, and CHANGELOG.md is what scripts/changelog.sh makes of them, not an edited copy."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHANGELOGS = REPO / "changelogs"
BIN = Path(sys.executable).parent  # the venv's antsibull-changelog and ansible-doc


def _config() -> dict:
    return yaml.safe_load((CHANGELOGS / "config.yaml").read_text())


def _fragments() -> list[Path]:
    return sorted(p for p in (CHANGELOGS / "fragments").iterdir() if not p.name.startswith("."))


def _releases() -> dict:
    return yaml.safe_load((CHANGELOGS / "changelog.yaml").read_text())["releases"] or {}


def _antsibull(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "antsibull_changelog", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )


def test_every_fragment_is_valid_and_names_a_known_section():
    """antsibull-changelog lint: YAML, RST, and a section of config.yaml (the lint phase of
    scripts/test.sh runs the same; ansible-test sanity's changelog test runs it on the build)."""
    fragments = _fragments()
    assert [p.name for p in fragments if p.suffix != ".yml"] == []
    lint = _antsibull("lint")
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr
    config = _config()
    known = {name for name, _title in config["sections"]}
    known |= {config["prelude_section_name"], config["trivial_section_name"]}
    for path in fragments:
        data = yaml.safe_load(path.read_text())
        unknown = {s for s in data if s not in known and not s.startswith(("add plugin.", "add object."))}
        assert not unknown, f"{path.name}: unknown section {sorted(unknown)}; known: {sorted(known)}"


def test_an_unreleased_version_has_entries_and_one_summary():
    """Until `antsibull-changelog release` has recorded the version galaxy.yml names, its changes are
    fragments, one of them the release summary."""
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    prelude = _config()["prelude_section_name"]
    summaries = [p.name for p in _fragments() if prelude in yaml.safe_load(p.read_text())]
    if version in _releases():
        assert len(summaries) <= 1, summaries
    else:
        assert _fragments(), f"{version} is not released and changelogs/fragments/ is empty"
        assert len(summaries) == 1, summaries


def test_changelog_yaml_is_valid():
    lint = _antsibull("lint-changelog-yaml", "--strict", "changelogs/changelog.yaml")
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr


def test_every_role_and_playbook_is_announced():
    """antsibull-changelog finds new modules and plugins itself; roles and playbooks are announced
    by an `add object.*` fragment, or by a release in changelog.yaml."""
    named = {"role": set(), "playbook": set()}
    for path in _fragments():
        data = yaml.safe_load(path.read_text())
        for kind in named:
            named[kind] |= {obj["name"] for obj in data.get(f"add object.{kind}", [])}
    for release in _releases().values():
        for kind in named:
            named[kind] |= {obj["name"] for obj in release.get("objects", {}).get(kind, [])}
    assert named["role"] == {p.name for p in (REPO / "roles").iterdir() if (p / "meta/main.yml").is_file()}
    assert named["playbook"] == {p.stem for p in (REPO / "playbooks").glob("*.yml")}


def test_changelog_md_is_the_generated_one(tmp_path):
    """CHANGELOG.md is antsibull-changelog's output (config.yaml writes ../CHANGELOG.md), made again
    here from the fragments and changelog.yaml; it ships with changelogs/changelog.yaml."""
    config = _config()
    assert config["changelog_filename_template"] == "../CHANGELOG.md" and config["output_formats"] == ["md"]
    ignored = yaml.safe_load((REPO / "galaxy.yml").read_text())["build_ignore"]
    assert not [e for e in ignored if e.startswith("changelogs") and e != "changelogs/.plugin-cache.yaml"]
    out = tmp_path / "CHANGELOG.md"
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    made = subprocess.run(
        ["bash", str(REPO / "scripts/changelog.sh"), str(out)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    expected, actual = out.read_text(), (REPO / "CHANGELOG.md").read_text()
    diff = "".join(difflib.unified_diff(actual.splitlines(True), expected.splitlines(True),
                                        "CHANGELOG.md", "generated", n=1))
    assert actual == expected, f"CHANGELOG.md is out of date: run bash scripts/changelog.sh\n{diff[:3000]}"
