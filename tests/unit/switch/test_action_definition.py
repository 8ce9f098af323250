"""The roce_switch action without a ``roce`` option applies the definition the host's variables give
the switch (``fabricops.roce.desired``: ``roce_switch_roce`` over ``fabricops_roce``), the one verify
checks it against; ``state: rendered`` needs no switch."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from unittest import mock

import pytest

ACTION = Path(__file__).resolve().parents[3] / "plugins" / "action" / "roce_switch.py"


def _action(args):
    spec = importlib.util.spec_from_file_location("action_roce_switch", ACTION)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    task = mock.MagicMock(args=args, check_mode=False, async_val=0, diff=False)
    action = mod.ActionModule(task, mock.MagicMock(), mock.MagicMock(), None, None, None)
    action._templar = mock.MagicMock(template=lambda v: v)
    return action


def _rendered(task_vars, **args):
    args = {"state": "rendered", "ports": ["Eth1/1"], **args}
    with mock.patch("ansible.plugins.action.ActionBase.run", return_value={}):
        return _action(args).run(task_vars={"inventory_hostname": "leaf-onyx", "fabricops_switch_os": "onyx",
                                            **task_vars})


def test_without_roce_the_switch_gets_its_effective_definition():
    out = _rendered({"fabricops_roce": {"lossless_priority": 4, "dscp": 34}})
    assert not out.get("failed"), out
    assert "dcb priority-flow-control priority 4 enable" in out["commands"]
    out = _rendered({"fabricops_roce": {"lossless_priority": 4, "dscp": 34},
                     "roce_switch_roce": {"lossless_priority": 2, "dscp": 16}})
    assert "dcb priority-flow-control priority 2 enable" in out["commands"]
    # the role's own default is no override
    out = _rendered({"fabricops_roce": {"lossless_priority": 4, "dscp": 34},
                     "roce_switch_roce": "{{ fabricops_roce | default({}) }}"})
    assert "dcb priority-flow-control priority 4 enable" in out["commands"]


def test_an_explicit_roce_option_wins():
    out = _rendered({"fabricops_roce": {"lossless_priority": 4, "dscp": 34}}, roce={"lossless_priority": 3})
    assert "dcb priority-flow-control priority 3 enable" in out["commands"]


@pytest.mark.parametrize("value", [False, "false", "no"])
def test_pfc_watchdog_false_in_every_spelling_renders_no_watchdog(value):
    out = _rendered({}, pfc_watchdog=value)
    assert not out.get("failed"), out
    assert not [c for c in out["commands"] if "watchdog" in c or "pfc-wd" in c]


def test_a_bad_definition_fails_in_one_sentence():
    out = _rendered({"roce_switch_roce": {"lossless_priority": 9}})
    assert out["failed"] is True and "\n" not in out["msg"]
    assert "lossless_priority is 9" in out["msg"] and out["msg"].startswith("leaf-onyx: step 'validate'")
