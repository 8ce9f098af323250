"""The emulated MLNX_OFED distribution: packages, tarball, ISO, apt index, installer, HTTP server."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import urllib.request
from pathlib import Path

import pytest

from fabricops_lab import ofed_repo, paths, procs
from fabricops_lab.emul import tools as emul_tools

OLD, NEW = "23.10-1.1.9.0", "24.10-1.1.4.0"
KERNEL = "6.1.0-18-amd64"

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    out = tmp_path_factory.mktemp("ofed")
    manifest = ofed_repo.build(out, (OLD, NEW), KERNEL)
    return out, manifest


def _deb(out: Path, version: str, package: str) -> Path:
    found = sorted((out / "repo" / version).glob(f"{package}_*.deb"))
    assert len(found) == 1, found
    return found[0]


def _field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                          check=True).stdout.strip()


def _contents(deb: Path) -> dict[str, str]:
    """path -> mode string, from dpkg-deb -c."""
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        rows[parts[-1].lstrip(".")] = parts[0]
    return rows


def _extract(deb: Path, rel: str) -> str:
    proc = subprocess.run(f"dpkg-deb --fsys-tarfile '{deb}' | tar -xOf - './{rel}'", shell=True,
                          capture_output=True, text=True, check=True)
    return proc.stdout


# --- versions and names -------------------------------------------------------------------------

def test_package_versions_follow_nvidia_style():
    v = ofed_repo.package_versions("24.10-1.1.4.0", "6.1.0-18-amd64")
    assert v["ofed-scripts"] == "24.10.OFED.24.10.1.1.4"
    assert v["mlnx-ofed-kernel-utils"] == "24.10.OFED.24.10.1.1.4.0"
    assert v["mlnx-ofed-kernel-modules"] == "24.10.OFED.24.10.1.1.4.0.kver.6.1.0-18-amd64"
    assert v["rdma-core"].startswith("2410mlnx54-")
    assert v["mlnx-ofed-all"] == "24.10-1.1.4.0"
    # underscores are not allowed in Debian versions; mlnx_add_kernel_support maps them to '-'
    assert ofed_repo.package_versions(OLD, "3.10.0-957.el7_lustre")["mlnx-ofed-kernel-modules"].endswith(
        ".kver.3.10.0-957.el7-lustre")


def test_bad_version_is_one_sentence():
    with pytest.raises(ofed_repo.FabricopsError, match="not an MLNX_OFED version"):
        ofed_repo.package_versions("24.10", KERNEL)


def test_every_ofed_tool_is_packaged_and_the_driver_tool_is_not():
    placed = {t for tools in ofed_repo.ofed_tools().values() for t in tools}
    expected = {t for t in emul_tools.TOOLS if not ofed_repo.NOT_OFED.match(t)}
    assert placed == expected
    assert "nvidia-smi" not in placed and "nv-fabricmanager" not in placed  # NVIDIA's, not MLNX_OFED's
    assert "sminfo" in ofed_repo.ofed_tools()["infiniband-diags"]
    assert ofed_repo.ofed_tools()["opensm"] == ["opensm"]
    assert "ibstat" in ofed_repo.ofed_tools()["infiniband-diags"]
    assert "ib_write_bw" in ofed_repo.ofed_tools()["perftest"]


def test_mlnx_tools_ships_only_tools_mlnx_ofed_has():
    """A tool added to emul/tools.py lands in mlnx-tools unless decided otherwise, as /usr/bin/TOOL: one
    that another Debian package owns there (pciutils' lspci) makes dpkg refuse the whole install
    ("trying to overwrite '/usr/bin/lspci', which is also in package pciutils"), and nccl-tests or
    Open MPI are no MLNX_OFED package. mlnx-tools holds exactly these (MLNX_OFED's mlnx-tools package:
    mlnx_qos, cma_roce_tos, cma_roce_mode; ethtool's front-end is the mlx5 statistics)."""
    assert sorted(ofed_repo.ofed_tools()["mlnx-tools"]) == [
        "cma_roce_mode", "cma_roce_tos", "ethtool", "mlnx_qos",
    ]
    for tool in ("lspci", "mpirun", "all_reduce_perf", "all_gather_perf", "reduce_scatter_perf",
                 "nccl-rank-info"):
        assert ofed_repo.NOT_OFED.match(tool), tool


# --- the packages -------------------------------------------------------------------------------

def test_debs_are_valid_with_the_expected_names_and_versions(repo):
    out, _ = repo
    names = sorted(p.name.split("_")[0] for p in (out / "repo" / NEW).glob("*.deb"))
    assert names == sorted([
        "ofed-scripts", "mlnx-tools", "mlnx-ofed-kernel-utils", "mlnx-ofed-kernel-dkms",
        "mlnx-ofed-kernel-modules", "rdma-core", "ibverbs-utils", "infiniband-diags", "perftest",
        "opensm", "mft", "mlnx-fw-updater", "mlnx-ofed-all"])
    for deb in (out / "repo" / NEW).glob("*.deb"):
        info = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True)
        assert info.returncode == 0, info.stderr
        assert f"Package: {deb.name.split('_')[0]}" in info.stdout
        assert _field(deb, "Version") == deb.name.split("_")[1]
    modules = _deb(out, NEW, "mlnx-ofed-kernel-modules")
    assert modules.name == f"mlnx-ofed-kernel-modules_24.10.OFED.24.10.1.1.4.0.kver.{KERNEL}_amd64.deb" \
        or modules.name.endswith(f".kver.{KERNEL}_{ofed_repo.deb_arch()}.deb")
    assert _extract(modules, "usr/share/emulated-ofed/kernel") == f"{KERNEL}\n"


def test_wrappers_call_the_emulated_tools(repo):
    out, _ = repo
    diags = _deb(out, NEW, "infiniband-diags")
    files = _contents(diags)
    for tool in ("ibstat", "ibstatus", "ibqueryerrors", "perfquery", "sminfo"):
        assert files[f"/usr/bin/{tool}"].startswith("-rwxr-xr-x")
    body = _extract(diags, "usr/bin/ibstat")
    assert body.startswith("#!/usr/bin/python3\n")
    assert 'sys.path.insert(0, "/usr/lib/emulated-hw")' in body
    assert "from emul.tools import main" in body
    assert 'sys.exit(main("ibstat", sys.argv[1:]))' in body
    assert set(_contents(_deb(out, NEW, "ibverbs-utils"))) >= {"/usr/bin/ibv_devinfo", "/usr/bin/ibv_devices"}
    assert set(_contents(_deb(out, NEW, "mlnx-tools"))) >= {
        "/usr/bin/mlnx_qos", "/usr/bin/cma_roce_tos", "/usr/bin/cma_roce_mode"}
    assert "/usr/bin/ib_write_bw" in _contents(_deb(out, NEW, "perftest"))
    opensm = _deb(out, NEW, "opensm")
    assert _field(opensm, "Version") == ofed_repo.package_versions(NEW, KERNEL)["opensm"]
    assert _field(opensm, "Version") == "5.18.0.MLNX20240128.3f266a48-0.1.2410"
    assert {"/usr/sbin/opensm", "/lib/systemd/system/opensmd.service"} <= set(_contents(opensm))
    assert 'main("opensm", sys.argv[1:])' in _extract(opensm, "usr/sbin/opensm")


def test_ofed_scripts_records_the_release(repo):
    out, _ = repo
    for version in (OLD, NEW):
        deb = _deb(out, version, "ofed-scripts")
        assert _extract(deb, "usr/share/emulated-ofed/release") == f"MLNX_OFED_LINUX-{version}\n"
        assert "/usr/bin/ofed_info" in _contents(deb)


def test_kernel_utils_ship_openibd_like_the_real_package(repo):
    out, _ = repo
    deb = _deb(out, NEW, "mlnx-ofed-kernel-utils")
    files = _contents(deb)
    assert files["/etc/init.d/openibd"].startswith("-rwxr-xr-x")
    assert 'main("openibd"' in _extract(deb, "etc/init.d/openibd")
    unit = _extract(deb, "lib/systemd/system/openibd.service")
    assert "ExecStart=/etc/init.d/openibd start bootid=%b" in unit
    assert "WantedBy=sysinit.target" in unit
    conf = _extract(deb, "etc/infiniband/openib.conf")
    assert conf.startswith("# Start HCA driver upon boot\nONBOOT=yes\n")
    control = subprocess.run(["dpkg-deb", "-I", str(deb), "conffiles"], capture_output=True, text=True,
                             check=True).stdout
    assert control.strip() == "/etc/infiniband/openib.conf"


def test_meta_package_pins_exact_versions(repo):
    out, _ = repo
    deps = _field(_deb(out, OLD, "mlnx-ofed-all"), "Depends")
    v = ofed_repo.package_versions(OLD, KERNEL)
    assert f"ofed-scripts (= {v['ofed-scripts']})" in deps
    assert f"infiniband-diags (= {v['infiniband-diags']})" in deps
    assert f"perftest (= {v['perftest']})" in deps
    assert f"opensm (= {v['opensm']})" in deps
    assert (f"mlnx-ofed-kernel-modules (= {v['mlnx-ofed-kernel-modules']}) | "
            f"mlnx-ofed-kernel-dkms (= {v['mlnx-ofed-kernel-dkms']})") in deps
    assert _field(_deb(out, OLD, "mlnx-ofed-all"), "Version") == OLD


# --- tarball, ISO, checksums, index -------------------------------------------------------------

def test_tarball_holds_the_tree_under_its_real_name(repo):
    out, manifest = repo
    facts = manifest["versions"][NEW]
    top = f"MLNX_OFED_LINUX-{NEW}-debian12.1-{ofed_repo.machine_arch()}"
    assert facts["dir"] == top
    assert facts["tgz"].endswith(f"{top}.tgz") and facts["iso"].endswith(f"{top}.iso")
    with tarfile.open(out / facts["tgz"]) as tar:
        names = set(tar.getnames())
        assert {f"{top}/mlnxofedinstall", f"{top}/uninstall.sh", f"{top}/mlnx_add_kernel_support.sh",
                f"{top}/.mlnx", f"{top}/.arch", f"{top}/distro", f"{top}/DEBS/Packages"} <= names
        assert tar.getmember(f"{top}/mlnxofedinstall").mode & 0o111
        assert tar.extractfile(f"{top}/.mlnx").read() == f"{NEW}\n".encode()
        assert tar.extractfile(f"{top}/distro").read() == b"debian12.1\n"
        assert any(n.startswith(f"{top}/DEBS/mlnx-ofed-all_{NEW}_") for n in names)
        assert all(n == top or n.startswith(f"{top}/") for n in names)


@pytest.mark.skipif(shutil.which("xorriso") is None, reason="needs xorriso")
def test_iso_root_is_the_tree_and_extracts_with_xorriso(repo, tmp_path):
    out, manifest = repo
    iso = out / manifest["versions"][OLD]["iso"]
    dest = tmp_path / "x"
    proc = subprocess.run(["xorriso", "-osirrox", "on", "-indev", str(iso), "-extract", "/", str(dest)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (dest / ".mlnx").read_text() == f"{OLD}\n"
    assert os.access(dest / "mlnxofedinstall", os.X_OK)
    assert len(list((dest / "DEBS").glob("*.deb"))) == 13  # with opensm and mft


def test_checksums_match_the_files(repo):
    out, manifest = repo
    for version, facts in manifest["versions"].items():
        for kind in ("iso", "tgz"):
            data = (out / facts[kind]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == facts[f"{kind}_sha256"]
        sums = (out / f"MLNX_OFED-{version}" / "SHA256SUMS").read_text()
        assert f"{facts['tgz_sha256']}  {Path(facts['tgz']).name}\n" in sums
        assert f"{facts['iso_sha256']}  {Path(facts['iso']).name}\n" in sums
        assert facts["built_for_kernel"] == KERNEL
    assert json.loads((out / "manifest.json").read_text()) == manifest


def _stanzas(text: str) -> dict[str, dict[str, str]]:
    out = {}
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if line and not line[0].isspace():
                k, _, v = line.partition(":")
                fields[k] = v.strip()
        out[fields["Package"]] = fields
    return out


def test_packages_index_describes_every_deb(repo):
    out, _ = repo
    rdir = out / "repo" / NEW
    index = _stanzas((rdir / "Packages").read_text())
    assert len(index) == 13  # with mft
    for deb in rdir.glob("*.deb"):
        entry = index[deb.name.split("_")[0]]
        assert entry["Filename"] == f"./{deb.name}"
        assert entry["SHA256"] == hashlib.sha256(deb.read_bytes()).hexdigest()
        assert entry["Size"] == str(deb.stat().st_size)
    release = (rdir / "Release").read_text()
    assert hashlib.sha256((rdir / "Packages.gz").read_bytes()).hexdigest() in release


def test_python_index_matches_dpkg_scanpackages(repo, tmp_path, monkeypatch):
    out, _ = repo
    copy = tmp_path / "r"
    shutil.copytree(out / "repo" / OLD, copy)
    real = shutil.which
    monkeypatch.setattr(ofed_repo.shutil, "which", lambda n: None if n == "dpkg-scanpackages" else real(n))
    ofed_repo.write_index(copy, label="t")
    ours = _stanzas((copy / "Packages").read_text())
    theirs = _stanzas((out / "repo" / OLD / "Packages").read_text())
    assert set(ours) == set(theirs)
    for name, fields in theirs.items():
        for key in ("Version", "Depends", "Filename", "Size", "SHA256", "MD5sum"):
            assert ours[name].get(key) == fields.get(key), (name, key)


def test_cache_reuses_until_inputs_change(repo, monkeypatch):
    out, manifest = repo
    tgz = out / manifest["versions"][NEW]["tgz"]
    before = tgz.stat().st_mtime_ns
    again = ofed_repo.build(out, (OLD, NEW), KERNEL)
    assert again == manifest and tgz.stat().st_mtime_ns == before
    assert ofed_repo.cache_key((OLD, NEW), "6.1.0-19-amd64", "debian12.1") != manifest["key"]
    monkeypatch.setitem(emul_tools.TOOLS, "ibdev2netdev", "rdma:ibdev2netdev")
    assert ofed_repo.cache_key((OLD, NEW), KERNEL, "debian12.1") != manifest["key"]


def test_rebuild_when_an_artifact_is_missing(tmp_path):
    first = ofed_repo.build(tmp_path, (NEW,), KERNEL)
    (tmp_path / first["versions"][NEW]["iso"]).unlink()
    second = ofed_repo.build(tmp_path, (NEW,), KERNEL)
    assert (tmp_path / second["versions"][NEW]["iso"]).is_file()
    assert not list(tmp_path.glob(".build-*"))


# --- the installer ------------------------------------------------------------------------------

@pytest.fixture
def tree(repo, tmp_path):
    """Both versions' trees extracted, and an empty fake root that looks like Debian 12.1."""
    if os.geteuid() != 0:
        pytest.skip("installing into a fake root with dpkg needs root (it chowns to root)")
    out, manifest = repo
    trees = {}
    for version in (OLD, NEW):
        with tarfile.open(out / manifest["versions"][version]["tgz"]) as tar:
            tar.extractall(tmp_path, filter="tar")
        trees[version] = tmp_path / manifest["versions"][version]["dir"]
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
                                             'VERSION_ID="12"\n')
    (root / "etc" / "debian_version").write_text("12.1\n")
    dpkg = root / "var" / "lib" / "dpkg"
    (dpkg / "info").mkdir(parents=True)
    (dpkg / "info" / "python3.list").write_text("")
    (dpkg / "status").write_text("Package: python3\nStatus: install ok installed\nVersion: 3.11.2-1+b1\n"
                                 "Architecture: amd64\nMaintainer: x <x@example.org>\nDescription: stub\n\n")
    (tmp_path / "tmp").mkdir()
    return trees, root


def _run(script: Path, root: Path, *args: str, kernel: str = KERNEL,
         stdin: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, MLNXOFED_TEST_ROOT=str(root), MLNXOFED_TEST_KERNEL=kernel,
               TMPDIR=str(root.parent / "tmp"))
    return subprocess.run([str(script), *args], capture_output=True, text=True, env=env, input=stdin,
                          timeout=120)


def _installed(root: Path) -> dict[str, str]:
    out = subprocess.run(["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f",
                          "${Package} ${Version} ${Status}\n"], capture_output=True, text=True).stdout
    return {ln.split()[0]: ln.split()[1] for ln in out.splitlines() if ln.endswith("install ok installed")}


def test_scripts_are_valid_bash():
    for name in ("mlnxofedinstall", "uninstall.sh", "mlnx_add_kernel_support.sh"):
        assert subprocess.run(["bash", "-n", str(ofed_repo.TEMPLATE_DIR / name)]).returncode == 0


def test_installer_refuses_another_kernel_with_the_real_message(tree):
    trees, root = tree
    proc = _run(trees[NEW] / "mlnxofedinstall", root, "--force", "--without-fw-update",
                kernel="6.1.0-99-amd64")
    assert proc.returncode == 172
    assert ("The 6.1.0-99-amd64 kernel is installed, MLNX_OFED_LINUX does not have drivers available for "
            "this kernel.\n") in proc.stdout
    assert "Or, you can provide '--add-kernel-support' flag" in proc.stdout
    assert "python3" in _installed(root) and "ofed-scripts" not in _installed(root)


def test_installer_refuses_another_distro_unless_told(tree):
    trees, root = tree
    (root / "etc" / "debian_version").write_text("12.11\n")
    proc = _run(trees[NEW] / "mlnxofedinstall", root, "--force")
    assert proc.returncode == 1
    assert "Error: The current MLNX_OFED_LINUX is intended for debian12.1\n" in proc.stdout
    assert _run(trees[NEW] / "mlnxofedinstall", root, "--print-distro").stdout == "debian12.11\n"
    ok = _run(trees[NEW] / "mlnxofedinstall", root, "--force", "--without-fw-update", "--skip-distro-check")
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_installer_installs_and_asks_for_an_openibd_restart(tree):
    trees, root = tree
    proc = _run(trees[OLD] / "mlnxofedinstall", root, "--force", "--without-fw-update")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.endswith("Installation passed successfully\nTo load the new driver, run:\n"
                                "/etc/init.d/openibd restart\n")
    assert "Skipping FW update.\n" in proc.stdout
    assert "Added 'RUN_FW_UPDATER_ONBOOT=no to /etc/infiniband/openib.conf" in proc.stdout
    assert (root / "usr/share/emulated-ofed/release").read_text() == f"MLNX_OFED_LINUX-{OLD}\n"
    assert (root / "usr/share/emulated-ofed/kernel").read_text() == f"{KERNEL}\n"
    assert os.access(root / "usr/bin/ibstat", os.X_OK) and os.access(root / "etc/init.d/openibd", os.X_OK)
    assert (root / "etc/infiniband/openib.conf").read_text().endswith("RUN_FW_UPDATER_ONBOOT=no\n")
    assert _installed(root)["mlnx-ofed-all"] == OLD
    # MLNX_OFED installs OpenSM too (not enabled: the subnet_manager role decides where it runs)
    assert "Installing opensm-5.18.0.MLNX20240128.3f266a48..." in proc.stdout
    assert os.access(root / "usr/sbin/opensm", os.X_OK) and os.access(root / "usr/bin/sminfo", os.X_OK)
    assert not (root / "etc/systemd/system/multi-user.target.wants/opensmd.service").exists()


def test_upgrade_replaces_every_package(tree):
    trees, root = tree
    assert _run(trees[OLD] / "mlnxofedinstall", root, "--force", "--without-fw-update").returncode == 0
    conf = root / "etc/infiniband/openib.conf"
    conf.write_text(conf.read_text() + "# site change\n")
    proc = _run(trees[NEW] / "mlnxofedinstall", root, "--force", "--without-fw-update")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Uninstalling the previous version of MLNX_OFED_LINUX\n" in proc.stdout
    installed = _installed(root)
    expected = ofed_repo.package_versions(NEW, KERNEL)
    for name, version in expected.items():
        assert installed[name] == version, name
    assert (root / "usr/share/emulated-ofed/release").read_text() == f"MLNX_OFED_LINUX-{NEW}\n"
    assert conf.read_text().count("# site change") == 1  # conffile kept, no prompt
    assert conf.read_text().count("RUN_FW_UPDATER_ONBOOT=no") == 1


def test_add_kernel_support_rebuilds_for_the_running_kernel(tree):
    trees, root = tree
    proc = _run(trees[NEW] / "mlnxofedinstall", root, "--force", "--without-fw-update",
                "--add-kernel-support", kernel="6.1.0-99-amd64")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Building MLNX_OFED_LINUX DEBS . Please wait...\n" in proc.stdout
    assert f"MLNX_OFED_LINUX-{NEW}-debian12.1-ext.tgz\n" in proc.stdout
    assert _installed(root)["mlnx-ofed-kernel-modules"].endswith(".kver.6.1.0-99-amd64")
    assert (root / "usr/share/emulated-ofed/kernel").read_text() == "6.1.0-99-amd64\n"


def test_installer_without_force_asks_and_stops_on_no(tree):
    trees, root = tree
    proc = _run(trees[NEW] / "mlnxofedinstall", root, "--without-fw-update", stdin="")
    assert proc.returncode == 1
    assert "Do you want to continue?[y/N]:" in proc.stdout
    assert "ofed-scripts" not in _installed(root)
    yes = _run(trees[NEW] / "mlnxofedinstall", root, "--without-fw-update", stdin="y\n")
    assert yes.returncode == 0 and "ofed-scripts" in _installed(root)


def test_installer_firmware_step_and_bad_option(tree):
    trees, root = tree
    dev = root / "sys/class/infiniband/mlx5_0"
    dev.mkdir(parents=True)
    (dev / "fw_ver").write_text("28.39.1002\n")
    (dev / "board_id").write_text("MT_0000000838\n")
    (dev / "hca_type").write_text("MT4129\n")
    proc = _run(trees[NEW] / "mlnxofedinstall", root, "--force")
    assert proc.returncode == 0
    assert "Attempting to perform Firmware update...\n" in proc.stdout
    assert "  PSID:             MT_0000000838\n" in proc.stdout
    assert "     FW             28.39.1002     28.39.1002    \n" in proc.stdout
    assert "  Status:           Up to date\n" in proc.stdout
    bad = _run(trees[NEW] / "mlnxofedinstall", root, "--frobnicate")
    assert bad.returncode == 22 and "Unsupported option: --frobnicate" in bad.stdout


def test_uninstall_purges_everything(tree):
    trees, root = tree
    assert _run(trees[NEW] / "mlnxofedinstall", root, "--force", "--without-fw-update").returncode == 0
    proc = _run(trees[NEW] / "uninstall.sh", root, "--force")
    assert proc.returncode == 0, proc.stdout
    assert set(_installed(root)) == {"python3"}
    assert not (root / "usr/bin/ibstat").exists()
    assert not (root / "usr/share/emulated-ofed/release").exists()


# --- serving ------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(repo, tmp_path, monkeypatch):
    out, _ = repo
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    (tmp_path / "state").mkdir()
    shutil.copytree(out, tmp_path / "state" / "repo")
    lab = {"ofed_build": {"versions": [OLD, NEW], "built_for_kernel": KERNEL}}
    port = _free_port()
    facts = ofed_repo.prepare(lab, bind="127.0.0.1", port=port)
    yield lab, facts, port
    ofed_repo.stop({"repo": {"pid": facts["pid"]}})


def test_prepare_serves_the_artifacts_and_stop_stops_it(served):
    _lab, facts, port = served
    assert facts["base_url"] == f"http://127.0.0.1:{port}/"
    assert facts["default_version"] == NEW
    assert set(facts["versions"]) == {OLD, NEW}
    new = facts["versions"][NEW]
    assert new["repo_url"] == f"http://127.0.0.1:{port}/repo/{NEW}"
    assert new["built_for_kernel"] == KERNEL
    body = urllib.request.urlopen(new["tgz_url"], timeout=5).read()
    assert hashlib.sha256(body).hexdigest() == new["tgz_sha256"]
    index = urllib.request.urlopen(f"{new['repo_url']}/Packages", timeout=5).read().decode()
    assert f"Package: mlnx-ofed-all\nVersion: {NEW}\n" in index
    pid = facts["pid"]
    assert Path(f"/proc/{pid}").exists()
    ofed_repo.stop({"repo": {"pid": pid}})
    assert not procs.alive(pid)
    with pytest.raises(OSError):
        urllib.request.urlopen(new["tgz_url"], timeout=2)


def test_stop_leaves_other_processes_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    other = subprocess.Popen(["sleep", "30"])
    try:
        ofed_repo.stop({"repo": {"pid": other.pid}})
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")
def test_apt_get_resolves_the_meta_package_from_the_local_mirror(served, tmp_path):
    _, facts, _ = served
    a = tmp_path / "apt"
    for d in ("lists/partial", "cache/archives/partial"):
        (a / d).mkdir(parents=True)
    (a / "sources.list").write_text(f"deb [trusted=yes] {facts['versions'][OLD]['repo_url']} ./\n")
    (a / "status").write_text("Package: python3\nStatus: install ok installed\nVersion: 3.11.2-1+b1\n"
                              "Architecture: amd64\nMaintainer: x <x@example.org>\nDescription: stub\n\n")
    opts = [f"-oDir::Etc::SourceList={a}/sources.list", "-oDir::Etc::SourceParts=/dev/null",
            f"-oDir::State::Lists={a}/lists", f"-oDir::Cache={a}/cache", f"-oDir::State::status={a}/status",
            "-oDebug::NoLocking=1", "-oAPT::Get::List-Cleanup=0"]
    upd = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True, timeout=60)
    assert upd.returncode == 0, upd.stdout + upd.stderr
    sim = subprocess.run(["apt-get", *opts, "-s", "install", f"mlnx-ofed-all={OLD}"], capture_output=True,
                         text=True, timeout=60)
    assert sim.returncode == 0, sim.stdout + sim.stderr
    versions = ofed_repo.package_versions(OLD, KERNEL)
    for name in ("ofed-scripts", "infiniband-diags", "perftest", "mlnx-ofed-kernel-modules"):
        assert f"Inst {name} ({versions[name]} " in sim.stdout
    assert f"Conf mlnx-ofed-all ({OLD} " in sim.stdout


def test_tarball_bytes_are_reproducible(tmp_path, repo):
    out, manifest = repo
    top = manifest["versions"][OLD]["dir"]
    with tarfile.open(out / manifest["versions"][OLD]["tgz"]) as tar:
        tar.extractall(tmp_path, filter="tar")
    a, b = tmp_path / "a.tgz", tmp_path / "b.tgz"
    ofed_repo.make_tgz(tmp_path / top, a)
    ofed_repo.make_tgz(tmp_path / top, b)
    assert a.read_bytes() == b.read_bytes()
    with tarfile.open(fileobj=io.BytesIO(a.read_bytes())) as tar:
        assert {m.uname for m in tar.getmembers()} == {"root"}


@pytest.mark.skipif(shutil.which("apt-get") is None or shutil.which("gpg") is None,
                    reason="needs apt-get, gpg")
def test_mirror_is_signed_and_apt_checks_it_with_signed_by(served, tmp_path):
    """The roles write ``deb [signed-by=KEYRING] URL ./`` (issue 15): real apt accepts the lab's mirror
    with the key the lab serves (checked against its sha256), and refuses it with another key."""
    _, facts, _ = served
    import urllib.request

    key = tmp_path / "key.gpg"
    with urllib.request.urlopen(facts["repo_key_url"], timeout=10) as resp:  # 127.0.0.1
        key.write_bytes(resp.read())
    assert ofed_repo.sha256(key) == facts["repo_key_sha256"]
    other_home = tmp_path / "other-gpg"
    other = tmp_path / "other.gpg"
    ofed_repo.export_key(other, other_home)  # a different lab key

    def update(keyring):
        a = tmp_path / f"apt-{keyring.stem}"
        for d in ("lists/partial", "cache/archives/partial"):
            (a / d).mkdir(parents=True)
        url = facts["versions"][OLD]["repo_url"]
        (a / "sources.list").write_text(f"deb [signed-by={keyring}] {url} ./\n")
        (a / "status").write_text("")
        opts = [f"-oDir::Etc::SourceList={a}/sources.list", "-oDir::Etc::SourceParts=/dev/null",
                f"-oDir::State::Lists={a}/lists", f"-oDir::Cache={a}/cache",
                f"-oDir::State::status={a}/status", "-oDebug::NoLocking=1", "-oAPT::Get::List-Cleanup=0"]
        return subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True, timeout=60)

    good = update(key)
    assert good.returncode == 0 and "NO_PUBKEY" not in good.stdout + good.stderr, good.stdout + good.stderr
    assert "not signed" not in good.stdout + good.stderr
    bad = update(other)
    assert bad.returncode != 0 or "NO_PUBKEY" in bad.stdout + bad.stderr, bad.stdout + bad.stderr
    assert "NO_PUBKEY" in bad.stdout + bad.stderr or "not signed" in bad.stdout + bad.stderr


def test_a_stopped_agent_is_gone_before_the_next_gpg_starts(tmp_path, monkeypatch):
    """CI failed signing a repository with "can't connect to the agent: End of file ... No agent
    running": the block before had asked the agent to stop and returned while it was still exiting,
    and the next gpg connected to it. A stand-in gpgconf whose agent takes 0.3 s to go: stopping
    waits until its socket is removed, and nested blocks stop the agent once, at the outermost."""
    import stat

    from fabricops_lab import ofed_repo

    sock = tmp_path / "S.gpg-agent"
    log = tmp_path / "calls"
    fake = tmp_path / "gpgconf"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        f'case "$*" in *--list-dirs*) echo {sock};;\n'
        f'  *--kill*) (sleep 0.3; rm -f {sock}) >/dev/null 2>&1 & ;;\nesac\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    real_which = ofed_repo.shutil.which

    def which(name: str) -> str | None:
        return str(fake) if name == "gpgconf" else real_which(name)

    monkeypatch.setattr(ofed_repo.shutil, "which", which)
    home = tmp_path / "home"
    sock.touch()
    with ofed_repo._agent(home):
        with ofed_repo._agent(home):
            pass
        assert sock.exists() and not log.exists()  # the inner block leaves the agent to the outer
    assert not sock.exists()  # the agent is gone when the block ends, not 0.3 s later
    assert sum("--kill" in line for line in log.read_text().splitlines()) == 1
