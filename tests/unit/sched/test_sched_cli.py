"""``fabricops topology`` end to end with a fake inventory (no Ansible): stdout, --output written only
when it differs (atomic, 0644), --check exit 3 / 0, hostile names exit 5 in one line, the cabling not
read exit 4, block topology from declared NVLink domains, and the Kubernetes labels file."""

from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys

import pytest
import yaml
from sched_data import (
    LAYERS_TWO_TIER,
    FakeInventory,
    FakeRun,
    hostvars_for,
    ibnetdiscover,
    parse,
    swap,
    two_tier,
)

from fabricops.cli import ArgumentParser, _run
from fabricops.sched import block_conf
from fabricops.sched import cli as scli


def run_cmd(argv, inv, monkeypatch, capsys):
    monkeypatch.setattr(scli, "open_inventory", lambda inventory, limit: inv)
    parser = ArgumentParser(prog="fabricops")
    sub = parser.add_subparsers(dest="command", parser_class=ArgumentParser)
    scli.register(sub)
    args = parser.parse_args(["topology", *argv])
    status = _run(args, "topology", argv)
    out, err = capsys.readouterr()
    return status, out, err


def lab_inventory(n=16, built=None, **per_host):
    data = two_tier(n)
    ibnet = ibnetdiscover(built or data["fabricops_cabling"], data["fabricops_switch_links"], LAYERS_TWO_TIER)
    return data, FakeInventory(hostvars_for(data, **per_host), LAYERS_TWO_TIER, FakeRun(ibnet))


def test_stdout_from_the_plan(monkeypatch, capsys):
    _data, inv = lab_inventory()
    status, out, err = run_cmd(["--from", "plan"], inv, monkeypatch, capsys)
    assert status == 0 and err == ""
    leaves, uppers = parse(out)
    assert len(leaves) == 4 and len(uppers) == 2 and sum(len(v) for v in leaves.values()) == 16
    assert inv.run.calls == []  # the plan needs no host


def test_output_written_only_when_it_differs_then_check(monkeypatch, capsys, tmp_path):
    _data, inv = lab_inventory()
    dest = tmp_path / "topology.conf"
    status, out, _ = run_cmd(["-o", str(dest)], inv, monkeypatch, capsys)
    assert (status, out) == (0, f"{dest}: written\n")
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
    assert "as built (ibnetdiscover)" in dest.read_text()
    inode, mtime = dest.stat().st_ino, dest.stat().st_mtime_ns
    status, out, _ = run_cmd(["-o", str(dest)], inv, monkeypatch, capsys)
    assert (status, out) == (0, f"{dest}: unchanged\n")
    assert (dest.stat().st_ino, dest.stat().st_mtime_ns) == (inode, mtime)
    status, out, _ = run_cmd(["-o", str(dest), "--check"], inv, monkeypatch, capsys)
    assert (status, out) == (0, f"{dest}: unchanged\n")
    # the fabric changes (a swapped cable): --check says so and leaves the file alone, a run rewrites it
    data, swapped = lab_inventory(built=None)
    swapped.run = FakeRun(
        ibnetdiscover(
            swap(data["fabricops_cabling"], "gpu01", "gpu02"), data["fabricops_switch_links"], LAYERS_TWO_TIER
        )
    )
    before = dest.read_text()
    status, out, _ = run_cmd(["-o", str(dest), "--check"], swapped, monkeypatch, capsys)
    assert status == 3 and out.endswith(f"{dest}: differs from what would be generated\n")
    assert (
        "-SwitchName=ib-leaf1 Nodes=gpu[01,05,09,13]" in out
        and "+SwitchName=ib-leaf1 Nodes=gpu[02,05,09,13]" in out
    )
    assert dest.read_text() == before
    status, out, _ = run_cmd(["-o", str(dest)], swapped, monkeypatch, capsys)
    assert (status, out) == (0, f"{dest}: written\n")
    assert "SwitchName=ib-leaf2 Nodes=gpu[01,06,10,14]" in dest.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["topology.conf"]  # no temporary file left


def test_check_of_a_missing_file_is_3_and_check_needs_output(monkeypatch, capsys, tmp_path):
    _data, inv = lab_inventory(4)
    status, out, _ = run_cmd(["-o", str(tmp_path / "t.conf"), "--check"], inv, monkeypatch, capsys)
    assert status == 3 and "does not exist" in out and not (tmp_path / "t.conf").exists()
    status, _out, err = run_cmd(["--check"], inv, monkeypatch, capsys)
    assert status == 2 and "--output" in err


def test_a_link_is_not_written_through(monkeypatch, capsys, tmp_path):
    _data, inv = lab_inventory(4)
    target = tmp_path / "real"
    target.write_text("x")
    (tmp_path / "t.conf").symlink_to(target)
    status, _out, err = run_cmd(["-o", str(tmp_path / "t.conf")], inv, monkeypatch, capsys)
    assert status == 4 and "symbolic link" in err and target.read_text() == "x"


def test_hostile_name_is_exit_5_in_one_sentence(monkeypatch, capsys):
    _data, inv = lab_inventory(4, gpu03={"slurm_node_name": "gpu03 Nodes=evil"})
    status, out, err = run_cmd(["--from", "plan"], inv, monkeypatch, capsys)
    assert status == 5 and out == ""
    assert err.count("\n") == 1 and "'gpu03 Nodes=evil'" in err and "Traceback" not in err


def test_cabling_not_read_is_exit_4(monkeypatch, capsys):
    _data, inv = lab_inventory(4)
    bad = {"rc": 255, "stdout": "", "stderr": "gpu01 unreachable over SSH: timeout"}
    inv.run = FakeRun(answers={(h, "ibnetdiscover"): bad for h in inv.hosts})
    status, out, err = run_cmd([], inv, monkeypatch, capsys)
    assert (
        status == 4 and out == "" and err.startswith("fabricops topology: cannot read the cabling as built")
    )


def test_block_topology_from_declared_nvlink_domains(monkeypatch, capsys):
    doms = {
        f"gpu{i:02d}": {"fabricops_nvlink_domain": "nvl72-a" if i <= 9 else "nvl72-b"} for i in range(1, 17)
    }
    _data, inv = lab_inventory(16, **doms)
    status, out, _ = run_cmd(["--format", "block"], inv, monkeypatch, capsys)
    assert status == 0
    lines = [ln for ln in out.splitlines() if not ln.startswith("#")]
    assert lines == [
        "BlockName=nvl72-a Nodes=gpu[01-09]",
        "BlockName=nvl72-b Nodes=gpu[10-16]",
        "BlockSizes=7",
    ]
    status, _out, err = run_cmd(["--format", "block", "--block-sizes", "8"], inv, monkeypatch, capsys)
    assert status == 5 and "block nvl72-b has 7 nodes, fewer than the base block size 8" in err
    _data, plain = lab_inventory(4)
    status, _out, err = run_cmd(["--format", "block"], plain, monkeypatch, capsys)
    assert status == 5 and "no host declares an NVLink domain (fabricops_nvlink_domain)" in err


def test_block_sizes_rules():
    doms = {f"n{i:02d}": "b1" if i <= 4 else "b2" for i in range(1, 9)}
    assert block_conf(doms, [4, 8]).splitlines()[-1] == "BlockSizes=4,8"
    for bad in ([4, 12], [4, 4], [0]):
        with pytest.raises(scli.FabricopsError):
            block_conf(doms, bad)
    assert block_conf(doms, None, {"n01": "gpu01"}).count("gpu01") == 1


def test_k8s_labels_file(monkeypatch, capsys, tmp_path):
    _data, inv = lab_inventory(
        16, gpu05={"fabricops_nvlink_domain": "nvl1"}, gpu01={"fabricops_nvlink_domain": "nvl1"}
    )
    dest = tmp_path / "labels.yaml"
    status, out, _ = run_cmd(["--format", "k8s-labels", "-o", str(dest)], inv, monkeypatch, capsys)
    assert status == 0 and out == f"{dest}: written\n"
    docs = list(yaml.safe_load_all(dest.read_text()))
    assert [d["metadata"]["name"] for d in docs] == [f"gpu{i:02d}" for i in range(1, 17)]
    assert all(d["apiVersion"] == "v1" and d["kind"] == "Node" for d in docs)
    gpu05 = docs[4]["metadata"]["labels"]
    assert gpu05 == {
        "network.topology.nvidia.com/leaf": "ib-leaf1",
        "network.topology.nvidia.com/spine": "ib-spine1",
        "network.topology.nvidia.com/accelerator": "nvl1",
        "fabricops.io/leaf.mlx5_0": "ib-leaf1",
        "fabricops.io/fabric": "infiniband",
    }
    assert "network.topology.nvidia.com/accelerator" not in docs[1]["metadata"]["labels"]
    assert all(isinstance(v, str) for d in docs for v in d["metadata"]["labels"].values())
    assert "nvidia.com/gpu.clique" not in dest.read_text()


def test_k8s_labels_refuse_a_name_kubernetes_cannot_have(monkeypatch, capsys):
    _data, inv = lab_inventory(4, gpu02={"fabricops_k8s_node_name": "GPU_02"})
    status, _out, err = run_cmd(["--format", "k8s-labels", "--from", "plan"], inv, monkeypatch, capsys)
    assert status == 5 and "'GPU_02' is not a Kubernetes node name" in err


def test_register_adds_the_topology_subcommand():
    sub = argparse.ArgumentParser().add_subparsers()
    scli.register(sub)
    assert "topology" in sub.choices


def test_the_product_side_never_imports_the_lab():
    code = (
        "import sys, fabricops.sched, fabricops.sched.cli, fabricops.sched.sources, fabricops.sched.labels;"
        "import fabricops.verify.cabling, fabricops.verify.transport;"
        "bad = sorted(m for m in sys.modules if m.startswith('fabricops_lab'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
