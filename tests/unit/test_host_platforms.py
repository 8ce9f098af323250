"""The operating systems each host role supports (fabricops.platforms, issue 37): the one table, its
sentences, each role's meta/main.yml, and a real play in which every host role, on a host whose facts
say SLES or Rocky, fails at its platform task with that sentence and runs nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fabricops import platforms

ROOT = Path(__file__).resolve().parents[2]

DEBIAN12 = {"distribution": "Debian", "distribution_major_version": "12", "distribution_version": "12.7",
            "os_family": "Debian", "architecture": "x86_64"}
UBUNTU24 = {"distribution": "Ubuntu", "distribution_major_version": "24", "distribution_version": "24.04",
            "os_family": "Debian", "architecture": "x86_64"}
ROCKY9 = {"distribution": "Rocky", "distribution_major_version": "9", "distribution_version": "9.4",
          "os_family": "RedHat", "architecture": "x86_64"}
SLES15 = {"distribution": "SLES", "distribution_major_version": "15", "distribution_version": "15.5",
          "os_family": "Suse", "architecture": "x86_64"}
DEBIAN12_ARM = dict(DEBIAN12, architecture="aarch64")
#: a role's required arguments (Ansible validates them before the role's first task)
#: and the input each role's own first check needs to be complete
REQUIRED = {
    "nccl_profile": {"nccl_profile_name": "socket"},
    "mlnx_ofed": {"mlnx_ofed_version": "24.10-1.1.4.0", "mlnx_ofed_tarball_url": "https://mirror.example/MLNX_OFED_LINUX-24.10-1.1.4.0-debian12.1-x86_64.tgz",
                  "mlnx_ofed_tarball_sha256": "0" * 64},
    "subnet_manager": {"subnet_manager_mode": "switch"},
    "nvidia_imex": {"fabricops_hardware_profile": "gb200-nvl72", "fabricops_nvlink_domain": "nvl72-a",
                    "nvidia_imex_address": "10.0.0.11"},
}
GATE = "Refuse an operating system or architecture the role does not support"


def test_the_tested_platform_passes_every_host_role():
    assert all(platforms.refusal(r, DEBIAN12) == "" for r in platforms.HOST_ROLES)


def test_an_untested_apt_system_is_refused_unless_opted_in():
    msg = platforms.refusal("ipoib", UBUNTU24)
    assert msg == (
        "fabricops.fabric.ipoib supports Debian 12 on x86_64 and aarch64; this host is Ubuntu 24.04 (x86_64, "
        "Debian family), an apt-family system the tests do not run: nothing was changed. Set "
        "fabricops_allow_untested_platform: true to run the role on it anyway."
    )
    assert platforms.refusal("ipoib", UBUNTU24, allow_untested=True) == ""


@pytest.mark.parametrize("facts", [ROCKY9, SLES15], ids=["rocky9", "sles15"])
def test_another_family_or_architecture_is_refused_even_when_opted_in(facts):
    for allow in (False, True):
        msg = platforms.refusal("mlnx_ofed", facts, allow_untested=allow)
        assert msg.startswith("fabricops.fabric.mlnx_ofed supports Debian 12 on x86_64 and aarch64; this "
                              "host is "), msg
        assert "does not implement: nothing was changed." in msg and "\n" not in msg
    assert "Rocky 9.4 (x86_64, RedHat family)" in platforms.refusal("ipoib", ROCKY9)


def test_debian12_aarch64_runs_the_roles_proven_on_the_arm64_host_and_no_other():
    """tests/lab_arm64 converges gh01 with these roles; the others refuse aarch64 even when opted in."""
    assert platforms.AARCH64_ROLES == ("gpudirect", "ipoib", "mlnx_ofed", "nccl_profile", "nic_firmware",
                                       "subnet_manager")
    for role in platforms.HOST_ROLES:
        msg = platforms.refusal(role, DEBIAN12_ARM)
        if role in platforms.AARCH64_ROLES:
            assert msg == "" and platforms.SUPPORT[role].text == "Debian 12 on x86_64 and aarch64", role
            assert platforms.SUPPORT[role].arches == ("x86_64", "aarch64")
        else:
            text = platforms.SUPPORT[role].text
            assert msg.startswith(f"fabricops.fabric.{role} supports {text}; this host is Debian 12.7 "
                                  "(aarch64), whose package manager or architecture the role does not "
                                  "implement"), msg
            assert "aarch64" not in platforms.SUPPORT[role].text
            assert platforms.refusal(role, DEBIAN12_ARM, allow_untested=True) == msg
    # Ubuntu on aarch64: implemented (apt family, aarch64) but not tested: the opt-in lets it in
    ubuntu_arm = dict(UBUNTU24, architecture="aarch64")
    assert "an apt-family system the tests do not run" in platforms.refusal("ipoib", ubuntu_arm)
    assert platforms.refusal("ipoib", ubuntu_arm, allow_untested=True) == ""
    assert platforms.refusal("roce_host", ubuntu_arm, allow_untested=True) != ""
    # Galaxy's platforms carry no architecture: Debian bookworm once
    assert platforms.meta_platforms("mlnx_ofed") == [{"name": "Debian", "versions": ["bookworm"]}]


def test_missing_facts_are_refused_not_passed():
    msg = platforms.refusal("roce_host", {})
    assert "could not read the host's operating system" in msg and "nothing was changed" in msg
    with pytest.raises(ValueError, match="unknown host role 'roce_switch'"):
        platforms.refusal("roce_switch", DEBIAN12)


def test_host_roles_are_every_role_but_the_switch_one():
    roles = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").exists())
    assert sorted(platforms.HOST_ROLES) == [r for r in roles if r != "roce_switch"]


@pytest.mark.parametrize("role", platforms.HOST_ROLES)
def test_meta_platforms_and_the_first_tasks_say_the_table(role):
    meta = yaml.safe_load((ROOT / "roles" / role / "meta" / "main.yml").read_text())
    assert meta["galaxy_info"]["platforms"] == platforms.meta_platforms(role)
    tasks = yaml.safe_load((ROOT / "roles" / role / "tasks" / "main.yml").read_text())
    # after the input's own check (tests/unit/test_injection.py: first), before any other task
    assert tasks[0]["name"].startswith("Refuse values that could inject")
    assert tasks[1]["ansible.builtin.setup"] == {"gather_subset": ["min"]}
    gate = tasks[2]
    assert gate["name"] == GATE
    assert f"platform_refusal('{role}', fabricops_allow_untested_platform" in json.dumps(gate["vars"])


def _play(tmp_path, facts: dict, extra: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    tasks = [{"fake_os_facts": {"facts": facts}}]
    for role in platforms.HOST_ROLES:
        tasks.append({
            "name": f"try {role}",
            "block": [{"ansible.builtin.include_role": {"name": f"fabricops.fabric.{role}"},
                       "vars": REQUIRED.get(role, {})}],
            "rescue": [{"ansible.builtin.set_fact": {
                "refused": f"{{{{ refused | combine({{'{role}': {{'task': ansible_failed_task.name, "
                           "'msg': ansible_failed_result.msg}}) }}"}}],
        })
    out = str(tmp_path / "out.json")
    tasks.append({"ansible.builtin.copy": {"content": "{{ refused | to_json }}", "dest": out},
                  "check_mode": False})
    play = [{"hosts": "localhost", "gather_facts": False, "vars": {"refused": {}}, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CACHE_PLUGIN="memory", PYTHONPATH=str(ROOT / "src"),
               ANSIBLE_LIBRARY=str(Path(__file__).with_name("platforms_library")))
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", *extra,
                           str(tmp_path / "play.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert (tmp_path / "out.json").exists(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc, json.loads((tmp_path / "out.json").read_text())


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-playbook")
def test_every_host_role_refuses_sles_at_its_platform_task_and_changes_nothing(tmp_path):
    """Real mode, not check mode: what refuses must do so before any task that could change the host.
    ``-e fabricops_allow_untested_platform=true`` (a string from the command line) does not let SLES in."""
    proc, refused = _play(tmp_path, SLES15, ["-e", "fabricops_allow_untested_platform=true"])
    assert set(refused) == set(platforms.HOST_ROLES), proc.stdout[-3000:]
    for role, got in refused.items():
        assert got["task"] == GATE, (role, got)
        assert got["msg"] == platforms.refusal(role, SLES15), (role, got)
    arg_spec = " : Validating arguments against arg spec"  # Ansible's own, before the role's tasks
    ran = {line.split(" : ", 1)[1].rstrip("* ]") for line in proc.stdout.splitlines()
           if line.startswith("TASK [fabricops.fabric.") and arg_spec not in line}
    others = {t for t in ran if not t.startswith("Refuse values that could inject")}  # the input check
    assert others == {"Read the operating system when the play has not", GATE}, ran
    # the only change of the run is the test's own result file (its last task)
    assert proc.stdout.count("changed: [localhost]") == 1, proc.stdout[-1500:]


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-playbook")
def test_a_false_string_from_the_command_line_keeps_ubuntu_refused(tmp_path):
    _proc, refused = _play(tmp_path, UBUNTU24, ["-e", "fabricops_allow_untested_platform=false"])
    assert set(refused) == set(platforms.HOST_ROLES)
    assert refused["ipoib"]["msg"] == platforms.refusal("ipoib", UBUNTU24)


def test_the_docs_table_is_the_support_table():
    page = (ROOT / "docs" / "platforms.md").read_text()
    assert platforms.render_docs(page) == page, (
        "docs/platforms.md is stale: run python -m fabricops.platforms docs/platforms.md")
    for role in platforms.HOST_ROLES:
        assert f"| `{role}` | {platforms.SUPPORT[role].text} |" in page


def test_a_role_row_widens_only_that_role(monkeypatch):
    rocky_x86 = ("Rocky", "9", "x86_64")
    monkeypatch.setitem(platforms.SUPPORT, "nccl_profile", platforms.RoleSupport(
        tested=(platforms.DEBIAN12_X86, rocky_x86), families=("Debian", "RedHat")))
    assert platforms.refusal("nccl_profile", ROCKY9) == ""
    assert platforms.refusal("ipoib", ROCKY9) != ""
    assert platforms.meta_platforms("nccl_profile") == [
        {"name": "Debian", "versions": ["bookworm"]}, {"name": "EL", "versions": ["9"]}]
    alma = dict(ROCKY9, distribution="AlmaLinux")
    assert "a dnf-family system the tests do not run" in platforms.refusal("nccl_profile", alma)
    assert platforms.refusal("nccl_profile", alma, allow_untested=True) == ""
    assert "Debian 12 on x86_64, Rocky 9 on x86_64" in platforms.support_markdown()
