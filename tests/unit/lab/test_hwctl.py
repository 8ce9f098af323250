"""hwctl renders the emulated sysfs from hardware.json and keeps knobs/counters across re-syncs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from emul_host import _hw, host_tree, write_hw

from fabricops_lab.emul import devstate, hwctl

EMUL_DIR = Path(hwctl.__file__).parent


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("EMUL_ROOT", str(tmp_path))
    return host_tree(tmp_path)


def read(root: Path, rel: str) -> str:
    return (root / "sys" / rel).read_text().strip()


def test_render_writes_the_kernel_formats(root):
    assert hwctl.sync() == "rendered"
    ib = "class/infiniband/mlx5_0"
    assert read(root, f"{ib}/node_guid") == "b83f:d203:00a1:b2c0"
    assert read(root, f"{ib}/fw_ver") == "28.39.1002"
    assert read(root, f"{ib}/node_type") == "1: CA"
    assert read(root, f"{ib}/ports/1/state") == "4: ACTIVE"
    assert read(root, f"{ib}/ports/1/phys_state") == "5: LinkUp"
    assert read(root, f"{ib}/ports/1/rate") == "400 Gb/sec (4X NDR)"
    assert read(root, f"{ib}/ports/1/link_layer") == "InfiniBand"
    assert read(root, f"{ib}/ports/1/lid") == "0x5"
    assert read(root, f"{ib}/ports/1/gids/0") == "fe80:0000:0000:0000:b83f:d203:00a1:b2c0"
    assert read(root, f"{ib}/ports/1/counters/port_xmit_data") == "0"
    assert read(root, f"{ib}/ports/1/hw_counters/np_cnp_sent") == "0"
    assert (root / f"sys/{ib}/device/net/ibp65s0").is_dir()
    # the lower tree is rendered too (what the overlay mounts on a lab host)
    lower = root / hwctl.LOWER / ib / "ports/1/state"
    assert lower.read_text().strip() == "4: ACTIVE"
    assert read(root, "kernel/config/rdma_cm/mlx5_2/ports/1/default_roce_mode") == "RoCE v2"
    assert read(root, "kernel/config/rdma_cm/mlx5_2/ports/1/default_roce_tos") == "0"


def test_roce_gid_table_from_mac_and_ipv4(root):
    hwctl.sync()
    pd = "class/infiniband/mlx5_2/ports/1"
    assert read(root, f"{pd}/gids/0") == "fe80:0000:0000:0000:a288:c2ff:fead:eab8"
    assert read(root, f"{pd}/gids/1") == "fe80:0000:0000:0000:a288:c2ff:fead:eab8"
    assert read(root, f"{pd}/gids/2") == "0000:0000:0000:0000:0000:ffff:0a00:0001"
    assert read(root, f"{pd}/gids/3") == "0000:0000:0000:0000:0000:ffff:0a00:0001"
    assert [read(root, f"{pd}/gid_attrs/types/{i}") for i in range(4)] == [
        "IB/RoCE v1", "RoCE v2", "IB/RoCE v1", "RoCE v2"]
    assert read(root, f"{pd}/gid_attrs/ndevs/3") == "enp41s0f0np0"


def test_gids_only_refresh_follows_an_address_change(root):
    hwctl.sync()
    addr = root / "var/lib/emulated-fabric/hosts/gpu01/addresses.json"
    addr.write_text(json.dumps({"enp41s0f0np0": ["10.0.0.9/24"]}))
    assert hwctl.sync(gids_only=True) == "gids refreshed"
    assert read(root, "class/infiniband/mlx5_2/ports/1/gids/3").endswith("ffff:0a00:0009")
    addr.write_text(json.dumps({}))
    hwctl.sync(gids_only=True)
    pd = root / "sys/class/infiniband/mlx5_2/ports/1"
    assert (pd / "gids/3").read_text().strip() == "0000:0000:0000:0000:0000:0000:0000:0000"
    assert not (pd / "gid_attrs/types/3").exists()


def test_netdev_knobs_live_under_the_resolved_netdev_path(root):
    hwctl.sync()
    real = root / "sys/devices/virtual/net/enp41s0f0np0"
    assert [(real / f"ecn/roce_np/enable/{p}").read_text().strip() for p in range(8)] == ["1"] * 8
    assert (real / "ecn/roce_rp/enable/3").read_text().strip() == "1"
    assert (real / "ecn/roce_np/cnp_dscp").read_text().strip() == "48"
    # and they read through the class/net symlink, as on a real host
    assert devstate.ecn_enabled("enp41s0f0np0", "roce_np", 3) is True
    assert (root / "sys/devices/virtual/net/ibp65s0/mode").read_text().strip() == "datagram"
    assert not (real / "mode").exists()


def test_knobs_and_counters_survive_a_resync_silicon_does_not(root):
    hwctl.sync()
    devstate.write_sysfs("class/net/enp41s0f0np0/ecn/roce_np/enable/3", "0")
    devstate.write_sysfs("class/infiniband/mlx5_2/tc/1/traffic_class", "106")
    devstate.add_counter("mlx5_0", 1, "port_xmit_data", 1000)
    devstate.add_counter("mlx5_2", 1, "np_cnp_sent", 7)
    hw = _hw()
    hw["hcas"][0]["ports"][0].update(state="DOWN", phys_state="Disabled")
    hw["hcas"][1]["fw_ver"] = "28.40.1000"
    write_hw(root, hw)
    assert hwctl.sync() == "re-synced"
    assert devstate.ecn_enabled("enp41s0f0np0", "roce_np", 3) is False
    assert devstate.traffic_class("mlx5_2") == 106
    assert devstate.read_counter("mlx5_0", 1, "port_xmit_data") == 1000
    assert devstate.read_counter("mlx5_2", 1, "np_cnp_sent") == 7
    assert read(root, "class/infiniband/mlx5_0/ports/1/state") == "1: DOWN"
    assert read(root, "class/infiniband/mlx5_0/ports/1/phys_state") == "3: Disabled"
    assert read(root, "class/infiniband/mlx5_0/ports/1/rate") == "10 Gb/sec (4X SDR)"
    assert read(root, "class/infiniband/mlx5_2/fw_ver") == "28.40.1000"


def test_fault_counters_are_added_once_per_increase(root):
    hwctl.sync()
    devstate.add_counter("mlx5_0", 1, "link_downed", 2)
    hw = _hw()
    hw["hcas"][0]["ports"][0].update(link_flaps=3, symbol_errors=50)
    write_hw(root, hw)
    hwctl.sync()
    assert devstate.read_counter("mlx5_0", 1, "link_downed") == 5
    assert devstate.read_counter("mlx5_0", 1, "symbol_error") == 50
    hwctl.sync()  # same hardware.json: nothing added again
    assert devstate.read_counter("mlx5_0", 1, "link_downed") == 5
    hw["hcas"][0]["ports"][0].update(link_flaps=4)
    write_hw(root, hw)
    hwctl.sync()
    assert devstate.read_counter("mlx5_0", 1, "link_downed") == 6


def test_degraded_width_and_down_ethernet_rates(root):
    hw = _hw()
    hw["hcas"][0]["ports"][0].update(width="2X", rate_gbps=200)
    hw["hcas"][1]["ports"][0].update(state="DOWN", phys_state="Disabled")
    write_hw(root, hw)
    hwctl.sync()
    assert read(root, "class/infiniband/mlx5_0/ports/1/rate") == "200 Gb/sec (2X NDR)"
    assert read(root, "class/infiniband/mlx5_2/ports/1/rate") == "40 Gb/sec (4X QDR)"


def test_reset_knobs_restores_defaults_but_keeps_counters(root):
    hwctl.sync()
    devstate.write_sysfs("class/net/enp41s0f0np0/ecn/roce_rp/enable/3", "0")
    devstate.write_sysfs("class/infiniband/mlx5_2/tc/1/traffic_class", "106")
    devstate.add_counter("mlx5_2", 1, "port_rcv_data", 9)
    hwctl.reset_knobs()
    assert devstate.ecn_enabled("enp41s0f0np0", "roce_rp", 3) is True
    assert devstate.traffic_class("mlx5_2") is None
    assert devstate.read_counter("mlx5_2", 1, "port_rcv_data") == 9


def test_runs_as_a_script(root, tmp_path_factory):
    """The lab copies emul/ to /usr/lib/emulated-hw/emul/ and runs hwctl.py as a script."""
    env = dict(os.environ, EMUL_ROOT=str(root))
    out = subprocess.run([sys.executable, str(EMUL_DIR / "hwctl.py"), "sync"], capture_output=True,
                         text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "rendered"
    status = subprocess.run([sys.executable, str(EMUL_DIR / "hwctl.py"), "status"], capture_output=True,
                            text=True, env=env, check=False)
    assert "overlay on /sys: not mounted" in status.stdout
    assert "mlx5_0 port 1: 4: ACTIVE (ibp65s0)" in status.stdout
    bad = subprocess.run([sys.executable, str(EMUL_DIR / "hwctl.py"), "frobnicate"], capture_output=True,
                         text=True, env=env, check=False)
    assert bad.returncode == 2
