"""The safety rails: per run, per rolling hour (from the action log, pinned clock), cooldown,
allow-list, a partition's fraction and a rail's cap (both refuse the whole run: nothing drained)."""

from __future__ import annotations

import json
from datetime import timedelta

from act_fakes import NOW, FakeNode, FakeSlurm, iso, port_down, report, res, run_act

from fabricops.act.plan import Rails
from fabricops.act.table import DRAIN


def ofed(host: str) -> dict:
    """A host-wide fault (no port, so no rail)."""
    return res("hosts", "ofed_version", host, message=f"{host}: MLNX_OFED 23.10-1.1.9.0, want 24.10-1.1.4.0")


def log_lines(state, *records) -> None:
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(state / "act.log", "a") as fh:
        for when, action, node, mode in records:
            fh.write(json.dumps({"time": iso(when), "action": action, "node": node, "mode": mode}) + "\n")


def test_at_most_max_per_run_drained_the_rest_refused(tmp_path):
    slurm = FakeSlurm.cluster()
    run = run_act(report([ofed("gpu01"), ofed("gpu02"), ofed("gpu03")]), slurm, tmp_path, execute=True)
    assert run.status == 1
    assert run.targets(DRAIN, "done") == ["gpu01", "gpu02"]
    [refused] = run.actions(DRAIN, "refused")
    assert refused["node"] == "gpu03" and "--max-drain-per-run 2 reached" in refused["why"]
    assert sorted(slurm.drained()) == ["gpu01", "gpu02"]


def test_per_hour_counts_the_executed_drains_of_the_log(tmp_path):
    log_lines(
        tmp_path,
        (NOW - timedelta(minutes=20), "drain", "gpu10", "executed"),
        (NOW - timedelta(minutes=50), "drain", "gpu11", "executed"),
        (NOW - timedelta(minutes=70), "drain", "gpu12", "executed"),  # more than an hour ago
        (NOW - timedelta(minutes=5), "drain", "gpu13", "dry-run"),
    )  # a dry run drained nothing
    slurm = FakeSlurm.cluster()
    run = run_act(report([ofed("gpu01"), ofed("gpu02")]), slurm, tmp_path, execute=True)
    assert run.targets(DRAIN, "done") == ["gpu01"]
    [refused] = run.actions(DRAIN, "refused")
    assert "--max-drain-per-hour 3 reached (2 drained by fabricops in the last hour)" in refused["why"]
    assert run.status == 1


def test_cooldown_refuses_a_node_fabricops_acted_on_recently(tmp_path):
    log_lines(tmp_path, (NOW - timedelta(minutes=10), "resume", "gpu04", "executed"))
    slurm = FakeSlurm.cluster()
    run = run_act(report([port_down("gpu04")]), slurm, tmp_path, execute=True)
    [a] = run.actions(DRAIN)
    assert a["status"] == "refused" and "cooldown: fabricops resumed it 10 min ago" in a["why"]
    assert slurm.updates == [] and run.status == 1
    later = run_act(
        report([port_down("gpu04")], generated=NOW + timedelta(minutes=25)),
        slurm,
        tmp_path,
        now=NOW + timedelta(minutes=30),
        execute=True,
    )
    assert later.targets(DRAIN, "done") == ["gpu04"]


def test_the_allow_list_refuses_other_nodes(tmp_path):
    slurm = FakeSlurm.cluster()
    run = run_act(
        report([port_down("gpu03"), ofed("gpu12")]),
        slurm,
        tmp_path,
        execute=True,
        rails=Rails(allow=r"gpu0[1-4]"),
    )
    assert run.targets(DRAIN, "done") == ["gpu03"]
    [refused] = run.actions(DRAIN, "refused")
    assert refused["node"] == "gpu12" and "not in --allow 'gpu0[1-4]'" in refused["why"]
    assert list(slurm.drained()) == ["gpu03"]


def test_a_partition_past_its_fraction_refuses_the_whole_run(tmp_path):
    # 8 nodes, one drained by hand: two more would leave 3 of 8 (more than a quarter) out of service
    slurm = FakeSlurm.cluster(8, gpu08=FakeNode(flags={"DRAIN"}, reason="bad dimm"))
    doc = report(
        [ofed("gpu01"), ofed("gpu02"), port_down("gpu07", "mlx5_1/1")],
        hosts=[f"gpu{i:02d}" for i in range(1, 9)],
    )
    run = run_act(doc, slurm, tmp_path, execute=True, rails=Rails(max_per_run=5))
    assert run.status == 1
    assert run.doc["refused"].startswith(
        "refused: draining gpu01, gpu02, gpu07 would leave 4 of 8 nodes of partition gpu drained or down"
    )
    assert "a fabric-wide fault is not 3 node faults" in run.doc["refused"]
    assert slurm.updates == [] and slurm.drained() == {"gpu08": "bad dimm"}
    assert {a["status"] for a in run.actions(DRAIN)} == {"refused"}
    ok = run_act(
        report([ofed("gpu01")], hosts=[f"gpu{i:02d}" for i in range(1, 9)]),
        slurm,
        tmp_path / "b",
        execute=True,
    )
    assert ok.status == 0 and ok.targets(DRAIN, "done") == ["gpu01"]  # 2 of 8: a quarter, not more


def test_more_failing_hosts_on_one_rail_than_the_cap_refuse_the_whole_run(tmp_path):
    slurm = FakeSlurm.cluster()
    run = run_act(
        report([port_down(h) for h in ("gpu01", "gpu05", "gpu09")]),
        slurm,
        tmp_path,
        execute=True,
        rails=Rails(max_per_run=10, max_per_hour=10),
    )
    assert run.status == 1
    assert run.doc["refused"].startswith(
        "refused: 3 hosts fail on rail mlx5_0/1 (ib-leaf1) (gpu01, gpu05, gpu09)"
    )
    assert slurm.updates == []
    assert "REFUSED    refused: 3 hosts fail on rail" in run.out
    two_rails = run_act(
        report([port_down("gpu01"), port_down("gpu05"), port_down("gpu09", "mlx5_1/1")]),
        slurm,
        tmp_path / "b",
        rails=Rails(max_per_run=10, max_per_hour=10),
    )
    assert two_rails.status == 0 and len(two_rails.actions(DRAIN, "planned")) == 3


def test_dry_run_changes_nothing_prints_each_action_and_logs_it_as_dry_run(tmp_path):
    slurm = FakeSlurm.cluster()
    run = run_act(report([port_down("gpu03")]), slurm, tmp_path)
    assert run.status == 0 and slurm.updates == [] and slurm.drained() == {}
    line = next(ln for ln in run.out.splitlines() if ln.startswith("DRAIN"))
    assert 'gpu03  would drain (reason "fabricops: hca_port gpu03 mlx5_0/1")' in line
    assert "state Down, physical state Polling" in line  # the evidence
    [rec] = [json.loads(ln) for ln in (tmp_path / "act.log").read_text().splitlines()]
    assert (rec["mode"], rec["action"], rec["node"]) == ("dry-run", "drain", "gpu03")
    # a dry run is not an action for the rails: executing right after is not in cooldown
    assert run_act(report([port_down("gpu03")]), slurm, tmp_path, execute=True).status == 0
