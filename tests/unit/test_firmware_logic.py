# SPDX-License-Identifier: Apache-2.0
"""fabricops.firmware: declared settings, presets, the mlxconfig plan, the firmware plan that cannot
loop, and the reset plan that needs consent. Query dicts have the shape of
fabricops.parsers.mlxconfig.parse_query (SPEC-20 A1), firmware records that of
fabricops.parsers.mlxfwmanager.parse_query (A2)."""

from __future__ import annotations

import pytest

from fabricops import firmware as fw
from fabricops.firmware import FirmwareInputError

PIN = "28.43.1014"
OLD = "28.39.1002"
PSID = "MT_0000000838"
IMAGE = {"url": "http://198.51.100.1:8080/firmware/fw.bin", "sha256": "a" * 64}


def one_sentence(msg):
    return msg.endswith(".") and ". " not in msg


def query(rows, columns=("default", "current", "next")):
    configs = {}
    for key, (current, nxt) in rows.items():
        configs[key] = {"default": "0", "current": current, "next": nxt, "modified": current != nxt}
        if "current" not in columns:
            del configs[key]["current"]
    return {"device": "41:00.0", "device_type": "ConnectX7", "name": None, "description": None,
            "columns": list(columns), "configs": configs}


def record(burned, running=None, psid=PSID, pci="0000:41:00.0"):
    versions = {"FW": {"current": burned, "available": None, "running": running}}
    return {"device_type": "ConnectX7", "psid": psid, "pci": pci, "versions": versions, "status": "x"}


# -- declared / presets ---------------------------------------------------------------------------

def test_presets_have_the_documented_keys():
    assert set(fw.PRESETS) >= {"gpudirect", "roce", "link_type_ib", "link_type_eth"}
    assert {"ATS_ENABLED", "ADVANCED_PCI_SETTINGS", "MAX_ACC_OUT_READ"} <= set(fw.PRESETS["gpudirect"])
    assert fw.PRESETS["roce"]["ROCE_CC_PRIO_MASK_P1"] == "255"
    assert fw.PRESETS["roce"]["CNP_DSCP_P1"] == "4" and fw.PRESETS["roce"]["CNP_802P_PRIO_P1"] == "6"
    assert fw.PRESETS["link_type_ib"] == {"LINK_TYPE_P1": "1", "LINK_TYPE_P2": "1"}
    for name, config in fw.PRESETS.items():
        for key, value in config.items():
            assert fw.check_key(name, key) == key and fw.check_value(name, value) == value


def test_later_wins_presets_config_then_device():
    got = fw.declared(["gpudirect", "roce"], {"ATS_ENABLED": True, "CNP_DSCP_P1": 26},
                      {"mlx5_1": {"CNP_DSCP_P1": "48"}}, "mlx5_1", ports=2)
    assert got["ATS_ENABLED"] == "1" and got["CNP_DSCP_P1"] == "48" and got["CNP_DSCP_P2"] == "4"
    other = fw.declared(["roce"], {"CNP_DSCP_P1": 26}, {"mlx5_1": {"CNP_DSCP_P1": "48"}}, "mlx5_0", ports=2)
    assert other["CNP_DSCP_P1"] == "26"


def test_single_port_device_drops_p2_keys():
    got = fw.declared(["link_type_eth", "roce"], {}, {}, "mlx5_0", ports=1)
    assert got["LINK_TYPE_P1"] == "2" and not any(k.endswith("_P2") for k in got)


def test_values_are_normalised_for_mlxconfig_set():
    got = fw.declared([], {"A": False, "B": "True(1)", "C": "0x10", "D": "ETH", "E[3]": 7}, {}, "mlx5_0")
    assert got == {"A": "0", "B": "1", "C": "0x10", "D": "ETH", "E[3]": "7"}


@pytest.mark.parametrize("presets, config, device_config, words", [
    (["nope"], {}, {}, "not a preset"),
    ("gpudirect", {}, {}, "a list"),
    (["roce", "link_type_ib"], {}, {}, "contradict"),
    (["link_type_ib", "link_type_eth"], {}, {}, "contradict"),
    ([], {"ats_enabled": 1}, {}, "not an mlxconfig parameter name"),
    ([], {"ATS_ENABLED;reboot": 1}, {}, "not an mlxconfig parameter name"),
    ([], {"ATS_ENABLED": "1 2"}, {}, "use a number"),
    ([], {"ATS_ENABLED": "$(id)"}, {}, "use a number"),
    ([], {"ATS_ENABLED": -1}, {}, "use a number"),
    ([], {}, {"../x": {}}, "not an HCA name"),
    ([], {}, {"mlx5_0": {"X": "a\nb"}}, "use a number"),
])
def test_bad_declarations_are_one_sentence(presets, config, device_config, words):
    with pytest.raises(FirmwareInputError) as err:
        fw.declared(presets, config, device_config, "mlx5_0")
    assert words in str(err.value) and one_sentence(str(err.value))


# -- config_plan ----------------------------------------------------------------------------------

def test_same_compares_numbers_then_names():
    assert fw.same("True(1)", "1") and fw.same("IB(1)", "1") and fw.same("0x10", "16")
    assert fw.same("ETH(2)", "ETH") and fw.same("True(1)", "true") and not fw.same("False(0)", "1")


def test_config_plan_sets_only_what_differs_at_next_boot():
    q = query({"ATS_ENABLED": ("True(1)", "True(1)"), "CNP_DSCP_P1": ("4", "4"), "LINK_TYPE_P1": ("IB(1)", "IB(1)")})
    plan = fw.config_plan({"ATS_ENABLED": "0", "CNP_DSCP_P1": "4", "LINK_TYPE_P1": "IB"}, q)
    assert plan["set"] == {"ATS_ENABLED": "0"}
    assert plan["reset_pending"] == ["ATS_ENABLED"]  # after set, next holds it but current does not
    assert plan["ok"] == ["CNP_DSCP_P1", "LINK_TYPE_P1"] and plan["unknown"] == []


def test_config_plan_next_already_set_is_reset_pending_not_set():
    q = query({"ATS_ENABLED": ("True(1)", "False(0)")})
    plan = fw.config_plan({"ATS_ENABLED": "0"}, q)
    assert plan["set"] == {} and plan["reset_pending"] == ["ATS_ENABLED"] and plan["ok"] == []


def test_config_plan_current_right_next_wrong_is_a_set_only():
    q = query({"ATS_ENABLED": ("False(0)", "True(1)")})
    plan = fw.config_plan({"ATS_ENABLED": "0"}, q)
    assert plan["set"] == {"ATS_ENABLED": "0"} and plan["reset_pending"] == []


def test_config_plan_refuses_unknown_keys_and_defers_hidden_pci_keys():
    q = query({"ATS_ENABLED": ("False(0)", "False(0)")})
    assert fw.config_plan({"NO_SUCH_KEY": "1"}, q)["unknown"] == ["NO_SUCH_KEY"]
    q = query({"ADVANCED_PCI_SETTINGS": ("False(0)", "False(0)")})
    plan = fw.config_plan({"ADVANCED_PCI_SETTINGS": "1", "MAX_ACC_OUT_READ": "0"}, q)
    assert plan["unknown"] == [] and plan["deferred"] == ["MAX_ACC_OUT_READ"]
    assert plan["set"] == {"ADVANCED_PCI_SETTINGS": "1"} and plan["reset_pending"] == ["ADVANCED_PCI_SETTINGS"]
    # once ADVANCED_PCI_SETTINGS is current, a key still missing is unknown (refused)
    q = query({"ADVANCED_PCI_SETTINGS": ("True(1)", "True(1)")})
    plan = fw.config_plan({"ADVANCED_PCI_SETTINGS": "1", "MAX_ACC_OUT_READ": "0"}, q)
    assert plan["unknown"] == ["MAX_ACC_OUT_READ"] and plan["deferred"] == []


def test_config_plan_without_current_column_fails_closed():
    q = query({"ATS_ENABLED": ("x", "False(0)")}, columns=("next",))
    plan = fw.config_plan({"ATS_ENABLED": "0"}, q)
    assert plan["reset_pending"] == ["ATS_ENABLED"] and plan["ok"] == []


# -- fw_plan: the rule that cannot loop -----------------------------------------------------------

def test_fw_plan_burned_but_not_running_is_reset_never_burn():
    plan = fw.fw_plan({PSID: PIN}, [record(PIN, running=OLD)], {PSID: IMAGE})
    assert plan[0]["action"] == "reset" and plan[0]["burned"] == PIN and plan[0]["running"] == OLD


def test_fw_plan_each_action():
    pins = {PSID: PIN}
    assert fw.fw_plan(pins, [record(PIN)], {PSID: IMAGE})[0]["action"] == "none"
    assert fw.fw_plan(pins, [record(OLD)], {PSID: IMAGE})[0]["action"] == "burn"
    assert fw.fw_plan(pins, [record(OLD)], {})[0]["action"] == "no_image"
    assert fw.fw_plan({}, [record(OLD)], {})[0]["action"] == "unpinned"
    assert fw.fw_plan(pins, [record(OLD, psid="MT_0000000999")], {})[0]["action"] == "unpinned"
    # an older image burned over a running pin: burn the pin again (burned is what boots next)
    assert fw.fw_plan(pins, [record(OLD, running=PIN)], {PSID: IMAGE})[0]["action"] == "burn"


def test_fw_plan_sequence_burns_once():
    """burn -> (burned == pin, running old) reset -> (running == pin) none: one burn in all."""
    pins, images = {PSID: PIN}, {PSID: IMAGE}
    actions = []
    state = {"burned": OLD, "running": OLD}
    for _ in range(4):
        action = fw.fw_plan(pins, [record(state["burned"], running=state["running"])], images)[0]["action"]
        actions.append(action)
        if action == "burn":
            state["burned"] = PIN
        elif action == "reset":
            state["running"] = state["burned"]
    assert actions == ["burn", "reset", "none", "none"]


@pytest.mark.parametrize("pins, images, words", [
    ({"psid;x": PIN}, {}, "not a PSID"),
    ({PSID: "latest"}, {}, "firmware version"),
    ({PSID: PIN}, {PSID: {"url": "http://x/fw.bin"}}, "sha256"),
])
def test_fw_plan_bad_pins(pins, images, words):
    with pytest.raises(FirmwareInputError) as err:
        fw.fw_plan(pins, [], images)
    assert words in str(err.value) and one_sentence(str(err.value))


# -- reset_plan: consent --------------------------------------------------------------------------

LEVELS = {"levels": [{"level": 3, "description": "Driver restart and PCI reset", "supported": True,
                      "default": True}]}
NO_L3 = {"levels": [{"level": 3, "description": "Driver restart and PCI reset", "supported": False,
                     "default": False}]}
DEV = "0000:41:00.0"


def test_reset_plan_nothing_pending():
    assert fw.reset_plan([], allow_reset=True)["action"] == "none"


def test_reset_plan_without_consent_is_pending():
    plan = fw.reset_plan([DEV], allow_reset=False, allow_reboot=True, levels={DEV: LEVELS})
    assert plan["action"] == "pending" and "nic_firmware_allow_reset" in plan["message"]


def test_reset_plan_with_consent():
    plan = fw.reset_plan([DEV, DEV], allow_reset=True, levels={DEV: LEVELS})
    assert plan == {"action": "mlxfwreset", "level": 3, "message": plan["message"]}
    assert fw.reset_plan([DEV], True, "mlxfwreset", True, {DEV: NO_L3})["action"] == "reboot"
    assert fw.reset_plan([DEV], True, "mlxfwreset", False, {DEV: NO_L3})["action"] == "refuse"
    assert fw.reset_plan([DEV], True, "mlxfwreset", False, {})["action"] == "refuse"  # no evidence
    assert fw.reset_plan([DEV], True, "reboot", True)["action"] == "reboot"
    assert fw.reset_plan([DEV], True, "reboot", False)["action"] == "refuse"
    with pytest.raises(FirmwareInputError):
        fw.reset_plan([DEV], True, "powercycle")
