"""The emulated RDMA tools print what the real ones print and keep state like hardware does.

Every tool's output is parsed with the project's parser and compared, line by line, with the
structure of a real capture in tests/fixtures/.
"""

from __future__ import annotations

import re
import shutil

import pytest
from captures import read_fixture
from emul_host import _hw, host_tree, write_hw

from fabricops.errors import ParseError
from fabricops.parsers import parse
from fabricops_lab.emul import devstate, hwctl, tools


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("EMUL_ROOT", str(tmp_path))
    host_tree(tmp_path)
    rel = tmp_path / "usr/share/emulated-ofed"
    rel.mkdir(parents=True)
    (rel / "release").write_text("MLNX_OFED_LINUX-23.10-1.1.9.0\n")
    hwctl.sync()
    return tmp_path


@pytest.fixture
def run(capsys):
    def _run(tool: str, *argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = tools.main(tool, list(argv))
        out = capsys.readouterr()
        return rc, out.out, out.err
    return _run


def shape(text: str) -> list[str]:
    """Line structure: leading whitespace (tabs expanded) + the label before the value."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            out.append("")
            continue
        indent = len(line.expandtabs(8)) - len(line.expandtabs(8).lstrip())
        label = re.split(r"[:=]", line.strip(), maxsplit=1)[0] if ":" in line else "<value>"
        label = re.sub(r"\d+", "N", re.sub(r"'[^']*'", "'X'", label))
        out.append(f"{indent}|{label}")
    return out


def first_block(text: str, start: str) -> str:
    """The first block of a listing: from the first line starting with `start` to the next."""
    lines = text.splitlines()
    idx = [i for i, ln in enumerate(lines) if ln.startswith(start)]
    end = idx[1] if len(idx) > 1 else len(lines)
    return "\n".join(lines[idx[0]:end])


# --- output parses and has the real structure ------------------------------------------------

def test_ofed_info_forms(root, run):
    rc, out, _ = run("ofed_info", "-s")
    assert rc == 0
    assert out == read_fixture("ofed_info", "s_23.10_azure.txt")
    assert parse("ofed_info", out).version == "MLNX_OFED_LINUX-23.10-1.1.9.0"
    assert run("ofed_info", "-n")[1] == "23.10-1.1.9.0\n"
    rc, out, _ = run("ofed_info")
    first = out.splitlines()[0]
    assert first == "MLNX_OFED_LINUX-23.10-1.1.9.0 (OFED-23.10-1.1.9):"
    assert shape(first) == shape(read_fixture("ofed_info", "full_4.5_head.txt").splitlines()[0])
    assert parse("ofed_info", out).base == "OFED-23.10-1.1.9"


def test_ibstat_matches_real_structure(root, run):
    rc, out, _ = run("ibstat")
    assert rc == 0
    real = read_fixture("ibstat", "h100_cx7_ib_cx6dx_eth_down.txt")
    assert shape(first_block(out, "CA '")) == shape(first_block(real, "CA '"))
    rec = parse("ibstat", out)
    assert [c.name for c in rec.cas] == ["mlx5_0", "mlx5_2"]
    ib = rec.port("mlx5_0", 1)
    assert (ib.state, ib.physical_state, ib.rate, ib.base_lid, ib.sm_lid) == ("Active", "LinkUp", 400, 5, 1)
    assert ib.port_guid == "0xb83fd20300a1b2c0"
    roce = rec.port("mlx5_2", 1)
    assert (roce.link_layer, roce.rate, roce.port_guid) == ("Ethernet", 400, "0xa288c2fffeadeab8")
    assert rec.cas[0].firmware_version == "28.39.1002"


def test_ibstat_single_port_list_and_errors(root, run):
    rc, out, _ = run("ibstat", "mlx5_0", "1")
    assert out.splitlines()[:3] == ["CA: 'mlx5_0'", "Port 1:", "State: Active"]
    assert parse("ibstat", out).port("mlx5_0", 1).rate == 400
    assert run("ibstat", "-l")[1] == "mlx5_0\nmlx5_2\n"
    assert run("ibstat", "-p")[1] == "0xb83fd20300a1b2c0\n0xa288c2fffeadeab8\n"
    rc, out, err = run("ibstat", "mlx5_9")
    assert rc == 255 and out == "" and "'mlx5_9' IB device can't be found" in err


def test_down_ports_print_like_real_mlx5(root, run):
    hw = _hw()
    for hca in hw["hcas"]:
        hca["ports"][0].update(state="DOWN", phys_state="Disabled")
    write_hw(root, hw)
    hwctl.sync()
    rec = parse("ibstat", run("ibstat")[1])
    ib, eth = rec.port("mlx5_0", 1), rec.port("mlx5_2", 1)
    # real captures: IB port down shows Rate 10 (LustrePerfMon#27, gpud#482); Ethernet shows 40 (gpud)
    assert (ib.state, ib.physical_state, ib.rate) == ("Down", "Disabled", 10)
    assert (eth.state, eth.physical_state, eth.rate) == ("Down", "Disabled", 40)
    st = parse("ibstatus", run("ibstatus")[1])
    assert (st.ports[0].state, st.ports[0].phys_state, st.ports[0].rate_text) == (
        "DOWN", "Disabled", "10 Gb/sec (4X SDR)")
    dev = parse("ibv_devinfo", run("ibv_devinfo", "-v")[1])
    assert dev.devices[0].ports[0].state == "PORT_DOWN"
    assert dev.devices[0].ports[0].phys_state == "DISABLED"


def test_firmware_change_shows_in_every_tool(root, run):
    hw = _hw()
    hw["hcas"][1]["fw_ver"] = "28.41.1000"
    write_hw(root, hw)
    hwctl.sync()
    assert parse("ibstat", run("ibstat")[1]).cas[1].firmware_version == "28.41.1000"
    assert parse("ibv_devinfo", run("ibv_devinfo")[1]).device("mlx5_2").fw_ver == "28.41.1000"


def test_ibv_devinfo_plain_and_verbose(root, run):
    rc, out, _ = run("ibv_devinfo")
    assert rc == 0
    real = read_fixture("ibv_devinfo", "mlx4_two_hcas_plain.txt")
    # modern rdma-core no longer prints MLNX_OFED 4.x's "Device ports:" line
    real_block = "\n".join(ln for ln in first_block(real, "hca_id").splitlines()
                           if "Device ports" not in ln).split("\n\n\t\tport:\t2")[0]
    assert shape(first_block(out, "hca_id").rstrip("\n")) == shape(real_block.rstrip("\n"))
    rec = parse("ibv_devinfo", out)
    d = rec.device("mlx5_0")
    assert (d.fw_ver, d.node_guid, d.vendor_part_id, d.board_id) == (
        "28.39.1002", "b83f:d203:00a1:b2c0", 4129, "MT_0000000838")
    p = d.ports[0]
    assert (p.state, p.active_mtu, p.lid, p.sm_lid, p.link_layer) == ("PORT_ACTIVE", 4096, 5, 1, "InfiniBand")

    rc, out, _ = run("ibv_devinfo", "-v", "-d", "mlx5_2")
    rec = parse("ibv_devinfo", out)
    assert rec.verbose and [d.hca_id for d in rec.devices] == ["mlx5_2"]
    port = rec.devices[0].ports[0]
    assert (port.active_width, port.active_speed) == ("4X", "100.0 Gbps")
    assert [(g.index, g.gid, g.type) for g in port.gids] == [
        (0, "fe80:0000:0000:0000:a288:c2ff:fead:eab8", "RoCE v1"),
        (1, "fe80::a288:c2ff:fead:eab8", "RoCE v2"),
        (2, "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v1"),
        (3, "::ffff:10.0.0.1", "RoCE v2"),
    ]
    real_v = read_fixture("ibv_devinfo", "cx6_roce_verbose.txt")
    real_port = real_v[real_v.index("                port:"):]
    emu_port = out[out.index("\t\tport:"):]
    assert shape(emu_port.rstrip("\n")) == shape(real_port.rstrip("\n"))


def test_ibv_devinfo_list_devices_and_errors(root, run):
    assert run("ibv_devinfo", "-l")[1] == "2 HCAs found:\n\tmlx5_0\n\tmlx5_2\n"
    out = run("ibv_devices")[1].splitlines()
    assert out[0] == "    device          \t   node GUID"
    assert out[2] == "    mlx5_0          \tb83fd20300a1b2c0"
    rc, out, err = run("ibv_devinfo", "-d", "mlx5_7")
    assert rc == 255 and err == "IB device 'mlx5_7' wasn't found\n"
    shutil.rmtree(root / "sys/class/infiniband")
    rc, out, err = run("ibv_devinfo")
    assert rc == 255 and out == ""
    with pytest.raises(ParseError, match="Failed to get IB devices list"):
        parse("ibv_devinfo", err)
    assert run("ibstat") == (0, "", "")  # real ibstat: nothing, exit 0
    rc, out, _ = run("ibstatus")
    assert rc == 255
    with pytest.raises(ParseError, match="No devices"):
        parse("ibstatus", out)


def test_ibstatus_matches_real_structure(root, run):
    _rc, out, _ = run("ibstatus")
    real = read_fixture("ibstatus", "cx3_fdr10_polling_libvma.txt")
    assert shape(out.split("\n\n")[0]) == shape(real.split("\n\n")[0])
    assert out.split("\n\n")[0].splitlines()[1].startswith("\tdefault gid:\t ")
    rec = parse("ibstatus", out)
    p = rec.ports[0]
    assert (p.device, p.base_lid, p.sm_lid, p.state, p.rate, p.width, p.speed) == (
        "mlx5_0", 5, 1, "ACTIVE", 400, "4X", "NDR")
    assert rec.ports[1].default_gid == "fe80:0000:0000:0000:a288:c2ff:fead:eab8"
    one = parse("ibstatus", run("ibstatus", "mlx5_2:1")[1])
    assert [x.device for x in one.ports] == ["mlx5_2"]


def test_mlnx_qos_matches_real_structure(root, run):
    rc, out, _ = run("mlnx_qos", "-i", "enp41s0f0np0", "--trust", "dscp")
    assert rc == 0
    real = read_fixture("mlnx_qos", "default_priority_strict.txt")
    emu_lines = out.splitlines()
    real_lines = real.splitlines()
    head = real_lines.index("tc: 0 ratelimit: unlimited, tsa: ets, bw: 9%")
    assert shape("\n".join(emu_lines[:head])) == shape("\n".join(real_lines[:head]))
    assert shape(out) == shape(real)  # one tc line and one priority line per tc, same indents
    rec = parse("mlnx_qos", out)
    assert rec.trust == "dscp" and rec.prio_for_dscp(26) == 3 and rec.prio_for_dscp(48) == 6
    assert rec.prio_tc == [1, 0, 2, 3, 4, 5, 6, 7]


def test_mlnx_qos_settings_persist_until_openibd_restart(root, run):
    run("mlnx_qos", "-i", "enp41s0f0np0", "--trust", "dscp")
    run("mlnx_qos", "-i", "enp41s0f0np0", "--pfc", "0,0,0,1,0,0,0,0")
    run("mlnx_qos", "-i", "enp41s0f0np0", "--dscp2prio", "set,30,6")
    run("mlnx_qos", "-i", "enp41s0f0np0", "--cable_len", "30")
    run("mlnx_qos", "-i", "enp41s0f0np0", "--tsa", "ets,ets,strict,ets,strict,strict,strict,strict")
    run("mlnx_qos", "-i", "enp41s0f0np0", "--tcbw", "50,0,0,50,0,0,0,0")
    devstate.write_sysfs("class/net/enp41s0f0np0/ecn/roce_np/enable/3", "0")
    devstate.write_sysfs("class/infiniband/mlx5_2/tc/1/traffic_class", "106")
    run("cma_roce_tos", "-d", "mlx5_2", "-t", "106")
    rec = parse("mlnx_qos", run("mlnx_qos", "-i", "enp41s0f0np0")[1])
    assert rec.trust == "dscp" and rec.pfc_enabled == [0, 0, 0, 1, 0, 0, 0, 0]
    assert rec.prio_for_dscp(30) == 6 and rec.cable_len == 30
    assert rec.pfc_buffer == [0, 0, 0, 1, 0, 0, 0, 0]
    assert [(t.tc, t.tsa, t.bw) for t in rec.tcs][:2] == [(0, "ets", 50), (1, "ets", 0)]
    rc, out, _ = run("openibd", "restart")
    assert rc == 0
    ok = r" +\[  OK  \]\n"
    assert re.fullmatch(f"Unloading HCA driver:{ok}Loading HCA driver and Access Layer:{ok}", out)
    rec = parse("mlnx_qos", run("mlnx_qos", "-i", "enp41s0f0np0")[1])
    assert rec.trust == "pcp" and rec.pfc_enabled == [0] * 8 and rec.dscp2prio is None
    assert rec.cable_len == 7
    assert devstate.ecn_enabled("enp41s0f0np0", "roce_np", 3) is True
    assert devstate.traffic_class("mlx5_2") is None
    assert run("cma_roce_tos", "-d", "mlx5_2")[1] == "0\n"


def test_mlnx_qos_errors_as_the_real_tool(root, run):
    rc, out, _ = run("mlnx_qos", "-i", "eth9")
    assert rc == 1
    assert out.splitlines()[-1] == "ETS features are not supported on your system"
    with pytest.raises(ParseError):
        parse("mlnx_qos", out)
    assert run("mlnx_qos")[1].startswith("Interface name is required\n")
    assert run("mlnx_qos", "-i", "enp41s0f0np0", "--pfc", "0,0,1")[1] == "pfc list must have 8 items\n"
    assert run("mlnx_qos", "-i", "enp41s0f0np0", "--trust", "l3")[1].startswith("Invalid trust state")
    rc, out, _ = run("mlnx_qos", "-i", "enp41s0f0np0", "--trust", "dscp", "--dscp2prio", "set,26,3")
    assert rc == 1 and "cannot be used at the same time" in out
    # a failed command changed nothing
    assert parse("mlnx_qos", run("mlnx_qos", "-i", "enp41s0f0np0")[1]).trust == "pcp"


def test_cma_roce_tos_and_mode(root, run):
    assert run("cma_roce_tos", "-d", "mlx5_2", "-t", "106") == (0, "106\n", "")
    assert devstate.roce_tos("mlx5_2") == 106
    assert run("cma_roce_mode", "-d", "mlx5_2", "-p", "1") == (0, "RoCE v2\n", "")
    assert run("cma_roce_mode", "-d", "mlx5_2", "-p", "1", "-m", "1") == (0, "IB/RoCE v1\n", "")
    assert devstate.roce_mode("mlx5_2") == "IB/RoCE v1"
    assert run("cma_roce_mode", "-d", "mlx5_2", "-p", "1", "-m", "2")[1] == "RoCE v2\n"
    assert run("cma_roce_tos", "-d", "mlx5_9", "-t", "106")[0] == 1


def test_perfquery_reads_sysfs_counters(root, run):
    devstate.add_counter("mlx5_0", 1, "port_xmit_data", 123456)
    devstate.add_counter("mlx5_0", 1, "symbol_error", 70000)
    rc, out, _ = run("perfquery", "-x")
    real = read_fixture("perfquery", "extended_rhel75_infiniband_diags16.txt")
    assert shape(out) == shape(real)
    assert [ln.split(":")[0] for ln in out.splitlines()] == [ln.split(":")[0] for ln in real.splitlines()]
    rec = parse("perfquery", out)
    assert rec.extended and rec.blocks[0].lid == 5
    assert rec.counters["PortXmitData"] == 123456 and rec.counters["SymbolErrorCounter"] == 70000
    rec = parse("perfquery", run("perfquery", "5", "1")[1])
    assert not rec.extended
    assert rec.counters["SymbolErrorCounter"] == 65535  # 16-bit PortCounters field saturates
    assert rec.counters["PortXmitData"] == 123456
    rc, out, err = run("perfquery", "77", "1")
    assert rc == 255 and "failed" in err


def test_perfquery_reset_after_read_and_reset_only(root, run):
    devstate.add_counter("mlx5_0", 1, "symbol_error", 12)
    devstate.add_counter("mlx5_0", 1, "link_downed", 3)
    rec = parse("perfquery", run("perfquery", "-x", "-r")[1])
    assert rec.counters["SymbolErrorCounter"] == 12 and rec.counters["LinkDownedCounter"] == 3
    after = parse("perfquery", run("perfquery", "-x")[1])
    assert after.counters["SymbolErrorCounter"] == 0 and after.counters["LinkDownedCounter"] == 0
    devstate.add_counter("mlx5_0", 1, "link_downed", 5)
    rc, out, _ = run("perfquery", "-R")
    assert rc == 0 and out == ""
    assert parse("perfquery", run("perfquery", "-x")[1]).counters["LinkDownedCounter"] == 0


def test_ibqueryerrors_reports_fault_counters(root, run):
    rec = parse("ibqueryerrors", run("ibqueryerrors")[1])
    assert rec.nodes == []
    assert (rec.nodes_checked, rec.bad_nodes, rec.ports_checked, rec.bad_ports) == (1, 0, 1, 0)
    hw = _hw()
    hw["hcas"][0]["ports"][0].update(link_flaps=6, symbol_errors=12)
    write_hw(root, hw)
    hwctl.sync()
    _rc, out, _ = run("ibqueryerrors")
    real = read_fixture("ibqueryerrors", "sx6036_fabric_lore.txt")
    assert shape("\n".join(out.splitlines()[-5:])) == shape("\n".join(real.splitlines()[-5:]))
    assert shape(out.splitlines()[0]) == shape(real.splitlines()[0])
    rec = parse("ibqueryerrors", out)
    assert rec.nodes[0].name == "gpu01 mlx5_0"
    assert rec.nodes[0].ports[0].counters == {"SymbolErrorCounter": 12, "LinkDownedCounter": 6}
    assert (rec.bad_nodes, rec.bad_ports) == (1, 1)


def test_openibd_stop_status_start(root, run):
    assert run("openibd", "status")[1].splitlines()[1] == "  HCA driver loaded"
    run("openibd", "stop")
    assert run("ibv_devinfo")[0] == 255
    assert run("openibd", "status")[0] == 3
    run("openibd", "start")
    assert parse("ibv_devinfo", run("ibv_devinfo")[1]).devices[0].hca_id == "mlx5_0"
    assert run("openibd", "bogus")[0] == 1


def test_perfquery_rcv_error_and_xmit_discard_details(root, run):
    devstate.add_counter("mlx5_0", 1, "port_rcv_errors", 41)
    devstate.add_counter("mlx5_0", 1, "port_xmit_discards", 7)
    rc, out, _ = run("perfquery", "-E")
    assert rc == 0
    real = read_fixture("perfquery", "rcv_error_details_switch_exporter.txt")
    # same header shape, same field names in the same order, same dot padding as the real capture
    assert out.splitlines()[0] == "# PortRcvErrorDetails counters: Lid 5 port 1"
    assert shape(out.split("\n", 1)[1]) == shape(real.split("\n", 1)[1])
    assert [len(ln.split(":")[0] + ":") + ln.count(".") for ln in out.splitlines()[1:]] == [
        len(ln.split(":")[0] + ":") + ln.count(".") for ln in real.splitlines()[1:]]
    e = parse("perfquery", out).blocks[0]
    assert e.group == "PortRcvErrorDetails" and e.counters["PortLocalPhysicalErrors"] == 41
    rc, out, _ = run("perfquery", "-D", "-C", "mlx5_0", "-P", "1")
    d = parse("perfquery", out).blocks[0]
    assert rc == 0 and d.group == "PortXmitDiscardDetails" and d.counters["PortInactiveDiscards"] == 7
    assert "PortSwHOQLifetimeLimitDiscards:..0" in out  # 31 characters + 2 dots: column 33
    # -X is PortXmitDataSL in perfquery(8) (not discards); the data of SL 0 in 4-octet words
    devstate.add_counter("mlx5_0", 1, "port_xmit_data", 1000)
    x = parse("perfquery", run("perfquery", "-X")[1]).blocks[0]
    assert x.group == "PortXmitDataSL" and x.counters["XmtDataSL0"] == 1000 and x.counters["XmtDataSL15"] == 0


def test_perfquery_extended_moves_with_traffic_and_all_ports(root, run):
    before = parse("perfquery", run("perfquery", "-x", "-C", "mlx5_0", "-P", "1")[1]).blocks[0]
    devstate.add_counter("mlx5_0", 1, "port_xmit_data", 2 * 10**9)  # 8 GB moved by a test
    devstate.add_counter("mlx5_0", 1, "port_rcv_data", 5)
    after = parse("perfquery", run("perfquery", "-x", "-C", "mlx5_0", "-P", "1")[1]).blocks[0]
    assert after.xmit_bytes - before.xmit_bytes == 8 * 10**9
    assert after.rcv_bytes - before.rcv_bytes == 20
    rc, out, _ = run("perfquery", "-x", "-a")
    agg = parse("perfquery", out).blocks[0]
    assert rc == 0 and agg.all_ports and agg.port == "255" and agg.port_select == 255
    assert agg.counters["PortXmitData"] == after.counters["PortXmitData"]  # one IB port on this HCA
    # -r -E: prints the details, then resets the port's counters
    devstate.add_counter("mlx5_0", 1, "port_rcv_errors", 3)
    assert parse("perfquery", run("perfquery", "-E", "-r")[1]).counters["PortLocalPhysicalErrors"] == 3
    assert parse("perfquery", run("perfquery", "-E")[1]).counters["PortLocalPhysicalErrors"] == 0
    assert parse("perfquery", run("perfquery", "-x")[1]).counters["PortXmitData"] == 2 * 10**9  # untouched
