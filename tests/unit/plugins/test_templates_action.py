# SPDX-License-Identifier: Apache-2.0
"""fabricops.fabric.templates through a real ansible-playbook run (local connection), against
ansible.builtin.template on the same templates.

The plugin skips a file only when what is on the host is exactly what ansible.builtin.template
would leave, so: its first run writes the bytes the template module writes (ansible_managed,
trim_blocks, trailing newlines, per-file vars); a run with nothing to change changes nothing and
hands nothing to the template action; a file that differs in content, mode, owner or kind is
written (or, in check mode, reported with a diff naming the file and left alone); bad input
fails in one sentence before anything is read or written.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name

TEMPLATES = {
    # ansible_managed, a block (trim_blocks), a trailing blank line the template module keeps
    "a.conf.j2": "# {{ ansible_managed }}\n{% if flag %}\nFLAG={{ flag }}\n{% endif %}\nNAME={{ name }}\n\n",
    # a per-file variable (what loop_var gave a looped template task); no final newline
    "b.conf.j2": "iface {{ iface.name }} mtu {{ iface.mtu }}",
}


def _play(files, before=(), read=None):
    args = {"files": files} if read is None else {"files": files, "read": read}
    return [{
        "hosts": "local",
        "gather_facts": False,
        "vars": {"flag": "on", "name": "fab"},
        "tasks": [
            *before,
            {"name": "plugin", "fabricops.fabric.templates": args, "register": "out"},
            {"name": "show", "ansible.builtin.debug": {"msg": "RESULT {{ out | to_json }}"}},
        ],
    }]


@pytest.fixture()
def play(tmp_path):
    search = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    exe = shutil.which("ansible-playbook", path=search)
    if exe is None:
        pytest.fail("ansible-playbook is not installed next to this Python; run scripts/setup.sh")
    (tmp_path / "templates").mkdir()
    for name, text in TEMPLATES.items():
        (tmp_path / "templates" / name).write_text(text)
    (tmp_path / "inventory.json").write_text(json.dumps({"all": {"hosts": {"local": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}

    def run(files, *extra, ok=True, before=(), read=None):
        (tmp_path / "play.yml").write_text(json.dumps(_play(files, before, read)))
        argv = [exe, "-i", str(tmp_path / "inventory.json"), str(tmp_path / "play.yml"), *extra]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
                              check=False)
        if not ok:
            assert proc.returncode != 0, proc.stdout[-2000:]
            return proc.stdout
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        line = next(ln for ln in proc.stdout.splitlines() if '"msg": "RESULT ' in ln)
        return json.loads(json.loads(line.split('"msg": ', 1)[1]).removeprefix("RESULT "))

    def builtin(src, dest, mode, extra_vars=None):
        """What ansible.builtin.template writes for the same template and variables."""
        task = {"name": "builtin", "ansible.builtin.template": {"src": src, "dest": str(dest), "mode": mode}}
        if extra_vars:
            task["vars"] = extra_vars
        book = _play([])
        book[0]["tasks"] = [task]
        (tmp_path / "builtin.yml").write_text(json.dumps(book))
        subprocess.run([exe, "-i", str(tmp_path / "inventory.json"), str(tmp_path / "builtin.yml")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=True)
        return Path(dest).read_bytes()

    run.builtin = builtin
    run.dir = tmp_path
    return run


def _files(d):
    return [
        {"src": "a.conf.j2", "dest": str(d / "a.conf"), "mode": "0644", "owner": USER, "group": GROUP},
        {"src": "b.conf.j2", "dest": str(d / "b.conf"), "mode": "0600", "owner": USER, "group": GROUP,
         "vars": {"iface": {"name": "ib0", "mtu": 2044}}},
    ]


def test_writes_what_the_template_module_writes_then_skips_it(play):
    d = play.dir / "out"
    d.mkdir()
    first = play(_files(d))
    assert first["changed"] is True and [r["checked"] for r in first["results"]] == ["template", "template"]
    want_a = play.builtin("a.conf.j2", play.dir / "ref-a", "0644")
    want_b = play.builtin("b.conf.j2", play.dir / "ref-b", "0600", {"iface": {"name": "ib0", "mtu": 2044}})
    assert (d / "a.conf").read_bytes() == want_a
    assert want_a.endswith(b"NAME=fab\n\n") and b"FLAG=on\n" in want_a
    assert (d / "b.conf").read_bytes() == want_b == b"iface ib0 mtu 2044"
    assert oct((d / "b.conf").stat().st_mode & 0o777) == "0o600"
    again = play(_files(d))
    assert again["changed"] is False
    assert [(r["item"], r["checked"], r["changed"]) for r in again["results"]] == [
        (str(d / "a.conf"), "same", False), (str(d / "b.conf"), "same", False)]


def _probe(paths, when=True):
    names = {f"p{i}": str(p) for i, p in enumerate(paths)}
    return {"name": "probe", "fabricops.fabric.host_read": {"files": names, "stats": names},
            "register": "probe", "when": when}


def test_an_earlier_host_read_is_the_read_of_what_it_read(play):
    d = play.dir / "out"
    d.mkdir()
    play(_files(d))
    # written after the probe: a task given the probe compares with the probe and does not read again
    spoil = {"name": "spoil",
             "ansible.builtin.copy": {"content": "iface ib0 mtu 65520", "dest": str(d / "b.conf")}}
    got = play(_files(d), before=[_probe([d / "a.conf", d / "b.conf"]), spoil], read="{{ probe }}")
    assert [r["checked"] for r in got["results"]] == ["same", "same"] and got["changed"] is False
    # what the probe did not read, a skipped probe, or none: the task reads the host itself
    for before in ([_probe([d / "a.conf"]), spoil], [_probe([d / "a.conf", d / "b.conf"], when=False), spoil],
                   [spoil]):
        got = play(_files(d), before=before, read="{{ probe | default({}) }}")
        assert [(r["checked"], r["changed"]) for r in got["results"]] == [("same", False), ("template", True)]
        assert (d / "b.conf").read_bytes() == b"iface ib0 mtu 2044"
    # a probe of a file that was missing then: written (the read said missing, the template creates it)
    (d / "a.conf").unlink()
    got = play(_files(d), before=[_probe([d / "a.conf", d / "b.conf"])], read="{{ probe }}")
    assert [(r["checked"], r["changed"]) for r in got["results"]] == [("template", True), ("same", False)]
    assert (d / "a.conf").exists()


def test_only_the_file_that_differs_is_written_and_check_mode_only_reports_it(play):
    d = play.dir / "out"
    d.mkdir()
    play(_files(d))
    (d / "b.conf").write_text("iface ib0 mtu 65520")
    before = (d / "b.conf").read_bytes()
    checked = play(_files(d), "--check", "--diff")
    assert checked["changed"] is True and (d / "b.conf").read_bytes() == before
    a, b = checked["results"]
    assert a["checked"] == "same" and b["checked"] == "template" and b["changed"] is True
    assert b["diff"][0]["before"] == "iface ib0 mtu 65520" and b["diff"][0]["after"] == "iface ib0 mtu 2044"
    assert b["diff"][0]["after_header"] == str(d / "b.conf")  # the file, not the rendered temporary
    fixed = play(_files(d))
    assert [r["changed"] for r in fixed["results"]] == [False, True]
    assert (d / "b.conf").read_bytes() == b"iface ib0 mtu 2044"


@pytest.mark.parametrize("spoil", ["mode", "symlink", "missing", "template"])
def test_mode_kind_absence_and_a_changed_template_are_each_caught(play, spoil):
    d = play.dir / "out"
    d.mkdir()
    play(_files(d))
    if spoil == "mode":
        (d / "a.conf").chmod(0o666)
    elif spoil == "symlink":
        (d / "real").write_bytes((d / "a.conf").read_bytes())
        (d / "a.conf").unlink()
        (d / "a.conf").symlink_to(d / "real")
    elif spoil == "missing":
        (d / "a.conf").unlink()
    else:
        (play.dir / "templates" / "a.conf.j2").write_text(TEMPLATES["a.conf.j2"] + "EXTRA=1\n")
    result = play(_files(d), "--check")
    assert result["results"][0]["checked"] == "template" and result["results"][0]["changed"] is True
    assert result["results"][1]["checked"] == "same"
    # only an absent path is new (what a check-mode run uses to leave a not-yet-written unit alone)
    assert [r["existed"] for r in result["results"]] == [spoil != "missing", True]


@pytest.mark.skipif(os.getuid() != 0, reason="changing a file's owner needs root")
def test_an_owner_that_differs_is_caught(play):
    d = play.dir / "out"
    d.mkdir()
    play(_files(d))
    os.chown(d / "a.conf", 65534, -1)
    result = play(_files(d), "--check")
    assert [r["checked"] for r in result["results"]] == ["template", "same"]


@pytest.mark.parametrize("bad,why", [
    ({"mode": "644x"}, "files[0].mode must be octal"),
    ({"dest": "relative/a.conf"}, "files[0].dest must be an absolute file path"),
    ({"owner": "root; rm -rf /"}, "files[0].owner"),
    ({"vars": {"not a name": 1}}, "files[0].vars must map variable names"),
    ({"srcc": "a.conf.j2"}, "unknown option"),
])
def test_bad_input_fails_in_one_sentence_and_writes_nothing(play, bad, why):
    d = play.dir / "out"
    d.mkdir()
    files = _files(d)
    files[0].update(bad)
    out = play(files, ok=False)
    assert why in out and "templates: " in out
    assert list(d.iterdir()) == []


def test_the_same_destination_twice_is_refused(play):
    d = play.dir / "out"
    d.mkdir()
    files = _files(d)
    files[1]["dest"] = files[0]["dest"]
    out = play(files, ok=False)
    assert "is written twice in one task" in out and list(d.iterdir()) == []
