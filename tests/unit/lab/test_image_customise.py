"""The lab image's customisation resolves every path inside the image, never on the build machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fabricops.errors import FabricopsError
from fabricops_lab import image

RECIPE = {"mask": ["console-getty.service", "getty@.service"]}


def _debootstrapped(tmp_path: Path) -> Path:
    """A tree shaped as debootstrap leaves bookworm: merged /usr, absolute enablement links."""
    root = tmp_path / "rootfs"
    (root / "usr/lib/systemd/system").mkdir(parents=True)
    (root / "usr/lib/systemd/system/ssh.service").write_text("[Service]\nExecStart=/usr/sbin/sshd -D\n")
    (root / "lib").symlink_to("usr/lib")  # relative, as in a merged-/usr Debian
    for d in ("etc/ssh", "etc/apt/sources.list.d", "etc/systemd/system", "var/lib/dbus", "root"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "etc/ssh/ssh_host_ed25519_key").write_text("secret")
    (root / "etc/apt/sources.list.d/debian.sources").write_text("Types: deb\n")
    return root


def _customise(root: Path) -> None:
    # chroot apt-get clean is best effort (check=False); nothing else may run on the build machine
    image.customise(root, RECIPE)


def test_an_existing_enablement_link_that_dangles_on_the_build_machine_is_kept(tmp_path):
    """debootstrap enables ssh.service with a link to /lib/systemd/system/ssh.service. Judged on the
    build machine that link dangles wherever openssh-server is not installed there; the old code
    then tried to create it again and crashed with FileExistsError."""
    root = _debootstrapped(tmp_path)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    (wants / "ssh.service").symlink_to("/lib/systemd/system/ssh.service")
    _customise(root)
    assert os.readlink(wants / "ssh.service") == "/lib/systemd/system/ssh.service"


def test_a_stale_enablement_link_is_replaced_not_followed(tmp_path):
    root = _debootstrapped(tmp_path)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    (wants / "ssh.service").symlink_to("/nonexistent-on-any-machine/ssh.service")
    _customise(root)
    assert os.readlink(wants / "ssh.service") == "/lib/systemd/system/ssh.service"


def test_a_missing_enablement_link_is_created(tmp_path):
    root = _debootstrapped(tmp_path)
    _customise(root)
    link = root / "etc/systemd/system/multi-user.target.wants/ssh.service"
    assert os.readlink(link) == "/lib/systemd/system/ssh.service"


def test_files_behind_absolute_links_are_replaced_inside_the_image(tmp_path):
    """etc/hosts or etc/resolv.conf as links to absolute paths must not write the build machine's
    files: the link is replaced by a file inside the image."""
    root = _debootstrapped(tmp_path)
    outside = tmp_path / "build-machine-hosts"
    outside.write_text("do not touch\n")
    (root / "etc/hosts").symlink_to(outside)
    (root / "etc/resolv.conf").symlink_to("/run/systemd/resolve/stub-resolv.conf")
    _customise(root)
    assert outside.read_text() == "do not touch\n"
    assert not (root / "etc/hosts").is_symlink()
    assert "localhost" in (root / "etc/hosts").read_text()
    assert "no nameserver" in (root / "etc/resolv.conf").read_text()


def test_masks_replace_what_is_there_and_secrets_and_sources_go(tmp_path):
    root = _debootstrapped(tmp_path)
    (root / "etc/systemd/system/getty@.service").symlink_to("/lib/systemd/system/getty@.service")
    _customise(root)
    for unit in RECIPE["mask"]:
        assert os.readlink(root / "etc/systemd/system" / unit) == "/dev/null"
    assert not list((root / "etc/ssh").glob("ssh_host_*"))
    assert not list((root / "etc/apt/sources.list.d").iterdir())
    assert "PermitRootLogin prohibit-password" in (
        root / "etc/ssh/sshd_config.d/fabricops-lab.conf"
    ).read_text()


def test_an_image_without_sshd_is_refused_in_words(tmp_path):
    root = _debootstrapped(tmp_path)
    (root / "usr/lib/systemd/system/ssh.service").unlink()
    with pytest.raises(FabricopsError, match="openssh-server did not install"):
        _customise(root)


def test_the_cache_key_follows_the_build_code(tmp_path, monkeypatch):
    """Changing how the image is customised must rebuild it: the key covers this module's source."""
    recipe = tmp_path / "recipe.yml"
    recipe.write_text("suite: bookworm\n")
    before = image.recipe_sha(recipe)
    code = tmp_path / "image.py"
    code.write_text(Path(image.__file__).read_text() + "\n# a change to customise\n")
    monkeypatch.setattr(image, "__file__", str(code))
    assert image.recipe_sha(recipe) != before
