# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Run fabric_facts on the host, then parse what it read on the controller (fabricops.facts)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.fabricops.fabric.plugins.plugin_utils.arguments import OptionsError, validate_options
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import missing_package

try:
    from fabricops.facts import build_facts
except ImportError as exc:  # pragma: no cover - only without the Python package
    build_facts = None
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None

ARGUMENT_SPEC = {"max_gids": {"type": "int", "default": 16}}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if build_facts is None:
            raise AnsibleActionFail(
                missing_package("fabricops.fabric.fabric_facts", IMPORT_ERROR)
            )
        try:
            args = validate_options("fabric_facts", ARGUMENT_SPEC, self._task.args)
        except OptionsError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        if args["max_gids"] < 1:
            result.update(failed=True, msg=f"fabric_facts: max_gids is {args['max_gids']}; use 1 or more.")
            return result
        module_result = self._execute_module(
            module_name="fabricops.fabric.fabric_facts",
            module_args=args,
            task_vars=task_vars,
        )
        if module_result.get("failed"):
            return module_result
        result["changed"] = False
        result["ansible_facts"] = {"fabric": build_facts(module_result["raw"])}
        return result
