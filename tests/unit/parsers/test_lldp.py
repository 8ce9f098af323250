"""LLDP neighbours: lldpctl -f keyvalue and NVUE on real captures, Onyx on its documented field names."""

import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers import parse
from fabricops.parsers.lldp import parse_onyx_remote


def test_lldpctl_cumulus_neighbours_with_the_captures_own_flaw():
    rec = parse("lldpctl", read_fixture("lldpctl", "netbox-agent-cumulus.txt"))
    eno1, eno2 = rec.neighbors
    assert (eno1.interface, eno1.system_name, eno1.port_id, eno1.port_id_type) == (
        "eno1",
        "toto-chassis.dc42",
        "swp46",
        "ifname",
    )
    assert eno1.port_descr == "BXVWNR2:lom2" and eno1.mgmt_ip == ["10.160.20.18", "fe80::e6f0:4ff:feb6:4732"]
    assert eno1.chassis_id == "e4:f0:04:b6:47:32" and eno1.port_name == "swp46"
    # the published file names eno1's chassis on eno2d1's block: eno2d1 keeps no system name
    assert (eno2.interface, eno2.system_name, eno2.port_name) == ("eno2d1", None, "swp46")


def test_lldpctl_juniper_local_port_id_falls_back_to_the_description():
    rec = parse("lldpctl", read_fixture("lldpctl", "netbox-agent-qfx.txt"))
    assert [(n.interface, n.system_name, n.port_id, n.port_id_type, n.port_name) for n in rec.neighbors] == [
        ("eth0", "sw-filer-f06.dc42", "512", "local", "xe-0/0/1"),
        ("eth1", "sw-filer-f05.dc42", "512", "local", "xe-0/0/1"),
    ]
    assert rec.on("eth1").chassis_id == "40:a6:77:7c:fb:20" and rec.on("eth9") is None


def test_lldpd_host_advertising_its_mac_is_named_by_description():
    """lldpd on a host sends the MAC as port ID and the netdev as description (lldpd's own tests)."""
    text = (
        "lldp.swp3.chassis.name=gpu03\nlldp.swp3.port.mac=02:00:00:00:00:02\n"
        "lldp.swp3.port.descr=enp170s0f0np0\n"
    )
    n = parse("lldpctl", text).neighbors[0]
    assert (n.port_id_type, n.port_name) == ("mac", "enp170s0f0np0")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "prints nothing"),
        ("lldp.eth0.chassis.name\n", "not key=value"),
        ("Interface: eth0, via: LLDP\n", "not a 'lldp.' key"),
    ],
)
def test_not_lldpctl_keyvalue(text, why):
    with pytest.raises(ParseError, match=why):
        parse("lldpctl", text)


def test_nvue_lldp_neighbor_table():
    rec = parse("nvue-lldp-neighbor", read_fixture("nvue-lldp-neighbor", "nvue-reference-swp51.txt"))
    [n] = rec.neighbors
    assert (n.system_name, n.mgmt_ip, n.port_id, n.port_name) == ("spine01", ["10.10.10.101"], "swp1", "swp1")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Neighbor  Remote IP\n",
        "Neighbor  Remote IP  Model\n--------  ---------  -----\nx  y  z\n",
        "Neighbor  Remote IP     Model  SW Version  Remote Port\n--------  ------------  -----  ----------  "
        "-----------\nspine01   10.10.10.101\n",
    ],
)
def test_not_or_cut_nvue_table(text):
    with pytest.raises(ParseError):
        parse("nvue-lldp-neighbor", text)


ONYX = """Eth1/1
Remote Index                 : 1
Remote chassis id            : 02:aa:bb:cc:dd:01 ; chassis id subtype : Mac Address (4)
Remote port-id               : 02:11:22:33:44:55 ; port id subtype : Mac Address (3)
Remote port description      : enp170s0f0np0
Remote system name           : gpu01

Eth1/31 (Po1)
Remote port-id               : swp1 ; port id subtype : Interface Name (5)
Remote system name           : spine1
Eth1/2
"""


def test_onyx_lldp_remote_blocks():
    rec = parse_onyx_remote(ONYX)
    assert [(n.interface, n.system_name, n.port_name, n.chassis_id) for n in rec.neighbors] == [
        ("Eth1/1", "gpu01", "enp170s0f0np0", "02:aa:bb:cc:dd:01"),
        ("Eth1/31", "spine1", "swp1", None),
    ]


@pytest.mark.parametrize("text", ["", "Remote system name : x\n", "Eth1/1\nLocal port : 3\n", "Eth1/1\n"])
def test_not_onyx_lldp_remote(text):
    if text == "Eth1/1\n":  # a port block without neighbours parses to no neighbour, not an error
        assert parse_onyx_remote(text).neighbors == []
        return
    with pytest.raises(ParseError):
        parse_onyx_remote(text)
