"""lspci -vvv parser on real captures (tests/fixtures/lspci/, sources on their first lines)."""

from __future__ import annotations

import pytest
from captures import read_fixture

from fabricops import cli
from fabricops.errors import EXIT_BADINPUT, EXIT_OK, ParseError
from fabricops.parsers import lspci, parse


def devs(name: str) -> dict[str, dict]:
    return {d["bdf"]: d for d in lspci.parse(read_fixture("lspci", name))["devices"]}


def test_access_denied_capture_gives_no_link_or_acs_data():
    d = devs("access_denied_dell_haswell.txt")
    assert len(d) == 9
    assert all(x["access_denied"] for x in d.values())
    assert all(x["lnkcap"] is None and x["lnksta"] is None and x["acs_ctl"] is None for x in d.values())
    rp = d["0000:00:1c.7"]
    assert rp["bridge"] is True and rp["class"] == "PCI bridge"
    assert rp["bus"] == {"primary": 0x00, "secondary": 0x05, "subordinate": 0x09}
    assert d["0000:00:00.0"]["bridge"] is False and d["0000:00:00.0"]["bus"] is None
    assert d["0000:08:00.0"]["description"] == (
        "Matrox Electronics Systems Ltd. G200eR2 (rev 01) (prog-if 00 [VGA controller])"
    )


def test_parents_and_path_follow_the_bus_ranges_of_a_real_bridge_chain():
    listing = list(devs("access_denied_dell_haswell.txt").values())
    up = lspci.parents(listing)
    assert up["0000:08:00.0"] == "0000:07:00.0"
    assert up["0000:07:00.0"] == "0000:06:00.0"
    assert up["0000:05:00.0"] == "0000:00:1c.7"
    assert up["0000:01:00.0"] == "0000:00:03.0"  # bus 01 is 00:03.0's secondary, not 00:01.0's (02)
    assert up["0000:00:1c.7"] is None
    assert lspci.path_between(listing, "0000:08:00.0", "0000:01:00.0") == [
        "0000:07:00.0",
        "0000:06:00.0",
        "0000:05:00.0",
        "0000:00:1c.7",
        "0000:00:03.0",
    ]
    with pytest.raises(KeyError):
        lspci.path_between(listing, "0000:08:00.0", "0000:99:00.0")


def test_domain_qualified_plx_port_with_space_indentation():
    d = devs("plx_pex8725_downstream_port_spaces.txt")
    port = d["0000:02:08.0"]
    assert port["bus"] == {"primary": 0x02, "secondary": 0x82, "subordinate": 0x82}
    assert port["description"].startswith("PLX Technology, Inc. PEX 8725 24-Lane")
    assert port["access_denied"] is False and port["acs_ctl"] is None


def test_numeric_class_is_dropped_from_class_and_express_type_read():
    d = devs("a100_sxm4_nn_cut.txt")["0000:da:00.0"]
    assert d["class"] == "3D controller"
    assert d["description"] == "NVIDIA Corporation GA100 [A100 SXM4 40GB] [10de:20b0] (rev a1)"
    assert d["port_type"] == "Endpoint"
    assert d["lnkcap"] is None  # the quote is cut before LnkCap: no link data, not a guess


# Lines as real lspci prints them: NVIDIA/nccl#304 (ACSCtl with ACS redirect on a PLX port),
# Xilinx/SLASH#55 (speed downgraded, width ok), geerlingguy/raspberry-pi-pcie-devices#480 (both),
# raspberrypi/linux#6190 (older pciutils: no (ok) markers), aristanetworks/sonic#71 (width only).
BLOCK = """0000:17:01.0 PCI bridge: PLX Technology, Inc. PEX 8747 48-Lane, 5-Port Switch (rev ca)
\tBus: primary=17, secondary=19, subordinate=1a, sec-latency=0
\tCapabilities: [68] Express (v2) Downstream Port (Slot+), MSI 00
\t\tLnkCap:\tPort #8, Speed 8GT/s, Width x16, ASPM L1, Exit Latency L1 <4us
\t\tLnkSta:\tSpeed 8GT/s, Width x16
\t\tLnkCap2: Supported Link Speeds: 2.5-8GT/s, Crosslink- Retimer- 2Retimers- DRS-
\t\tLnkSta2: Current De-emphasis Level: -6dB, EqualizationComplete+
\tCapabilities: [148 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
0000:19:00.0 Processing accelerators: Xilinx Corporation Device 50b4
\tCapabilities: [70] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x8, ASPM not supported
\t\tLnkSta:\tSpeed 8GT/s (downgraded), Width x8 (ok)
0000:1a:00.0 VGA compatible controller: NVIDIA Corporation TU102GL [Quadro RTX 6000/8000] (rev a1)
\tCapabilities: [68] Express (v2) Legacy Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 8GT/s, Width x16, ASPM L0s L1, Exit Latency L0s <512ns, L1 <4us
\t\tLnkSta:\tSpeed 5GT/s (downgraded), Width x1 (downgraded)
0000:1b:00.0 Ethernet controller: Broadcom Inc. and subsidiaries Device b960 (rev 11)
\tCapabilities: [ac] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 8GT/s, Width x4, ASPM not supported
\t\tLnkSta:\tSpeed 8GT/s (ok), Width x1 (downgraded)
"""


def test_link_and_acs_lines():
    d = {x["bdf"]: x for x in lspci.parse(BLOCK)["devices"]}
    port = d["0000:17:01.0"]
    assert port["port_type"] == "Downstream Port"
    assert port["lnkcap"] == {"speed_gts": 8.0, "width": 16}
    assert port["lnksta"] == {"speed_gts": 8.0, "width": 16, "downgraded": False}  # not LnkSta2's line
    assert port["acs_cap"] == dict.fromkeys(lspci.ACS_FLAGS, True)
    assert port["acs_ctl"] == {
        "SrcValid": True,
        "TransBlk": False,
        "ReqRedir": True,
        "CmpltRedir": True,
        "UpstreamFwd": True,
        "EgressCtrl": False,
        "DirectTrans": False,
    }
    assert d["0000:19:00.0"]["lnksta"] == {"speed_gts": 8.0, "width": 8, "downgraded": True}
    assert d["0000:19:00.0"]["acs_ctl"] is None
    assert d["0000:1a:00.0"]["lnksta"] == {"speed_gts": 5.0, "width": 1, "downgraded": True}
    assert d["0000:1a:00.0"]["port_type"] == "Legacy Endpoint"
    assert d["0000:1b:00.0"]["lnksta"] == {"speed_gts": 8.0, "width": 1, "downgraded": True}
    assert lspci.parents(list(d.values()))["0000:19:00.0"] == "0000:17:01.0"


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "empty input"),
        (
            "18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n"
            "1a:00.0 Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n",
            "plain `lspci`",
        ),
        ("CA 'mlx5_0'\n\tCA type: MT4129\n", "no device line"),
        (BLOCK + BLOCK, "listed twice"),
    ],
)
def test_refuses_what_is_not_lspci_vvv(text, detail):
    with pytest.raises(ParseError, match=detail):
        parse("lspci", text)


def test_cli_parses_a_capture(tmp_path, capsys):
    f = tmp_path / "lspci.txt"
    f.write_text(read_fixture("lspci", "access_denied_dell_haswell.txt"))
    assert cli.main(["parse", "lspci", str(f)]) == EXIT_OK
    assert '"access_denied": true' in capsys.readouterr().out
    f.write_text("not lspci\n")
    assert cli.main(["parse", "lspci", str(f)]) == EXIT_BADINPUT
    err = capsys.readouterr().err
    assert "lspci" in err and "Traceback" not in err


def test_real_downstream_port_with_acs_redirect_and_downgraded_speed():
    """A real capture with link and ACS lines: LnkSta 8GT/s (downgraded) of LnkCap 16GT/s at full
    width, and ACSCtl with ReqRedir+ CmpltRedir+ (the P2P redirect the pcie_acs check fails on)."""
    [dev] = lspci.parse(read_fixture("lspci", "amd_matisse_downstream_acs_downgraded.txt"))["devices"]
    assert dev["bdf"] == "0000:03:02.0" and dev["bridge"] and dev["port_type"] == "Downstream Port"
    assert dev["bus"] == {"primary": 3, "secondary": 6, "subordinate": 6}
    assert dev["lnkcap"] == {"speed_gts": 16.0, "width": 4}
    assert dev["lnksta"] == {"speed_gts": 8.0, "width": 4, "downgraded": True}
    assert dev["acs_ctl"]["ReqRedir"] and dev["acs_ctl"]["CmpltRedir"] and dev["acs_ctl"]["SrcValid"]
    assert not dev["acs_ctl"]["TransBlk"] and not dev["acs_ctl"]["DirectTrans"]
    assert dev["acs_cap"]["DirectTrans"] and not dev["acs_cap"]["EgressCtrl"]
    assert not dev["access_denied"]
