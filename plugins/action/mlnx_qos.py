# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""mlnx_qos: read on the host, compare and plan on the controller (fabricops.hostqos.mlnx_qos),
change only the difference (never in check mode), read back and verify."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.fabricops.fabric.plugins.plugin_utils.arguments import OptionsError, validate_options
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import missing_package

try:
    from fabricops.errors import FabricopsError
    from fabricops.hostqos import mlnx_qos as qos
    from fabricops.model import roce_schema as schema
except ImportError as exc:  # pragma: no cover - only without the Python package
    qos = None
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None

MODULE = "fabricops.fabric.mlnx_qos"


def argument_spec():
    """The task options: the netdev and one ``config`` dict (its keys: fabricops.model.roce_schema)."""
    return {
        "interface": {"type": "str", "required": True},
        "config": {"type": "dict", "options": schema.argument_spec(schema.PORT_QOS)},
        # `mlnx_qos -i INTERFACE` as a host_read command result (rc, stdout) read earlier in this
        # run, before anything changed the port: compared instead of reading the port again
        "current": {"type": "dict", "default": {}},
    }


def _current(given):
    """An earlier read that can stand in for this task's own: a successful run with output."""
    if isinstance(given, dict) and given.get("rc") == 0 and isinstance(given.get("stdout"), str) \
            and given["stdout"].strip() and not given.get("failed"):
        return {"stdout": given["stdout"]}
    return None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if qos is None:
            raise AnsibleActionFail(
                missing_package(MODULE, IMPORT_ERROR)
            )
        try:
            args = validate_options("mlnx_qos", argument_spec(), self._task.args)
        except OptionsError as exc:
            raise AnsibleActionFail(str(exc)) from None
        iface = args["interface"]
        try:
            want = qos.want_from(args["config"] or {})
        except FabricopsError as exc:
            raise AnsibleActionFail(f"{iface}: {exc}") from None

        def call(commands):
            res = self._execute_module(
                module_name=MODULE,
                module_args={"interface": iface, "_commands": commands},
                task_vars=task_vars,
            )
            if res.get("failed"):
                return res, None
            try:
                return res, qos.have_from(qos.parse(res.get("stdout", "")))
            except FabricopsError as exc:
                return {"failed": True, "msg": f"{iface}: {exc}", "stdout": res.get("stdout")}, None

        read, have = _current(args["current"]), None
        if read is not None:
            try:
                have = qos.have_from(qos.parse(read["stdout"]))
            except FabricopsError:
                read = None  # not readable here: the module reads the port itself, as without it
        if have is None:
            read, have = call([])
        if have is None:
            return read
        groups = qos.plan(want, have)
        lines = [" ".join(["mlnx_qos", "-i", iface, *g]) for g in groups]
        result.update(interface=iface, before=qos.to_data(have), commands=lines, changed=bool(groups))
        if not groups:
            after, stdout = have, read.get("stdout", "")
        elif self._task.check_mode:
            after, stdout = qos.predict(want, have), read.get("stdout", "")
        else:
            applied, after = call(groups)
            if after is None:
                applied.setdefault("commands", lines)
                return applied
            stdout = applied.get("stdout", "")
            mismatch = qos.verify(want, after)
            if mismatch:
                result.update(
                    failed=True,
                    after=qos.to_data(after),
                    stdout=stdout,
                    msg=f"{iface}: mlnx_qos ran but the NIC does not hold the declared values: "
                    + "; ".join(mismatch),
                )
                return result
        result.update(after=qos.to_data(after), stdout=stdout)
        result["diff"] = {
            "before_header": f"{iface} (mlnx_qos)",
            "after_header": f"{iface} (mlnx_qos)",
            "before": qos.render(have, want),
            "after": qos.render(after, want),
        }
        return result
