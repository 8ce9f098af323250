"""dkms status and mokutil parsers on real captures (tests/fixtures/dkms-status, mokutil-*)."""

from __future__ import annotations

import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers import dkms, mokutil


def test_dkms3_lines_with_and_without_the_diff_warning():
    recs = dkms.parse_status(read_fixture("dkms-status", "dkms3_i915_sriov_diff_warning.txt"))
    assert recs == [
        {"module": "i915-sriov-dkms", "version": "2025.03.26", "kernel": "6.11.11-1-pve",
         "arch": "x86_64", "state": "installed", "warnings": []},
        {"module": "i915-sriov-dkms", "version": "2025.03.26", "kernel": "6.11.11-2-pve",
         "arch": "x86_64", "state": "installed",
         "warnings": ["WARNING! Diff between built and installed module!"]},
    ]


def test_dkms3_two_modules():
    recs = dkms.parse_status(read_fixture("dkms-status", "dkms3010_nvidia_rtl8852bu.txt"))
    assert [(r["module"], r["version"]) for r in recs] == [("nvidia", "535.86.05"), ("rtl8852bu", "1.19.3")]
    assert dkms.installed(recs, "nvidia", "6.5.0-060500rc5-generic")
    assert not dkms.installed(recs, "nvidia", "6.5.0-1-generic")


def test_dkms2_comma_format_built_and_original_module():
    recs = dkms.parse_status(read_fixture("dkms-status", "dkms2_rocm_built_original_module.txt"))
    assert recs[0] == {"module": "amdgpu", "version": "19.10-782345.el7", "kernel": "3.10.0-957.el7.x86_64",
                       "arch": "x86_64", "state": "built", "warnings": ["original_module exists"]}
    assert [r["state"] for r in recs] == ["built", "installed", "installed"]


def test_dkms2_added_has_no_kernel():
    recs = dkms.parse_status(read_fixture("dkms-status", "dkms2_rocm_added.txt"))
    assert recs[0] == {"module": "amdgpu", "version": "18.50-756341.el7", "kernel": None, "arch": None,
                       "state": "added", "warnings": []}
    assert recs[1]["kernel"] == "5.0.8-1.el7.elrepo.x86_64"


def test_dkms3_added_and_doca_version_string():
    text = ("8812au/4.2.3: added\n"
            "mlnx-ofed-kernel/24.10.OFED.24.10.1.1.4.1, 6.1.0-18-amd64, x86_64: installed\n")
    recs = dkms.parse_status(text)
    assert recs[0]["kernel"] is None and recs[0]["state"] == "added"
    assert recs[1]["version"] == "24.10.OFED.24.10.1.1.4.1" and recs[1]["kernel"] == "6.1.0-18-amd64"


def test_dkms2_repeated_notes_with_odd_spacing_are_each_kept():
    line = ("virtualbox-guest,  4.1.12, 3.2.0-23-generic, x86_64: installed "
            "(WARNING! Diff between  built and installed module!) "
            "(WARNING! Diff between built and installed  module!)")
    (rec,) = dkms.parse_status(line)
    assert rec["warnings"] == ["WARNING! Diff between built and installed module!"] * 2


def test_dkms_empty_is_no_module():
    assert dkms.parse_status("") == []
    assert dkms.parse_status("\n  \n") == []


@pytest.mark.parametrize("bad", [
    "nvidia/535.86.05, 6.5.0-1-generic, x86_64",              # cut before the state
    "nvidia/535.86.05, 6.5.0-1-generic: installed",            # kernel without arch
    "nvidia/535.86.05: installed",                             # installed without a kernel
    "nvidia/535.86.05, 6.5.0-1-generic, x86_64: installed (WARNING! cut",
    "nvidia/535.86.05, 6.5.0-1-generic, x86_64: installed trailing words",
    "Error! Could not locate dkms.conf file.",
    "CA 'mlx5_0'",
])
def test_dkms_refuses_what_is_not_a_status_line(bad):
    with pytest.raises(ParseError):
        dkms.parse_status("nvidia/535.86.05, 6.5.0-1-generic, x86_64: installed\n" + bad)


def test_sb_state_captures():
    assert mokutil.parse_sb_state(read_fixture("mokutil-sb-state", "enabled.txt")) is True
    assert mokutil.parse_sb_state(read_fixture("mokutil-sb-state", "disabled_setup_mode.txt")) is False
    assert mokutil.sb_state(read_fixture("mokutil-sb-state", "disabled_setup_mode.txt"))["setup_mode"] is True
    assert mokutil.parse_sb_state(read_fixture("mokutil-sb-state", "not_efi.txt")) is None
    assert mokutil.sb_state(read_fixture("mokutil-sb-state", "not_efi.txt"))["efi"] is False


@pytest.mark.parametrize("bad", ["", "SecureBoot maybe", "SecureBoot enabled\nother", "is not enrolled"])
def test_sb_state_refuses(bad):
    with pytest.raises(ParseError):
        mokutil.parse_sb_state(bad)


def test_test_key_captures():
    assert mokutil.parse_test_key(read_fixture("mokutil-test-key", "already_enrolled_dkms.txt")) is True
    assert mokutil.parse_test_key(read_fixture("mokutil-test-key", "not_enrolled_shim_signed.txt")) is False
    assert mokutil.test_key("/var/lib/dkms/mok.pub is not enrolled\n")["key"] == "/var/lib/dkms/mok.pub"


@pytest.mark.parametrize("bad", ["", "EFI variables are not supported on this system",
                                 "Failed to open /var/lib/dkms/mok.pub", "SecureBoot enabled",
                                 "a is not enrolled\nb is not enrolled"])
def test_test_key_refuses(bad):
    with pytest.raises(ParseError):
        mokutil.parse_test_key(bad)
