"""HGX B200 in the lab: the nvlsm / libnvsdm packages of the fabric-services repository, the b200
topology, the NVSwitch management ports and the emulated nvlsm with the fabric manager's start step
(docs/lab-fidelity.md, "HGX B200 (fabric manager + NVLink subnet manager)")."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_emul_services import wait_for

from fabricops import services as product_services
from fabricops.model.profiles import load_profile
from fabricops_lab import fabric_services, hardware, ofed_repo, paths, topology
from fabricops_lab.emul import nvlsm
from fabricops_lab.emul import services as es

SRC = Path(__file__).resolve().parents[3] / "lab" / "src"
DRIVER = hardware.DRIVER_VERSION
GUIDS = ["0xe09d730300010000", "0xe09d730300010001"]

needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")


# --- packages -----------------------------------------------------------------------------------

def _contents(deb: Path) -> dict[str, str]:
    """``dpkg-deb -c``: path -> mode string, files only."""
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    return {ln.split()[-1].lstrip("."): ln.split()[0] for ln in out.splitlines() if not ln.startswith("d")}


def _field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_nvlsm_and_libnvsdm_versions_follow_nvidias_repository():
    debs = {(d.package, d.version) for d in fabric_services.nvlsm_debs(("550.54.14", "550.54.15"))}
    # nvlsm: its own calendar version, -1; libnvsdm-<branch>: exactly the driver's, -1 (as FM and IMEX)
    assert debs == {("nvlsm", "2025.06.5-1"), ("nvlsm", "2025.06.6-1"),
                    ("libnvsdm-550", "550.54.14-1"), ("libnvsdm-550", "550.54.15-1")}
    # what the product installs beside the fabric manager on hgx-b200 is what the repository carries
    want = {p["name"] for p in product_services.service_packages("nvlink_subnet_manager", DRIVER)}
    assert want == {"nvlsm", "libnvsdm-550"}


@needs_dpkg
def test_nvlsm_package_ships_the_daemon_and_config_where_nvidias_does_and_no_unit(tmp_path):
    arch = ofed_repo.deb_arch()
    nv = next(d for d in fabric_services.nvlsm_debs() if d.package == "nvlsm" and d.version == "2025.06.6-1")
    deb = ofed_repo.build_deb(nv, tmp_path, arch)
    files = _contents(deb)
    assert files["/opt/nvidia/nvlsm/sbin/nvlsm"] == "-rwxr-xr-x"
    assert "/usr/share/nvidia/nvlsm/nvlsm.conf" in files
    # NVIDIA's nvlsm has no systemd unit: the fabric manager's start step runs it
    assert not [f for f in files if "systemd" in f or f.endswith(".service")], files
    assert _field(deb, "Version") == "2025.06.6-1"
    daemon = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    assert b'from emul.nvlsm import main' in daemon and b'main("nvlsm"' in daemon
    lib = next(d for d in fabric_services.nvlsm_debs()
               if d.package == "libnvsdm-550" and d.version.startswith(DRIVER))
    assert _field(ofed_repo.build_deb(lib, tmp_path, arch), "Version") == f"{DRIVER}-1"


@needs_dpkg
def test_fabric_manager_package_runs_the_start_step_front_end(tmp_path):
    fm = next(d for d in fabric_services.fm_debs((DRIVER,)))
    text = fm.files["usr/bin/nv-fabricmanager"][0].decode()
    assert 'from emul.nvlsm import main' in text and 'main("nv-fabricmanager"' in text
    # the unit still starts nv-fabricmanager (the lab's 550 unit), which starts nvlsm first on B200
    unit = fm.files["lib/systemd/system/nvidia-fabricmanager.service"][0].decode()
    assert "ExecStart=/usr/bin/nv-fabricmanager" in unit
    # a lab host's systemd cannot kill the unit's control group: the pid file names nv-fabricmanager
    # (emul/services.py writes it) and ExecStopPost stops the nvlsm the start step ran (its pid file)
    dropin = fm.files["lib/systemd/system/nvidia-fabricmanager.service.d/fabricops-lab.conf"][0].decode()
    assert "PIDFile=/run/nvidia-fabricmanager/nv-fabricmanager.pid" in dropin
    assert "ExecStopPost=" in dropin and "/" + nvlsm.NVLSM_PID.replace("var/run", "run") in dropin


@needs_dpkg
def test_repository_index_and_manifest_list_nvlsm_and_libnvsdm(tmp_path):
    out = tmp_path / "repo"
    manifest = fabric_services.build_fm_repo(out, (DRIVER,))
    assert manifest["nvlsm_packages"] == ["nvlsm=2025.06.5-1", "nvlsm=2025.06.6-1",
                                          f"libnvsdm-550={DRIVER}-1"]
    index = (out / "Packages").read_text()
    stanzas = {(s.split("Package: ")[1].split("\n")[0], s.split("Version: ")[1].split("\n")[0])
               for s in index.split("\n\n") if "Package: " in s}
    assert {("nvlsm", "2025.06.6-1"), ("nvlsm", "2025.06.5-1"), ("libnvsdm-550", f"{DRIVER}-1"),
            ("nvidia-fabricmanager-550", f"{DRIVER}-1")} <= stanzas


def test_prepare_rebuilds_a_repository_built_before_nvlsm(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    out = paths.repo_dir() / fabric_services.FM_REPO
    out.mkdir(parents=True)
    (out / "manifest.json").write_text(json.dumps({"versions": list(fabric_services.FM_VERSIONS),
                                                   "packages": [], "imex_packages": []}))
    built = []
    monkeypatch.setattr(fabric_services, "build_fm_repo", lambda o, v: built.append(o) or {"packages": []})
    monkeypatch.setattr(ofed_repo, "export_key", lambda p: "0" * 64)
    monkeypatch.setattr(ofed_repo, "sign_repo", lambda p: None)
    fabric_services.prepare({"topology": {"hosts": []}})
    assert built == [out]
    # built with the nvlsm packages but from other data files (a unit, a wrapper changed since): rebuilt
    current = {"versions": list(fabric_services.FM_VERSIONS), "packages": [], "imex_packages": [],
               "nvlsm_packages": [f"{d.package}={d.version}" for d in fabric_services.nvlsm_debs()],
               "data_sha256": fabric_services.data_digest()}
    (out / "manifest.json").write_text(json.dumps(current))
    fabric_services.prepare({"topology": {"hosts": []}})
    assert built == [out]
    (out / "manifest.json").write_text(json.dumps(dict(current, data_sha256="0" * 64)))
    fabric_services.prepare({"topology": {"hosts": []}})
    assert built == [out, out]


# --- topology and the NVSwitch management ports ----------------------------------------------------

def test_b200_topology():
    topo = topology.resolve("b200")
    assert topo["hardware_profile"] == "hgx-b200-ndr"
    prof = load_profile(topo["hardware_profile"])
    row = product_services.platform_services(prof.platform)
    assert row.services == ("fabric_manager", "nvlink_subnet_manager")
    assert [h["name"] for h in topo["hosts"]] == ["b200-01", "b200-02"]
    for h in topo["hosts"]:
        g = h["gpus"]
        assert (g["model"], g["count"], g["nvlink_gen"], g["topology"]) == ("NVIDIA B200", 8, 5, "nvswitch")
        assert g["model"] == prof.gpu.model and h["nvlink_domain"] is None
        ports = [p for hca in h["hcas"] for p in hca["ports"]]
        assert len(ports) == 4 and {(p["link_layer"], p["speed"]) for p in ports} == {("InfiniBand", "NDR")}
    assert {c["switch"] for c in topo["cabling"]} == {"ib-sw1"} and len(topo["cabling"]) == 8


def _lab_with(tmp_path, monkeypatch, names: tuple[str, ...]) -> dict:
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    hosts = [h for name in names for h in topology.resolve(name)["hosts"]]
    for h in hosts:
        (paths.host_dir(h["name"]) / "hw").mkdir(parents=True)
        (paths.host_dir(h["name"]) / "hw" / "hardware.json").write_text(json.dumps({"host": h["name"]}))
    return {"topology": {"hosts": hosts}}


def test_only_nvlink5_hgx_hosts_get_management_ports_and_a_required_fabric_manager(tmp_path, monkeypatch):
    lab = _lab_with(tmp_path, monkeypatch, ("b200", "default", "gb200"))
    fabric_services.mark_nvlink5_hosts(lab)
    marked = {}
    for h in lab["topology"]["hosts"]:
        hw = json.loads((paths.host_dir(h["name"]) / "hw" / "hardware.json").read_text())
        marked[h["name"]] = hw
    for name in ("b200-01", "b200-02"):
        hw = marked[name]
        assert hw["fabric_manager"] == {"required": True}
        ports = hw["nvswitch_mgmt_ports"]
        assert len(ports) == 4 and len({p["guid"] for p in ports}) == 4
        assert all(len(p["guid"]) == 18 and p["guid"].startswith("0xe09d7303") for p in ports)
        assert [p["device"] for p in ports] == ["mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"]  # after its 4 HCAs
    first = {name: marked[name]["nvswitch_mgmt_ports"][0]["guid"] for name in ("b200-01", "b200-02")}
    assert first["b200-01"] != first["b200-02"]
    # HGX H100 (NVLink 4) and GB200 trays (switches in the NVLink switch trays): nothing
    for name, hw in marked.items():
        if not name.startswith("b200"):
            assert "nvswitch_mgmt_ports" not in hw and "fabric_manager" not in hw, name


# --- nvlsm and the fabric manager's start step -------------------------------------------------------

@pytest.fixture
def b200(tmp_path, monkeypatch):
    """An HGX B200 host root (EMUL_ROOT) with the fabric manager package's files, no nvlsm yet."""
    root = tmp_path / "b200"
    (root / "var/lib/emulated-hw").mkdir(parents=True)
    hw = {"host": "b200-01", "driver_version": DRIVER, "gpu_topology": "nvswitch",
          "gpus": [{"index": i, "name": "NVIDIA B200", "nvlink_gen": 5} for i in range(8)], "hcas": [],
          "fabric_manager": {"required": True},
          "nvswitch_mgmt_ports": [{"device": f"mlx5_{4 + k}", "port": 1, "guid": g}
                                  for k, g in enumerate(GUIDS)]}
    (root / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(hw))
    (root / es.FM_VERSION).parent.mkdir(parents=True)
    (root / es.FM_VERSION).write_text(f"{DRIVER}\n")
    monkeypatch.setenv("EMUL_ROOT", str(root))
    procs: list[int] = []
    yield root, procs
    for rel in (es.FM_STATE, nvlsm.NVLSM_STATE):
        with contextlib.suppress(OSError, ValueError, KeyError):
            procs.append(int(json.loads((root / rel).read_text())["pid"]))
    for pid in procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def install_nvlsm(root: Path) -> None:
    for rel, text in ((nvlsm.NVLSM_BIN, "#!/usr/bin/python3\n"), (nvlsm.NVLSM_CONF, "# conf\n"),
                      (nvlsm.NVLSM_VERSION, "2025.06.6\n")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def run_tool(root: Path, tool: str, *args: str) -> subprocess.CompletedProcess:
    """The tool's exit status and output; through files, not pipes: the fabric manager's daemon keeps
    the descriptors it forked with."""
    env = dict(os.environ, EMUL_ROOT=str(root), PYTHONPATH=str(SRC))
    code = f"import sys; from fabricops_lab.emul.nvlsm import main; sys.exit(main({tool!r}, sys.argv[1:]))"
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        rc = subprocess.run([sys.executable, "-c", code, *args], stdout=out, stderr=err, env=env,
                            timeout=30).returncode
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(tool, rc, out.read(), err.read())


def start_nvlsm(root: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, EMUL_ROOT=str(root), PYTHONPATH=str(SRC))
    code = "import sys; from fabricops_lab.emul.nvlsm import main; sys.exit(main('nvlsm', sys.argv[1:]))"
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _hw(root: Path) -> dict:
    return json.loads((root / "var/lib/emulated-hw/hardware.json").read_text())


def test_fabric_manager_without_nvlsm_fails_nothing_to_do(b200):
    root, _ = b200
    r = run_tool(root, "nv-fabricmanager", "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg")
    assert r.returncode == 1
    assert "NV_WARN_NOTHING_TO_DO" in r.stderr and "nvlsm is not installed" in r.stderr
    assert "NV_WARN_NOTHING_TO_DO" in (root / es.FM_LOG).read_text()
    assert not (root / es.FM_STATE).exists()
    # the GPUs wait for registration (siderolabs/extensions#717); an H100 board says Not Started
    assert es.fabric_state(_hw(root)) == ("In Progress", "N/A")
    assert es.fabric_state({**_hw(root), "nvswitch_mgmt_ports": []}) == ("Not Started", "N/A")


def test_fabric_manager_starts_nvlsm_on_the_first_management_port_then_runs(b200):
    root, procs = b200
    install_nvlsm(root)
    r = run_tool(root, "nv-fabricmanager", "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg")
    assert r.returncode == 0, r.stderr
    sm = json.loads((root / nvlsm.NVLSM_STATE).read_text())
    procs.append(sm["pid"])
    assert sm["guid"] == GUIDS[0] and sm["device"] == "mlx5_4" and sm["version"] == "2025.06.6"
    assert (root / nvlsm.SM_SOCKET).exists()
    assert (root / nvlsm.NVLSM_PID).read_text().strip() == str(sm["pid"])
    assert wait_for(lambda: (root / es.FM_STATE).exists())
    assert es.fabric_state(_hw(root)) == ("Completed", "Success")
    assert f"management port GUID {GUIDS[0]}" in (root / es.FM_LOG).read_text()
    log = (root / nvlsm.NVLSM_LOG).read_text()
    assert f"bound to port GUID {GUIDS[0]}" in log and "SUBNET UP" in log


def test_fabric_manager_uses_a_running_nvlsm_and_nvlsm_refuses_a_second_instance(b200):
    root, procs = b200
    install_nvlsm(root)
    p = start_nvlsm(root, "--config", "/" + nvlsm.NVLSM_CONF, "--guid", GUIDS[1], "--log_file", "stdout")
    procs.append(p.pid)
    assert wait_for(lambda: (root / nvlsm.SM_SOCKET).exists())
    second = run_tool(root, "nvlsm", "--config", "/" + nvlsm.NVLSM_CONF, "--guid", GUIDS[0])
    assert second.returncode == 1 and "already running" in second.stderr
    r = run_tool(root, "nv-fabricmanager")
    assert r.returncode == 0, r.stderr
    assert json.loads((root / nvlsm.NVLSM_STATE).read_text())["pid"] == p.pid  # not a second one
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=10)
    assert "Exiting SM" in out
    for rel in (nvlsm.SM_SOCKET, nvlsm.NVLSM_STATE, nvlsm.NVLSM_PID):
        assert not (root / rel).exists(), rel


def test_nvlsm_needs_its_config_and_an_nvswitch_management_port(b200):
    root, _ = b200
    r = run_tool(root, "nvlsm", "--config", "/" + nvlsm.NVLSM_CONF, "--guid", GUIDS[0])
    assert r.returncode == 1 and "configuration file" in r.stderr
    install_nvlsm(root)
    r = run_tool(root, "nvlsm", "--config", "/" + nvlsm.NVLSM_CONF, "--guid", "0xb83fd20300a00100")
    # an HCA's port GUID, not a switch management port
    assert r.returncode == 1 and "bind to GUID 0xb83fd20300a00100 failed" in r.stderr
    hw = _hw(root)
    del hw["nvswitch_mgmt_ports"]
    (root / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(hw))
    r = run_tool(root, "nvlsm", "--config", "/" + nvlsm.NVLSM_CONF)
    assert r.returncode == 1 and "no local NVSwitch management port" in r.stderr
    r = run_tool(root, "nvlsm", "--bogus")
    assert r.returncode == 1 and "invalid option" in r.stderr
    assert not (root / nvlsm.NVLSM_STATE).exists()


def test_hgx_h100_fabric_manager_needs_no_nvlsm(b200):
    root, _ = b200
    hw = _hw(root)
    del hw["nvswitch_mgmt_ports"]
    (root / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(hw))
    r = run_tool(root, "nv-fabricmanager")
    assert r.returncode == 0, r.stderr
    assert wait_for(lambda: (root / es.FM_STATE).exists())
    assert not (root / nvlsm.NVLSM_STATE).exists()
