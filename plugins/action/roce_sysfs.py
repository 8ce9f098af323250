# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""roce_sysfs: read the knobs on the host, compare on the controller (fabricops.hostqos.knobs),
write only the difference (never in check mode), read back and verify."""

from __future__ import annotations

import base64
import binascii

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.fabricops.fabric.plugins.plugin_utils.arguments import OptionsError, validate_options
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import missing_package

try:
    from fabricops.errors import FabricopsError
    from fabricops.hostqos import knobs as kb
    from fabricops.model import roce_schema as schema
except ImportError as exc:  # pragma: no cover - only without the Python package
    kb = None
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None

MODULE = "fabricops.fabric.roce_sysfs"


def argument_spec():
    """The task options: the port and one ``config`` dict (its keys: fabricops.model.roce_schema)."""
    return {
        "netdev": {"type": "str", "required": True},
        "device": {"type": "str", "required": True},
        "port": {"type": "int", "default": 1},
        "config": {"type": "dict", "options": schema.argument_spec(schema.PORT_SYSFS)},
        # the role's host_read of this port's knobs (files "sysfs PATH", commands "sysfs ARGV"), read
        # earlier in this run before anything changed the port: compared instead of reading again
        "current": {"type": "dict", "default": {}},
    }


def _text(found):
    """A host_read file result -> the file's text as the module reads it (stripped), None when absent."""
    if not isinstance(found, dict) or found.get("failed"):
        raise ValueError("no read")
    if found.get("exists") is False:
        return None
    if found.get("exists") is not True or found.get("encoding") != "base64":
        raise ValueError("not a host_read file result")
    return base64.b64decode(found.get("content") or "").decode("utf-8", "replace").strip()


def raw_from(current, spec):
    """The module's ``raw`` read (files, commands) from the role's earlier host_read, or None when it
    does not hold every read ``spec`` needs, each as host_read returns it."""
    if not isinstance(current, dict):
        return None
    files, commands = current.get("files") or {}, current.get("commands") or {}
    try:
        raw_files = {path: _text(files.get(f"sysfs {path}")) for path in spec["files"]}
        raw_commands = []
        for argv in spec["commands"]:
            res = commands.get(f"sysfs {' '.join(argv)}")
            if not isinstance(res, dict) or not isinstance(res.get("rc"), int) or res.get("failed"):
                return None
            raw_commands.append({"argv": list(argv), "rc": res["rc"], "stdout": res.get("stdout") or "",
                                 "stderr": res.get("stderr") or ""})
    except (ValueError, TypeError, binascii.Error):
        return None
    return {"files": raw_files, "commands": raw_commands}


def _flags(name, values):
    """8 DCQCN enables: true / false (also "yes", "false", 0 ...) or null (unmanaged)."""
    if values is None:
        return None
    out = []
    for prio, value in enumerate(values):
        try:
            out.append(None if value is None else boolean(value, strict=True))
        except TypeError:
            raise OptionsError(
                f"roce_sysfs: config.{name}[{prio}] is {value!r}; use true, false or null."
            ) from None
    return out


def want_from(args):
    """Validated task options -> the want of :func:`fabricops.hostqos.knobs.knobs_for`."""
    config = dict(args["config"] or {})
    for name in ("ecn_np", "ecn_rp"):
        config[name] = _flags(name, config.get(name))
    return {f.name: config.get(f.name) for f in schema.PORT_SYSFS}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if kb is None:
            raise AnsibleActionFail(
                missing_package(MODULE, IMPORT_ERROR)
            )
        try:
            args = validate_options("roce_sysfs", argument_spec(), self._task.args)
            want = want_from(args)
        except OptionsError as exc:
            raise AnsibleActionFail(str(exc)) from None
        netdev, device, port = args["netdev"], args["device"], args["port"]
        try:
            table = kb.knobs_for(netdev, device, port, want)
        except FabricopsError as exc:
            raise AnsibleActionFail(str(exc)) from None
        spec = kb.read_spec(table)
        base = {
            "netdev": netdev,
            "device": device,
            "port": port,
            "_read_files": spec["files"],
            "_read_commands": spec["commands"],
        }

        def values(res):
            try:
                values, warnings = kb.values_from(netdev, table, res.get("raw") or {})
            except FabricopsError as exc:
                return {"failed": True, "msg": str(exc)}, None
            res["_values"], res["_warnings"] = values, warnings
            return res, values

        def call(writes):
            res = self._execute_module(
                module_name=MODULE, module_args={**base, "_writes": writes}, task_vars=task_vars
            )
            if res.get("failed"):
                return res, None
            return values(res)

        read, before = None, None
        earlier = raw_from(args["current"], spec)
        if earlier is not None:
            # a read that does not give every knob is left to the module, which fails naming it
            read, before = values({"raw": earlier})
        if before is None:
            read, before = call([])
        if before is None:
            return read
        todo = kb.plan(table, before)
        changes = [f"{k.path}={k.desired}" if k.path else " ".join(k.write_argv or ()) for k in todo]
        result.update(
            netdev=netdev, device=device, port=port, before=before, changes=changes, changed=bool(todo)
        )
        if read["_warnings"]:
            result["warnings"] = read["_warnings"]
        if not todo:
            after = before
        elif self._task.check_mode:
            after = {**before, **{k.name: k.desired for k in todo}}
        else:
            applied, after = call([k.write() for k in todo])
            if after is None:
                applied.setdefault("changes", changes)
                return applied
            mismatch = kb.verify(netdev, table, after)
            if mismatch:
                result.update(
                    failed=True, after=after, msg="RoCE knobs written but not holding: " + "; ".join(mismatch)
                )
                return result
        result["after"] = after
        result["diff"] = {
            "before_header": f"{netdev} ({device} port {port}) RoCE knobs",
            "after_header": f"{netdev} ({device} port {port}) RoCE knobs",
            "before": kb.render(table, before),
            "after": kb.render(table, after),
        }
        return result
