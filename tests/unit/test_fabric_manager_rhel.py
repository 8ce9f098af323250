"""The RHEL family in the nvidia_fabric_manager role (issue 37 point 3), without a host: the per-OS
table, the hold read from dnf's versionlock list, rpm -qa's lines read as dpkg-query's, and the lab's
wiring of its RPM repository (served only for a topology with an ``rpm`` host, given to that host
only). The role itself runs on the lab's rpm host in tests/lab_rpm (outside CI)."""

from __future__ import annotations

import base64
from pathlib import Path

import jinja2
import pytest
import yaml
from roletasks import render_role_var

from fabricops import services
from fabricops.platforms import SUPPORT, meta_platforms, refusal

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "nvidia_fabric_manager"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
LOCKS = """
# Added lock on Mon Dec  7 23:44:02 2026
nvidia-fabric-manager-0:550.54.15-1.*
!nvidia-fabric-manager-0:550.54.14-1.*
nvidia-imex-550-0:550.54.15-1.*
nvidia-imex-550-570.124.06-1.*
"""


def test_versionlock_versions_reads_what_dnf_versionlock_add_writes():
    assert services.versionlock_versions(LOCKS, "nvidia-fabric-manager") == ["550.54.15-1"]  # not the exclude
    assert services.versionlock_versions(LOCKS, "nvidia-imex-550") == ["550.54.15-1", "570.124.06-1"]
    assert services.versionlock_versions(LOCKS, "nvidia-imex") == []  # a name is matched whole
    assert services.versionlock_versions("", "nvidia-fabric-manager") == []
    comment = "garbage\n# nvidia-fabric-manager-0:1-1.*\n"
    assert services.versionlock_versions(comment, "nvidia-fabric-manager") == []


def test_an_rpm_line_reads_as_installed_as_a_dpkg_one():
    line = "nvidia-fabric-manager|550.54.15-1|install ok installed\n"
    assert services.RPM_QUERY_FORMAT.replace("%{NAME}", "nvidia-fabric-manager").replace(
        "%{VERSION}-%{RELEASE}", "550.54.15-1") == line
    got = services.fm_installed(line, "nvidia-fabric-manager")
    assert got["version"] == {"rc": 0, "stdout": "550.54.15-1"}
    assert services.fm_choice("550.54.15", [], got["version"]["stdout"])["change"] is False
    # the role's rpm query is the module's format
    assert VARS["__nvidia_fabric_manager_rpm_query"][-1] == services.RPM_QUERY_FORMAT


def _render(name: str, **ctx):
    return render_role_var(VARS, name, **ctx)


@pytest.mark.parametrize("family,want", [
    ("Debian", ("/etc/apt/sources.list.d/nvidia-fabricmanager.list", "nvidia-fabricmanager-{branch}",
                "nvidia-fabricmanager.list.j2")),
    ("RedHat", ("/etc/yum.repos.d/nvidia-fabricmanager.repo", "nvidia-fabric-manager",
                "nvidia-fabricmanager.repo.j2")),
    ("Suse", ("/etc/apt/sources.list.d/nvidia-fabricmanager.list", "nvidia-fabricmanager-{branch}",
              "nvidia-fabricmanager.list.j2")),  # refused by the platform gate first; no KeyError before
])
def test_the_os_table_picks_the_family(family, want):
    os_ = _render("__nvidia_fabric_manager_os", ansible_facts={"os_family": family},
                  __nvidia_fabric_manager_os_table=VARS["__nvidia_fabric_manager_os_table"])
    assert (os_["repo_file"], os_["package_pattern"], os_["repo_template"]) == want
    assert (ROLE / "templates" / os_["repo_template"]).is_file()
    for var in ("nvidia_fabric_manager_repo_file", "nvidia_fabric_manager_repo_keyring",
                "nvidia_fabric_manager_package_pattern"):
        assert "__nvidia_fabric_manager_os." in DEFAULTS[var]


@pytest.mark.parametrize("family,version,selection,locks,held", [
    ("RedHat", "550.54.15-1", "", LOCKS, True),
    ("RedHat", "550.54.15-1", "", "", False),                                   # unlocked by hand
    ("RedHat", "550.54.15-1", "", "nvidia-fabric-manager-0:550.54.14-1.*\n", False),  # another version
    ("Debian", "550.54.15-1", "hold ok installed", "", True),
    ("Debian", "550.54.15-1", "install ok installed", LOCKS, False),            # a dnf list means nothing
])
def test_held_reads_the_family_s_own_hold(family, version, selection, locks, held):
    read = {"commands": {"version": {"rc": 0, "stdout": version},
                         "selection": {"rc": 0, "stdout": selection}},
            "files": {"versionlock": {"content": base64.b64encode(locks.encode()).decode()}}}
    ctx = {"__nvidia_fabric_manager_read": read, "__nvidia_fabric_manager_package": "nvidia-fabric-manager",
           "__nvidia_fabric_manager_el": family == "RedHat"}
    ctx["__nvidia_fabric_manager_locked_versions"] = _render("__nvidia_fabric_manager_locked_versions", **ctx)
    assert _render("__nvidia_fabric_manager_held", **ctx) is held


def test_the_rpm_template_checks_packages_and_metadata_unless_trusted():
    loader = jinja2.FileSystemLoader(ROLE / "templates")
    env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda s: f"# {s}"
    env.filters["bool"] = bool
    tpl = env.get_template("nvidia-fabricmanager.repo.j2")
    ctx = {"ansible_managed": "Ansible managed",
           "nvidia_fabric_manager_repo_url": "http://mirror/rhel9/x86_64/",
           "nvidia_fabric_manager_repo_keyring": "/etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-fabricmanager"}
    signed = tpl.render(ctx, nvidia_fabric_manager_repo_trusted=False).splitlines()
    for line in ("[nvidia-fabricmanager]", "baseurl=http://mirror/rhel9/x86_64/", "gpgcheck=1",
                 "repo_gpgcheck=1",
                 "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-fabricmanager"):
        assert line in signed
    trusted = tpl.render(ctx, nvidia_fabric_manager_repo_trusted=True).splitlines()
    assert "gpgcheck=0" in trusted and "repo_gpgcheck=0" in trusted
    assert not [ln for ln in trusted if ln.startswith("gpgkey")]


def test_support_rows_and_meta_platforms():
    fm = SUPPORT["nvidia_fabric_manager"]
    assert ("Rocky", "9", "x86_64") in fm.tested and "RedHat" in fm.families
    assert meta_platforms("nvidia_fabric_manager") == [{"name": "Debian", "versions": ["bookworm"]},
                                                       {"name": "EL", "versions": ["9"]}]
    rocky = {"distribution": "Rocky", "distribution_major_version": "9", "distribution_version": "9.4",
             "os_family": "RedHat", "architecture": "x86_64"}
    assert refusal("nvidia_fabric_manager", rocky) == ""
    alma = dict(rocky, distribution="AlmaLinux")
    assert "a dnf-family system the tests do not run" in refusal("nvidia_fabric_manager", alma)
    assert refusal("nvidia_fabric_manager", alma, allow_untested=True) == ""
    assert "does not implement" in refusal("nvidia_fabric_manager", dict(rocky, architecture="aarch64"))
    for role in SUPPORT:  # no other role gained the RHEL family here (IMEX: tests/unit/test_imex_rhel.py)
        if role not in ("nvidia_fabric_manager", "nvidia_imex"):
            assert "RedHat" not in SUPPORT[role].families, role


def test_the_lab_builds_and_hands_out_the_rpm_repository_only_for_rpm_hosts():
    from fabricops_lab import inventory, rpm_repo, topology

    default = {"topology": topology.resolve("default")}
    assert not rpm_repo.wanted(default)  # CI's rack: no RPM repository, no rpm tools needed
    lab = {"topology": topology.resolve("rpm")}
    assert rpm_repo.wanted(lab)
    rpm = {"repo_url": "http://198.51.100.1:8080/rpm/cuda/rhel9/x86_64/", "repo_key_sha256": "ab" * 32,
           "repo_key_url": "http://198.51.100.1:8080/rpm/cuda/rhel9/x86_64/RPM-GPG-KEY-fabricops-lab"}
    lab["fabric_manager"] = {"repo_url": "http://198.51.100.1:8080/nvidia-fabricmanager", "rpm": rpm}
    for h in lab["topology"]["hosts"]:
        h["mgmt_ip"] = f"198.51.100.{10 + h['index']}"
    hosts = inventory.hosts_yml(lab)["all"]["children"]["gpu_hosts"]["hosts"]
    assert hosts["gpu02"]["nvidia_fabric_manager_repo_url"] == rpm["repo_url"]
    assert hosts["gpu02"]["nvidia_fabric_manager_repo_key_url"] == rpm["repo_key_url"]
    assert hosts["gpu02"]["nvidia_fabric_manager_repo_key_sha256"] == rpm["repo_key_sha256"]
    assert not [k for k in hosts["gpu01"] if k.startswith("nvidia_fabric_manager_")]
    # no RPM repository built: nothing per host
    del lab["fabric_manager"]["rpm"]
    assert not [k for k in inventory.hosts_yml(lab)["all"]["children"]["gpu_hosts"]["hosts"]["gpu02"]
                if k.startswith("nvidia_fabric_manager_")]
