"""The emulated rack itself: reachable, isolated, the vendor software a new server has."""

from __future__ import annotations

import re

import pytest

# about the rack as `lab up` boots it (no OFED, no addresses, switches at factory settings): a fresh
# one, whatever files ran before (tests/integration/conftest.py, fresh_lab)
pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("fresh_lab")]

HOSTS = ["gpu01", "gpu02", "gpu03", "gpu04"]
NETDEVS = {"ibp26s0", "ibp60s0", "enp170s0f0np0", "enp170s0f1np1"}


def test_setup_reaches_every_host(ansible):
    run = ansible("all", "ansible.builtin.setup", "gather_subset=!all,!min,network,distribution")
    assert run.rc == 0, run.stderr[-2000:] or run.stdout[-2000:]
    for name in HOSTS:
        facts = run.hosts[name]["ansible_facts"]
        assert facts["ansible_distribution"] == "Debian"
        assert facts["ansible_distribution_major_version"] == "12"
        assert set(facts["ansible_interfaces"]) >= NETDEVS | {"eth0", "lo"}
        idx = HOSTS.index(name) + 1
        assert facts["ansible_eth0"]["ipv4"]["address"] == f"198.51.100.{10 + idx}"


def test_hostnames_and_identity_differ(ssh):
    names = {h: ssh(h, "hostname").stdout.strip() for h in HOSTS}
    assert names == {h: h for h in HOSTS}
    ids = {ssh(h, "cat /etc/machine-id").stdout.strip() for h in HOSTS}
    assert len(ids) == len(HOSTS)


def test_filesystems_are_isolated(ssh):
    ssh("gpu01", "echo only-on-gpu01 > /root/isolation-marker")
    try:
        for other in HOSTS[1:]:
            assert ssh(other, "test -e /root/isolation-marker", check=False).returncode == 1
        assert ssh("gpu01", "cat /root/isolation-marker").stdout.strip() == "only-on-gpu01"
    finally:
        ssh("gpu01", "rm -f /root/isolation-marker")


def test_each_host_sees_only_its_own_interfaces(ssh, lab):
    macs = {}
    for h in HOSTS:
        out = ssh(h, "ip -o link show").stdout
        names = {m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", out, re.M)}
        assert names == NETDEVS | {"eth0", "lo"}, (h, names)
        macs[h] = set(re.findall(r"link/ether ([0-9a-f:]+)", out))
    for a in HOSTS:
        for b in HOSTS:
            if a < b:
                assert not macs[a] & macs[b]


def test_roce_addresses_from_the_hosts_own_config(ssh):
    conf = ssh("gpu02", "cat /etc/network/interfaces.d/enp170s0f0np0").stdout
    assert "address 203.0.113.2/26" in conf
    # gpu03 is the netplan variant: its provisioning's netplan file, applied by systemd-networkd
    conf = ssh("gpu03", "cat /etc/netplan/00-installer-config.yaml").stdout
    assert "enp170s0f0np0:" in conf and "203.0.113.3/26" in conf
    no_ifupdown = ssh("gpu03", "test -e /etc/network/interfaces.d || test -x /sbin/ifup", check=False)
    assert no_ifupdown.returncode == 1
    # systemd-networkd manages the port from netplan's generated file (its setup state reads
    # "configuring" until IPv6 link-local is acquired, so the file is what is asserted)
    status = ssh("gpu03", "networkctl status enp170s0f1np1").stdout
    assert "/run/systemd/network/10-netplan-enp170s0f1np1.network" in status, status
    out = ssh("gpu03", "ip -o -4 addr show dev enp170s0f1np1").stdout
    assert "203.0.113.67/26" in out
    # same rail, through the leaf's bridge
    assert ssh("gpu03", "ping -c1 -W2 203.0.113.1", check=False).returncode == 0
    assert ssh("gpu01", "ping -c1 -W2 203.0.113.68", check=False).returncode == 0


def test_ipoib_netdevs_are_unconfigured(ssh):
    out = ssh("gpu02", "ip -o -4 addr show").stdout
    assert "ibp26s0" not in out and "ibp60s0" not in out


def test_no_package_network_and_no_resolver(ssh):
    resolv = ssh("gpu01", "cat /etc/resolv.conf").stdout
    assert not [ln for ln in resolv.splitlines() if ln.startswith("nameserver")]
    assert (
        ssh(
            "gpu01", "grep -rh '^deb\\|^URIs' /etc/apt/sources.list /etc/apt/sources.list.d/", check=False
        ).stdout
        == ""
    )
    hosts = ssh("gpu01", "cat /etc/hosts").stdout
    assert "198.51.100.12\tgpu02" in hosts


def test_nvidia_smi_is_installed_and_parses(ssh):
    out = ssh("gpu02", "nvidia-smi -L").stdout
    lines = out.strip().splitlines()
    assert len(lines) == 8 and all("NVIDIA H100 80GB HBM3" in ln for ln in lines)
    from fabricops.parsers import nvidia_smi

    q = ssh("gpu02", "nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total --format=csv").stdout
    rec = nvidia_smi.parse_query(q)
    assert len(rec.rows) == 8
    topo = nvidia_smi.parse_topo(ssh("gpu02", "nvidia-smi topo -m").stdout)
    assert len(topo.gpus) == 8


def test_ofed_tools_absent_before_install(ssh):
    for tool in ("ibstat", "ofed_info", "ibv_devinfo", "mlnx_qos"):
        assert ssh("gpu01", f"command -v {tool}", check=False).returncode != 0, tool


def test_emulated_sysfs_and_wire(ssh):
    assert (
        ssh("gpu04", "cat /sys/class/infiniband/mlx5_0/ports/1/rate").stdout.strip() == "400 Gb/sec (4X NDR)"
    )
    assert ssh("gpu04", "cat /var/lib/emulated-fabric/cabling.json", check=False).returncode == 0
    assert ssh("gpu04", "touch /var/lib/emulated-fabric/x", check=False).returncode != 0  # read-only


def test_second_up_changes_nothing(lab):
    from fabricops_lab import rack

    again = rack.up()
    assert again["changed"] == []


def test_status_json(lab):
    from fabricops_lab import rack

    st = rack.status()
    assert {h: v["state"] for h, v in st["hosts"].items()} == {h: "up" for h in HOSTS}
    assert st["hosts"]["gpu01"]["addresses"]["enp170s0f0np0"] == "203.0.113.1/26"
    assert set(st["switches"]) == {"ib-sw1", "leaf-onyx", "leaf-cumulus"}
