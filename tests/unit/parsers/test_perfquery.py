import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers.perfquery import parse


def test_extended_rhel75():
    rec = parse(read_fixture("perfquery", "extended_rhel75_infiniband_diags16.txt"))
    b = rec.blocks[0]
    assert (b.lid, b.port, b.extended, b.cap_mask, b.cap_mask2, b.port_select) == (
        10, "1", True, "0x5300", "0x0000002", 1)
    assert len(b.counters) == 25
    assert b.counters["PortXmitWait"] == 0 and b.counters["QP1Dropped"] == 0
    assert b.counters["CounterSelect2"] == 0


PLAIN = """# Port counters: Lid 214 port 35
PortSelect:......................35
CounterSelect:...................0x1b01
SymbolErrorCounter:..............3
LinkErrorRecoveryCounter:........1
LinkDownedCounter:...............2
PortRcvErrors:...................0
PortXmitDiscards:................17
PortXmitData:....................196508288843
PortRcvData:.....................550793773496
PortXmitPkts:....................6618992385
PortRcvPkts:.....................2242117286
PortXmitWait:....................4294967295
"""


def test_plain_counters_and_two_blocks():
    second = PLAIN.replace("Lid 214 port 35", "Lid 61 port 1").replace("..35\n", "...1\n")
    rec = parse(PLAIN + second)
    assert not rec.extended and [b.lid for b in rec.blocks] == [214, 61]
    c = rec.counters
    assert c["CounterSelect"] == 0x1B01 and c["SymbolErrorCounter"] == 3 and c["LinkDownedCounter"] == 2
    assert c["PortXmitData"] == 196508288843 and c["PortXmitWait"] == 4294967295
    assert rec.blocks[1].port_select == 1


@pytest.mark.parametrize("text", [
    "", "CA 'mlx5_0'\n\tCA type: MT4129\n", "# Port counters: Lid 1 port 1\n",
    "# Port counters: Lid 1 port 1\nPortSelect:......1\nCounterSelect:....0x0000\n",
])
def test_errors(text):
    with pytest.raises(ParseError):
        parse(text)
