"""The action table: which failing result becomes which action, and a user's table validated."""

from __future__ import annotations

import pytest
from act_fakes import FakeNode, FakeSlurm, port_down, report, res, run_act

from fabricops.act.table import DRAIN, MONITOR, QUARANTINE, load_table, shipped
from fabricops.errors import BadInput


def _isl_failed_pair(a: str, b: str) -> dict:
    return res(
        "pairs",
        "ib_write_bw",
        f"{a}<->{b}",
        "mlx5_1/1<->mlx5_1/1",
        message=f"{a} mlx5_1/1 <-> {b} mlx5_1/1: ib_write_bw 201.3 Gb/s (>= 360)",
        details={
            "client": a,
            "server": b,
            "rail": 1,
            "explained_by": {"kind": "cable", "name": "ISL ib-leaf2:17<>ib-spine1:3"},
        },
    )


def test_a_host_port_fault_drains_that_node(tmp_path):
    slurm = FakeSlurm.cluster()
    run = run_act(report([port_down("gpu03")]), slurm, tmp_path)
    assert run.status == 0
    [drain] = run.actions(DRAIN)
    assert (drain["node"], drain["status"]) == ("gpu03", "planned")
    assert drain["reason"] == "fabricops: hca_port gpu03 mlx5_0/1"
    assert drain["argv"] == [
        "scontrol",
        "update",
        "nodename=gpu03",
        "state=drain",
        "reason=fabricops: hca_port gpu03 mlx5_0/1",
    ]
    assert run.actions(QUARANTINE) == []
    assert slurm.updates == []  # dry run


def test_a_cable_fault_quarantines_the_cable_and_drains_no_host(tmp_path):
    results = [_isl_failed_pair("gpu01", "gpu09"), _isl_failed_pair("gpu02", "gpu10")]
    slurm = FakeSlurm.cluster()
    run = run_act(report(results), slurm, tmp_path)
    assert run.actions(DRAIN) == []
    [q] = run.actions(QUARANTINE)
    assert q["target"] == "ISL ib-leaf2:17<>ib-spine1:3"
    assert len(q["evidence"]) == 2 and "201.3 Gb/s" in q["evidence"][0]["message"]
    assert "hosts at its ends stay in service" in q["why"]
    assert "QUARANTINE ISL ib-leaf2:17<>ib-spine1:3  would quarantine" in run.out


def test_a_cable_blames_the_cable_even_when_a_user_table_says_drain(tmp_path):
    table = "rules:\n  - {check: ib_write_bw, action: drain}\n"
    run = run_act(
        report([_isl_failed_pair("gpu01", "gpu09")]), FakeSlurm.cluster(), tmp_path, table_text=table
    )
    assert run.actions(DRAIN) == [] and run.targets(QUARANTINE) == ["ISL ib-leaf2:17<>ib-spine1:3"]


def test_a_consequence_maps_to_nothing(tmp_path):
    ipoib = res(
        "hosts", "ipoib", "gpu03", "ib0", message="gpu03 ib0: no carrier", caused_by="hca_port gpu03 mlx5_0/1"
    )
    run = run_act(report([port_down("gpu03"), ipoib]), FakeSlurm.cluster(), tmp_path)
    [drain] = run.actions(DRAIN)
    assert [e["check"] for e in drain["evidence"]] == ["hca_port"]
    assert run.actions(MONITOR) == []
    only_consequence = run_act(report([ipoib]), FakeSlurm.cluster(), tmp_path / "b")
    assert only_consequence.doc["actions"] == [] and "nothing to do" in only_consequence.out


def test_a_port_isolation_named_drains_that_host_only(tmp_path):
    r = res(
        "pairs",
        "ib_write_bw",
        "gpu07<->gpu12",
        "mlx5_0/1<->mlx5_0/1",
        details={
            "client": "gpu07",
            "server": "gpu12",
            "rail": 0,
            "explained_by": {
                "kind": "hca_port",
                "host": "gpu07",
                "device": "mlx5_0/1",
                "name": "host port gpu07 mlx5_0/1",
            },
        },
    )
    run = run_act(report([r]), FakeSlurm.cluster(), tmp_path)
    assert run.targets(DRAIN) == ["gpu07"]
    assert run.actions(DRAIN)[0]["reason"] == "fabricops: ib_write_bw gpu07 mlx5_0/1"


def test_a_failed_pair_drains_the_blamed_host_or_nobody(tmp_path):
    def pair(a, b):
        return res(
            "pairs",
            "ib_write_bw",
            f"{a}<->{b}",
            "mlx5_0/1<->mlx5_0/1",
            details={"client": a, "server": b, "rail": 0},
        )

    blamed = [{"host": "gpu05", "rail": 0, "peers": ["gpu06", "gpu07"]}]
    run = run_act(
        report([pair("gpu05", "gpu06"), pair("gpu07", "gpu05")], blamed=blamed), FakeSlurm.cluster(), tmp_path
    )
    assert run.targets(DRAIN) == ["gpu05"]
    assert run.actions(DRAIN)[0]["reason"] == "fabricops: ib_write_bw gpu05 mlx5_0/1"
    lone = run_act(report([pair("gpu01", "gpu02")]), FakeSlurm.cluster(), tmp_path / "b")
    assert lone.actions(DRAIN) == []
    assert "no host blamed" in lone.actions(MONITOR)[0]["why"]


def _switch_port(switch: str, port: str, peer: str) -> dict:
    return res(
        "switches",
        "switch_port",
        switch,
        port,
        message=f"{switch} {port} ({peer}): down (planned 400 Gb/s)",
        details={"kind": "host", "peer": peer},
    )


def test_a_switch_port_leaves_a_host_with_another_healthy_port_in_service(tmp_path):
    run = run_act(report([_switch_port("ib-leaf1", "swp3", "gpu03 mlx5_0/1")]), FakeSlurm.cluster(), tmp_path)
    assert run.targets(QUARANTINE) == ["ib-leaf1 swp3"]
    assert run.actions(DRAIN) == []
    assert "gpu03 stays in service (mlx5_1/1 healthy on the same fabric)" in run.actions(QUARANTINE)[0]["why"]


def test_a_switch_port_that_is_a_hosts_only_path_drains_it(tmp_path):
    one_rail = [
        {"index": 0, "name": "mlx5_0/1", "link_layer": "InfiniBand", "hosts": ["gpu03", "gpu04"]},
        {"index": 1, "name": "mlx5_1/1", "link_layer": "Ethernet", "hosts": ["gpu03", "gpu04"]},
    ]
    run = run_act(
        report([_switch_port("ib-leaf1", "swp3", "gpu03 mlx5_0/1")], rails=one_rail),
        FakeSlurm.cluster(),
        tmp_path,
    )
    assert run.targets(QUARANTINE) == ["ib-leaf1 swp3"]
    [drain] = run.actions(DRAIN)
    assert drain["node"] == "gpu03" and drain["reason"] == "fabricops: switch_port ib-leaf1 swp3"
    assert "only path" in drain["why"]


def test_the_other_port_failing_too_makes_it_the_only_path(tmp_path):
    results = [
        _switch_port("ib-leaf1", "swp3", "gpu03 mlx5_0/1"),
        res("hosts", "error_counters", "gpu03", "mlx5_1/1", severity="warning"),
    ]
    run = run_act(report(results), FakeSlurm.cluster(), tmp_path)
    assert run.targets(DRAIN) == ["gpu03"]


def test_an_isl_read_on_the_switches_is_a_cable(tmp_path):
    isl = res(
        "switches",
        "switch_port",
        "eth-leaf1<->eth-spine1",
        "swp31<->swp1",
        message="ISL eth-leaf1:swp31<>eth-spine1:swp1 down",
        details={"kind": "isl", "link": "eth-leaf1:swp31<>eth-spine1:swp1"},
    )
    run = run_act(report([isl]), FakeSlurm.cluster(), tmp_path)
    assert run.targets(QUARANTINE) == ["ISL eth-leaf1:swp31<>eth-spine1:swp1"] and run.actions(DRAIN) == []


def test_errors_warnings_and_fabric_results_are_monitored(tmp_path):
    results = [
        res("hosts", "hca_port", "gpu01", "mlx5_0/1", status="error", message="ibstat: not found"),
        res("hosts", "error_counters", "gpu02", "mlx5_0/1", severity="warning"),
        res("nccl", "nccl_busbw", "gpu01,gpu02", message="busbw 300 GB/s (>= 350)"),
    ]
    run = run_act(report(results), FakeSlurm.cluster(), tmp_path)
    assert run.actions(DRAIN) == [] and len(run.actions(MONITOR)) == 3
    assert run.status == 0


def test_a_user_table_is_tried_first_and_can_replace():
    nvlink = {
        "category": "gpus",
        "check": "nvlink",
        "component": "gpu",
        "severity": "critical",
        "status": "fail",
    }
    assert shipped().action_for(nvlink)[0] == DRAIN
    user = load_table("rules:\n  - {check: nvlink, action: monitor}\n")
    assert user.action_for(nvlink) == (MONITOR, "--actions rule 1")
    only = load_table("replace: true\ndefault: none\nrules: []\n")
    assert only.action_for(nvlink) == ("none", "default")


@pytest.mark.parametrize(
    "text, words",
    [
        ("rules:\n  - {check: hca_prot, action: drain}\n", "unknown check 'hca_prot'"),
        ("rules:\n  - {check: hca_port, action: reboot}\n", "unknown action 'reboot'"),
        ("rules:\n  - {component: nic, action: drain}\n", "unknown component 'nic'"),
        ("rules:\n  - {chek: hca_port, action: drain}\n", "unknown key 'chek'"),
        ("rules:\n  - {check: hca_port}\n", "no action"),
        ("default: reboot\n", "unknown action 'reboot'"),
        ("rules: [\n", "not YAML"),
        ("- 1\n", "not an action table"),
    ],
)
def test_a_bad_user_table_is_one_clear_sentence(text, words):
    with pytest.raises(BadInput, match=words.replace("(", r"\(")):
        load_table(text)


def test_hand_drained_node_is_not_touched_even_when_it_fails(tmp_path):
    slurm = FakeSlurm.cluster(gpu03=FakeNode(flags={"DRAIN"}, reason="bad dimm"))
    run = run_act(report([port_down("gpu03")]), slurm, tmp_path, execute=True)
    [drain] = run.actions(DRAIN)
    assert drain["status"] == "skipped" and "by someone else ('bad dimm')" in drain["why"]
    assert slurm.updates == [] and slurm.drained() == {"gpu03": "bad dimm"}


def test_a_switch_that_could_not_be_read_quarantines_nothing(tmp_path):
    unread = res(
        "switches",
        "switch_port",
        "eth-leaf1",
        "swp3",
        status="error",
        message="eth-leaf1 swp3 (gpu03 mlx5_0/1): not checked: SSH timed out",
        details={"kind": "host", "peer": "gpu03 mlx5_0/1", "no_verdict": True},
    )
    run = run_act(report([unread]), FakeSlurm.cluster(), tmp_path)
    assert run.actions(QUARANTINE) == [] and run.actions(DRAIN) == [] and len(run.actions(MONITOR)) == 1


def test_a_missing_imex_channel_drains_the_tray_and_a_domain_verdict_is_monitored(tmp_path):
    """IMEX channel0 gone (after a reboot without NVreg_CreateImexChannel0=1): every multi-node NVLink
    job on that tray fails, so the tray leaves service. The domain's verdict spans its trays (the one
    that is down is in its message): a person decides."""
    results = [
        res("gpus", "imex_channel", "gpu03", "channel0", message="gpu03: IMEX channel0 is missing"),
        res("gpus", "imex_domain", "gpu01,gpu02,gpu03,gpu04", "nvl72-01",
            component={"kind": "fabric", "name": "nvl72-01"}, message="nvl72-01: gpu04 is down"),
    ]
    run = run_act(report(results), FakeSlurm.cluster(), tmp_path)
    [drain] = run.actions(DRAIN)
    assert (drain["node"], drain["reason"]) == ("gpu03", "fabricops: imex_channel gpu03")
    assert len(run.actions(MONITOR)) == 1
