#!/usr/bin/python
# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Run several read-only commands and read several files on a host in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_read
short_description: Batch a role's reads of a host into one module run
description:
  - Runs each command in O(commands) (an argument list, no shell), reads each file in O(files) and
    looks at each path in O(stats), in one module run, and returns every result by name. A role
    that needs several reads to decide that nothing changes pays one module start and one round
    trip instead of one per read.
  - A command's result has the fields of a registered M(ansible.builtin.command) result (V(rc),
    V(stdout), V(stderr), V(stdout_lines), V(cmd)); a file's those of M(ansible.builtin.slurp)
    (V(content) base64-encoded) plus V(exists). The caller decides what an exit status means, as with
    C(failed_when=false); a command that exits non-zero, or that is not installed, does not fail the
    task.
  - Changes nothing; runs the same in check mode.
version_added: 0.1.0
author: fabricops developers (@fabricops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  commands:
    description:
      - Name -> argument list of a read-only command, run without a shell, in the order given.
      - A program that is not installed gives V(rc) the errno of the failed start (2 when it is not
        found, as M(ansible.builtin.command) reports it) and the error in V(stderr).
    type: dict
    default: {}
  files:
    description:
      - Name -> absolute path of a file to read. A missing file gives V(exists=false) and an empty
        V(content); a file that exists but cannot be read fails the task (no verdict on a read that
        did not happen).
    type: dict
    default: {}
  stats:
    description:
      - Name -> absolute path to look at without reading it, as M(ansible.builtin.stat) does by
        default (a final symlink is not followed); the result is V(stat) with V(exists) and, when it
        exists, V(isreg), V(isdir), V(islnk), V(mode), V(uid), V(gid), V(pw_name), V(gr_name) and
        V(size) (V(pw_name) and V(gr_name) are empty for an id with no name); V(path) always.
    type: dict
    default: {}
  must_succeed:
    description:
      - Names in O(commands) whose output the caller cannot do without (no verdict on a read that did
        not happen). When one of them exits non-zero or cannot start, the task fails naming the
        command, its exit status and the last line it printed (the failed command's result is
        returned as V(command), the other reads are not).
    type: list
    elements: str
    default: []
  max_bytes:
    description: The most bytes read of one file; a longer file fails the task.
    type: int
    default: 1048576
attributes:
  action:
    support: none
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: The module only reads, so it runs the same in check mode.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Give it only commands that read. It does not know what a command does, and it runs them in
    check mode too.
"""

EXAMPLES = r"""
- name: Read the installed version, the boot id and a marker left by an earlier run (one read)
  fabricops.fabric.host_read:
    commands:
      ofed_info: [ofed_info, -s]
    files:
      boot_id: /proc/sys/kernel/random/boot_id
      marker: /var/lib/fabricops/restart-pending
  register: probe

- name: Use them as a registered command and a slurped file
  ansible.builtin.debug:
    msg: >-
      {{ probe.commands.ofed_info.stdout if probe.commands.ofed_info.rc == 0 else 'not installed' }},
      boot {{ probe.files.boot_id.content | b64decode | trim }}
"""

RETURN = r"""
commands:
  description: Name -> the command's result (V(cmd), V(rc), V(stdout), V(stderr), V(stdout_lines)).
  returned: always
  type: dict
  sample: {"ofed_info": {"cmd": ["ofed_info", "-s"], "rc": 0, "stdout": "MLNX_OFED_LINUX-24.10-1.1.4.0:",
           "stderr": "", "stdout_lines": ["MLNX_OFED_LINUX-24.10-1.1.4.0:"]}}
files:
  description: Name -> V(path), V(exists), V(content) (base64, empty when missing) and V(encoding).
  returned: always
  type: dict
  sample: {"boot_id": {"path": "/proc/sys/kernel/random/boot_id", "exists": true,
           "content": "NDJhZi4uLgo=", "encoding": "base64"}}
stats:
  description: Name -> V(stat) as M(ansible.builtin.stat) registers it (the fields listed under O(stats)).
  returned: always
  type: dict
  sample: {"ifup": {"stat": {"exists": true, "path": "/sbin/ifup", "isreg": true, "isdir": false,
           "islnk": false, "mode": "0755", "uid": 0, "gid": 0, "pw_name": "root", "gr_name": "root",
           "size": 39624}}}
"""

import base64
import errno
import grp
import os
import pwd
import stat as st

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native


def run(module, argv):
    try:
        rc, out, err = module.run_command(argv, handle_exceptions=False)
    except OSError as exc:  # not installed, not executable
        rc, out, err = exc.errno or 1, "", to_native(exc)
    out = out.rstrip("\r\n")
    err = err.rstrip("\r\n")
    return {"cmd": argv, "rc": rc, "stdout": out, "stderr": err, "stdout_lines": out.splitlines()}


def read(module, name, path, max_bytes):
    result = {"path": path, "exists": False, "content": "", "encoding": "base64"}
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return result
        module.fail_json(msg=f"host_read: cannot read {name} ({path}): {to_native(exc)}", path=path)
    if len(data) > max_bytes:
        module.fail_json(msg=f"host_read: {name} ({path}) is larger than max_bytes ({max_bytes})", path=path)
    result.update(exists=True, content=base64.b64encode(data).decode("ascii"))
    return result


def look(module, name, path):
    try:
        info = os.lstat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return {"stat": {"exists": False, "path": path}}
        module.fail_json(msg=f"host_read: cannot look at {name} ({path}): {to_native(exc)}", path=path)
    return {"stat": {"exists": True, "path": path, "isreg": st.S_ISREG(info.st_mode),
                     "isdir": st.S_ISDIR(info.st_mode), "islnk": st.S_ISLNK(info.st_mode),
                     "mode": f"{st.S_IMODE(info.st_mode):04o}",
                     "uid": info.st_uid, "gid": info.st_gid, "pw_name": _name(pwd.getpwuid, info.st_uid),
                     "gr_name": _name(grp.getgrgid, info.st_gid), "size": info.st_size}}


def _name(lookup, num):
    try:
        return lookup(num)[0]
    except KeyError:
        return ""


def main():
    module = AnsibleModule(
        argument_spec={
            "commands": {"type": "dict", "default": {}},
            "files": {"type": "dict", "default": {}},
            "stats": {"type": "dict", "default": {}},
            "must_succeed": {"type": "list", "elements": "str", "default": []},
            "max_bytes": {"type": "int", "default": 1048576},
        },
        supports_check_mode=True,
    )
    bad = [f"commands.{name}" for name, argv in module.params["commands"].items()
           if not isinstance(argv, list) or not argv or not all(isinstance(a, (str, int)) for a in argv)]
    bad += [f"{kind}.{name}" for kind in ("files", "stats") for name, path in module.params[kind].items()
            if not isinstance(path, str) or not os.path.isabs(path)]
    bad += [f"must_succeed.{name}" for name in module.params["must_succeed"]
            if name not in module.params["commands"]]
    if bad:
        module.fail_json(msg="host_read: each command is a non-empty list of arguments, each file an "
                             "absolute path and each must_succeed name one of the commands; fix "
                             f"{', '.join(sorted(bad))}")
    commands = {name: run(module, [str(a) for a in argv]) for name, argv in module.params["commands"].items()}
    files = {name: read(module, name, path, module.params["max_bytes"])
             for name, path in module.params["files"].items()}
    stats = {name: look(module, name, path) for name, path in module.params["stats"].items()}
    for name in module.params["must_succeed"]:
        res = commands[name]
        if res["rc"] != 0:
            said = (res["stderr"] or res["stdout"]).strip().splitlines()
            module.fail_json(msg=f"host_read: {' '.join(res['cmd'])} failed (rc {res['rc']}): "
                                 f"{said[-1] if said else 'no output'}",
                             command=res)
    module.exit_json(changed=False, commands=commands, files=files, stats=stats)


if __name__ == "__main__":
    main()
