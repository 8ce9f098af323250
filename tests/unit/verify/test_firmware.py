"""NIC firmware, DKMS and Secure Boot checks (fabricops.verify.firmware).

The judging is tested on the SPEC-20 shapes of the parsers' and the logic's results (A1 mlxconfig,
A2 mlxfwmanager, A4 dkms, A5 mokutil, B1 firmware.declared; B2 is the real fabricops.doca):
each probe section's stdout below is that shape as JSON and ``_FAKES`` read it back, so the tests
do not depend on the other helpers' parsers (their own tests hold their real captures). The probe
format itself (``@@fabricops KEY`` ... ``@@rc N``) is this module's own.
"""

from __future__ import annotations

import json
import types

import pytest

from fabricops.errors import FabricopsError, ParseError
from fabricops.verify import firmware, hostchecks
from fabricops.verify.expect import host_expect
from fabricops.verify.result import ERROR, FAIL, PASS, SKIP

BDF0, BDF1 = "0000:41:00.0", "0000:c1:00.0"


def _load(text):
    try:
        return json.loads(text)
    except ValueError:
        raise ParseError("fake", "the SPEC-20 shape as JSON") from None


def _int(v):
    v = str(v)
    if "(" in v and v.endswith(")"):
        v = v[v.index("(") + 1 : -1]
    try:
        return int(v, 0)
    except ValueError:
        return None


def _same(a, b):
    if a is None or b is None:
        return False
    ia, ib = _int(a), _int(b)
    if ia is not None and ib is not None:
        return ia == ib
    return str(a).split("(")[0].upper() == str(b).split("(")[0].upper()


PRESETS = {"gpudirect": {"ATS_ENABLED": "true", "ADVANCED_PCI_SETTINGS": "true"}}


def _declared(presets, config, device_config, device, ports=1):
    out = {}
    for p in presets:
        if p not in PRESETS:
            raise FabricopsError(f"unknown preset {p!r}")
        out.update(PRESETS[p])
    out.update(config)
    out.update(device_config.get(device) or {})
    return out


def _sb(text):
    if "SecureBoot enabled" in text:
        return True
    if "SecureBoot disabled" in text:
        return False
    if "EFI variables are not supported" in text:
        return None
    raise ParseError("mokutil --sb-state", "SecureBoot enabled|disabled")


def _tk(text):
    if "is already enrolled" in text:
        return True
    if "is not enrolled" in text:
        return False
    raise ParseError("mokutil --test-key", "is already enrolled|is not enrolled")


_FAKES = {
    "fabricops.parsers.mlxconfig": types.SimpleNamespace(parse_query=_load, same=_same, value_int=_int),
    "fabricops.parsers.mlxfwmanager": types.SimpleNamespace(
        parse_query=_load,
        fw_burned=lambda r: r["versions"]["FW"]["current"],
        fw_running=lambda r: r["versions"]["FW"].get("running") or r["versions"]["FW"]["current"],
    ),
    "fabricops.parsers.dkms": types.SimpleNamespace(parse_status=_load),
    "fabricops.parsers.mokutil": types.SimpleNamespace(parse_sb_state=_sb, parse_test_key=_tk),
    "fabricops.firmware": types.SimpleNamespace(declared=_declared),
}


@pytest.fixture(autouse=True)
def fakes(monkeypatch):
    """The parsers read the JSON shapes; the logic is the real one (fabricops.doca) except
    firmware.declared, faked so the tests name their own declared settings."""
    import importlib

    monkeypatch.setattr(firmware, "_mod", lambda name: _FAKES.get(name) or importlib.import_module(name))


def _query(configs, columns=("default", "current", "next")):
    return json.dumps(
        {
            "device": BDF0,
            "device_type": "ConnectX7",
            "name": None,
            "description": None,
            "columns": list(columns),
            "configs": configs,
        }
    )


def _cfg(cur, nxt, default="False(0)"):
    return {"default": default, "current": cur, "next": nxt, "modified": cur != default}


def _fwrec(pci, running=None, burned="28.39.1002", psid="MT_0000000838"):
    return {
        "device_type": "ConnectX7",
        "part_number": "MCX75310AAS-NEA_Ax",
        "description": "x",
        "psid": psid,
        "pci": pci,
        "device_name": pci,
        "base_guid": None,
        "base_mac": None,
        "versions": {"FW": {"current": burned, "available": None, "running": running}},
        "status": "Up to date",
    }


GOOD_CFG = {
    "ATS_ENABLED": _cfg("True(1)", "True(1)"),
    "ADVANCED_PCI_SETTINGS": _cfg("True(1)", "True(1)"),
    "LINK_TYPE_P1": _cfg("IB(1)", "IB(1)", "IB(1)"),
}
DKMS_OK = [
    {
        "module": "mlnx-ofed-kernel",
        "version": "24.10",
        "kernel": k,
        "arch": "x86_64",
        "state": "installed",
        "warnings": [],
    }
    for k in ("6.1.0-18-amd64", "6.1.0-21-amd64")
]


def probe(
    hcas=(("mlx5_0", BDF0),),
    mlxconfig=None,
    fwm=None,
    dkms=None,
    uname="6.1.0-18-amd64",
    boot="config-6.1.0-18-amd64\nvmlinuz-6.1.0-18-amd64\nvmlinuz-6.1.0-21-amd64\n",
    efi=True,
    keyfile=True,
    sb="SecureBoot disabled",
    test_key="/var/lib/dkms/mok.pub is already enrolled",
    signer="DKMS module signing key",
    rc=0,
):
    """The probe's stdout; a section value (stdout, rc) or a str (rc 0); None: the tool is absent."""
    out = []

    def sec(key, val):
        out.append(f"@@fabricops {key}")
        if val is None:
            out.extend([f"{key.split(':')[0]}: command not found", "@@rc 127"])
            return
        text, code = val if isinstance(val, tuple) else (val, 0)
        out.extend([text.rstrip("\n"), f"@@rc {code}"] if code is not None else [text])

    for dev, bdf in hcas:
        out.append(f"@@hca {dev} {bdf}")
        sec(f"mlxconfig:{dev}", (mlxconfig or {}).get(dev, _query(GOOD_CFG)))
    sec("mlxfwmanager", json.dumps([_fwrec(b) for _d, b in hcas]) if fwm is None else fwm)
    sec("uname", uname)
    sec("boot", boot)
    sec("dkms", json.dumps(DKMS_OK) if dkms is None else dkms)
    out.append(f"@@efi {'yes' if efi else 'no'}")
    out.append(f"@@keyfile {'yes' if keyfile else 'no'}")
    sec("sb_state", sb)
    sec("test_key", test_key)
    sec("signer", signer)
    return {"rc": rc, "stdout": "\n".join(out) + "\n", "stderr": ""}


FW = firmware.FirmwareExpect(
    presets=["gpudirect"],
    config={"LINK_TYPE_P1": "IB"},
    versions={"MT_0000000838": "28.39.1002"},
    install_method="doca",
)


def _j(check, res, fw=FW, planned=()):
    return [i for i in firmware.judge("gpu01", fw, res, {check}, planned) if i.check == check]


# --- applicability --------------------------------------------------------------------------------


def test_nothing_declared_skips_every_check_and_runs_no_probe():
    fw = firmware.expect_from_hostvars({})
    assert firmware.probe_command(fw) is None
    items = firmware.judge("gpu01", fw, None, set(firmware.FW_CHECKS))
    assert {i.check for i in items} == set(firmware.FW_CHECKS)
    assert all(i.status == SKIP for i in items)
    assert "not applicable" in items[0].message


def test_not_dkms_skips_dkms_and_secure_boot():
    fw = firmware.expect_from_hostvars({"mlnx_ofed_install_method": "tarball"})
    for check in ("dkms_modules", "secure_boot_signing"):
        (i,) = _j(check, probe(dkms=None), fw)
        assert i.status == SKIP and "not a DKMS stack" in i.message


def test_probe_command_has_only_what_is_declared():
    only_fw = firmware.probe_command(firmware.FirmwareExpect(config={"ATS_ENABLED": 1}))
    assert "mlxconfig -d" in only_fw and "dkms status" not in only_fw
    only_dkms = firmware.probe_command(firmware.FirmwareExpect(install_method="doca"))
    assert "mlxconfig" not in only_dkms and "mokutil --sb-state" in only_dkms
    assert "mlxconfig" in firmware.probe_command(None, full=True)


def test_hostchecks_wiring_runs_the_probe_and_judges(monkeypatch):
    hv = {
        "fabricops_hardware_profile": "hgx-h100-ndr",
        "nic_firmware_config": {"ATS_ENABLED": "true"},
        "fabricops_verify_ports": [{"hca": "mlx5_0", "port": 1}],
    }
    exp = host_expect("gpu01", hv)
    cmds = hostchecks.commands(exp, "hosts")
    assert firmware.PROBE_KEY in cmds
    res = hostchecks.evaluate(exp, {firmware.PROBE_KEY: probe()}, "hosts")
    got = {(r.check, r.status) for r in res if r.check in firmware.FW_CHECKS}
    assert ("nic_fw_config", PASS) in got and ("nic_fw_reset_pending", PASS) in got
    assert ("dkms_modules", SKIP) in got and ("nic_fw_version", SKIP) in got


def test_judges_return_the_one_result_type_and_verify_keeps_the_remedy(monkeypatch):
    """firmware.Item is gone: a judge returns fabricops.result.Result (category hosts, the host named,
    the remedy as action, a FAIL's diagnose kind in details); verify's result keeps details.remedy
    (docs/verify.md) and gains action."""
    from fabricops import result

    monkeypatch.setattr(result, "clock", lambda: "2025-01-31T12:00:00Z")
    cfg = dict(GOOD_CFG, ATS_ENABLED=_cfg("False(0)", "True(1)"))
    res = probe(mlxconfig={"mlx5_0": _query(cfg)})
    (r,) = _j("nic_fw_reset_pending", res)
    assert isinstance(r, result.Result) and (r.category, r.host, r.device) == ("hosts", "gpu01", "mlx5_0")
    assert r.action == firmware.REMEDY["reset"] and r.details["kind"] == "nic_fw_reset_pending"
    assert r.component == result.Component("hca_port", "mlx5_0", "gpu01") and r.severity == "critical"
    (ok,) = _j("nic_fw_config", probe())
    assert ok.status == PASS and ok.action is None and "kind" not in ok.details and ok.severity == "info"

    hv = {
        "fabricops_hardware_profile": "hgx-h100-ndr",
        "nic_firmware_config": {"ATS_ENABLED": "true"},
        "fabricops_verify_ports": [{"hca": "mlx5_0", "port": 1}],
    }
    got = hostchecks.evaluate(host_expect("gpu01", hv), {firmware.PROBE_KEY: res}, "hosts")
    (v,) = [x for x in got if x.check == "nic_fw_reset_pending"]
    assert v.status == FAIL and v.action == firmware.REMEDY["reset"]
    assert v.details["remedy"] == firmware.REMEDY["reset"] and v.details["bdf"] == BDF0
    assert v.observed_at == "2025-01-31T12:00:00Z" and v.to_data()["component"]["kind"] == "hca_port"


# --- nic_fw_config / nic_fw_reset_pending ------------------------------------------------------------


def test_config_compliant_passes():
    (i,) = _j("nic_fw_config", probe())
    assert i.status == PASS and "3 declared firmware settings match" in i.message


def test_config_drift_names_device_key_values_and_remedy():
    cfg = dict(GOOD_CFG, ATS_ENABLED=_cfg("False(0)", "False(0)"))
    (i,) = _j("nic_fw_config", probe(mlxconfig={"mlx5_0": _query(cfg)}))
    assert i.status == FAIL and i.device == "mlx5_0"
    assert "ATS_ENABLED: current False(0), next boot False(0), declared true" in i.message
    assert "playbooks/firmware.yml" in i.message and "nic_firmware_allow_reset: true" in i.message
    assert i.details["kind"] == "nic_fw_noncompliant"


def test_declared_value_set_but_not_active_is_reset_pending_in_both_checks():
    cfg = dict(GOOD_CFG, ATS_ENABLED=_cfg("False(0)", "True(1)"))
    res = probe(mlxconfig={"mlx5_0": _query(cfg)})
    (c,) = _j("nic_fw_config", res)
    assert c.status == FAIL and "next boot already True(1) (reset pending)" in c.message
    assert c.action == firmware.REMEDY["reset"]
    (r,) = _j("nic_fw_reset_pending", res)
    assert r.status == FAIL and "ATS_ENABLED current False(0) next boot True(1)" in r.message
    assert "nic_firmware_allow_reset: true" in r.message and r.details["kind"] == "nic_fw_reset_pending"


def test_next_boot_differs_while_current_matches_fails_config():
    cfg = dict(GOOD_CFG, LINK_TYPE_P1=_cfg("IB(1)", "ETH(2)", "IB(1)"))
    (c,) = _j("nic_fw_config", probe(mlxconfig={"mlx5_0": _query(cfg)}))
    assert c.status == FAIL and "a reset or reboot would change it" in c.message


def test_undeclared_key_pending_is_still_a_reset_pending():
    cfg = dict(GOOD_CFG, SRIOV_EN=_cfg("False(0)", "True(1)"))
    res = probe(mlxconfig={"mlx5_0": _query(cfg)})
    assert _j("nic_fw_config", res)[0].status == PASS
    assert _j("nic_fw_reset_pending", res)[0].status == FAIL


def test_declared_key_unknown_to_the_device_fails():
    fw = firmware.FirmwareExpect(config={"NO_SUCH_KEY": "1"})
    (i,) = _j("nic_fw_config", probe(), fw)
    assert i.status == FAIL and "NO_SUCH_KEY: declared 1, not a setting" in i.message


def test_bad_declaration_is_error():
    fw = firmware.FirmwareExpect(presets=["nope"])
    (i,) = _j("nic_fw_config", probe(), fw)
    assert i.status == ERROR and "unknown preset" in i.message


@pytest.mark.parametrize(
    "section, words",
    [
        (None, "mlxconfig is not installed"),  # MFT missing on a host that declares firmware state
        (("-E- Failed to open device: 0000:41:00.0", 1), "-E- Failed to open device"),
        ("garbage that is no mlxconfig output", "mlxconfig output unreadable"),
        (("partial output", None), "cut off"),
        (_query(GOOD_CFG, columns=("next",)), "no Current column"),
    ],
)
def test_config_unreadable_fails_closed(section, words):
    res = probe(mlxconfig={"mlx5_0": section})
    for check in ("nic_fw_config", "nic_fw_reset_pending"):
        (i,) = _j(check, res)
        assert i.status == ERROR and words in i.message, i.message


def test_planned_hca_absent_from_sysfs_is_error():
    items = _j("nic_fw_config", probe(), planned=["mlx5_0", "mlx5_1"])
    assert {(i.device, i.status) for i in items} == {("mlx5_0", PASS), ("mlx5_1", ERROR)}


def test_no_rdma_device_at_all_is_error():
    (i,) = _j("nic_fw_config", probe(hcas=()))
    assert i.status == ERROR and "no RDMA device" in i.message


def test_probe_failed_is_error():
    (i,) = _j("nic_fw_config", {"rc": 255, "stdout": "", "stderr": "gpu01 unreachable over SSH"})
    assert i.status == ERROR
    (i,) = _j("nic_fw_version", None)
    assert i.status == ERROR


# --- nic_fw_version ----------------------------------------------------------------------------------


def test_version_pinned_and_running_passes():
    (i,) = _j("nic_fw_version", probe())
    assert i.status == PASS and i.measured == "28.39.1002"


def test_burned_pin_not_running_is_reset_pending():
    fwm = json.dumps([_fwrec(BDF0, running="28.39.1002", burned="28.43.1014")])
    fw = firmware.FirmwareExpect(versions={"MT_0000000838": "28.43.1014"})
    (i,) = _j("nic_fw_version", probe(fwm=fwm), fw)
    assert i.status == FAIL and i.details["kind"] == "nic_fw_reset_pending"
    assert "pinned 28.43.1014 is burned but firmware 28.39.1002 is still running" in i.message
    assert "nic_firmware_allow_reset: true" in i.message


def test_other_version_is_noncompliant_with_update_remedy():
    fw = firmware.FirmwareExpect(versions={"MT_0000000838": "28.43.1014"})
    (i,) = _j("nic_fw_version", probe(), fw)
    assert i.status == FAIL and i.details["kind"] == "nic_fw_noncompliant"
    assert "runs firmware 28.39.1002 (burned 28.39.1002), pinned 28.43.1014" in i.message
    assert "nic_firmware_allow_update: true" in i.message


def test_unpinned_psid_is_skipped():
    fw = firmware.FirmwareExpect(versions={"MT_OTHER": "1.2.3"})
    (i,) = _j("nic_fw_version", probe(), fw)
    assert i.status == SKIP and "not pinned" in i.message


@pytest.mark.parametrize(
    "fwm, words",
    [
        (None, "mlxfwmanager is not installed"),
        ("not json", "unreadable"),
        (json.dumps([_fwrec(BDF1)]), "not in mlxfwmanager --query"),
    ],
)
def test_version_unreadable_fails_closed(fwm, words):
    res = probe(fwm=fwm)
    if fwm is None:  # the tool absent
        res["stdout"] = res["stdout"].replace(
            "@@fabricops mlxfwmanager\n" + json.dumps([_fwrec(BDF0)]) + "\n@@rc 0",
            "@@fabricops mlxfwmanager\nmlxfwmanager: command not found\n@@rc 127",
        )
    items = _j("nic_fw_version", res)
    assert items and all(i.status == ERROR for i in items) and words in items[-1].message


# --- dkms_modules -------------------------------------------------------------------------------------


def test_dkms_running_and_next_installed_pass():
    items = _j("dkms_modules", probe())
    assert [(i.device, i.status, i.details["boot"]) for i in items] == [
        ("6.1.0-18-amd64", PASS, "running"),
        ("6.1.0-21-amd64", PASS, "next"),
    ]


def test_dkms_missing_for_next_boot_kernel_is_named_as_next():
    status = json.dumps(DKMS_OK[:1])
    items = _j("dkms_modules", probe(dkms=status))
    bad = [i for i in items if i.status == FAIL]
    assert len(bad) == 1 and bad[0].device == "6.1.0-21-amd64" and bad[0].details["boot"] == "next"
    assert "next-boot kernel" in bad[0].message and "playbooks/ofed.yml" in bad[0].message
    assert bad[0].details["kind"] == "dkms_modules_missing"


def test_dkms_missing_for_running_kernel():
    status = json.dumps([dict(DKMS_OK[0], state="built"), DKMS_OK[1]])
    bad = [i for i in _j("dkms_modules", probe(dkms=status)) if i.status == FAIL]
    assert len(bad) == 1 and bad[0].details["boot"] == "running"
    assert "mlnx-ofed-kernel (built)" in bad[0].message and "running kernel" in bad[0].message


def test_same_running_and_next_kernel_is_one_result():
    items = _j("dkms_modules", probe(boot="vmlinuz-6.1.0-18-amd64\n"))
    assert [(i.device, i.details["boot"]) for i in items] == [("6.1.0-18-amd64", "running+next")]


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"dkms": None}, "dkms is not installed"),
        ({"dkms": "dkms: garbage"}, "dkms status unreadable"),
        ({"uname": ("", 1)}, "running kernel unknown"),
    ],
)
def test_dkms_unreadable_fails_closed(kw, words):
    res = probe(**kw)
    if kw.get("dkms", "") is None:
        res["stdout"] = res["stdout"].replace(
            "@@fabricops dkms\n" + json.dumps(DKMS_OK) + "\n@@rc 0",
            "@@fabricops dkms\ndkms: command not found\n@@rc 127",
        )
    items = _j("dkms_modules", res)
    assert any(i.status == ERROR and words in i.message for i in items), [i.message for i in items]
    assert not any(i.status == PASS for i in items)


def test_next_boot_unknown_is_error_for_next():
    items = _j("dkms_modules", probe(boot=("ls: cannot access '/boot'", 2)))
    assert ("next", ERROR) in {(i.device, i.status) for i in items}


# --- secure_boot_signing -----------------------------------------------------------------------------


def test_secure_boot_off_passes_and_no_efi_passes():
    assert _j("secure_boot_signing", probe())[0].status == PASS
    (i,) = _j("secure_boot_signing", probe(efi=False, sb=None))
    assert i.status == PASS and "no /sys/firmware/efi" in i.message


def test_secure_boot_on_key_enrolled_signed_passes():
    (i,) = _j("secure_boot_signing", probe(sb="SecureBoot enabled"))
    assert i.status == PASS and "signed by DKMS module signing key" in i.message


def test_secure_boot_on_key_not_enrolled_fails_with_enroll_remedy():
    (i,) = _j(
        "secure_boot_signing",
        probe(sb="SecureBoot enabled", test_key="/var/lib/dkms/mok.pub is not enrolled"),
    )
    assert i.status == FAIL and i.details["kind"] == "secure_boot_key_not_enrolled"
    assert "mlnx_ofed_secure_boot_enroll: true" in i.message


def test_secure_boot_on_without_key_or_unsigned_fails():
    (i,) = _j("secure_boot_signing", probe(sb="SecureBoot enabled", keyfile=False))
    assert i.status == FAIL and "no DKMS signing key" in i.message
    (i,) = _j("secure_boot_signing", probe(sb="SecureBoot enabled", signer=""))
    assert i.status == FAIL and "not signed" in i.message


@pytest.mark.parametrize(
    "kw",
    [
        {"sb": None},  # mokutil absent on an EFI host
        {"sb": "something else"},
        {"sb": "SecureBoot enabled", "test_key": "Failed to read"},
        {"sb": "SecureBoot enabled", "signer": ("modinfo: ERROR: Module mlx5_core not found.", 1)},
    ],
)
def test_secure_boot_unreadable_fails_closed(kw):
    (i,) = _j("secure_boot_signing", probe(**kw))
    assert i.status == ERROR, i.message


def test_problems_are_the_failures_only():
    cfg = dict(GOOD_CFG, ATS_ENABLED=_cfg("False(0)", "True(1)"))
    got = firmware.problems(
        "gpu01", FW, probe(mlxconfig={"mlx5_0": _query(cfg)}, dkms=json.dumps(DKMS_OK[:1]))
    )
    assert {i.details["kind"] for i in got} == {
        "nic_fw_reset_pending",
        "nic_fw_noncompliant",
        "dkms_modules_missing",
    }
    assert firmware.problems("gpu01", FW, {"rc": 255, "stdout": "", "stderr": "x"}) == []


def test_efi_state_not_printed_is_error():
    res = probe()
    res["stdout"] = res["stdout"].replace("@@efi yes\n", "")
    (i,) = _j("secure_boot_signing", res)
    assert i.status == ERROR and "EFI state not read" in i.message


# --- the real parsers on their real captures (tests/fixtures/, first line names the source) -------


def _capture(path):
    from pathlib import Path

    text = (Path(__file__).parents[2] / "fixtures" / path).read_text()
    return "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith("# source:"))


def _real(name):
    import importlib

    if name.startswith("fabricops.parsers."):
        return importlib.import_module(name)
    try:
        mod = importlib.import_module(name)
    except ImportError:
        return _FAKES[name]
    return mod


def test_real_captures_reset_pending_burned_not_running_and_key_not_enrolled(monkeypatch):
    monkeypatch.setattr(firmware, "_mod", _real)
    bdf = "0000:8e:00.0"  # the mlxfwmanager capture's card
    res = probe(
        hcas=(("mlx5_0", bdf),),
        mlxconfig={"mlx5_0": _capture("mlxconfig/cx4_operator_test_extended_query.txt")},
        fwm=_capture("mlxfwmanager/cx7_mlxup_burned_not_running.txt"),
        sb=_capture("mokutil-sb-state/enabled.txt"),
        test_key=_capture("mokutil-test-key/not_enrolled_shim_signed.txt"),
        dkms=_capture("dkms-status/dkms3_i915_sriov_diff_warning.txt"),
        uname="6.11.11-1-pve",
        boot="vmlinuz-6.11.11-1-pve\nvmlinuz-6.11.11-2-pve\n",
    )
    fw = firmware.FirmwareExpect(
        config={"KEEP_LINK_UP_ON_BOOT_P2": "False"},
        versions={"MT_0000000838": "28.47.1026"},
        install_method="doca",
        dkms_modules=("i915-sriov-dkms",),
    )
    res["stdout"] = res["stdout"].replace(f"@@hca mlx5_0 {bdf}\n", f"@@hca mlx5_0 {bdf} 2\n")  # two ports
    items = {(i.check, i.device): i for i in firmware.judge("gpu01", fw, res, set(firmware.FW_CHECKS))}
    c = items[("nic_fw_config", "mlx5_0")]
    assert c.status == PASS and c.details["declared"] == {"KEEP_LINK_UP_ON_BOOT_P2": "False"}
    r = items[("nic_fw_reset_pending", "mlx5_0")]
    assert r.status == FAIL and "MEMIC_SIZE_LIMIT current _256KB(1) next boot DISABLED(0)" in r.message
    v = items[("nic_fw_version", "mlx5_0")]
    assert v.status == FAIL and "burned but firmware 28.46.3048 is still running" in v.message
    assert items[("secure_boot_signing", None)].status == FAIL
    assert items[("dkms_modules", "6.11.11-1-pve")].status == PASS
    assert items[("dkms_modules", "6.11.11-2-pve")].status == PASS


# --- diagnose: the same rules, worded as findings ----------------------------------------------------


def _diagnose(res, fw=FW):
    from fabricops import diagnose as d

    ctx = d.Context(firmware=fw)
    return [f for f in d.analyse({"gpu01": {firmware.PROBE_KEY: res}}, ctx) if f.check in d.rules._FW_SYMPTOM]


def test_diagnose_findings_of_the_verify_rules():
    cfg = dict(GOOD_CFG, ATS_ENABLED=_cfg("False(0)", "True(1)"))
    fwm = json.dumps([_fwrec(BDF0, running="28.39.1002", burned="28.43.1014")])
    res = probe(
        mlxconfig={"mlx5_0": _query(cfg)},
        fwm=fwm,
        dkms=json.dumps(DKMS_OK[1:]),
        sb="SecureBoot enabled",
        test_key="/var/lib/dkms/mok.pub is not enrolled",
    )
    fw = firmware.FirmwareExpect(
        presets=["gpudirect"], versions={"MT_0000000838": "28.43.1014"}, install_method="doca"
    )
    got = _diagnose(res, fw)
    kinds = [f.check for f in got]
    assert kinds[:2] == ["dkms_modules_missing", "secure_boot_key_not_enrolled"]  # hard faults first
    assert set(kinds) == {
        "dkms_modules_missing",
        "secure_boot_key_not_enrolled",
        "nic_fw_noncompliant",
        "nic_fw_reset_pending",
    }
    dk = got[0]
    assert dk.device == "6.1.0-18-amd64" and "running kernel" in dk.cause
    assert dk.action.startswith("Run playbooks/ofed.yml") and "fabricops verify (dkms_modules)" in dk.action
    pend = [f for f in got if f.check == "nic_fw_reset_pending"]
    assert {f.device for f in pend} == {"mlx5_0"} and len(pend) == 2  # the setting and the burned image
    assert all("nic_firmware_allow_reset: true" in f.action for f in pend)


def test_diagnose_next_boot_gap_ranks_below_running_and_healthy_gives_none():
    from fabricops import diagnose as d

    (f,) = _diagnose(probe(dkms=json.dumps(DKMS_OK[:1])))
    assert f.device == "6.1.0-21-amd64" and d.likelihood(f) == d.LIKELIHOOD["dkms_modules_missing_next"]
    assert "next-boot kernel" in f.cause
    assert _diagnose(probe()) == []
    assert _diagnose({"rc": 255, "stdout": "", "stderr": "unreachable"}) == []  # no evidence, no finding
    assert (
        _diagnose(
            probe(sb="SecureBoot enabled", test_key="/var/lib/dkms/mok.pub is not enrolled"),
            firmware.FirmwareExpect(),
        )
        == []
    )  # nothing declared: not judged


def test_diagnose_context_and_commands_carry_the_firmware_expectations():
    from fabricops import diagnose as d

    ctx = d.context_from_hostvars({"nic_firmware_presets": ["gpudirect"], "mlnx_ofed_install_method": "doca"})
    assert ctx.firmware.config_declared and ctx.firmware.dkms
    assert d.BASE_COMMANDS[firmware.PROBE_KEY] == firmware.probe_command(None, full=True)


def test_key_queued_in_this_boot_is_not_enrolled_yet():
    res = probe(sb="SecureBoot enabled")
    res["stdout"] = res["stdout"].replace("@@keyfile yes\n", "@@keyfile yes\n@@mokqueued yes\n")
    (i,) = _j("secure_boot_signing", res)
    assert i.status == FAIL and "queued for MOK enrollment in this boot" in i.message
    assert "MokManager" in i.message and i.details["kind"] == "secure_boot_key_not_enrolled"


def test_probe_runs_in_sh_and_marks_the_role_state_dir(tmp_path):
    import subprocess

    fw = firmware.expect_from_hostvars(
        {"mlnx_ofed_install_method": "doca", "mlnx_ofed_state_dir": str(tmp_path)}
    )
    cmd = firmware.probe_command(fw)
    assert f"FABRICOPS_MOK_MARKER={tmp_path}/mok-enroll-pending" in cmd
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)
    p = firmware.split_probe({"rc": out.returncode, "stdout": out.stdout})
    assert {"uname", "boot", "dkms", "sb_state", "test_key", "signer"} <= set(p.sections)
    assert p.sections["uname"]["rc"] == 0 and p.flags.get("mokqueued") is False


def test_probe_finds_each_bdf_from_the_device_link_or_its_uevent(tmp_path):
    """The kernel links /sys/class/infiniband/DEV/device to its PCI function; where it is a
    directory the probe takes uevent's PCI_SLOT_NAME (what the nic_firmware role does too)."""
    import subprocess

    ib = tmp_path / "ib"
    pci = tmp_path / "devices" / "0000:3c:00.0"
    pci.mkdir(parents=True)
    (ib / "mlx5_0" / "device").mkdir(parents=True)
    (ib / "mlx5_0" / "device" / "uevent").write_text("DRIVER=mlx5_core\nPCI_SLOT_NAME=0000:1a:00.0\n")
    (ib / "mlx5_1").mkdir()
    (ib / "mlx5_1" / "device").symlink_to(pci)
    for dev in ("mlx5_0", "mlx5_1"):
        (ib / dev / "ports" / "1").mkdir(parents=True)
    fw = firmware.expect_from_hostvars({"nic_firmware_presets": ["gpudirect"]})
    cmd = firmware.probe_command(fw).replace("/sys/class/infiniband", str(ib))
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)
    hcas = [ln.split()[1:3] for ln in out.stdout.splitlines() if ln.startswith("@@hca ")]
    assert sorted(hcas) == [["mlx5_0", "0000:1a:00.0"], ["mlx5_1", "0000:3c:00.0"]]
