# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""preload: load the collection's plugins once, in the controller process, before any task runs.

Ansible runs every task for every host in a worker process forked from ansible-playbook, and the
worker, not the parent, loads the filter, test and action plugins the task uses: a plugin file the
parent never imported is imported again by every worker that needs it (with the fabricops modules
it calls), so a run pays that import once per task and host. Imported here, in the parent, before
the first worker is forked, each plugin is already in ``sys.modules`` in every worker
(``PluginLoader._load_module_source`` returns it from there), and the plugin loaders' caches of
where each plugin lives are filled too.

Enable it in ansible.cfg (the repository's does)::

    [defaults]
    callbacks_enabled = fabricops.fabric.preload

It prints nothing and changes nothing a task does: only where the import cost is paid. A plugin that
fails to import here is left for the worker, which reports the error as it always would.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Load the collection's plugins in the controller process, before workers fork
description:
  - Imports the filter, test and action plugins of fabricops.fabric, the fabricops modules they use
    and the ansible-core action plugins every role runs, once, in the ansible-playbook process, so
    the worker forked for each task and host finds them loaded instead of importing them again.
  - Prints nothing; changes no result.
version_added: 0.1.0
author: fabricops developers (@fabricops)
requirements:
  - enable in ansible.cfg with C(callbacks_enabled = fabricops.fabric.preload)
"""

# below DOCUMENTATION, as ansible-test validate-modules requires
import importlib
import pkgutil

from ansible.plugins.callback import CallbackBase

COLLECTION = "ansible_collections.fabricops.fabric.plugins"
KINDS = ("filter", "test", "action")
# ansible-core action plugins behind most tasks of the roles (set_fact, assert, debug, template,
# include_tasks is the strategy's, command/host_read/... run through "normal")
CORE_ACTIONS = ("set_fact", "assert", "debug", "template", "normal", "command", "validate_argument_spec",
                "copy", "file", "systemd_service", "service", "package", "apt", "dnf")
# fabricops modules imported on first use inside a function (not by a plugin's LazyModule)
FIRST_USE = ("fabricops.parsers.ip_addr",)


def _import(name: str) -> bool:
    try:
        importlib.import_module(name)
    except Exception:  # the worker imports it again and reports the error there
        return False
    return True


def preload() -> list[str]:
    """Import what the workers would import; returns the module names that loaded."""
    done = []
    lazy = set(FIRST_USE)
    for kind in KINDS:
        package = f"{COLLECTION}.{kind}"
        if not _import(package):
            continue
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(getattr(pkg, "__path__", [])):
            name = f"{package}.{info.name}"
            if _import(name):
                done.append(name)
                # the fabricops modules its LazyModule proxies import on first use
                found = vars(importlib.import_module(name)).values()
                proxies = [v for v in found if type(v).__name__ == "LazyModule"]
                lazy.update(v._name for v in proxies if isinstance(getattr(v, "_name", None), str))
    for name in (*(f"ansible.plugins.action.{a}" for a in CORE_ACTIONS), *sorted(lazy)):
        if _import(name):
            done.append(name)
    return done


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "fabricops.fabric.preload"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loaded = preload()
