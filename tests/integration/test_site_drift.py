"""site.yml and ``fabricops drift`` on the lab, on host gpu04 only (switches are not touched).

Converge the host phases, drift exits 0; change gpu04's PFC vector behind Ansible's back, drift
exits 2 and reports exactly that item without changing anything (files and mlnx_qos state hashed
before and after); ``--fix`` restores it and the next drift exits 0. A rolling rollout whose first
batch fails (gpu03, bad input, nothing changed) stops before gpu04 and names gpu03.
"""

from __future__ import annotations

import shutil

import pytest
from integration.conftest import REPO
from labtools import fabricops_drift

pytestmark = pytest.mark.lab

HOST = "gpu04"
NETDEV = "enp170s0f0np0"  # a RoCE port of gpu04 (Onyx rail)
EXTRA = ["-e", "nccl_profile_name=ib"]
STATE = (
    "sha256sum /etc/nccl.conf /etc/profile.d/nccl.sh /etc/fabricops/* /etc/network/interfaces.d/* 2>&1; "
    "for i in enp170s0f0np0 enp170s0f1np1; do mlnx_qos -i $i | sha256sum; done"
)


def drift(*args: str, json_path=None) -> tuple[int, str, dict | None]:
    return fabricops_drift("--limit", HOST, *EXTRA, *args, json_path=json_path)


@pytest.fixture(scope="module")
def converged(ansible_playbook):
    """gpu04's host phases converged. That nothing is left to change is the first test's clean drift
    (site.yml in check mode on the same host); each role's own file proves its real-mode idempotence
    (a second real run here cost 35-40 s of CI's longest stream for the same verdict)."""
    run = ansible_playbook("site.yml", "--limit", HOST, "--tags", "hosts", *EXTRA)
    assert run.rc == 0, run.stdout[-3000:]
    assert run.hosts[HOST]["failures"] == 0
    assert "ROLLOUT DONE: gpu04; failed: none" in run.stdout
    return run


def test_drift_clean_then_pfc_drift_then_fix(converged, ssh, tmp_path):
    rc, out, data = drift(json_path=tmp_path / "clean.json")
    assert rc == 0, out
    assert data["items"] == [] and data["hosts"] == [HOST]

    ssh(HOST, f"mlnx_qos -i {NETDEV} --pfc 0,0,0,0,0,0,0,0 >/dev/null")
    before = ssh(HOST, STATE).stdout
    rc, out, data = drift("--junit", str(tmp_path / "drift.xml"), json_path=tmp_path / "drift.json")
    after = ssh(HOST, STATE).stdout
    assert after == before, "a drift run without --fix changed the host"
    assert rc == 3, out  # EXIT_DRIFT (docs/cli.md)
    assert [(i["host"], i["role"], i["item"], i["changes"]) for i in data["items"]] == [
        (HOST, "roce_host", NETDEV, [{"key": "pfc", "before": "0,0,0,0,0,0,0,0", "after": "0,0,0,1,0,0,0,0"}])
    ]
    assert "pfc: 0,0,0,0,0,0,0,0 -> 0,0,0,1,0,0,0,0" in out
    assert 'failures="1"' in (tmp_path / "drift.xml").read_text()

    rc, out, _ = drift("--fix")
    assert rc == 0, out
    assert "enabled     0   0   0   1" in ssh(HOST, f"mlnx_qos -i {NETDEV}").stdout
    rc, out, data = drift(json_path=tmp_path / "after.json")
    assert rc == 0 and data["items"] == [], out


def test_failed_batch_stops_the_rollout_and_names_the_host(converged, ansible_playbook, tmp_path):
    inv = tmp_path / "inventory"
    shutil.copytree(REPO / "inventories" / "lab", inv)
    (inv / "host_vars").mkdir(exist_ok=True)
    # Bad input on gpu03 only: the mlnx_ofed preflight refuses it before any change.
    (inv / "host_vars" / "gpu03.yml").write_text("---\nmlnx_ofed_version: not-a-version\n")
    run = ansible_playbook(
        "site.yml", "--limit", "gpu03,gpu04", "--tags", "hosts", "-e", "fabricops_serial=1", *EXTRA,
        inventory=inv / "hosts.yml",
    )
    assert run.rc != 0
    assert "ROLLOUT STOPPED: gpu03 failed" in run.stdout
    assert "Not reached: gpu04" in run.stdout
    assert run.hosts["gpu03"]["failures"] == 1
    assert "gpu04" not in run.hosts and "[gpu04]" not in run.stdout, "the rollout reached the next batch"
