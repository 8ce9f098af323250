# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""templates: a role's templates rendered on the controller, compared with the host in one read.

Each ``ansible.builtin.template`` task costs, even when nothing changes, a ``stat`` module run
with a checksum and a ``file`` module run for mode and owner: two module starts and round trips per
file. This plugin renders every file of the task on the controller, reads all destinations in one
``fabricops.fabric.host_read`` run (content, mode, owner, group), and hands only the files that
differ, or that it cannot be sure of, to ``ansible.builtin.template`` itself, one file at a time,
with the same options: writing, check mode and diff are that action's, unchanged. A file is skipped
only when its bytes, mode, owner and group are exactly what the template action would leave.
"""

from __future__ import annotations

import base64
import os
import re

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase
from ansible_collections.fabricops.fabric.plugins.plugin_utils.arguments import OptionsError, validate_options

try:  # ansible-core 2.19: how the template action renders (its own private helpers)
    from ansible._internal._templating import _template_vars
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover - older ansible-core: every file goes to the template action
    _template_vars = None

ARGUMENT_SPEC = {
    # a host_read result registered earlier in the run: destinations it read (files and stats of
    # the same path) are not read again
    "read": {"type": "dict", "default": {}},
    "files": {
        "type": "list",
        "elements": "dict",
        "required": True,
        "options": {
            "src": {"type": "str", "required": True},
            "dest": {"type": "str", "required": True},
            "mode": {"type": "str", "required": True},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
            "vars": {"type": "dict", "default": {}},
        },
    },
}

_MODE = re.compile(r"^0?[0-7]{3}$")
_NAME = re.compile(r"^[a-z_][a-z0-9_-]*$")


def _check(files: list[dict]) -> None:
    seen = set()
    for i, f in enumerate(files):
        where = f"files[{i}]"
        if not os.path.isabs(f["dest"]) or f["dest"].endswith("/"):
            raise OptionsError(f"templates: {where}.dest must be an absolute file path, not {f['dest']!r}.")
        if f["dest"] in seen:
            raise OptionsError(f"templates: {where}.dest {f['dest']} is written twice in one task.")
        seen.add(f["dest"])
        if not all(isinstance(k, str) and k.isidentifier() for k in f["vars"]):
            raise OptionsError(f"templates: {where}.vars must map variable names to values.")
        if not _MODE.match(f["mode"]):
            raise OptionsError(f"templates: {where}.mode must be octal like '0644', not {f['mode']!r}.")
        for key in ("owner", "group"):
            if not _NAME.match(f[key]):
                raise OptionsError(f"templates: {where}.{key} {f[key]!r} is not a user or group name.")


def _known(read) -> dict[str, tuple[dict, dict]]:
    """{path: (file result, stat)} for each path an earlier host_read result both read and looked at.

    Anything that is not a complete, successful host_read result of that path is left out, so the
    file is read again here: a partial or failed earlier read never stands in for the host."""
    if not isinstance(read, dict) or read.get("failed") or read.get("skipped"):
        return {}
    files = read.get("files") if isinstance(read.get("files"), dict) else {}
    stats = read.get("stats") if isinstance(read.get("stats"), dict) else {}
    by_path = {}
    for entry in stats.values():
        st = entry.get("stat") if isinstance(entry, dict) else None
        if isinstance(st, dict) and isinstance(st.get("path"), str) and isinstance(st.get("exists"), bool):
            by_path[st["path"]] = st
    known = {}
    for entry in files.values():
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            continue
        st = by_path.get(entry["path"])
        if st is not None and entry.get("exists") == st["exists"] and isinstance(entry.get("content"), str):
            known[entry["path"]] = (entry, st)
    return known


class ActionModule(ActionBase):
    # no temporary directory of its own: host_read is pipelined, the template action makes its own
    TRANSFERS_FILES = False

    def _render(self, f: dict, task_vars: dict) -> bytes | None:
        """The bytes ansible.builtin.template would write (its defaults), or None if not known here."""
        if _template_vars is None:
            return None
        src, dest = f["src"], f["dest"]
        try:
            source = self._find_needle("templates", src)
        except AnsibleError as exc:
            raise AnsibleActionFail(to_text(exc)) from exc
        data = trust_as_template(self._loader.get_text_file_contents(source))
        searchpath = []
        for p in [*task_vars.get("ansible_search_path", []), self._loader._basedir, os.path.dirname(source)]:
            searchpath += [os.path.join(p, "templates"), p]
        temp_vars = dict(task_vars, **f["vars"])
        temp_vars.update(_template_vars.generate_ansible_template_vars(
            path=src, fullpath=source, dest_path=dest,
            include_ansible_managed="ansible_managed" not in temp_vars))
        templar = self._templar.copy_with_new_env(searchpath=searchpath, available_variables=temp_vars)
        overrides = {"trim_blocks": True, "lstrip_blocks": False, "newline_sequence": "\n"}
        text = templar.template(data, escape_backslashes=False, overrides=overrides)
        return to_bytes("" if text is None else text, encoding="utf-8", errors="surrogate_or_strict")

    def _template(self, f: dict, task_vars: dict) -> dict:
        """ansible.builtin.template on one file, with this task's check mode, diff and connection."""
        task = self._task.copy()
        task.args = {k: f[k] for k in ("src", "dest", "mode", "owner", "group")}
        action = self._shared_loader_obj.action_loader.get(
            "ansible.legacy.template", task=task, connection=self._connection,
            play_context=self._play_context, loader=self._loader, templar=self._templar,
            shared_loader_obj=self._shared_loader_obj)
        return action.run(task_vars=dict(task_vars, **f["vars"]))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        try:
            opts = validate_options("templates", ARGUMENT_SPEC, self._task.args)
            files = opts["files"]
            _check(files)
        except OptionsError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        if not files:
            result.update(changed=False, results=[])
            return result
        wanted = [self._render(f, task_vars) for f in files]
        known = _known(opts["read"])
        keys = {f"f{i}": f["dest"] for i, f in enumerate(files) if f["dest"] not in known}
        if keys:
            read = self._execute_module(
                module_name="fabricops.fabric.host_read",
                module_args={"files": keys, "stats": keys},
                task_vars=task_vars)
            if read.get("failed"):
                result.update(failed=True, msg=read.get("msg", "templates: could not read the destinations"))
                return result
            known.update({path: (read["files"][key], read["stats"][key]["stat"])
                          for key, path in keys.items()})
        results, diffs = [], []
        for f, want in zip(files, wanted, strict=True):
            content, st = known[f["dest"]]
            same = (
                want is not None
                and st.get("exists") and st.get("isreg")
                and base64.b64decode(content.get("content", "")) == want
                and st.get("mode") == f"{int(f['mode'], 8):04o}"
                and st.get("pw_name") == f["owner"] and st.get("gr_name") == f["group"]
            )
            if same:
                results.append({"item": f["dest"], "dest": f["dest"], "src": f["src"], "changed": False,
                                "checked": "same", "existed": True})
                continue
            res = self._template(f, task_vars)
            if res.get("failed"):
                res.setdefault("msg", f"templates: writing {f['dest']} failed")
                res["dest"] = f["dest"]
                result.update(failed=True, msg=res["msg"], results=[*results, res])
                return result
            # existed: whether the path was there before this task (a unit file that is new is not
            # known to systemd yet, so a check-mode run cannot ask systemd about it)
            entry = {"item": f["dest"], "dest": f["dest"], "src": f["src"],
                     "changed": bool(res.get("changed")), "checked": "template",
                     "existed": bool(st.get("exists"))}
            if res.get("diff") and self._task.diff:
                # the template action names its rendered temporary file as "after": name the destination
                given = res["diff"] if isinstance(res["diff"], list) else [res["diff"]]
                entry["diff"] = [dict(d, after_header=f["dest"])
                                 if isinstance(d, dict) and "after_header" in d else d for d in given]
                diffs += entry["diff"]
            results.append(entry)
        result.update(changed=any(r["changed"] for r in results), results=results)
        if diffs:
            result["diff"] = diffs
        return result
