"""nccl_profile on the emulated rack (issue 4, "Done when"), on gpu01.

For the ``roce`` and ``ib`` profiles: /etc/nccl.conf lists exactly the ports that are up (one port
of the profile's link layer is taken down with the lab's ``port-down`` fault to prove it), the
GID index is the GID table's IPv4 RoCE v2 entry read from sysfs, NCCL_IB_TC is the lossless class;
a second run and ``--check`` change nothing; a hand edit is reported by ``--check --diff`` and not
fixed; an unknown profile fails before any task and leaves the host as it was.
"""

from __future__ import annotations

import hashlib
import re

import pytest

from fabricops.cli import main as fabricops

pytestmark = pytest.mark.lab

HOST = "gpu01"
PLAYBOOK = "playbooks/nccl.yml"
CONF = "/etc/nccl.conf"
SHELL = "/etc/profile.d/nccl.sh"
LINK_LAYER = {"roce": "Ethernet", "ib": "InfiniBand"}
# The port taken down per profile (the second HCA of the link layer on the lab's hosts).
DOWN = {"roce": "mlx5_3", "ib": "mlx5_1"}


def play(ansible_playbook, profile: str, *args: str):
    return ansible_playbook(PLAYBOOK, "--limit", HOST, "-e", f"nccl_profile_name={profile}", *args)


def stats(run, ok: bool = True) -> dict:
    assert HOST in run.hosts, f"no PLAY RECAP for {HOST}:\n{run.stdout[-3000:]}\n{run.stderr[-2000:]}"
    s = run.hosts[HOST]
    if ok:
        assert run.rc == 0 and s["failures"] == 0, run.stdout[-4000:]
    return s


def conf(ssh) -> dict[str, str]:
    lines = [ln for ln in ssh(HOST, f"cat {CONF}").stdout.splitlines() if ln and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines)


def sysfs_ports(ssh) -> list[dict]:
    """Every HCA port as sysfs shows it, with the IPv4 RoCE v2 GID index (read here, not by fabricops)."""
    script = (
        "for p in /sys/class/infiniband/*/ports/*; do d=${p#/sys/class/infiniband/}; d=${d%%/*}; "
        "echo \"PORT $d ${p##*/} $(cat $p/link_layer) $(cat $p/state)\"; "
        "for t in $p/gid_attrs/types/*; do i=${t##*/}; "
        "echo \"GID $i $(cat $t 2>/dev/null) $(cat $p/gids/$i 2>/dev/null)\"; done; done"
    )
    ports: list[dict] = []
    for line in ssh(HOST, script).stdout.splitlines():
        if line.startswith("PORT "):
            _, dev, port, layer, *state = line.split()
            ports.append({"dev": dev, "port": port, "layer": layer, "active": "ACTIVE" in state,
                          "v2ipv4": []})
        else:
            m = re.match(r"GID (\d+) RoCE v2 (0000:0000:0000:0000:0000:ffff:\S+)$", line)
            if m:
                ports[-1]["v2ipv4"].append(int(m.group(1)))
    return ports


def digest(ssh) -> str:
    return hashlib.sha256(ssh(HOST, f"cat {CONF} {SHELL} 2>&1; stat -c %a:%U {CONF} {SHELL} 2>&1",
                              check=False).stdout.encode()).hexdigest()


@pytest.fixture
def port_down():
    """Take one port down with the lab's fault (``port-down``); always cleared afterwards."""
    injected = []

    def inject(dev: str):
        assert fabricops(["lab", "fault", HOST, "port-down", dev]) == 0
        injected.append(dev)

    yield inject
    if injected:
        assert fabricops(["lab", "fault", "clear", HOST]) == 0


@pytest.mark.parametrize("profile", ["roce", "ib"])
def test_profile_lists_exactly_the_up_ports(profile, lab, ssh, ansible_playbook, port_down):
    port_down(DOWN[profile])
    run = play(ansible_playbook, profile)
    stats(run)
    ports = [p for p in sysfs_ports(ssh) if p["layer"] == LINK_LAYER[profile]]
    up = [f"{p['dev']}:{p['port']}" for p in ports if p["active"]]
    assert len(up) == len(ports) - 1 and f"{DOWN[profile]}:1" not in up
    env = conf(ssh)
    assert env["NCCL_IB_HCA"] == "=" + ",".join(up)
    assert env["NCCL_IB_DISABLE"] == "0"
    if profile == "roce":
        indexes = {idx for p in ports if p["active"] for idx in p["v2ipv4"]}
        assert len(indexes) == 1, indexes
        # the lab's NCCL (libnccl.so.2.23.4) picks the GID itself (dynamic GID detection since
        # 2.21.5): the role leaves the index unset and states the address family and RoCE version
        assert "NCCL_IB_GID_INDEX" not in env, env
        assert env["NCCL_IB_ADDR_FAMILY"] == "AF_INET" and env["NCCL_IB_ROCE_VERSION_NUM"] == "2", env
        assert env["NCCL_IB_TC"] == "106"  # fabricops_roce.dscp 26 -> ToS 106
    else:
        assert "NCCL_IB_GID_INDEX" not in env and "NCCL_IB_TC" not in env
    shell = ssh(HOST, f"cat {SHELL}").stdout
    assert f"export NCCL_IB_HCA={env['NCCL_IB_HCA']};" in shell
    assert ssh(HOST, f"stat -c %a {CONF} {SHELL}").stdout.split() == ["644", "644"]


@pytest.mark.parametrize("profile", ["roce", "ib"])
def test_converged_profile_second_run_and_check_change_nothing(profile, lab, ssh, ansible_playbook):
    stats(play(ansible_playbook, profile))
    assert len(conf(ssh)["NCCL_IB_HCA"].split(",")) == 2  # both ports of the link layer are up
    assert stats(play(ansible_playbook, profile))["changed"] == 0
    assert stats(play(ansible_playbook, profile, "--check", "--diff"))["changed"] == 0


def test_hand_edit_is_reported_by_check_diff_not_fixed(lab, ssh, ansible_playbook):
    stats(play(ansible_playbook, "roce"))
    ssh(HOST, f"sed -i 's/^NCCL_IB_TC=106$/NCCL_IB_TC=104/' {CONF}")
    assert conf(ssh)["NCCL_IB_TC"] == "104"
    try:
        run = play(ansible_playbook, "roce", "--check", "--diff")
        assert stats(run)["changed"] == 1
        assert f"--- before: {CONF}" in run.stdout
        lines = run.stdout.splitlines()
        assert "-NCCL_IB_TC=104" in lines and "+NCCL_IB_TC=106" in lines
        assert conf(ssh)["NCCL_IB_TC"] == "104"  # reported, not fixed
    finally:
        stats(play(ansible_playbook, "roce"))
    assert conf(ssh)["NCCL_IB_TC"] == "106"


def test_unknown_profile_fails_before_any_task_and_changes_nothing(lab, ssh, ansible_playbook):
    stats(play(ansible_playbook, "ib"))  # a run that went on with any profile would rewrite this
    before = digest(ssh)
    run = play(ansible_playbook, "bogus")
    s = stats(run, ok=False)
    assert run.rc != 0 and s["failures"] == 1 and s["changed"] == 0
    reason = "value of nccl_profile_name must be one of: ib, roce, socket, got: bogus"
    assert any(ln.startswith(reason) for ln in (run.stdout + run.stderr).splitlines()), run.stdout[-3000:]
    role_tasks = [t for t in re.findall(r"^TASK \[(.+?)\] \*+$", run.stdout, re.M)
                  if t.startswith("fabricops.fabric.nccl_profile")]
    assert len(role_tasks) == 1 and "Validating arguments" in role_tasks[0], role_tasks
    assert digest(ssh) == before
    stats(play(ansible_playbook, "roce"))  # leave the host with the RoCE profile


def test_socket_ifname_defaults_to_the_default_route_read_live(lab, ssh, ansible_playbook):
    """With no nccl_profile_socket_ifname, NCCL_SOCKET_IFNAME is the default IPv4 route's interface,
    read on the host in this run (`ip -4 route get 8.8.8.8`; the plays gather no network facts, and a
    fact cache would hold an earlier run's route); a host without a default route gets none."""
    stats(play(ansible_playbook, "ib"))
    assert "NCCL_SOCKET_IFNAME" not in conf(ssh)  # the lab's hosts have no default route
    ssh(HOST, "ip route replace default via 198.51.100.1 dev eth0")
    try:
        stats(play(ansible_playbook, "ib"))
        assert conf(ssh)["NCCL_SOCKET_IFNAME"] == "=eth0"
    finally:
        ssh(HOST, "ip route del default", check=False)
    stats(play(ansible_playbook, "ib"))
    assert "NCCL_SOCKET_IFNAME" not in conf(ssh)
