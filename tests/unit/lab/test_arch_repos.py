"""Per-architecture lab repositories (issue 37 point 4): an arm64 host of a topology gets MLNX_OFED's
``-aarch64`` tarball / ISO / apt repository, DOCA-Host's ``arm64-sbsa`` directory and the fabric
services repository as ``Architecture: arm64`` packages; a topology of amd64 hosts only (the default
rack, CI's) builds none of them. The inventory gives the arm64 host its own variables."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from fabricops_lab import doca_repo, fabric_services, inventory, ofed_repo, topology

NEW = "24.10-1.1.4.0"
KERNEL = "6.1.0-18-amd64"

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")


@pytest.fixture(autouse=True)
def _amd64_controller(monkeypatch):
    monkeypatch.setattr(ofed_repo, "deb_arch", lambda: "amd64")
    monkeypatch.setattr(ofed_repo.platform, "machine", lambda: "x86_64")


def _field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                          check=True).stdout.strip()


def _archs(repo: Path) -> set[str]:
    return {_field(d, "Architecture") for d in repo.glob("*.deb")}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    out = tmp_path_factory.mktemp("ofed-arches")
    mp = pytest.MonkeyPatch()
    mp.setattr(ofed_repo, "deb_arch", lambda: "amd64")
    mp.setattr(ofed_repo.platform, "machine", lambda: "x86_64")
    try:
        manifest = ofed_repo.build(out, (NEW,), KERNEL, arches=("amd64", "arm64"))
    finally:
        mp.undo()
    return out, manifest


# --- which architectures a topology builds -----------------------------------------------------

def test_the_default_rack_builds_the_controllers_architecture_only():
    assert ofed_repo.topology_arches(topology.load()) == ("amd64",)
    assert ofed_repo.topology_arches(None) == ("amd64",)


def test_a_topology_with_an_arm64_host_builds_arm64_too():
    assert ofed_repo.topology_arches(topology.resolve("arm64")) == ("amd64", "arm64")


# --- MLNX_OFED -----------------------------------------------------------------------------------

def test_the_arm64_build_is_named_and_labelled_aarch64(both):
    out, manifest = both
    arm = manifest["by_arch"]["arm64"][NEW]
    name = f"MLNX_OFED_LINUX-{NEW}-debian12.1-aarch64"
    assert arm["dir"] == name
    assert arm["tgz"] == f"MLNX_OFED-{NEW}/{name}.tgz" and arm["iso"] == f"MLNX_OFED-{NEW}/{name}.iso"
    assert arm["repo"] == f"repo-arm64/{NEW}"
    with tarfile.open(out / arm["tgz"]) as tar:
        assert tar.extractfile(f"{name}/.arch").read() == b"aarch64\n"
        debs = [m.name for m in tar.getmembers() if m.name.endswith(".deb")]
    assert debs and all(d.endswith("_arm64.deb") for d in debs), debs
    assert _archs(out / arm["repo"]) == {"arm64"}
    release = (out / arm["repo"] / "Release").read_text()
    assert "Architectures: arm64 all\n" in release
    packages = gzip.decompress((out / arm["repo"] / "Packages.gz").read_bytes()).decode()
    assert packages.count("Architecture: arm64\n") == len(list((out / arm["repo"]).glob("*.deb")))
    sums = (out / f"MLNX_OFED-{NEW}" / "SHA256SUMS").read_text()
    assert f"{arm['tgz_sha256']}  {name}.tgz" in sums


def test_the_amd64_build_is_where_it_was(both):
    out, manifest = both
    amd = manifest["versions"][NEW]
    assert amd["dir"] == f"MLNX_OFED_LINUX-{NEW}-debian12.1-x86_64" and amd["repo"] == f"repo/{NEW}"
    assert _archs(out / amd["repo"]) == {"amd64"}
    assert "Architectures: amd64 all\n" in (out / amd["repo"] / "Release").read_text()


def test_both_builds_hold_the_same_files(both):
    """The packages are scripts and text (no compiled part): the arm64 build is a relabel."""
    out, manifest = both

    def contents(tgz: Path) -> dict[str, bytes]:
        files = {}
        with tarfile.open(tgz) as tar:
            for m in tar.getmembers():
                if m.name.endswith(".deb"):
                    deb = tar.extractfile(m).read()
                    pkg = m.name.rsplit("/", 1)[1].split("_")[0]
                    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", "/dev/stdin"], input=deb,
                                          capture_output=True, check=True).stdout
                    with tarfile.open(fileobj=io.BytesIO(data)) as inner:
                        for f in inner.getmembers():
                            if f.isfile():
                                files[f"{pkg}:{f.name}"] = inner.extractfile(f).read()
        return files

    amd = contents(out / manifest["versions"][NEW]["tgz"])
    arm = contents(out / manifest["by_arch"]["arm64"][NEW]["tgz"])
    assert amd == arm and amd
    assert not any(body.startswith(b"\x7fELF") for body in arm.values())


def test_an_amd64_only_build_has_no_arm64_artifact(tmp_path):
    manifest = ofed_repo.build(tmp_path, (NEW,), KERNEL)
    assert "by_arch" not in manifest
    assert not list(tmp_path.rglob("*aarch64*")) and not (tmp_path / "repo-arm64").exists()


def test_a_cached_arm64_build_serves_an_amd64_lab_and_an_amd64_one_is_rebuilt_for_arm64(tmp_path):
    first = ofed_repo.build(tmp_path, (NEW,), KERNEL)
    again = ofed_repo.build(tmp_path, (NEW,), KERNEL, arches=("amd64", "arm64"))
    assert "arm64" in again["by_arch"] and (tmp_path / again["by_arch"]["arm64"][NEW]["tgz"]).is_file()
    def stable(v: dict) -> dict:  # Release's Date and the ISO's time: a rebuild's sums move
        return {k: x for k, x in v[NEW].items() if not k.endswith("_sha256")}

    assert stable(again["versions"]) == stable(first["versions"])
    stamp = (tmp_path / "manifest.json").stat().st_mtime_ns
    reused = ofed_repo.build(tmp_path, (NEW,), KERNEL)  # the default rack after an arm64 one
    assert reused == again and (tmp_path / "manifest.json").stat().st_mtime_ns == stamp


# --- DOCA-Host and the fabric services -------------------------------------------------------------

def test_doca_builds_arm64_sbsa_for_arm64(tmp_path):
    manifest = doca_repo.build(tmp_path, ("3.1.0",), KERNEL, ("amd64", "arm64"))
    assert manifest["versions"]["3.1.0"]["repo"] == "doca/3.1.0/debian12/x86_64"
    arm = manifest["by_arch"]["arm64"]["3.1.0"]
    assert arm["repo"] == "doca/3.1.0/debian12/arm64-sbsa"
    assert _archs(tmp_path / arm["repo"]) == {"arm64"}
    assert _archs(tmp_path / manifest["versions"]["3.1.0"]["repo"]) == {"amd64"}
    assert "Architectures: arm64 all\n" in (tmp_path / arm["repo"] / "Release").read_text()


def test_doca_amd64_only_has_no_arm64_sbsa(tmp_path):
    manifest = doca_repo.build(tmp_path, ("3.1.0",), KERNEL)
    assert "by_arch" not in manifest and not (tmp_path / "doca/3.1.0/debian12/arm64-sbsa").exists()


def test_the_doca_directory_is_the_products_choice_for_the_architecture():
    from fabricops import platforms

    for darch, machine in (("amd64", "x86_64"), ("arm64", "aarch64")):
        facts = {"distribution": "Ubuntu", "distribution_major_version": "24",
                 "distribution_version": "24.04", "architecture": machine}
        assert doca_repo.repo_rel("3.1.0", darch).rsplit("/", 1)[1] == \
            platforms.doca_repo_path(facts).rsplit("/", 1)[1]


def test_the_fabric_services_repository_for_arm64(tmp_path):
    manifest = fabric_services.build_fm_repo(tmp_path / "fm", darch="arm64")
    assert manifest["arch"] == "arm64"
    assert _archs(tmp_path / "fm") == {"arm64"}
    assert "Architectures: arm64 all\n" in (tmp_path / "fm" / "Release").read_text()
    opensm = ofed_repo.build_deb(fabric_services.opensm_deb(NEW), tmp_path, "arm64")
    assert _field(opensm, "Architecture") == "arm64"


def test_the_fabric_services_build_no_other_architecture_for_the_default_rack(tmp_path, monkeypatch):
    from fabricops_lab import paths

    monkeypatch.setattr(paths, "repo_dir", lambda: tmp_path)
    monkeypatch.setattr(ofed_repo, "sign_repo", lambda repo: None)
    lab = {"topology": topology.load()}
    assert fabric_services.prepare_arches(lab, {}, fabric_services.FM_VERSIONS, "http://x") == {}
    lab = {"topology": topology.resolve("arm64")}
    got = fabric_services.prepare_arches(lab, {}, fabric_services.FM_VERSIONS, "http://x")
    assert got == {"arm64": {"repo_url": "http://x/nvidia-fabricmanager-arm64"}}
    assert _archs(tmp_path / "nvidia-fabricmanager-arm64") == {"arm64"}


# --- the inventory -----------------------------------------------------------------------------

def _lab_arm64() -> dict:
    base = "http://198.51.100.1:8080"
    arm_name = f"MLNX_OFED_LINUX-{NEW}-debian12.1-aarch64"

    def build(name: str, repo: str) -> dict:
        return {"tgz_url": f"{base}/MLNX_OFED-{NEW}/{name}.tgz", "tgz_sha256": "a" * 64,
                "iso_url": f"{base}/MLNX_OFED-{NEW}/{name}.iso", "iso_sha256": "b" * 64,
                "repo_url": f"{base}/{repo}", "dir": name, "built_for_kernel": KERNEL}

    return {
        "topology": topology.resolve("arm64"),
        "ofed": {"default_version": NEW, "distro": "debian12.1",
                 "versions": {NEW: build(f"MLNX_OFED_LINUX-{NEW}-debian12.1-x86_64", f"repo/{NEW}")},
                 "by_arch": {"arm64": {NEW: build(arm_name, f"repo-arm64/{NEW}")}}},
        "doca": {"default_version": "3.1.0", "repo_key_url": "k", "repo_key_sha256": "c" * 64,
                 "versions": {"3.1.0": {"repo_url": f"{base}/doca/3.1.0/debian12/x86_64/"}},
                 "by_arch": {"arm64": {"3.1.0": {"repo_url": f"{base}/doca/3.1.0/debian12/arm64-sbsa/"}}}},
        "fabric_manager": {"repo_url": f"{base}/nvidia-fabricmanager",
                           "by_arch": {"arm64": {"repo_url": f"{base}/nvidia-fabricmanager-arm64"}}},
    }


def test_the_arm64_host_gets_its_own_artifacts_and_the_amd64_host_the_racks():
    lab = _lab_arm64()
    hosts = inventory.hosts_yml(lab)["all"]["children"]["gpu_hosts"]["hosts"]
    gh, gpu = hosts["gh01"], hosts["gpu01"]
    assert gh["mlnx_ofed_tarball_url"].endswith(f"/MLNX_OFED_LINUX-{NEW}-debian12.1-aarch64.tgz")
    assert gh["mlnx_ofed_tarball_sha256"] == "a" * 64
    assert gh["mlnx_ofed_iso_url"].endswith("-aarch64.iso") and gh["mlnx_ofed_iso_sha256"] == "b" * 64
    assert gh["mlnx_ofed_repo_url"].endswith(f"/repo-arm64/{NEW}")
    assert gh["mlnx_ofed_doca_repo_url"].endswith("/doca/3.1.0/debian12/arm64-sbsa/")
    assert gh["nvidia_fabric_manager_repo_url"].endswith("/nvidia-fabricmanager-arm64")
    # GH200: one GPU, no NVSwitch, no fabric manager; the HGX host keeps the rack's plan
    assert gh["fabricops_site_fabric_manager"] is False
    assert not any(k.startswith(("mlnx_ofed_", "nvidia_", "fabricops_site_")) for k in gpu), gpu
    group = inventory.all_yml(lab, lab["ofed"])
    assert group["mlnx_ofed_tarball_url"].endswith("-x86_64.tgz")
    assert group["mlnx_ofed_doca_repo_url"].endswith("/debian12/x86_64/")


def test_the_default_racks_hosts_get_no_per_host_artifacts():
    lab = _lab_arm64()
    lab["topology"] = topology.load()
    for name, host in inventory.hosts_yml(lab)["all"]["children"]["gpu_hosts"]["hosts"].items():
        assert set(host) <= {"ansible_host", "ipoib_host_index", "fabricops_nvlink_domain"}, (name, host)


def test_the_lab_facts_round_trip_through_json():
    lab = json.loads(json.dumps(_lab_arm64()))
    assert inventory.arch_host_vars(lab, next(h for h in lab["topology"]["hosts"] if h["name"] == "gh01"))


def test_a_host_whose_ports_are_named_apart_gets_its_own_ipoib_plan():
    topo = topology.resolve("arm64")
    group = inventory.host_plan_vars(topo)["ipoib_plan"]["networks"]
    assert group == {"ibp1s0": {"prefix": "198.18.0.0/16"}, "ibp2s0": {"prefix": "198.19.0.0/16"}}
    hosts = inventory.hosts_yml({"topology": topo})["all"]["children"]["gpu_hosts"]["hosts"]
    assert "ipoib_plan" not in hosts["gh01"]
    assert hosts["gpu01"]["ipoib_plan"] == {"networks": {"ibp26s0": {"prefix": "198.18.0.0/16"},
                                                         "ibp60s0": {"prefix": "198.19.0.0/16"}}}
    default = topology.load()
    for host in default["hosts"]:
        assert inventory.host_ipoib_plan(default, host) == {}
