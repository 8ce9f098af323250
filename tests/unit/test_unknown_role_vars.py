"""A misspelt role variable is named, once, by the role's first task (issue 39 point 6).

``mlnx_ofed_allow_restrat: true`` in group_vars used to pass without a word: the role read its
default (no consent) and the operator wondered why nothing restarted. Each role's first task now
hands the names it sees with its prefix to ``fabricops.fabric.warn_unknown_role_vars``: one warning
per undeclared name, with the closest declared one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fabricops import validate

ROOT = Path(__file__).resolve().parents[2]
WARN = "fabricops.fabric.warn_unknown_role_vars"
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").is_file())


def test_a_misspelt_name_is_named_with_the_closest_declared_one():
    known = validate.role_known_vars(ROOT / "roles" / "mlnx_ofed")
    assert {"mlnx_ofed_allow_restart", "mlnx_ofed_version"} <= known
    names = ["mlnx_ofed_allow_restrat", "mlnx_ofed_version"]
    assert validate.unknown_role_vars("mlnx_ofed", names, known) == [
        "mlnx_ofed: mlnx_ofed_allow_restrat is not a variable of the role and is ignored; "
        "did you mean mlnx_ofed_allow_restart?"
    ]
    (far,) = validate.unknown_role_vars("mlnx_ofed", ["mlnx_ofed_zzz"], known)
    assert far.endswith("see roles/mlnx_ofed/meta/argument_specs.yml")
    assert validate.unknown_role_vars("mlnx_ofed", sorted(known), known) == []


def test_every_role_reads_its_names_through_the_warning():
    for role in ROLES:
        text = "".join(p.read_text() for p in (ROOT / "roles" / role / "tasks").glob("*.yml"))
        call = f"query('ansible.builtin.varnames', '^{role}_') | {WARN}(role_path)"
        assert call in " ".join(text.split()), role


def test_the_example_inventories_set_no_undeclared_role_variable():
    """What the docs tell an operator to write draws no warning."""
    for path in sorted((ROOT / "inventories" / "example").rglob("*.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        names = set(data) if isinstance(data, dict) else set()
        for role in ROLES:
            mine = [n for n in names if n.startswith(role + "_")]
            known = validate.role_known_vars(ROOT / "roles" / role)
            assert validate.unknown_role_vars(role, mine, known) == [], path


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-playbook")
def test_each_role_warns_once_per_run_about_a_misspelt_variable(tmp_path):
    """Every host role on two hosts, each with a misspelt variable and a value its first task refuses
    (so nothing after it runs): one warning per role for the run, not one per host, naming the
    variable and the closest declared name; a declared variable draws none."""
    from unit.test_injection import BAD

    def declared(role):
        return sorted(n for n in validate.role_known_vars(ROOT / "roles" / role) if n.startswith(role + "_"))

    # a declared name with its suffix reversed: not declared, and close to nothing
    typos = {role: role + "_" + declared(role)[0].removeprefix(role + "_")[::-1] for role in BAD}
    typos["mlnx_ofed"] = "mlnx_ofed_allow_restrat"
    tasks = [
        {
            "name": f"try {role}",
            "block": [
                {
                    "ansible.builtin.include_role": {"name": f"fabricops.fabric.{role}"},
                    "vars": {**bad, typos[role]: True},
                }
            ],
            "rescue": [{"ansible.builtin.meta": "noop"}],
        }
        for role, bad in BAD.items()
    ]
    play = [{"hosts": "all", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_CACHE_PLUGIN="memory",
        PYTHONPATH=str(ROOT / "src"),
    )
    proc = subprocess.run(
        ["ansible-playbook", "-i", "h1,h2,", "-c", "local", "--check",
         "-e", f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = " ".join((proc.stdout + proc.stderr).split())
    for role, typo in typos.items():
        said = f"{role}: {typo} is not a variable of the role and is ignored"
        assert out.count(said) == 1, (role, proc.stdout[-3000:] + proc.stderr[-3000:])
    assert "did you mean mlnx_ofed_allow_restart?" in out
    warned = [w for w in out.split("[WARNING]: ")[1:] if "is not a variable of the role" in w]
    assert len(warned) == len(typos), warned  # the roles' own variables (BAD's) draw none
