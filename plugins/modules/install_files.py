#!/usr/bin/python
# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Write a set of files, and the directories they sit in, under one directory in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: install_files
short_description: Install a set of files under one directory in one module run
description:
  - Writes each file of O(files) under O(root) with mode O(file_mode), and makes O(root), every directory
    between it and a file, and each of O(dirs) a directory with mode O(dir_mode), all owned by O(owner)
    and O(group). A role that ships a program of several files (the host-side modules of the fabricops
    package) pays one module start and one round trip instead of two per file and one per directory.
  - Only what differs is written. A file is replaced (written to a temporary file in its directory, then
    renamed over it) when its bytes differ, or when it is not a regular file; a file whose bytes are right
    but whose mode or owner is not gets only its mode or owner changed. A symbolic link where a file
    should be is replaced by the file, never written through.
  - A path that is not relative, that climbs out of O(root), or a directory position taken by anything
    but a directory fails the task before anything is written.
version_added: 0.1.0
author: fabricops developers (@fabricops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  root:
    description: The absolute directory every path is relative to.
    type: path
    required: true
  files:
    description:
      - The files to install, V(path) relative to O(root) and V(content) base64-encoded (the
        M(ansible.builtin.slurp) encoding; the P(fabricops.fabric.package_payload#filter) filter gives
        this list for files of the fabricops package).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file's path under O(root) (names of letters, digits, V(.), V(_) and V(-)).
        type: str
        required: true
      content:
        description: The file's bytes, base64-encoded.
        type: str
        required: true
  dirs:
    description: Directories under O(root) to make or correct even when no file of O(files) lies in them.
    type: list
    elements: str
    default: []
  file_mode:
    description: The mode of every file, in octal.
    type: str
    default: "0644"
  dir_mode:
    description: The mode of O(root) and every directory, in octal.
    type: str
    default: "0755"
  owner:
    description: The user that owns every file and directory.
    type: str
    default: root
  group:
    description: The group that owns every file and directory.
    type: str
    default: root
attributes:
  action:
    support: none
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: Reports what would be written and changes nothing.
  diff_mode:
    support: full
    details: One diff per file written (the old and new text of a UTF-8 file; a header for any other).
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Install the boot-time program's modules that differ (one module run)
  fabricops.fabric.install_files:
    root: /usr/local/lib/fabricops
    files: "{{ stale.files | fabricops.fabric.package_payload }}"
    dirs: "{{ stale.dirs }}"
"""

RETURN = r"""
written:
  description:
    - The paths under O(root) whose file was written or whose directory was made (or would be, in check
      mode); V(.) is O(root).
  returned: always
  type: list
  elements: str
  sample: ["fabricops/hostside/roce_boot.py"]
fixed:
  description:
    - The paths under O(root) (directories included, V(.) for O(root)) whose mode or owner was corrected.
  returned: always
  type: list
  elements: str
  sample: ["fabricops/hostside"]
"""

import base64
import binascii
import contextlib
import grp
import os
import pwd
import re
import stat as st
import tempfile

from ansible.module_utils.basic import AnsibleModule

_PART = re.compile(r"^[A-Za-z0-9_.-]+$")


def _relpath(module, path, what):
    parts = path.split("/") if isinstance(path, str) else []
    if not parts or any(not _PART.match(p) or p in (".", "..") for p in parts):
        module.fail_json(msg=f"install_files: {what} {path!r} must be a relative path of plain names "
                             "(letters, digits, '.', '_', '-'), without '..'.")
    return "/".join(parts)


def _mode(module, text, what):
    if not re.match(r"^0?[0-7]{3}$", str(text)):
        module.fail_json(msg=f"install_files: {what} {text!r} must be an octal mode such as 0644.")
    return int(str(text), 8)


def _ids(module, owner, group):
    try:
        uid = pwd.getpwnam(owner).pw_uid
    except KeyError:
        module.fail_json(msg=f"install_files: the user {owner!r} does not exist on the host.")
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        module.fail_json(msg=f"install_files: the group {group!r} does not exist on the host.")
    return uid, gid


def _read(path):
    """The bytes of the regular file at ``path`` (not through a link), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not st.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read()


def _text(data):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "str", "required": True},
                "content": {"type": "str", "required": True},
            }},
            "dirs": {"type": "list", "elements": "str", "default": []},
            "file_mode": {"type": "str", "default": "0644"},
            "dir_mode": {"type": "str", "default": "0755"},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
        },
        supports_check_mode=True,
    )
    p = module.params
    root = p["root"]
    if not os.path.isabs(root):
        module.fail_json(msg=f"install_files: root {root!r} must be an absolute path.")
    root = os.path.normpath(root)
    file_mode = _mode(module, p["file_mode"], "file_mode")
    dir_mode = _mode(module, p["dir_mode"], "dir_mode")
    uid, gid = _ids(module, p["owner"], p["group"])

    files = {}
    for entry in p["files"]:
        rel = _relpath(module, entry["path"], "files path")
        try:
            files[rel] = base64.b64decode(entry["content"], validate=True)
        except (binascii.Error, ValueError):
            module.fail_json(msg=f"install_files: the content of {rel} is not base64.")
    dirs = {"."}
    for rel in [_relpath(module, d, "dirs entry") for d in p["dirs"]] + list(files):
        parts = rel.split("/")
        stop = len(parts) if rel not in files else len(parts) - 1
        dirs.update("/".join(parts[:i]) for i in range(1, stop + 1))
    ordered = sorted(dirs, key=lambda d: (0 if d == "." else d.count("/") + 1, d))

    # everything is judged before anything is written: a directory position taken by something else
    # fails the task with nothing changed
    dir_plan = []
    for rel in ordered:
        full = root if rel == "." else os.path.join(root, rel)
        try:
            info = os.lstat(full)
        except FileNotFoundError:
            dir_plan.append((rel, full, None))
            continue
        if not st.S_ISDIR(info.st_mode):
            module.fail_json(msg=f"install_files: {full} is not a directory (a "
                                 f"{'symbolic link' if st.S_ISLNK(info.st_mode) else 'file'}); "
                                 "move it away, nothing was written.")
        dir_plan.append((rel, full, info))
    file_plan = []
    for rel in sorted(files):
        full = os.path.join(root, rel)
        try:
            info = os.lstat(full)
        except FileNotFoundError:
            info = None
        if info is not None and st.S_ISDIR(info.st_mode):
            module.fail_json(msg=f"install_files: {full} is a directory where a file belongs; "
                                 "nothing was written.")
        file_plan.append((rel, full, info))

    written, fixed, diffs = [], [], []
    for rel, full, info in dir_plan:
        if info is None:
            written.append(rel)  # a new directory counts as written
            if not module.check_mode:
                os.mkdir(full, dir_mode)
                os.chmod(full, dir_mode)  # the umask took bits away
                os.chown(full, uid, gid)
        elif st.S_IMODE(info.st_mode) != dir_mode or (info.st_uid, info.st_gid) != (uid, gid):
            fixed.append(rel)
            if not module.check_mode:
                os.chmod(full, dir_mode)
                os.chown(full, uid, gid)
    for rel, full, info in file_plan:
        want = files[rel]
        old = _read(full) if info is not None else None
        if old == want:
            if st.S_IMODE(info.st_mode) != file_mode or (info.st_uid, info.st_gid) != (uid, gid):
                fixed.append(rel)
                if not module.check_mode:
                    os.chmod(full, file_mode)
                    os.chown(full, uid, gid)
            continue
        written.append(rel)
        if module._diff:
            before, after = _text(old or b""), _text(want)
            diff = {"before_header": full if info is not None else "(absent)", "after_header": full}
            if before is not None and after is not None:
                diff.update(before=before, after=after)
            diffs.append(diff)
        if module.check_mode:
            continue
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(full), prefix=f".{os.path.basename(full)}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(want)
                handle.flush()
                os.fchmod(handle.fileno(), file_mode)
                os.fchown(handle.fileno(), uid, gid)
                os.fsync(handle.fileno())
            os.replace(tmp, full)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    result = {"changed": bool(written or fixed), "written": written, "fixed": fixed}
    if module._diff and diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
