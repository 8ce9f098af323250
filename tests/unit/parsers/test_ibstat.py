import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers.ibstat import parse


def test_h100_mixed_ib_and_roce_with_down_ports():
    rec = parse(read_fixture("ibstat", "h100_cx7_ib_cx6dx_eth_down.txt"))
    assert len(rec.cas) == 12
    ca = rec.cas[0]
    assert (ca.name, ca.ca_type, ca.number_of_ports) == ("mlx5_0", "MT4129", 1)
    assert ca.firmware_version == "28.39.1002"
    assert ca.node_guid == "0x946dae0300cde72c"
    p = ca.ports[0]
    assert (p.state, p.physical_state, p.rate, p.base_lid, p.sm_lid, p.link_layer) == (
        "Active", "LinkUp", 400, 75, 334, "InfiniBand")
    assert p.capability_mask == "0xa751e848" and p.port_guid == "0x946dae0300cde72c"
    down = rec.port("mlx5_2", 1)
    assert (down.state, down.physical_state, down.rate) == ("Down", "Disabled", 40)
    assert down.link_layer == "Ethernet"
    assert rec.port("mlx5_1", 1).rate == 100
    assert sum(1 for c in rec.cas if c.ports[0].state == "Active") == 9


def test_mlx4_fdr10_two_ports_space_indented():
    rec = parse(read_fixture("ibstat", "mlx4_fdr10_initializing_xcat.txt"))
    ca = rec.cas[0]
    assert ca.number_of_ports == 2 and [p.port for p in ca.ports] == [1, 2]
    p1, p2 = ca.ports
    assert (p1.state, p1.rate, p1.rate_note) == ("Initializing", 40, "FDR10")
    assert (p2.state, p2.physical_state, p2.rate, p2.rate_note) == ("Down", "Disabled", 10, None)


def test_single_port_form_and_ibpanic_line():
    text = ("CA: 'mlx5_0'\nPort 1:\nState: Active\nPhysical state: LinkUp\nRate: 200\nBase lid: 13\n"
            "LMC: 0\nSM lid: 1\nCapability mask: 0x2651e848\nPort GUID: 0x0c42a1030017c078\n"
            "Link layer: InfiniBand\n"
            "ibpanic: [1323906] main: stat of IB device 'mlx5_8' failed: No such file\n")
    rec = parse(text.replace("\n", "\r\n"))
    assert rec.port("mlx5_0", 1).rate == 200
    assert rec.warnings and rec.warnings[0].startswith("ibpanic:")


@pytest.mark.parametrize("text", ["", "   \n", "hca_id:\tmlx5_0\n\ttransport:\tInfiniBand (0)\n",
                                  "ibpanic: [1] main: can't init UMAD library\n"])
def test_not_ibstat(text):
    with pytest.raises(ParseError):
        parse(text)


def test_truncated_after_ca_header():
    text = read_fixture("ibstat", "h100_cx7_ib_cx6dx_eth_down.txt").split("\tPort 1:")[0]
    with pytest.raises(ParseError, match="no ports"):
        parse(text)
