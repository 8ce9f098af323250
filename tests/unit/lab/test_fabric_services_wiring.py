"""The fabric services wired into the lab (docs/fabric-services.md, "The lab"): tool dispatch, the
SM rule in hwctl's sysfs, the fabric state in nvidia-smi, openibd unloading nvidia_peermem, the host
boot (front-ends, the writable SM wire), the lab's fabric manager repository and inventory."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
import yaml

from fabricops_lab import hardware, hosts, inventory, paths, rack, rpm_repo, topology
from fabricops_lab.emul import hwctl, services, tools


def _run(tool: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = tools.main(tool, list(argv)) if tool in tools.TOOLS else services.main(tool, list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def host(tmp_path, monkeypatch):
    """gpu01 of the default rack in an EMUL_ROOT, MLNX_OFED installed, the fabric wire present."""
    monkeypatch.setenv("EMUL_ROOT", str(tmp_path))
    topo = topology.load()
    hw = hardware.hardware_json(topo, topo["hosts"][0], kernel="6.1.0-test")
    (tmp_path / "var/lib/emulated-hw").mkdir(parents=True)
    fabric = tmp_path / "var/lib/emulated-fabric"
    (fabric / "sm").mkdir(parents=True)
    (fabric / "cabling.json").write_text(json.dumps(hardware.cabling_json(topo)))
    (tmp_path / "usr/share/emulated-ofed").mkdir(parents=True)
    (tmp_path / "usr/share/emulated-ofed/release").write_text("MLNX_OFED_LINUX-24.10-1.1.4.0\n")

    def sync(**changes):
        hw.update(changes)
        (tmp_path / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(hw))
        hwctl.sync(mount=False)

    sync()
    return tmp_path, hw, sync


def _port(root: Path, attr: str, dev: str = "mlx5_0") -> str:
    return (root / f"sys/class/infiniband/{dev}/ports/1/{attr}").read_text().strip()


def test_tools_dispatch_to_the_services_module():
    assert tools.TOOLS["sminfo"] == "services:sminfo"
    assert tools.TOOLS["opensm"] == "services:opensm"
    assert tools.TOOLS["nv-fabricmanager"] == "services:nv_fabricmanager"
    # the kernel-module front-ends are the lab's (/usr/local/sbin), not a vendor package's
    assert not {"modprobe", "lsmod", "rmmod"} & set(tools.TOOLS)


def test_switch_run_sm_leaves_ports_active_and_sminfo_names_the_switch(host):
    root, hw, _sync = host
    assert hw["subnet_manager"] == "switch"
    assert (_port(root, "state"), _port(root, "sm_lid")) == ("4: ACTIVE", "0x1")
    rc, out, _ = _run("sminfo")
    assert rc == 0 and out.startswith("sminfo: sm lid 1 sm guid 0xfc6a1c0300")
    assert out.rstrip().endswith("priority 15 state 3 SMINFO_MASTER")


def test_host_run_sm_ports_init_until_the_subnet_is_swept(host):
    root, _hw, sync = host
    sync(subnet_manager="hosts")
    for dev in ("mlx5_0", "mlx5_1"):
        assert (_port(root, "state", dev), _port(root, "lid", dev), _port(root, "sm_lid", dev)) == (
            "2: INIT", "0x0", "0x0")
    assert _port(root, "state", "mlx5_2") == "4: ACTIVE"  # RoCE: no SM
    rc, _out, err = _run("sminfo")
    assert rc == 255 and "sminfo: iberror: failed: query" in err
    # an OpenSM master on a host swept ib-sw1: the silicon's LID, the master's LID as SM LID
    (root / "var/lib/emulated-fabric/sm/ib-sw1.json").write_text(
        json.dumps({"subnet": "ib-sw1", "swept": True, "master_lid": 3, "sms": {}}))
    sync()
    assert (_port(root, "state"), _port(root, "lid"), _port(root, "sm_lid")) == ("4: ACTIVE", "0x2", "0x3")


def test_nvidia_smi_fabric_state_follows_a_required_fabric_manager(host):
    root, _hw, sync = host
    rc, out, _ = _run("nvidia-smi", "-q", "-i", "0")
    assert rc == 0 and _fabric_lines(out) == ["State : Completed", "Status : Success"]
    sync(fabric_manager={"required": True})
    assert _fabric_lines(_run("nvidia-smi", "-q", "-i", "0")[1]) == ["State : Not Started", "Status : N/A"]
    state = root / services.FM_STATE
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"pid": 0, "version": "550.54.15"}))
    assert _fabric_lines(_run("nvidia-smi", "-q", "-i", "0")[1]) == ["State : Completed", "Status : Success"]
    sync(driver_version="550.90.07")  # fault driver-version: the running fabric manager no longer matches
    assert _fabric_lines(_run("nvidia-smi", "-q", "-i", "0")[1]) == ["State : Not Started", "Status : N/A"]


def _fabric_lines(text: str) -> list[str]:
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip() == "Fabric")
    return [" ".join(ln.split()) for ln in lines[at + 1 : at + 3]]


def test_openibd_stop_unloads_nvidia_peermem(host):
    assert _run("modprobe", "nvidia_peermem")[0] == 0
    assert "nvidia_peermem" in services.loaded_modules()
    assert _run("openibd", "stop")[0] == 0
    assert "nvidia_peermem" not in services.loaded_modules() and "ib_core" not in services.loaded_modules()
    assert _run("openibd", "start")[0] == 0
    loaded = services.loaded_modules()
    assert "ib_core" in loaded and "nvidia_peermem" not in loaded  # the nvidia-peermem unit reloads it
    assert _run("modprobe", "nvidia_peermem")[0] == 0
    assert _run("openibd", "restart")[0] == 0
    assert "nvidia_peermem" not in services.loaded_modules()


def test_hosts_boot_with_the_front_ends_and_a_writable_sm_wire(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    argv = hosts.nspawn_argv({"name": "gpu01"})
    fabric = paths.fabric_dir()
    ro = argv.index(f"--bind-ro={fabric}:/var/lib/emulated-fabric")
    assert argv[ro + 1] == f"--bind={fabric / 'sm'}:/var/lib/emulated-fabric/sm"
    root = tmp_path / "root"
    hosts.install_emulated_software(root)
    for tool in ("modprobe", "lsmod", "rmmod", "emulated-hw-sm-sync"):
        assert f'main("{tool}"' in (root / "usr/local/sbin" / tool).read_text()
    assert (root / "etc/systemd/system/paths.target.wants/emulated-hw-sm.path").is_symlink()
    assert (root / "usr/lib/emulated-hw/emul/services.py").is_file()


def test_write_fabric_makes_the_sm_wire(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    rack._write_fabric(topology.load())
    assert (paths.fabric_dir() / "sm" / "heartbeat").is_dir()


def test_start_services_prepares_the_fabric_manager_repo_after_ofed(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    calls = []

    class Ofed:
        @staticmethod
        def prepare(lab):
            calls.append("ofed")
            return {"pid": 42, "default_version": "24.10-1.1.4.0"}

    class FabricServices:
        @staticmethod
        def prepare(lab):
            calls.append("fabric_services")
            return {"repo_url": "http://198.51.100.1:8080/nvidia-fabricmanager", "versions": ["550.54.15"],
                    "packages": ["nvidia-fabricmanager-550"]}

    class RpmRepo:
        wanted = staticmethod(rpm_repo.wanted)

        @staticmethod
        def prepare(lab):
            calls.append("rpm_repo")
            return {"repo_url": "http://198.51.100.1:8080/rpm/cuda/rhel9/x86_64/"}

        @staticmethod
        def install_driver_source(lab, served):
            calls.append(("rpm_driver_source", served["repo_url"]))

    mods = {"switches": None, "ofed_repo": Ofed, "fabric_services": FabricServices,
            "firmware_images": None, "doca_repo": None, "rpm_repo": RpmRepo}
    monkeypatch.setattr(rack, "_service", lambda name: mods[name])
    lab = {"name": "t", "hosts": {}}
    rack._start_services(lab)
    assert calls == ["ofed", "fabric_services"]  # no rpm host: no RPM repository (CI's rack)
    assert lab["fabric_manager"]["repo_url"] == "http://198.51.100.1:8080/nvidia-fabricmanager"
    assert paths.load_lab()["fabric_manager"] == lab["fabric_manager"]
    # a topology with an rpm host: the RPM repository too, after the apt one, in lab.json
    calls.clear()
    lab = {"name": "t", "hosts": {}, "topology": topology.resolve("rpm")}
    rack._start_services(lab)
    # then the rpm trays' driver source from it (rpm_repo.install_driver_source: none in this rack)
    assert calls == ["ofed", "fabric_services", "rpm_repo",
                     ("rpm_driver_source", "http://198.51.100.1:8080/rpm/cuda/rhel9/x86_64/")]
    assert paths.load_lab()["fabric_manager"]["rpm"]["repo_url"].endswith("/rpm/cuda/rhel9/x86_64/")


def test_inventory_gives_the_roles_their_plan():
    topo = topology.load()
    fm = {"repo_url": "http://198.51.100.1:8080/nvidia-fabricmanager", "versions": ["550.54.14", "550.54.15"],
          "packages": ["nvidia-fabricmanager-550"]}
    data = inventory.all_yml({"topology": topo, "fabric_manager": fm}, None)
    assert data["subnet_manager_mode"] == "switch"
    assert "subnet_manager_hosts" not in data and "subnet_manager_topology" not in data
    # the role's own variable, as a real rack's inventory sets it
    assert data["nvidia_fabric_manager_repo_url"] == fm["repo_url"]
    assert "nvidia_fabric_manager_repo_url" not in inventory.all_yml({"topology": topo}, None)
    raw = yaml.safe_load(topology.DEFAULT_TOPOLOGY.read_text())
    raw["subnet_manager"] = "hosts"
    data = inventory.all_yml({"topology": topology.normalise(raw)}, None)
    assert data["subnet_manager_mode"] == "hosts" and data["subnet_manager_topology"] == "single_switch"
    assert data["subnet_manager_hosts"] == {"gpu01": 15, "gpu02": 14}
    # a rack without InfiniBand: no subnet manager to plan
    raw = yaml.safe_load(topology.DEFAULT_TOPOLOGY.read_text())
    raw["cabling"] = [c for c in raw["cabling"] if c["switch"] != "ib-sw1"]
    assert "subnet_manager_mode" not in inventory.all_yml({"topology": topology.normalise(raw)}, None)


def test_no_role_or_playbook_reads_the_lab_only_descriptions():
    """The lab inventory is an inventory like any other: roles and playbooks read their own
    variables, never the lab's descriptions of its mirrors (fabricops_ofed, fabricops_fabric_manager)."""
    repo = Path(__file__).parents[3]
    default = yaml.safe_load((repo / "roles/nvidia_fabric_manager/defaults/main.yml").read_text())
    for var in ("repo_url", "repo_key_url", "repo_key_sha256"):
        assert default[f"nvidia_fabric_manager_{var}"] == ""
    readers = [
        str(f.relative_to(repo))
        for f in [*repo.glob("roles/**/*.yml"), *repo.glob("roles/**/*.j2"), *repo.glob("playbooks/*.yml"),
                  repo / "site.yml", *repo.glob("plugins/**/*.py"), *repo.glob("src/fabricops/verify/*.py")]
        if re.search(r"\bfabricops_(ofed|fabric_manager)\b", f.read_text())
    ]
    assert readers == []


def test_lab_inventory_pins_ofed_with_the_roles_own_variables():
    facts = {
        "default_version": "24.10-1.1.4.0",
        "distro": "debian12.1",
        "versions": {
            v: {"tgz_url": f"http://m/{v}.tgz", "tgz_sha256": "a" * 64, "iso_url": f"http://m/{v}.iso",
                "iso_sha256": "b" * 64, "repo_url": f"http://m/{v}/repo"}
            for v in ("23.10-1.1.9.0", "24.10-1.1.4.0")
        },
    }
    data = inventory.all_yml({"topology": topology.load()}, facts)
    assert data["mlnx_ofed_version"] == "24.10-1.1.4.0"
    assert data["mlnx_ofed_tarball_url"] == "http://m/24.10-1.1.4.0.tgz"
    assert data["mlnx_ofed_tarball_sha256"] == "a" * 64
    assert data["mlnx_ofed_iso_url"] == "http://m/24.10-1.1.4.0.iso"
    assert data["mlnx_ofed_repo_url"] == "http://m/24.10-1.1.4.0/repo"
    assert data["mlnx_ofed_distro"] == "debian12.1"


def test_inventory_plans_each_fabric_only_where_the_rack_has_it(tmp_path):
    """The default rack (IB + RoCE) gets both plans; an InfiniBand-only slice (what `fabricops plan`
    writes for an NDR cluster) gets no RoCE definition, so site.yml skips roce_host there."""
    data = inventory.all_yml({"topology": topology.load()}, {"distro": "debian12.1", "versions": {}})
    assert data["fabricops_roce"]["lossless_priority"] == 3 and data["fabricops_roce_addresses"]
    assert data["nccl_profile_name"] == "ib" and set(data["ipoib_plan"]["networks"]) == {"ibp26s0", "ibp60s0"}
    assert data["mlnx_ofed_distro"] == "debian12.1"
    from fabricops.cli import main as fabricops

    assert fabricops(["plan", "--gpus", "32", "--write-inventory", str(tmp_path)]) == 0
    slice_topo = topology.load(tmp_path / "lab-topology.yml")
    data = inventory.all_yml({"topology": slice_topo}, None)
    assert "fabricops_roce" not in data and "fabricops_roce_addresses" not in data
    assert data["nccl_profile_name"] == "ib"
