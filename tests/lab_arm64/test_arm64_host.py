"""An arm64 lab host (issue 37 point 5): gh01 boots Debian 12 arm64 under qemu-user next to the amd64
gpu01, in one rack.

- Ansible's facts say aarch64 on gh01 and x86_64 on gpu01 (the kernel both run is the controller's);
- gh01 boots to ``running`` (no failed unit) and the emulated vendor tools (Python scripts, run by
  the arm64 python3) answer there with its own hardware: nvidia-smi, lspci, the HCAs' sysfs; NCCL
  sits in the aarch64 multiarch directory;
- the product's first role step on gh01, the platform gate, refuses aarch64 before anything changes
  (src/fabricops/platforms.py, SUPPORT), with the sentence ``platforms.refusal`` gives.

docs/development.md, "The arm64 host test", says how to run it and what it costs.
"""

from __future__ import annotations

import os

import pytest
from integration.conftest import ansible, ansible_playbook, ssh
from lab_arm64.conftest import AMD64_HOST, ARM64_HOST

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def facts(arm64_lab) -> dict[str, dict]:
    """``ansible -m setup -a gather_subset=min`` on both hosts: host -> ansible_facts."""
    run = ansible(f"{ARM64_HOST}:{AMD64_HOST}", "setup", "gather_subset=min", timeout=600)
    assert run.rc == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return {h: r["ansible_facts"] for h, r in run.hosts.items()}


def test_facts_say_aarch64_on_the_arm64_host_and_x86_64_on_the_other(facts):
    arm, amd = facts[ARM64_HOST], facts[AMD64_HOST]
    assert (arm["ansible_architecture"], arm["ansible_machine"]) == ("aarch64", "aarch64")
    assert (amd["ansible_architecture"], amd["ansible_machine"]) == ("x86_64", "x86_64")
    for f in (arm, amd):
        assert (f["ansible_distribution"], f["ansible_distribution_major_version"]) == ("Debian", "12")
        # one kernel for both: the controller's (qemu-user translates user space only)
        assert f["ansible_kernel"] == os.uname().release


def test_the_arm64_root_is_arm64_userspace(arm64_lab):
    out = ssh(ARM64_HOST, "uname -m; dpkg --print-architecture; od -An -tx1 -w20 -N20 /bin/true").stdout
    machine, dpkg_arch, header = out.splitlines()[:3]
    assert (machine, dpkg_arch) == ("aarch64", "arm64")
    assert header.split()[18:20] == ["b7", "00"]  # e_machine EM_AARCH64: not an x86_64 binary
    libs = ssh(ARM64_HOST, "ls /usr/lib/aarch64-linux-gnu/libnccl.so.2 /usr/lib/x86_64-linux-gnu 2>&1",
               check=False).stdout
    assert "/usr/lib/aarch64-linux-gnu/libnccl.so.2" in libs
    assert "x86_64-linux-gnu': No such file or directory" in libs


def test_the_arm64_host_boots_clean(arm64_lab):
    """Without the lab's drop-ins (hosts.qemu_user_dropins) systemd-tmpfiles-setup and three more
    units fail at systemd's CREDENTIALS step under qemu-user, and the host is ``degraded``."""
    out = ssh(ARM64_HOST, "systemctl is-system-running --wait; systemctl --failed --no-legend", check=False,
              timeout=120).stdout
    assert out.splitlines() == ["running"], out


def test_the_emulated_tools_run_on_the_arm64_host(arm64_lab):
    """What a provisioned server has before any role: the NVIDIA driver's nvidia-smi, lspci and the
    HCAs' sysfs (ibstat and ibv_devinfo come with MLNX_OFED, which the platform gate refuses here)."""
    gpus = ssh(ARM64_HOST, "nvidia-smi -L", timeout=120).stdout.splitlines()
    assert len(gpus) == 1 and gpus[0].startswith("GPU 0: NVIDIA GH200 480GB (UUID: GPU-"), gpus
    query = ssh(ARM64_HOST, "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader", timeout=120)
    assert query.stdout.strip() == "NVIDIA GH200 480GB, 97871 MiB"
    nics = [n for n in ssh(ARM64_HOST, "lspci", timeout=120).stdout.splitlines() if "Mellanox" in n]
    assert len(nics) == 2 and all("ConnectX-7" in n for n in nics), nics
    sysfs = ssh(ARM64_HOST, "ls /sys/class/infiniband; cat /sys/class/infiniband/mlx5_0/ports/1/link_layer")
    assert sysfs.stdout.split() == ["mlx5_0", "mlx5_1", "InfiniBand"], sysfs.stdout


def test_ansible_reaches_both_hosts(arm64_lab):
    run = ansible(f"{ARM64_HOST}:{AMD64_HOST}", "ping", timeout=300)
    assert run.rc == 0 and set(run.hosts) == {ARM64_HOST, AMD64_HOST}, run.stdout[-2000:]


def test_the_platform_gate_refuses_aarch64_before_any_change(facts):
    from fabricops.platforms import refusal

    expected = refusal("ipoib", {k.removeprefix("ansible_"): v for k, v in facts[ARM64_HOST].items()})
    assert expected, "the platform gate now accepts aarch64: this test's expectation is out of date"
    run = ansible_playbook("playbooks/ipoib.yml", "--limit", ARM64_HOST, timeout=900)
    assert run.rc != 0
    stats = run.hosts[ARM64_HOST]
    assert stats["failures"] == 1 and stats["changed"] == 0, stats
    assert expected in run.stdout.replace("\\n", " "), run.stdout[-3000:]
