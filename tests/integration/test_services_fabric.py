"""Fabric services on the lab (gpu02 only): subnet manager, fabric manager, GPUDirect RDMA.

gpu02 is switched to host-run SM with ``fabricops_lab.fabric_services.attach_host`` (its own
hardware.json and emulated software; other hosts keep the switch-run SM), so its InfiniBand
ports are Initialize until the subnet_manager role runs, and Active after. The module fixture
puts gpu02 back (SM stopped, switch-run SM, driver version restored) when the tests end.
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest
from labtools import ensure_ofed

from fabricops_lab import fabric_services as fs
from fabricops_lab import hosts as lab_hosts
from fabricops_lab import paths

pytestmark = pytest.mark.lab

HOST = "gpu02"
SUBNET = "ib-sw1"
SM_VARS = {
    "subnet_manager_mode": "hosts",
    "subnet_manager_hosts": {HOST: 15},
    "subnet_manager_topology": "single_switch",
}


def _vars_file(data: dict) -> str:
    fd, path = tempfile.mkstemp(prefix="fo-fabric-services-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    return path


@pytest.fixture(scope="module")
def gpu02(lab, ssh):
    ensure_ofed(ssh, lab, HOST)  # normally left installed by test_mlnx_ofed, which runs first
    lab_json = json.loads((paths.STATE_DIR / "lab.json").read_text())
    fm = fs.prepare(lab_json)
    if ssh(HOST, "command -v opensm", check=False).returncode != 0:
        fs.install_opensm(HOST)  # mlnxofedinstall installs it once ofed_repo ships the opensm deb
    ssh(HOST, "systemctl disable --now opensmd", check=False)
    if not _sms_running():
        fs.reset_subnet(SUBNET)  # a fresh subnet: nothing swept it yet
    fs.attach_host(HOST, subnet_manager="hosts")
    yield {"fm_repo": fm["repo_url"]}
    ssh(HOST, "systemctl disable --now opensmd", check=False)
    fs.set_driver_version(HOST, None)
    fs.detach_host(HOST)
    lab_hosts.resync_hardware(HOST)


def _sms_running() -> bool:
    path = fs.sm_wire_dir() / f"{SUBNET}.json"
    return path.exists() and bool(json.loads(path.read_text()).get("sms"))


def _states(ssh) -> list[str]:
    out = ssh(
        HOST, "cat /sys/class/infiniband/mlx5_0/ports/1/state /sys/class/infiniband/mlx5_1/ports/1/state"
    ).stdout
    return out.split("\n")[:2]


def test_ports_initialize_before_subnet_manager(gpu02, ssh):
    assert _states(ssh) == ["2: INIT", "2: INIT"]
    assert "State: Initializing" in ssh(HOST, "ibstat mlx5_0").stdout
    r = ssh(HOST, "sminfo", check=False)
    assert r.returncode == 255 and "iberror: failed: query" in r.stderr


def test_subnet_manager_brings_ports_active(gpu02, ansible_playbook, ssh):
    vars_file = _vars_file(SM_VARS)
    res = ansible_playbook("playbooks/subnet_manager.yml", "--limit", HOST, "-e", f"@{vars_file}")
    assert res.rc == 0, res.stdout[-2000:]
    assert _states(ssh) == ["4: ACTIVE", "4: ACTIVE"]
    line = ssh(HOST, "sminfo").stdout
    assert "sm guid 0xb83fd20300a00200," in line and "priority 15 state 3 SMINFO_MASTER" in line
    conf = ssh(HOST, "cat /etc/opensm/opensm.conf").stdout
    assert "guid 0xb83fd20300a00200" in conf and "routing_engine minhop" in conf and "sm_priority 15" in conf
    again = ansible_playbook("playbooks/subnet_manager.yml", "--limit", HOST, "-e", f"@{vars_file}")
    assert again.rc == 0 and again.hosts[HOST]["changed"] == 0
    check = ansible_playbook(
        "playbooks/subnet_manager.yml", "--limit", HOST, "-e", f"@{vars_file}", "--check"
    )
    assert check.rc == 0 and check.hosts[HOST]["changed"] == 0


def test_subnet_manager_refuses_same_priority(gpu02, ansible_playbook):
    dup = dict(SM_VARS, subnet_manager_hosts={HOST: 15, "gpu03": 15})
    res = ansible_playbook("playbooks/subnet_manager.yml", "--limit", HOST, "-e", f"@{_vars_file(dup)}")
    assert res.rc != 0
    assert "gpu03 and gpu02 both run OpenSM with priority 15" in res.stdout


def test_fabric_manager_installs_exact_version_and_is_idempotent(gpu02, ansible_playbook, ssh):
    args = (
        "playbooks/fabric_manager.yml",
        "--limit",
        HOST,
        "-e",
        f"nvidia_fabric_manager_repo_url={gpu02['fm_repo']}",
    )
    res = ansible_playbook(*args)
    assert res.rc == 0, res.stdout[-2000:]
    assert ssh(HOST, "dpkg-query -W -f='${Version}' nvidia-fabricmanager-550").stdout == "550.54.15-1"
    assert ssh(HOST, "dpkg --get-selections nvidia-fabricmanager-550").stdout.split() == [
        "nvidia-fabricmanager-550",
        "hold",
    ]
    assert ssh(HOST, "systemctl is-active nvidia-fabricmanager").stdout.strip() == "active"
    assert ansible_playbook(*args).hosts[HOST]["changed"] == 0
    assert ansible_playbook(*args, "--check").hosts[HOST]["changed"] == 0


def test_fabric_manager_mismatch_fails_naming_both_and_changes_nothing(gpu02, ansible_playbook, ssh):
    fs.set_driver_version(HOST, "550.90.07")
    lab_hosts.resync_hardware(HOST)
    before = ssh(HOST, "dpkg -l | md5sum; md5sum /etc/apt/sources.list.d/*").stdout
    res = ansible_playbook(
        "playbooks/fabric_manager.yml",
        "--limit",
        HOST,
        "-e",
        f"nvidia_fabric_manager_repo_url={gpu02['fm_repo']}",
    )
    fs.set_driver_version(HOST, None)
    lab_hosts.resync_hardware(HOST)
    assert res.rc != 0
    assert "550.90.07" in res.stdout and "550.54.15" in res.stdout
    assert res.hosts[HOST]["changed"] == 0
    assert ssh(HOST, "dpkg -l | md5sum; md5sum /etc/apt/sources.list.d/*").stdout == before


def test_gpudirect_loads_and_persists_peermem(gpu02, ansible_playbook, ssh):
    ssh(HOST, "modprobe -r nvidia_peermem", check=False)
    res = ansible_playbook("playbooks/gpudirect.yml", "--limit", HOST)
    assert res.rc == 0, res.stdout[-2000:]
    assert "nvidia_peermem" in ssh(HOST, "lsmod").stdout.split()
    unit = ssh(HOST, "systemctl cat nvidia-peermem.service").stdout
    assert "After=openibd.service" in unit and "ExecStart=modprobe nvidia_peermem" in unit
    assert ssh(HOST, "systemctl is-enabled nvidia-peermem").stdout.strip() == "enabled"
    assert ansible_playbook("playbooks/gpudirect.yml", "--limit", HOST).hosts[HOST]["changed"] == 0
    assert ansible_playbook("playbooks/gpudirect.yml", "--limit", HOST, "--check").hosts[HOST]["changed"] == 0


def test_nccl_only_run_asks_the_host_whether_gpudirect_is_still_usable(gpu02, ansible_playbook, ssh):
    """The gpudirect role's verdict must not outlive the module: a later NCCL-only check run on a
    host whose nvidia_peermem was unloaded reports that NCCL_NET_GDR_LEVEL would go."""
    nccl = ("playbooks/nccl.yml", "--limit", HOST, "-e", "nccl_profile_name=ib")
    # gpu02 runs its own SM here: start it (no change when an earlier test did), so its ports are
    # Active and the profile has InfiniBand HCAs to list.
    sm = ansible_playbook("playbooks/subnet_manager.yml", "--limit", HOST, "-e", f"@{_vars_file(SM_VARS)}")
    assert sm.rc == 0, sm.stdout[-2000:]
    assert ansible_playbook("playbooks/gpudirect.yml", "--limit", HOST).rc == 0
    assert ansible_playbook(*nccl).rc == 0
    assert "NCCL_NET_GDR_LEVEL=PHB" in ssh(HOST, "cat /etc/nccl.conf").stdout.splitlines()
    try:
        ssh(HOST, "modprobe -r nvidia_peermem")
        check = ansible_playbook(*nccl, "--check", "--diff")
        assert check.rc == 0, check.stdout[-2000:]
        assert check.hosts[HOST]["changed"] >= 1
        assert "-NCCL_NET_GDR_LEVEL=PHB" in check.stdout
        assert "NCCL_NET_GDR_LEVEL=PHB" in ssh(HOST, "cat /etc/nccl.conf").stdout  # check changed nothing
    finally:
        assert ansible_playbook("playbooks/gpudirect.yml", "--limit", HOST).rc == 0
        assert ansible_playbook(*nccl).rc == 0
