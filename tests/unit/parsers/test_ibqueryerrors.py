import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers.ibqueryerrors import parse


def test_real_fabric_with_switch_and_cas():
    rec = parse(read_fixture("ibqueryerrors", "sx6036_fabric_lore.txt"))
    assert [n.name for n in rec.nodes] == ["dl380g7 mlx4_0", "server mlx4_0", "MF0;ys23ib4:SX6036/U1",
                                          "rd240 mlx4_0"]
    ca = rec.nodes[0]
    assert not ca.is_switch and ca.guid is None
    assert ca.ports[0].guid == "0x7cfe900300179b31" and ca.ports[0].port_number == 1
    assert ca.ports[0].counters == {"VL15Dropped": 14, "PortXmitWait": 4294967295}
    sw = rec.nodes[2]
    assert sw.is_switch and sw.guid == "0x2c903006e29b0" and len(sw.ports) == 10
    assert sw.ports[0].port == "ALL" and sw.ports[0].port_number is None
    assert sw.ports[0].counters["LinkDownedCounter"] == 48
    assert sw.ports[6].counters["SymbolErrorCounter"] == 65535
    assert (rec.nodes_checked, rec.bad_nodes, rec.ports_checked, rec.bad_ports) == (4, 4, 43, 14)
    assert rec.thresholds == {} and rec.suppressed == []


def test_clean_fabric_and_data_suffixes():
    clean = ("\n## Summary: 16 nodes checked, 0 bad nodes found\n"
             "##          226 ports checked, 0 ports have errors beyond threshold\n"
             "## Thresholds: SymbolErrorCounter=10 LinkDownedCounter=1\n## Suppressed: PortXmitWait\n")
    rec = parse(clean)
    assert rec.nodes == [] and rec.ports_checked == 226
    assert rec.thresholds == {"SymbolErrorCounter": 10, "LinkDownedCounter": 1}
    assert rec.suppressed == ["PortXmitWait"]
    data = ('Errors for "node1 HCA-1"\n   GUID 0x1 port 1: [PortRcvErrors == 52] '
            "[PortXmitData == 1234567 (4.709MB)]\n")
    assert parse(data).nodes[0].ports[0].counters == {"PortRcvErrors": 52, "PortXmitData": 1234567}


@pytest.mark.parametrize("text", ["", "# Port counters: Lid 1 port 1\nPortSelect:....1\n",
                                  'Errors for "node1 HCA-1"\n'])
def test_errors(text):
    with pytest.raises(ParseError):
        parse(text)
