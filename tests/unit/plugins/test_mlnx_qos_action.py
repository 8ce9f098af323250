"""The fabricops.fabric.mlnx_qos and roce_sysfs action plugins against the emulated host.

The module call (``_execute_module``) is replaced by what the module does on a host, run against
the lab's emulated mlnx_qos / cma_roce_* and sysfs: converge, same-value run changes nothing, check
mode reports and changes nothing, drift is found.
"""

from __future__ import annotations

import pytest
from unit.hostqos.emulated import DEVICE, NETDEV, host  # noqa: F401  (fixture)
from unit.plugins.actionrun import run_action

# the call shape of roles/roce_host/tasks: the port's planned dict as one config
QOS = {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "dscp2prio": {"26": 3, "48": 6}}
LOSSLESS = {"interface": NETDEV, "config": QOS}
ON3 = [None, None, None, True, None, None, None, None]
SYSFS = {"ecn_np": ON3, "ecn_rp": ON3, "traffic_class": 106, "rdma_cm_tos": 106, "roce_mode": 2}
KNOBS = {"netdev": NETDEV, "device": DEVICE, "port": 1, "config": SYSFS}


def test_mlnx_qos_converge_then_no_change(host):  # noqa: F811
    first, calls = run_action("mlnx_qos", host, LOSSLESS)
    assert first["changed"] is True and not first.get("failed")
    assert first["commands"] == [
        f"mlnx_qos -i {NETDEV} --trust dscp --pfc 0,0,0,1,0,0,0,0",
        f"mlnx_qos -i {NETDEV} --dscp2prio set,26,3",
        f"mlnx_qos -i {NETDEV} --dscp2prio set,48,6",
    ]
    assert first["before"]["trust"] == "pcp" and first["after"]["trust"] == "dscp"
    assert first["after"]["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert "trust: pcp" in first["diff"]["before"] and "trust: dscp" in first["diff"]["after"]
    assert len(calls) == 2  # read, then apply + read back
    second, calls = run_action("mlnx_qos", host, LOSSLESS)
    assert second["changed"] is False and second["commands"] == [] and len(calls) == 1
    assert second["diff"]["before"] == second["diff"]["after"]


def test_mlnx_qos_check_mode_reports_without_changing(host):  # noqa: F811
    result, calls = run_action("mlnx_qos", host, LOSSLESS, check_mode=True)
    assert result["changed"] is True and len(result["commands"]) == 3
    assert result["after"]["trust"] == "dscp"  # predicted
    assert all(not args["_commands"] for _, args in calls)
    assert ["mlnx_qos", "-i", NETDEV, "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0"] not in host.ran
    result, _ = run_action("mlnx_qos", host, LOSSLESS)  # still to do: check mode changed nothing
    assert result["changed"] is True


def test_mlnx_qos_drift_after_converge(host):  # noqa: F811
    run_action("mlnx_qos", host, LOSSLESS)
    host.run(["mlnx_qos", "-i", NETDEV, "--trust", "pcp"])
    result, _ = run_action("mlnx_qos", host, LOSSLESS, check_mode=True)
    assert result["changed"] is True
    assert result["commands"][0] == f"mlnx_qos -i {NETDEV} --trust dscp"


def test_mlnx_qos_bad_input_fails_before_reading(host):  # noqa: F811
    from ansible.errors import AnsibleActionFail

    with pytest.raises(AnsibleActionFail, match=f"{NETDEV}: pfc must be 8 values"):
        run_action(
            "mlnx_qos", host, {**LOSSLESS, "config": {**QOS, "pfc": [0, 0, 0, 0, 0, 0, 0, 0, 1]}}
        )


def test_mlnx_qos_unsupported_netdev_is_a_clear_failure(host):  # noqa: F811
    result, _ = run_action("mlnx_qos", host, {**LOSSLESS, "interface": "eth9"})
    assert result["failed"] is True and "not supported on your system" in result["msg"]


def test_roce_sysfs_converge_then_no_change(host):  # noqa: F811
    first, _ = run_action("roce_sysfs", host, KNOBS)
    assert first["changed"] is True
    assert first["changes"] == [
        f"/sys/class/infiniband/{DEVICE}/tc/1/traffic_class=106",
        f"cma_roce_tos -d {DEVICE} -p 1 -t 106",
    ]
    assert first["before"]["traffic_class"] is None and first["after"]["traffic_class"] == "106"
    assert "traffic_class: unset" in first["diff"]["before"]
    second, _ = run_action("roce_sysfs", host, KNOBS)
    assert second["changed"] is False and second["changes"] == []


def test_roce_sysfs_check_mode(host):  # noqa: F811
    result, calls = run_action("roce_sysfs", host, KNOBS, check_mode=True)
    assert result["changed"] is True and len(result["changes"]) == 2
    assert all(not args["_writes"] for _, args in calls)
    assert host.read(f"/sys/class/infiniband/{DEVICE}/tc/1/traffic_class") == ""


def test_mlnx_qos_compares_an_earlier_read_instead_of_reading_again(host):  # noqa: F811
    run_action("mlnx_qos", host, LOSSLESS)
    rc, out = host.run(["mlnx_qos", "-i", NETDEV])
    read = {"rc": rc, "stdout": out, "stderr": "", "cmd": ["mlnx_qos", "-i", NETDEV]}
    # a port as declared: no module run at all
    result, calls = run_action("mlnx_qos", host, {**LOSSLESS, "current": read})
    assert result["changed"] is False and result["commands"] == [] and calls == []
    # the earlier read is what is compared: drift it shows is planned from it, and applied once
    host.run(["mlnx_qos", "-i", NETDEV, "--trust", "pcp"])
    rc, stale = host.run(["mlnx_qos", "-i", NETDEV])
    result, calls = run_action("mlnx_qos", host, {**LOSSLESS, "current": {"rc": 0, "stdout": stale}})
    assert result["commands"][0] == f"mlnx_qos -i {NETDEV} --trust dscp"
    assert result["after"]["trust"] == "dscp"
    (only,) = calls  # no read first: the change, with the module's read back after it
    assert only[1]["_commands"][0][:2] == ["--trust", "dscp"]
    # a failed, empty or unreadable earlier read: the module reads the port itself
    for bad in ({"rc": 2, "stdout": "", "stderr": "mlnx_qos: not found"}, {"rc": 0, "stdout": ""},
                {"rc": 0, "stdout": "Priority trust state: banana"}, {}):
        result, calls = run_action("mlnx_qos", host, {**LOSSLESS, "current": bad})
        assert result["changed"] is False and [args["_commands"] for _, args in calls] == [[]], bad


def _probe(host, reads):  # noqa: F811
    """The role's host_read of the knobs roce_plan names (files base64, commands as command results)."""
    import base64

    files = {}
    for name, path in reads["files"].items():
        text = host.read(path) if host.exists(path) else None
        files[name] = {"path": path, "exists": text is not None, "encoding": "base64",
                       "content": base64.b64encode((text or "").encode()).decode()}
    commands = {}
    for name, argv in reads["commands"].items():
        rc, out = host.run(argv)
        commands[name] = {"cmd": argv, "rc": rc, "stdout": out.rstrip("\n"), "stderr": ""}
    return {"files": files, "commands": commands}


def _reads():
    """roce_plan's sysfs_reads for the port KNOBS declares (the action's own helper, as the role gets it)."""
    from unit.plugins.actionrun import load_plugin

    port = {"netdev": NETDEV, "device": DEVICE, "port": 1, "sysfs": SYSFS}
    return load_plugin("roce_plan")._sysfs_reads([port])


def test_roce_plan_names_every_read_roce_sysfs_makes(host):  # noqa: F811
    reads = _reads()
    _, calls = run_action("roce_sysfs", host, KNOBS, check_mode=True)
    (only,) = calls
    assert sorted(reads["files"].values()) == sorted(only[1]["_read_files"])
    assert sorted(reads["commands"].values()) == sorted(only[1]["_read_commands"])
    assert all(name == f"sysfs {path}" for name, path in reads["files"].items())
    assert all(name == f"sysfs {' '.join(argv)}" for name, argv in reads["commands"].items())


def test_roce_sysfs_compares_an_earlier_read_instead_of_reading_again(host):  # noqa: F811
    reads = _reads()
    run_action("roce_sysfs", host, KNOBS)
    # a port as declared: no module run at all
    result, calls = run_action("roce_sysfs", host, {**KNOBS, "current": _probe(host, reads)})
    assert result["changed"] is False and result["changes"] == [] and calls == []
    assert result["before"]["traffic_class"] == "106" and result["before"]["rdma_cm_tos"] == "106"
    # drift the earlier read shows is planned from it and applied once, then read back by the module
    tc = f"/sys/class/infiniband/{DEVICE}/tc/1/traffic_class"
    host.write(tc, "96")
    stale = _probe(host, reads)
    result, calls = run_action("roce_sysfs", host, {**KNOBS, "current": stale}, check_mode=True)
    assert result["changes"] == [f"{tc}=106"] and calls == []
    result, calls = run_action("roce_sysfs", host, {**KNOBS, "current": stale})
    assert result["changes"] == [f"{tc}=106"] and result["after"]["traffic_class"] == "106"
    (only,) = calls
    assert only[1]["_writes"] == [{"path": tc, "value": "106"}]
    assert host.read(tc) == "106"
    # a read missing, failed or not a host_read result: the module reads the port itself
    good = _probe(host, reads)
    some_file = next(iter(reads["files"]))
    some_cmd = next(iter(reads["commands"]))
    bad = [
        {},
        {"files": good["files"]},
        {"files": {k: v for k, v in good["files"].items() if k != some_file}, "commands": good["commands"]},
        {"files": good["files"], "commands": {**good["commands"], some_cmd: {"rc": 2, "stdout": "",
                                                                              "stderr": "not found"}}},
        {"files": good["files"], "commands": {**good["commands"], some_cmd: {"stdout": "106"}}},
        {"files": {**good["files"], some_file: {"path": "x", "exists": True, "content": "!!"}},
         "commands": good["commands"]},
        {"files": {**good["files"], some_file: {"failed": True}}, "commands": good["commands"]},
    ]
    for current in bad:
        result, calls = run_action("roce_sysfs", host, {**KNOBS, "current": current})
        assert result["changed"] is False and [args["_writes"] for _, args in calls] == [[]], current
