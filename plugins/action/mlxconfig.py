# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""mlxconfig: read on the host, parse and plan on the controller (fabricops.firmware,
fabricops.parsers.mlxconfig), set only the difference (never in check mode), read back and verify."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.fabricops.fabric.plugins.plugin_utils.arguments import OptionsError, validate_options
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import missing_package

try:
    from fabricops import firmware
    from fabricops.errors import FabricopsError
    from fabricops.parsers import mlxconfig as mlxparse
except ImportError as exc:  # pragma: no cover - only without the Python package
    firmware = None
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None

MODULE = "fabricops.fabric.mlxconfig"

ARGUMENT_SPEC = {
    "device": {"type": "str", "required": True},
    "config": {"type": "dict"},
}


def render(values: dict, keys) -> str:
    """The declared keys' values, one ``KEY=value`` line each (the diff's two sides)."""
    return "".join(f"{k}={values.get(k, 'absent')}\n" for k in sorted(keys))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if firmware is None:
            raise AnsibleActionFail(missing_package(MODULE, IMPORT_ERROR))
        try:
            args = validate_options("mlxconfig", ARGUMENT_SPEC, self._task.args)
        except OptionsError as exc:
            raise AnsibleActionFail(str(exc)) from None
        device = args["device"]
        if not firmware.BDF.fullmatch(device):
            raise AnsibleActionFail(f"mlxconfig: device {device!r} is not a PCI address like 0000:41:00.0.")
        try:
            want = firmware.check_config("config", args.get("config"))
        except FabricopsError as exc:
            raise AnsibleActionFail(f"{device}: {exc}") from None

        def call(settings):
            res = self._execute_module(
                module_name=MODULE,
                module_args={"device": device, "_set": settings},
                task_vars=task_vars,
            )
            if res.get("failed"):
                reason = mlxparse.parse_set_error(res.get("stdout") or "") if settings else None
                if reason:
                    res["msg"] = f"{device}: mlxconfig refused the settings: {reason}"
                return res, None
            try:
                return res, mlxparse.parse_query(res.get("stdout", ""))
            except FabricopsError as exc:
                return {"failed": True, "msg": f"{device}: {exc}", "stdout": res.get("stdout")}, None

        read, before = call([])
        if before is None:
            return read
        plan = firmware.config_plan(want, before)
        if plan["unknown"]:
            result.update(
                failed=True,
                changed=False,
                msg=f"{device}: the device has no setting {', '.join(plan['unknown'])} "
                "(mlxconfig -e q does not show it); nothing was set.",
                stdout=read.get("stdout", ""),
            )
            return result
        settings = [f"{k}={v}" for k, v in sorted(plan["set"].items())]
        commands = [" ".join(["mlxconfig", "-d", device, "-y", "set", *settings])] if settings else []
        rows_before = before.get("configs") or {}
        next_before = {k: rows_before[k]["next"] for k in want if k in rows_before}
        if not settings:
            after, stdout = before, read.get("stdout", "")
            next_after = dict(next_before)
        elif self._task.check_mode:
            after, stdout = before, read.get("stdout", "")
            next_after = {**next_before, **plan["set"]}
        else:
            applied, after = call(settings)
            if after is None:
                applied.setdefault("commands", commands)
                return applied
            stdout = applied.get("stdout", "")
            rows = after.get("configs") or {}
            next_after = {k: rows[k]["next"] for k in want if k in rows and "next" in rows[k]}
            wrong = [k for k in plan["set"] if k not in next_after or not firmware.same(next_after[k], want[k])]
            if wrong:
                result.update(
                    failed=True, changed=True, commands=commands, stdout=stdout, next_boot=next_after,
                    msg=f"{device}: mlxconfig ran but the next-boot configuration does not hold "
                    + ", ".join(f"{k}={want[k]} (reads {next_after.get(k, 'absent')})" for k in wrong) + ".",
                )
                return result
            plan = {**firmware.config_plan(want, after), "set": plan["set"]}
        rows_after = after.get("configs") or {}
        current = {k: rows_after[k]["current"] for k in want if "current" in rows_after.get(k, {})}
        result.update(
            device=device,
            changed=bool(settings),
            commands=commands,
            next_boot=next_after,
            current=current,
            reset_pending=plan["reset_pending"],
            deferred=plan["deferred"],
            stdout=stdout,
        )
        result["diff"] = {
            "before_header": f"{device} (mlxconfig, next boot)",
            "after_header": f"{device} (mlxconfig, next boot)",
            "before": render(next_before, want),
            "after": render(next_after, want),
        }
        return result
