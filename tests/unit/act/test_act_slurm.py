"""scontrol's output read, and the argv act builds for it: no shell, validated names."""

from __future__ import annotations

import shlex

import pytest
from act_fakes import FakeNode, FakeSlurm
from captures import read_fixture

from fabricops.act import slurm as sl
from fabricops.errors import BadInput, CouldNotRun


def test_parse_a_real_scontrol_show_node():
    nodes = sl.parse_nodes(read_fixture("slurm-scontrol-show-node", "irush-cs-slurm-17.11.txt"))
    assert list(nodes) == ["cortex-01", "dumfries-002", "oxygen-04", "cricket"]
    ox = nodes["oxygen-04"]
    assert (ox.state, ox.flags, ox.drained, sl.ours(ox)) == ("IDLE", frozenset({"DRAIN"}), True, False)
    assert ox.reason == "memory issues?" and ox.reason_by == "root@2019-01-29T10:42:12"
    assert ox.partitions == ("short", "medium", "long", "killable")
    assert ox.fields["OS"] == "Linux 4.14.61-aufs-1 #1 SMP Tue Aug 7 18:13:22 IDT 2018"
    assert ox.fields["CfgTRES"] == "cpu=48,mem=257855M,billing=48"
    cortex = nodes["cortex-01"]
    assert (cortex.state, cortex.drained, cortex.out_of_service, cortex.reason) == (
        "ALLOCATED",
        False,
        False,
        "",
    )
    assert nodes["cricket"].partitions[-1] == "deny"


def test_the_one_line_form_reads_the_same():
    fake = FakeSlurm(
        {
            "gpu01": FakeNode(flags={"DRAIN"}, reason="fabricops: hca_port gpu01 mlx5_0/1"),
            "gpu02": FakeNode(state="DOWN", flags={"NOT_RESPONDING"}, reason="Not responding"),
        }
    )
    one = sl.parse_nodes(fake(["scontrol", "-o", "show", "node"])[1])
    multi = sl.parse_nodes(fake(["scontrol", "show", "node"])[1])
    assert [(n.name, n.state, n.flags, n.reason) for n in one.values()] == [
        (n.name, n.state, n.flags, n.reason) for n in multi.values()
    ]
    assert sl.ours(one["gpu01"]) and one["gpu01"].reason == "fabricops: hca_port gpu01 mlx5_0/1"
    assert one["gpu02"].down and not sl.ours(one["gpu02"])


def test_a_reason_cannot_forge_the_state_or_the_prefix():
    text = (
        "NodeName=gpu01 State=IDLE+DRAIN Partitions=gpu Reason=x State=IDLE Reason=fabricops: y "
        "[root@2026-12-06T12:00:00]\n"
    )
    n = sl.parse_nodes(text)["gpu01"]
    assert n.drained and not sl.ours(n) and n.reason == "x"


def test_text_that_is_not_scontrol_output_is_refused():
    with pytest.raises(BadInput, match="not scontrol show node output"):
        sl.parse_nodes("slurm_load_node error: Unable to contact slurm controller\n")
    assert sl.parse_nodes("") == {}


def test_the_argv_of_drain_and_resume():
    reason = sl.drain_reason("hca_port", "gpu03", "mlx5_0/1")
    assert reason == "fabricops: hca_port gpu03 mlx5_0/1"
    assert sl.drain_argv("gpu03", reason) == [
        "scontrol",
        "update",
        "nodename=gpu03",
        "state=drain",
        "reason=fabricops: hca_port gpu03 mlx5_0/1",
    ]
    assert sl.resume_argv("gpu03") == ["scontrol", "update", "nodename=gpu03", "state=resume"]
    assert sl.SHOW_NODES == ["scontrol", "-o", "show", "node"]


@pytest.mark.parametrize(
    "name",
    [
        "gpu01;reboot",
        "gpu01 x",
        "-gpu01",
        "gpu01\n",
        "node[1-2]",
        "",
        "$(id)",
        "gpu01`id`",
        "a" * 65,
        None,
        "gpu01/..",
        "gpu01,gpu02",
    ],
)
def test_a_hostile_node_name_is_refused(name):
    with pytest.raises(BadInput, match="node name"):
        sl.resume_argv(name)
    with pytest.raises(BadInput):
        sl.drain_argv(name, "fabricops: hca_port x")


@pytest.mark.parametrize(
    "words", [("gpu01", "mlx5_0/1;reboot"), ("gpu01", "$(id)"), ("gpu01", "a'b"), ("gpu01", "x" * 150)]
)
def test_a_reason_is_built_from_validated_words_only(words):
    with pytest.raises(BadInput):
        sl.drain_reason("hca_port", *words)


def test_a_reason_not_built_here_is_refused():
    for reason in ("bad dimm", "fabricops: a\nb", "fabricops:  two", "fabricops: $(reboot)"):
        with pytest.raises(BadInput):
            sl.drain_argv("gpu01", reason)


def test_a_hostile_name_in_the_inventory_stops_the_run(tmp_path):
    from act_fakes import port_down, report, run_act

    with pytest.raises(BadInput, match="'gpu01;reboot' refused"):
        run_act(report([port_down("gpu03")]), FakeSlurm.cluster(), tmp_path, node_of=lambda h: "gpu01;reboot")


def test_over_ssh_each_word_is_quoted_and_comes_back_whole():
    seen = []

    def run(host, command, timeout):
        seen.append((host, command))
        return {"rc": 0, "stdout": "", "stderr": ""}

    argv = sl.drain_argv("gpu03", sl.drain_reason("switch_port", "leaf1", "Eth1/4"))
    assert sl.ssh_runner(run, "slurm1")(argv) == (0, "", "")
    host, command = seen[0]
    assert host == "slurm1" and shlex.split(command) == argv
    assert (
        command == "scontrol update nodename=gpu03 state=drain 'reason=fabricops: switch_port leaf1 Eth1/4'"
    )


def test_slurm_not_reachable_is_could_not_run():
    with pytest.raises(
        CouldNotRun,
        match="Slurm not reachable on the controller slurm1: scontrol -o show node "
        r"failed \(slurm_load_node error: Unable to contact slurm controller",
    ):
        sl.Slurm(FakeSlurm(down=True), "the controller slurm1").nodes()
    unreachable = sl.ssh_runner(
        lambda h, c, t: {"rc": 255, "stdout": "", "stderr": "slurm1 unreachable over SSH"}, "slurm1"
    )
    with pytest.raises(CouldNotRun, match="unreachable over SSH"):
        sl.Slurm(unreachable, "the controller slurm1").nodes()


def test_the_local_runner_uses_no_shell(tmp_path):
    rc, _, err = sl.local_runner([str(tmp_path / "no-scontrol"), "-o", "show", "node"])
    assert rc == 127 and "not found" in err
    marker = tmp_path / "x"
    rc, out, _ = sl.local_runner(["echo", f"a;touch {marker}"])
    assert rc == 0 and out == f"a;touch {marker}\n" and not marker.exists()
