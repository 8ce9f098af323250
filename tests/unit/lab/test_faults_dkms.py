"""kernel-upgrade, dkms-missing and secure-boot faults (SPEC-20 C): what each runs in the host or
writes, its refusals, and a clean `fault clear`. The fault's in-host commands run against an
EMUL_ROOT tree here, so the undo is checked on the real emulated dkms and kernels."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess

import pytest

from fabricops import cli
from fabricops_lab import doca_repo, faults, hardware, paths, topology
from fabricops_lab.emul import dkms, kernels, mokutil

K = "6.1.0-18-amd64"
OFED = "24.10-1.1.4.0"
VER = doca_repo.dkms_version(OFED)
M = "mlnx-ofed-kernel"


@pytest.fixture
def lab(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("FABRICOPS_LAB_DIR", str(state))
    monkeypatch.setattr(paths, "STATE_DIR", state)
    topo = topology.load()
    lab = {"name": topo["name"], "topology": topo,
           "hosts": {h["name"]: {"mgmt_ip": h["mgmt_ip"]} for h in topo["hosts"]}, "switches": {}}
    paths.save_lab(lab)
    host = topo["hosts"][0]["name"]
    hw = hardware.hardware_json(topo, topo["hosts"][0], kernel=K)
    (paths.host_dir(host) / "hw").mkdir(parents=True)
    (paths.host_dir(host) / "hw" / "hardware.json").write_text(json.dumps(hw))
    root = paths.host_dir(host) / "root"  # the host's root as the controller sees it
    (root / "var/lib").mkdir(parents=True)
    (root / "var/lib/emulated-hw").symlink_to(paths.host_dir(host) / "hw")  # nspawn's --bind
    monkeypatch.setenv("EMUL_ROOT", str(root))
    monkeypatch.setenv("EMUL_KERNEL", K)
    monkeypatch.setenv("EMUL_ARCH", "x86_64")
    kernels.install(root, K)
    conf = root / f"usr/src/{M}-{VER}/dkms.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(doca_repo.dkms_conf(OFED))
    calls: list[list[str]] = []

    def host_exec(name, argv, check=True):
        """Run the fault's in-host command on the EMUL_ROOT tree (dkms and kernels.py only)."""
        calls.append(list(argv))
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            if argv[0] == "dkms":
                rc = dkms.main(argv[1:])
            elif argv[:2] == ["python3", "-c"] and "kernels" in argv[2]:
                rc = kernels.main(argv[3:])
            else:
                rc = 0
        return subprocess.CompletedProcess(argv, rc, stdout=out.getvalue(), stderr="")

    monkeypatch.setattr(faults, "_host_exec", host_exec)
    monkeypatch.setattr(faults, "_resync", lambda name: None)
    return host, root, calls


def run(*argv: str) -> int:
    return cli.main(["lab", "fault", *argv])


def dkms_quiet(*argv: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return dkms.main(list(argv))


def test_kernel_upgrade_installs_a_newer_kernel_and_clear_removes_it(lab):
    host, root, _ = lab
    dkms_quiet("install", "-m", M, "-v", VER)
    assert run(host, "kernel-upgrade") == 0
    new = "6.1.0-19-amd64"
    assert (root / f"boot/vmlinuz-{new}").is_file() and dkms.headers_present(new)
    assert not dkms.is_built(M, VER, new, "x86_64")  # not built for it: that is the fault
    assert dkms.installed_kernels() == [K, new]
    dkms_quiet("autoinstall", "-k", new)  # what the role would do; clear must leave nothing of it
    assert dkms.is_installed(M, VER, new, "x86_64")
    assert run("clear", host) == 0
    assert not (root / f"boot/vmlinuz-{new}").exists() and not (root / f"lib/modules/{new}").exists()
    assert dkms.status_lines() == [f"{M}/{VER}, {K}, x86_64: installed"]


def test_kernel_upgrade_without_headers_and_a_given_version(lab):
    host, root, _ = lab
    assert run(host, "kernel-upgrade", "6.1.0-25-amd64", "--no-headers") == 0
    assert (root / "boot/vmlinuz-6.1.0-25-amd64").is_file() and not dkms.headers_present("6.1.0-25-amd64")
    assert run("clear") == 0
    assert not (root / "boot/vmlinuz-6.1.0-25-amd64").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["kernel-upgrade", "6.1.0-17-amd64"], "is not newer than the running kernel 6.1.0-18-amd64"),
    (["kernel-upgrade", "6.1.0-19-amd64;reboot"], "is not a kernel release"),
    (["kernel-upgrade", "1", "2"], "kernel-upgrade takes [VERSION] [--no-headers]"),
    (["dkms-missing"], "has no DKMS module installed for its running kernel 6.1.0-18-amd64"),
    (["dkms-missing", "x"], "dkms-missing takes no arguments"),
    (["secure-boot", "now"], "secure-boot takes [--enrolled]"),
    (["secure-boot", "--enrolled"], "has no DKMS signing key /var/lib/dkms/mok.pub yet"),
])
def test_refusals_change_nothing(lab, args, message, capsys):
    host, root, _ = lab
    before = sorted(str(p) for p in root.rglob("*"))
    assert run(host, *args) == 2
    assert message in capsys.readouterr().err
    assert sorted(str(p) for p in root.rglob("*")) == before
    assert faults.active() == []


def test_dkms_missing_unbuilds_for_the_running_kernel_and_clear_reinstalls(lab):
    host, _, calls = lab
    dkms_quiet("install", "-m", M, "-v", VER)
    assert run(host, "dkms-missing") == 0
    assert ["dkms", "unbuild", "-m", M, "-v", VER, "-k", K] in calls
    assert dkms.status_lines() == [f"{M}/{VER}: added"]  # still added: `dkms autoinstall` fixes it
    missing = f"modprobe: FATAL: Module mlx5_core not found in directory /lib/modules/{K}"
    assert dkms.refusal("mlx5_core") == missing
    assert run("clear", host) == 0
    assert dkms.status_lines() == [f"{M}/{VER}, {K}, x86_64: installed"] and dkms.refusal("mlx5_core") is None


def test_secure_boot_not_enrolled_then_enrolled_and_clear_restores_the_state_file(lab):
    host, _, _ = lab
    dkms_quiet("install", "-m", M, "-v", VER)
    state = paths.host_dir(host) / "hw" / "secureboot.json"
    assert run(host, "secure-boot") == 0
    assert mokutil.secure_boot_on() and "Key was rejected by service" in dkms.refusal("mlx5_core")
    assert run("clear", host) == 0
    assert not state.exists() and dkms.refusal("mlx5_core") is None
    state.write_text(json.dumps({"efi": True, "enabled": False, "enrolled": ["ab" * 20]}, indent=1))
    before = state.read_bytes()
    assert run(host, "secure-boot", "--enrolled") == 0
    assert mokutil.secure_boot_on() and dkms.refusal("mlx5_core") is None
    assert "ab" * 20 in mokutil.load()["enrolled"]  # what was enrolled stays enrolled
    assert run("clear") == 0
    assert state.read_bytes() == before


@pytest.mark.parametrize(("running", "newer"), [
    ("6.1.0-18-amd64", "6.1.0-19-amd64"),          # Debian: the ABI number
    ("6.18.44-fc-v1098", "6.18.45-fc-v1098"),      # a controller kernel the lab hosts share
    ("6.8.0-1015-aws", "6.8.0-1016-aws"),
    ("6.10.3", "6.10.4"),
])
def test_kernel_upgrade_derives_a_newer_kernel_from_any_running_release(running, newer):
    assert faults._next_kernel(running) == newer
    assert faults._kernel_key(newer) > faults._kernel_key(running)
