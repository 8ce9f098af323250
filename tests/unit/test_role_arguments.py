"""Every role's defaults/main.yml and meta/argument_specs.yml list the same variables.

Like prometheus-community/ansible's lint_arguments_spec.sh: a default that is not in the argument
spec is a variable nobody documented or validates, and a spec option that is not in the defaults is
one a reader of the defaults never sees. A variable that deliberately has no default (required, or
needed only in one mode) is listed in the defaults as a commented-out entry (``# name:``). Private
variables (``__name``) are not part of the interface and are left out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "roles").iterdir() if (p / "meta").is_dir())
COMMENTED = re.compile(r"^#\s*([a-z][a-z0-9_]*):\s*$", re.MULTILINE)


def differences(role: Path) -> list[str]:
    """Each way the defaults and the argument spec of ``role`` disagree, one sentence each."""
    defaults_file = role / "defaults" / "main.yml"
    text = defaults_file.read_text() if defaults_file.is_file() else ""
    defaults = {k: v for k, v in (yaml.safe_load(text) or {}).items() if not k.startswith("__")}
    commented = set(COMMENTED.findall(text))
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    options: dict[str, dict] = {}
    for entry in (spec.get("argument_specs") or {}).values():
        options.update(entry.get("options") or {})
    out = []
    for name in sorted(set(defaults) - set(options)):
        out.append(f"{role.name}: {name} is in defaults/main.yml but not in meta/argument_specs.yml.")
    for name in sorted(set(options) - set(defaults) - commented):
        out.append(f"{role.name}: {name} is in meta/argument_specs.yml but not in defaults/main.yml.")
    for name in sorted(commented & set(options)):
        if "default" in options[name]:
            out.append(f"{role.name}: {name} has a spec default but is commented out in defaults/main.yml.")
    for name in sorted(set(defaults) & set(options)):
        value = defaults[name]
        templated = isinstance(value, str) and "{{" in value
        if "default" in options[name] and not templated and options[name]["default"] != value:
            out.append(
                f"{role.name}: {name} defaults to {value!r} but its spec says {options[name]['default']!r}."
            )
    return out


def test_there_are_roles():
    assert len(ROLES) >= 9


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_and_argument_specs_list_the_same_variables(role):
    assert differences(role) == []


def _role(tmp_path, defaults, options):
    (tmp_path / "defaults").mkdir()
    (tmp_path / "meta").mkdir()
    (tmp_path / "defaults" / "main.yml").write_text(defaults)
    spec = {"argument_specs": {"main": {"short_description": "x", "options": options}}}
    (tmp_path / "meta" / "argument_specs.yml").write_text(yaml.safe_dump(spec))
    return tmp_path


def test_the_lint_catches_each_kind_of_difference(tmp_path):
    role = _role(
        tmp_path,
        "---\nr_a: 1\nr_b: 2\n__r_private: 3\n# r_c:\n# r_d:\n",
        {
            "r_a": {"type": "int", "default": 5},
            "r_c": {"type": "str", "required": True},
            "r_d": {"type": "str", "default": "x"},
            "r_e": {"type": "str"},
        },
    )
    found = differences(role)
    assert any("r_b is in defaults/main.yml but not in meta" in m for m in found)
    assert any("r_e is in meta/argument_specs.yml but not in defaults" in m for m in found)
    assert any("r_d has a spec default but is commented out" in m for m in found)
    assert any("r_a defaults to 1 but its spec says 5" in m for m in found)
    assert not any("r_c" in m or "__r_private" in m for m in found)
    assert len(found) == 4
