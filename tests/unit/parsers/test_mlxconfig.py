"""mlxconfig query parser on real captures (tests/fixtures/mlxconfig/, sources on their first lines)."""

from __future__ import annotations

import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers import mlxconfig


def q(name: str) -> dict:
    return mlxconfig.parse_query(read_fixture("mlxconfig", name))


def test_extended_query_has_three_columns_and_the_modified_mark():
    r = q("cx5_shs_docs_extended_query_elided.txt")
    assert r["device"] == "/dev/mst/mt4119_pciconf0"
    assert r["device_type"] == "ConnectX5"
    assert r["name"] == "MCX515A-CCA_Ax_Bx"
    assert r["description"].startswith("ConnectX-5 EN network interface card")
    assert r["columns"] == ["default", "current", "next"]
    assert r["configs"]["ADVANCED_PCI_SETTINGS"] == {
        "default": "False(0)", "current": "True(1)", "next": "True(1)", "modified": True,
    }
    assert r["configs"]["SAFE_MODE_THRESHOLD"] == {
        "default": "10", "current": "10", "next": "10", "modified": False,
    }
    assert len(r["configs"]) == 5  # the '...' lines are no rows


def test_next_value_different_from_current_is_marked():
    r = q("cx4_operator_test_extended_query.txt")
    assert r["name"] is None and r["device"] is None
    m = r["configs"]["MEMIC_SIZE_LIMIT"]
    assert m["current"] == "_256KB(1)" and m["next"] == "DISABLED(0)" and m["modified"] is True
    assert r["configs"]["ESWITCH_HAIRPIN_DESCRIPTORS"]["next"] == "Array[0..7]"


def test_plain_query_has_next_boot_only():
    r = q("cx5_vpi_full_query_rst_indented.txt")
    assert r["columns"] == ["next"]
    assert r["configs"]["LINK_TYPE_P1"] == {"next": "IB(1)", "modified": False}
    assert "default" not in r["configs"]["ATS_ENABLED"]
    assert r["configs"]["CNP_DSCP_P1"]["next"] == "48"
    assert r["configs"]["PCI_WR_ORDERING"]["next"] == "per_mkey(0)"
    assert r["configs"]["EXP_ROM_UEFI_x86_ENABLE"]["next"] == "True(1)"
    assert len(r["configs"]) == 143


def test_set_output_reads_next_and_new():
    r = q("cx6dx_mstconfig_set_roce_cc.txt")
    assert r["columns"] == ["next", "new"]
    assert r["device"] == "3d:00.1"
    assert r["configs"]["ROCE_CC_LEGACY_DCQCN"]["new"] == "False(0)"


def test_read_only_mark_of_newer_mft_is_not_a_name():
    # mstflint mlxcfg_ui.cpp printSingleParam: diff mark, then 'RO', then the name
    text = (
        "Device #1:\n----------\n\nDevice type:    ConnectX7\nDevice:         0000:41:00.0\n\n"
        "Configurations:                            Default             Current             Next Boot\n"
        "*        ATS_ENABLED                       False(0)            False(0)            True(1)\n"
        " RO      PCI_DOWNSTREAM_PORT_OWNER[0]      DEVICE_DEFAULT(0)   DEVICE_DEFAULT(0)   "
        "DEVICE_DEFAULT(0)\n"
    )
    r = mlxconfig.parse_query(text)
    assert r["configs"]["ATS_ENABLED"]["modified"] is True
    assert "PCI_DOWNSTREAM_PORT_OWNER[0]" in r["configs"]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("Device #1:\n----------\nDevice type:    ConnectX4\n", "Configurations"),
        ("Configurations:                              Next Boot\n", "without any parameter row"),
        ("Configurations:   Default  Current  Next Boot\n  LINK_TYPE_P1   IB(1)   IB(1)\n", "2 values for 3"),
        ("Configurations:      Next Boot\n   A_B    1\n   A_B    1\n", "twice"),
        ("Configurations:      Next Boot\n-E- The Device doesn't support X parameter\n", "reported an error"),
    ],
)
def test_refusals(text, why):
    with pytest.raises(ParseError, match=why):
        mlxconfig.parse_query(text)


def test_value_helpers():
    assert mlxconfig.value_int("True(1)") == 1
    assert mlxconfig.value_int("IB(1)") == 1
    assert mlxconfig.value_int("44") == 44
    assert mlxconfig.value_int("0x10") == 16
    assert mlxconfig.value_int("Array[0..7]") is None
    assert mlxconfig.value_int("ETH") is None
    assert mlxconfig.value_name("True(1)") == "TRUE"
    assert mlxconfig.value_name("ETH(2)") == "ETH"
    assert mlxconfig.value_name("eth") == "ETH"
    assert mlxconfig.value_name("44") is None
    assert mlxconfig.same("True(1)", "1")
    assert mlxconfig.same("ETH(2)", "eth")
    assert mlxconfig.same("0x10", "16")
    assert not mlxconfig.same("IB(1)", "ETH(2)")
    assert not mlxconfig.same("IB(1)", "2")


def test_set_error_is_the_reason_after_the_mark():
    out = "Device #1:\n----------\n\nConfigurations:   Next Boot   New\n-E- Unknown Parameter: FOO_BAR\n"
    assert mlxconfig.parse_set_error(out) == "Unknown Parameter: FOO_BAR"
    assert mlxconfig.parse_set_error(read_fixture("mlxconfig", "cx6dx_mstconfig_set_roce_cc.txt")) is None
