"""fabricops.evidence.probes: each probe names what to read on a host and the parser that reads it;
verify's host phase and the collector run those very commands."""

from __future__ import annotations

import shlex

import pytest
from captures import read_fixture

from fabricops.evidence import hostfiles, tools
from fabricops.evidence.probes import PROBES, Probe
from fabricops.monitor import collector


def test_every_probe_names_an_evidence_parser():
    public = {getattr(m, n) for m in (hostfiles, tools) for n in m.__all__}
    for name, probe in PROBES.items():
        assert probe.name == name and probe.parser in public, name
        assert bool(probe.argv) != bool(probe.files), f"{name}: a command or files, not both"


def test_commands():
    assert PROBES["ib_rates"].command() == "grep -H '' /sys/class/infiniband/*/ports/*/rate"
    assert PROBES["ecn"].command() == (
        "grep -H '' /sys/class/net/*/ecn/roce_np/enable/* /sys/class/net/*/ecn/roce_rp/enable/* "
        "2>/dev/null; true"
    )
    assert PROBES["nccl_conf"].command() == "cat /etc/nccl.conf"
    odd = "/etc/my nccl.conf; rm -rf /"
    assert PROBES["nccl_conf"].command(path=odd) == f"cat {shlex.quote(odd)}"
    assert PROBES["ethtool_stats"].argv_for(netdev="ens1f0np0") == ["ethtool", "-S", "ens1f0np0"]
    with pytest.raises(KeyError):
        PROBES["ethtool_stats"].command()  # a field without a value is refused, not left as '{netdev}'
    with pytest.raises(ValueError):
        PROBES["ib_rates"].argv_for()


def test_a_probe_reads_its_own_output():
    text = read_fixture("nvidia-smi-nvlink", "h800_8_links_elided_spaces.txt")
    assert PROBES["nvlink_status"].read(text) == tools.parse_nvlink_status(text)
    assert Probe("x", hostfiles.parse_nccl_conf, argv=("cat", "/x")).read("A=1") == {"A": "1"}


def test_verify_takes_its_commands_from_the_table():
    """verify's host phase runs the probes' commands: the same lines it ran before the table."""
    from fabricops.verify import hostchecks
    from fabricops.verify.expect import host_expect

    hostvars = {
        "fabricops_hardware_profile": "hgx-h100-ndr",
        "mlnx_ofed_version": "24.10-1.1.4.0",
        "fabricops_cabling": [
            {
                "host": "gpu03",
                "netdev": "ibp26s0",
                "hca": "mlx5_0",
                "port": 1,
                "switch": "ib-sw1",
                "switch_port": "5",
            }
        ],
        "nccl_profile_name": "ib",
        "nccl_profile_conf_path": "/etc/nccl profiles/ib.conf",
    }
    cmds = hostchecks.commands(host_expect("gpu03", hostvars, switch_link_layers={"ib-sw1": "InfiniBand"}))
    assert (
        cmds["ib_rates"] == "grep -H '' /sys/class/infiniband/*/ports/*/rate" == PROBES["ib_rates"].command()
    )
    assert cmds["nccl_conf"] == "cat '/etc/nccl profiles/ib.conf'"
    assert cmds["nccl_conf"] == PROBES["nccl_conf"].command(path="/etc/nccl profiles/ib.conf")


def test_the_collector_runs_the_probes_commands(tmp_path):
    """Each command the collector runs is a probe's (with the tool path its configuration may set)."""
    seen: list[list[str]] = []

    def run(argv):
        seen.append(list(argv))
        return (0, "0, 00000000:18:00.0\n") if "--query-gpu=index,pci.bus_id" in argv else (127, "")

    net = tmp_path / "class/infiniband/mlx5_0/device/net/ens1f0np0"
    net.mkdir(parents=True)
    port = tmp_path / "class/infiniband/mlx5_0/ports/1"
    port.mkdir(parents=True)
    for name, value in {
        "state": "4: ACTIVE",
        "phys_state": "5: LinkUp",
        "rate": "200 Gb/sec (4X HDR)",
        "link_layer": "Ethernet",
    }.items():
        (port / name).write_text(value + "\n")
    (tmp_path / "class/infiniband/mlx5_0/device/uevent").write_text("PCI_SLOT_NAME=0000:1a:00.0\n")
    collector.collect({"gpus": True, "firmware": True, "dkms": True}, sysfs=str(tmp_path), run=run, host="h")
    params = {"netdev": "ens1f0np0", "bdf": "0000:1a:00.0"}
    known = [
        p.argv_for(**{k: v for k, v in params.items() if "{" + k + "}" in " ".join(p.argv)})
        for p in PROBES.values()
        if p.argv
    ]
    ran = [a for a in seen if a != ["uname", "-r"]]
    assert ran and all(a in known for a in ran), [a for a in ran if a not in known]
    assert {a[0] for a in ran} == {
        "ethtool",
        "nvidia-smi",
        "lspci",
        "mlxconfig",
        "mlxfwmanager",
        "dkms",
        "mokutil",
    }
