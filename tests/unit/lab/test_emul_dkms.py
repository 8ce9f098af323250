"""Emulated dkms, mokutil and installed kernels, and what modprobe/modinfo/openibd make of a DKMS
stack (docs/lab-ofed.md, "DOCA-Host mirror, DKMS and Secure Boot"). Everything runs under EMUL_ROOT."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabricops.parsers import dkms as dkms_parser
from fabricops.parsers import mokutil as mok_parser
from fabricops_lab import doca_repo
from fabricops_lab.emul import dkms, kernels, mokutil, rdma, services

K = "6.1.0-18-amd64"
K2 = "6.1.0-21-amd64"
OFED = "24.10-1.1.4.0"
VER = doca_repo.dkms_version(OFED)
M = "mlnx-ofed-kernel"
LAB = Path(__file__).resolve().parents[3] / "lab" / "src" / "fabricops_lab"
DATA = LAB / "data" / "doca"


@pytest.fixture
def root(tmp_path, monkeypatch):
    r = tmp_path / "root"
    monkeypatch.setenv("EMUL_ROOT", str(r))
    monkeypatch.setenv("EMUL_KERNEL", K)
    monkeypatch.setenv("EMUL_ARCH", "x86_64")
    kernels.install(r, K)
    conf = r / f"usr/src/{M}-{VER}/dkms.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(doca_repo.dkms_conf(OFED))
    rel = r / "usr/share/emulated-ofed/release"
    rel.parent.mkdir(parents=True)
    rel.write_text(f"{doca_repo.ofed_info_release(OFED)}\n")
    (r / "var/lib/emulated-hw").mkdir(parents=True)
    return r


def run(capsys, func, *argv):
    rc = func(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_add_build_install_layout_signing_and_status(root, capsys):
    rc, out, _ = run(capsys, dkms.main, "add", "-m", M, "-v", VER)
    assert rc == 0 and out == f"Creating symlink /var/lib/dkms/{M}/{VER}/source -> /usr/src/{M}-{VER}\n"
    assert os.readlink(root / f"var/lib/dkms/{M}/{VER}/source") == f"/usr/src/{M}-{VER}"
    rc, out, _ = run(capsys, dkms.main, "status")
    assert dkms_parser.parse_status(out) == [{"module": M, "version": VER, "kernel": None, "arch": None,
                                             "state": "added", "warnings": []}]
    rc, out, _ = run(capsys, dkms.main, "build", "-m", M, "-v", VER, "-k", K)
    assert rc == 0
    assert "Certificate or key are missing, generating self signed certificate for MOK..." in out
    mlx5 = "drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko"
    assert f"Signing module /var/lib/dkms/{M}/{VER}/build/{mlx5}" in out
    assert (root / "var/lib/dkms/mok.key").is_file() and (root / "var/lib/dkms/mok.pub").is_file()
    assert (root / f"var/lib/dkms/{M}/{VER}/{K}/x86_64/module/mlx5_core.ko").is_file()
    rc, out, _ = run(capsys, dkms.main, "status", "-m", M)
    assert out == f"{M}/{VER}, {K}, x86_64: built\n"
    rc, out, _ = run(capsys, dkms.main, "install", f"{M}/{VER}", "-k", K)
    assert rc == 0 and f"   - Installing to /lib/modules/{K}/updates/dkms/" in out
    assert (root / f"lib/modules/{K}/updates/dkms/mlx5_core.ko").is_file()
    rc, out, _ = run(capsys, dkms.main, "status")
    (rec,) = dkms_parser.parse_status(out)
    assert (rec["state"], rec["kernel"], rec["warnings"]) == ("installed", K, [])
    # a second build without --force is skipped, as dkms 3.0.10 says
    rc, out, _ = run(capsys, dkms.main, "build", "-m", M, "-v", VER, "-k", K)
    assert rc == 0 and out.startswith(f"Module {M}/{VER} already built for kernel {K} (x86_64), skip.")
    # a key is generated once: the second build reuses it
    key = (root / "var/lib/dkms/mok.pub").read_bytes()
    run(capsys, dkms.main, "build", "-m", M, "-v", VER, "-k", K, "--force")
    assert (root / "var/lib/dkms/mok.pub").read_bytes() == key


def test_a_changed_installed_copy_shows_the_diff_warning(root, capsys):
    run(capsys, dkms.main, "install", "-m", M, "-v", VER)
    (root / f"lib/modules/{K}/updates/dkms/mlx5_ib.ko").write_text("tampered\n")
    _, out, _ = run(capsys, dkms.main, "status")
    warnings = dkms_parser.parse_status(out)[0]["warnings"]
    assert warnings == ["WARNING! Diff between built and installed module!"]


def test_build_without_headers_is_refused_with_dkms_3010_message_and_status(root, capsys):
    kernels.install(root, K2, headers=False)
    rc, _, err = run(capsys, dkms.main, "build", "-m", M, "-v", VER, "-k", K2)
    assert rc == 1
    assert err == (f"\nError! Your kernel headers for kernel {K2} cannot be found at "
                   f"/lib/modules/{K2}/build or /lib/modules/{K2}/source.\n"
                   f"Please install the linux-headers-{K2} package or use the "
                   "--kernelsourcedir option to tell DKMS where it's located.\n")
    assert not (root / f"var/lib/dkms/{M}/{VER}/{K2}").exists()


def test_install_onto_a_kernel_that_is_not_there(root, capsys):
    run(capsys, dkms.main, "add", "-m", M, "-v", VER)
    rc, _, err = run(capsys, dkms.main, "install", "-m", M, "-v", VER, "-k", "6.9.9-1-amd64")
    assert rc == 1 and "Your kernel headers for kernel 6.9.9-1-amd64 cannot be found" in err
    assert not (root / "lib/modules/6.9.9-1-amd64").exists()


def test_autoinstall_builds_for_a_new_kernel_and_fails_without_headers(root, capsys):
    run(capsys, dkms.main, "install", "-m", M, "-v", VER)
    kernels.install(root, K2)
    rc, _, _ = run(capsys, dkms.main, "autoinstall", "--kernelver", K2)
    assert rc == 0 and dkms.is_installed(M, VER, K2, "x86_64")
    k3 = "6.1.0-22-amd64"
    kernels.install(root, k3, headers=False)
    rc, _, err = run(capsys, dkms.main, "autoinstall", "-k", k3)
    assert rc == 11
    assert "Error! One or more modules failed to install during autoinstall." in err
    assert f"Your kernel headers for kernel {k3} cannot be found" in err


def test_unbuild_keeps_the_module_added_and_remove_all_deletes_it(root, capsys):
    run(capsys, dkms.main, "install", "-m", M, "-v", VER)
    rc, out, _ = run(capsys, dkms.main, "unbuild", "-m", M, "-v", VER, "-k", K)
    assert rc == 0 and "Before uninstall, this module version was ACTIVE on this kernel." in out
    assert not (root / f"lib/modules/{K}/updates/dkms/mlx5_core.ko").exists()
    _, out, _ = run(capsys, dkms.main, "status")
    assert out == f"{M}/{VER}: added\n"
    run(capsys, dkms.main, "install", "-m", M, "-v", VER)
    rc, out, _ = run(capsys, dkms.main, "remove", "-m", M, "-v", VER, "--all")
    assert rc == 0 and f"Deleting module {M}-{VER} completely from the DKMS tree." in out
    assert not (root / f"var/lib/dkms/{M}").exists()
    rc, _, err = run(capsys, dkms.main, "remove", "-m", M, "-v", VER, "--all")
    assert rc == 3 and f"The module/version combo: {M}-{VER} is not located in the DKMS tree." in err


def test_add_refusals(root, capsys):
    rc, _, err = run(capsys, dkms.main, "add", "-m", "nosuch", "-v", "1.0")
    assert rc == 2 and "Directory: /usr/src/nosuch-1.0 does not exist." in err
    run(capsys, dkms.main, "add", "-m", M, "-v", VER)
    rc, _, err = run(capsys, dkms.main, "add", "-m", M, "-v", VER)
    assert rc == 3 and "You cannot add the same module/version combo more than once." in err


# --- modprobe / modinfo / openibd on a DKMS stack ---------------------------------------------

def test_modprobe_and_modinfo_without_the_module_for_the_running_kernel(root, capsys):
    rc, _, err = run(capsys, services.modprobe, "mlx5_core")
    assert rc == 1 and err == f"modprobe: FATAL: Module mlx5_core not found in directory /lib/modules/{K}\n"
    rc, _, err = run(capsys, services.modinfo, "mlx5_core")
    assert rc == 1 and err == "modinfo: ERROR: Module mlx5_core not found.\n"
    assert "mlx5_core" not in services.loaded_modules()
    rc, out, err = run(capsys, rdma.openibd, "start")
    assert rc == 1 and "[FAILED]" in out and "not found in directory" in err


def test_modules_built_for_the_running_kernel_load_and_show_the_dkms_signer(root, capsys):
    run(capsys, dkms.main, "install", "-m", M, "-v", VER)
    assert "mlx5_core" in services.loaded_modules()
    rc, out, _ = run(capsys, services.modinfo, "-F", "signer", "mlx5_core")
    assert rc == 0 and out == "DKMS module signing key\n"
    rc, out, _ = run(capsys, services.modinfo, "mlx5_core")
    assert f"filename:       /lib/modules/{K}/updates/dkms/mlx5_core.ko" in out
    assert f"sig_key:        {dkms.mok_fingerprint()}" in out
    # built for another kernel only: not for this one
    run(capsys, dkms.main, "uninstall", "-m", M, "-v", VER, "-k", K)
    rc, _, err = run(capsys, services.modprobe, "ib_core")
    assert rc == 1 and "Module ib_core not found" in err


def test_prebuilt_mlnx_ofed_modules_keep_the_old_rules(root, capsys):
    (root / "usr/share/emulated-ofed/kernel").write_text(f"{K}\n")
    (root / "usr/share/emulated-ofed/release").write_text("MLNX_OFED_LINUX-24.10-1.1.4.0\n")
    rc, _, err = run(capsys, services.modprobe, "mlx5_core")
    assert rc == 0 and err == ""
    assert "mlx5_core" in services.loaded_modules()
    rc, _, err = run(capsys, services.modinfo, "mlx5_core")
    assert rc == 0 and err == ""


def test_secure_boot_rejects_until_the_dkms_key_is_enrolled_at_boot(root, capsys, tmp_path):
    run(capsys, dkms.main, "install", "-m", M, "-v", VER)
    st = mokutil.load()
    st["enabled"] = True
    mokutil.save(st)
    _, out, _ = run(capsys, mokutil.main, "--sb-state")
    assert mok_parser.parse_sb_state(out) is True
    rc, _, err = run(capsys, services.modprobe, "mlx5_core")
    assert rc == 1 and err == "modprobe: ERROR: could not insert 'mlx5_core': Key was rejected by service\n"
    assert "mlx5_core" not in services.loaded_modules()
    rc, out, _ = run(capsys, mokutil.main, "--test-key", "/var/lib/dkms/mok.pub")
    assert (rc, mok_parser.parse_test_key(out)) == (0, False)
    _, hashline, _ = run(capsys, mokutil.main, "--generate-hash=lab-password")
    (root / "root").mkdir(exist_ok=True)
    (root / "root/mok.hash").write_text(hashline)
    rc, out, _ = run(capsys, mokutil.main, "--import", "/var/lib/dkms/mok.pub", "--hash-file",
                     "/root/mok.hash")
    assert rc == 0 and out == ""
    rc, out, _ = run(capsys, mokutil.main, "--test-key", "/var/lib/dkms/mok.pub")
    assert (rc, mok_parser.parse_test_key(out)) == (1, True)  # queued counts, as mokutil checks MokNew
    _, out, _ = run(capsys, mokutil.main, "--list-new")
    assert out.startswith("[key 1]\nSHA1 Fingerprint: ")
    rc, _, err = run(capsys, services.modprobe, "mlx5_core")  # not until MokManager at boot
    assert rc == 1 and "Key was rejected by service" in err
    _, out, _ = run(capsys, mokutil.main, "--import", "/var/lib/dkms/mok.pub", "--root-pw")
    assert out == "SKIP: /var/lib/dkms/mok.pub is already in the enrollment request\n"
    assert mokutil.boot(root / mokutil.STATE) != []
    rc, _, err = run(capsys, services.modprobe, "mlx5_core")
    assert rc == 0 and err == ""
    _, out, _ = run(capsys, mokutil.main, "--import", "/var/lib/dkms/mok.pub", "--root-pw")
    assert out == "SKIP: /var/lib/dkms/mok.pub is already enrolled\n"


def test_mokutil_default_and_not_efi(root, capsys):
    rc, out, _ = run(capsys, mokutil.main, "--sb-state")
    assert (rc, out) == (0, "SecureBoot disabled\n")
    mokutil.save({"efi": False})
    rc, out, err = run(capsys, mokutil.main, "--sb-state")
    assert rc == 255 and err == "EFI variables are not supported on this system\n"
    assert mok_parser.parse_sb_state(err) is None
    mokutil.save({})
    rc, _, err = run(capsys, mokutil.main, "--test-key", "/nonexistent.der")
    assert rc == 255 and err == "Failed to open /nonexistent.der\n"


def test_ofed_info_prints_the_doca_form(root, capsys):
    _, out, _ = run(capsys, rdma.ofed_info, "-s")
    assert out == "OFED-internal-24.10-1.1.4.0:\n"
    _, out, _ = run(capsys, rdma.ofed_info, "-n")
    assert out == "24.10-1.1.4.0\n"


# --- Debian's common.postinst (the mlnx-ofed-kernel-dkms postinst) ------------------------------

def _dkms_on_path(tmp_path: Path) -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "dkms"
    # the emul package alone, as lab hosts have it in /usr/lib/emulated-hw (fast to start)
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -S -c 'import sys; "
                      f"sys.path.insert(0, \"{LAB}\"); "
                      "from emul import dkms; sys.exit(dkms.main(sys.argv[1:]))' \"$@\"\n")
    script.chmod(0o755)
    return dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")


def test_common_postinst_builds_running_and_newest_kernel_and_skips_one_without_headers(root, tmp_path):
    env = _dkms_on_path(tmp_path) | {"DKMS_TEST_ROOT": str(root)}
    kernels.install(root, K2, headers=False)
    proc = subprocess.run(["sh", str(DATA / "common.postinst"), M, VER], env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert (f"Loading new {M}-{VER} DKMS files...\nBuilding for {K} and {K2}\n"
            f"Building initial module for {K}\nDone.\n") in proc.stdout
    assert f"Module build for kernel {K2} was skipped since the\nkernel headers" in proc.stdout
    assert dkms.is_installed(M, VER, K, "x86_64") and not dkms.is_built(M, VER, K2, "x86_64")
    # the kernel hook, once headers arrive, builds for the new kernel
    kernels.install_headers(root, K2)
    proc = subprocess.run(["sh", "-c", f"dkms autoinstall --kernelver {K2}"], env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0 and dkms.is_installed(M, VER, K2, "x86_64")
