"""Emulated MFT tools (emul/firmware.py): their output read back with the real-capture parsers,
the set / burn / reset semantics of SPEC-20 C, and the refusals of the real tools."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from fabricops.parsers import ibstat as ibstat_parser
from fabricops.parsers import mlxconfig as cfgp
from fabricops.parsers import mlxfwmanager as mgrp
from fabricops.parsers import mlxfwreset as rstp
from fabricops_lab import hardware, topology
from fabricops_lab.emul import devstate, firmware, hwctl, rdma

TOPO = topology.load()


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("EMUL_ROOT", str(tmp_path))
    hw = hardware.hardware_json(TOPO, TOPO["hosts"][0], kernel="6.1.0-18-amd64")
    (tmp_path / "var/lib/emulated-hw").mkdir(parents=True)
    (tmp_path / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(hw))
    return tmp_path


def hca0() -> dict:
    return devstate.hcas()[0]


def run(func, *argv: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        import sys

        old = sys.stdin
        sys.stdin = io.StringIO(stdin)
        try:
            rc = func(list(argv))
        finally:
            sys.stdin = old
    return rc, out.getvalue()


def query(extended: bool = True, dev: str | None = None) -> dict:
    args = ["-d", dev or hca0()["pci"]] + (["-e"] if extended else []) + ["q"]
    rc, out = run(firmware.mlxconfig, *args)
    assert rc == 0, out
    return cfgp.parse_query(out)


def image(tmp: Path, psid: str, version: str) -> str:
    path = tmp / f"fw-{psid}-{version}.bin"
    text = firmware.image_text(psid, version, "ConnectX7", "MCX75310AAS-NEA_Ax", firmware.DEFAULT_ROMS)
    path.write_text(text)
    return str(path)


# --- mlxconfig ---------------------------------------------------------------------------------


def test_query_parses_with_the_real_capture_parser_and_starts_at_defaults(root):
    q = query()
    h = hca0()
    assert q["device"] == h["pci"] and q["device_type"] == "ConnectX7"
    assert q["columns"] == ["default", "current", "next"]
    assert q["configs"]["ATS_ENABLED"] == {
        "default": "False(0)", "current": "False(0)", "next": "False(0)", "modified": False,
    }
    link = "IB(1)" if h["ports"][0]["link_layer"] == "InfiniBand" else "ETH(2)"
    assert q["configs"]["LINK_TYPE_P1"]["next"] == link
    assert q["configs"]["CNP_DSCP_P1"]["next"] == "48"
    plain = query(extended=False, dev=h["name"])
    assert plain["columns"] == ["next"] and "default" not in plain["configs"]["ATS_ENABLED"]
    short = query(dev=h["pci"].removeprefix("0000:"))
    assert short["configs"] == q["configs"]


def test_set_changes_next_only_and_reset_makes_it_current(root):
    dev = hca0()["pci"]
    rc, out = run(firmware.mlxconfig, "-d", dev, "-y", "set", "ATS_ENABLED=1", "MAX_ACC_OUT_READ=44")
    assert rc == 0, out
    assert "Apply new Configuration? (y/n) [n] : y" in out
    assert out.rstrip().endswith("-I- Please reboot machine to load new configurations.")
    table = cfgp.parse_query(out)["configs"]
    assert table["ATS_ENABLED"] == {"next": "False(0)", "new": "True(1)", "modified": False}
    q = query()["configs"]
    assert q["ATS_ENABLED"] == {
        "default": "False(0)", "current": "False(0)", "next": "True(1)", "modified": True,
    }
    assert cfgp.same(q["MAX_ACC_OUT_READ"]["next"], "44") and q["MAX_ACC_OUT_READ"]["current"] == "0"
    rc, out = run(firmware.mlxfwreset, "-d", dev, "reset", "-y")
    assert rc == 0 and out.rstrip().endswith("-I- FW was loaded successfully."), out
    q = query()["configs"]
    assert q["ATS_ENABLED"]["current"] == "True(1)" and q["MAX_ACC_OUT_READ"]["current"] == "44"


def test_set_without_yes_prompts_and_no_changes_nothing(root):
    dev = hca0()["pci"]
    rc, out = run(firmware.mlxconfig, "-d", dev, "s", "SRIOV_EN=True", stdin="n\n")
    assert rc == 2 and "Apply new Configuration? (y/n) [n] : " in out
    assert out.rstrip().endswith("-E- Aborted by user.")
    assert query()["configs"]["SRIOV_EN"]["next"] == "False(0)"
    rc, out = run(firmware.mlxconfig, "-d", dev, "s", "SRIOV_EN=True", stdin="y\n")
    assert rc == 0 and query()["configs"]["SRIOV_EN"]["next"] == "True(1)"


@pytest.mark.parametrize(
    ("argv", "message", "status"),
    [
        (["-y", "set", "NO_SUCH_KEY=1"], "-E- Unknown Parameter: NO_SUCH_KEY", 3),
        (["-y", "set", "LINK_TYPE_P1=FOO"], "-E- Unknown value FOO", 3),
        (["-y", "set", "CNP_DSCP_P1=64"], "-E- Unknown value 64", 3),
        (["-y", "set", "ATS_ENABLED=2"], "-E- Unknown value 2", 3),
        (["q", "NO_SUCH_KEY"], "-E- Unknown Parameter: NO_SUCH_KEY", 3),
    ],
)
def test_mlxconfig_refusals_change_nothing(root, argv, message, status):
    before = query()
    rc, out = run(firmware.mlxconfig, "-d", hca0()["pci"], *argv)
    assert rc == status and out.rstrip().endswith(message), out
    assert cfgp.parse_set_error(out) == message.removeprefix("-E- ")
    assert query() == before


def test_unknown_device_is_refused(root):
    rc, out = run(firmware.mlxconfig, "-d", "0000:ee:00.0", "q")
    assert rc == 3 and out.strip() == "-E- Failed to open the device"
    rc, out = run(firmware.mlxfwreset, "-d", "mlx5_99", "q")
    assert rc == 1 and out.startswith("-E- ")
    rc, out = run(firmware.mlxfwmanager, "--query", "-d", "ee:00.0")
    assert rc == 1 and out.startswith("-E- No devices found")


# --- mlxfwmanager and the running firmware ------------------------------------------------------------


def test_query_lists_every_hca_with_its_psid_and_version(root):
    rc, out = run(firmware.mlxfwmanager, "--query")
    assert rc == 0
    recs = mgrp.parse_query(out)
    assert [r["pci"] for r in recs] == [h["pci"] for h in devstate.hcas()]
    assert recs[0]["psid"] == hca0()["psid"] and mgrp.fw_burned(recs[0]) == hca0()["fw_ver"]
    assert recs[0]["versions"]["FW"]["running"] is None  # no FW (Running) row while they agree


def test_burn_shows_burned_and_running_apart_until_reset(root, tmp_path):
    h = hca0()
    img = image(tmp_path, h["psid"], "28.43.1014")
    rc, out = run(firmware.mlxfwmanager, "-d", h["pci"], "-i", img, "-u", "-y")
    assert rc == 0, out
    assert "Restart needed for updates to take effect." in out
    rec = mgrp.parse_query(out)[0]
    assert rec["status"] == "Update required" and rec["versions"]["FW"]["available"] == "28.43.1014"
    rc, out = run(firmware.mlxfwmanager, "--query", "-d", h["pci"])
    rec = mgrp.parse_query(out)[0]
    assert mgrp.fw_burned(rec) == "28.43.1014" and mgrp.fw_running(rec) == h["fw_ver"]
    assert devstate.fw_running(h) == h["fw_ver"]
    # burning again is a no-op (Up to date), never a second burn
    rc, out = run(firmware.mlxfwmanager, "-d", h["pci"], "-i", img, "-u", "-y")
    assert rc == 0 and "Updating FW" not in out and mgrp.parse_query(out)[0]["status"] == "Up to date"
    rc, out = run(firmware.mlxfwreset, "-d", h["pci"], "-y", "reset", "-l", "3")
    assert rc == 0, out
    rec = mgrp.parse_query(run(firmware.mlxfwmanager, "--query", "-d", h["pci"])[1])[0]
    assert mgrp.fw_running(rec) == "28.43.1014" and rec["versions"]["FW"]["running"] is None
    assert devstate.fw_running(h) == "28.43.1014"


def test_psid_mismatch_is_refused_and_nothing_burned(root, tmp_path):
    h = hca0()
    img = image(tmp_path, "MT_0000000999", "28.43.1014")
    rc, out = run(firmware.mlxfwmanager, "-d", h["pci"], "-i", img, "-u", "-y")
    assert rc == 1
    assert mgrp.parse_query(out)[0]["status"] == "No matching image found"
    assert "Updating FW" not in out
    assert firmware.load_state(h)["burned"] == h["fw_ver"]


def test_older_image_needs_force(root, tmp_path):
    h = hca0()
    img = image(tmp_path, h["psid"], "28.30.1000")
    rc, out = run(firmware.mlxfwmanager, "-d", h["pci"], "-i", img, "-u", "-y")
    assert rc == 0 and "Updating FW" not in out
    rc, out = run(firmware.mlxfwmanager, "-d", h["pci"], "-i", img, "-u", "-y", "--force")
    assert rc == 0 and firmware.load_state(h)["burned"] == "28.30.1000"


def test_not_an_image_is_refused(root, tmp_path):
    bad = tmp_path / "x.bin"
    bad.write_text("hello\n")
    rc, out = run(firmware.mlxfwmanager, "-d", hca0()["pci"], "-i", str(bad), "-u", "-y")
    assert rc == 1 and "not a valid firmware image" in out


def test_ibstat_and_sysfs_report_the_running_firmware(root, tmp_path):
    h = hca0()
    state = firmware.load_state(h)
    state["burned"] = state["running"] = "28.43.1014"
    firmware.save_state(h, state)
    hwctl.main(["sync"])
    assert devstate.read_sysfs(f"class/infiniband/{h['name']}/fw_ver") == "28.43.1014"
    rc, out = run(rdma.ibstat, h["name"])
    assert rc == 0
    assert ibstat_parser.parse(out).cas[0].firmware_version == "28.43.1014"


def test_hardware_fw_change_is_followed(root):
    h = hca0()
    firmware.save_state(h, firmware.load_state(h))
    hw = devstate.load_hardware()
    hw["hcas"][0]["fw_ver"] = "28.38.1002"  # the wrong-firmware fault swaps the silicon
    devstate.path(devstate.HW_JSON).write_text(json.dumps(hw))
    assert devstate.fw_running(devstate.hcas()[0]) == "28.38.1002"
    assert firmware.load_state(devstate.hcas()[0])["burned"] == "28.38.1002"


# --- mlxfwreset ----------------------------------------------------------------------------------


def test_reset_query_parses_and_level_1_is_refused(root):
    rc, out = run(firmware.mlxfwreset, "-d", hca0()["pci"], "q")
    assert rc == 0
    r = rstp.parse_query(out)
    assert rstp.supported_levels(r) == [3, 4]
    assert next(lv for lv in r["levels"] if lv["level"] == 3)["default"] is True
    rc, out = run(firmware.mlxfwreset, "-d", hca0()["pci"], "-y", "reset", "-l", "0")
    assert rc == 1 and "not supported" in out


def test_reset_without_yes_asks(root):
    rc, out = run(firmware.mlxfwreset, "-d", hca0()["pci"], "reset", stdin="n\n")
    assert rc == 1 and "Continue with reset?[y/N] " in out and out.rstrip().endswith("Aborted by user.")


def test_power_cycle_dir_applies_next_and_burned(root, tmp_path):
    h = hca0()
    state = firmware.load_state(h)
    state["burned"] = "28.43.1014"
    state["next"]["ATS_ENABLED"] = 1
    firmware.save_state(h, state)
    assert firmware.power_cycle_dir(root / devstate.FIRMWARE_DIR) == 1
    state = firmware.load_state(h)
    assert state["running"] == "28.43.1014" and state["current"]["ATS_ENABLED"] == 1


def test_reset_through_one_function_resets_every_function_of_the_card(root):
    """A dual-port card is one adapter: mlxfwreset on its .0 function reloads the firmware for .1
    too (the nic_firmware role resets each card once, through its first function)."""
    fns = [h for h in devstate.hcas() if h["pci"].endswith(".1")]
    assert fns, "the default topology has a dual-port card"
    second = fns[0]
    first = second["pci"][:-1] + "0"
    for dev in (first, second["pci"]):
        rc, out = run(firmware.mlxconfig, "-d", dev, "-y", "set", "ADVANCED_PCI_SETTINGS=1")
        assert rc == 0, out
    rc, out = run(firmware.mlxfwreset, "-d", first, "reset", "-y")
    assert rc == 0, out
    for dev in (first, second["pci"]):
        assert query(dev=dev)["configs"]["ADVANCED_PCI_SETTINGS"]["current"] == "True(1)"
    # a single-function card's reset touches no other card
    other = next(h for h in devstate.hcas() if h["pci"].rsplit(".", 1)[0] != first.rsplit(".", 1)[0])
    rc, out = run(firmware.mlxconfig, "-d", other["pci"], "-y", "set", "ADVANCED_PCI_SETTINGS=1")
    rc, out = run(firmware.mlxfwreset, "-d", first, "reset", "-y")
    assert query(dev=other["pci"])["configs"]["ADVANCED_PCI_SETTINGS"]["current"] == "False(0)"
