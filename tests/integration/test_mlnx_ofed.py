"""mlnx_ofed role on the lab (gpu02 only): fresh tarball install, idempotence, --check, restart
consent and the modules that hold the stack, upgrades via the apt mirror and the ISO, bad input.

The tests run in file order and share gpu02's state; the module fixture starts from a host without
MLNX_OFED and leaves the lab's default version installed, restarted, with no restart pending.
"""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.lab

HOST = "gpu02"
PLAYBOOK = "playbooks/ofed.yml"
PACKAGES = ("mlnx-ofed-all mlnx-fw-updater perftest infiniband-diags ibverbs-utils rdma-core "
            "mlnx-ofed-kernel-modules mlnx-ofed-kernel-dkms mlnx-ofed-kernel-utils mlnx-tools ofed-scripts")
STATE = "/var/lib/fabricops/mlnx_ofed/restart-pending"
NETDEV_CMD = "ls /sys/class/net | grep -m1 '^enp'"
# /proc/modules of a host where NVMe-oF and GPUDirect RDMA hold the RDMA stack.
HELD_MODULES = """nvme_rdma 45056 0 - Live 0x0000000000000000
nvme_fabrics 32768 1 nvme_rdma, Live 0x0000000000000000
rdma_cm 122880 1 nvme_rdma, Live 0x0000000000000000
nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)
ib_core 425984 3 nvme_rdma,rdma_cm,nvidia_peermem, Live 0x0000000000000000
mlx5_core 2121728 0 - Live 0x0000000000000000
"""


def _vars(lab, version, method, **extra):
    info = lab["ofed"]
    v = info["versions"][version]
    out = {"mlnx_ofed_version": version, "mlnx_ofed_install_method": method,
           # Debian 12 hosts run a newer point release than the build's debian12.1: a deliberate choice
           "mlnx_ofed_distro": info["distro"]}
    if method == "tarball":
        out |= {"mlnx_ofed_tarball_url": v["tgz_url"], "mlnx_ofed_tarball_sha256": v["tgz_sha256"]}
    elif method == "iso":
        out |= {"mlnx_ofed_iso_url": v["iso_url"], "mlnx_ofed_iso_sha256": v["iso_sha256"]}
    else:
        # the lab's mirror is signed: its key by URL and sha256, as a real rack's inventory gives it
        out |= {"mlnx_ofed_repo_url": v["repo_url"], "mlnx_ofed_repo_key_url": info["repo_key_url"],
                "mlnx_ofed_repo_key_sha256": info["repo_key_sha256"]}
    out |= extra
    return out


@pytest.fixture(scope="module")
def play(lab, ansible_playbook, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlnx_ofed")
    count = [0]

    def run(version, method, *args, **extra):
        count[0] += 1
        path = tmp / f"vars{count[0]}.json"
        path.write_text(json.dumps(_vars(lab, version, method, **extra)))
        return ansible_playbook(PLAYBOOK, "--limit", HOST, "-e", f"@{path}", *args)

    return run


@pytest.fixture(scope="module")
def versions(lab):
    info = lab["ofed"]
    old = next(v for v in info["versions"] if v != info["default_version"])
    return old, info["default_version"]


def _ofed_info(ssh):
    return ssh(HOST, "ofed_info -s 2>/dev/null || true").stdout.strip()


def _wipe(ssh):
    # a host without OFED has no RoCE QoS unit either: one left by a site converge (PartOf
    # openibd.service) would re-apply QoS on the restarts these tests make
    ssh(HOST, "systemctl disable --now fabricops-roce-qos.service >/dev/null 2>&1; "
              "rm -f /etc/systemd/system/fabricops-roce-qos.service; systemctl daemon-reload; "
              f"dpkg --purge {PACKAGES} >/dev/null 2>&1; rm -rf /var/lib/fabricops/mlnx_ofed "
              "/var/cache/mlnx_ofed /etc/apt/sources.list.d/mlnx_ofed.list /etc/infiniband "
              "/root/fake-modules; true")


@pytest.fixture(scope="module", autouse=True)
def fresh_gpu02(lab, ssh, play, versions):
    _wipe(ssh)
    yield
    # Leave the lab's default version installed, restarted, with openib.conf at its defaults.
    play(versions[1], "tarball", "-e", "mlnx_ofed_allow_restart=true",
         mlnx_ofed_openib_conf={"RUN_AFFINITY_TUNER": False}, mlnx_ofed_allow_downgrade=True)


def _stats(run):
    assert HOST in run.hosts, run.stdout[-3000:] + run.stderr[-2000:]
    return run.hosts[HOST]


def test_version_without_checksum_fails_before_any_task(play, ssh, versions):
    run = play(versions[0], "tarball", mlnx_ofed_tarball_sha256="")
    stats = _stats(run)
    assert run.rc != 0 and stats["failures"] == 1 and stats["changed"] == 0
    fatal = [ln for ln in run.stdout.splitlines() if ln.startswith("fatal:")]
    assert len(fatal) == 1 and "mlnx_ofed_tarball_sha256 is not set" in fatal[0]
    # the failing task is the first of the role after argument validation
    tasks = re.findall(r"^TASK \[([^\]]+)\]", run.stdout, re.M)
    assert tasks[-1].endswith("Refuse values that could inject into what the role writes, "
                              "and check the input")
    assert _ofed_info(ssh) == ""
    assert ssh(HOST, "test -e /var/cache/mlnx_ofed", check=False).returncode != 0


def test_fresh_install_from_tarball(play, ssh, versions):
    assert ssh(HOST, "command -v ofed_info", check=False).returncode != 0  # tools absent before
    run = play(versions[0], "tarball")
    stats = _stats(run)
    assert run.rc == 0 and stats["failures"] == 0 and stats["changed"] > 0
    assert _ofed_info(ssh).rstrip(":") == f"MLNX_OFED_LINUX-{versions[0]}"
    assert "--force --without-fw-update --distro debian12.1" in run.stdout
    # no consent: the restart is reported and remembered, not done
    assert f"RESTART PENDING: {HOST}: an openibd restart is pending" in run.stdout
    assert "mlnx_ofed_allow_restart: true" in run.stdout
    assert ssh(HOST, f"test -s {STATE}", check=False).returncode == 0
    # the downloaded distribution is removed after the install
    assert ssh(HOST, "ls -A /var/cache/mlnx_ofed").stdout.strip() == ""


def test_second_run_changes_nothing_and_still_reports_the_restart(play, versions):
    run = play(versions[0], "tarball")
    assert run.rc == 0 and _stats(run)["changed"] == 0
    assert "-> none;" in run.stdout
    assert "RESTART PENDING" in run.stdout


def test_check_on_converged_host_reports_nothing(play, versions):
    run = play(versions[0], "tarball", "--check", "--diff")
    assert run.rc == 0 and _stats(run)["changed"] == 0


def test_restart_refused_while_modules_hold_the_stack(play, ssh, versions):
    ssh(HOST, f"cat > /root/fake-modules <<'EOF'\n{HELD_MODULES}EOF")
    run = play(versions[0], "tarball", "-e", "mlnx_ofed_allow_restart=true",
               mlnx_ofed_modules_file="/root/fake-modules")
    stats = _stats(run)
    assert run.rc != 0 and stats["failures"] == 1 and stats["changed"] == 0
    fatal = next(ln for ln in run.stdout.splitlines() if ln.startswith("fatal:"))
    assert "openibd restart refused" in fatal
    assert "nvme_rdma (NVMe over Fabrics (RDMA) initiator)" in fatal and "nvidia_peermem" in fatal
    assert "nvme_fabrics" not in fatal  # used by a holder, it does not use the stack itself
    assert "mlnx_ofed_allow_unload_users" in fatal
    assert ssh(HOST, f"test -s {STATE}", check=False).returncode == 0  # still pending
    ssh(HOST, "rm -f /root/fake-modules")


def test_restart_done_with_consent(play, ssh, versions):
    netdev = ssh(HOST, NETDEV_CMD).stdout.strip()
    ssh(HOST, f"mlnx_qos -i {netdev} --trust dscp >/dev/null")
    assert "Priority trust state: dscp" in ssh(HOST, f"mlnx_qos -i {netdev}").stdout
    run = play(versions[0], "tarball", "-e", "mlnx_ofed_allow_restart=true")
    assert run.rc == 0 and _stats(run)["changed"] > 0
    assert f"{HOST}: restarting openibd" in run.stdout
    # the driver reload reset the NIC's volatile QoS state: openibd really restarted
    assert "Priority trust state: pcp" in ssh(HOST, f"mlnx_qos -i {netdev}").stdout
    assert ssh(HOST, f"test -e {STATE}", check=False).returncode != 0
    again = play(versions[0], "tarball")
    assert again.rc == 0 and _stats(again)["changed"] == 0 and "RESTART PENDING" not in again.stdout


def test_check_reports_the_upgrade_without_doing_it(play, ssh, versions):
    run = play(versions[1], "repo", "--check", "--diff")
    assert run.rc == 0 and _stats(run)["changed"] > 0
    assert (f"would upgrade MLNX_OFED {versions[1]} on {HOST} from the repo "
            f"(installed: {versions[0]})") in run.stdout
    assert versions[0] in _ofed_info(ssh)
    assert ssh(HOST, "test -e /etc/apt/sources.list.d/mlnx_ofed.list", check=False).returncode != 0


def test_upgrade_via_the_apt_mirror(play, ssh, versions, lab):
    def lab_repo(version):
        return lab["ofed"]["versions"][version]["repo_url"]

    run = play(versions[1], "repo", "--diff", mlnx_ofed_openib_conf={"RUN_AFFINITY_TUNER": True})
    assert run.rc == 0 and _stats(run)["changed"] > 0
    assert versions[1] in _ofed_info(ssh)
    assert "+RUN_AFFINITY_TUNER=yes" in run.stdout  # --diff shows the openib.conf change
    assert ssh(HOST, "dpkg --get-selections mlnx-ofed-all").stdout.split()[-1] == "hold"
    source = ssh(HOST, "cat /etc/apt/sources.list.d/mlnx_ofed.list").stdout
    assert f"deb [signed-by=/etc/apt/keyrings/mlnx_ofed.gpg] {lab_repo(versions[1])} ./" in source
    conf = ssh(HOST, "grep ^RUN_AFFINITY_TUNER= /etc/infiniband/openib.conf").stdout
    assert conf.strip() == "RUN_AFFINITY_TUNER=yes"
    assert "RESTART PENDING" in run.stdout and "openib.conf changed (RUN_AFFINITY_TUNER)" in run.stdout
    again = play(versions[1], "repo", mlnx_ofed_openib_conf={"RUN_AFFINITY_TUNER": True})
    assert again.rc == 0 and _stats(again)["changed"] == 0
    check = play(versions[1], "repo", "--check", "--diff", mlnx_ofed_openib_conf={"RUN_AFFINITY_TUNER": True})
    assert check.rc == 0 and _stats(check)["changed"] == 0


def test_downgrade_refused_without_consent(play, ssh, versions):
    run = play(versions[0], "tarball")
    assert run.rc != 0 and _stats(run)["changed"] == 0
    assert "mlnx_ofed_allow_downgrade: true" in run.stdout
    assert versions[1] in _ofed_info(ssh)


def test_upgrade_via_the_iso(play, ssh, versions):
    if ssh(HOST, "command -v xorriso", check=False).returncode != 0:
        pytest.skip("the lab image has no xorriso yet (docs/lab-ofed.md: the ISO method extracts with it)")
    down = play(versions[0], "iso", mlnx_ofed_allow_downgrade=True)
    assert down.rc == 0 and versions[0] in _ofed_info(ssh)
    run = play(versions[1], "iso")
    assert run.rc == 0 and _stats(run)["changed"] > 0
    assert versions[1] in _ofed_info(ssh)
    assert "xorriso" in run.stdout
    again = play(versions[1], "iso")
    assert again.rc == 0 and _stats(again)["changed"] == 0
