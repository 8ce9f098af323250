"""The lab's Slurm as files: slurm.conf from the topology and `slurmd -C`, the node readiness rule,
the MUNGE key and daemon laid into a container root, the head node in the inventory and /etc/hosts."""

from __future__ import annotations

import os
import stat

import pytest
import yaml

from fabricops.errors import FabricopsError
from fabricops_lab import hosts, inventory, paths, slurm, topology

# what slurmd 22.05 -C printed inside a lab host on the 2-core development machine
SLURMD_C = (
    "NodeName=gpu01 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105\n"
    "UpTime=0-00:01:07\n"
)
HW = {"CPUs": 2, "Boards": 1, "SocketsPerBoard": 1, "CoresPerSocket": 2, "ThreadsPerCore": 1,
      "RealMemory": 24105}


def _conf(topo) -> tuple[dict[str, str], list[dict[str, str]], list[dict[str, str]]]:
    """slurm.conf -> (single keys, NodeName lines, PartitionName lines) as dicts."""
    single: dict[str, str] = {}
    nodes, parts = [], []
    for line in slurm.slurm_conf(topo, HW).splitlines():
        if not line or line.startswith("#"):
            continue
        fields = dict(kv.split("=", 1) for kv in line.split())
        if "NodeName" in fields:
            nodes.append(fields)
        elif "PartitionName" in fields:
            parts.append(fields)
        else:
            (key, value), = fields.items()
            assert key not in single, f"{key} set twice"
            single[key] = value
    return single, nodes, parts


def test_parse_slurmd_c():
    assert slurm.parse_slurmd_c(SLURMD_C) == HW


def test_parse_slurmd_c_without_hardware_fails_naming_what_is_missing():
    with pytest.raises(FabricopsError, match="RealMemory"):
        slurm.parse_slurmd_c("NodeName=gpu01 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 "
                             "ThreadsPerCore=1\n", "slurmd -C on gpu01")
    with pytest.raises(FabricopsError, match="slurmd -C on gpu01 printed no CPUs"):
        slurm.parse_slurmd_c("slurmd: fatal: something\n", "slurmd -C on gpu01")


def test_every_host_has_a_node_line_with_its_address_and_slurmd_hardware():
    topo = topology.load()
    _single, nodes, _parts = _conf(topo)
    assert [n["NodeName"] for n in nodes] == [h["name"] for h in topo["hosts"]] == [
        "gpu01", "gpu02", "gpu03", "gpu04"]
    for n, h in zip(nodes, topo["hosts"], strict=True):
        assert n["NodeAddr"] == h["mgmt_ip"]
        assert {k: int(n[k]) for k in slurm.HARDWARE_KEYS} == HW
        assert n["State"] == "UNKNOWN"


def test_one_default_partition_with_every_host():
    topo = topology.resolve(None, 16)
    _single, nodes, parts = _conf(topo)
    assert len(nodes) == 16
    assert len(parts) == 1
    part = parts[0]
    assert part["PartitionName"] == "gpu" and part["Default"] == "YES" and part["State"] == "UP"
    assert part["Nodes"].split(",") == [f"gpu{i:02d}" for i in range(1, 17)]


def test_settings_a_site_writes_and_the_container_needs():
    topo = topology.load()
    single, _nodes, _parts = _conf(topo)
    assert single["ClusterName"] == topo["name"] == "hgx-h100-ndr"
    assert single["SlurmctldHost"] == "slurmctl(198.51.100.100)"
    assert single["SlurmUser"] == "slurm"
    assert single["AuthType"] == "auth/munge" and single["CredType"] == "cred/munge"
    # no cgroup plugin anywhere: the containers' cgroup v1 controllers are read-only
    assert single["ProctrackType"] == "proctrack/linuxproc"
    assert single["TaskPlugin"] == "task/none"
    assert single["JobAcctGatherType"] == "jobacct_gather/none"
    assert not [v for v in single.values() if "cgroup" in v]
    assert single["AccountingStorageType"] == "accounting_storage/none"
    assert single["ReturnToService"] == "1"
    assert single["SlurmdTimeout"] == "60"
    # Debian's paths (its units' PIDFile=, the directories its postinsts chown to slurm)
    assert single["SlurmctldPidFile"] == "/run/slurmctld.pid" and single["SlurmdPidFile"] == "/run/slurmd.pid"
    assert single["StateSaveLocation"] == "/var/lib/slurm/slurmctld"
    assert single["SlurmdSpoolDir"] == "/var/lib/slurm/slurmd"


def test_the_two_tier_rack_names_its_eight_hosts():
    topo = topology.resolve("two-tier", None)
    _single, nodes, parts = _conf(topo)
    assert [n["NodeName"] for n in nodes] == [f"gpu{i:02d}" for i in range(1, 9)]
    assert parts[0]["Nodes"] == ",".join(n["NodeName"] for n in nodes)


@pytest.mark.parametrize(
    ("state", "reason", "idle_ok", "registered_ok"),
    [
        ("idle", "none", True, True),
        ("drain", "test", False, True),  # drained by someone: theirs, not the lab's business
        ("down", "set by an operator", False, True),
        ("idle*", "Not responding", False, False),
        ("down*", "Not responding", False, False),
        ("unk*", "none", False, False),
        ("inval", "Low RealMemory", False, False),
    ],
)
def test_node_readiness(state, reason, idle_ok, registered_ok):
    states = {"gpu01": ("idle", "none"), "gpu02": (state, reason)}
    for idle, ok in ((True, idle_ok), (False, registered_ok)):
        bad = slurm.not_ready(states, ["gpu01", "gpu02"], idle=idle)
        assert (bad == {}) is ok
        if not ok:
            assert bad["gpu02"].startswith(state)
            assert reason in bad["gpu02"] or reason == "none"


def test_a_node_missing_from_sinfo_is_not_ready():
    assert slurm.not_ready(slurm._node_states("gpu01|idle|none\n"), ["gpu01", "gpu02"], idle=False) == {
        "gpu02": "missing (not in sinfo)"}


def _image_root(tmp_path):
    root = tmp_path / "root"
    (root / "etc/munge").mkdir(parents=True)
    (root / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\nmunge:x:101:103::/nonexistent:/usr/sbin/nologin\n"
    )
    (root / "etc/group").write_text("root:x:0:\nmunge:x:103:\n")
    return root


def test_tree_topology_with_a_site_s_first_topology_conf():
    """topology/tree from the start (a plugin change needs a slurmctld restart; a new topology.conf
    only `scontrol reconfigure`), and the file a site writes before it knows its fabric: one switch
    over every node, in topology.conf(5)'s syntax."""
    topo = topology.load()
    single, _nodes, _parts = _conf(topo)
    assert single["TopologyPlugin"] == "topology/tree"
    lines = [ln for ln in slurm.topology_conf(topo).splitlines() if ln and not ln.startswith("#")]
    assert lines == ["SwitchName=rack Nodes=gpu01,gpu02,gpu03,gpu04"]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to the image's munge user needs root")
def test_install_never_writes_over_the_site_s_topology_conf(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    (tmp_path / "state/slurm").mkdir(parents=True)
    (tmp_path / "state/slurm/topology.conf").write_text("SwitchName=rack Nodes=gpu01\n")
    root = _image_root(tmp_path)
    slurm.install(root, "slurmctld")
    assert (root / slurm.TOPOLOGY_CONF).read_text() == "SwitchName=rack Nodes=gpu01\n"
    (root / slurm.TOPOLOGY_CONF).write_text("SwitchName=leaf1 Nodes=gpu01\n")  # fabricops topology's
    slurm.install(root, "slurmctld")
    assert (root / slurm.TOPOLOGY_CONF).read_text() == "SwitchName=leaf1 Nodes=gpu01\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to the image's munge user needs root")
def test_install_lays_the_key_the_conf_and_the_daemon(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    root = _image_root(tmp_path)
    slurm.install(root, "slurmd")
    key = root / slurm.MUNGE_KEY
    st = key.stat()
    assert stat.S_IMODE(st.st_mode) == 0o400 and (st.st_uid, st.st_gid) == (101, 103)
    assert key.read_bytes() == (tmp_path / "state/slurm/munge.key").read_bytes()
    assert len(key.read_bytes()) == 128
    link = root / "etc/systemd/system/multi-user.target.wants/slurmd.service"
    assert os.readlink(link) == "/lib/systemd/system/slurmd.service"
    assert not (root / slurm.CONF).exists()  # not written yet: slurmd -C comes after boot
    (tmp_path / "state/slurm/slurm.conf").write_text("ClusterName=x\n")
    other = _image_root(tmp_path / "other")
    slurm.install(other, "slurmctld")
    assert (other / slurm.MUNGE_KEY).read_bytes() == key.read_bytes()  # one key per lab
    assert (other / slurm.CONF).read_text() == "ClusterName=x\n"
    assert (other / "etc/systemd/system/multi-user.target.wants/slurmctld.service").is_symlink()
    assert not (other / "etc/systemd/system/multi-user.target.wants/slurmd.service").exists()


def test_image_without_munge_user_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(FabricopsError, match="no 'munge' in /etc/passwd"):
        slurm.install(root, "slurmd")


def test_inventory_puts_the_head_node_in_its_own_group(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    topo = topology.load()
    lab = {"name": topo["name"], "topology": topo, "hosts": {}, "switches": {}}
    without = yaml.safe_load(inventory.render(lab)["hosts.yml"])["all"]["children"]
    assert "slurm_controller" not in without
    lab["slurm"] = {"controller": {"name": "slurmctl", "mgmt_ip": slurm.CONTROLLER_IP}}
    children = yaml.safe_load(inventory.render(lab)["hosts.yml"])["all"]["children"]
    group = children["slurm_controller"]
    assert group["hosts"] == {"slurmctl": {"ansible_host": "198.51.100.100"}}
    assert group["vars"] == children["gpu_hosts"]["vars"]  # reached over SSH like the hosts
    assert "slurmctl" not in children["gpu_hosts"]["hosts"]
    assert {k: v for k, v in children.items() if k != "slurm_controller"} == without


def test_hosts_resolve_the_head_node():
    topo = topology.load()
    assert "198.51.100.100\tslurmctl" in hosts.etc_hosts(topo, "gpu01").splitlines()
    mgmt = {h["mgmt_ip"] for h in topo["hosts"]} | {s["mgmt_ip"] for s in topo["switches"]}
    assert slurm.CONTROLLER_IP not in mgmt
