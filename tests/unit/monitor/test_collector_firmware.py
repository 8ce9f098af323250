"""Collector metrics of issue 20: NIC firmware reset pending / versions, DKMS modules per kernel,
Secure Boot, fed the real captures of tests/fixtures/ (first line: the public source). The stdlib
readings themselves (fabricops.evidence.tools) are tested, against the controller's parsers, in
tests/unit/evidence/test_evidence_tools.py."""

from __future__ import annotations

from pathlib import Path

from captures import read_fixture
from test_collector import _write, fake_run, get, parse_exposition

from fabricops.monitor import collector as c

BURNED_NOT_RUNNING = "cx7_mlxup_burned_not_running.txt"  # 0000:8e:00.0, burned 28.47.1026, running 28.46.3048
EQ_PENDING = "cx4_operator_test_extended_query.txt"  # MEMIC_SIZE_LIMIT _256KB(1) -> DISABLED(0)


def _sysfs(root: Path, addr="0000:8e:00.0") -> Path:
    _write(root, "class/infiniband/mlx5_0/device/uevent", f"DRIVER=mlx5_core\nPCI_SLOT_NAME={addr}")
    return root


def _boot(root: Path, *kernels: str) -> str:
    boot = root / "boot"
    boot.mkdir(exist_ok=True)
    for k in kernels:
        (boot / f"vmlinuz-{k}").write_text("")
        (boot / f"config-{k}").write_text("")
    return str(boot)


def _cfg(root, **kw):
    return {"nvlink": False, "pcie": False, "boot_dir": _boot(root, "6.11.11-1-pve", "6.11.11-2-pve"), **kw}


def _collect(tmp_path, outputs, **cfg):
    text = c.collect(_cfg(tmp_path, **cfg), sysfs=str(_sysfs(tmp_path)), run=fake_run(outputs), host="gpu04")
    return parse_exposition(text), text


def test_reset_pending_info_and_compliance_from_real_captures(tmp_path):
    outs = {
        "-e q": (0, read_fixture("mlxconfig", EQ_PENDING)),
        "--query": (0, read_fixture("mlxfwmanager", BURNED_NOT_RUNNING)),
    }
    m, _ = _collect(tmp_path, outs, nic_firmware_versions={"MT_0000000838": "28.47.1026"})
    assert get(m, "fabricops_nic_fw_reset_pending", device="mlx5_0") == 1
    assert (
        get(
            m,
            "fabricops_nic_fw_info",
            device="mlx5_0",
            psid="MT_0000000838",
            running="28.46.3048",
            burned="28.47.1026",
        )
        == 1
    )
    assert get(m, "fabricops_nic_fw_compliant", device="mlx5_0", pinned="28.47.1026") == 0
    assert get(m, "fabricops_collector_source_up", source="mlxconfig") == 1


def test_no_reset_pending_when_next_equals_current(tmp_path):
    q = read_fixture("mlxconfig", EQ_PENDING).replace("DISABLED(0)", "_256KB(1)")
    fw = read_fixture("mlxfwmanager", BURNED_NOT_RUNNING).replace("28.46.3048", "28.47.1026")
    m, _ = _collect(
        tmp_path, {"-e q": (0, q), "--query": (0, fw)}, nic_firmware_versions={"MT_0000000838": "28.47.1026"}
    )
    assert get(m, "fabricops_nic_fw_reset_pending", device="mlx5_0") == 0
    assert get(m, "fabricops_nic_fw_compliant", device="mlx5_0") == 1


def test_firmware_tools_absent_export_nothing_unless_required(tmp_path):
    m, text = _collect(tmp_path, {})
    assert "fabricops_nic_fw" not in text and 'source="mlxconfig"' not in text
    m, _ = _collect(tmp_path, {}, firmware=True)
    assert get(m, "fabricops_collector_source_up", source="mlxconfig") == 0


def test_unreadable_mlxconfig_is_a_failed_source_not_a_zero(tmp_path):
    m, text = _collect(tmp_path, {"-e q": (0, "garbage\n"), "--query": (0, "garbage\n")})
    assert get(m, "fabricops_collector_source_up", source="mlxconfig") == 0
    assert get(m, "fabricops_collector_source_up", source="mlxfwmanager") == 0
    assert "fabricops_nic_fw_reset_pending{" not in text


def test_dkms_missing_for_the_next_boot_kernel(tmp_path):
    one = "i915-sriov-dkms/2025.03.26, 6.11.11-1-pve, x86_64: installed\n"
    m, _ = _collect(
        tmp_path,
        {
            "dkms status": (0, one),
            "uname -r": (0, "6.11.11-1-pve\n"),
            "--sb-state": (0, read_fixture("mokutil-sb-state", "enabled.txt")),
        },
    )
    assert get(m, "fabricops_dkms_modules_missing", kernel="6.11.11-1-pve", boot="running") == 0
    assert (
        get(
            m, "fabricops_dkms_modules_missing", kernel="6.11.11-2-pve", boot="next", module="i915-sriov-dkms"
        )
        == 1
    )
    assert get(m, "fabricops_secure_boot_enabled") == 1


def test_dkms_both_kernels_installed_and_secure_boot_off(tmp_path):
    m, _ = _collect(
        tmp_path,
        {
            "dkms status": (0, read_fixture("dkms-status", "dkms3_i915_sriov_diff_warning.txt")),
            "uname -r": (0, "6.11.11-1-pve\n"),
            "--sb-state": (0, read_fixture("mokutil-sb-state", "not_efi.txt")),
        },
    )
    assert get(m, "fabricops_dkms_modules_missing", kernel="6.11.11-2-pve") == 0
    assert get(m, "fabricops_secure_boot_enabled") == 0


def test_dkms_unreadable_is_a_failed_source(tmp_path):
    m, text = _collect(tmp_path, {"dkms status": (0, "what is this\n"), "uname -r": (0, "6.11.11-1-pve\n")})
    assert get(m, "fabricops_collector_source_up", source="dkms") == 0
    assert "fabricops_dkms_modules_missing{" not in text


def test_next_boot_kernel_version_order(tmp_path):
    boot = _boot(tmp_path, "6.9.0-1-amd64", "6.10.0-1-amd64", "6.1.0-18-amd64")
    assert c.next_boot_kernel(boot, "6.1.0-18-amd64") == "6.10.0-1-amd64"
    assert c.next_boot_kernel(str(tmp_path / "none"), "6.1.0-18-amd64") == "6.1.0-18-amd64"


def test_burned_image_not_running_alone_is_a_reset_pending(tmp_path):
    q = read_fixture("mlxconfig", EQ_PENDING).replace("DISABLED(0)", "_256KB(1)")
    m, _ = _collect(
        tmp_path, {"-e q": (0, q), "--query": (0, read_fixture("mlxfwmanager", BURNED_NOT_RUNNING))}
    )
    assert get(m, "fabricops_nic_fw_reset_pending", device="mlx5_0") == 1
