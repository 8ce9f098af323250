"""Repository paths, package architectures and kernel headers chosen from facts (issue 37 point 4):
fabricops.platforms' one table, on real `ansible -m setup` captures (tests/fixtures/ansible-facts/).
The lab's arm64 host (gh01, Debian 12 aarch64: tests/lab_arm64) runs the Debian 12 aarch64 row; the
Ubuntu and EL aarch64 rows are proven by these unit tests only."""

from __future__ import annotations

import json

import pytest
from captures import FIXTURES

from fabricops import doca, platforms

#: the lab's hosts (docs/lab-fidelity.md: Debian 12, x86_64; the lab kernel 6.1.0-18-amd64)
LAB_DEBIAN12 = {"distribution": "Debian", "distribution_major_version": "12", "distribution_version": "12.7",
                "os_family": "Debian", "architecture": "x86_64", "kernel": "6.1.0-18-amd64"}


def facts(name: str) -> dict:
    """A capture's ``ansible_facts`` as a role sees them (``ansible_facts.X``: prefix dropped)."""
    text = (FIXTURES / "ansible-facts" / name).read_text(encoding="utf-8").split("\n", 1)[1]
    raw = json.loads(text)["ansible_facts"]
    return {k.removeprefix("ansible_"): v for k, v in raw.items()}


# capture -> DOCA path, CUDA path, dpkg arch (None: EL), headers of the running kernel
EXPECTED = {
    "ubuntu2404_gh200_64k.json": ("ubuntu24.04/arm64-sbsa", "ubuntu2404/sbsa", "arm64",
                                  "linux-headers-6.17.0-1014-nvidia-64k"),
    "ubuntu2204_x86_64_ec2.json": ("ubuntu22.04/x86_64", "ubuntu2204/x86_64", "amd64",
                                   "linux-headers-6.5.0-1022-aws"),
    "almalinux97_aarch64.json": ("rhel9.7/arm64-sbsa", "rhel9/sbsa", None,
                                 "kernel-devel-5.14.0-611.5.1.el9_7.aarch64"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_capture_chooses_its_paths_arch_and_headers(name):
    f = facts(name)
    doca_path, cuda_path, deb_arch, headers = EXPECTED[name]
    assert platforms.doca_repo_path(f) == doca_path
    assert platforms.cuda_repo_path(f) == cuda_path
    assert platforms.kernel_headers_package(f) == headers
    if deb_arch is None:
        with pytest.raises(ValueError, match="not a Debian-family system"):
            platforms.deb_arch(f)
    else:
        assert platforms.deb_arch(f) == deb_arch
    assert platforms.host_platform(f).proven == "unit"
    # the role's URL (mlnx_ofed_doca_repo_url filter -> doca.repo_url) is built from the same row
    url = doca.repo_url("3.2.0", f["distribution"], f["distribution_major_version"],
                        f["distribution_version"], f["architecture"])
    assert url == f"https://linux.mellanox.com/public/repo/doca/3.2.0/{doca_path}/"


def test_el_64k_kernel_takes_the_64k_devel_package():
    """RHEL/Rocky/Alma's 64k kernel (package kernel-64k-core, uname -r ...aarch64+64k)."""
    f = dict(facts("almalinux97_aarch64.json"), kernel="5.14.0-427.el9.aarch64+64k")
    assert platforms.kernel_headers_package(f) == "kernel-64k-devel-5.14.0-427.el9.aarch64"
    # another kernel of the same host (the one GRUB boots next), as the dkms steps ask
    running = "5.14.0-611.5.1.el9_7.aarch64"
    assert doca.headers_package(running, f) == f"kernel-devel-{running}"


def test_ubuntu_64k_kernel_headers_keep_the_flavour():
    f = facts("ubuntu2404_gh200_64k.json")
    assert (platforms.kernel_headers_package(f, "6.8.0-1010-nvidia-64k")
            == "linux-headers-6.8.0-1010-nvidia-64k")


def test_lab_debian12_x86_64_gets_exactly_todays_values():
    assert doca.repo_url("2.9.1", "Debian", "12", "12.11", "x86_64") == (
        "https://linux.mellanox.com/public/repo/doca/2.9.1/debian12/x86_64/")
    assert platforms.doca_repo_path(LAB_DEBIAN12) == "debian12/x86_64"
    assert platforms.deb_arch(LAB_DEBIAN12) == "amd64"
    assert platforms.kernel_headers_package(LAB_DEBIAN12) == "linux-headers-6.1.0-18-amd64"
    assert doca.headers_package("6.1.0-21-amd64", LAB_DEBIAN12) == doca.headers_package("6.1.0-21-amd64")
    assert platforms.host_platform(LAB_DEBIAN12).proven == "lab"


def test_unknown_arch_is_one_sentence_naming_what_was_found_and_what_is_supported():
    f = dict(facts("ubuntu2204_x86_64_ec2.json"), architecture="ppc64le")
    for fn in (platforms.doca_repo_path, platforms.cuda_repo_path, platforms.deb_arch,
               platforms.kernel_headers_package):
        with pytest.raises(ValueError) as err:
            fn(f)
        msg = str(err.value)
        assert msg.count(". ") == 0 and "\n" not in msg, msg
        assert "this host is Ubuntu 22.04 (ppc64le, Debian family)" in msg
        for row in ("Debian 12 x86_64", "Ubuntu 24.04 aarch64", "RHEL/Rocky/Alma 9 aarch64"):
            assert row in msg
    with pytest.raises(ValueError, match=r"ppc64le.*set mlnx_ofed_doca_repo_url to a mirror$"):
        doca.repo_url("2.9.1", "Ubuntu", "22", "22.04", "ppc64le")


def test_the_table_is_wider_than_the_gate():
    """Rows chosen from facts do not widen what the roles accept: Ubuntu and EL are still refused;
    Ubuntu on aarch64 only with the opt-in, and only by a role proven on the lab's arm64 host."""
    ubuntu_arm = facts("ubuntu2404_gh200_64k.json")
    assert platforms.host_platform(ubuntu_arm)
    assert platforms.refusal("mlnx_ofed", ubuntu_arm) != ""
    assert platforms.refusal("mlnx_ofed", ubuntu_arm, allow_untested=True) == ""
    assert platforms.refusal("roce_host", ubuntu_arm, allow_untested=True) != ""
    assert platforms.refusal("mlnx_ofed", facts("almalinux97_aarch64.json"), allow_untested=True) != ""
    lab = [(r["distributions"], r["architecture"]) for r in platforms.platform_rows() if r["proven"] == "lab"]
    assert lab == [(["Debian"], "x86_64"), (["Debian"], "aarch64")]


def test_debian12_aarch64_the_lab_arm64_host():
    """gh01's facts: DOCA arm64-sbsa (the lab's mirror), dpkg arm64, linux-headers-<uname -r>; no CUDA
    repository path is cited for Debian 12 sbsa."""
    gh01 = {"distribution": "Debian", "distribution_major_version": "12", "distribution_version": "12.15",
            "os_family": "Debian", "architecture": "aarch64", "kernel": "6.1.0-28-arm64"}
    assert platforms.doca_repo_path(gh01) == "debian12/arm64-sbsa"
    assert platforms.deb_arch(gh01) == "arm64"
    assert platforms.kernel_headers_package(gh01) == "linux-headers-6.1.0-28-arm64"
    assert platforms.host_platform(gh01).proven == "lab"
    with pytest.raises(ValueError, match=r"no CUDA repository path for Debian 12\.15 aarch64"):
        platforms.cuda_repo_path(gh01)
