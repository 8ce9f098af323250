"""Run an action plugin of the collection with its module side played by the emulated host."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from unittest import mock

PLUGINS = Path(__file__).resolve().parents[3] / "plugins" / "action"


def load_plugin(name):
    """The action plugin file as a module (its ARGUMENT_SPEC, helpers and ActionModule)."""
    spec = importlib.util.spec_from_file_location(f"action_{name}", PLUGINS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load(name):
    return load_plugin(name).ActionModule


def fake_module(host, calls):
    """The host side of mlnx_qos / roce_sysfs, on the emulated host."""

    def run(module_name, module_args, task_vars=None, **_):
        calls.append((module_name, module_args))
        if module_name.endswith("mlnx_qos"):
            iface = module_args["interface"]
            for group in module_args["_commands"]:
                rc, out = host.run(["mlnx_qos", "-i", iface, *group])
                if rc:
                    return {"failed": True, "msg": out}
            rc, out = host.run(["mlnx_qos", "-i", iface])
            return (
                {"failed": True, "msg": out}
                if rc
                else {"stdout": out, "changed": bool(module_args["_commands"])}
            )
        for w in module_args["_writes"]:
            if "path" in w:
                host.write(w["path"], w["value"])
            else:
                host.run(w["argv"])
        files = {p: host.read(p) for p in module_args["_read_files"]}
        cmds = []
        for argv in module_args["_read_commands"]:
            rc, out = host.run(argv)
            cmds.append({"argv": argv, "rc": rc, "stdout": out, "stderr": ""})
        return {"raw": {"files": files, "commands": cmds}}

    return run


def run_action(name, host, args, check_mode=False, module=None):
    """``module``: the module side (default: mlnx_qos / roce_sysfs on the emulated ``host``)."""
    task = mock.MagicMock(args=args, check_mode=check_mode, async_val=0, diff=True)
    action = load(name)(task, mock.MagicMock(), mock.MagicMock(), None, None, None)
    calls = []
    side = module(calls) if module else fake_module(host, calls)
    with mock.patch.object(action, "_execute_module", side_effect=side):
        result = action.run(task_vars={})
    return result, calls
