import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers.ibstatus import parse


def test_a100_hdr_space_indented():
    rec = parse(read_fixture("ibstatus", "a100_hdr_gpud.txt"))
    assert len(rec.ports) == 9 and rec.devices[0] == "mlx5_0"
    p = rec.ports[0]
    assert p.default_gid == "fe80:0000:0000:0000:0015:5dff:fd34:11eb"
    assert (p.base_lid, p.sm_lid, p.state, p.state_num, p.phys_state, p.phys_state_num) == (
        0x33BF, 1, "ACTIVE", 4, "LinkUp", 5)
    assert (p.rate, p.width, p.speed, p.link_layer) == (200, "4X", "HDR", "InfiniBand")
    eth = rec.ports[-1]
    assert eth.default_gid is None and (eth.rate, eth.speed, eth.link_layer) == (40, "QDR", "Ethernet")


def test_cx3_tabs_fdr10_and_polling_sdr_without_name():
    rec = parse(read_fixture("ibstatus", "cx3_fdr10_polling_libvma.txt"))
    up, down = rec.ports
    assert (up.rate, up.width, up.speed) == (40, "4X", "FDR10")
    assert (down.port, down.state, down.phys_state, down.rate, down.speed) == (2, "DOWN", "Polling", 10, None)


def test_roce_disabled():
    rec = parse(read_fixture("ibstatus", "cx6_roce_disabled.txt"))
    assert [(p.state, p.phys_state_num, p.rate) for p in rec.ports] == [("DOWN", 3, 200), ("DOWN", 3, 200)]


@pytest.mark.parametrize("text,match", [("", "empty"), ("Fatal error:  No devices\n", "No devices"),
                                        ("CA 'mlx5_0'\n\tCA type: MT4129\n", "header")])
def test_errors(text, match):
    with pytest.raises(ParseError, match=match):
        parse(text)


def test_truncated_block():
    text = read_fixture("ibstatus", "cx3_fdr10_polling_libvma.txt")
    with pytest.raises(ParseError, match="lacks"):
        parse(text[: text.rindex("\tstate:")])
