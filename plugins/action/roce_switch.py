# Copyright: fabricops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""roce_switch: RoCE QoS of a Spectrum switch (Onyx / Cumulus NVUE), computed and applied from the controller.

A thin shim over :func:`fabricops.switch.runner.run`: it reads the connection details from the host's
inventory variables (never from task arguments, so the password is never part of the task) through
:func:`fabricops.switch.access.switch_connection` (password, key file, ssh-agent, ssh_config and
ProxyJump), opens the netmiko session with strict host-key checking and returns ``before``,
``commands``, ``after``, ``diff`` and ``changed``. Check mode sends no configuration command.
``check_access: true`` only resolves the access (no switch contact) and says how the switch would be
reached, without any secret.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

try:
    from fabricops.errors import FabricopsError
    from fabricops.switch import access as switch_access
    from fabricops.switch import transport
    from fabricops.switch.model import normalize_os
    from fabricops.switch.runner import run as run_resource
except ImportError as exc:  # pragma: no cover - only without the Python package
    run_resource = None
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None

PASSWORD_ENV = "FABRICOPS_SWITCH_PASSWORD"  # also in fabricops.switch.access
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
    "check_access": False,
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

        def access():
            # one access function for the role, verify and diagnose (fabricops.switch.access): the
            # task's variables as Ansible holds them (Vault, inline vault, !unsafe) and this templar
            return switch_access.switch_connection(
                task_vars,
                switch=switch,
                os_name=os_name,
                known_hosts=args["known_hosts"],
                timeout=float(args["timeout"]),
                render=self._templar.template,
            )

        def connector():
            return transport.connect(access())

        if args["check_access"]:
            try:
                result.update(changed=False, msg=f"{switch}: {access().describe()}")
            except FabricopsError as exc:
                result.update(failed=True, changed=False, msg=str(exc))
            return result

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
