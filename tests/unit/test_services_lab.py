"""The lab's fabric-services packages (fabricops_lab.fabric_services): opensm deb, fabric manager repo."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fabricops_lab import fabric_services as fs

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")


def test_fm_repo_offers_each_version(tmp_path):
    manifest = fs.build_fm_repo(tmp_path / "repo")
    assert manifest == {"versions": ["550.54.14", "550.54.15"], "packages": ["nvidia-fabricmanager-550"],
                        "imex_packages": ["nvidia-imex-550"],
                        "nvlsm_packages": ["nvlsm=2025.06.5-1", "nvlsm=2025.06.6-1",
                                           "libnvsdm-550=550.54.14-1", "libnvsdm-550=550.54.15-1"],
                        "data_sha256": fs.data_digest()}
    index = (tmp_path / "repo" / "Packages").read_text()
    stanzas = [dict(ln.split(": ", 1) for ln in st.splitlines() if ": " in ln) for st in index.split("\n\n")]
    assert sorted((s["Package"], s["Version"]) for s in stanzas if "Package" in s) == [
        ("libnvsdm-550", "550.54.14-1"), ("libnvsdm-550", "550.54.15-1"),
        ("nvidia-fabricmanager-550", "550.54.14-1"), ("nvidia-fabricmanager-550", "550.54.15-1"),
        ("nvidia-imex-550", "550.54.14-1"), ("nvidia-imex-550", "550.54.15-1"),
        ("nvlsm", "2025.06.5-1"), ("nvlsm", "2025.06.6-1"),
    ]
    deb = next((tmp_path / "repo").glob("nvidia-fabricmanager-550_550.54.15-1_*.deb"))
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "./usr/bin/nv-fabricmanager" in listing
    assert "./lib/systemd/system/nvidia-fabricmanager.service" in listing
    ver = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    assert b"550.54.15\n" in ver


def test_opensm_deb(tmp_path):
    deb = fs.ofed_repo.build_deb(fs.opensm_deb("24.10-1.1.4.0"), tmp_path, "amd64")
    info = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Package", "Version"], capture_output=True, text=True, check=True
    ).stdout
    assert info.splitlines() == ["Package: opensm", "Version: 5.18.0.MLNX20240128.3f266a48-0.1.2410"]
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "./usr/sbin/opensm" in listing and "./lib/systemd/system/opensmd.service" in listing


def test_install_into_root(tmp_path):
    fs.install_into_root(tmp_path)
    assert (tmp_path / "usr/local/sbin/modprobe").read_text().count('main("modprobe"') == 1
    assert (tmp_path / "etc/systemd/system/paths.target.wants/emulated-hw-sm.path").is_symlink()
    assert (
        "PathChanged=/var/lib/emulated-fabric/sm"
        in (tmp_path / "etc/systemd/system/emulated-hw-sm.path").read_text()
    )


@pytest.mark.skipif(shutil.which("gpgv") is None or shutil.which("gpg") is None, reason="needs gpg, gpgv")
def test_fm_repo_is_signed_and_its_key_reaches_the_role(tmp_path, monkeypatch):
    """prepare() signs the repository (InRelease, Release.gpg) and hands the key's URL and sha256 to
    the role (issue 15: no more [trusted=yes]); gpgv, apt's verifier, accepts them with that key
    and refuses a Release changed after signing."""
    from fabricops_lab import paths

    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    facts = fs.prepare({})
    assert facts["repo_key_url"] == f"http://198.51.100.1:8080/{fs.ofed_repo.KEY_FILE}"
    key = paths.repo_dir() / fs.ofed_repo.KEY_FILE
    assert fs.ofed_repo.sha256(key) == facts["repo_key_sha256"]
    repo = paths.repo_dir() / fs.FM_REPO
    ok = subprocess.run(["gpgv", "--keyring", str(key), str(repo / "InRelease")], capture_output=True,
                        text=True)
    assert ok.returncode == 0, ok.stderr
    detached = ["gpgv", "--keyring", str(key), str(repo / "Release.gpg"), str(repo / "Release")]
    assert subprocess.run(detached, capture_output=True).returncode == 0
    (repo / "Release").write_text((repo / "Release").read_text() + "Label: tampered\n")
    assert subprocess.run(detached, capture_output=True).returncode != 0
    defaults = yaml.safe_load((Path(__file__).parents[2] / "roles/nvidia_fabric_manager/defaults/main.yml")
                              .read_text())
    assert defaults["nvidia_fabric_manager_repo_trusted"] is False
    # the key reaches the role as its own variables in the lab inventory, as a real rack's does
    from fabricops_lab import inventory, topology

    data = inventory.all_yml({"topology": topology.load(), "fabric_manager": facts}, None)
    assert data["nvidia_fabric_manager_repo_key_url"] == facts["repo_key_url"]
    assert data["nvidia_fabric_manager_repo_key_sha256"] == facts["repo_key_sha256"]
