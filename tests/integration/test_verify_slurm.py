"""`fabricops verify` through the lab's real Slurm and through SSH (issue 36, point 5): the pair rounds
as job steps of one allocation (salloc on slurmctl, srun per command, scancel at the end), the same
verdicts as over SSH, healthy and with a port down; a drained node is refused, never passed.

Only gpu01 and gpu02, only their InfiniBand rails (mlx5_0/1, mlx5_1/1 on the IB switch: the RoCE rails need
the roce_host role converged, which is not this file's subject), the emulated MLNX_OFED installed
where no stack is. Touches gpu01/gpu02 (a port fault, cleared in a finally) and Slurm (a job per run,
cancelled; a drain of gpu02, resumed in a finally); no job may be left in the queue.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from integration.test_lab_slurm import ctl, nodes, wait_state
from labtools import ensure_ofed

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
FABRICOPS = str(Path(sys.executable).with_name("fabricops"))
HOSTS = ("gpu01", "gpu02")


def _env():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([FABRICOPS, *args], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def ib_only(lab, ssh, tmp_path_factory):
    """perftest on both hosts (the emulated MLNX_OFED where no stack is), and the inventory's cabling of
    gpu01 and gpu02 less their RoCE ports, as extra variables."""
    for host in HOSTS:
        ensure_ofed(ssh, lab, host)
    gv = yaml.safe_load((ROOT / "inventories/lab/group_vars/all.yml").read_text())
    cabling = [c for c in gv["fabricops_cabling"] if c["host"] in HOSTS and str(c["switch"]).startswith("ib")]
    assert {c["hca"] for c in cabling} == {"mlx5_0", "mlx5_1"}
    path = tmp_path_factory.mktemp("verify-slurm") / "ib.json"
    path.write_text(json.dumps({"fabricops_cabling": cabling}))
    return path


def queue() -> list[str]:
    """Every job in the queue (``squeue -h`` on the head node)."""
    proc = ctl("squeue -h", timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def verify(launcher: str, extra: Path, report: Path) -> dict:
    p = cli("verify", "-q", "--limit", ",".join(HOSTS), "--only", "pairs", "--all-pairs", "-e", f"@{extra}",
            "--launcher", launcher, "--json", str(report))
    assert report.exists() and report.stat().st_size, p.stdout + p.stderr
    data = json.loads(report.read_text())
    assert p.returncode == data["exit_status"], p.stdout + p.stderr
    data["_stderr"] = p.stderr
    return data


def verdicts(data: dict) -> list[tuple[str, str]]:
    return sorted((r["name"], r["status"]) for r in data["results"])


@pytest.fixture
def idle_slurm(lab):
    assert {s for n, (s, _r) in nodes().items() if n in HOSTS} == {"idle"}, nodes()
    assert queue() == []
    yield
    assert queue() == [], "a verify job was left in the queue"


def test_healthy_same_verdicts_through_slurm_and_ssh(ib_only, idle_slurm, tmp_path):
    by_ssh = verify("ssh", ib_only, tmp_path / "ssh.json")
    by_slurm = verify("slurm", ib_only, tmp_path / "slurm.json")
    assert by_ssh["exit_status"] == 0, [r["message"] for r in by_ssh["results"] if r["status"] != "pass"]
    assert by_slurm["exit_status"] == 0, [r["message"] for r in by_slurm["results"] if r["status"] != "pass"]
    assert verdicts(by_slurm) == verdicts(by_ssh)
    # 1 pair x 2 rails x (bw, lat): all of them measured, none skipped
    assert [n for n, s in verdicts(by_ssh) if n.startswith("pairs/ib_write")] and len(by_ssh["results"]) >= 4
    assert by_ssh["host_verdicts"] == by_slurm["host_verdicts"]
    assert by_ssh["launcher"] == {"kind": "ssh"}
    launcher = by_slurm["launcher"]
    assert launcher["kind"] == "slurm" and launcher["job"].isdigit() and launcher["steps"] >= 8, launcher
    assert launcher["nodes"] == {"gpu01": "gpu01", "gpu02": "gpu02"}


def test_a_port_down_is_named_the_same_way_through_both(ib_only, idle_slurm, tmp_path):
    assert cli("lab", "fault", "gpu02", "port-down", "mlx5_0").returncode == 0
    try:
        by_ssh = verify("ssh", ib_only, tmp_path / "ssh.json")
        by_slurm = verify("slurm", ib_only, tmp_path / "slurm.json")
    finally:
        cli("lab", "fault", "clear", "gpu02", timeout=120)
    assert by_ssh["exit_status"] == by_slurm["exit_status"] == 1
    assert verdicts(by_slurm) == verdicts(by_ssh)
    for data in (by_ssh, by_slurm):
        bad = [r for r in data["results"] if r["status"] in ("fail", "error")]
        assert bad and all(r["device"] == "mlx5_0/1<->mlx5_0/1" for r in bad), [r["message"] for r in bad]
        assert all("gpu02 mlx5_0/1" in f"{r['message']} {r['cause']}" for r in bad), [r["cause"] for r in bad]
        tests = [r for r in data["results"] if r["check"].startswith("ib_write")]
        assert {r["device"] for r in tests if r["status"] == "pass"} == {"mlx5_1/1<->mlx5_1/1"}
    assert by_slurm["launcher"]["kind"] == "slurm"


def test_a_drained_node_is_refused_with_no_verdict(ib_only, idle_slurm, tmp_path):
    assert ctl("scontrol update nodename=gpu02 state=drain reason='verify-slurm test'").returncode == 0
    try:
        report = tmp_path / "drained.json"
        p = cli("verify", "--limit", ",".join(HOSTS), "--only", "pairs", "--all-pairs", "-e", f"@{ib_only}",
                "--launcher", "slurm", "--json", str(report))
    finally:
        assert ctl("scontrol update nodename=gpu02 state=resume").returncode == 0
    assert p.returncode == 4, p.stdout + p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "gpu02 is IDLE+DRAIN (verify-slurm test)" in err[0], p.stderr
    assert not report.exists() or report.stat().st_size == 0
    assert wait_state("gpu02", "idle") == ("idle", "none")
