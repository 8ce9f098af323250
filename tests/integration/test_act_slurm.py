"""`fabricops act` against the lab's real Slurm (issue 36): verdict in, drain and resume out, within
the safety rails, and never a node someone else drained.

The verdicts come from real `fabricops verify` runs of the hosts' port state (every host check but
hca_port left out: the other files of this stream leave gpu01 and gpu02 with different OFED stacks,
which are not this file's subject); Slurm is read only through sinfo on the head node.

Touches gpu01 and gpu02 (port faults, cleared in a finally, and Slurm drains, resumed in a finally)
and nothing else; the action log is the test's own directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from integration.test_lab_slurm import ctl, nodes, wait_state
from labtools import ensure_ofed

from fabricops.verify.hostchecks import HOST_CHECKS

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
FABRICOPS = str(Path(sys.executable).with_name("fabricops"))
ONLY_PORTS = ["--only", "hosts", *[a for c in HOST_CHECKS if c != "hca_port" for a in ("--skip", c)]]
REASON = "fabricops: hca_port gpu02 mlx5_1/1"


def _env():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([FABRICOPS, *args], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def verify(path: Path, limit: str) -> dict:
    p = cli("verify", "-q", "--limit", limit, *ONLY_PORTS, "--json", str(path))
    data = json.loads(path.read_text())
    assert p.returncode == data["exit_status"], p.stdout + p.stderr
    return data


@pytest.fixture
def act(tmp_path):
    state = tmp_path / "state"

    def run(report: Path, *args: str) -> subprocess.CompletedProcess:
        return cli("act", str(report), "--state-dir", str(state), *args, timeout=120)

    return run


@pytest.fixture(scope="module")
def port_tools(lab, ssh):
    """ibstat and friends on both hosts (the lab's emulated MLNX_OFED when neither stack is there):
    the hca_port check reads the ports through them."""
    for host in ("gpu01", "gpu02"):
        ensure_ofed(ssh, lab, host)


@pytest.fixture
def clean_slurm(lab, port_tools):
    """Every GPU node idle before; after, the faults cleared and every node this file drained resumed
    (checked, so the next file of the stream starts from an idle partition)."""
    assert {s for s, _r in nodes().values()} == {"idle"}, nodes()
    yield
    cli("lab", "fault", "clear", "gpu01", timeout=120)
    cli("lab", "fault", "clear", "gpu02", timeout=120)
    for node in ("gpu01", "gpu02"):
        if nodes()[node][0] != "idle":
            ctl(f"scontrol update nodename={node} state=resume")
    assert wait_state("gpu01", "idle") == ("idle", "none")
    assert wait_state("gpu02", "idle") == ("idle", "none")


def test_a_fabric_wide_fault_is_refused_and_nothing_is_drained(clean_slurm, act, tmp_path):
    for host in ("gpu01", "gpu02"):
        assert cli("lab", "fault", host, "port-down", "mlx5_1").returncode == 0
    try:
        report = tmp_path / "both.json"
        data = verify(report, "gpu01,gpu02")
    finally:
        cli("lab", "fault", "clear", timeout=120)
    assert data["exit_status"] == 1
    p = act(report, "--execute")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "a fabric-wide fault is not 2 node faults; nothing drained" in p.stdout, p.stdout
    assert {s for s, _r in nodes().values()} == {"idle"}, nodes()


def test_drain_then_resume_and_a_hand_drained_node_is_left_alone(clean_slurm, act, tmp_path):
    # an operator's drain, with their own reason: act must neither resume nor re-reason it
    assert ctl("scontrol update nodename=gpu01 state=drain reason='maintenance'").returncode == 0
    assert cli("lab", "fault", "gpu02", "port-down", "mlx5_1").returncode == 0
    try:
        bad = tmp_path / "bad.json"
        data = verify(bad, "gpu02")
        assert data["exit_status"] == 1
        # the light rails count the operator's drain: gpu01 + gpu02 is half the partition
        rails = ["--max-partition-fraction", "0.5", "--cooldown", "0s"]
        dry = act(bad, *rails)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert f'gpu02  would drain (reason "{REASON}")' in dry.stdout, dry.stdout
        assert nodes()["gpu02"] == ("idle", "none")  # a dry run changes nothing
        done = act(bad, "--execute", *rails)
        assert done.returncode == 0, done.stdout + done.stderr
        assert nodes()["gpu02"] == ("drain", REASON)
        assert nodes()["gpu01"] == ("drain", "maintenance")
        # the same verdict again: the node is already drained for it, nothing to do
        again = act(bad, "--execute", *rails)
        assert again.returncode == 0 and "0 drain" in again.stdout, again.stdout
    finally:
        cli("lab", "fault", "clear", "gpu02", timeout=120)
    good = tmp_path / "good.json"
    assert verify(good, "gpu01,gpu02")["exit_status"] == 0
    p = act(good, "--execute", *rails)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "RESUME" in p.stdout and "gpu02" in p.stdout, p.stdout
    assert wait_state("gpu02", "idle") == ("idle", "none")
    # gpu01 passed too, but its drain is not fabricops': it stays drained with its reason
    assert nodes()["gpu01"] == ("drain", "maintenance")
    log = (tmp_path / "state" / "act.log").read_text().splitlines()
    executed = [json.loads(line) for line in log if json.loads(line)["mode"] == "executed"]
    assert [(r["action"], r["node"]) for r in executed] == [("drain", "gpu02"), ("resume", "gpu02")], log
    assert executed[0]["reason"] == REASON and executed[0]["evidence"], executed[0]
