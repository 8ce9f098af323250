"""The RHEL family in the nvidia_imex role, without a host: the per-OS reads (rpm -qa in dpkg-query's
line format, dnf's versionlock list as the hold), which package steps each family runs, and the support
row. The role itself runs on the lab's rpm tray in tests/lab_rpm_imex (outside CI)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from roletasks import render_role_var

from fabricops import imex, services
from fabricops.platforms import SUPPORT, meta_platforms, refusal

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "nvidia_imex"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
TASKS = {p.stem: yaml.safe_load(p.read_text()) for p in (ROLE / "tasks").glob("*.yml")}
LOCKS = """
# Added lock on Mon Dec  7 23:44:02 2026
nvidia-fabric-manager-0:550.54.15-1.*
!nvidia-imex-550-0:550.54.14-1.*
nvidia-imex-550-0:550.54.15-1.*
"""


def _render(name: str, **ctx):
    return render_role_var(VARS, name, **ctx)


def _render_expr(expr: str, **ctx):
    return render_role_var({"expr": expr}, "expr", **ctx)


@pytest.mark.parametrize("family,tool", [("Debian", "dpkg-query"), ("RedHat", "rpm"), ("Suse", "dpkg-query")])
def test_the_packages_read_is_the_family_s_own(family, tool):
    el = _render("__nvidia_imex_el", ansible_facts={"os_family": family})
    got = _render("__nvidia_imex_packages_query", __nvidia_imex_el=el,
                  __nvidia_imex_rpm_query=VARS["__nvidia_imex_rpm_query"],
                  __nvidia_imex_dpkg_query=VARS["__nvidia_imex_dpkg_query"])
    assert got[0] == tool and got[-1] == "nvidia-imex-*"
    # Debian's read is the one it always was
    assert VARS["__nvidia_imex_dpkg_query"] == [
        "dpkg-query", "-W", "-f=${Package}|${Version}|${Status}\n", "nvidia-imex-*"]


def test_an_rpm_line_reads_as_an_installed_dpkg_one():
    assert VARS["__nvidia_imex_rpm_query"][3] == services.RPM_QUERY_FORMAT
    pkg = imex.package_name("550.54.15")
    assert pkg == "nvidia-imex-550"  # the RHEL name keeps the branch (rpm_repo.rhel_name)
    got = services.fm_installed(f"{pkg}|550.54.15-1|install ok installed\n", pkg)
    assert got["version"] == {"rc": 0, "stdout": "550.54.15-1"}
    assert imex.package_choice("550.54.15", [], got["version"]["stdout"])["change"] is False
    # dnf repoquery's lines as apt-cache madison's
    offer = f"{pkg} | 550.54.14-1 | cuda-rhel9-x86_64\n{pkg} | 550.54.15-1 | cuda-rhel9-x86_64\n"
    versions = _render_expr("offer | fabricops.fabric.apt_packages_versions(pkg)", offer=offer, pkg=pkg)
    assert imex.package_choice("550.54.15", versions, "550.54.14-1") == {
        "ok": True, "version": "550.54.15-1", "change": True,
        "msg": "install nvidia-imex 550.54.15 for driver 550.54.15 (replacing 550.54.14)"}


@pytest.mark.parametrize("family,selection,locks,held", [
    ("RedHat", "", LOCKS, True),
    ("RedHat", "", "", False),                                       # unlocked by hand
    ("RedHat", "", "nvidia-imex-550-0:550.54.14-1.*\n", False),      # locked at another version
    ("RedHat", "", "!nvidia-imex-550-0:550.54.15-1.*\n", False),     # an exclude is no lock
    ("Debian", "hold ok installed", "", True),
    ("Debian", "install ok installed", LOCKS, False),                # a dnf list means nothing there
])
def test_held_reads_the_family_s_own_hold(family, selection, locks, held):
    read = {"commands": {"version": {"rc": 0, "stdout": "550.54.15-1"},
                         "selection": {"rc": 0, "stdout": selection}},
            "files": {"versionlock": {"content": base64.b64encode(locks.encode()).decode()}}}
    ctx = {"__nvidia_imex_read": read, "__nvidia_imex_package": "nvidia-imex-550",
           "__nvidia_imex_el": family == "RedHat"}
    ctx["__nvidia_imex_locked_versions"] = _render("__nvidia_imex_locked_versions", **ctx)
    assert _render("__nvidia_imex_held", **ctx) is held


def _when(task) -> list[str]:
    w = task.get("when", [])
    return [w] if isinstance(w, str) else list(w)


def test_each_package_step_runs_for_one_family_only():
    """apt and dpkg selections never on the RHEL family, dnf and versionlock never on Debian; the
    install's reads too (apt-cache madison / dnf repoquery)."""
    steps = TASKS["install"] + [t for t in TASKS["preflight"] if "ansible.builtin.command" in t]
    seen = set()
    for task in steps:
        module = next(k for k in task if k.startswith("ansible.builtin."))
        argv = (task[module] or {}).get("argv", []) if isinstance(task[module], dict) else []
        tool = argv[0] if argv else module.rsplit(".", 1)[1]
        family = "RedHat" if tool in ("dnf", "debug") and "__nvidia_imex_el" in _when(task) else None
        if tool in ("apt", "dpkg_selections", "apt-cache"):
            assert "not __nvidia_imex_el" in _when(task), task["name"]
            family = "Debian"
        elif tool == "dnf":
            assert "__nvidia_imex_el" in _when(task), task["name"]
            family = "RedHat"
        seen.add((family, tool))
    assert {("Debian", "apt"), ("Debian", "dpkg_selections"), ("Debian", "apt-cache"),
            ("RedHat", "dnf")} <= seen


def test_the_check_mode_reports_name_what_would_run():
    debug = {t["name"]: t for t in TASKS["install"] if "ansible.builtin.debug" in t}
    lock = debug["Report the version lock --check cannot add"]
    assert "ansible_check_mode" in _when(lock) and lock["changed_when"] is True
    assert lock["ansible.builtin.debug"]["msg"].startswith("would run: dnf versionlock add ")
    real = next(t for t in TASKS["install"] if t["name"].startswith("Lock the IMEX package's version"))
    assert "not ansible_check_mode" in _when(real)
    assert real["ansible.builtin.command"]["argv"][:4] == ["dnf", "-q", "versionlock", "add"]


def test_support_row_and_meta_platforms():
    row = SUPPORT["nvidia_imex"]
    assert ("Rocky", "9", "x86_64") in row.tested and row.families == ("Debian", "RedHat")
    assert row.arches == ("x86_64",)
    meta = yaml.safe_load((ROLE / "meta" / "main.yml").read_text())["galaxy_info"]["platforms"]
    assert meta == meta_platforms("nvidia_imex") == [{"name": "Debian", "versions": ["bookworm"]},
                                                      {"name": "EL", "versions": ["9"]}]
    rocky = {"distribution": "Rocky", "distribution_major_version": "9", "distribution_version": "9.4",
             "os_family": "RedHat", "architecture": "x86_64"}
    assert refusal("nvidia_imex", rocky) == ""
    alma = dict(rocky, distribution="AlmaLinux")
    assert "a dnf-family system the tests do not run" in refusal("nvidia_imex", alma)
    assert "does not implement" in refusal("nvidia_imex", dict(rocky, architecture="aarch64"))
