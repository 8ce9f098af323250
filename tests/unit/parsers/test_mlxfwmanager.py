"""mlxfwmanager --query parser on real captures (tests/fixtures/mlxfwmanager/)."""

from __future__ import annotations

import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers import mlxfwmanager


def one(name: str) -> dict:
    records = mlxfwmanager.parse_query(read_fixture("mlxfwmanager", name))
    assert len(records) == 1
    return records[0]


def test_burned_image_not_yet_running():
    r = one("cx7_mlxup_burned_not_running.txt")
    assert r["device_type"] == "ConnectX7"
    assert r["part_number"] == "MCX75310AAS-NEA_Ax"
    assert r["psid"] == "MT_0000000838"
    assert r["pci"] == "0000:8e:00.0"
    assert r["base_guid"] == "9c63c00300abed5a" and r["base_mac"] == "9c63c0abed5a"
    assert r["versions"]["FW"] == {
        "current": "28.47.1026", "available": "28.47.1026", "running": "28.46.3048",
    }
    assert r["versions"]["PXE"] == {"current": "3.8.0100", "available": None}
    assert r["status"] == "Up to date"
    assert mlxfwmanager.fw_burned(r) == "28.47.1026"
    assert mlxfwmanager.fw_running(r) == "28.46.3048"


def test_running_equals_burned_when_no_running_row():
    r = one("cx6lx_mlxup_update_required.txt")
    assert r["pci"] == "0002:01:00.0"
    assert r["versions"]["FW"] == {"current": "26.33.1048", "available": "26.43.1014", "running": None}
    assert r["status"] == "Update required"
    assert mlxfwmanager.fw_running(r) == "26.33.1048"


def test_mst_device_name_is_not_a_pci_address():
    r = one("cx5_shs_docs_up_to_date.txt")
    assert r["device_name"] == "/dev/mst/mt4119_pciconf0" and r["pci"] is None
    r = one("cx3pro_hp_clp_running.txt")
    assert r["device_name"] == "mt4103_pci_cr0" and r["pci"] is None
    assert r["versions"]["CLP"]["current"] == "8025"
    assert mlxfwmanager.fw_running(r) == "2.42.5016" and mlxfwmanager.fw_burned(r) == "2.42.5700"
    assert r["base_guid"] is None


def test_multi_word_rom_names():
    r = one("bf2_online_update_running.txt")
    assert r["versions"]["UEFI Virtio net"] == {"current": "21.4.0013", "available": None}
    assert mlxfwmanager.fw_running(r) == "24.42.1000"


def test_two_devices_in_order():
    text = read_fixture("mlxfwmanager", "cx7_mlxup_burned_not_running.txt")
    second = read_fixture("mlxfwmanager", "cx6lx_mlxup_update_required.txt").replace("Device #1", "Device #2")
    records = mlxfwmanager.parse_query(text + second)
    assert [r["psid"] for r in records] == ["MT_0000000838", "MT_0000000575"]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("-E- No devices found or specified, mst might be stopped, run 'mst start'\n", "Device #1"),
        ("Device #1:\n----------\n  Device Type:      ConnectX7\n", "PSID"),
        ("Device #1:\n  PSID:   MT_0000000838\n  Versions:   Current   Available\n", "no FW version"),
        ("Device #1:\n  PSID:   MT_1\n  Versions:   Current   Available\n     FW  28.1\n", "two columns"),
    ],
)
def test_refusals(text, why):
    with pytest.raises(ParseError, match=why):
        mlxfwmanager.parse_query(text)
