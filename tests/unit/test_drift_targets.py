"""Which hosts a drift run targets: ``ansible-playbook --list-hosts --list-tasks`` output, read on
real captures of this repository's site.yml (issue 35: a clean drift exited 4 because the
verification play on localhost, skipped by ``--skip-tags verify``, was counted as a target)."""

from __future__ import annotations

from captures import read_fixture

from fabricops.drift import report as dr
from fabricops.drift.runner import parse_list_hosts
from fabricops.errors import EXIT_NORUN, EXIT_OK

GPUS = ["gpu01", "gpu02", "gpu03", "gpu04"]


def test_a_play_whose_tasks_are_all_skipped_targets_nobody():
    text = read_fixture("ansible-playbook", "list-hosts-tasks-skip-verify.txt")
    assert "localhost" in text  # the verification play is listed, with no task left
    assert parse_list_hosts(text) == GPUS


def test_a_play_with_tasks_targets_its_hosts():
    text = read_fixture("ansible-playbook", "list-hosts-tasks.txt")
    assert parse_list_hosts(text) == sorted([*GPUS, "localhost"])


def test_list_hosts_alone_counts_every_play():
    text = "\n".join(
        ln for ln in read_fixture("ansible-playbook", "list-hosts-tasks-skip-verify.txt").splitlines()
        if not ln.startswith("      ") or not ("\t" in ln or ":" in ln)
    )
    # --list-hosts without --list-tasks: no tasks section, so every play's hosts count
    plain = "\n".join(ln for ln in text.splitlines() if ln.strip() != "tasks:")
    assert parse_list_hosts(plain) == sorted([*GPUS, "localhost"])


def test_clean_drift_over_the_targets_exits_0_and_a_silent_target_still_4():
    targets = parse_list_hosts(read_fixture("ansible-playbook", "list-hosts-tasks-skip-verify.txt"))
    rep = dr.DriftReport(hosts=list(GPUS), targets=targets)
    assert rep.not_checked == {} and rep.exit_status() == EXIT_OK
    rep = dr.DriftReport(hosts=GPUS[:3], targets=targets)
    assert list(rep.not_checked) == ["gpu04"] and rep.exit_status() == EXIT_NORUN
