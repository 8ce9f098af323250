# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Per-task wall time and per-host results of a playbook run, for bench/ansible_speed.py.

Enabled only by the bench (ANSIBLE_CALLBACK_PLUGINS=bench/callback_plugins,
ANSIBLE_CALLBACKS_ENABLED=fabricops_tasktime); writes JSON to $FABRICOPS_TASKTIME_OUT:
``[{"task", "action", "seconds", "ok", "changed", "skipped", "failed"}, ...]`` in run order.
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: fabricops_tasktime
type: aggregate
short_description: per-task wall time and result counts (bench only)
description: Writes one record per task to the file named by FABRICOPS_TASKTIME_OUT.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "fabricops_tasktime"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._rows = []
        self._cur = None

    def _close(self):
        if self._cur is not None:
            self._cur["seconds"] = round(time.monotonic() - self._cur.pop("_t0"), 4)
            self._rows.append(self._cur)
        self._cur = None

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._close()
        self._cur = {"task": task.get_name(), "action": task.action, "_t0": time.monotonic(),
                     "ok": 0, "changed": 0, "skipped": 0, "failed": 0}

    v2_playbook_on_handler_task_start = v2_playbook_on_task_start

    def _count(self, key, result=None):
        if self._cur is not None:
            self._cur[key] += 1
            if key == "ok" and result is not None and result._result.get("changed"):
                self._cur["changed"] += 1

    def v2_runner_on_ok(self, result):
        self._count("ok", result)

    def v2_runner_on_skipped(self, result):
        self._count("skipped")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count("failed")

    def v2_runner_on_unreachable(self, result):
        self._count("failed")

    def v2_playbook_on_stats(self, stats):
        self._close()
        out = os.environ.get("FABRICOPS_TASKTIME_OUT")
        if out:
            with open(out, "w", encoding="utf-8") as fh:
                json.dump(self._rows, fh)
