# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""roce_plan: validate fabricops_roce and compute per-port desired state, on the controller only."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.fabricops.fabric.plugins.plugin_utils.arguments import OptionsError, validate_options
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import missing_package

try:
    from fabricops.errors import FabricopsError
    from fabricops.hostqos import knobs as kb
    from fabricops.hostqos.plan import host_plan
except ImportError as exc:  # pragma: no cover - only without the Python package
    host_plan = None
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None

#: the task options (the definition itself is checked by fabricops.model.roce, field by field)
ARGUMENT_SPEC = {
    "roce": {"type": "dict", "default": {}},
    "hcas": {"type": "list", "elements": "dict", "required": True},
    "interfaces": {"type": "list", "elements": "str", "default": []},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if host_plan is None:
            raise AnsibleActionFail(
                missing_package("fabricops.fabric.roce_plan", IMPORT_ERROR)
            )
        try:
            args = validate_options("roce_plan", ARGUMENT_SPEC, self._task.args)
            plan = host_plan(args["roce"], args["hcas"], args["interfaces"])
        except (OptionsError, FabricopsError) as exc:
            result.update(failed=True, msg=str(exc))
            return result
        result.update(changed=False, sysfs_reads=_sysfs_reads(plan["ports"]), **plan)
        return result


def _sysfs_reads(ports):
    """What roce_sysfs reads for every port, named as the role's probe names them ("sysfs PATH",
    "sysfs ARGV"), so the one probe can read it and roce_sysfs compare it (its ``current``)."""
    files, commands = {}, {}
    for p in ports:
        spec = kb.read_spec(kb.knobs_for(p["netdev"], p["device"], p["port"], p["sysfs"]))
        files.update({f"sysfs {path}": path for path in spec["files"]})
        commands.update({f"sysfs {' '.join(argv)}": list(argv) for argv in spec["commands"]})
    return {"files": files, "commands": commands}
