"""The emulated DOCA-Host repositories: packages (dpkg-deb), profiles' Depends, the DKMS package,
signing, apt resolution, and the inventory variables (the default install method stays tarball)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fabricops_lab import doca_repo, inventory, ofed_repo, paths, topology

KERNEL = "6.1.0-18-amd64"
OLD, NEW = "2.9.1", "3.1.0"

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    out = tmp_path_factory.mktemp("doca")
    return out, doca_repo.build(out, (OLD, NEW), KERNEL)


def _deb(out: Path, manifest: dict, release: str, package: str) -> Path:
    (found,) = sorted((out / manifest["versions"][release]["repo"]).glob(f"{package}_*.deb"))
    return found


def _field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                          check=True).stdout.strip()


def _extract(deb: Path, rel: str) -> str:
    proc = subprocess.run(f"dpkg-deb --fsys-tarfile '{deb}' | tar -xOf - './{rel}'", shell=True,
                          capture_output=True, text=True, check=True)
    return proc.stdout


def _names(deb: Path) -> set[str]:
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    return {ln.split()[-1].lstrip(".") for ln in out.splitlines()}


def test_layout_follows_nvidia_doca_urls(repo):
    out, manifest = repo
    arch = ofed_repo.machine_arch()
    assert manifest["versions"][NEW]["repo"] == f"doca/{NEW}/debian12/{arch}"
    assert manifest["versions"][OLD]["ofed_version"] == "24.10-1.1.4.0"
    for rel in ("Packages", "Packages.gz", "Release"):
        assert (out / manifest["versions"][NEW]["repo"] / rel).is_file()


def test_every_deb_is_valid_and_there_is_no_prebuilt_kernel_package(repo):
    out, manifest = repo
    debs = sorted((out / manifest["versions"][OLD]["repo"]).glob("*.deb"))
    names = {d.name.split("_")[0] for d in debs}
    assert {"doca-ofed", "doca-roce", "mlnx-ofed-kernel-dkms", "dkms", "ofed-scripts", "rdma-core"} <= names
    assert "mlnx-ofed-kernel-modules" not in names and "mlnx-ofed-all" not in names
    for d in debs:
        subprocess.run(["dpkg-deb", "--info", str(d)], capture_output=True, check=True)


def test_profiles_pin_the_release_and_roce_is_the_smaller_set(repo):
    out, manifest = repo
    pkgs = manifest["versions"][OLD]["packages"]
    ofed = _field(_deb(out, manifest, OLD, "doca-ofed"), "Depends")
    roce = _field(_deb(out, manifest, OLD, "doca-roce"), "Depends")
    assert f"mlnx-ofed-kernel-dkms (= {pkgs['mlnx-ofed-kernel-dkms']})" in ofed
    assert f"ofed-scripts (= {pkgs['ofed-scripts']})" in roce
    for p in ("infiniband-diags", "opensm"):
        assert f"{p} (=" in ofed and f"{p} (=" not in roce
    assert "mlnx-ofed-kernel-modules" not in ofed + roce
    if "mft" in pkgs:  # fw-lab's MFT package (ofed_repo.packages), in both profiles as in DOCA
        assert f"mft (= {pkgs['mft']})" in ofed and f"mft (= {pkgs['mft']})" in roce
    assert _field(_deb(out, manifest, NEW, "doca-ofed"), "Version") == f"{NEW}-1"


def test_dkms_package_and_source_package(repo):
    out, manifest = repo
    ver = doca_repo.dkms_version("24.10-1.1.4.0")
    assert ver == "24.10.OFED.24.10.1.1.4.1"
    src = _deb(out, manifest, OLD, "mlnx-ofed-kernel-dkms")
    assert _field(src, "Version") == f"{ver}-1"
    assert _field(src, "Depends").startswith("dkms, ")
    assert _field(src, "Conflicts") == "mlnx-ofed-kernel-modules"
    conf = _extract(src, f"usr/src/mlnx-ofed-kernel-{ver}/dkms.conf")
    assert f'PACKAGE_VERSION="{ver}"' in conf and 'AUTOINSTALL="yes"' in conf
    assert 'BUILT_MODULE_NAME[7]="mlx5_core"' in conf
    post = subprocess.run(f"dpkg-deb --ctrl-tarfile '{src}' | tar -xOf - ./postinst", shell=True,
                          capture_output=True, text=True, check=True).stdout
    assert f"/usr/lib/dkms/common.postinst mlnx-ofed-kernel {ver}" in post
    dk = _deb(out, manifest, OLD, "dkms")
    assert _field(dk, "Version") == doca_repo.DKMS_DEB_VERSION
    assert {"/usr/sbin/dkms", "/etc/kernel/postinst.d/dkms", "/usr/lib/dkms/common.postinst"} <= _names(dk)
    assert 'main("dkms", sys.argv[1:])' in _extract(dk, "usr/sbin/dkms")


def test_ofed_scripts_prints_the_doca_form_and_mlnx_ofed_keeps_its_uninstaller(repo):
    out, manifest = repo
    scripts = _deb(out, manifest, NEW, "ofed-scripts")
    assert _extract(scripts, "usr/share/emulated-ofed/release") == "OFED-internal-25.07-0.9.7.0\n"
    assert "/usr/sbin/ofed_uninstall.sh" not in _names(scripts)
    mofed = {d.package: d for d in ofed_repo.packages("24.10-1.1.4.0", KERNEL)}
    body, mode = mofed["ofed-scripts"].files["usr/sbin/ofed_uninstall.sh"]
    assert mode == 0o755 and b"dpkg" in body and b"--purge" in body
    tools = ofed_repo.ofed_tools()
    assert not any(t in ("dkms", "mokutil") for names in tools.values() for t in names)


def test_cache_reuses_the_build(repo):
    out, manifest = repo
    stamp = (out / "doca/manifest.json").stat().st_mtime_ns
    assert doca_repo.build(out, (OLD, NEW), KERNEL) == manifest
    assert (out / "doca/manifest.json").stat().st_mtime_ns == stamp


def test_unknown_release_is_one_sentence(tmp_path):
    with pytest.raises(Exception, match="is not a DOCA release the lab builds"):
        doca_repo.build(tmp_path, ("9.9.9",), KERNEL)


@pytest.fixture
def prepared(repo, tmp_path, monkeypatch):
    if shutil.which("gpg") is None:
        pytest.skip("needs gpg")
    out, _ = repo
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    (tmp_path / "state").mkdir()
    shutil.copytree(out, tmp_path / "state" / "repo")
    facts = doca_repo.prepare({"ofed_build": {"built_for_kernel": KERNEL}})
    return tmp_path / "state" / "repo", facts


def test_prepare_signs_each_release_and_describes_both(prepared):
    served, facts = prepared
    assert facts["default_version"] == NEW and set(facts["versions"]) == {OLD, NEW}
    new = facts["versions"][NEW]
    assert new["repo_url"].endswith(f"/doca/{NEW}/debian12/{ofed_repo.machine_arch()}/")
    assert new["ofed_info"] == "OFED-internal-25.07-0.9.7.0:"
    for v in (OLD, NEW):
        d = served / facts["versions"][v]["repo_url"].split(":8080/", 1)[1]
        assert (d / "InRelease").read_text().startswith("-----BEGIN PGP SIGNED MESSAGE-----")
        assert (d / "Release.gpg").is_file()
    assert ofed_repo.sha256(served / ofed_repo.KEY_FILE) == facts["repo_key_sha256"]


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")
def test_apt_resolves_doca_ofed_with_the_dkms_stack(prepared, tmp_path):
    served, facts = prepared
    repo_dir = served / facts["versions"][OLD]["repo_url"].split(":8080/", 1)[1]
    a = tmp_path / "apt"
    for d in ("lists/partial", "cache/archives/partial"):
        (a / d).mkdir(parents=True)
    (a / "sources.list").write_text(f"deb [signed-by={served / ofed_repo.KEY_FILE}] file:{repo_dir} ./\n")
    (a / "status").write_text("Package: python3\nStatus: install ok installed\nVersion: 3.11.2-1+b1\n"
                              "Architecture: amd64\nMaintainer: x <x@example.org>\nDescription: stub\n\n")
    opts = [f"-oDir::Etc::SourceList={a}/sources.list", "-oDir::Etc::SourceParts=/dev/null",
            f"-oDir::State::Lists={a}/lists", f"-oDir::Cache={a}/cache", f"-oDir::State::status={a}/status",
            "-oDebug::NoLocking=1", "-oAPT::Get::List-Cleanup=0"]
    upd = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True, timeout=60)
    assert upd.returncode == 0 and "not signed" not in upd.stdout + upd.stderr, upd.stdout + upd.stderr
    sim = subprocess.run(["apt-get", *opts, "-s", "install", "doca-ofed"], capture_output=True, text=True,
                         timeout=60)
    assert sim.returncode == 0, sim.stdout + sim.stderr
    for name in ("dkms", "mlnx-ofed-kernel-dkms", "ofed-scripts", "infiniband-diags"):
        assert f"Inst {name} (" in sim.stdout
    assert "mlnx-ofed-kernel-modules" not in sim.stdout


def test_inventory_adds_doca_vars_without_changing_the_install_method():
    topo = topology.load()
    ofed = {"default_version": "24.10-1.1.4.0", "distro": "debian12.1", "repo_key_url": "http://k",
            "repo_key_sha256": "0" * 64,
            "versions": {"24.10-1.1.4.0": {"tgz_url": "t", "tgz_sha256": "1" * 64, "iso_url": "i",
                                           "iso_sha256": "2" * 64, "repo_url": "r"}}}
    doca = {"default_version": NEW, "repo_key_url": "http://198.51.100.1:8080/fabricops-lab-repo.gpg",
            "repo_key_sha256": "3" * 64, "os": "debian12",
            "versions": {OLD: {"repo_url": "http://198.51.100.1:8080/doca/2.9.1/debian12/x86_64/"},
                         NEW: {"repo_url": "http://198.51.100.1:8080/doca/3.1.0/debian12/x86_64/"}}}
    data = inventory.all_yml({"topology": topo, "doca": doca}, ofed)
    assert data["mlnx_ofed_install_method"] == "tarball"
    assert data["mlnx_ofed_doca_version"] == NEW
    assert data["mlnx_ofed_doca_repo_url"] == doca["versions"][NEW]["repo_url"]
    assert data["mlnx_ofed_doca_repo_key_url"] == doca["repo_key_url"]
    assert data["mlnx_ofed_doca_repo_key_sha256"] == "3" * 64
    assert set(data["fabricops_doca"]["versions"]) == {OLD, NEW}
    assert "mlnx_ofed_doca_version" not in inventory.all_yml({"topology": topo}, ofed)


def test_lab_start_prepares_doca_after_the_ofed_repository(tmp_path, monkeypatch):
    from fabricops_lab import rack

    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    calls = []

    class Service:
        def __init__(self, name, facts):
            self.name, self.facts = name, facts

        def prepare(self, lab):
            calls.append(self.name)
            return self.facts

    mods = {"ofed_repo": Service("ofed", {"pid": 1}), "fabric_services": Service("fm", {"repo_url": "u"}),
            "doca_repo": Service("doca", {"default_version": NEW})}
    monkeypatch.setattr(rack, "_service", lambda name: mods.get(name))
    lab = {"name": "t", "hosts": {}}
    rack._start_services(lab)
    assert calls == ["ofed", "fm", "doca"]
    assert paths.load_lab()["doca"] == {"default_version": NEW}
