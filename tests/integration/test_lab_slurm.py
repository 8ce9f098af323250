"""The lab's real Slurm (docs/lab.md, "Slurm"), seen only through Slurm's own commands run on the
head node over the lab's SSH, as a site's operator (or fabricops, later) reaches its Slurm.

Drains gpu02 in Slurm and resumes it: Slurm state only, no host state the other files of its stream
read."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab


def gpu_hosts(lab) -> list[str]:
    return [h["name"] for h in lab["topology"]["hosts"]]


def ctl(command: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """COMMAND on the head node over SSH (the lab's key and known_hosts, like every lab host)."""
    from fabricops_lab import hosts, paths

    ip = paths.load_lab()["slurm"]["controller"]["mgmt_ip"]
    return subprocess.run(["ssh", *hosts.ssh_base_args(), f"root@{ip}", command],
                          capture_output=True, text=True, timeout=timeout)


def nodes() -> dict[str, tuple[str, str]]:
    """{node: (compact state, reason)} from sinfo."""
    proc = ctl("sinfo -h -N -o '%N|%t|%E'")
    assert proc.returncode == 0, proc.stderr
    return {n: (s, r) for n, s, r in (ln.split("|", 2) for ln in proc.stdout.splitlines())}


def wait_state(node: str, state: str, timeout: float = 20) -> tuple[str, str]:
    """Poll sinfo until NODE shows STATE (a resumed node is `idle*` until slurmctld pings it)."""
    deadline = time.monotonic() + timeout
    while True:
        got = nodes()[node]
        if got[0] == state or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_every_gpu_host_is_idle(lab):
    proc = ctl("sinfo -h -N -o '%N %t'")
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split("\n")[:-1]) == [f"{h} idle" for h in gpu_hosts(lab)]


def test_lab_ssh_reaches_the_head_node(lab):
    fabricops = str(Path(sys.executable).parent / "fabricops")
    proc = subprocess.run([fabricops, "lab", "ssh", "slurmctl", "scontrol", "ping"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "Slurmctld(primary) at slurmctl is UP" in proc.stdout


def test_drain_shows_the_reason_and_resume_returns_the_node(lab):
    proc = ctl("scontrol update nodename=gpu02 state=drain reason='test'")
    assert proc.returncode == 0, proc.stderr
    try:
        assert nodes()["gpu02"] == ("drain", "test")
        assert ctl("sinfo -h -R -o '%n|%E'").stdout.split() == ["gpu02|test"]
        assert {n: s for n, (s, _r) in nodes().items() if n != "gpu02"} == {
            h: "idle" for h in gpu_hosts(lab) if h != "gpu02"}
    finally:
        proc = ctl("scontrol update nodename=gpu02 state=resume")
    assert proc.returncode == 0, proc.stderr
    assert wait_state("gpu02", "idle") == ("idle", "none")


def test_a_job_runs_on_two_nodes(lab):
    # slurmctld allocates, slurmd on each host launches through slurmstepd, MUNGE signs every hop,
    # and the output comes back to srun on the head node
    proc = ctl("srun -N2 -w gpu01,gpu02 hostname", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == ["gpu01", "gpu02"]


def test_the_inventory_lists_the_head_node_apart(lab):
    import yaml

    inv = yaml.safe_load((Path(lab["inventory_dir"]) / "hosts.yml").read_text())["all"]["children"]
    assert list(inv["slurm_controller"]["hosts"]) == ["slurmctl"]
    assert sorted(inv["gpu_hosts"]["hosts"]) == gpu_hosts(lab)


def test_slurmctld_reads_the_site_s_first_topology_conf(lab):
    # topology/tree with the file a site starts from (the whole rack under one switch) until
    # `fabricops topology` writes the fabric's own tree (test_verify_two_tier.py)
    proc = ctl("scontrol show topology")
    assert proc.returncode == 0, proc.stderr
    nodes_ = ",".join(gpu_hosts(lab))
    assert proc.stdout.splitlines() == [f"SwitchName=rack Level=0 LinkSpeed=1 Nodes={nodes_}"]
