# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""roce_switch: RoCE QoS of a Spectrum switch (Onyx / Cumulus NVUE), computed and applied from the controller.

A thin shim over :func:`fabricops.switch.runner.run`: it reads the connection details from the host's
inventory variables (never from task arguments, so the password is never part of the task), opens the
netmiko session with strict host-key checking and returns ``before``, ``commands``, ``after``, ``diff``
and ``changed``. Check mode sends no configuration command.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

try:
    from fabricops.errors import FabricopsError
    from fabricops.switch import transport
    from fabricops.switch.model import normalize_os
    from fabricops.switch.runner import run as run_resource
except ImportError as exc:  # pragma: no cover - only without the Python package
    run_resource = None
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None

PASSWORD_ENV = "FABRICOPS_SWITCH_PASSWORD"
ARGS = {
    "state": "merged",
    "roce": None,
    "ports": None,
    "cabling": None,
    "os": None,
    "pfc_watchdog": True,
    "ets_lossless_percent": 50,
    "buffer_pool": "default",
    "save": True,
    "confirm_timeout": "120s",
    "discard_pending": False,
    "running_config": None,
    "known_hosts": None,
    "timeout": 30,
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def _var(self, task_vars, *names):
        for name in names:
            value = task_vars.get(name)
            if value not in (None, ""):
                return self._templar.template(value)
        return None

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        if run_resource is None:
            raise AnsibleActionFail(
                f"fabricops.fabric.roce_switch needs the fabricops Python package: {IMPORT_ERROR}"
            )
        unknown = sorted(set(self._task.args) - set(ARGS))
        if unknown:
            raise AnsibleActionFail(f"roce_switch: unsupported option(s) {', '.join(unknown)}")
        args = {**ARGS, **{k: v for k, v in self._task.args.items() if v is not None}}
        switch = task_vars.get("inventory_hostname", "switch")
        try:
            os_name = normalize_os(
                args["os"] or self._var(task_vars, "fabricops_switch_os", "ansible_network_os")
            )
        except FabricopsError as exc:
            result.update(failed=True, msg=f"{switch}: {exc}")
            return result

        def connector():
            host = self._var(task_vars, "ansible_host") or switch
            user = self._var(task_vars, "ansible_user")
            password = self._var(task_vars, "roce_switch_password", "ansible_password")
            password = password or os.environ.get(PASSWORD_ENV)
            if not user or not password:
                raise FabricopsError(
                    f"{switch}: step 'connect' failed: no credentials; set ansible_user and ansible_password "
                    f"(from Ansible Vault) or export {PASSWORD_ENV}."
                )
            known_hosts = (
                args["known_hosts"]
                or self._var(
                    task_vars, "roce_switch_known_hosts", "fabricops_known_hosts", "fabricops_ssh_known_hosts"
                )
                or transport.known_hosts_from_ssh_args(self._var(task_vars, "ansible_ssh_common_args"))
                or os.path.expanduser("~/.ssh/known_hosts")
            )
            return transport.connect(
                os_name,
                str(host),
                str(user),
                str(password),
                port=int(self._var(task_vars, "ansible_port") or 22),
                known_hosts=os.path.expanduser(str(known_hosts)),
                timeout=float(args["timeout"]),
            )

        try:
            out = run_resource(
                switch=switch,
                os_name=os_name,
                state=args["state"],
                roce=args["roce"] or {},
                ports=args["ports"] or [],
                cabling=args["cabling"] or [],
                pfc_watchdog=bool(args["pfc_watchdog"]),
                ets_lossless_percent=int(args["ets_lossless_percent"]),
                buffer_pool=args["buffer_pool"],
                check_mode=bool(self._task.check_mode),
                save=bool(args["save"]),
                confirm_timeout=str(args["confirm_timeout"]),
                discard_pending=bool(args["discard_pending"]),
                running_config=args["running_config"],
                connector=connector,
            )
        except FabricopsError as exc:
            result.update(failed=True, changed=False, msg=str(exc))
            return result
        diff = out.pop("diff", None)
        result.update(out)
        if diff is not None and self._task.diff:
            result["diff"] = diff
        return result
