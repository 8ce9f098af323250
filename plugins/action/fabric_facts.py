# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Run fabric_facts on the host, then parse what it read on the controller (fabricops.facts)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import missing_package

try:
    from fabricops.facts import build_facts
except ImportError as exc:  # pragma: no cover - only without the Python package
    build_facts = None
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if build_facts is None:
            raise AnsibleActionFail(
                missing_package("fabricops.fabric.fabric_facts", IMPORT_ERROR)
            )
        module_result = self._execute_module(
            module_name="fabricops.fabric.fabric_facts",
            module_args=self._task.args,
            task_vars=task_vars,
        )
        if module_result.get("failed"):
            return module_result
        result["changed"] = False
        result["ansible_facts"] = {"fabric": build_facts(module_result["raw"])}
        return result
