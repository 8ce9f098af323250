"""fabricops.hostqos.knobs: the RoCE sysfs / rdma_cm knob table, planned against the emulated host."""

from __future__ import annotations

import pytest
from unit.hostqos.emulated import DEVICE, NETDEV, host  # noqa: F401  (fixture)

from fabricops.hostqos import knobs as kb
from fabricops.hostqos.knobs import KnobError

ON3 = [None, None, None, True, None, None, None, None]
LOSSLESS = {
    "ecn_np": ON3,
    "ecn_rp": ON3,
    "cnp_dscp": 48,
    "cnp_priority": 6,
    "traffic_class": 106,
    "rdma_cm_tos": 106,
    "roce_mode": 2,
}


def read(host, table):  # noqa: F811
    """What the roce_sysfs module returns for the table's reads."""
    spec = kb.read_spec(table)
    files = {p: host.read(p) for p in spec["files"]}
    commands = []
    for argv in spec["commands"]:
        rc, out = host.run(argv)
        commands.append({"argv": argv, "rc": rc, "stdout": out, "stderr": ""})
    return {"files": files, "commands": commands}


def apply(host, todo):  # noqa: F811
    for k in todo:
        w = k.write()
        if "path" in w:
            host.write(w["path"], w["value"])
        else:
            assert host.run(w["argv"])[0] == 0


def test_table_paths_and_commands():
    table = kb.knobs_for(NETDEV, DEVICE, 1, LOSSLESS)
    by = {k.name: k for k in table}
    assert by["ecn_np[3]"].path == f"/sys/class/net/{NETDEV}/ecn/roce_np/enable/3"
    assert by["ecn_rp[3]"].path == f"/sys/class/net/{NETDEV}/ecn/roce_rp/enable/3"
    assert by["cnp_priority"].path == f"/sys/class/net/{NETDEV}/ecn/roce_np/cnp_802p_prio"
    assert by["traffic_class"].path == f"/sys/class/infiniband/{DEVICE}/tc/1/traffic_class"
    assert by["rdma_cm_tos"].write_argv == ("cma_roce_tos", "-d", DEVICE, "-p", "1", "-t", "106")
    assert by["roce_mode"].write_argv == ("cma_roce_mode", "-d", DEVICE, "-p", "1", "-m", "2")
    assert "ecn_np[0]" not in by  # None = unmanaged
    assert not any("tcp_ecn" in (k.path or "") for k in table)


def test_fresh_host_plans_traffic_class_and_tos_only(host):  # noqa: F811
    table = kb.knobs_for(NETDEV, DEVICE, 1, LOSSLESS)
    values, warnings = kb.values_from(NETDEV, table, read(host, table))
    assert warnings == []
    # mlx5 defaults: DCQCN on everywhere, CNP 48/6, RoCE v2; ToS and traffic class unset
    assert values["traffic_class"] is None and values["rdma_cm_tos"] == "0" and values["roce_mode"] == "2"
    todo = kb.plan(table, values)
    assert [k.name for k in todo] == ["traffic_class", "rdma_cm_tos"]
    apply(host, todo)
    after, _ = kb.values_from(NETDEV, table, read(host, table))
    assert kb.plan(table, after) == [] and kb.verify(NETDEV, table, after) == []


def test_each_knob_drift_and_same_value_twin(host):  # noqa: F811
    want = {**LOSSLESS, "ecn_np": [False] * 3 + [True] + [False] * 4}
    table = kb.knobs_for(NETDEV, DEVICE, 1, want)
    values, _ = kb.values_from(NETDEV, table, read(host, table))
    todo = kb.plan(table, values)
    assert {k.name for k in todo} == {f"ecn_np[{p}]" for p in (0, 1, 2, 4, 5, 6, 7)} | {
        "traffic_class",
        "rdma_cm_tos",
    }
    assert all(k.desired == "0" for k in todo if k.name.startswith("ecn_np"))
    apply(host, todo)
    # drift one knob of each kind, then only that one is planned
    host.write(f"/sys/class/net/{NETDEV}/ecn/roce_rp/enable/3", "0")
    host.write(f"/sys/class/net/{NETDEV}/ecn/roce_np/cnp_dscp", "46")
    host.run(["cma_roce_mode", "-d", DEVICE, "-p", "1", "-m", "1"])
    values, _ = kb.values_from(NETDEV, table, read(host, table))
    assert sorted(k.name for k in kb.plan(table, values)) == ["cnp_dscp", "ecn_rp[3]", "roce_mode"]
    assert kb.verify(NETDEV, table, values) == [
        f"{NETDEV}: ecn_rp[3] is 0, want 1",
        f"{NETDEV}: cnp_dscp is 46, want 48",
        f"{NETDEV}: roce_mode is 1, want 2",
    ]
    assert "roce_mode: 1\n" in kb.render(table, values)


def test_traffic_class_formats():
    assert kb._int_text("Global tclass=106") == "106"
    assert kb._int_text("106\n") == "106"
    assert kb._int_text("") is None
    assert kb._int_text("Global tclass=-1") is None
    assert kb._roce_mode("IB/RoCE v1") == "1" and kb._roce_mode("RoCE v2") == "2"


def test_missing_required_file_fails_naming_netdev_and_knob():
    table = kb.knobs_for(NETDEV, DEVICE, 1, {"ecn_np": ON3})
    with pytest.raises(KnobError, match=rf"{NETDEV}: ecn_np\[3\] cannot be read: .* is absent"):
        kb.values_from(NETDEV, table, {"files": {table[0].path: None}, "commands": []})


def test_missing_optional_file_is_skipped_with_warning():
    table = kb.knobs_for(NETDEV, DEVICE, 1, {"cnp_dscp": 48})
    values, warnings = kb.values_from(NETDEV, table, {"files": {table[0].path: None}, "commands": []})
    assert values == {} and kb.plan(table, values) == []
    assert "cnp_dscp" in warnings[0] and "skipped" in warnings[0]


def test_failed_read_command():
    table = kb.knobs_for(NETDEV, DEVICE, 1, {"roce_mode": 2})
    raw = {
        "files": {},
        "commands": [
            {
                "argv": list(table[0].read_argv),
                "rc": 1,
                "stdout": "Error: failed to find device mlx5_2 port 1\n",
            }
        ],
    }
    with pytest.raises(KnobError, match=r"roce_mode cannot be read .*failed to find device"):
        kb.values_from(NETDEV, table, raw)


def test_bad_want():
    with pytest.raises(KnobError, match="8 priorities"):
        kb.knobs_for(NETDEV, DEVICE, 1, {"ecn_np": [True]})
    with pytest.raises(KnobError, match="roce_mode must be 1 or 2"):
        kb.knobs_for(NETDEV, DEVICE, 1, {"roce_mode": 3})
