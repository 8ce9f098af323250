"""The stdlib-only collector: sysfs, ethtool -S and nvidia-smi -> Prometheus exposition text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from captures import read_fixture

from fabricops.monitor import collector as c

REPO = Path(__file__).resolve().parents[3]


def test_role_ships_the_package_module():
    """The role copies this very module from the installed package (fabricops.fabric.package_files;
    tests/unit/hostqos/test_hostside_single_source.py checks the bytes and runs it without site-packages)."""
    from fabricops.hostside import ship

    shipped = {f["path"]: f["src"] for f in ship.files_for("fabricops.monitor.collector")}
    assert Path(shipped["fabricops/monitor/collector.py"]).read_bytes() == Path(c.__file__).read_bytes()
    assert not (REPO / "roles" / "fabric_monitor" / "files" / "fabricops-collector").exists()


def test_metric_names_follow_prometheus_conventions():
    for name, (mtype, help_text) in c.METRICS.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
        assert help_text
        if mtype == "counter":
            assert name.endswith("_total"), name
        else:
            assert not name.endswith("_total"), name
        assert "bits" not in name, f"{name}: Prometheus' base unit is bytes (promtool check metrics)"
        if "bytes" in name or "seconds" in name:
            assert re.search(r"_(bytes|seconds|bytes_per_second)(_total)?$", name), name


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def make_sysfs(root: Path) -> Path:
    ib = "class/infiniband/mlx5_0/ports/1"
    _write(root, f"{ib}/state", "4: ACTIVE")
    _write(root, f"{ib}/phys_state", "5: LinkUp")
    _write(root, f"{ib}/rate", "200 Gb/sec (2X NDR)")
    _write(root, f"{ib}/link_layer", "InfiniBand")
    for name, val in {
        "port_xmit_data": 1000,
        "port_rcv_data": 250,
        "port_xmit_packets": 7,
        "symbol_error": 3,
        "link_downed": 8,
        "port_rcv_errors": 1,
        "port_xmit_discards": 2,
        "link_error_recovery": 4,
        "port_rcv_packets": 9,
    }.items():
        _write(root, f"{ib}/counters/{name}", str(val))
    eth = "class/infiniband/mlx5_2/ports/1"
    _write(root, f"{eth}/state", "1: DOWN")
    _write(root, f"{eth}/phys_state", "3: Disabled")
    _write(root, f"{eth}/rate", "40 Gb/sec (4X QDR)")
    _write(root, f"{eth}/link_layer", "Ethernet")
    for name, val in {
        "np_cnp_sent": 0,
        "np_ecn_marked_roce_packets": 77,
        "rp_cnp_handled": 5,
        "out_of_sequence": 11,
        "roce_adp_retrans": 6,
    }.items():
        _write(root, f"{eth}/hw_counters/{name}", str(val))
    (root / "class/infiniband/mlx5_2/device/net/enp170s0f0np0").mkdir(parents=True)
    return root


def parse_exposition(text: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
        assert m, line
        out[(m.group(1), frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2))))] = float(m.group(3))
    return out


def get(metrics, name, **labels):
    want = {(k, str(v)) for k, v in labels.items()}
    hits = [v for (n, lab), v in metrics.items() if n == name and want <= lab]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


ETHTOOL = (
    "NIC statistics:\n     rx_prio3_pause: 41927\n     rx_prio3_pause_duration: 8134\n"
    "     tx_prio3_pause: 1290418\n     tx_prio3_pause_duration: 2914772\n"
    "     rx_prio3_pause_transition: 39218\n     tx_pause_storm_warning_events: 2\n"
    "     tx_pause_storm_error_events: 1\n"
)


def fake_run(outputs):
    def run(argv):
        key = " ".join(argv)
        for k, v in outputs.items():
            if key.endswith(k):
                return v
        return 127, ""

    return run


def test_collect_converts_and_labels(tmp_path):
    root = make_sysfs(tmp_path)
    nvlink = read_fixture("nvidia-smi-nvlink", "v100_two_inactive_links.txt")
    errors = read_fixture("nvidia-smi-nvlink-errors", "h100_elided_stas00.txt")
    run = fake_run(
        {"-S enp170s0f0np0": (0, ETHTOOL), "nvlink --status": (0, nvlink), "nvlink -e": (0, errors)}
    )
    text = c.collect(
        {"expected_rate_gbps": {"InfiniBand": 400}}, sysfs=str(root), run=run, host="gpu04", now=1.5
    )
    m = parse_exposition(text)
    ib = {"host": "gpu04", "device": "mlx5_0", "port": "1"}
    assert get(m, "fabricops_ib_port_transmit_bytes_total", **ib) == 4000  # 4-byte words
    assert get(m, "fabricops_ib_port_receive_bytes_total", **ib) == 1000
    assert get(m, "fabricops_ib_port_symbol_errors_total", **ib) == 3
    assert get(m, "fabricops_ib_port_link_downed_total", **ib) == 8
    assert get(m, "fabricops_ib_port_transmit_discards_total", **ib) == 2
    assert get(m, "fabricops_ib_port_rate_bytes_per_second", **ib) == 200e9 / 8  # bytes: the base unit
    assert get(m, "fabricops_ib_port_width_lanes", **ib) == 2
    assert get(m, "fabricops_ib_port_expected_rate_bytes_per_second", **ib) == 400e9 / 8
    assert get(m, "fabricops_ib_port_up", **ib) == 1
    eth = {"host": "gpu04", "device": "mlx5_2", "port": "1"}
    assert get(m, "fabricops_ib_port_up", **eth) == 0
    assert get(m, "fabricops_ib_port_state", **eth) == 1
    assert get(m, "fabricops_ib_port_physical_state", **eth) == 3
    assert get(m, "fabricops_roce_ecn_marked_packets_total", netdev="enp170s0f0np0", **eth) == 77
    assert get(m, "fabricops_roce_cnp_sent_total", **eth) == 0
    assert get(m, "fabricops_roce_retransmits_total", **eth) == 6
    pfc = {"netdev": "enp170s0f0np0", "priority": "3"}
    assert get(m, "fabricops_pfc_receive_pause_frames_total", **pfc) == 41927
    assert get(m, "fabricops_pfc_transmit_pause_duration_seconds_total", **pfc) == pytest.approx(2.914772)
    assert get(m, "fabricops_pfc_pause_storm_error_events_total", netdev="enp170s0f0np0") == 1
    assert get(m, "fabricops_nvlink_link_up", gpu="3", link="0") == 1
    assert get(m, "fabricops_collector_source_up", source="nvlink_errors") == 1
    assert get(m, "fabricops_collector_last_run_timestamp_seconds") == 1.5
    # TYPE lines for counters
    assert "# TYPE fabricops_ib_port_symbol_errors_total counter" in text


def test_failing_sources_are_reported_not_fatal(tmp_path):
    root = make_sysfs(tmp_path)
    text = c.collect({}, sysfs=str(root), run=fake_run({}), host="h")
    m = parse_exposition(text)
    assert get(m, "fabricops_collector_source_up", source="ethtool") == 0
    assert get(m, "fabricops_collector_source_up", source="nvlink_status") == 0
    assert get(m, "fabricops_collector_source_up", source="sysfs") == 1
    assert not any(n == "fabricops_ib_port_expected_rate_bytes_per_second" for n, _ in m)


def test_nvlink_errors_capture():
    errs = c.parse_nvlink_errors(read_fixture("nvidia-smi-nvlink-errors", "h100_elided_stas00.txt"))
    assert {(e["link"], e["kind"]) for e in errs} == {
        (n, k) for n in (0, 1, 17) for k in ("replay", "recovery", "crc")
    }
    assert all(e["gpu"] == 0 and e["value"] == 0 for e in errs)
    data_crc = "GPU 1: x (UUID: GPU-1)\n\t Link 2: Data CRC Errors: 4\n\t Link 2: Flit CRC Errors: 3\n"
    reg = c.Registry()
    c.nvlink_metrics(reg, "h", [], c.parse_nvlink_errors(data_crc))
    assert 'fabricops_nvlink_crc_errors_total{gpu="1",host="h",link="2"} 7' in reg.render()


def test_write_atomic_and_main(tmp_path, capsys):
    root = make_sysfs(tmp_path / "sys")
    out = tmp_path / "tf" / "fabricops.prom"
    out.parent.mkdir()
    cfg = tmp_path / "c.json"
    cfg.write_text('{"nvlink": false, "ethtool": "/nonexistent/ethtool", "host": "gpu09"}')
    assert c.main(["--config", str(cfg), "--output", str(out), "--sysfs", str(root)]) == 0
    text = out.read_text()
    assert 'host="gpu09"' in text and oct(out.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in out.parent.iterdir()] == ["fabricops.prom"]  # no temp file left


def test_the_collector_reads_with_the_evidence_parsers():
    """One copy of each parser (fabricops.evidence); the collector's names stay importable."""
    from fabricops.evidence import errors, hostfiles, tools

    assert c.SourceError is errors.SourceError
    for name in ("parse_rate", "parse_state", "parse_gts"):
        assert getattr(c, name) is getattr(hostfiles, name)
    for name in ("parse_ethtool_stats", "parse_nvlink_status", "parse_nvlink_errors", "parse_gpu_addresses",
                 "parse_lspci_acs", "parse_mlxconfig_pending", "parse_mlxfwmanager", "parse_dkms_status",
                 "parse_sb_state", "pci_address"):
        assert getattr(c, name) is getattr(tools, name)
    own = [n for n, v in vars(c).items() if n.startswith("parse_") and v.__module__ == c.__name__]
    assert own == [], f"parsers defined in the collector instead of fabricops.evidence: {own}"


def test_escape_label_values():
    reg = c.Registry()
    reg.add("collector_source_up", {"host": 'a"b\\c', "source": "x"}, 1)
    assert 'host="a\\"b\\\\c"' in reg.render()
    with pytest.raises(KeyError):
        reg.add("no_such_metric", {}, 1)


# --- PCIe link and ACS (issue 19) -----------------------------------------------------------------
# lspci -D -vvv lines in pciutils' format (lspci.c show_htype1 "Bus: primary=..", ls-caps.c cap_acs
# "ACSCtl:"), trimmed to what the collector reads: root port 15:01.0 -> switch upstream 16:00.0 ->
# downstream 17:00.0 (GPU0 18:00.0) and 17:02.0 (mlx5_0 1a:00.0); mlx5_1 9a:00.0 under another root
# port with no GPU.
_ACS_OFF = "SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
_ACS_ON = "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"


_ACS_HARMLESS = "SrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans+"


def _lspci(acs_17_02=_ACS_OFF, denied=False):
    def bridge(bdf, prim, sec, sub, acs=None):
        t = (f"{bdf} PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) "
             "(prog-if 00 [Normal decode])\n"
             f"\tBus: primary={prim}, secondary={sec}, subordinate={sub}, sec-latency=0\n"
             "\tCapabilities: [68] Express (v2) Downstream Port (Slot+), MSI 00\n")
        if acs:
            t += ("\tCapabilities: <access denied>\n" if denied else
                  "\tCapabilities: [f24 v1] Access Control Services\n"
                  "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ "
                  "DirectTrans+\n"
                  f"\t\tACSCtl:\t{acs}\n")
        return t + "\n"

    return (bridge("0000:15:01.0", "15", "16", "1a") + bridge("0000:16:00.0", "16", "17", "1a")
            + bridge("0000:17:00.0", "17", "18", "18", _ACS_HARMLESS)
            + bridge("0000:17:02.0", "17", "1a", "1a", acs_17_02)
            + "0000:18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n\n"
            + "0000:1a:00.0 Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n\n"
            + bridge("0000:99:01.0", "99", "9a", "9a", _ACS_ON)
            + "0000:9a:00.0 Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n\n")


def _pcie_sysfs(root, hca0=("32.0 GT/s PCIe", "16")):
    for dev, addr in (("mlx5_0", "0000:1a:00.0"), ("mlx5_1", "0000:9a:00.0")):
        _write(root, f"class/infiniband/{dev}/device/uevent", f"DRIVER=mlx5_core\nPCI_SLOT_NAME={addr}")
    for addr, cur in (("0000:1a:00.0", hca0), ("0000:9a:00.0", ("32 GT/s", "16")),
                      ("0000:18:00.0", ("32.0 GT/s PCIe", "16"))):
        d = f"bus/pci/devices/{addr}"
        _write(root, f"{d}/current_link_speed", cur[0])
        _write(root, f"{d}/current_link_width", cur[1])
        _write(root, f"{d}/max_link_speed", "32.0 GT/s PCIe")
        _write(root, f"{d}/max_link_width", "16")


def _pcie_run(lspci):
    return fake_run({"--format=csv,noheader": (0, "0, 00000000:18:00.0\n"), "-D -vvv": (0, lspci)})


def test_pcie_links_and_acs_metrics(tmp_path):
    _pcie_sysfs(tmp_path, hca0=("16.0 GT/s PCIe", "8"))
    cfg = {"nvlink": False, "gpus": True}
    text = c.collect(cfg, sysfs=str(tmp_path), run=_pcie_run(_lspci(_ACS_ON)), host="gpu01")
    m = parse_exposition(text)
    hca = {"host": "gpu01", "device": "mlx5_0", "pci": "0000:1a:00.0"}
    assert get(m, "fabricops_pcie_link_width", **hca) == 8
    assert get(m, "fabricops_pcie_link_max_width", **hca) == 16
    assert get(m, "fabricops_pcie_link_speed_gts", **hca) == 16.0
    assert get(m, "fabricops_pcie_link_max_speed_gts", **hca) == 32.0
    assert get(m, "fabricops_pcie_link_speed_gts", device="mlx5_1") == 32.0  # older kernel "32 GT/s"
    assert get(m, "fabricops_pcie_link_width", device="GPU0", pci="0000:18:00.0") == 16
    pair = {"host": "gpu01", "gpu": "GPU0", "hca": "mlx5_0"}
    assert get(m, "fabricops_pcie_acs_redirect", bridge="0000:17:02.0", **pair) == 1
    assert get(m, "fabricops_pcie_acs_redirect", bridge="0000:17:00.0", **pair) == 0  # SrcValid+ DirectTrans+
    assert get(m, "fabricops_pcie_acs_redirect", bridge="0000:16:00.0", **pair) == 0
    # the root port is above the switch (not on the PXB path); mlx5_1 shares no switch with a GPU
    assert not [k for k in m if k[0] == "fabricops_pcie_acs_redirect" and ("bridge", "0000:15:01.0") in k[1]]
    assert not [k for k in m if k[0] == "fabricops_pcie_acs_redirect" and ("hca", "mlx5_1") in k[1]]
    assert get(m, "fabricops_collector_source_up", source="lspci") == 1
    assert get(m, "fabricops_collector_source_up", source="pcie_sysfs") == 1
    assert "# TYPE fabricops_pcie_acs_redirect gauge" in text


def test_pcie_sources_fail_visibly(tmp_path):
    _pcie_sysfs(tmp_path)
    m = parse_exposition(c.collect({"nvlink": False, "gpus": True}, sysfs=str(tmp_path),
                                   run=_pcie_run(_lspci(denied=True)), host="h"))
    assert get(m, "fabricops_collector_source_up", source="lspci") == 0  # access denied: not root
    assert not [k for k in m if k[0] == "fabricops_pcie_acs_redirect"]
    (tmp_path / "bus/pci/devices/0000:1a:00.0/current_link_width").unlink()
    cfg = {"nvlink": False, "gpus": True}
    m = parse_exposition(c.collect(cfg, sysfs=str(tmp_path), run=_pcie_run(_lspci()), host="h"))
    assert get(m, "fabricops_collector_source_up", source="pcie_sysfs") == 0
    assert not [k for k in m if k[0] == "fabricops_pcie_link_width" and ("device", "mlx5_0") in k[1]]
    assert c.parse_gts("Unknown") == 0.0 and c.parse_gts("garbage") is None


def test_hca_address_from_its_netdev_name_without_uevent(tmp_path):
    (tmp_path / "class/infiniband/mlx5_4/device/net/ibp26s0").mkdir(parents=True)
    (tmp_path / "class/infiniband/mlx5_5/device/net/ens1f0").mkdir(parents=True)
    assert c.hca_pci_addresses(str(tmp_path)) == {"mlx5_4": "0000:1a:00.0"}
    assert c.netdev_pci_address("enp170s0f1np1") == "0000:aa:00.1"


def test_no_gpu_reading_where_nvlink_is_off(tmp_path):
    """A host configured without NVLink (no GPUs) is not asked for GPU addresses; its HCAs still are."""
    _pcie_sysfs(tmp_path)
    m = parse_exposition(c.collect({"nvlink": False}, sysfs=str(tmp_path), run=_pcie_run(_lspci()), host="h"))
    assert not [k for k in m if ("source", "gpu_pci") in k[1]]
    assert get(m, "fabricops_pcie_link_width", device="mlx5_0") == 16
    assert not [k for k in m if k[0] == "fabricops_pcie_acs_redirect"]
