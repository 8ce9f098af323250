"""Every action plugin validates its task options with Ansible's own argument-spec code.

Types are converted as a module's would be (``"false"`` from -e or k=v is false, ``ports=Eth1/1`` a
one-element list), and an unknown option or a wrong type fails in one sentence that names it,
before the host is contacted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail
from unit.hostqos.emulated import DEVICE, NETDEV, host  # noqa: F401  (fixture)
from unit.plugins.actionrun import PLUGINS, load_plugin, run_action

QOS = {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "dscp2prio": {"26": 3, "48": 6}}
PORT = {"port": 1, "link_layer": "Ethernet", "netdev": NETDEV, "state": "ACTIVE"}
HCAS = [{"name": DEVICE, "ports": [PORT]}]


def one_sentence(msg):
    return msg.endswith(".") and ". " not in msg.replace("e.g. ", "")


def test_mlnx_qos_unknown_option_is_named_and_nothing_runs(host):  # noqa: F811
    with pytest.raises(AnsibleActionFail) as err:
        run_action("mlnx_qos", host, {"interface": NETDEV, "config": QOS, "trsut": "dscp"})
    assert "mlnx_qos: unknown option(s) trsut" in str(err.value)
    assert host.ran == []
    with pytest.raises(AnsibleActionFail, match=r"unknown option\(s\) config.trsut"):
        run_action("mlnx_qos", host, {"interface": NETDEV, "config": {**QOS, "trsut": "dscp"}})


def test_mlnx_qos_the_old_unpacked_call_is_refused(host):  # noqa: F811
    """Ten unpacked fields became one config: the old shape must not silently manage nothing."""
    with pytest.raises(AnsibleActionFail) as err:
        run_action("mlnx_qos", host, {"interface": NETDEV, **QOS})
    assert "unknown option(s) dscp2prio, pfc, trust" in str(err.value)
    assert one_sentence(str(err.value))


def test_mlnx_qos_config_types_are_converted(host):  # noqa: F811
    """What a k=v task or a templated string gives (pfc as "0,0,0,1,...", cable_len as "3")."""
    result, _ = run_action(
        "mlnx_qos", host, {"interface": NETDEV, "config": {**QOS, "pfc": "0,0,0,1,0,0,0,0", "cable_len": "3"}}
    )
    assert not result.get("failed"), result
    assert result["after"]["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0] and result["after"]["cable_len"] == 3


def test_mlnx_qos_wrong_type_in_one_sentence(host):  # noqa: F811
    with pytest.raises(AnsibleActionFail) as err:
        run_action("mlnx_qos", host, {"interface": NETDEV, "config": {**QOS, "cable_len": "long"}})
    msg = str(err.value)
    assert msg.startswith("mlnx_qos: ") and "config" in msg and "cable_len" in msg and "int" in msg
    assert host.ran == []


def test_roce_sysfs_string_booleans_are_converted(host):  # noqa: F811
    """"false" from a template is false (a bool() of it would be True and write 1)."""
    off = ["false", None, None, "true", None, None, None, None]
    result, _ = run_action(
        "roce_sysfs",
        host,
        {"netdev": NETDEV, "device": DEVICE, "port": "1", "config": {"ecn_np": off, "ecn_rp": off}},
        check_mode=True,
    )
    assert not result.get("failed"), result
    assert result["port"] == 1
    np0 = f"/sys/class/net/{NETDEV}/ecn/roce_np/enable/0"
    changes = result["changes"]
    assert f"{np0}=0" in changes or host.read(np0) == "0"
    assert f"{np0}=1" not in changes


def test_roce_sysfs_bad_flag_and_bad_port_are_refused(host):  # noqa: F811
    bad = [None, None, None, "maybe", None, None, None, None]
    with pytest.raises(AnsibleActionFail, match=r"roce_sysfs: config.ecn_np\[3\] is 'maybe'; use true"):
        run_action("roce_sysfs", host, {"netdev": NETDEV, "device": DEVICE, "config": {"ecn_np": bad}})
    with pytest.raises(AnsibleActionFail) as err:
        run_action("roce_sysfs", host, {"netdev": NETDEV, "device": DEVICE, "port": "one"})
    assert "roce_sysfs: argument 'port' is of type str" in str(err.value)


def test_roce_sysfs_internal_options_cannot_be_set_by_a_task(host):  # noqa: F811
    with pytest.raises(AnsibleActionFail, match=r"unknown option\(s\) _writes"):
        run_action(
            "roce_sysfs",
            host,
            {"netdev": NETDEV, "device": DEVICE, "_writes": [{"path": "/sys/class/net/x", "value": 1}]},
        )


def no_module(calls):
    def run(*_a, **_k):
        raise AssertionError("roce_plan never calls a module")

    return run


def plan(args):
    return run_action("roce_plan", None, args, module=no_module)[0]


def test_roce_plan_plans_and_refuses_unknown_options():
    result = plan({"roce": {"dscp": "26"}, "hcas": HCAS})
    assert not result.get("failed"), result
    assert [p["netdev"] for p in result["ports"]] == [NETDEV]
    assert result["roce"]["dscp"] == 26
    result = plan({"roce": {}, "hcas": HCAS, "interface": [NETDEV]})
    assert result["failed"] is True
    assert result["msg"].startswith(
        "roce_plan: unknown option(s) interface (supported: hcas, interfaces, roce)"
    )
    result = plan({"roce": {}})
    assert result["failed"] is True and "hcas" in result["msg"]


def test_roce_plan_interfaces_in_key_value_form_is_one_netdev():
    """``interfaces=enp9s0`` (k=v) is the one netdev enp9s0, not the characters e, n, p, 9, s, 0."""
    result = plan({"hcas": HCAS, "interfaces": NETDEV})
    assert not result.get("failed"), result
    assert [p["netdev"] for p in result["ports"]] == [NETDEV]
    result = plan({"hcas": HCAS, "interfaces": "enp9s0"})
    assert result["failed"] is True and "names enp9s0, which" in result["msg"]


def test_roce_plan_model_errors_stay_one_sentence():
    result = plan({"roce": {"lossless_priority": 9}, "hcas": HCAS})
    assert result["msg"] == "fabricops_roce.lossless_priority is 9; it must be from 0 to 7."


def test_fabric_facts_converts_and_refuses():
    def module(calls):
        def run(module_name, module_args, task_vars=None, **_):
            calls.append(module_args)
            return {"failed": True, "msg": "stop here"}

        return run

    result, calls = run_action("fabric_facts", None, {"max_gids": "8"}, module=module)
    assert calls == [{"max_gids": 8}] and result["msg"] == "stop here"
    result, calls = run_action("fabric_facts", None, {"max_gid": 8}, module=module)
    assert calls == [] and result["failed"] is True
    assert result["msg"].startswith("fabric_facts: unknown option(s) max_gid (supported: max_gids)")
    result, calls = run_action("fabric_facts", None, {"max_gids": 0}, module=module)
    assert calls == [] and "max_gids is 0" in result["msg"]


def test_roce_switch_switch_settings_come_from_the_schema_and_convert():
    from fabricops.model import roce_schema as schema

    plugin = load_plugin("roce_switch")
    for name, entry in schema.switch_argument_spec().items():
        assert plugin.ARGUMENT_SPEC[name] == entry
    validate_args = plugin.validate_args
    args = validate_args({"pfc_watchdog": "false", "ports": "Eth1/1", "ets_lossless_percent": "60"})
    assert args["pfc_watchdog"] is False and args["ports"] == ["Eth1/1"]
    assert args["ets_lossless_percent"] == 60
    assert validate_args({"pfc_watchdog": False})["pfc_watchdog"] is False


@pytest.mark.parametrize("path", sorted(Path(PLUGINS).glob("*.py")), ids=lambda p: p.stem)
def test_no_action_plugin_reads_raw_task_args(path):
    """Each plugin validates (validate_options / ArgumentSpecValidator); none reads or bool()s raw args."""
    text = path.read_text()
    assert "validate_options(" in text or "ArgumentSpecValidator(" in text, path.name
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("bool", "int"):
            inner = ast.unparse(node.args[0]) if node.args else ""
            assert "_task.args" not in inner, f"{path.name}: {ast.unparse(node)}"
    uses = [ln for ln in text.splitlines() if "self._task.args" in ln]
    assert uses and all("validate" in ln for ln in uses), (path.name, uses)
