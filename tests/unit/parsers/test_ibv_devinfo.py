import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers.ibv_devinfo import parse


def test_two_mlx4_hcas_with_device_ports_line():
    rec = parse(read_fixture("ibv_devinfo", "mlx4_two_hcas_plain.txt"))
    assert [d.hca_id for d in rec.devices] == ["mlx4_1", "mlx4_0"] and not rec.verbose
    d = rec.devices[0]
    assert (d.transport, d.fw_ver, d.node_guid, d.sys_image_guid) == (
        "InfiniBand", "2.42.5000", "7cfe:9003:00a5:95c0", "7cfe:9003:00a5:95c3")
    assert (d.vendor_id, d.vendor_part_id, d.hw_ver, d.board_id, d.phys_port_cnt) == (
        "0x02c9", 4099, "0x1", "MT_1090120019", 2)
    p1, p2 = d.ports
    assert (p1.port, p1.state, p1.max_mtu, p1.active_mtu, p1.sm_lid, p1.lid, p1.link_layer) == (
        1, "PORT_ACTIVE", 4096, 4096, 1, 22, "InfiniBand")
    assert (p2.state, p2.lid) == ("PORT_DOWN", 0)
    assert rec.device("mlx4_0").ports[0].sm_lid == 18


def test_verbose_single_port_skips_capability_lists():
    rec = parse(read_fixture("ibv_devinfo", "mlx4_verbose_port2.txt"))
    assert rec.verbose
    d = rec.devices[0]
    assert d.phys_port_cnt == 2 and [p.port for p in d.ports] == [2]
    p = d.ports[0]
    assert (p.phys_state, p.active_width, p.active_speed, p.gid_tbl_len) == ("POLLING", "4X", "2.5 Gbps", 128)
    gid = "fe80:0000:0000:0000:7cfe:9003:00a5:95c2"
    assert [(g.index, g.gid, g.type) for g in p.gids] == [(0, gid, None)]


def test_verbose_roce_gid_table_spaces():
    rec = parse(read_fixture("ibv_devinfo", "cx6_roce_verbose.txt"))
    d = rec.devices[0]
    assert (d.hca_id, d.fw_ver, d.vendor_part_id) == ("mlx5_0", "20.24.4702", 4123)
    assert d.board_id == "MT_0000000225"
    p = d.ports[0]
    assert (p.state, p.link_layer, p.active_mtu, p.active_speed, p.phys_state) == (
        "PORT_ACTIVE", "Ethernet", 4096, "25.0 Gbps", "LINK_UP")
    assert [g.type for g in p.gids] == ["RoCE v1", "RoCE v2", "RoCE v1", "RoCE v2"]
    assert p.gids[3].gid == "::ffff:192.168.1.11"


@pytest.mark.parametrize("text,match", [
    ("", "empty"),
    ("No IB devices found\n", "No IB devices found"),
    ("Failed to get IB devices list: Function not implemented\n", "Failed to get IB devices list"),
    ("2 HCAs found:\n\tmlx4_1\n\tmlx4_0\n", "-l"),
    ("CA 'mlx5_0'\n\tCA type: MT4129\n", "hca_id"),
])
def test_errors(text, match):
    with pytest.raises(ParseError, match=match):
        parse(text)


def test_truncated_before_ports():
    text = read_fixture("ibv_devinfo", "mlx4_two_hcas_plain.txt")
    with pytest.raises(ParseError, match="no 'port:'"):
        parse(text.split("\tDevice ports:")[0])


def test_crlf():
    text = read_fixture("ibv_devinfo", "mlx4_two_hcas_plain.txt").replace("\n", "\r\n")
    assert parse(text).devices[1].fw_ver == "2.42.5000"
