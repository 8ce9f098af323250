"""An arm64 lab host (issue 37 points 4 and 5): gh01 boots Debian 12 arm64 under qemu-user next to the
amd64 gpu01, in one rack, and the product converges it.

- Ansible's facts say aarch64 on gh01 and x86_64 on gpu01 (the kernel both run is the controller's);
- gh01 boots to ``running`` (no failed unit) and the emulated vendor tools (Python scripts, run by
  the arm64 python3) answer there with its own hardware: nvidia-smi, lspci, the HCAs' sysfs; NCCL
  sits in the aarch64 multiarch directory;
- the lab builds its repositories for arm64 too (a topology with an arm64 host): the inventory gives
  gh01 its own MLNX_OFED ``-aarch64`` tarball, apt repository, DOCA ``arm64-sbsa`` and fabric services
  repository; site.yml converges gh01 (MLNX_OFED's arm64 packages, firmware, the subnet manager
  check, GPUDirect, IPoIB, NCCL); a second run and check mode change nothing; ``fabricops verify``
  passes there; drift names a hand edit there;
- the roles the lab does not run on gh01 (src/fabricops/platforms.py ``SUPPORT``, AARCH64_ROLES) still
  refuse aarch64 before anything changes.

docs/development.md, "The arm64 host test", says how to run it; docs/lab-fidelity.md ("Host
variants", arm64) what it costs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from integration.conftest import REPO, ansible, ansible_env, ansible_playbook, ssh
from lab_arm64.conftest import AMD64_HOST, ARM64_HOST

FABRICOPS = str(Path(sys.executable).with_name("fabricops"))
BOTH = (ARM64_HOST, AMD64_HOST)
#: site.yml's first run on a new rack (as tests/lab_variants' mixed rack runs it): the restart consents,
#: both hosts in one batch; its verification play is run below as fabricops verify
SITE = ("-e", "mlnx_ofed_allow_restart=true", "-e", "ipoib_allow_restart=true", "-e", "fabricops_serial=100%",
        "-e", "fabricops_switch_serial=100%", "--skip-tags", "verify")
IPOIB_FILE = "/etc/network/interfaces.d/fabricops-ipoib-ibp1s0"


def fabricops(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FABRICOPS, *args], cwd=REPO, env=ansible_env(), capture_output=True, text=True,
                          timeout=1200)


def roles_run_on(stdout: str, host: str) -> set[str]:
    """The roles with a task that ran (ok / changed) on ``host`` in a playbook's output."""
    ran: set[str] = set()
    role = None
    for line in stdout.splitlines():
        if line.startswith("TASK [fabricops.fabric."):
            role = line[len("TASK [fabricops.fabric."):].split(" :", 1)[0]
        elif line.startswith("TASK ["):
            role = None
        elif role and line.startswith((f"ok: [{host}]", f"changed: [{host}]")):
            ran.add(role)
    return ran


def timed(what: str, fn, *args, **kw):
    t = time.monotonic()
    out = fn(*args, **kw)
    print(f"\n[arm64 timing] {what}: {time.monotonic() - t:.1f} s")
    return out

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
    HCAs' sysfs (ibstat and ibv_devinfo come with MLNX_OFED, which site.yml installs below)."""
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


@pytest.fixture(scope="module")
def converged(arm64_lab):
    site = timed("site.yml, first run (gh01 + gpu01)", ansible_playbook, "site.yml", *SITE, timeout=2400)
    assert site.rc == 0, site.stdout[-5000:]
    return site


def test_the_inventory_gives_the_arm64_host_its_own_artifacts(arm64_lab):
    from fabricops_lab import paths

    inv = Path(paths.load_lab()["inventory_dir"])

    hosts = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]["gpu_hosts"]["hosts"]
    gh, gpu = hosts[ARM64_HOST], hosts[AMD64_HOST]
    assert gh["mlnx_ofed_tarball_url"].endswith("-aarch64.tgz"), gh
    assert gh["mlnx_ofed_doca_repo_url"].endswith("/debian12/arm64-sbsa/"), gh
    assert "mlnx_ofed_tarball_url" not in gpu  # the group's: x86_64
    group = yaml.safe_load((inv / "group_vars" / "all.yml").read_text())
    assert group["mlnx_ofed_tarball_url"].endswith("-x86_64.tgz")


def test_the_arm64_repositories_carry_arm64_packages(arm64_lab):
    """apt on gh01 reads the lab's arm64 MLNX_OFED repository and finds arm64 candidates."""
    from fabricops_lab import paths

    inv = Path(paths.load_lab()["inventory_dir"])

    url = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]["gpu_hosts"]["hosts"][
        ARM64_HOST]["mlnx_ofed_repo_url"]
    fetch = f"import urllib.request; print(urllib.request.urlopen('{url}/Packages')"
    got = ssh(ARM64_HOST, f"python3 -c \"{fetch}"
                          ".read().decode())\"", timeout=120).stdout
    archs = {ln.split(": ", 1)[1] for ln in got.splitlines() if ln.startswith("Architecture: ")}
    assert archs == {"arm64"}, archs


def test_site_converges_the_arm64_host(converged):
    for h in BOTH:
        stats = converged.hosts[h]
        assert stats["failures"] == 0 and stats["unreachable"] == 0, (h, stats)
    assert converged.hosts[ARM64_HOST]["changed"] > 0
    # every role platforms.AARCH64_ROLES names ran there (the fabric manager: not on a GH200)
    from fabricops.platforms import AARCH64_ROLES

    ran = roles_run_on(converged.stdout, ARM64_HOST)
    assert set(AARCH64_ROLES) <= ran, ran
    assert "nvidia_fabric_manager" not in ran and "roce_host" not in ran, ran
    query = "dpkg-query -W -f '${Package} ${Architecture}\\n' mlnx-ofed-all mft opensm"
    out = ssh(ARM64_HOST, f"ofed_info -s; {query}", timeout=120)
    lines = out.stdout.splitlines()
    assert lines[0] == "MLNX_OFED_LINUX-24.10-1.1.4.0", lines
    assert lines[1:] == ["mft arm64", "mlnx-ofed-all arm64", "opensm arm64"], lines
    addr = ssh(ARM64_HOST, "ip -o -4 addr show dev ibp1s0").stdout
    assert "198.18.0." in addr, addr


def test_a_second_run_and_check_mode_change_nothing(converged):
    again = timed("site.yml, second run", ansible_playbook, "site.yml", *SITE, timeout=2400)
    assert again.rc == 0, again.stdout[-4000:]
    assert {h: again.hosts[h]["changed"] for h in BOTH} == dict.fromkeys(BOTH, 0), again.changed_tasks
    check = timed("site.yml --check", ansible_playbook, "site.yml", "--check", "--skip-tags", "verify",
                  timeout=2400)
    assert check.rc == 0, check.stdout[-4000:]
    assert {h: check.hosts[h]["changed"] for h in BOTH} == dict.fromkeys(BOTH, 0), check.changed_tasks


def test_verify_passes_on_the_arm64_host(converged, tmp_path):
    report = tmp_path / "verify.json"
    p = timed("fabricops verify --only hosts --limit gh01", fabricops, "verify", "--only", "hosts",
              "--limit", ARM64_HOST, "--json", str(report))
    results = json.loads(report.read_text())["results"] if report.exists() else []
    bad = {c["check"]: c.get("detail") or c.get("message")
           for c in results if c["status"] in ("fail", "error")}
    assert p.returncode == 0 and not bad, (bad, p.stdout[-3000:] + p.stderr[-2000:])


def test_drift_names_a_hand_edit_on_the_arm64_host(converged, tmp_path):
    index = ssh(ARM64_HOST, f"grep -o '198.18.0.[0-9]*/16' {IPOIB_FILE}").stdout.strip()
    edit = f"sed -i 's#{index}#198.18.0.201/16#' {IPOIB_FILE}"
    try:
        ssh(ARM64_HOST, edit)
        before = ssh(ARM64_HOST, f"sha256sum {IPOIB_FILE}").stdout
        report = tmp_path / "drift.json"
        p = timed("fabricops drift (ipoib.yml)", fabricops, "drift", "--playbook", "playbooks/ipoib.yml",
                  "--json", str(report))
        assert p.returncode == 3, p.stdout[-3000:] + p.stderr[-2000:]  # EXIT_DRIFT
        assert ssh(ARM64_HOST, f"sha256sum {IPOIB_FILE}").stdout == before
        items = json.loads(report.read_text())["items"]
        assert {i["host"] for i in items} == {ARM64_HOST}, items
        assert "198.18.0.201/16" in json.dumps(items)
    finally:
        fixed = ansible_playbook("playbooks/ipoib.yml", "--limit", ARM64_HOST, timeout=900)
        assert fixed.rc == 0, fixed.stdout[-3000:]
    assert index in ssh(ARM64_HOST, f"cat {IPOIB_FILE}").stdout


def test_a_role_not_proven_on_aarch64_still_refuses_it_before_any_change(facts):
    from fabricops.platforms import AARCH64_ROLES, refusal

    arm = {k.removeprefix("ansible_"): v for k, v in facts[ARM64_HOST].items()}
    assert all(refusal(r, arm) == "" for r in AARCH64_ROLES)
    expected = refusal("roce_host", arm)
    assert expected.startswith("fabricops.fabric.roce_host supports Debian 12 on x86_64; this host is "
                               "Debian 12.")
    run = ansible_playbook("playbooks/roce_host.yml", "--limit", ARM64_HOST, timeout=900)
    assert run.rc != 0
    stats = run.hosts[ARM64_HOST]
    assert stats["failures"] == 1 and stats["changed"] == 0, stats
    assert expected in run.stdout.replace("\\n", " "), run.stdout[-3000:]


def test_an_mlnx_ofed_build_of_another_architecture_is_refused_before_the_installer(converged):
    """The x86_64 tarball (the rack's group_vars build) on gh01: the role reads its .arch and stops
    before mlnxofedinstall; the installed MLNX_OFED stays."""
    old = paths_lab()["ofed"]["versions"]["23.10-1.1.9.0"]
    assert old["tgz_url"].endswith("-x86_64.tgz")
    run = timed("playbooks/ofed.yml with the x86_64 tarball on gh01", ansible_playbook, "playbooks/ofed.yml",
                "--limit", ARM64_HOST, "-e", "mlnx_ofed_version=23.10-1.1.9.0",
                "-e", f"mlnx_ofed_tarball_url={old['tgz_url']}",
                "-e", f"mlnx_ofed_tarball_sha256={old['tgz_sha256']}",
                "-e", "mlnx_ofed_allow_downgrade=true", timeout=900)
    assert run.rc != 0 and run.hosts[ARM64_HOST]["failures"] == 1, run.stdout[-3000:]
    assert ("gh01 is aarch64; MLNX_OFED_LINUX-23.10-1.1.9.0-debian12.1-x86_64 is built for x86_64"
            in run.stdout.replace("\\n", " ")), run.stdout[-3000:]
    assert not any("mlnxofedinstall" in t for t in run.changed_tasks()), run.changed_tasks()
    assert ssh(ARM64_HOST, "ofed_info -s", timeout=120).stdout.strip() == "MLNX_OFED_LINUX-24.10-1.1.4.0"


def paths_lab() -> dict:
    from fabricops_lab import paths

    return paths.load_lab()
