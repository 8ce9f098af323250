"""ibnetdiscover and iblinkinfo on real captures: nodes, cables (ISLs too); cut or filtered output refused."""

import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers import parse


def test_x5_eleven_switches_with_their_isls():
    topo = parse("ibnetdiscover", read_fixture("ibnetdiscover", "x5-qdr-11-switches.txt"))
    switches = [n for n in topo.nodes if n.kind == "Switch"]
    cas = [n for n in topo.nodes if n.kind == "Ca"]
    assert (len(switches), len(cas)) == (11, 89)
    assert topo.initiated_from == "0002c90300080e84"
    first = switches[0]
    assert (first.guid, first.num_ports, first.desc, first.lid) == (
        "0x0008f10500200b50",
        36,
        "Voltaire 4036 - 36 QDR ports switch",
        9,
    )
    isl = first.cables[0]
    assert (isl.port, isl.peer_kind, isl.peer_guid, isl.peer_port) == (1, "Switch", "0x0008f10500108c5c", 15)
    assert (isl.peer_desc, isl.peer_lid, isl.width, isl.speed) == (
        "Voltaire 4036 # 4036-8C5C",
        16,
        "4x",
        "QDR",
    )
    host = next(c for c in first.cables if c.port == 4)
    assert (host.peer_kind, host.peer_port_guid, host.speed) == ("Ca", "0x003048c749cd0001", "DDR")
    # every cable is listed from both ends: switch-to-switch cables appear twice, CA cables once per side
    isl_ends = {(n.guid, c.port) for n in switches for c in n.cables if c.peer_kind == "Switch"}
    back = {(c.peer_guid, c.peer_port) for n in switches for c in n.cables if c.peer_kind == "Switch"}
    assert isl_ends == back and len(isl_ends) > 50
    last = topo.nodes[-1]
    assert (last.kind, last.desc, last.cables[0].lid, last.cables[0].peer_desc) == (
        "Ca",
        "MT25408 ConnectX Mellanox Technologies",
        17,
        "Voltaire 4036 # 4036-8BBA",
    )
    assert last.cables[0].port_guid == "0x0002c90300080e85"


def test_man_page_example_with_a_1x_link_and_lmc():
    topo = parse("ibnetdiscover", read_fixture("ibnetdiscover", "rdma-core-man-isr9024.txt"))
    assert [(n.kind, n.lid) for n in topo.nodes if n.kind == "Switch"] == [("Switch", 6), ("Switch", 3)]
    sw6ib4 = topo.node("0x0008f10400410015")
    one_x = next(c for c in sw6ib4.cables if c.port == 1)
    assert (one_x.width, one_x.speed, one_x.peer_port) == ("1x", "SDR", 10)
    ca = topo.node("0x0008f10403960558")
    assert [(c.port, c.lid, c.peer_port) for c in ca.cables] == [(2, 14, 8), (1, 10, 12)]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("CA 'mlx5_0'\n\tCA type: MT4129\n", "not topology-file text"),
        ('[1]\t"S-0008f10400410015"[6]\t\t# "x" lid 3 4xSDR\n', "before any Switch/Ca"),
        (
            'Switch\t24 "S-005442ba00003080"\t\t# "ISR9024" base port 0 lid 6 lmc 0\n[22]\t"H-0008f1040396',
            "cut",
        ),
        (
            'Switch\t24 "S-005442ba00003080"\t\t# "ISR9024" base port 0 lid 6 lmc 0\n'
            '[22]\t"H-0008f10403961354"[1]\n',
            "no '# \"desc\" lid N' part",
        ),
        (
            "ibwarn: [1] mad_rpc_open_port: can't open UMAD port ((null):0)\n"
            "ibnetdiscover: iberror: failed: Failed to open '(null)' port '0'\n",
            "iberror",
        ),
    ],
)
def test_not_or_damaged_ibnetdiscover(text, why):
    with pytest.raises(ParseError, match=why):
        parse("ibnetdiscover", text)


def test_iblinkinfo_edr_capture():
    info = parse("iblinkinfo", read_fixture("iblinkinfo", "edr76-sb7700.txt"))
    assert [(n.kind, n.desc) for n in info.nodes] == [
        ("CA", "n02 HCA-1"),
        ("CA", "mgt mlx5_0"),
        ("Switch", "MF0;SB7700:MSB7700/U1"),
    ]
    ca = info.nodes[0].ports[0]
    assert (ca.port_guid, ca.lid, ca.port, ca.width, ca.lane_speed, ca.state, ca.phys_state) == (
        "0xec0d9a03003d62be",
        4,
        1,
        "4X",
        "25.78125 Gbps",
        "Active",
        "LinkUp",
    )
    assert (ca.peer_lid, ca.peer_port, ca.peer_desc) == (2, 17, "MF0;SB7700:MSB7700/U1")
    sw = info.nodes[2]
    assert sw.guid == "0x506b4b0300820910" and len(sw.ports) == 18
    down = sw.ports[0]
    assert (down.port, down.state, down.phys_state, down.peer_desc, down.width) == (
        1,
        "Down",
        "Polling",
        None,
        None,
    )
    assert [(p.port, p.peer_desc, p.peer_lid) for p in sw.ports if p.peer_desc] == [
        (17, "n02 HCA-1", 4),
        (18, "n01 HCA-1", 1),
    ]


# `iblinkinfo | grep Up` as published in 824380210/Linpack Mellanox_19A.md (kept here, not under
# tests/fixtures: every fixture there must parse, and this one must not)
GREP_UP = """\
      0xec0d9a03003d62be      4    1[  ] ==( 4X      25.78125 Gbps Active/  LinkUp)==>       2   17[  ] "MF0;SB7700:MSB7700/U1" ( )
      0x248a070300928186      3    1[  ] ==( 4X      25.78125 Gbps Active/  LinkUp)==>       2   36[  ] "MF0;SB7700:MSB7700/U1" ( )
           2   17[  ] ==( 4X      25.78125 Gbps Active/  LinkUp)==>       4    1[  ] "n02 HCA-1" ( )
           2   18[  ] ==( 4X      25.78125 Gbps Active/  LinkUp)==>       1    1[  ] "n01 HCA-1" ( )
"""  # noqa: E501


def test_iblinkinfo_filtered_by_grep_is_refused():
    """`iblinkinfo | grep Up` drops the headers: the port lines belong to no node."""
    with pytest.raises(ParseError, match="filtered with grep"):
        parse("iblinkinfo", GREP_UP)


def test_iblinkinfo_line_mode_and_cut_lines():
    line = (
        '0x0002c90200404ad8 "SwitchX -  Mellanox Technologies"      4    3[  ] ==( 4X 25.78 Gbps '
        'Active/  LinkUp)==>  0x0002c903000e0b72     15    1[  ] "exe0002 HCA-1" ( )'
    )
    info = parse("iblinkinfo", line + "\n")
    p = info.nodes[0].ports[0]
    assert (info.nodes[0].desc, p.port, p.peer_guid, p.peer_lid, p.peer_desc) == (
        "SwitchX -  Mellanox Technologies",
        3,
        "0x0002c903000e0b72",
        15,
        "exe0002 HCA-1",
    )
    cut = read_fixture("iblinkinfo", "edr76-sb7700.txt").replace('"n01 HCA-1" ( )', '"n01 HC')
    with pytest.raises(ParseError, match="port 18"):
        parse("iblinkinfo", cut)
