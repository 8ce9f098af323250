"""The ``rpm`` host variant and the lab's signed RPM repositories (issue 37 point 5, lab side).

Unit tests read the recipe's Rocky 9.4 identity the way Ansible's fact code reads it, and the RPM spec
and .repo text rpm_repo.py generates. Tests that need Debian's rpm / createrepo-c (``scripts/setup.sh
--rpm``, not the default CI's path) skip without them; the chroot test needs root and the variant's layer
already built (``image.ensure_variant("rpm")``): it runs the controller's own ``setup`` module and real
dnf on an overlay of that layer, with no lab booted."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from fabricops_lab import fabric_services, image, ofed_repo, rpm_repo

TOOLS = {t: shutil.which(t) for t in ("rpmbuild", "rpmsign", "createrepo_c", "rpm", "gpg")}
NEEDS_TOOLS = pytest.mark.skipif(
    not all(TOOLS.values()),
    reason="needs rpm (rpmbuild, rpmsign) and createrepo-c: scripts/setup.sh --rpm (not on the default CI "
    "path); "
    f"missing: {', '.join(t for t, p in TOOLS.items() if not p)}",
)


def _spec() -> dict:
    return image.load_recipe()["variants"]["rpm"]


def _write_root(root: Path) -> None:
    """The rpm layer's own files (as build_variant writes them) over a Debian-like root: /etc/os-release
    a link to ../usr/lib/os-release, as debootstrap leaves it."""
    (root / "etc").mkdir(parents=True)
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/lib/os-release").write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n')
    (root / "etc/os-release").symlink_to("../usr/lib/os-release")
    image.write_files(root, _spec())


# --- the recipe ------------------------------------------------------------------------------------

def test_the_rpm_variant_installs_real_dnf_and_rpm_and_keeps_apt_and_dpkg():
    spec = _spec()
    assert "rpm" in image.variants()
    assert set(spec["install"]) == {"rpm", "dnf", "python3-dnf", "dnf-plugins-core"}
    # the lab installs opensm into running hosts with dpkg -i: nothing of apt/dpkg is purged
    assert not spec.get("purge") and not spec.get("remove") and not spec.get("enable")
    assert set(spec["mkdir"]) == {"etc/yum.repos.d", "var/lib/rpm"}
    assert spec["write"]["etc/rpm/macros.dbpath"] == "%_dbpath /var/lib/rpm\n"
    assert spec["write"]["etc/dnf/vars/releasever"] == "9\n"


def test_the_layer_writes_rocky_9_4_os_release_through_the_link_and_rocky_release_links(tmp_path):
    _write_root(tmp_path)
    # /etc/os-release still the distribution's link; the file it names is Rocky's
    assert os.readlink(tmp_path / "etc/os-release") == "../usr/lib/os-release"
    fields = dict(line.split("=", 1) for line in (tmp_path / "usr/lib/os-release").read_text().splitlines())
    assert {k: v.strip('"') for k, v in fields.items() if k in (
        "NAME", "ID", "ID_LIKE", "VERSION_ID", "PLATFORM_ID", "PRETTY_NAME", "VERSION")} == {
        "NAME": "Rocky Linux", "ID": "rocky", "ID_LIKE": "rhel centos fedora", "VERSION_ID": "9.4",
        "PLATFORM_ID": "platform:el9", "PRETTY_NAME": "Rocky Linux 9.4 (Blue Onyx)",
        "VERSION": "9.4 (Blue Onyx)"}
    assert (tmp_path / "etc/rocky-release").read_text() == "Rocky Linux release 9.4 (Blue Onyx)\n"
    for name in ("redhat-release", "system-release"):
        assert os.readlink(tmp_path / "etc" / name) == "rocky-release"
    assert (tmp_path / "etc/yum.repos.d").is_dir() and (tmp_path / "var/lib/rpm").is_dir()
    assert (tmp_path / "usr/lib/os-release").stat().st_mode & 0o777 == 0o644


def test_write_files_refuses_a_path_outside_the_root(tmp_path):
    for spec in ({"write": {"../escape": "x"}}, {"link": {"/etc/x": "y"}}, {"mkdir": ["a/../../b"]}):
        with pytest.raises(Exception, match="inside the root"):
            image.write_files(tmp_path, spec)
    assert not (tmp_path.parent / "escape").exists()


def test_the_other_variants_use_none_of_the_new_keys():
    """netplan / networkmanager layers build as before: write_files does nothing for them."""
    for name in ("netplan", "networkmanager"):
        spec = image.load_recipe()["variants"][name]
        assert not {"write", "link", "mkdir"} & set(spec)


def test_ansible_reads_rocky_9_redhat_family_and_dnf_from_the_layer(tmp_path, monkeypatch):
    """Ansible's own fact code (ansible-core's bundled distro parser, DistributionFiles, the OS family map
    and PkgMgrFactCollector) on the layer's files: Rocky, 9 / 9.4, Blue Onyx, RedHat, dnf."""
    import importlib.util

    import ansible.module_utils
    from ansible.module_utils.facts.system import distribution as dist

    # ansible-core's bundled copy of distro, what a host without python3-distro runs (on the controller
    # ansible.module_utils.distro is the venv's own distro package)
    bundled = Path(ansible.module_utils.__file__).parent / "distro" / "_distro.py"
    loader = importlib.util.spec_from_file_location("fo_bundled_distro", bundled)
    _distro = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(_distro)
    from ansible.module_utils.facts.system import pkg_mgr

    _write_root(tmp_path)
    parsed = _distro.LinuxDistribution(include_lsb=False, include_uname=False, include_oslevel=False,
                                       os_release_file=str(tmp_path / "etc/os-release"),
                                       distro_release_file=str(tmp_path / "etc/redhat-release"))
    assert (parsed.id(), parsed.version(), parsed.major_version(), parsed.codename()) == (
        "rocky", "9.4", "9", "Blue Onyx")
    distribution = parsed.id().capitalize()  # get_distribution()
    assert distribution == "Rocky"
    family = next(f for f, names in dist.Distribution.OS_FAMILY_MAP.items() if distribution in names)
    assert family == "RedHat"
    # process_dist_files: /etc/redhat-release is the first file of its list there; its first word names it
    ok, facts = dist.DistributionFiles(module=None)._parse_dist_file(
        "RedHat", (tmp_path / "etc/redhat-release").read_text(), "/etc/redhat-release", {})
    assert ok and facts["distribution"] == "Rocky"

    # pkg_mgr: /usr/bin/apt-get and /usr/bin/dnf both there (Debian's dnf: dnf -> dnf-3); RedHat -> dnf
    for rel, target in (("usr/bin/dnf-3", None), ("usr/bin/dnf", "dnf-3"), ("usr/bin/apt-get", None),
                        ("usr/bin/rpm", None)):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(target) if target else p.write_text("")
    real_exists, real_realpath = os.path.exists, os.path.realpath
    def exists(p):
        rooted = str(p).startswith("/") and not str(p).startswith(str(tmp_path))
        return real_exists(str(tmp_path) + p) if rooted else real_exists(p)

    monkeypatch.setattr(pkg_mgr.os.path, "exists", exists)
    monkeypatch.setattr(pkg_mgr.os.path, "realpath", lambda p: "/" + str(Path(real_realpath(
        str(tmp_path) + p)).relative_to(real_realpath(tmp_path))))
    collector = pkg_mgr.PkgMgrFactCollector()
    assert collector.collect(collected_facts={"ansible_os_family": family}) == {"pkg_mgr": "dnf"}
    # the same root read as Debian would have said apt: the family decides, not the binaries
    monkeypatch.setattr(pkg_mgr.subprocess, "check_call", lambda *a, **k: (_ for _ in ()).throw(
        subprocess.CalledProcessError(1, a[0])))
    assert collector.collect(collected_facts={"ansible_os_family": "Debian"}) == {"pkg_mgr": "apt"}


# --- rpm_repo: names, layout, spec, .repo ------------------------------------------------------------

def test_fabric_rpms_take_the_apt_packages_with_rhel_names_and_layout():
    rpms = {r.nevra: r for r in rpm_repo.fabric_rpms()}
    want = {f"nvidia-fabric-manager-{v}-1.x86_64" for v in fabric_services.FM_VERSIONS} | {
        f"nvidia-imex-550-{v}-1.x86_64" for v in fabric_services.FM_VERSIONS}
    assert set(rpms) == want
    fm = rpms[f"nvidia-fabric-manager-{fabric_services.FM_VERSIONS[-1]}-1.x86_64"]
    deb = next(d for d in fabric_services.fm_debs() if d.version == f"{fabric_services.FM_VERSIONS[-1]}-1")
    # the same payloads: every Debian file, at its RHEL path, same bytes and mode
    assert {rpm_repo.rhel_path(k): v for k, v in deb.files.items()} == fm.files
    assert "/usr/lib/systemd/system/nvidia-fabricmanager.service" in fm.files
    assert not any(p.startswith("/lib/") for p in fm.files)
    assert fm.config == ("/usr/share/nvidia/nvswitch/fabricmanager.cfg",)
    imex = rpms[f"nvidia-imex-550-{fabric_services.FM_VERSIONS[-1]}-1.x86_64"]
    assert imex.config == ("/etc/nvidia-imex/config.cfg",) and imex.files["/usr/bin/nvidia-imex"][1] == 0o755


def test_rhel_names():
    assert rpm_repo.rhel_name("nvidia-fabricmanager-550") == "nvidia-fabric-manager"
    assert rpm_repo.rhel_name("nvidia-imex-570") == "nvidia-imex-570"
    assert rpm_repo.rhel_name("nvlsm") == "nvlsm"


def test_the_spec_lists_every_file_with_its_mode_and_config_and_no_automatic_requires():
    fm = next(r for r in rpm_repo.fabric_rpms() if r.name == "nvidia-fabric-manager")
    text = rpm_repo.spec(fm)
    header = dict(line.split(": ", 1) for line in text.split("\n\n")[0].splitlines())
    assert header["Name"] == "nvidia-fabric-manager" and header["Version"] == fm.version
    assert header["Release"] == "1" and header["BuildArch"] == "x86_64" and header["AutoReqProv"] == "no"
    assert "Requires" not in header
    files = text.split("%files\n", 1)[1].splitlines()
    assert files == sorted(files, key=lambda line: line.split()[-1])
    assert "%attr(0755,root,root) /usr/bin/nv-fabricmanager" in files
    assert "%config(noreplace) %attr(0644,root,root) /usr/share/nvidia/nvswitch/fabricmanager.cfg" in files
    assert len(files) == len(fm.files)


def test_from_deb_refuses_what_it_cannot_map():
    base = dict(package="x", version="1.0-1", depends="", description="d", files={}, scripts={})
    with pytest.raises(Exception, match="maintainer scripts"):
        rpm_repo.from_deb(ofed_repo.Deb(**{**base, "scripts": {"postinst": b"#!/bin/sh\n"}}))
    with pytest.raises(Exception, match="Depends"):
        rpm_repo.from_deb(ofed_repo.Deb(**{**base, "depends": "libc6"}))
    with pytest.raises(Exception, match="epoch"):
        rpm_repo.from_deb(ofed_repo.Deb(**{**base, "version": "1:2.0-3"}))
    r = rpm_repo.from_deb(ofed_repo.Deb(**{**base, "version": "5.18.0.MLNX2024-0.1.2410114"}))
    assert (r.version, r.release) == ("5.18.0.MLNX2024", "0.1.2410114")


def test_the_repo_file_checks_packages_and_metadata():
    text = rpm_repo.repo_file("cuda-rhel9-x86_64", "lab", "http://198.51.100.1:8080/rpm/fm")
    import configparser

    cp = configparser.ConfigParser()
    cp.read_string(text)
    s = cp["cuda-rhel9-x86_64"]
    assert s["baseurl"] == "http://198.51.100.1:8080/rpm/fm/"
    assert (s["enabled"], s["gpgcheck"], s["repo_gpgcheck"]) == ("1", "1", "1")
    assert s["gpgkey"] == "http://198.51.100.1:8080/rpm/fm/RPM-GPG-KEY-fabricops-lab"



# --- the driver's dnf source on an rpm NVL72 tray (nvidia_imex) -----------------------------------

def _served(tmp_path, monkeypatch) -> dict:
    """A served repository's .repo (as rpm_repo.prepare leaves it) under a lab state dir in TMP_PATH."""
    from fabricops_lab import paths

    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    base = f"http://198.51.100.1:8080/{rpm_repo.SERVED_PATH}/x86_64/"
    out = paths.repo_dir() / rpm_repo.SERVED_PATH / "x86_64"
    out.mkdir(parents=True)
    repo = rpm_repo.repo_file(rpm_repo.FABRIC_REPO_ID, "lab", base)
    (out / f"{rpm_repo.FABRIC_REPO_ID}.repo").write_text(repo)
    (out / rpm_repo.KEY_FILE).write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n")
    return {"repo_url": base, "repo_key_url": base + rpm_repo.KEY_FILE, "repo_id": rpm_repo.FABRIC_REPO_ID}


def test_an_rpm_tray_gets_its_drivers_dnf_source_and_a_debian_tray_its_apt_source(tmp_path, monkeypatch):
    """gb200-rpm: tray02 (rpm) gets /etc/yum.repos.d/cuda-rhel9-x86_64.repo, the key imported into its
    rpmdb and dnf's cache made (what installing the driver from the repository leaves); tray01 (Debian)
    gets the apt source only, and no tray gets both."""
    from fabricops_lab import hosts, paths, topology

    served = _served(tmp_path, monkeypatch)
    lab = {"topology": topology.resolve("gb200-rpm")}
    for h in lab["topology"]["hosts"]:
        (paths.host_dir(h["name"]) / "root" / "etc/apt/sources.list.d").mkdir(parents=True)
    (paths.repo_dir() / ofed_repo.KEY_FILE).write_bytes(b"key")
    ran = []
    def host_exec(name, argv, **kw):
        ran.append((name, argv[0], argv[1:3]))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(hosts, "host_exec", host_exec)
    assert rpm_repo.driver_trays(lab) == [lab["topology"]["hosts"][1]]
    assert rpm_repo.install_driver_source(lab, served) == ["tray02"]
    fabric_services.install_driver_source(lab, "http://198.51.100.1:8080/nvidia-fabricmanager")
    root = {n: paths.host_dir(n) / "root" for n in ("tray01", "tray02")}
    text = (root["tray02"] / rpm_repo.DRIVER_REPO).read_text()
    assert rpm_repo.DRIVER_REPO == "etc/yum.repos.d/cuda-rhel9-x86_64.repo"
    assert text.endswith(rpm_repo.repo_file(rpm_repo.FABRIC_REPO_ID, "lab", served["repo_url"]))
    assert not (root["tray02"] / fabric_services.DRIVER_SOURCE).exists()
    assert (root["tray01"] / fabric_services.DRIVER_SOURCE).is_file()
    assert not (root["tray01"] / rpm_repo.DRIVER_REPO).exists()
    assert (root["tray02"] / rpm_repo.DRIVER_KEY).read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK")
    assert ran == [("tray02", "rpm", ["--import", "/etc/pki/rpm-gpg/RPM-GPG-KEY-fabricops-lab"]),
                   ("tray02", "dnf", ["-q", "-y"]),
                   ("tray01", "apt-get", ["update", "-qq"])]


def test_no_driver_source_for_an_rpm_hgx_host(tmp_path, monkeypatch):
    """The rpm topology's gpu02 is an HGX server (no NVLink domain): its fabric manager role brings its
    own source, the lab writes none."""
    from fabricops_lab import hosts, paths, topology

    served = _served(tmp_path, monkeypatch)
    lab = {"topology": topology.resolve("rpm")}
    for h in lab["topology"]["hosts"]:
        (paths.host_dir(h["name"]) / "root" / "etc").mkdir(parents=True)
    monkeypatch.setattr(hosts, "host_exec", lambda *a, **kw: pytest.fail("no host command"))
    assert rpm_repo.driver_trays(lab) == []
    assert rpm_repo.install_driver_source(lab, served) == []
    assert not (paths.host_dir("gpu02") / "root" / rpm_repo.DRIVER_REPO).exists()


def test_a_failed_driver_source_step_names_the_tray(tmp_path, monkeypatch):
    from fabricops.errors import FabricopsError
    from fabricops_lab import hosts, paths, topology

    served = _served(tmp_path, monkeypatch)
    lab = {"topology": topology.resolve("gb200-rpm")}
    (paths.host_dir("tray02") / "root" / "etc").mkdir(parents=True)
    monkeypatch.setattr(hosts, "host_exec",
                        lambda name, argv, **kw: subprocess.CompletedProcess(argv, 1, "", "error: bad key"))
    want = r"tray02: rpm --import /etc/pki/rpm-gpg/\S+ failed: error: bad key"
    with pytest.raises(FabricopsError, match=want):
        rpm_repo.install_driver_source(lab, served)


# --- built for real (rpm, createrepo-c) ------------------------------------------------------------

@pytest.fixture(scope="module")
def built_repo(tmp_path_factory):
    if not all(TOOLS.values()):
        pytest.skip("needs rpm and createrepo-c (scripts/setup.sh --rpm)")
    top = tmp_path_factory.mktemp("rpmrepo")
    home = top / "gnupg"
    started = time.monotonic()
    repo = rpm_repo.build_fabric_repo(top / "repo", "http://127.0.0.1:1/", home=home)
    return repo, home, time.monotonic() - started


@NEEDS_TOOLS
def test_the_built_repository_is_signed_indexed_and_requires_nothing(built_repo, tmp_path):
    repo, home, seconds = built_repo
    out = repo.parent
    rpms = sorted((out / "Packages").glob("*.rpm"))
    assert [p.name for p in rpms] == sorted(r.filename for r in rpm_repo.fabric_rpms())
    dbpath = tmp_path / "rpmdb"
    rpm = ["rpm", "--dbpath", str(dbpath)]
    subprocess.run([*rpm, "--initdb"], check=True)
    unsigned = subprocess.run([*rpm, "-K", str(rpms[0])], capture_output=True, text=True)
    assert unsigned.returncode != 0  # the key is not imported: NOKEY is a failure
    subprocess.run([*rpm, "--import", str(out / rpm_repo.KEY_FILE)], check=True)
    for p in rpms:
        proc = subprocess.run([*rpm, "-K", str(p)], capture_output=True, text=True)
        assert proc.returncode == 0 and "signatures OK" in proc.stdout, proc.stdout + proc.stderr
        requires = subprocess.run(["rpm", "-qpR", str(p)], capture_output=True, text=True).stdout.split("\n")
        assert all(r.startswith("rpmlib(") for r in requires if r), requires
    repomd = out / "repodata/repomd.xml"
    assert "primary" in repomd.read_text()
    verify = subprocess.run(["gpg", "--homedir", str(ofed_repo._short(home)), "--verify", f"{repomd}.asc",
                             str(repomd)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
    assert seconds < 60


# --- the chroot: the controller's setup module and dnf on an overlay of the layer ----------------------

def _layer() -> tuple[Path, Path] | None:
    sha = image.recipe_sha()
    layer = image.variant_dir("rpm", sha) / "layer"
    base = image.rootfs(sha)
    built = (image.variant_dir("rpm", sha) / "variant.json", image.image_dir(sha) / "image.json")
    if all(f.exists() for f in built):
        return layer, base
    return None


@contextlib.contextmanager
def _overlay(tmp: Path):
    found = _layer()
    assert found
    layer, base = found
    upper, work, mnt = tmp / "upper", tmp / "work", tmp / "mnt"
    for d in (upper, work, mnt):
        d.mkdir(parents=True)
    subprocess.run(["mount", "-t", "overlay", "fo-rpm-test", "-o",
                    f"lowerdir={layer}:{base},upperdir={upper},workdir={work}", str(mnt)], check=True)
    mounts = [mnt]
    try:
        subprocess.run(["mount", "-t", "proc", "proc", str(mnt / "proc")], check=True)
        mounts.append(mnt / "proc")
        yield mnt, mounts
    finally:
        _end_processes_in(mnt)
        for m in reversed(mounts):
            subprocess.run(["umount", str(m)], check=False)


def _end_processes_in(root: Path) -> None:
    """End what the test's chroot commands left running there, by pid: dnf's repo_gpgcheck starts a
    gpg-agent for each repository's keyring (/var/cache/dnf/<repo>/pubring) that outlives dnf."""
    def inside() -> list[int]:
        pids = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(proc / "root") == str(root):
                        pids.append(int(proc.name))
        return pids

    for pid in inside():
        with contextlib.suppress(OSError):
            os.kill(pid, 15)
    deadline = time.monotonic() + 10
    while inside() and time.monotonic() < deadline:
        time.sleep(0.05)


def _chroot(mnt: Path, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["chroot", str(mnt), *cmd], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C", "HOME": "/root"})


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("chroot") is None, reason="needs root (mount, chroot)")
@pytest.mark.skipif(_layer() is None, reason="the rpm variant's layer is not built: "
                    "python -c 'from fabricops_lab import image; image.ensure_variant(\"rpm\")'")
@NEEDS_TOOLS
def test_in_the_layer_ansible_says_rocky_and_dnf_installs_signed_refuses_tampered(built_repo, tmp_path):
    import ansible

    repo, _, _ = built_repo
    good = tmp_path / "srv/good"
    shutil.copytree(repo.parent, good)
    # tampered: the same package re-signed with another key, in a repository that checks packages only
    bad = tmp_path / "srv/bad"
    (bad / "Packages").mkdir(parents=True)
    fm = next(r for r in rpm_repo.fabric_rpms()
              if r.name == "nvidia-fabric-manager" and r.version == fabric_services.FM_VERSIONS[-1])
    shutil.copy(good / "Packages" / fm.filename, bad / "Packages")
    subprocess.run(["rpmsign", "--delsign", str(bad / "Packages" / fm.filename)], check=True,
                   capture_output=True)
    rpm_repo.sign([bad / "Packages" / fm.filename], home=tmp_path / "other-gnupg")
    subprocess.run(["createrepo_c", "--quiet", str(bad)], check=True)
    shutil.copy(good / rpm_repo.KEY_FILE, bad)
    # unsigned: the signature removed
    unsigned = tmp_path / "srv/unsigned"
    (unsigned / "Packages").mkdir(parents=True)
    shutil.copy(good / "Packages" / fm.filename, unsigned / "Packages")
    subprocess.run(["rpmsign", "--delsign", str(unsigned / "Packages" / fm.filename)], check=True,
                   capture_output=True)
    subprocess.run(["createrepo_c", "--quiet", str(unsigned)], check=True)
    shutil.copy(good / rpm_repo.KEY_FILE, unsigned)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(
        tmp_path / "srv")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with _overlay(tmp_path / "ov") as (mnt, mounts):
            lib = mnt / "tmp/alib/ansible"
            lib.mkdir(parents=True)
            subprocess.run(["mount", "--bind", "-o", "ro", str(Path(ansible.__file__).parent), str(lib)],
                           check=True)
            mounts.append(lib)
            (mnt / "tmp/args.json").write_text(json.dumps(
                {"ANSIBLE_MODULE_ARGS": {"gather_subset": ["!all", "!min", "distribution", "pkg_mgr"]}}))
            proc = subprocess.run(["chroot", str(mnt), "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                                   "PYTHONPATH=/tmp/alib", "python3", "-m", "ansible.modules.setup",
                                   "/tmp/args.json"], capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, proc.stderr
            facts = json.loads(proc.stdout)["ansible_facts"]
            assert {k: facts[f"ansible_{k}"] for k in ("distribution", "distribution_major_version",
                                                      "distribution_version", "os_family", "pkg_mgr")} == {
                "distribution": "Rocky", "distribution_major_version": "9", "distribution_version": "9.4",
                "os_family": "RedHat", "pkg_mgr": "dnf"}

            assert _chroot(mnt, "rpm", "-qa").stdout == ""  # the rpmdb holds no base system
            (mnt / "etc/yum.repos.d/good.repo").write_text(
                rpm_repo.repo_file(rpm_repo.FABRIC_REPO_ID, "lab", f"{url}/good"))
            # rpm fetches a URL with curl, which the image has not: the served key, as a file
            shutil.copy(good / rpm_repo.KEY_FILE, mnt / "tmp")
            imported = _chroot(mnt, "rpm", "--import", f"/tmp/{rpm_repo.KEY_FILE}")
            assert imported.returncode == 0, imported.stderr
            name = f"nvidia-fabric-manager-{fm.version}"
            inst = _chroot(mnt, "dnf", "-y", "--setopt=install_weak_deps=False", "install", name)
            assert inst.returncode == 0, inst.stdout + inst.stderr
            q = _chroot(mnt, "rpm", "-q", "nvidia-fabric-manager")
            assert q.stdout.strip() == fm.nevra
            assert (mnt / "usr/lib/systemd/system/nvidia-fabricmanager.service").exists()
            (mnt / "etc/yum.repos.d/good.repo").unlink()
            for which in ("bad", "unsigned"):
                (mnt / f"etc/yum.repos.d/{which}.repo").write_text(
                    rpm_repo.repo_file(which, which, f"{url}/{which}", repo_gpgcheck=False))
                refused = _chroot(mnt, "dnf", "-y", "--disablerepo=*", f"--enablerepo={which}", "reinstall",
                                  name)
                out = refused.stdout + refused.stderr
                assert refused.returncode != 0, out
                assert ("not signed" in out) if which == "unsigned" else ("GPG" in out or "key" in out), out
                (mnt / f"etc/yum.repos.d/{which}.repo").unlink()
            assert _chroot(mnt, "rpm", "-q", "nvidia-fabric-manager").stdout.strip() == fm.nevra
    finally:
        server.shutdown()
