"""The nvidia_fabric_manager role and the fabric services table (issue 38, point 2).

Role level, without the lab: the role's first task refuses a GB200/GB300 profile before anything
else runs (a real ``ansible-playbook`` on localhost, not check mode, so a later task would have
shown); the role's own expressions, read from its task files, pick the B200 companions (nvlsm,
libnvsdm at the driver's version) from the table and nothing on a second run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

from fabricops import services as svc

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "nvidia_fabric_manager"
FIRST = ("Refuse values that could inject into what the role writes, a repository without a signing key, "
         "and a platform without a host fabric manager")


def _filters():
    sys.path.insert(0, str(ROOT / "plugins" / "filter"))
    try:
        import fabric_services as shim
    finally:
        sys.path.pop(0)
    return {f"fabricops.fabric.{name}": func for name, func in shim.FilterModule().filters().items()}


def _tasks(name: str) -> list[dict]:
    return yaml.safe_load((ROLE / "tasks" / name).read_text())


def _render(expr: str, **ctx) -> object:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update(_filters())
    env.filters["map"] = jinja2.filters.FILTERS["map"]
    return env.compile_expression(expr.strip().removeprefix("{{").removesuffix("}}"))(**ctx)


def test_the_refusal_is_in_the_first_task_and_the_site_play_leaves_the_role_out():
    first = _tasks("main.yml")[0]
    assert first["name"] == FIRST
    assert first["ansible.builtin.assert"]["that"][1] == "__nvidia_fabric_manager_refusal | length == 0"
    assert "fabric_manager_refusal(inventory_hostname)" in first["vars"]["__nvidia_fabric_manager_refusal"]
    # what the refusal reads: the inventory's fabricops_hardware_profile, through the role's own variable
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    want = "{{ fabricops_hardware_profile | default('') }}"
    assert defaults["nvidia_fabric_manager_hardware_profile"] == want
    site = (ROOT / "playbooks" / "site.yml").read_text()
    rule = "(fabricops_hardware_profile | fabricops.fabric.fabric_services).fabric_manager is not false"
    assert rule in site


def test_the_roles_expressions_pick_the_b200_companions_from_the_table():
    (choose,) = [t for t in _tasks("preflight.yml") if "__nvidia_fabric_manager_companions"
                 in (t.get("ansible.builtin.set_fact") or {})]
    expr = choose["ansible.builtin.set_fact"]["__nvidia_fabric_manager_companions"]
    (probe,) = [t for t in _tasks("preflight.yml") if "fabricops.fabric.host_read" in t]
    patterns = _render(probe["vars"]["__nvidia_fabric_manager_companion_patterns"],
                       nvidia_fabric_manager_hardware_profile="hgx-b200-ndr")
    assert patterns == ["nvlsm", "libnvsdm-*"]
    listing = "nvidia-fabricmanager-570|570.124.06-1|hold ok installed\n"

    def companions(profile, stdout):
        return _render(expr, nvidia_fabric_manager_hardware_profile=profile,
                       __nvidia_fabric_manager_probe={"commands": {"packages": {"stdout": stdout}}},
                       __nvidia_fabric_manager_q={"driver_version": "570.124.06"})

    got = companions("hgx-b200-ndr", listing)
    beside = "Install what the platform needs beside"
    (apt,) = [t for t in _tasks("package.yml") if t["name"].startswith(beside) and "ansible.builtin.apt" in t]
    specs = _render(apt["ansible.builtin.apt"]["name"], __nvidia_fabric_manager_companions=got)
    assert list(specs) == ["nvlsm", "libnvsdm-570=570.124.06-*"]
    # the RHEL family's task gives dnf NAME-VERSION for the same choice (any release)
    (dnf,) = [t for t in _tasks("package.yml") if t["name"].startswith(beside) and "ansible.builtin.dnf" in t]
    from ansible.plugins.filter.core import regex_replace

    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["regex_replace"] = regex_replace
    dnf_expr = dnf["ansible.builtin.dnf"]["name"].strip().removeprefix("{{").removesuffix("}}")
    assert list(env.compile_expression(dnf_expr)(__nvidia_fabric_manager_companions=got)) == [
        "nvlsm", "libnvsdm-570-570.124.06"]
    assert companions("hgx-h100-ndr", listing) == []
    assert companions("", listing) == []
    installed = (listing + "nvlsm|2025.06.5-1|install ok installed\n"
                 "libnvsdm-570|570.124.06-1|install ok installed\n")
    assert companions("hgx-b200-ndr", installed) == []  # second run: nothing to install
    # install.yml includes package.yml when a companion is missing even though the FM is in place
    (inc,) = [t for t in _tasks("install.yml")
              if t.get("ansible.builtin.include_tasks", {}).get("file") == "package.yml"]
    assert "__nvidia_fabric_manager_companions | length > 0" in inc["when"]


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-playbook")
def test_the_role_refuses_gb200_in_its_first_task_before_any_change(tmp_path):
    """One play, real mode: the role with fabricops_hardware_profile gb200-nvl72 (and gb300-nvl72) fails
    at its first task with the one sentence; with hgx-b200-ndr that task passes."""
    tasks = []
    for profile in ("gb200-nvl72", "gb300-nvl72", "hgx-b200-ndr"):
        tasks.append({
            "name": f"try {profile}",
            "block": [{"ansible.builtin.include_role": {"name": "fabricops.fabric.nvidia_fabric_manager"},
                       "vars": {"fabricops_hardware_profile": profile,
                                # stop the B200 run right after the first task: an unsupported OS
                                "fabricops_allow_untested_platform": False}}],
            "rescue": [{"ansible.builtin.set_fact": {
                "refused": f"{{{{ refused | combine({{'{profile}': {{'task': ansible_failed_task.name, "
                           "'msg': ansible_failed_result.msg}}) }}"}}],
        })
    out = str(tmp_path / "out.json")
    tasks.append({"ansible.builtin.copy": {"content": "{{ refused | to_json }}", "dest": out}})
    play = [{"hosts": "localhost", "gather_facts": False, "vars": {"refused": {}}, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CACHE_PLUGIN="memory", PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           "-e", "ansible_distribution=SLES",  # the platform gate refuses B200 here
                           str(tmp_path / "play.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert (tmp_path / "out.json").exists(), proc.stdout[-3000:] + proc.stderr[-2000:]
    refused = json.loads((tmp_path / "out.json").read_text())
    for profile in ("gb200-nvl72", "gb300-nvl72"):
        assert refused[profile] == {"task": FIRST, "msg": svc.fm_refusal("localhost", profile)}, refused
    assert "IMEX" in refused["gb200-nvl72"]["msg"]
    # the B200 profile passes the first task (it failed later, or not at all)
    assert refused.get("hgx-b200-ndr", {}).get("task") != FIRST, refused
    ran = [line for line in proc.stdout.splitlines()
           if line.startswith("TASK [fabricops.fabric.nvidia_fabric_manager")]
    before_b200 = ran[: 2 * 2]  # per GB profile: argument spec validation, then the first task only
    assert all("Validating arguments" in line or FIRST[:40] in line for line in before_b200), ran
    assert proc.stdout.count("changed: [localhost]") == 1  # the test's own result file
