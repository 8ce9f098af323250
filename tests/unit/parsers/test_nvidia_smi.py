"""nvidia-smi parsers against real captures (tests/fixtures/nvidia-smi-*) and broken inputs."""

from __future__ import annotations

import re
import time

import pytest
from captures import fixture_names, read_fixture

from fabricops.errors import ParseError
from fabricops.parsers import get_parser, to_data
from fabricops.parsers.nvidia_smi import parse_nvlink, parse_q, parse_query, parse_topo

# --- topo -m --------------------------------------------------------------------------------


def test_topo_hgx_tabs_with_nic_legend():
    t = parse_topo(read_fixture("nvidia-smi-topo", "hgx_8gpu_nv18_12nic_tabs.txt"))
    assert t.gpus == [f"GPU{i}" for i in range(8)]
    assert t.nics == [f"NIC{i}" for i in range(12)]
    assert t.devices == t.gpus + t.nics
    assert t.matrix["GPU0"]["GPU0"] == "X"
    assert all(t.nvlinks(f"GPU{a}", f"GPU{b}") == 18 for a in range(8) for b in range(8) if a != b)
    assert t.matrix["GPU3"]["NIC5"] == "PIX" and t.matrix["GPU3"]["NIC3"] == "NODE"
    assert t.matrix["NIC3"]["NIC4"] == "PIX"
    assert t.matrix["GPU7"]["NIC11"] == "PIX"
    assert t.cpu_affinity["GPU5"] == "0-191"
    assert t.numa_affinity["GPU5"] == 0
    assert t.gpu_numa_id["GPU5"] is None  # printed as N/A
    assert "NIC0" not in t.cpu_affinity  # NIC rows carry no affinity
    assert t.nic_legend["NIC11"] == "mlx5_11"
    assert t.nic_name("NIC3") == "mlx5_3"
    assert t.legend["NV#"] == "Connection traversing a bonded set of # NVLinks"


def test_topo_a100_spaces_17_nics():
    t = parse_topo(read_fixture("nvidia-smi-topo", "a100_8gpu_nv12_17nic_spaces.txt"))
    assert len(t.nics) == 17
    assert t.nvlinks("GPU6", "GPU1") == 12
    assert [t.matrix["GPU2"][f"NIC{i}"] for i in range(4, 8)] == ["PXB"] * 4
    assert t.matrix["NIC16"]["NIC16"] == "X"
    assert t.nic_legend["NIC16"] == "mlx5_bond_0"
    assert t.cpu_affinity["GPU7"] == "0-103"


def test_topo_pcie_pair_without_numa_and_without_gpu_numa_id():
    t = parse_topo(read_fixture("nvidia-smi-topo", "gtx1080ti_2gpu_pcie_spaces.txt"))
    assert t.devices == ["GPU0", "GPU1"]
    assert t.matrix["GPU1"]["GPU0"] == "PHB"
    assert t.nvlinks("GPU0", "GPU1") is None
    assert t.numa_affinity == {"GPU0": None, "GPU1": None}
    assert t.gpu_numa_id == {}
    assert t.nic_legend == {}


def test_topo_nvlink_bridge_pair_and_pcie_gpu():
    t = parse_topo(read_fixture("nvidia-smi-topo", "rtx_a6000_3gpu_nv4_no_gpu_numa_id.txt"))
    assert t.nvlinks("GPU0", "GPU1") == 4
    assert t.matrix["GPU2"]["GPU0"] == "NODE"
    assert t.cpu_affinity["GPU2"] == "0-31,64-95"


def test_topo_a10_nic_rows_without_nvlink():
    t = parse_topo(read_fixture("nvidia-smi-topo", "a10_4gpu_pcie_2nic_spaces.txt"))
    assert t.matrix["NIC1"]["NIC0"] == "PIX"
    assert {t.matrix["GPU0"][d] for d in t.devices if d != "GPU0"} == {"SYS"}


def test_topo_old_version_mlx5_columns_soc_and_warning_line():
    # Shape of pre-NIC-legend drivers (mlx5_N columns, no NUMA column), plus a warning line.
    text = (
        "\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\n"
        "GPU0\t X \tPIX\tSOC\t0-13\n"
        "Conflicting CPU frequency values detected: 2300.000000 != 2200.000000\n"
        "GPU1\tPIX\t X \tSOC\t0-13\n"
        "mlx5_0\tSOC\tSOC\t X \n"
    )
    t = parse_topo("\x1b[1m" + text.replace("\n", "\r\n", 1))
    assert t.nics == ["mlx5_0"] and t.matrix["mlx5_0"]["GPU1"] == "SOC"
    assert t.cpu_affinity == {"GPU0": "0-13", "GPU1": "0-13"}
    assert t.numa_affinity == {"GPU0": None, "GPU1": None}


@pytest.mark.parametrize(
    "text",
    ["", "   \n", "GPU 0: NVIDIA H100 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n", "Timestamp : x\n"],
)
def test_topo_rejects_empty_and_other_tools(text):
    with pytest.raises(ParseError, match="topo"):
        parse_topo(text)


def test_topo_rejects_truncated():
    full = read_fixture("nvidia-smi-topo", "hgx_8gpu_nv18_12nic_tabs.txt")
    lines = full.splitlines()
    with pytest.raises(ParseError, match="GPU6, GPU7"):
        parse_topo("\n".join(lines[:7]))
    with pytest.raises(ParseError, match="truncated"):
        parse_topo("\n".join(lines[:3]) + "\n" + lines[3][:40])


# --- nvlink --status ------------------------------------------------------------------------


def test_nvlink_h800_spaces_with_elided_gpus():
    s = parse_nvlink(read_fixture("nvidia-smi-nvlink", "h800_8_links_elided_spaces.txt"))
    assert [g.index for g in s.gpus] == [0, 1, 7]
    g0 = s.gpus[0]
    assert g0.name == "NVIDIA H800" and g0.uuid == "GPU-34bf77d1-c686-6821-79a8-32d326c5039c"
    assert [link.link for link in g0.links] == list(range(8))
    assert all(link.active and link.speed_gb_s == 26.562 for link in g0.links)


def test_nvlink_inactive_links():
    s = parse_nvlink(read_fixture("nvidia-smi-nvlink", "v100_two_inactive_links.txt"))
    (g,) = s.gpus
    assert g.index == 3 and g.name == "Tesla V100-SXM2-32GB"
    assert g.inactive_links == [3, 5] and g.active_links == 4
    assert g.links[3].speed_gb_s is None and g.links[4].speed_gb_s == 25.781
    assert to_data(s)["gpus"][0]["links"][5] == {
        "link": 5, "active": False, "speed_gb_s": None, "raw": "<inactive>",
    }


def test_nvlink_tabs_and_all_links_inactive_message():
    s = parse_nvlink(read_fixture("nvidia-smi-nvlink", "rtx_a6000_all_links_inactive.txt"))
    assert [g.active_links for g in s.gpus] == [4, 4, 0]
    assert s.gpus[0].links[0].speed_gb_s == 14.062
    assert s.gpus[2].links == []
    assert "all links are inActive" in s.gpus[2].message


def test_nvlink_rejects_list_gpus_and_empty():
    with pytest.raises(ParseError, match="-L"):
        parse_nvlink("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-abc)\nGPU 1: NVIDIA H100 (UUID: GPU-d)\n")
    with pytest.raises(ParseError, match="empty"):
        parse_nvlink("")
    with pytest.raises(ParseError):
        parse_nvlink(read_fixture("nvidia-smi-topo", "hgx_8gpu_nv18_12nic_tabs.txt"))


# --- --query-gpu CSV ------------------------------------------------------------------------


def test_query_header_with_units():
    r = parse_query(read_fixture("nvidia-smi-query", "a10_timestamp_units_header.txt"))
    assert r.fields[:3] == ["timestamp", "pstate", "temperature.gpu"]
    assert r.units["memory.total"] == "MiB" and r.units["utilization.gpu"] == "%"
    assert r.units["temperature.gpu"] is None
    assert len(r.rows) == 5
    assert r.rows[0] == {
        "timestamp": "2024/01/16 14:44:16.977", "pstate": "P8", "temperature.gpu": 25,
        "utilization.gpu": 0, "utilization.memory": 0, "memory.total": 23028, "memory.free": 22494,
        "memory.used": 21,
    }


def test_query_identifiers_stay_text():
    r = parse_query(read_fixture("nvidia-smi-query", "five_gpu_name_bus_index_uuid.txt"))
    assert [row["index"] for row in r.rows] == [0, 1, 2, 3, 4]
    assert r.rows[4]["pci.bus"] == "0x0A"
    assert r.rows[1]["name"] == "GeForce GTX 1080 Ti"


def test_query_noheader_needs_fields():
    text = read_fixture("nvidia-smi-query", "a100_temperature_noheader.txt")
    with pytest.raises(ParseError, match="include the header"):
        parse_query(text)
    r = parse_query(text, fields="temperature.gpu")
    assert [row["temperature.gpu"] for row in r.rows] == [28, 30, 28, 31, 29, 31, 29, 32]


def test_query_na_values_nounits_and_versions():
    text = "index, driver_version, power.draw [W], fan.speed [%]\n0, 591.86, [N/A], [Not Supported]\n"
    r = parse_query(text)
    assert r.rows == [{"index": 0, "driver_version": "591.86", "power.draw": None, "fan.speed": None}]
    r = parse_query("0, 81559, 71.53\n", fields=["index", "memory.total", "power.draw"])
    assert r.rows == [{"index": 0, "memory.total": 81559, "power.draw": 71.53}]


def test_query_rejects_bad_inputs():
    with pytest.raises(ParseError, match="empty"):
        parse_query("")
    with pytest.raises(ParseError, match="not a valid field"):
        parse_query('Field "x" is not a valid field to query.\n\n')
    with pytest.raises(ParseError, match="2 values for 3 fields"):
        parse_query("index, name, memory.total [MiB]\n0, NVIDIA H100 80GB HBM3\n")
    with pytest.raises(ParseError):
        parse_query(read_fixture("nvidia-smi-q", "h800_q_i0_525.txt"))


@pytest.mark.parametrize(("text", "shown"), [
    ("a\n" * 1000, "'a'"),
    ("foo, bar [MiB]\n1, 2 MiB\n", "'foo, bar [MiB]'"),
    ("hostname, state\nn01, up\n", "'hostname, state'"),
])
def test_query_header_must_name_a_known_field(text, shown):
    """Any one-word first line made a CSV of what followed: 4 MB of 'a' lines took 30 s and 1.6 GB."""
    with pytest.raises(ParseError, match=re.escape(f"header {shown} names no --query-gpu field")) as exc:
        parse_query(text)
    assert "\n" not in str(exc.value)


def test_query_header_check_comes_before_the_rows_are_read():
    text = "a\n" * (2 * 1024 * 1024)  # 4 MB, the cap
    start = time.thread_time()
    with pytest.raises(ParseError, match="names no --query-gpu field"):
        parse_query(text)
    assert time.thread_time() - start < 1.0


@pytest.mark.parametrize("header", [
    "index", "timestamp, pstate", "clocks_event_reasons.sw_power_cap", "memory.total [MiB]",
    "name, some.future_field",  # one known field is enough: newer drivers add fields
])
def test_query_headers_with_a_known_field_parse(header):
    columns = header.count(",") + 1
    record = parse_query(header + "\n" + ", ".join(["1"] * columns) + "\n")
    assert len(record.rows) == 1 and len(record.fields) == columns


# --- -q -------------------------------------------------------------------------------------


def test_q_h100_560_with_fabric():
    r = parse_q(read_fixture("nvidia-smi-q", "h100_80gb_hbm3_a_560.txt"))
    assert (r.driver_version, r.cuda_version, r.attached_gpus) == ("560.35.03", "12.6", 1)
    (g,) = r.gpus
    assert g.pci_bus_id == "00000000:DB:00.0" and g.product_name == "NVIDIA H100 80GB HBM3"
    assert g.uuid == "GPU-f7b02328-d6fe-5b1f-9683-15041689bb03" and g.serial == "1650124008279"
    assert (g.memory_total_mib, g.memory_used_mib, g.temperature_c) == (81559, 1, 34)
    assert (g.power_draw_w, g.power_limit_w) == (71.53, 700.0)
    assert g.ecc_mode == "Enabled"
    assert g.ecc_errors == {
        "volatile_correctable": 0, "volatile_uncorrectable": 0,
        "aggregate_correctable": 0, "aggregate_uncorrectable": 0,
    }
    assert g.clocks_mhz == {"graphics": 345, "sm": 345, "memory": 2619, "video": 765}
    assert g.max_clocks_mhz["sm"] == 1980
    assert (g.fabric_state, g.fabric_status) == ("Completed", "Success")
    assert g.sections["Fabric"]["Health"]["Bandwidth"] == "N/A"
    assert g.sections["PCI"]["GPU Link Info"]["PCIe Generation"]["Max"] == "5"
    assert g.sections["GPU Memory Power Readings"]["Power Draw"] == "30.79 W"


def test_q_h800_525_fabric_and_ecc_disabled():
    r = parse_q(read_fixture("nvidia-smi-q", "h800_q_i0_525.txt"))
    (g,) = r.gpus
    assert r.attached_gpus == 8 and g.product_name == "NVIDIA H800"
    assert (g.fabric_state, g.fabric_status) == ("Completed", "Success")
    assert g.ecc_mode == "Disabled" and g.ecc_errors["volatile_uncorrectable"] is None
    assert g.power_draw_w == 74.71 and g.power_limit_w == 700.0
    assert g.sections["Processes"] == "None"


def test_q_a100_without_fabric_and_with_process_block():
    r = parse_q(read_fixture("nvidia-smi-q", "a100_sxm4_80gb_q_i0_525.txt"))
    (g,) = r.gpus
    assert (g.fabric_state, g.fabric_status) == (None, None)
    assert g.memory_used_mib == 22377 and g.temperature_c == 28 and g.power_limit_w == 400.0
    proc = g.sections["Processes"]["Process ID"]
    assert proc["_value"] == "280058" and proc["Used GPU Memory"] == "22374 MiB"


def test_q_rejects():
    with pytest.raises(ParseError, match="empty"):
        parse_q("")
    with pytest.raises(ParseError):
        parse_q(read_fixture("nvidia-smi-topo", "hgx_8gpu_nv18_12nic_tabs.txt"))
    head = read_fixture("nvidia-smi-q", "h800_q_i0_525.txt").split("GPU 00000000")[0]
    with pytest.raises(ParseError, match="truncated"):
        parse_q(head)


def test_registered_in_parsers_table():
    for tool in ("nvidia-smi-topo", "nvidia-smi-nvlink", "nvidia-smi-query", "nvidia-smi-q"):
        assert callable(get_parser(tool))


@pytest.mark.parametrize(
    ("tool", "parser"),
    [("nvidia-smi-topo", parse_topo), ("nvidia-smi-nvlink", parse_nvlink), ("nvidia-smi-q", parse_q)],
)
def test_every_fixture_parses(tool, parser):
    names = fixture_names(tool)
    assert len(names) >= 2
    for name in names:
        assert parser(read_fixture(tool, name))
