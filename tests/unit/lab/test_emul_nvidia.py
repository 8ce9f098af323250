"""Emulated nvidia-smi: renders from hardware.json, parses with our parsers, matches real layouts."""

from __future__ import annotations

import json
import re

import pytest
from captures import read_fixture

from fabricops.parsers.nvidia_smi import parse_nvlink, parse_q, parse_query, parse_topo
from fabricops_lab.emul.tools import main

BUSES = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]


def h100_hardware(**overrides):
    gpus = [
        {
            "index": i, "name": "NVIDIA H100 80GB HBM3",
            "uuid": f"GPU-{i:08x}-d6fe-5b1f-9683-15041689bb03", "serial": f"16501240082{i:02d}",
            "pci_bus_id": f"00000000:{BUSES[i]:02X}:00.0", "memory_mib": 81559,
            "numa_node": 0 if i < 4 else 1, "cpu_affinity": "0-55,112-167" if i < 4 else "56-111,168-223",
            "nvlink_gen": 4, "nvlinks": 18, "inactive_nvlinks": [],
        }
        for i in range(8)
    ]
    hcas = [{"name": f"mlx5_{n}", "numa_node": 0 if n < 2 else 1, "ports": []} for n in range(4)]
    hw = {
        "host": "gpu01", "gpus": gpus, "hcas": hcas, "gpu_topology": "nvswitch",
        "driver_version": "550.54.15", "cuda_version": "12.4",
        "nic_affinity": {"mlx5_0": [0, 1], "mlx5_1": [2, 3], "mlx5_2": [4, 5], "mlx5_3": [6, 7]},
    }
    hw.update(overrides)
    return hw


@pytest.fixture
def smi(tmp_path, monkeypatch, capsys):
    hw_file = tmp_path / "var/lib/emulated-hw/hardware.json"
    hw_file.parent.mkdir(parents=True)
    monkeypatch.setenv("EMUL_ROOT", str(tmp_path))

    def run(*argv, hw=None):
        hw_file.write_text(json.dumps(hw or h100_hardware()))
        rc = main("nvidia-smi", list(argv))
        return rc, capsys.readouterr().out

    return run


# --- topo -m --------------------------------------------------------------------------------


def test_topo_nvswitch_matrix(smi):
    rc, out = smi("topo", "-m")
    assert rc == 0
    t = parse_topo(out)
    assert t.gpus == [f"GPU{i}" for i in range(8)] and t.nics == ["NIC0", "NIC1", "NIC2", "NIC3"]
    assert all(t.matrix[a][b] == "NV18" for a in t.gpus for b in t.gpus if a != b)
    assert t.matrix["GPU2"]["NIC1"] == "PIX"   # same PCIe switch (nic_affinity)
    assert t.matrix["GPU2"]["NIC0"] == "NODE"  # same NUMA node
    assert t.matrix["GPU2"]["NIC3"] == "SYS"   # across sockets
    assert t.matrix["NIC0"]["NIC1"] == "NODE" and t.matrix["NIC0"]["NIC2"] == "SYS"
    assert t.cpu_affinity["GPU6"] == "56-111,168-223" and t.numa_affinity["GPU6"] == 1
    assert t.nic_legend == {f"NIC{n}": f"mlx5_{n}" for n in range(4)}


def test_topo_line_structure_matches_real_h100_capture(smi):
    real = read_fixture("nvidia-smi-topo", "hgx_8gpu_nv18_12nic_tabs.txt")
    # Same machine as the capture: 8 GPUs on NUMA 0, 12 NICs, GPU n -> its PIX NIC.
    pix = {0: 0, 1: 1, 2: 2, 3: 5, 4: 6, 5: 7, 6: 8, 7: 11}
    hw = h100_hardware(
        hcas=[{"name": f"mlx5_{n}", "numa_node": 0, "ports": []} for n in range(12)],
        nic_affinity={f"mlx5_{nic}": [gpu] for gpu, nic in pix.items()},
    )
    for g in hw["gpus"]:
        g.update(numa_node=0, cpu_affinity="0-191")
    _, out = smi("topo", "-m", hw=hw)
    real_lines, ours = real.rstrip("\n").split("\n"), out.rstrip("\n").split("\n")
    assert len(ours) == len(real_lines)
    for mine, theirs in zip(ours, real_lines, strict=True):
        assert mine.count("\t") == theirs.count("\t")
        if not theirs.startswith("NIC") or theirs.startswith(("NIC3\t", "NIC4\t", "NIC9\t", "NIC10\t")):
            continue
        assert mine == theirs
    # header, every GPU row, the legend and the NIC legend are identical to the capture
    for n in [0, *range(1, 9)]:
        assert ours[n] == real_lines[n]
    assert ours[21:] == real_lines[21:]


def test_topo_inactive_links_reduce_nv_count_and_dead_gpu_falls_back_to_pcie(smi):
    hw = h100_hardware()
    hw["gpus"][3]["inactive_nvlinks"] = [4, 9]
    hw["gpus"][5]["inactive_nvlinks"] = list(range(18))
    t = parse_topo(smi("topo", "-m", hw=hw)[1])
    assert t.nvlinks("GPU3", "GPU0") == 16 and t.nvlinks("GPU0", "GPU3") == 16
    assert t.nvlinks("GPU0", "GPU1") == 18
    assert t.matrix["GPU5"]["GPU4"] == "NODE" and t.matrix["GPU5"]["GPU0"] == "SYS"


def test_missing_gpu_is_not_listed_and_others_move_up(smi):
    hw = h100_hardware()
    del hw["gpus"][2]
    _, out = smi("-L", hw=hw)
    assert out.count("GPU ") == 7
    uuid3 = "GPU-00000003-d6fe-5b1f-9683-15041689bb03"
    assert out.splitlines()[2] == f"GPU 2: NVIDIA H100 80GB HBM3 (UUID: {uuid3})"
    t = parse_topo(smi("topo", "-m", hw=hw)[1])
    assert len(t.gpus) == 7
    assert t.matrix["GPU2"]["NIC1"] == "PIX"  # old GPU3 keeps its NIC


# --- nvlink --status ------------------------------------------------------------------------


def test_nvlink_status_h100(smi):
    hw = h100_hardware()
    hw["gpus"][1]["inactive_nvlinks"] = [7]
    rc, out = smi("nvlink", "--status", hw=hw)
    assert rc == 0
    s = parse_nvlink(out)
    assert len(s.gpus) == 8 and all(len(g.links) == 18 for g in s.gpus)
    assert s.gpus[0].links[0].speed_gb_s == 26.562
    assert s.gpus[1].inactive_links == [7] and "\t Link 7: <inactive>\n" in out
    _, one = smi("nvlink", "-s", "-i", "1", hw=hw)
    assert [g.index for g in parse_nvlink(one).gpus] == [1]


def test_nvlink_status_layout_matches_real_h800_block(smi):
    real = read_fixture("nvidia-smi-nvlink", "h800_8_links_elided_spaces.txt").split("\n")[:9]
    hw = h100_hardware()
    hw["gpus"][0].update(name="NVIDIA H800", uuid="GPU-34bf77d1-c686-6821-79a8-32d326c5039c", nvlinks=8)
    _, out = smi("nvlink", "-s", "-i", "0", hw=hw)
    # The real tool prints "\t Link N"; the published capture has the tab expanded by a terminal.
    assert out.expandtabs(8).split("\n")[:9] == real


def test_nvlink_error_counters_match_the_real_h100_capture_and_the_collector_reads_them(smi):
    """`nvidia-smi nvlink -e` as the collector's nvlink_errors source runs it: the layout of a real
    H100's output (its links 2-16 elided by the author), counts from the GPU's nvlink_errors."""
    from fabricops.monitor.collector import parse_nvlink_errors

    real = read_fixture("nvidia-smi-nvlink-errors", "h100_elided_stas00.txt").split("\n")
    hw = h100_hardware()
    hw["gpus"][0].update(uuid="GPU-abcdefab-cdef-abdc-abcd-abababababab")
    hw["gpus"][3]["nvlink_errors"] = {"5": {"replay": 2, "crc": 7}}
    rc, out = smi("nvlink", "-e", "-i", "0", hw=hw)
    assert rc == 0
    lines = out.expandtabs(8).split("\n")
    assert lines[:8] == real[:8]  # header, link 0 and 1 with the blank line between them
    assert lines[-5:] == real[-5:]  # link 17, the last, and the end of the output
    rc, every = smi("nvlink", "--error-counters", hw=hw)
    errors = parse_nvlink_errors(every)
    assert len(errors) == 8 * 18 * 3
    got = {(e["gpu"], e["link"], e["kind"]): e["value"] for e in errors}
    assert got[(3, 5, "replay")] == 2 and got[(3, 5, "crc")] == 7 and got[(3, 5, "recovery")] == 0
    assert sum(got.values()) == 9


def test_nvlink_a100_rate_and_all_inactive(smi):
    hw = h100_hardware()
    for g in hw["gpus"]:
        g.update(name="NVIDIA A100-SXM4-80GB", nvlink_gen=3, nvlinks=12, memory_mib=81920)
    hw["gpus"][2]["inactive_nvlinks"] = list(range(12))
    _, out = smi("nvlink", "-s", hw=hw)
    assert "\t Link 11: 25 GB/s\n" in out
    s = parse_nvlink(out)
    assert s.gpus[2].links == [] and "all links are inActive" in s.gpus[2].message
    t = parse_topo(smi("topo", "-m", hw=hw)[1])
    assert t.nvlinks("GPU0", "GPU1") == 12


# --- --query-gpu ----------------------------------------------------------------------------


def test_query_gpu_csv_forms(smi):
    rc, out = smi("--query-gpu=index,name,uuid,pci.bus_id,memory.total,power.draw,utilization.gpu",
                  "--format=csv")
    assert rc == 0
    assert out.splitlines()[0] == (
        "index, name, uuid, pci.bus_id, memory.total [MiB], power.draw [W], utilization.gpu [%]"
    )
    assert re.fullmatch(r"7, NVIDIA H100 80GB HBM3, GPU-\S+, 00000000:DB:00\.0, 81559 MiB, \d+\.\d\d W, 0 %",
                        out.splitlines()[8])
    r = parse_query(out)
    assert [row["index"] for row in r.rows] == list(range(8))
    assert r.rows[3]["pci.bus_id"] == "00000000:5D:00.0" and r.rows[3]["memory.total"] == 81559
    _, bare = smi("--query-gpu=index,memory.total,driver_version", "--format=csv,noheader,nounits", "-i", "4")
    assert bare == "4, 81559, 550.54.15\n"
    assert parse_query(bare, fields=["index", "memory.total", "driver_version"]).rows[0]["index"] == 4


def test_query_gpu_unknown_field(smi):
    rc, out = smi("--query-gpu=index,bogus", "--format=csv")
    assert rc == 2
    assert out.startswith('Field "bogus" is not a valid field to query.')


# --- -q, -L, summary ------------------------------------------------------------------------


def _skeleton(text):
    keys = []
    for ln in text.split("\n"):
        if not ln.strip() or ln.startswith("GPU ") or "NVSMI LOG" in ln:
            continue
        indent = len(ln) - len(ln.lstrip(" "))
        keys.append((indent, ln.split(" : ")[0].rstrip() if " : " in ln else ln.rstrip()))
    return keys


def test_q_structure_matches_real_h100_capture(smi):
    real = read_fixture("nvidia-smi-q", "h100_80gb_hbm3_a_560.txt")
    rc, out = smi("-q", "-i", "7")
    assert rc == 0
    assert _skeleton(out) == _skeleton(real)
    # every key/value line puts its colon in the same column as the real tool
    def colon_columns(text):
        kv = [ln for ln in text.split("\n") if " : " in ln]
        return {ln.index(" : ") for ln in kv if len(ln.split(" : ")[0].strip()) < 30}

    assert colon_columns(out) == colon_columns(real) == {41}


def test_q_values_and_fabric_states(smi):
    r = parse_q(smi("-q")[1])
    assert (r.driver_version, r.cuda_version, r.attached_gpus) == ("550.54.15", "12.4", 8)
    assert len(r.gpus) == 8
    g = r.gpus[3]
    assert g.pci_bus_id == "00000000:5D:00.0" and g.uuid.startswith("GPU-00000003")
    assert g.memory_total_mib == 81559 and g.power_limit_w == 700.0
    assert (g.fabric_state, g.fabric_status) == ("Completed", "Success")
    hw = h100_hardware(fabric_manager={"state": "In Progress", "status": "N/A"})
    g = parse_q(smi("-q", "-i", "0", hw=hw)[1]).gpus[0]
    assert (g.fabric_state, g.fabric_status) == ("In Progress", None)
    hw = h100_hardware(gpu_topology="direct")
    assert parse_q(smi("-q", hw=hw)[1]).gpus[0].fabric_state is None


def test_summary_table_and_list(smi):
    rc, out = smi()
    assert rc == 0
    lines = out.split("\n")
    box = [ln for ln in lines[1:] if ln.startswith(("|", "+"))]
    assert box and all(len(ln) == 91 for ln in box)
    assert lines[2] == (
        "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |"
    )
    assert (
        "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |"
    ) in lines
    assert sum("NVIDIA H100 80GB HBM3" in ln for ln in lines) == 8
    _, listing = smi("-L")
    uuid0 = "GPU-00000000-d6fe-5b1f-9683-15041689bb03"
    assert listing.splitlines()[0] == f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {uuid0})"


def test_errors(smi):
    assert smi("-i", "9", "-L") == (6, "No devices were found\n")
    assert smi("-L", hw=h100_hardware(gpus=[])) == (6, "No devices were found\n")
    rc, out = smi("topo", "-x")
    assert rc == 2 and "Invalid combination of input arguments" in out
