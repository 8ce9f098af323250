"""A stale verdict never drives an action; the action log is private and append-only; the command's
exit statuses and one-sentence errors (through the same handler as every fabricops command)."""

from __future__ import annotations

import json
import os
import stat
from datetime import timedelta

import pytest
from act_fakes import NOW, FakeSlurm, port_down, report, res, run_act

from fabricops.act import cli as act_cli
from fabricops.act.slurm import Slurm
from fabricops.act.verdict import check_report
from fabricops.errors import BadInput, CouldNotRun


@pytest.mark.parametrize(
    "doc, words",
    [
        (
            report([port_down("gpu03")], generated=NOW - timedelta(hours=2)),
            "stale: valid until 2026-12-06T11:00:00Z",
        ),
        (report([port_down("gpu03")], valid_for=None), "carries no valid_until; give --max-age"),
        (report([port_down("gpu03")], generated=None), "carries no valid_until"),
        (
            report([port_down("gpu03")], schema="fabricops.verify/9"),
            "schema 'fabricops.verify/9' is not one act reads",
        ),
        (report([port_down("gpu03")], exit_status=4), "no verdict there (exit status 4)"),
        (report([], results=[]), "holds no results"),
        (report([port_down("gpu03")], generated=NOW + timedelta(hours=1)), "lies in the future"),
    ],
)
def test_a_report_that_must_not_drive_actions_is_refused(doc, words):
    with pytest.raises(CouldNotRun, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_report(doc, "verify.json", NOW)


def test_max_age_for_a_report_without_valid_until():
    young = report([port_down("gpu03")], generated=NOW - timedelta(minutes=30), valid_for=None)
    assert check_report(young, "r", NOW, timedelta(hours=1)).generated_from == "report"
    with pytest.raises(
        CouldNotRun, match=r"stale: 30 min old \(report 2026-12-06T11:30:00Z\), --max-age 20 min;"
    ):
        check_report(young, "r", NOW, timedelta(minutes=20))
    legacy = report([port_down("gpu03")], generated=None)  # no times at all: the file's mtime
    v = check_report(legacy, "r", NOW, timedelta(hours=1), mtime=NOW - timedelta(minutes=5))
    assert v.generated_from == "file mtime"
    with pytest.raises(CouldNotRun, match="file mtime"):
        check_report(legacy, "r", NOW, timedelta(hours=1), mtime=NOW - timedelta(hours=3))
    # both given: the stricter wins
    with pytest.raises(CouldNotRun, match="stale"):
        check_report(report([]), "r", NOW, timedelta(seconds=30))


def test_malformed_reports_are_bad_input():
    with pytest.raises(BadInput, match="results is not a list"):
        check_report(report([], results={}), "r", NOW)
    with pytest.raises(BadInput, match="not an ISO-8601 time"):
        check_report(report([], valid_until="tomorrow"), "r", NOW)
    with pytest.raises(BadInput, match="no time zone"):
        check_report(report([], valid_until="2026-12-06T13:00:00"), "r", NOW)


def test_the_log_is_0600_in_a_0700_dir_append_only_with_secrets_masked(tmp_path):
    state = tmp_path / "state" / "fabricops"
    r = res("hosts", "ofed_version", "gpu03", message="gpu03: repo https://x password=hunter2 unreachable")
    run_act(report([r]), FakeSlurm.cluster(), state, execute=True)
    run_act(report([port_down("gpu04", "mlx5_1/1")]), FakeSlurm.cluster(), state)
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    log = state / "act.log"
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    recs = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert [(x["node"], x["mode"]) for x in recs] == [("gpu03", "executed"), ("gpu04", "dry-run")]
    assert "hunter2" not in log.read_text()
    first = recs[0]
    assert first["evidence"][0]["check"] == "ofed_version" and first["report"] == "verify.json"
    assert first["report_generated_at"] == "2026-12-06T11:58:00Z" and first["time"] == "2026-12-06T12:00:00Z"
    assert first["reason"] == "fabricops: ofed_version gpu03"


def test_a_link_in_place_of_the_log_is_refused(tmp_path):
    state = tmp_path / "s"
    state.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_text("")
    (state / "act.log").symlink_to(target)
    with pytest.raises(CouldNotRun, match="a link is refused"):
        run_act(report([port_down("gpu03")]), FakeSlurm.cluster(), state, execute=True)
    assert target.read_text() == ""


def test_a_log_line_that_is_not_a_record_stops_the_run(tmp_path):
    tmp_path.joinpath("act.log").write_text('{"time": "2026-12-06T11:00:00Z", "action": "drain"}\nnot json\n')
    slurm = FakeSlurm.cluster()
    with pytest.raises(CouldNotRun, match="line 2 is not a record"):
        run_act(report([port_down("gpu03")]), slurm, tmp_path, execute=True)
    assert slurm.updates == []


# --- the command -----------------------------------------------------------------------------------


def _main(argv, monkeypatch, slurm=None, capsys=None):
    """``fabricops act ARGV`` through fabricops.cli's own handler (one sentence, exit status)."""
    from fabricops import cli

    parser = cli.ArgumentParser(prog="fabricops")
    sub = parser.add_subparsers(dest="command", parser_class=cli.ArgumentParser)
    act_cli.register(sub)
    monkeypatch.setattr(act_cli, "_now", lambda: NOW)
    monkeypatch.setattr(
        act_cli,
        "inventory_access",
        lambda args: ((lambda h: h), slurm or FakeSlurm.cluster(), "the fake controller"),
    )
    argv = ["act", *argv]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code
    return cli._run(args, "act", argv)


def _write(tmp_path, doc, name="verify.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def test_the_command_dry_run_and_execute(tmp_path, monkeypatch, capsys):
    slurm = FakeSlurm.cluster()
    path = _write(tmp_path, report([port_down("gpu03")]))
    state = ["--state-dir", str(tmp_path / "state")]
    assert _main([path, *state], monkeypatch, slurm) == 0
    out = capsys.readouterr().out
    assert "dry run (nothing changes; --execute to act)" in out and "would drain" in out
    assert slurm.updates == []
    assert _main([path, *state, "--execute", "--json", str(tmp_path / "plan.json")], monkeypatch, slurm) == 0
    assert slurm.drained() == {"gpu03": "fabricops: hca_port gpu03 mlx5_0/1"}
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["schema"] == "fabricops.act/1" and plan["actions"][0]["status"] == "done"


def test_the_commands_exit_statuses_and_sentences(tmp_path, monkeypatch, capsys):
    state = ["--state-dir", str(tmp_path / "state")]
    stale = _write(tmp_path, report([port_down("gpu03")], generated=NOW - timedelta(hours=3)), "stale.json")
    assert _main([stale, *state], monkeypatch) == 4
    err = capsys.readouterr().err
    assert err.startswith("fabricops act: report ") and "stale" in err and len(err.splitlines()) == 1
    notjson = tmp_path / "x.json"
    notjson.write_text("{")
    assert _main([str(notjson), *state], monkeypatch) == 5
    table = tmp_path / "t.yml"
    table.write_text("rules:\n  - {check: hca_prot, action: drain}\n")
    good = _write(tmp_path, report([port_down("gpu03")]))
    assert _main([good, *state, "--actions", str(table)], monkeypatch) == 5
    assert "unknown check 'hca_prot'" in capsys.readouterr().err
    assert _main([good, *state], monkeypatch, FakeSlurm(down=True)) == 4
    assert "Slurm not reachable" in capsys.readouterr().err
    assert _main([good, *state, "--allow", "("], monkeypatch) == 2
    assert _main([good, *state, "--cooldown", "soon"], monkeypatch) == 2
    assert _main([good, *state, "--max-partition-fraction", "2"], monkeypatch) == 2
    capsys.readouterr()
    rail = _write(tmp_path, report([port_down(h) for h in ("gpu01", "gpu02", "gpu03")]), "rail.json")
    assert _main([rail, *state, "--execute"], monkeypatch) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith("fabricops act: refused: 3 hosts fail on rail mlx5_0/1") and "nothing drained" in err
    )


def test_no_controller_in_the_inventory_is_could_not_run(monkeypatch):
    class Inv:
        def get_hosts(self, pattern):
            return []

    class FakeFabric:
        def __init__(self, inventory, limit, parsed=None):
            self.runner = Inv()

        def inventory_vars(self, host):
            return {}

    import fabricops.verify.transport as transport

    monkeypatch.setattr(transport, "Fabric", FakeFabric)
    monkeypatch.setattr(act_cli.cliopts, "read_inventory", lambda inv: None)
    args = type("A", (), {"inventory": None, "slurm_local": False})()
    with pytest.raises(CouldNotRun, match="group slurm_controller"):
        act_cli.inventory_access(args)
    args.slurm_local = True
    node_of, runner, where = act_cli.inventory_access(args)
    assert runner is act_cli.local_runner and "--slurm-local" in where and node_of("gpu01") == "gpu01"


def test_the_help_states_the_rails_defaults(monkeypatch, capsys):
    assert _main(["--help"], monkeypatch) in (0, None)
    text = " ".join(capsys.readouterr().out.split())
    for words in ("(default 2)", "(default 3)", "(default 30m)", "(default 0.25)", "default: all", "dry run"):
        assert words in text, words
    assert isinstance(Slurm, type)
