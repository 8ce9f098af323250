"""The emulated PCIe tree: hardware.json ``pcie``, emulated lspci (read back with the real-capture
parser), the sysfs link/IOMMU files, the PCIe faults, the perftest PCIe cap and emulated modinfo."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
from pathlib import Path

import pytest

from fabricops.parsers import lspci as parser
from fabricops_lab import faults, hardware, paths, topology
from fabricops_lab.emul import hwctl, pci, perftest, services

TOPO = topology.load()


def host_hw(index: int = 0) -> dict:
    return hardware.hardware_json(TOPO, TOPO["hosts"][index], kernel="6.1.0-18-amd64")


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("EMUL_ROOT", str(tmp_path))
    (tmp_path / "var/lib/emulated-hw").mkdir(parents=True)
    write(tmp_path, host_hw())
    return tmp_path


def write(root: Path, hw: dict) -> None:
    (root / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(hw))


def run_lspci(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = pci.lspci(list(argv))
    return rc, out.getvalue(), err.getvalue()


def parsed(*argv: str) -> dict[str, dict]:
    rc, out, _ = run_lspci(*argv)
    assert rc == 0
    return {d["bdf"]: d for d in parser.parse(out)["devices"]}


# --- the tree in hardware.json ---------------------------------------------------------------


def test_tree_keeps_gpu_and_hca_addresses_and_bus_ranges_are_consistent():
    hw = host_hw()
    devs = {d["bdf"]: d for d in hw["pcie"]["devices"]}
    gpus = {"0000:" + g["pci_bus_id"].split(":", 1)[1].lower() for g in hw["gpus"]}
    hcas = {h["pci"] for h in hw["hcas"]}
    assert {b for b, d in devs.items() if d["kind"] == "gpu"} == gpus
    assert {b for b, d in devs.items() if d["kind"] == "hca"} == hcas
    up = pci.parents(list(devs.values()))
    for bdf, d in devs.items():
        bus = int(bdf.split(":")[1], 16)
        parent = up[bdf]
        if d["kind"] == "root_port":
            assert parent is None
            continue
        assert parent is not None, bdf
        pb = devs[parent]["bus"]
        assert pb["secondary"] == bus <= pb["subordinate"]
        if d.get("bus"):  # a bridge's range sits inside its parent's
            assert pb["secondary"] < d["bus"]["secondary"] <= d["bus"]["subordinate"] <= pb["subordinate"]
    kinds = [
        devs[p]["kind"] for p in (up["0000:18:00.0"], up[up["0000:18:00.0"]], up[up[up["0000:18:00.0"]]])
    ]
    assert kinds == ["downstream_port", "upstream_port", "root_port"]
    # each HCA shares a switch with the GPUs nic_affinity pairs it with
    for hca in hw["hcas"]:
        sw = up[up[hca["pci"]]]
        for i in hw["nic_affinity"][hca["name"]]:
            gpu = "0000:" + hw["gpus"][i]["pci_bus_id"].split(":", 1)[1].lower()
            assert up[up[gpu]] == sw
    assert set(hw["pcie"]["iommu_groups"].values()) == {"identity"}


def test_tree_of_a_two_gpu_host_has_no_overlapping_ranges():
    hw = hardware.hardware_json(
        TOPO, dict(TOPO["hosts"][0], gpus=dict(TOPO["hosts"][0]["gpus"], count=2)), kernel="k"
    )
    bridges = [d["bus"] for d in hw["pcie"]["devices"] if d["kind"] == "root_port"]
    spans = sorted((b["primary"], b["subordinate"]) for b in bridges)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))


# --- emulated lspci -----------------------------------------------------------------------------


def test_lspci_vvv_parses_into_the_tree_hardware_json_describes(root):
    hw = host_hw()
    got = parsed("-D", "-vvv")
    want = {d["bdf"]: d for d in hw["pcie"]["devices"]}
    assert set(got) == set(want)
    assert parser.parents(list(got.values())) == pci.parents(list(want.values()))
    types = {
        "root_port": "Root Port",
        "upstream_port": "Upstream Port",
        "downstream_port": "Downstream Port",
        "gpu": "Endpoint",
        "hca": "Endpoint",
    }
    for bdf, d in want.items():
        g = got[bdf]
        assert g["port_type"] == types[d["kind"]], bdf
        assert g["bridge"] == (d["kind"] in ("root_port", "upstream_port", "downstream_port"))
        assert g["bus"] == d.get("bus")
        assert g["lnkcap"] == {"speed_gts": 32.0, "width": 16}
        assert g["lnksta"] == {"speed_gts": 32.0, "width": 16, "downgraded": False}
        assert g["access_denied"] is False
        if d["kind"] == "downstream_port":
            assert g["acs_cap"] == dict.fromkeys(parser.ACS_FLAGS, True)
            assert g["acs_ctl"] == dict.fromkeys(parser.ACS_FLAGS, False)
    assert got["0000:18:00.0"]["class"] == "3D controller"
    assert got["0000:18:00.0"]["description"] == "NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)"
    assert got["0000:1a:00.0"]["description"].startswith("Mellanox Technologies MT2910 Family [ConnectX-7]")
    # GPU0 and mlx5_0 meet at their switch's upstream port
    path = parser.path_between(list(got.values()), "0000:18:00.0", "0000:1a:00.0")
    assert path == ["0000:17:00.0", "0000:16:00.0", "0000:17:01.0"]


def test_lspci_address_forms_and_slot_selection(root):
    rc, out, _ = run_lspci("-vvv")
    assert rc == 0 and "\n18:00.0 3D controller: NVIDIA" in "\n" + out and "0000:18:00.0" not in out
    assert list(parsed("-D", "-vvv", "-s", "0000:18:00.0")) == ["0000:18:00.0"]
    assert sorted(parsed("-vvv", "-s", "17:")) == ["0000:17:00.0", "0000:17:01.0", "0000:17:02.0"]
    rc, out, _ = run_lspci("-nn", "-s", "18:00.0")
    assert (
        out
        == "18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)\n"
    )
    rc, out, _ = run_lspci("-n", "-s", "1a:00.0")
    assert out == "1a:00.0 0207: 15b3:1021 (rev 00)\n"


def test_lspci_unknown_option_errors_like_pciutils(root):
    rc, out, err = run_lspci("-z")
    assert rc == 1 and out == ""
    assert err.startswith("lspci: invalid option -- 'z'\nUsage: lspci [<switches>]")
    rc, _, err = run_lspci("-t")
    assert rc == 1 and "not emulated" in err


def test_lspci_without_root_prints_access_denied(root, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    got = parsed("-D", "-vvv")
    assert all(d["access_denied"] and d["acs_ctl"] is None and d["lnksta"] is None for d in got.values())


# --- sysfs --------------------------------------------------------------------------------------


def test_sysfs_link_files_and_iommu_groups(root):
    hwctl.sync(mount=False)
    dev = root / "sys/bus/pci/devices/0000:1a:00.0"
    assert (dev / "current_link_speed").read_text() == "32.0 GT/s PCIe\n"
    assert (dev / "current_link_width").read_text() == "16\n"
    assert (dev / "max_link_speed").read_text() == "32.0 GT/s PCIe\n"
    assert (root / "sys/class/infiniband/mlx5_0/device/current_link_width").read_text() == "16\n"
    link = dev / "iommu_group"
    # laid out as the kernel does: bus/pci/devices/BDF -> the device under its bridges
    chain = "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:1a:00.0"
    assert os.readlink(root / "sys/bus/pci/devices/0000:1a:00.0") == f"../../../{chain}"
    assert link.is_symlink() and os.readlink(link) == "../../../../../../kernel/iommu_groups/11"
    assert link.resolve() == (root / "sys/kernel/iommu_groups/11").resolve()
    assert (link / "type").read_text() == "identity\n"
    member = root / "sys/kernel/iommu_groups/11/devices/0000:18:00.0"
    assert member.is_symlink() and (member / "current_link_width").read_text() == "16\n"
    groups = sorted(p.name for p in (root / "sys/kernel/iommu_groups").iterdir())
    assert groups == sorted(host_hw()["pcie"]["iommu_groups"])


def test_hca_uevent_names_its_pci_slot_as_the_kernel_writes_it(root):
    """The nic_firmware role finds each HCA's BDF in device/uevent (PCI_SLOT_NAME) when the device
    link is not there; the kernel's pci_uevent fields, class 0x0207 for an InfiniBand ConnectX."""
    hwctl.sync(mount=False)
    text = (root / "sys/class/infiniband/mlx5_0/device/uevent").read_text()
    fields = dict(line.split("=", 1) for line in text.splitlines())
    assert fields["PCI_SLOT_NAME"] == "0000:1a:00.0"
    assert fields["DRIVER"] == "mlx5_core" and fields["PCI_ID"] == "15B3:1021"
    assert fields["PCI_CLASS"] == "20700" and fields["MODALIAS"].startswith("pci:v000015B3d00001021")
    assert (root / "sys/bus/pci/devices/0000:1a:00.0/uevent").read_text() == text


def test_sysfs_drops_a_gpu_that_fell_off_the_bus(root):
    hwctl.sync(mount=False)
    hw = host_hw()
    hw["gpus"] = [g for g in hw["gpus"] if g["index"] != 0]
    write(root, hw)
    hwctl.sync(mount=False)
    assert not (root / "sys/bus/pci/devices/0000:18:00.0").exists()
    assert not os.path.lexists(root / "sys/kernel/iommu_groups/11/devices/0000:18:00.0")
    assert (root / "sys/bus/pci/devices/0000:1a:00.0/current_link_speed").exists()
    assert "0000:18:00.0" not in parsed("-D", "-vvv")


# --- faults -------------------------------------------------------------------------------------


@pytest.fixture
def lab(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setattr(paths, "STATE_DIR", state)
    monkeypatch.setenv("FABRICOPS_LAB_DIR", str(state))
    lab = {
        "name": TOPO["name"],
        "topology": TOPO,
        "hosts": {h["name"]: {"mgmt_ip": h["mgmt_ip"]} for h in TOPO["hosts"]},
        "switches": {},
    }
    paths.save_lab(lab)
    for i, h in enumerate(TOPO["hosts"]):
        p = paths.host_dir(h["name"]) / "hw" / "hardware.json"
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps(host_hw(i), indent=1))
    resyncs: list[str] = []
    monkeypatch.setattr(faults, "_host_exec", lambda *a, **k: None)
    monkeypatch.setattr(faults, "_resync", resyncs.append)
    return lab, resyncs


def lab_hw(host: str = "gpu01") -> dict:
    return json.loads((paths.host_dir(host) / "hw" / "hardware.json").read_text())


def changed(before: dict, after: dict) -> dict[str, dict]:
    """bdf -> {field: (old, new)} for the PCIe devices that differ."""
    a = {d["bdf"]: d for d in before["pcie"]["devices"]}
    b = {d["bdf"]: d for d in after["pcie"]["devices"]}
    assert set(a) == set(b)
    return {
        k: {f: (a[k].get(f), b[k].get(f)) for f in set(a[k]) | set(b[k]) if a[k].get(f) != b[k].get(f)}
        for k in a
        if a[k] != b[k]
    }


def test_pcie_downtrained_changes_only_that_link(lab, tmp_path, monkeypatch):
    lab_, resyncs = lab
    before = lab_hw()
    faults.inject("gpu01", "pcie-downtrained", ["mlx5_0"], lab_)
    after = lab_hw()
    assert resyncs == ["gpu01"]
    diff = changed(before, after)
    low = {"speed_gts": 16.0, "width": 8}
    full = {"speed_gts": 32.0, "width": 16}
    # the HCA and the switch port at the other end of the same link; nothing else
    assert diff == {"0000:1a:00.0": {"lnksta": (full, low)}, "0000:17:01.0": {"lnksta": (full, low)}}
    assert {k: v for k, v in after.items() if k != "pcie"} == {k: v for k, v in before.items() if k != "pcie"}
    # what the host shows: LnkSta (downgraded) and current_link_*; LnkCap and max_link_* stay
    root = tmp_path / "host"
    (root / "var/lib/emulated-hw").mkdir(parents=True)
    write(root, after)
    monkeypatch.setenv("EMUL_ROOT", str(root))
    got = parsed("-D", "-vvv")
    assert got["0000:1a:00.0"]["lnksta"] == {"speed_gts": 16.0, "width": 8, "downgraded": True}
    assert got["0000:1a:00.0"]["lnkcap"] == full
    assert got["0000:17:01.0"]["lnksta"] == {
        "speed_gts": 16.0,
        "width": 8,
        "downgraded": False,
    }  # no marker on a DSP
    assert [b for b, d in got.items() if d["lnksta"]["downgraded"]] == ["0000:1a:00.0"]
    hwctl.sync(mount=False)
    dev = root / "sys/bus/pci/devices/0000:1a:00.0"
    assert (dev / "current_link_speed").read_text() == "16.0 GT/s PCIe\n"
    assert (dev / "current_link_width").read_text() == "8\n"
    assert (dev / "max_link_speed").read_text() == "32.0 GT/s PCIe\n"
    assert (dev / "max_link_width").read_text() == "16\n"
    assert (root / "sys/bus/pci/devices/0000:18:00.0/current_link_width").read_text() == "16\n"
    faults.clear("gpu01", lab_)
    assert lab_hw() == before


def test_pcie_downtrained_gpu_with_width_and_speed(lab):
    lab_, _ = lab
    faults.inject("gpu01", "pcie-downtrained", ["GPU3", "x4", "8"], lab_)
    d = next(d for d in lab_hw()["pcie"]["devices"] if d["name"] == "GPU3")
    assert d["bdf"] == "0000:5d:00.0" and d["lnksta"] == {"speed_gts": 8.0, "width": 4}


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["mlx5_9"], "no GPU or HCA 'mlx5_9'"),
        (["mlx5_0", "12"], "WIDTH must be"),
        (["mlx5_0", "8", "10"], "SPEED must be"),
        (["mlx5_0", "16", "32"], "full capability"),
        (["mlx5_0", "32"], "not below"),
    ],
)
def test_pcie_downtrained_bad_requests_change_nothing(lab, args, msg):
    lab_, resyncs = lab
    raw = (paths.host_dir("gpu01") / "hw" / "hardware.json").read_bytes()
    with pytest.raises(faults.FaultError, match=msg):
        faults.inject("gpu01", "pcie-downtrained", args, lab_)
    assert (paths.host_dir("gpu01") / "hw" / "hardware.json").read_bytes() == raw and resyncs == []


def test_acs_enabled_on_a_device_sets_only_the_bridges_above_it(lab):
    lab_, _ = lab
    before = lab_hw()
    faults.inject("gpu01", "acs-enabled", ["GPU0"], lab_)
    diff = changed(before, lab_hw())
    assert list(diff) == ["0000:17:00.0"]  # GPU0's downstream port; the root port stays
    old, new = diff["0000:17:00.0"]["acs_ctl"]
    assert {k for k in new if new[k] != old[k]} == {"SrcValid", "ReqRedir", "CmpltRedir"}
    faults.clear("gpu01", lab_)
    assert lab_hw() == before


def test_acs_enabled_on_the_host_sets_every_downstream_port_and_lspci_shows_it(lab, tmp_path, monkeypatch):
    lab_, _ = lab
    before = lab_hw()
    faults.inject("gpu01", "acs-enabled", [], lab_)
    after = lab_hw()
    diff = changed(before, after)
    dsps = {d["bdf"] for d in before["pcie"]["devices"] if d["kind"] == "downstream_port"}
    assert set(diff) == dsps
    root = tmp_path / "host"
    (root / "var/lib/emulated-hw").mkdir(parents=True)
    write(root, after)
    monkeypatch.setenv("EMUL_ROOT", str(root))
    got = parsed("-D", "-vvv")
    path = parser.path_between(list(got.values()), "0000:18:00.0", "0000:1a:00.0")
    redirected = [b for b in path if got[b]["acs_ctl"] and got[b]["acs_ctl"]["ReqRedir"]]
    assert redirected == ["0000:17:00.0", "0000:17:01.0"]
    assert got["0000:15:01.0"]["acs_ctl"]["ReqRedir"] is False


def test_iommu_translated_changes_every_group_type(lab, tmp_path, monkeypatch):
    lab_, _ = lab
    before = lab_hw()
    faults.inject("gpu01", "iommu-translated", [], lab_)
    after = lab_hw()
    assert set(after["pcie"]["iommu_groups"].values()) == {"DMA-FQ"}
    assert after["pcie"]["devices"] == before["pcie"]["devices"]
    root = tmp_path / "host"
    (root / "var/lib/emulated-hw").mkdir(parents=True)
    write(root, after)
    monkeypatch.setenv("EMUL_ROOT", str(root))
    hwctl.sync(mount=False)
    types = {p.parent.name: p.read_text() for p in (root / "sys/kernel/iommu_groups").glob("*/type")}
    assert types and set(types.values()) == {"DMA-FQ\n"}
    with pytest.raises(faults.FaultError):
        faults.inject("gpu01", "iommu-translated", ["now"], lab_)
    faults.clear("gpu01", lab_)
    assert lab_hw() == before


# --- perftest PCIe cap, modinfo -----------------------------------------------------------------


def test_perftest_rate_follows_a_downtrained_hca_link():
    hw = host_hw()
    assert perftest.pcie_capped_rate(hw, "mlx5_0", 400.0) == 400.0  # Gen5 x16 (504 Gb/s) carries 400G
    hca = next(d for d in hw["pcie"]["devices"] if d["name"] == "mlx5_0")
    hca["lnksta"] = {"speed_gts": 16.0, "width": 8}
    assert perftest.pcie_capped_rate(hw, "mlx5_0", 400.0) == pytest.approx(126.03, abs=0.01)
    assert perftest.pcie_capped_rate(hw, "mlx5_1", 400.0) == 400.0


def test_perftest_local_facts_carry_the_pcie_cap(root):
    hw = host_hw()
    next(d for d in hw["pcie"]["devices"] if d["name"] == "mlx5_0")["lnksta"] = {
        "speed_gts": 16.0,
        "width": 8,
    }
    write(root, hw)
    facts, err = perftest.local_facts(perftest.parse_args("write", "bw", ["-d", "mlx5_0"]))
    assert err is None and facts["rate_gbps"] == pytest.approx(126.03, abs=0.01)


@pytest.mark.parametrize(("flavour", "license_"), [("open", "Dual MIT/GPL"), ("proprietary", "NVIDIA")])
def test_modinfo_license_of_nvidia_follows_gpu_kernel_module(root, flavour, license_, capsys):
    hw = host_hw()
    hw["gpu_kernel_module"] = flavour
    write(root, hw)
    assert services.modinfo(["-F", "license", "nvidia"]) == 0
    assert capsys.readouterr().out == f"{license_}\n"
    assert services.modinfo(["nvidia"]) == 0
    out = capsys.readouterr().out
    assert f"license:        {license_}\n" in out and "version:        550.54.15\n" in out


def test_modinfo_of_a_module_the_lab_does_not_emulate_goes_to_kmod(root, capsys):
    assert services.modinfo(["-F", "license", "ext4"]) == 1  # EMUL_ROOT set: the real modinfo is not run
    assert "ext4" in capsys.readouterr().err


def test_pcie_downtrained_takes_every_function_of_the_card_along(lab):
    lab_, _ = lab
    before = lab_hw()
    faults.inject("gpu01", "pcie-downtrained", ["mlx5_2"], lab_)
    low = {"speed_gts": 16.0, "width": 8}
    diff = changed(before, lab_hw())
    # mlx5_2 and mlx5_3 are the two functions of one card (aa:00.0/.1): one link, one downstream port
    assert sorted(diff) == ["0000:99:01.0", "0000:aa:00.0", "0000:aa:00.1"]
    assert all(v["lnksta"][1] == low for v in diff.values())


def test_hosts_get_the_lspci_and_modinfo_front_ends(tmp_path):
    from fabricops_lab import hosts

    hosts.install_emulated_software(tmp_path)
    lspci_wrapper = (tmp_path / "usr/local/bin/lspci").read_text()
    assert 'main("lspci"' in lspci_wrapper and os.access(tmp_path / "usr/local/bin/lspci", os.X_OK)
    assert 'main("modinfo"' in (tmp_path / "usr/local/sbin/modinfo").read_text()
    assert (tmp_path / hosts.EMUL_TARGET / "emul/pci.py").is_file()
    from fabricops_lab.emul import tools

    assert tools.TOOLS["lspci"] == "pci:lspci"


def test_the_copied_emul_package_runs_lspci_on_its_own(tmp_path, root):
    """As in a lab host: the copied emul package, a plain python3, no fabricops on the path."""
    import subprocess
    import sys

    from fabricops_lab import hosts

    hosts.install_emulated_software(tmp_path / "host")
    target = tmp_path / "host" / hosts.EMUL_TARGET
    code = f"import sys; sys.path.insert(0, {str(target)!r}); from emul.tools import main; " \
           "sys.exit(main('lspci', ['-D', '-vvv']))"
    env = {"EMUL_ROOT": str(root), "PATH": os.environ.get("PATH", "")}
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, env=env,
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = {d["bdf"] for d in parser.parse(proc.stdout)["devices"]}
    assert got == {d["bdf"] for d in host_hw()["pcie"]["devices"]}
