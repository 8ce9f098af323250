# SPDX-License-Identifier: Apache-2.0
"""fabricops.fabric.host_read run as Ansible runs a module (a process with its arguments as JSON).

A role swaps several command, stat and slurp tasks for one host_read, so each result must read the
same as what it replaces: a command's fields as ansible.builtin.command registers them (run here on
the same argument lists), a file's content as slurp's base64. A read that did not happen (a file
that cannot be read, one over max_bytes) fails instead of looking like an empty file.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MODULE = REPO / "plugins/modules/host_read.py"


def run_module(target, args, tmp_path, check=False):
    """``target``: a module file, or ``-m NAME`` for a module of ansible-core (its directory would
    shadow the standard library if run as a file)."""
    argfile = tmp_path / "args.json"
    if check:
        args = dict(args, _ansible_check_mode=True)
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, *([str(target)] if isinstance(target, Path) else target),
                           str(argfile)], capture_output=True, text=True, env=dict(os.environ))
    return json.loads(proc.stdout)


def command_module(argv, tmp_path):
    return run_module(["-m", "ansible.modules.command"], {"argv": argv}, tmp_path)


@pytest.mark.parametrize("argv", [
    ["printf", "MLNX_OFED_LINUX-24.10-1.1.4.0:\n\n"],  # trailing newlines stripped, as command does
    ["sh", "-c", "echo out; echo err >&2; exit 3"],    # non-zero exit: a result, not a failure
    ["no-such-tool-fabricops"],                        # not installed: rc 2, like command
])
def test_a_command_reads_as_ansible_builtin_command_registers_it(argv, tmp_path):
    got = run_module(MODULE, {"commands": {"c": argv}}, tmp_path)
    assert not got.get("failed") and got["changed"] is False
    want = command_module(argv, tmp_path)
    want["stdout_lines"] = want["stdout"].splitlines()  # what the controller adds to a registered result
    for key in ("rc", "stdout", "stderr", "stdout_lines"):
        if key == "stderr" and argv[0].startswith("no-such"):
            assert "No such file" in got["commands"]["c"][key]
            continue
        assert got["commands"]["c"][key] == want[key], key
    assert got["commands"]["c"]["cmd"] == argv


def test_files_read_as_slurp_and_a_missing_file_is_empty(tmp_path):
    data = b"6c1f\tnew packages need the driver reloaded\n\x00\xff"
    (tmp_path / "marker").write_bytes(data)
    got = run_module(MODULE, {"files": {"m": str(tmp_path / "marker"), "gone": str(tmp_path / "no/such")}},
                     tmp_path)
    assert base64.b64decode(got["files"]["m"]["content"]) == data and got["files"]["m"]["exists"] is True
    assert got["files"]["gone"] == {"path": str(tmp_path / "no/such"), "exists": False, "content": "",
                                    "encoding": "base64"}


def test_procfs_is_read_though_its_size_is_zero(tmp_path):
    got = run_module(MODULE, {"files": {"boot": "/proc/sys/kernel/random/boot_id"}}, tmp_path)
    assert base64.b64decode(got["files"]["boot"]["content"]).decode().strip() == \
        Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_stats_read_as_ansible_builtin_stat_registers_them(tmp_path):
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    (tmp_path / "tool").chmod(0o750)
    (tmp_path / "link").symlink_to(tmp_path / "tool")
    got = run_module(MODULE, {"stats": {n: str(tmp_path / n) for n in ("tool", "link", "none")}}, tmp_path)
    for name in ("tool", "link"):
        want = run_module(["-m", "ansible.modules.stat"], {"path": str(tmp_path / name)}, tmp_path)["stat"]
        assert got["stats"][name]["stat"] == {k: want[k] for k in got["stats"][name]["stat"]}, name
    assert got["stats"]["link"]["stat"]["islnk"] and got["stats"]["tool"]["stat"]["mode"] == "0750"
    assert got["stats"]["none"] == {"stat": {"exists": False, "path": str(tmp_path / "none")}}
    # the path is ansible.builtin.stat's too: what fabricops.fabric.templates matches an earlier read by
    assert got["stats"]["tool"]["stat"]["path"] == str(tmp_path / "tool")


@pytest.mark.parametrize("make,why", [
    (lambda d: d.mkdir(), "cannot read"),                          # a directory: no verdict from it
    (lambda d: d.write_bytes(b"x" * 2049), "larger than max_bytes"),
])
def test_a_read_that_did_not_happen_fails(make, why, tmp_path):
    target = tmp_path / "target"
    make(target)
    got = run_module(MODULE, {"files": {"t": str(target)}, "max_bytes": 2048}, tmp_path)
    assert got.get("failed") and why in got["msg"] and "t (" in got["msg"]


@pytest.mark.parametrize("args,named", [
    ({"commands": {"empty": []}}, "commands.empty"),
    ({"commands": {"shell": "ofed_info -s"}}, "commands.shell"),  # a string would need a shell
    ({"files": {"rel": "etc/passwd"}}, "files.rel"),
    ({"stats": {"rel": "sbin/ifup"}}, "stats.rel"),
    ({"must_succeed": ["smi"]}, "must_succeed.smi"),  # not one of the commands
])
def test_bad_input_is_refused_before_anything_runs(args, named, tmp_path):
    args = dict(args, commands=dict(args.get("commands", {}), probe=["touch", str(tmp_path / "ran")]))
    got = run_module(MODULE, args, tmp_path)
    assert got.get("failed") and named in got["msg"]
    assert not (tmp_path / "ran").exists()


def test_check_mode_reads_the_same(tmp_path):
    (tmp_path / "f").write_text("x\n")
    args = {"commands": {"c": ["echo", "hi"]}, "files": {"f": str(tmp_path / "f")}}
    real, check = run_module(MODULE, args, tmp_path), run_module(MODULE, args, tmp_path, check=True)
    assert not check.get("skipped")
    assert check["commands"] == real["commands"] and check["files"] == real["files"]


def test_a_command_that_must_succeed_fails_the_task_naming_it(tmp_path):
    args = {"commands": {"smi": ["sh", "-c", "echo 'NVIDIA-SMI has failed' >&2; exit 9"],
                         "other": ["echo", "fine"]}, "must_succeed": ["smi"]}
    got = run_module(MODULE, args, tmp_path)
    assert got.get("failed")
    assert got["msg"] == ("host_read: sh -c echo 'NVIDIA-SMI has failed' >&2; exit 9 failed (rc 9): "
                          "NVIDIA-SMI has failed")
    assert got["command"]["rc"] == 9 and "commands" not in got  # the failed read, not every result
    missing = run_module(MODULE, {"commands": {"smi": ["no-such-tool-fabricops"]}, "must_succeed": ["smi"]},
                         tmp_path)
    assert missing.get("failed") and "no-such-tool-fabricops failed (rc 2)" in missing["msg"]
    # the others may fail: a result, as without must_succeed
    ok = run_module(MODULE, {"commands": {"smi": ["echo", "q"], "other": ["false"]}, "must_succeed": ["smi"]},
                    tmp_path)
    assert not ok.get("failed") and ok["commands"]["other"]["rc"] == 1
