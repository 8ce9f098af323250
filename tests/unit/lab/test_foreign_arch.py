"""arm64 lab hosts (issue 37 point 5): a topology host's ``arch``, the qemu-user binfmt_misc entry the
lab registers, the arm64 image's own cache key and debootstrap line, and the multiarch paths the lab
writes into an arm64 root. Nothing here registers anything with the kernel or builds an image: the
binfmt_misc directory is a temporary one."""

from __future__ import annotations

import copy
import os
import struct
from pathlib import Path

import pytest
import yaml

from fabricops.errors import FabricopsError
from fabricops_lab import foreign_arch, hosts, image, paths, topology

# QEMU's scripts/qemu-binfmt-conf.sh, aarch64_magic / aarch64_mask, as the script writes them
QEMU_AARCH64_MAGIC = r"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
QEMU_AARCH64_MASK = r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"


def _raw_default() -> dict:
    return yaml.safe_load(topology.DEFAULT_TOPOLOGY.read_text())


# --- the topology -----------------------------------------------------------------------------


def test_hosts_are_amd64_unless_the_topology_says_arm64():
    assert {h["arch"] for h in topology.load()["hosts"]} == {"amd64"}
    raw = _raw_default()
    raw["hosts"][1]["arch"] = "arm64"
    archs = [h["arch"] for h in topology.normalise(raw)["hosts"]]
    assert archs == ["amd64", "arm64", "amd64", "amd64"]


@pytest.mark.parametrize("bad", ["aarch64", "x86_64", "riscv64", "ARM64"])
def test_an_unknown_arch_is_refused_with_the_choices(bad):
    raw = _raw_default()
    raw["hosts"][2]["arch"] = bad
    with pytest.raises(topology.TopologyError) as err:
        topology.normalise(raw)
    assert "hosts[2].arch" in str(err.value)
    assert f"{bad!r} is not host architecture (one of amd64, arm64)" in str(err.value)


def test_the_arm64_topology_has_one_arm64_and_one_amd64_host():
    topo = topology.resolve("arm64")
    archs = {h["name"]: h["arch"] for h in topo["hosts"]}
    assert archs == {"gh01": "arm64", "gpu01": "amd64"}
    gh = next(h for h in topo["hosts"] if h["name"] == "gh01")
    assert gh["gpus"]["model"] == "NVIDIA GH200 480GB" and gh["gpus"]["count"] == 1
    cabled = {(c["host"], c["netdev"]) for c in topo["cabling"]}
    ports = {(h["name"], p["netdev"]) for h in topo["hosts"] for hca in h["hcas"] for p in hca["ports"]}
    assert ports == cabled  # every port on the switch, nothing dangling


# --- the binfmt_misc entry --------------------------------------------------------------------


def _unescape(s: str) -> bytes:
    return s.encode().decode("unicode_escape").encode("latin-1")


def _elf_header(machine: int, e_type: int = 3, bits: int = 2) -> bytes:
    """The first 20 bytes of an ELF file: e_ident (16), e_type, e_machine (little-endian)."""
    ident = b"\x7fELF" + bytes([bits, 1, 1, 0]) + bytes(8)
    return ident + struct.pack("<HH", e_type, machine)


def test_the_register_line_is_qemus_aarch64_entry_with_the_fix_binary_flag():
    line = foreign_arch.register_line("arm64")
    assert line == (
        f":qemu-aarch64:M::{QEMU_AARCH64_MAGIC}:{QEMU_AARCH64_MASK}:/usr/bin/qemu-aarch64-static:F"
    )
    _, name, kind, offset, magic, mask, interpreter, flags = line.split(":")
    assert (name, kind, offset, flags) == ("qemu-aarch64", "M", "", "F")
    assert (magic, mask) == (QEMU_AARCH64_MAGIC, QEMU_AARCH64_MASK)
    assert interpreter == "/usr/bin/qemu-aarch64-static"


@pytest.mark.parametrize(
    ("header", "matches"),
    [
        (_elf_header(0xB7, e_type=2), True),  # aarch64 executable
        (_elf_header(0xB7, e_type=3), True),  # aarch64 PIE / shared object (what Debian builds)
        (_elf_header(0x3E, e_type=3), False),  # x86_64: the controller's own binaries stay native
        (_elf_header(0x28, e_type=2, bits=1), False),  # 32-bit arm
        (_elf_header(0xB7, e_type=1), False),  # a relocatable .o is not run
    ],
)
def test_the_magic_and_mask_match_aarch64_elf_files_and_nothing_else(header, matches):
    _, _, _, _, magic, mask, _, _ = foreign_arch.register_line("arm64").split(":")
    magic_b, mask_b = _unescape(magic), _unescape(mask)
    assert len(magic_b) == len(mask_b) == 20
    masked = bytes(h & m for h, m in zip(header, mask_b, strict=True))
    assert (masked == magic_b) is matches


def test_only_arm64_has_a_qemu_entry():
    with pytest.raises(FabricopsError, match="no qemu-user binfmt entry for 'amd64'"):
        foreign_arch.register_line("amd64")


@pytest.fixture
def binfmt(tmp_path, monkeypatch):
    """A stand-in /proc/sys/fs/binfmt_misc (mounted: it has a register file), qemu installed."""
    d = tmp_path / "binfmt_misc"
    d.mkdir()
    (d / "register").write_text("")
    monkeypatch.setattr(foreign_arch, "_installed", lambda pkg: pkg == "qemu-user-static")
    monkeypatch.setattr(foreign_arch.os, "access", lambda p, mode: str(p).endswith("qemu-aarch64-static"))
    monkeypatch.setattr(foreign_arch.shutil, "which", lambda p: p)
    monkeypatch.setattr(foreign_arch, "host_arch", lambda: "amd64")
    return d


def test_an_arm64_host_registers_qemu_aarch64(binfmt):
    assert foreign_arch.ensure_binfmt("arm64", binfmt) == "/usr/bin/qemu-aarch64-static"
    assert (binfmt / "register").read_text() == foreign_arch.register_line("arm64")


def test_amd64_hosts_register_nothing(binfmt):
    assert foreign_arch.ensure_binfmt("amd64", binfmt) is None
    assert (binfmt / "register").read_text() == ""


def test_an_enabled_entry_with_fix_binary_is_kept(binfmt, monkeypatch):
    """Debian's own entry (systemd-binfmt or update-binfmts on a systemd machine) has F: it stays."""
    (binfmt / "qemu-aarch64").write_text(
        "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POCF\noffset 0\n"
    )
    monkeypatch.setattr(foreign_arch.os, "access", lambda p, mode: True)
    assert foreign_arch.ensure_binfmt("arm64", binfmt) == "/usr/libexec/qemu-binfmt/aarch64-binfmt-P"
    assert (binfmt / "register").read_text() == ""
    assert (binfmt / "qemu-aarch64").read_text().startswith("enabled")


def test_a_disabled_entry_with_fix_binary_is_enabled(binfmt):
    (binfmt / "qemu-aarch64").write_text(
        "disabled\ninterpreter /usr/bin/qemu-aarch64-static\nflags: F\noffset 0\n"
    )
    foreign_arch.ensure_binfmt("arm64", binfmt)
    assert (binfmt / "qemu-aarch64").read_text() == "1"  # what binfmt_misc takes as "enable"
    assert (binfmt / "register").read_text() == ""


def test_an_entry_without_fix_binary_is_replaced(binfmt):
    """Without F the kernel looks the interpreter up in the container's root, which has none."""
    (binfmt / "qemu-aarch64").write_text(
        "enabled\ninterpreter /usr/bin/qemu-aarch64-static\nflags: \noffset 0\n"
    )
    foreign_arch.ensure_binfmt("arm64", binfmt)
    assert (binfmt / "qemu-aarch64").read_text() == "-1"  # removed...
    assert (binfmt / "register").read_text() == foreign_arch.register_line("arm64")  # ...and registered


def test_without_qemu_user_static_the_error_names_the_package_and_the_setup_option(binfmt, monkeypatch):
    monkeypatch.setattr(foreign_arch, "_installed", lambda pkg: False)
    with pytest.raises(FabricopsError) as err:
        foreign_arch.ensure_binfmt("arm64", binfmt)
    assert "qemu-user-static" in str(err.value) and "scripts/setup.sh --arm64" in str(err.value)
    assert (binfmt / "register").read_text() == ""


def test_binfmt_misc_is_mounted_when_it_is_not(binfmt, monkeypatch):
    (binfmt / "register").unlink()
    calls = []

    def mount(argv, **kw):
        calls.append(argv)
        (binfmt / "register").write_text("")
        return type("P", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(foreign_arch.subprocess, "run", mount)
    foreign_arch.ensure_binfmt("arm64", binfmt)
    assert calls == [["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt)]]
    assert (binfmt / "register").read_text() == foreign_arch.register_line("arm64")


def test_a_kernel_without_binfmt_misc_is_reported(binfmt, monkeypatch):
    (binfmt / "register").unlink()
    failed = type("P", (), {"returncode": 32, "stderr": "unknown filesystem"})()
    monkeypatch.setattr(foreign_arch.subprocess, "run", lambda argv, **kw: failed)
    with pytest.raises(FabricopsError, match=r"needs binfmt_misc.*unknown filesystem.*amd64 hosts only"):
        foreign_arch.ensure_binfmt("arm64", binfmt)


# --- the image --------------------------------------------------------------------------------


def test_the_arm64_image_has_its_own_cache_key_and_amd64_keeps_its_own():
    amd64, arm64 = image.recipe_sha(), image.recipe_sha(arch="arm64")
    assert image.recipe_sha(arch="amd64") == amd64
    assert arm64 != amd64 and len(arm64) == len(amd64) == 16
    assert image.image_dir(arch="arm64") != image.image_dir()
    assert image._lock_file("arm64") != image._lock_file("amd64") == paths.IMAGE_CACHE / ".lock"
    with pytest.raises(FabricopsError, match="no architecture 'i386'"):
        image.recipe_sha(arch="i386")


def test_the_arm64_key_follows_the_recipe_too(tmp_path):
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(image.RECIPE.read_text())
    before = image.recipe_sha(recipe, arch="arm64")
    recipe.write_text(image.RECIPE.read_text() + "\n# changed\n")
    assert image.recipe_sha(recipe, arch="arm64") != before


def test_debootstrap_gets_the_arch_only_for_a_foreign_image():
    recipe = image.load_recipe()
    amd64 = image.debootstrap_command(recipe, Path("/r"), "http://mirror")
    arm64 = image.debootstrap_command(recipe, Path("/r"), "http://mirror", "arm64")
    assert not any(a.startswith("--arch") for a in amd64)  # the default build's line is unchanged
    assert arm64 == [amd64[0], "--arch=arm64", *amd64[1:]]
    assert amd64[-3:] == [recipe["suite"], "/r", "http://mirror"]
    assert "--foreign" not in arm64  # one stage: qemu is registered with F before debootstrap runs


def test_an_arm64_image_registers_qemu_before_it_is_looked_up(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(paths, "IMAGE_CACHE", tmp_path)
    monkeypatch.setattr(image.foreign_arch, "ensure_binfmt", lambda arch: seen.append(arch))
    (tmp_path / image.recipe_sha(arch="arm64")).mkdir()
    (tmp_path / image.recipe_sha(arch="arm64") / "image.json").write_text("{}")
    assert image.ensure_image(arch="arm64") == tmp_path / image.recipe_sha(arch="arm64") / "rootfs"
    assert seen == ["arm64"]


# --- what the lab writes into an arm64 root ---------------------------------------------------


def test_nccl_goes_to_the_hosts_multiarch_directory():
    assert hosts.nccl_lib() == hosts.NCCL_LIB == "usr/lib/x86_64-linux-gnu/libnccl.so.2.23.4"
    assert hosts.nccl_lib("arm64") == "usr/lib/aarch64-linux-gnu/libnccl.so.2.23.4"


def test_install_nccl_on_an_arm64_root(tmp_path):
    hosts.install_nccl(tmp_path, "arm64")
    lib = tmp_path / "usr/lib/aarch64-linux-gnu"
    assert (lib / "libnccl.so.2.23.4").is_file()
    assert os.readlink(lib / "libnccl.so.2") == "libnccl.so.2.23.4"
    assert not (tmp_path / "usr/lib/x86_64-linux-gnu").exists()


def test_prepare_host_mounts_an_arm64_host_on_the_arm64_image(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    built = []

    def ensure_image(force=False, arch="amd64"):
        built.append(arch)
        return Path(f"/images/{arch}/rootfs")

    class Mounted(Exception):
        pass

    def mount_root(name, lower):
        raise Mounted(str(lower))

    monkeypatch.setattr(image, "ensure_image", ensure_image)
    monkeypatch.setattr(image, "ensure_variant",
                        lambda variant, force=False, arch="amd64": Path(f"/layers/{arch}/{variant}"))
    monkeypatch.setattr(hosts, "mount_root", mount_root)
    topo = topology.resolve("arm64")
    gh = next(h for h in topo["hosts"] if h["arch"] == "arm64")
    with pytest.raises(Mounted) as lower:
        hosts.prepare_host(topo, gh, Path("/images/amd64/rootfs"), "ssh-ed25519 AAAA test")
    assert str(lower.value) == "/images/arm64/rootfs" and built == ["arm64"]
    netplan = copy.deepcopy(gh)
    netplan["variant"] = "netplan"
    with pytest.raises(Mounted) as lower:
        hosts.prepare_host(topo, netplan, Path("/images/amd64/rootfs"), "ssh-ed25519 AAAA test")
    assert str(lower.value) == "/layers/arm64/netplan:/images/arm64/rootfs"
    amd = next(h for h in topo["hosts"] if h["arch"] == "amd64")
    with pytest.raises(Mounted) as lower:
        hosts.prepare_host(topo, amd, Path("/images/amd64/rootfs"), "ssh-ed25519 AAAA test")
    assert str(lower.value) == "/images/amd64/rootfs" and built == ["arm64", "arm64"]


def test_units_that_load_credentials_get_a_reset_drop_in_on_an_arm64_root(tmp_path):
    """Under qemu-user, systemd 252 fails these units at its CREDENTIALS step (seen on gh01)."""
    units = tmp_path / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    (tmp_path / "lib").symlink_to("usr/lib")
    (units / "systemd-tmpfiles-setup.service").write_text(
        "[Service]\nType=oneshot\nLoadCredential=tmpfiles.extra\nLoadCredential=login.motd\n"
    )
    (units / "ssh.service").write_text("[Service]\nExecStart=/usr/sbin/sshd -D\n")
    (units / "comment.service").write_text("[Service]\n# LoadCredential=x is only a comment here\n")
    assert hosts.qemu_user_dropins(tmp_path) == ["systemd-tmpfiles-setup.service"]
    dropin = tmp_path / "etc/systemd/system/systemd-tmpfiles-setup.service.d" / hosts.QEMU_DROPIN
    assert dropin.read_text().endswith("[Service]\nLoadCredential=\n")  # the empty value resets the list
    assert not (tmp_path / "etc/systemd/system/ssh.service.d").exists()
