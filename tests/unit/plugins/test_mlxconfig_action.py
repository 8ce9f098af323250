# SPDX-License-Identifier: Apache-2.0
"""The fabricops.fabric.mlxconfig action plugin against a NIC that keeps NVCONFIG like the real one.

The module call (``_execute_module``) is replaced by what the module does on a host: ``mlxconfig
-d DEV -y set K=V ...`` changes the next-boot values only, ``mlxconfig -d DEV -e q`` prints the
Default / Current / Next Boot columns (the layout of mstflint mlxconfig/mlxcfg_ui.cpp), an unknown
parameter is refused with a ``-E-`` line, and a firmware reset makes current = next. Converge,
same-value run changes nothing, check mode reports and changes nothing, reset pending is reported,
unknown keys and bad values are refused before anything runs.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleActionFail
from unit.plugins.actionrun import run_action

BDF = "0000:41:00.0"


class Nic:
    """NVCONFIG of one device: default, current (running) and next-boot values as mlxconfig prints them."""

    NAMES = {"ATS_ENABLED": ("False", "True"), "ADVANCED_PCI_SETTINGS": ("False", "True")}

    def __init__(self):
        self.default = {"ATS_ENABLED": "0", "ADVANCED_PCI_SETTINGS": "0", "CNP_DSCP_P1": "48",
                        "LINK_TYPE_P1": "1"}
        self.current = dict(self.default)
        self.next = dict(self.default)
        self.ran = []

    def show(self, key, value):
        if key in self.NAMES:
            return f"{self.NAMES[key][int(value)]}({value})"
        if key.startswith("LINK_TYPE"):
            return {"1": "IB(1)", "2": "ETH(2)"}[value]
        return value

    def query(self):
        lines = ["", "Device #1:", "----------", "", "Device type:        ConnectX7",
                 "Name:               MCX75310AAS-NEA_Ax", "Description:        NVIDIA ConnectX-7 HHHL adapter",
                 f"Device:             {BDF}", "",
                 "Configurations:                                          Default             Current             Next Boot"]
        for key in sorted(self.default):
            vals = [self.show(key, d[key]) for d in (self.default, self.current, self.next)]
            mark = "*" if vals[2] != vals[0] or vals[2] != vals[1] else " "
            lines.append(f"{mark}        {key:<48}{vals[0]:<20}{vals[1]:<20}{vals[2]}")
        lines.append("The '*' shows parameters with next value different from default/current value.")
        return "\n".join(lines) + "\n"

    def set(self, settings):
        for s in settings:
            key, _, value = s.partition("=")
            if key not in self.default:
                return 3, f"-E- The Device doesn't support {key} parameter\n"
        for s in settings:
            key, _, value = s.partition("=")
            self.next[key] = {"TRUE": "1", "FALSE": "0"}.get(value.upper(), value)
        return 0, "Apply new Configuration? (y/n) [n] : y\nApplying... Done!\n-I- Please reboot machine to load new configurations.\n"

    def reset(self):
        self.current = dict(self.next)


@pytest.fixture
def nic():
    return Nic()


def module_for(nic):
    def make(calls):
        def run(module_name, module_args, task_vars=None, **_):
            calls.append(module_args)
            assert module_name == "fabricops.fabric.mlxconfig" and module_args["device"] == BDF
            if module_args["_set"]:
                nic.ran.append(module_args["_set"])
                rc, out = nic.set(module_args["_set"])
                if rc:
                    return {"failed": True, "msg": f"rc {rc}", "stdout": out}
            return {"stdout": nic.query(), "changed": bool(module_args["_set"])}

        return run

    return make


def act(nic, config, check_mode=False, device=BDF):
    return run_action("mlxconfig", None, {"device": device, "config": config}, check_mode=check_mode,
                      module=module_for(nic))


ATS_ON = {"ATS_ENABLED": True, "CNP_DSCP_P1": 48}


def test_converge_then_no_change_then_reset_clears_pending(nic):
    first, calls = act(nic, ATS_ON)
    assert not first.get("failed"), first
    assert first["changed"] is True and first["commands"] == [f"mlxconfig -d {BDF} -y set ATS_ENABLED=1"]
    assert [c["_set"] for c in calls] == [[], ["ATS_ENABLED=1"]]
    assert first["next_boot"]["ATS_ENABLED"] == "True(1)" and first["current"]["ATS_ENABLED"] == "False(0)"
    assert first["reset_pending"] == ["ATS_ENABLED"]
    assert first["diff"]["before"] == "ATS_ENABLED=False(0)\nCNP_DSCP_P1=48\n"
    assert first["diff"]["after"] == "ATS_ENABLED=True(1)\nCNP_DSCP_P1=48\n"
    second, calls = act(nic, ATS_ON)
    assert second["changed"] is False and second["commands"] == [] and len(calls) == 1
    assert second["reset_pending"] == ["ATS_ENABLED"]  # still waiting for the reset, not set again
    assert nic.ran == [["ATS_ENABLED=1"]]
    nic.reset()
    third, _ = act(nic, ATS_ON)
    assert third["changed"] is False and third["reset_pending"] == []


def test_check_mode_reports_without_changing(nic):
    result, calls = act(nic, ATS_ON, check_mode=True)
    assert result["changed"] is True and result["commands"] == [f"mlxconfig -d {BDF} -y set ATS_ENABLED=1"]
    assert all(not c["_set"] for c in calls) and nic.ran == []
    assert result["reset_pending"] == ["ATS_ENABLED"]
    assert "ATS_ENABLED=False(0)" in result["diff"]["before"] and "ATS_ENABLED=1" in result["diff"]["after"]
    assert act(nic, ATS_ON)[0]["changed"] is True  # check mode changed nothing


def test_reset_pending_from_an_earlier_set_is_reported_in_check_mode(nic):
    nic.next["ATS_ENABLED"] = "1"  # someone set it, no reset yet
    result, _ = act(nic, ATS_ON, check_mode=True)
    assert result["changed"] is False and result["reset_pending"] == ["ATS_ENABLED"]


def test_drift_after_converge_is_found(nic):
    act(nic, ATS_ON)
    nic.reset()
    nic.next["ATS_ENABLED"] = nic.current["ATS_ENABLED"] = "0"  # set back and reset by hand
    result, _ = act(nic, ATS_ON, check_mode=True)
    assert result["changed"] is True and result["commands"] == [f"mlxconfig -d {BDF} -y set ATS_ENABLED=1"]


def test_unknown_key_is_refused_before_anything_is_set(nic):
    result, calls = act(nic, {"ATS_ENABLED": 1, "NO_SUCH_PARAM": 1})
    assert result["failed"] is True and "NO_SUCH_PARAM" in result["msg"] and "nothing was set" in result["msg"]
    assert nic.ran == [] and len(calls) == 1


def test_set_that_does_not_take_fails(nic):
    nic.set = lambda settings: (0, "Applying... Done!\n")  # says done, keeps nothing
    result, _ = act(nic, ATS_ON)
    assert result["failed"] is True and "does not hold ATS_ENABLED=1 (reads False(0))" in result["msg"]


@pytest.mark.parametrize("args, words", [
    ({"device": BDF, "config": {"ats_enabled": 1}}, "not an mlxconfig parameter name"),
    ({"device": BDF, "config": {"ATS_ENABLED": "1;reboot"}}, "use a number"),
    ({"device": BDF, "config": {"ATS_ENABLED": "$(id)"}}, "use a number"),
    ({"device": "mlx5_0", "config": {}}, "not a PCI address"),
    ({"device": BDF, "config": {}, "_set": ["ATS_ENABLED=1"]}, "unknown option(s) _set"),
    ({"device": BDF, "confg": {}}, "unknown option(s) confg"),
])
def test_bad_input_fails_before_reading(nic, args, words):
    calls = []

    def make(c):
        def run(*_a, **_k):
            calls.append(1)
            raise AssertionError("the host must not be contacted")

        return run

    with pytest.raises(AnsibleActionFail) as err:
        run_action("mlxconfig", None, args, module=make)
    assert words in str(err.value) and calls == []
