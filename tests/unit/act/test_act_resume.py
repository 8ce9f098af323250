"""Resume only what fabricops drained, only when a newer report passes it; never a node drained or
down by someone else; a node absent from Slurm is reported, not an error."""

from __future__ import annotations

from datetime import timedelta

from act_fakes import NOW, FakeNode, FakeSlurm, port_down, report, run_act

from fabricops.act.plan import RESUME
from fabricops.act.table import DRAIN


def test_drain_then_resume_after_a_newer_passing_run_hand_drained_node_untouched(tmp_path):
    slurm = FakeSlurm.cluster(gpu05=FakeNode(flags={"DRAIN"}, reason="bad dimm"))
    first = run_act(report([port_down("gpu03")]), slurm, tmp_path, execute=True)
    assert first.status == 0
    assert slurm.drained() == {"gpu03": "fabricops: hca_port gpu03 mlx5_0/1", "gpu05": "bad dimm"}
    assert slurm.updates == [
        ["scontrol", "update", "nodename=gpu03", "state=drain", "reason=fabricops: hca_port gpu03 mlx5_0/1"]
    ]
    # still failing: already drained, nothing to do
    again = run_act(
        report([port_down("gpu03")]), slurm, tmp_path, now=NOW + timedelta(minutes=5), execute=True
    )
    assert again.actions(DRAIN)[0]["status"] == "skipped" and len(slurm.updates) == 1
    # the fault cleared, a newer run passes every host
    later = NOW + timedelta(hours=1)
    passing = report([], generated=later - timedelta(minutes=1))
    run = run_act(passing, slurm, tmp_path, now=later, execute=True)
    assert run.status == 0
    assert run.targets(RESUME, "done") == ["gpu03"]
    assert slurm.updates[-1] == ["scontrol", "update", "nodename=gpu03", "state=resume"]
    assert slurm.drained() == {"gpu05": "bad dimm"}  # drained by hand: stays through all of it
    assert "RESUME     gpu03  resumed" in run.out


def test_no_resume_from_a_report_older_than_the_drain(tmp_path):
    slurm = FakeSlurm.cluster()
    run_act(report([port_down("gpu03")]), slurm, tmp_path, execute=True)
    old_pass = report(
        [], generated=NOW - timedelta(minutes=10), valid_for=timedelta(hours=2)
    )  # verified before the drain
    run = run_act(old_pass, slurm, tmp_path, now=NOW + timedelta(hours=1), execute=True)
    [a] = run.actions(RESUME)
    assert a["status"] == "skipped" and "not newer than the drain" in a["why"]
    assert "gpu03" in slurm.drained()


def test_no_resume_without_the_logs_record_of_the_drain(tmp_path):
    slurm = FakeSlurm.cluster(gpu03=FakeNode(flags={"DRAIN"}, reason="fabricops: hca_port gpu03 mlx5_0/1"))
    run = run_act(report([]), slurm, tmp_path, execute=True)
    [a] = run.actions(RESUME)
    assert a["status"] == "skipped" and "no record" in a["why"] and slurm.updates == []
    assert run.status == 0


def test_only_the_owned_prefix_is_ours(tmp_path):
    slurm = FakeSlurm.cluster(
        gpu03=FakeNode(flags={"DRAIN"}, reason="maintenance, see fabricops: later"),
        gpu04=FakeNode(flags={"DRAIN"}, reason="fabricopsX: not ours"),
        gpu06=FakeNode(state="DOWN", reason="Not responding"),
    )
    run = run_act(report([port_down("gpu06")]), slurm, tmp_path, execute=True)
    assert run.actions(RESUME) == [] and slurm.updates == []
    [a] = run.actions(DRAIN)
    assert a["status"] == "skipped" and "down by someone else ('Not responding')" in a["why"]


def test_a_node_absent_from_slurm_is_reported_not_an_error(tmp_path):
    slurm = FakeSlurm.cluster(4)
    run = run_act(report([port_down("gpu12")]), slurm, tmp_path, execute=True)
    assert run.status == 0 and slurm.updates == []
    [a] = run.actions(DRAIN)
    assert a["status"] == "skipped" and "not in Slurm" in a["why"]


def test_slurm_node_name_from_the_inventory(tmp_path):
    slurm = FakeSlurm({"node-a3": FakeNode()} | {f"node-a{i}": FakeNode() for i in range(4, 20)})
    names = {"gpu03": "node-a3"}
    run = run_act(
        report([port_down("gpu03")]), slurm, tmp_path, execute=True, node_of=lambda h: names.get(h, h)
    )
    assert run.targets(DRAIN, "done") == ["gpu03"] and slurm.drained() == {
        "node-a3": "fabricops: hca_port gpu03 mlx5_0/1"
    }


def test_a_failed_scontrol_is_exit_1(tmp_path):
    slurm = FakeSlurm.cluster()

    def flaky(argv):
        if argv[1:2] == ["update"]:
            return 1, "", "slurm_update error: Access/permission denied"
        return slurm(argv)

    from act_fakes import report as rep

    run = run_act(rep([port_down("gpu03")]), flaky, tmp_path, execute=True)  # type: ignore[arg-type]
    assert run.status == 1
    [a] = run.actions(DRAIN, "failed")
    assert "Access/permission denied" in a["why"]
