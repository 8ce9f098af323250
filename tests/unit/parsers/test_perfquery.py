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


# --- the counter groups operators read: -x on several ports, -E, -D, -a, -r ----------------------


def test_extended_two_switch_ports_real_capture():
    rec = parse(read_fixture("perfquery", "extended_two_ports_switch_exporter.txt"))
    assert [(b.lid, b.port, b.group) for b in rec.blocks] == [
        (1719, "1", "PortCountersExtended"), (1719, "2", "PortCountersExtended")]
    p1, p2 = rec.blocks
    assert p1.counters["PortXmitData"] == 36298026860928 and p2.counters["PortRcvData"] == 39078804993378
    assert p1.xmit_bytes == 4 * 36298026860928 and p2.rcv_bytes == 4 * 39078804993378  # 4-octet words
    assert p1.counters["PortMulticastRcvPkts"] == 5584846741 and p2.counters["PortXmitWait"] == 36510964
    assert not p1.all_ports and rec.group("PortRcvErrorDetails") == []


def test_rcv_error_details_real_capture():
    rec = parse(read_fixture("perfquery", "rcv_error_details_switch_exporter.txt"))
    b = rec.blocks[0]
    assert (b.group, b.lid, b.port, b.port_select, b.extended) == ("PortRcvErrorDetails", 1719, "2", 2, False)
    assert list(b.counters) == ["PortSelect", "CounterSelect", "PortLocalPhysicalErrors",
                                "PortMalformedPktErrors", "PortBufferOverrunErrors", "PortDLIDMappingErrors",
                                "PortVLMappingErrors", "PortLoopingErrors"]
    assert b.xmit_bytes is None  # no data counters in this group


# The real capture above is all zeros; these carry values so a misread field shows. The field order
# is libibmad fields.c (PortRcvErrorDetails / PortXmitDiscardDetails); the header and the
# PortSelect/CounterSelect lines are perfquery.c common_func's.
RCV_ERR = """# PortRcvErrorDetails counters: Lid 61 port 7
PortSelect:......................7
CounterSelect:...................0x0000
PortLocalPhysicalErrors:.........118
PortMalformedPktErrors:..........2
PortBufferOverrunErrors:.........0
PortDLIDMappingErrors:...........31
PortVLMappingErrors:.............0
PortLoopingErrors:...............4
"""
XMIT_DISC = """# PortXmitDiscardDetails counters: Lid 61 port 7
PortSelect:......................7
CounterSelect:...................0x0000
PortInactiveDiscards:............9
PortNeighborMTUDiscards:.........0
PortSwLifetimeLimitDiscards:.....1207
PortSwHOQLifetimeLimitDiscards:..65535
"""


def test_rcv_error_and_xmit_discard_details_with_values():
    rec = parse(RCV_ERR + XMIT_DISC)
    (e,), (d,) = rec.group("PortRcvErrorDetails"), rec.group("PortXmitDiscardDetails")
    assert (e.counters["PortLocalPhysicalErrors"], e.counters["PortMalformedPktErrors"],
            e.counters["PortDLIDMappingErrors"], e.counters["PortLoopingErrors"]) == (118, 2, 31, 4)
    assert (d.counters["PortInactiveDiscards"], d.counters["PortSwLifetimeLimitDiscards"],
            d.counters["PortSwHOQLifetimeLimitDiscards"]) == (9, 1207, 65535)
    assert d.lid == 61 and d.port == "7" and not d.extended


def test_all_ports_aggregate_and_reset_after_read():
    # perfquery -a: perfquery.c prints port ALL_PORTS (255) and PortSelect 255
    agg = PLAIN.replace("Lid 214 port 35", "Lid 214 port 255 (CapMask: 0x5A00)").replace("..35\n", "..255\n")
    b = parse(agg).blocks[0]
    assert b.all_ports and b.port == "255" and b.cap_mask == "0x5A00"
    assert b.counters["PortXmitData"] == 196508288843
    assert not parse(PLAIN).blocks[0].all_ports
    # -r prints what it read (then resets): the same text parses the same
    assert parse(PLAIN).counters == parse(PLAIN + "\n").counters


@pytest.mark.parametrize("text", [
    "# PortRcvErrorDetails counters: Lid 1 port 1\nPortSelect:......1\nCounterSelect:....0x0000\n",
    "# PortXmitDiscardDetails counters: Lid 1 port 1\nPortSelect:......1\nPortXmitData:....5\n",
    "# PortFlowCtlCounters counters: Lid 1 port 1\nPortSelect:......1\nCounterSelect:....0x0000\n",
    RCV_ERR + "# PortXmitDiscardDetails counters: Lid 61 port 7\n",
])
def test_detail_groups_without_their_counters_are_refused(text):
    with pytest.raises(ParseError):
        parse(text)
