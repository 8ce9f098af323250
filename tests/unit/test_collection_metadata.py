"""The collection's release metadata says one thing everywhere: the ansible-core window the tests
run, one ``min_ansible_version``, one ``version_added`` for a collection that has had one version,
an action group with every module, and no placeholder in galaxy.yml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import ansible.release
import yaml
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[2]


def _galaxy() -> dict:
    return yaml.safe_load((REPO / "galaxy.yml").read_text())


def _runtime() -> dict:
    return yaml.safe_load((REPO / "meta/runtime.yml").read_text())


def _core_pin() -> SpecifierSet:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in deps if d.startswith("ansible-core"))
    return SpecifierSet(spec.removeprefix("ansible-core"))


def test_the_ansible_core_window_is_the_one_tested_and_the_same_everywhere():
    pin = _core_pin()
    assert ansible.release.__version__ in pin  # what the tests run is inside the window
    assert "2.18.9" not in pin and "2.20.0" not in pin  # and nothing the tests do not run
    assert SpecifierSet(_runtime()["requires_ansible"]) == SpecifierSet(">=2.19.0,<2.20.0")
    ee = yaml.safe_load((REPO / "execution-environment.yml").read_text())
    ee_pip = ee["dependencies"]["ansible_core"]["package_pip"]
    assert SpecifierSet(ee_pip.removeprefix("ansible-core")) == pin


def test_every_role_says_the_same_minimum_ansible():
    minimums = {
        p.parent.parent.name: yaml.safe_load(p.read_text())["galaxy_info"]["min_ansible_version"]
        for p in sorted(REPO.glob("roles/*/meta/main.yml"))
    }
    assert len(minimums) >= 10
    assert set(minimums.values()) == {"2.19"}, minimums


def test_every_plugin_was_added_in_the_one_version_the_collection_has_had():
    version = _galaxy()["version"]
    found = {}
    for path in sorted((REPO / "plugins").rglob("*")):
        if path.suffix in (".py", ".yml") and path.is_file():
            for value in re.findall(r"version_added:\s*['\"]?([0-9.]+)", path.read_text()):
                found.setdefault(value, []).append(str(path.relative_to(REPO)))
    assert set(found) == {version}, {v: paths[:3] for v, paths in found.items() if v != version}


def test_the_action_group_holds_every_module():
    modules = sorted(p.stem for p in (REPO / "plugins/modules").glob("*.py") if p.stem != "__init__")
    assert sorted(_runtime()["action_groups"]["fabric"]) == modules


def test_galaxy_yml_has_no_placeholder():
    text = (REPO / "galaxy.yml").read_text()
    assert not re.search(r"example\.(invalid|com|org)|TODO|CHANGEME", text)
    for key in ("repository", "homepage", "documentation", "issues"):  # left out, or real
        assert key not in _galaxy() or _galaxy()[key].startswith("https://")
