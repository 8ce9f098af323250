# SPDX-License-Identifier: Apache-2.0
"""fabricops.fabric.install_files run as Ansible runs a module (a process with its arguments as JSON).

The roles ship the host-side programs (roce_host's boot-time program, fabric_monitor's collector) with
it: every file that differs in one module run, instead of ansible.builtin.file per directory and
ansible.builtin.copy (a stat and a copy module run) per file. What it must keep from those: only what
differs is written, a mode or owner is corrected without rewriting, check mode changes nothing and says
what would change, a link is never written through, and a bad request changes nothing.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MODULE = REPO / "plugins/modules/install_files.py"


def run(args, tmp_path, check=False, diff=False):
    argfile = tmp_path / "args.json"
    args = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True)
    return json.loads(proc.stdout)


def payload(files: dict[str, bytes]) -> list[dict[str, str]]:
    return [{"path": p, "content": base64.b64encode(b).decode()} for p, b in files.items()]


FILES = {
    "fabricops/__init__.py": b"",
    "fabricops/hostside/__init__.py": b'"""host side"""\n',
    "fabricops/hostside/roce_boot.py": b"print('apply')\n",
}


def tree(root: Path) -> dict[str, tuple[str, int, bytes | None]]:
    out = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        kind = "d" if stat.S_ISDIR(info.st_mode) else "l" if stat.S_ISLNK(info.st_mode) else "f"
        out[path.relative_to(root).as_posix()] = (kind, stat.S_IMODE(info.st_mode),
                                                   path.read_bytes() if kind == "f" else None)
    return out


def test_writes_every_file_and_directory_once_then_nothing(tmp_path):
    root = tmp_path / "lib"
    got = run({"root": str(root), "files": payload(FILES)}, tmp_path)
    assert got["changed"] is True and not got.get("failed"), got
    assert got["written"] == [".", "fabricops", "fabricops/hostside", *sorted(FILES)]
    assert tree(root) == {
        "fabricops": ("d", 0o755, None),
        "fabricops/__init__.py": ("f", 0o644, b""),
        "fabricops/hostside": ("d", 0o755, None),
        "fabricops/hostside/__init__.py": ("f", 0o644, FILES["fabricops/hostside/__init__.py"]),
        "fabricops/hostside/roce_boot.py": ("f", 0o644, FILES["fabricops/hostside/roce_boot.py"]),
    }
    assert stat.S_IMODE(root.stat().st_mode) == 0o755 and root.stat().st_uid == os.getuid()
    again = run({"root": str(root), "files": payload(FILES)}, tmp_path)
    assert again["changed"] is False and again["written"] == [] and again["fixed"] == []


def test_only_what_differs_is_touched(tmp_path):
    root = tmp_path / "lib"
    run({"root": str(root), "files": payload(FILES)}, tmp_path)
    boot = root / "fabricops/hostside/roce_boot.py"
    init = root / "fabricops/hostside/__init__.py"
    init.chmod(0o600)
    (root / "fabricops/hostside").chmod(0o700)
    inode = init.stat().st_ino
    new = dict(FILES, **{"fabricops/hostside/roce_boot.py": b"print('apply v2')\n"})
    got = run({"root": str(root), "files": payload(new)}, tmp_path)
    assert got["written"] == ["fabricops/hostside/roce_boot.py"]
    assert sorted(got["fixed"]) == ["fabricops/hostside", "fabricops/hostside/__init__.py"]
    assert boot.read_bytes() == b"print('apply v2')\n" and stat.S_IMODE(boot.stat().st_mode) == 0o644
    assert init.stat().st_ino == inode and stat.S_IMODE(init.stat().st_mode) == 0o644  # not rewritten
    assert not [p for p in boot.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_check_mode_changes_nothing_and_diff_shows_the_text(tmp_path):
    root = tmp_path / "lib"
    run({"root": str(root), "files": payload(FILES)}, tmp_path)
    before = tree(root)
    new = dict(FILES, **{"fabricops/hostside/roce_boot.py": b"print('apply v2')\n",
                         "fabricops/x.py": b"x = 1\n"})
    got = run({"root": str(root), "files": payload(new)}, tmp_path, check=True, diff=True)
    assert got["changed"] is True and got["written"] == ["fabricops/hostside/roce_boot.py", "fabricops/x.py"]
    assert tree(root) == before
    diffs = {d["after_header"].rsplit("/", 1)[-1]: d for d in got["diff"]}
    assert diffs["roce_boot.py"]["before"] == "print('apply')\n"
    assert diffs["roce_boot.py"]["after"] == "print('apply v2')\n"
    assert diffs["x.py"]["before_header"] == "(absent)" and diffs["x.py"]["after"] == "x = 1\n"


def test_a_link_where_a_file_belongs_is_replaced_never_written_through(tmp_path):
    root = tmp_path / "lib"
    run({"root": str(root), "files": payload(FILES)}, tmp_path)
    victim = tmp_path / "etc-shadow"
    victim.write_bytes(b"root:secret\n")
    boot = root / "fabricops/hostside/roce_boot.py"
    boot.unlink()
    boot.symlink_to(victim)
    got = run({"root": str(root), "files": payload(FILES)}, tmp_path)
    assert got["written"] == ["fabricops/hostside/roce_boot.py"]
    assert not boot.is_symlink() and boot.read_bytes() == FILES["fabricops/hostside/roce_boot.py"]
    assert victim.read_bytes() == b"root:secret\n"


@pytest.mark.parametrize("planted", ["link", "file"])
def test_a_directory_position_taken_by_something_else_fails_with_nothing_written(tmp_path, planted):
    root = tmp_path / "lib"
    (root / "fabricops").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    spot = root / "fabricops/hostside"
    if planted == "link":
        spot.symlink_to(elsewhere)
    else:
        spot.write_text("not a directory\n")
    got = run({"root": str(root), "files": payload(FILES)}, tmp_path)
    assert got.get("failed") and f"{spot} is not a directory" in got["msg"]
    assert "nothing was written" in got["msg"]
    assert not (root / "fabricops/__init__.py").exists() and list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("path", ["../escape.py", "/etc/passwd", "fabricops/../../x.py", "a//b.py", "a b.py"])
def test_a_path_outside_the_root_or_not_plain_is_refused_with_nothing_written(tmp_path, path):
    root = tmp_path / "lib"
    got = run({"root": str(root), "files": payload({"fabricops/ok.py": b"", path: b"x"})}, tmp_path)
    assert got.get("failed") and "must be a relative path of plain names" in got["msg"], got
    assert not root.exists() and not (tmp_path / "escape.py").exists()


def test_bad_content_and_bad_modes_are_refused(tmp_path):
    root = tmp_path / "lib"
    got = run({"root": str(root), "files": [{"path": "a.py", "content": "not base64!"}]}, tmp_path)
    assert got.get("failed") and "is not base64" in got["msg"]
    got = run({"root": str(root), "files": payload({"a.py": b""}), "file_mode": "0648"}, tmp_path)
    assert got.get("failed") and "octal mode" in got["msg"]
    assert not root.exists()


def test_the_payload_filter_reads_the_bytes_on_the_controller(tmp_path):
    from ansible.errors import AnsibleFilterError
    from ansible_collections.fabricops.fabric.plugins.filter.package import package_payload

    src = tmp_path / "m.py"
    src.write_bytes(b"\x00binary\xff\n")
    assert package_payload([{"path": "fabricops/m.py", "src": str(src)}]) == [
        {"path": "fabricops/m.py", "content": base64.b64encode(b"\x00binary\xff\n").decode()}]
    with pytest.raises(AnsibleFilterError, match="cannot read"):
        package_payload([{"path": "x.py", "src": str(tmp_path / "missing.py")}])
    with pytest.raises(AnsibleFilterError, match="the list package_files or package_stale gives"):
        package_payload("fabricops/m.py")
