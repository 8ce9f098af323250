"""The lab's emulated ethtool: mlx5 PFC counters for emulated RoCE netdevs, in ethtool's format."""

from __future__ import annotations

import json

import pytest
from captures import read_fixture

from fabricops.monitor.collector import parse_ethtool_stats
from fabricops_lab.emul import ethtool


@pytest.fixture
def emul_root(tmp_path, monkeypatch):
    hw = {
        "host": "gpu01",
        "hcas": [
            {"name": "mlx5_2", "ports": [{"port": 1, "link_layer": "Ethernet", "netdev": "enp170s0f0np0"}]},
            {"name": "mlx5_0", "ports": [{"port": 1, "link_layer": "InfiniBand", "netdev": "ibp26s0"}]},
        ],
    }
    (tmp_path / "var/lib/emulated-hw").mkdir(parents=True)
    (tmp_path / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(hw))
    counters = tmp_path / "sys/class/infiniband/mlx5_2/ports/1/counters"
    counters.mkdir(parents=True)
    (counters / "port_rcv_data").write_text("100\n")
    (counters / "port_rcv_packets").write_text("5\n")
    monkeypatch.setenv("EMUL_ROOT", str(tmp_path))
    return tmp_path


def test_stats_follow_sysfs_and_state_file(emul_root, capsys):
    state = emul_root / "run/emulated-hw/ethtool"
    state.mkdir(parents=True)
    (state / "enp170s0f0np0.json").write_text(
        json.dumps({"rx_prio3_pause": 12, "tx_pause_storm_error_events": 1})
    )
    assert ethtool.main(["-S", "enp170s0f0np0"]) == 0
    out = capsys.readouterr().out
    stats = parse_ethtool_stats(out)
    assert stats["rx_bytes_phy"] == 400 and stats["rx_packets_phy"] == 5
    assert stats["rx_prio3_pause"] == 12 and stats["rx_pause_ctrl_phy"] == 12
    assert stats["tx_pause_storm_error_events"] == 1
    assert {f"tx_prio{p}_pause_duration" for p in range(8)} <= set(stats)


def test_same_line_structure_as_a_real_capture(emul_root, capsys):
    ethtool.main(["-S", "enp170s0f0np0"])
    mine = capsys.readouterr().out.splitlines()
    real = read_fixture("ethtool-stats", "cx4_ubuntu1804_head_ethq8.txt").splitlines()
    assert mine[0] == real[0] == "NIC statistics:"
    shape = r"^     [a-z0-9_]+: \d+$"
    import re

    assert all(re.match(shape, line) for line in real[1:] if line)
    assert all(re.match(shape, line) for line in mine[1:])
    assert {"rx_packets", "rx_bytes", "tx_packets", "tx_bytes"} <= {ln.split(":")[0].strip() for ln in mine}


def test_other_netdevs_go_to_the_real_ethtool(emul_root, monkeypatch):
    called = {}
    monkeypatch.setattr(ethtool, "_real", lambda argv: called.setdefault("argv", argv) and 0)
    ethtool.main(["-S", "ibp26s0"])
    assert called["argv"] == ["-S", "ibp26s0"]
    called.clear()
    ethtool.main(["-i", "enp170s0f0np0"])
    assert called["argv"] == ["-i", "enp170s0f0np0"]
