# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""roce_plan: validate fabricops_roce and compute per-port desired state, on the controller only."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import missing_package

try:
    from fabricops.errors import FabricopsError
    from fabricops.hostqos.plan import host_plan
except ImportError as exc:  # pragma: no cover - only without the Python package
    host_plan = None
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if host_plan is None:
            raise AnsibleActionFail(
                missing_package("fabricops.fabric.roce_plan", IMPORT_ERROR)
            )
        args = self._task.args
        try:
            plan = host_plan(args.get("roce") or {}, args.get("hcas") or [], args.get("interfaces") or [])
        except FabricopsError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        result.update(changed=False, **plan)
        return result
