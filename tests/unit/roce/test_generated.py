"""Every region generated from fabricops.model.roce_schema is current, and a stale one is caught.

The checked-in files are compared with what ``python -m fabricops.roce.generate`` would write; the
mutation tests edit a copy of the repository's targets and must see ``--check`` name the file.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fabricops.model import roce_schema as schema
from fabricops.roce import generate

ROOT = Path(__file__).resolve().parents[3]


def test_every_generated_region_is_current():
    stale = generate.check(ROOT)
    assert stale == [], f"stale: {stale}; run python -m fabricops.roce.generate"


@pytest.fixture
def copy(tmp_path):
    for rel in generate.TARGETS:
        dest = tmp_path / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, dest)
    return tmp_path


def _edit_generated_line(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    at = text.index(old)
    # the edit must be inside a region: the last marker before it is a BEGIN
    begin, end = (text.rfind(f"{kind} fabricops.roce.generate", 0, at) for kind in ("BEGIN", "END"))
    assert begin > end
    path.write_text(text[:at] + new + text[at + len(old) :])


@pytest.mark.parametrize(
    ("rel", "old", "new"),
    [
        ("roles/roce_host/meta/argument_specs.yml", "choices: [dscp, pcp]", "choices: [dscp]"),
        ("roles/roce_switch/defaults/main.yml", "pfc_watchdog: true", "pfc_watchdog: false"),
        ("plugins/modules/mlnx_qos.py", '"cable_len": {"type": "int"}', '"cable_len": {"type": "str"}'),
        ("docs/roce.md", "| `dscp` | int 0..63 | `26` |", "| `dscp` | int 0..63 | `24` |"),
    ],
)
def test_an_edited_generated_line_is_stale(copy, rel, old, new, capsys):
    _edit_generated_line(copy / rel, old, new)
    assert generate.check(copy) == [rel]
    assert generate.main(["--check", "--root", str(copy)]) == 1
    assert rel in capsys.readouterr().err
    generate.main(["--root", str(copy)])  # write mode repairs it
    assert generate.check(copy) == []
    assert (copy / rel).read_text() == (ROOT / rel).read_text()


def test_text_around_a_region_is_kept(copy):
    path = copy / "docs/roce.md"
    path.write_text(path.read_text().replace("### Adding a knob", "### Adding a knob (hand-written)"))
    assert generate.check(copy) == []
    generate.main(["--root", str(copy)])
    assert "### Adding a knob (hand-written)" in path.read_text()


def test_a_missing_marker_is_an_error_not_a_silent_skip(copy, capsys):
    path = copy / "plugins/modules/roce_sysfs.py"
    path.write_text(path.read_text().replace("# END fabricops.roce.generate config_spec", "# gone"))
    assert generate.main(["--check", "--root", str(copy)]) == 4
    assert "config_spec" in capsys.readouterr().err


def test_check_runs_as_a_module_from_the_command_line():
    proc = subprocess.run(
        [sys.executable, "-m", "fabricops.roce.generate", "--check", "--root", str(ROOT)],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "current" in proc.stdout


def _module_doc(name):
    tree = ast.parse((ROOT / "plugins/modules" / f"{name}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    raise AssertionError(name)


def _role_options(role):
    spec = yaml.safe_load((ROOT / "roles" / role / "meta/argument_specs.yml").read_text())
    return spec["argument_specs"]["main"]["options"]


def test_generated_options_hold_every_declared_field():
    paths = {f.path for f in schema.FIELDS}
    for options in (
        _role_options("roce_host")["roce_host_roce"]["options"],
        _role_options("roce_switch")["roce_switch_roce"]["options"],
        _module_doc("roce_plan")["options"]["roce"]["suboptions"],
        _module_doc("roce_switch")["options"]["roce"]["suboptions"],
    ):
        nested = lambda v: v.get("options") or v.get("suboptions")  # noqa: E731  (role spec / module doc)
        found = {k for k, v in options.items() if not nested(v)}
        found |= {f"{k}.{s}" for k, v in options.items() if nested(v) for s in nested(v)}
        assert found == paths
    # the host role lists no 64 DSCP values any more (a wide range is said, not enumerated)
    assert "choices" not in _role_options("roce_host")["roce_host_roce"]["options"]["dscp"]
    switch = _role_options("roce_switch")
    for f in schema.SWITCH_SETTINGS:
        assert switch[f.role_var]["default"] == f.default
        assert _module_doc("roce_switch")["options"][f.name]["default"] == f.default


def test_module_argument_spec_matches_its_documentation():
    """The generated CONFIG_OPTIONS of the host modules is the documented config (validate-modules)."""
    for name, fields in (("mlnx_qos", schema.PORT_QOS), ("roce_sysfs", schema.PORT_SYSFS)):
        tree = ast.parse((ROOT / "plugins/modules" / f"{name}.py").read_text())
        literal = next(
            n.value
            for n in tree.body
            if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "CONFIG_OPTIONS"
        )
        assert ast.literal_eval(literal) == schema.argument_spec(fields)
        doc = _module_doc(name)["options"]["config"]["suboptions"]
        assert list(doc) == [f.name for f in fields]
        for option, spec in ast.literal_eval(literal).items():
            assert {k: v for k, v in doc[option].items() if k != "description"} == spec
