"""NIC firmware faults (lab/faults.py): fw-setting-drift, reset-required, fw-version-mismatch.

Each writes the host's firmware state (hw/firmware/<bdf>.json, which the host sees at
/var/lib/emulated-hw/firmware/); the emulated mlxconfig / mlxfwmanager read it back through the
real-capture parsers; clear removes the file (or restores its bytes)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from fabricops.parsers import mlxconfig as cfgp
from fabricops.parsers import mlxfwmanager as mgrp
from fabricops_lab import faults, hardware, paths, topology
from fabricops_lab.emul import firmware


@pytest.fixture
def lab(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("FABRICOPS_LAB_DIR", str(state))
    monkeypatch.setattr(paths, "STATE_DIR", state)
    topo = topology.load()
    lab = {"name": topo["name"], "topology": topo,
           "hosts": {h["name"]: {"mgmt_ip": h["mgmt_ip"]} for h in topo["hosts"]}, "switches": {}}
    paths.save_lab(lab)
    for h in topo["hosts"]:
        p = paths.host_dir(h["name"]) / "hw" / "hardware.json"
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps(hardware.hardware_json(topo, h, kernel="6.1.0-18-amd64")))
    resyncs: list[str] = []
    monkeypatch.setattr(faults, "_host_exec", lambda *a, **k: None)
    monkeypatch.setattr(faults, "_resync", resyncs.append)
    host = topo["hosts"][0]["name"]
    # the host's tools see its hw dir as EMUL_ROOT/var/lib/emulated-hw
    root = tmp_path / "root"
    (root / "var/lib").mkdir(parents=True)
    (root / "var/lib/emulated-hw").symlink_to(paths.host_dir(host) / "hw")
    monkeypatch.setenv("EMUL_ROOT", str(root))
    return lab, host, resyncs


def tool(func, *argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = func(list(argv))
    return rc, out.getvalue()


def hca0(lab, host):
    hw = json.loads((paths.host_dir(host) / "hw" / "hardware.json").read_text())
    return hw["hcas"][0]


def test_setting_drift_changes_next_and_current(lab):
    lab_, host, _ = lab
    faults.inject(host, "fw-setting-drift", ["mlx5_0", "ATS_ENABLED", "1"], lab=lab_)
    rc, out = tool(firmware.mlxconfig, "-d", hca0(lab_, host)["pci"], "-e", "q", "ATS_ENABLED")
    row = cfgp.parse_query(out)["configs"]["ATS_ENABLED"]
    assert rc == 0
    assert row == {"default": "False(0)", "current": "True(1)", "next": "True(1)", "modified": True}
    faults.clear(host, lab=lab_)
    rc, out = tool(firmware.mlxconfig, "-d", hca0(lab_, host)["pci"], "-e", "q", "ATS_ENABLED")
    assert cfgp.parse_query(out)["configs"]["ATS_ENABLED"]["current"] == "False(0)"


def test_reset_required_changes_next_only(lab):
    lab_, host, _ = lab
    faults.inject(host, "reset-required", ["mlx5_0", "LINK_TYPE_P1", "ETH"], lab=lab_)
    _rc, out = tool(firmware.mlxconfig, "-d", "mlx5_0", "-e", "q", "LINK_TYPE_P1")
    row = cfgp.parse_query(out)["configs"]["LINK_TYPE_P1"]
    assert row["next"] == "ETH(2)" and row["current"] != "ETH(2)" and row["modified"] is True


def test_version_mismatch_is_burned_and_running_and_resyncs(lab):
    lab_, host, resyncs = lab
    rec = faults.inject(host, "fw-version-mismatch", ["mlx5_0", "28.36.1010"], lab=lab_)
    assert rec["resync"] is True and resyncs == [host]
    rc, out = tool(firmware.mlxfwmanager, "--query", "-d", "mlx5_0")
    assert rc == 0
    r = mgrp.parse_query(out)[0]
    assert mgrp.fw_burned(r) == mgrp.fw_running(r) == "28.36.1010"
    faults.clear(host, lab=lab_)
    _rc, out = tool(firmware.mlxfwmanager, "--query", "-d", "mlx5_0")
    assert mgrp.fw_running(mgrp.parse_query(out)[0]) == hca0(lab_, host)["fw_ver"]


def test_clear_restores_a_state_the_tools_wrote(lab):
    lab_, host, _ = lab
    tool(firmware.mlxconfig, "-d", "mlx5_0", "-y", "set", "MAX_ACC_OUT_READ=44")
    path = paths.host_dir(host) / "hw" / "firmware" / f"{hca0(lab_, host)['pci']}.json"
    before = path.read_bytes()
    faults.inject(host, "reset-required", ["mlx5_0", "ATS_ENABLED", "True"], lab=lab_)
    assert path.read_bytes() != before
    faults.clear(host, lab=lab_)
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("kind", "args", "message"),
    [
        ("fw-setting-drift", ["mlx5_9", "ATS_ENABLED", "1"], "has no device 'mlx5_9'"),
        ("fw-setting-drift", ["mlx5_0", "NO_SUCH", "1"], "has no firmware setting 'NO_SUCH'"),
        ("reset-required", ["mlx5_0", "CNP_DSCP_P1", "99"], "'99' is not a value CNP_DSCP_P1 takes"),
        ("reset-required", ["mlx5_0", "ATS_ENABLED"], "takes DEV KEY VALUE"),
        ("fw-version-mismatch", ["mlx5_0", "new"], "is not a firmware version"),
        ("fw-version-mismatch", ["mlx5_7", "28.1.1"], "has no device 'mlx5_7'"),
    ],
)
def test_bad_requests_are_one_sentence_and_change_nothing(lab, kind, args, message):
    lab_, host, _ = lab
    with pytest.raises(faults.FaultError, match=message) as exc:
        faults.inject(host, kind, args, lab=lab_)
    assert "\n" not in str(exc.value) and exc.value.exit_status == 2
    assert faults.active() == []
    assert not (paths.host_dir(host) / "hw" / "firmware").exists()
