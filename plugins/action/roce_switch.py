# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""roce_switch: RoCE QoS of a Spectrum switch (Onyx / Cumulus NVUE), computed and applied from the controller.

A thin shim over :func:`fabricops.roce.runner.run`: it reads the connection details from the host's
inventory variables (never from task arguments, so the password is never part of the task) through
:func:`fabricops.switch.access.switch_connection` (password, key file, ssh-agent, ssh_config and
ProxyJump), opens the netmiko session with strict host-key checking and returns ``before``,
``commands``, ``after``, ``diff`` and ``changed``. Check mode sends no configuration command.
``check_access: true`` only resolves the access (no switch contact) and says how the switch would be
reached, without any secret.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import missing_package

try:
    from fabricops.errors import FabricopsError
    from fabricops.roce import desired, platforms
    from fabricops.roce.runner import run as run_resource
    from fabricops.roce.switchspec import normalize_confirm_timeout, normalize_os
    from fabricops.switch import access as switch_access
except ImportError as exc:  # pragma: no cover - only without the Python package
    run_resource = None
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None

PASSWORD_ENV = "FABRICOPS_SWITCH_PASSWORD"  # also in fabricops.switch.access
try:
    from fabricops.model import roce_schema as _roce_schema
except ImportError:  # pragma: no cover - only without the Python package (run() says so)
    _roce_schema = None
#: the task options, validated by Ansible's own argument-spec code (so ``"false"`` from -e is false);
#: every value that reaches a switch CLI line is checked again in fabricops.roce.switchspec / knobs.
ARGUMENT_SPEC = {
    "state": {
        "type": "str",
        "default": "merged",
        "choices": ["merged", "replaced", "overridden", "deleted", "gathered", "rendered", "parsed"],
    },
    "roce": {"type": "dict"},
    "ports": {"type": "list", "elements": "str"},
    "cabling": {"type": "list", "elements": "dict"},
    "links": {"type": "list", "elements": "dict"},
    "os": {"type": "str"},
    # pfc_watchdog, ets_lossless_percent, buffer_pool: declared in fabricops.model.roce_schema.SWITCH_SETTINGS
    **(_roce_schema.switch_argument_spec() if _roce_schema else {}),
    "save": {"type": "bool", "default": True},
    "confirm_timeout": {"type": "str", "default": "120s"},
    "discard_pending": {"type": "bool", "default": False},
    "running_config": {"type": "str"},
    "known_hosts": {"type": "path"},
    "timeout": {"type": "int", "default": 30},
    "check_access": {"type": "bool", "default": False},
}
ARGS = {name: spec.get("default") for name, spec in ARGUMENT_SPEC.items()}


def _plain(name, value):
    """Strings in rendered options hold printable ASCII only (no newline, control char, non-ASCII)."""
    if isinstance(value, dict):
        for k, v in value.items():
            _plain(f"{name}.{k}", k)
            _plain(f"{name}.{k}", v)
    elif isinstance(value, list | tuple):
        for v in value:
            _plain(name, v)
    elif isinstance(value, str) and not (value.isascii() and value.isprintable()):
        raise ValueError(
            f"roce_switch: {name} {value!r} holds a control or non-ASCII character; use plain ASCII."
        )


def validate_args(raw):
    """Task options -> validated dict, or raise ValueError with one sentence (nothing is sent)."""
    given = {k: v for k, v in (raw or {}).items() if v is not None}
    for name, value in given.items():
        if name not in {"running_config", "known_hosts"}:
            _plain(name, value)
    result = ArgumentSpecValidator(ARGUMENT_SPEC).validate(given)
    if result.error_messages:
        unsupported = any(isinstance(err, UnsupportedError) for err in result.errors)
        msgs = [
            ("unsupported option(s) " if unsupported and "Supported parameters" in m else "") + m.rstrip(".")
            for m in result.error_messages
        ]
        text = "; ".join(msgs)  # a value with a newline or control character is shown escaped
        raise ValueError(
            "roce_switch: " + "".join(c if c.isprintable() else repr(c)[1:-1] for c in text) + "."
        )
    args = result.validated_parameters
    if not 1 <= args["ets_lossless_percent"] <= 99:
        raise ValueError(f"roce_switch: ets_lossless_percent is {args['ets_lossless_percent']}; use 1 to 99.")
    if not 1 <= args["timeout"] <= 600:
        raise ValueError(f"roce_switch: timeout is {args['timeout']}; use 1 to 600 seconds.")
    try:
        args["confirm_timeout"] = normalize_confirm_timeout(args["confirm_timeout"])
    except FabricopsError as exc:
        raise ValueError(f"roce_switch: {exc}") from None
    return args


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
                missing_package("fabricops.fabric.roce_switch", IMPORT_ERROR)
            )
        switch = task_vars.get("inventory_hostname", "switch")
        try:
            args = validate_args(self._task.args)
        except ValueError as exc:
            result.update(failed=True, changed=False, msg=f"{switch}: {exc}")
            return result
        try:
            os_name = normalize_os(
                args["os"] or self._var(task_vars, "fabricops_switch_os", "ansible_network_os")
            )
        except FabricopsError as exc:
            result.update(failed=True, msg=f"{switch}: {exc}")
            return result

        resolved = []

        def access():
            # one access function for the role, verify and diagnose (fabricops.switch.access): the
            # task's variables as Ansible holds them (Vault, inline vault, !unsafe) and this templar;
            # resolved once per task, so the lock's key and the connection name the same device
            if not resolved:
                resolved.append(
                    switch_access.switch_connection(
                        task_vars,
                        switch=switch,
                        os_name=os_name,
                        known_hosts=args["known_hosts"],
                        timeout=float(args["timeout"]),
                        render=self._templar.template,
                    )
                )
            return resolved[0]

        def connector():
            return platforms.connect(access())

        def device():
            # the lock's key: the address and port this task connects to, not the inventory name,
            # so two inventory aliases of one switch take one lock
            a = access()
            return a.host, a.port

        if args["check_access"]:
            try:
                result.update(changed=False, msg=f"{switch}: {access().describe()}")
            except FabricopsError as exc:
                result.update(failed=True, changed=False, msg=str(exc))
            return result

        roce = args["roce"]
        if roce is None:
            # no roce option: the definition the host's variables give this switch (roce_switch_roce
            # over fabricops_roce, fabricops.roce.desired), the one verify checks it against
            try:
                _source, roce = desired.effective_definition(
                    task_vars, switch, render=self._templar.template, kind="switch"
                )
            except FabricopsError as exc:
                result.update(failed=True, changed=False, msg=str(exc))
                return result

        try:
            out = run_resource(
                switch=switch,
                os_name=os_name,
                state=args["state"],
                roce=roce,
                ports=args["ports"] or [],
                cabling=args["cabling"] or [],
                links=args["links"] or [],
                pfc_watchdog=bool(args["pfc_watchdog"]),
                ets_lossless_percent=int(args["ets_lossless_percent"]),
                buffer_pool=args["buffer_pool"],
                check_mode=bool(self._task.check_mode),
                save=bool(args["save"]),
                confirm_timeout=str(args["confirm_timeout"]),
                discard_pending=bool(args["discard_pending"]),
                running_config=args["running_config"],
                connector=connector,
                device=device,
            )
        except FabricopsError as exc:
            result.update(failed=True, changed=False, msg=str(exc))
            if hasattr(exc, "outcome"):  # a failed change: what the switch holds, read back
                result.update(outcome=exc.outcome, difference=exc.difference, sent=exc.sent)
            return result
        diff = out.pop("diff", None)
        result.update(out)
        if diff is not None and self._task.diff:
            result["diff"] = diff
        return result
