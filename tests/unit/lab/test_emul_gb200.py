"""GB200 / GB300 NVL72 compute trays in the lab: topology, nvidia-smi, nvidia-imex, nvidia-imex-ctl,
the IMEX channel device and the NVL72 faults (docs/lab-fidelity.md, "GB200 / GB300 NVL72 compute trays")."""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from test_emul_services import wait_for

from fabricops import imex as product_imex
from fabricops.parsers.nvidia_smi import parse_nvlink
from fabricops_lab import fabric_services, faults, hardware, hosts, inventory, paths, topology
from fabricops_lab.emul import imex
from fabricops_lab.emul.tools import main as tools_main

SRC = Path(__file__).resolve().parents[3] / "lab" / "src"
DRIVER = hardware.DRIVER_VERSION
CX7_IB = [
    {
        "name": f"mlx5_{n}",
        "ports": [
            {"port": 1, "link_layer": "InfiniBand", "speed": "NDR", "width": "4X", "netdev": f"ibp{n + 3}s0"}
        ],
    }
    for n in range(4)
]


def nvl72_raw(n: int = 3, model: str = "NVIDIA GB200", domain: str | None = "rack1") -> dict:
    """A rack of N GB200 trays, each with four NDR ports on one InfiniBand switch."""
    gpus = {"model": model, "count": 4}
    if model == "NVIDIA GB300":
        gpus.update(memory_mib=284208, nvlink_gen=5)
    hosts_ = [
        {"name": f"tray{i:02d}", "profile": "gb200", **({"nvlink_domain": domain} if domain else {})}
        for i in range(1, n + 1)
    ]
    cabling = [
        {"host": h["name"], "netdev": f"ibp{k + 3}s0", "switch": "ib-sw1", "port": str(4 * i + k + 1)}
        for i, h in enumerate(hosts_)
        for k in range(4)
    ]
    return {
        "name": "gb200-lab",
        "hardware_profile": "gb200-nvl72",
        "host_profiles": {"gb200": {"gpus": gpus, "hcas": copy.deepcopy(CX7_IB)}},
        "hosts": hosts_,
        "switches": [
            {
                "name": "ib-sw1",
                "os": "ib",
                "model": "NVIDIA Quantum-2 QM9700",
                "ports": {"format": "{n}", "first": 1, "count": 64},
            }
        ],
        "cabling": cabling,
    }


# --- topology --------------------------------------------------------------------------------------


def test_gb200_trays_in_one_domain_and_what_hosts_see():
    topo = topology.normalise(nvl72_raw())
    h = topo["hosts"][0]
    assert (h["gpus"]["model"], h["gpus"]["count"], h["gpus"]["memory_mib"], h["gpus"]["nvlinks"]) == (
        "NVIDIA GB200",
        4,
        189471,
        18,
    )
    hws = [hardware.hardware_json(topo, x, kernel="6.1.0") for x in topo["hosts"]]
    doms = [hw["nvlink_domain"] for hw in hws]
    assert len({(d["cluster_uuid"], d["clique_id"]) for d in doms}) == 1  # one clique for the rack
    assert [d["address"] for d in doms] == [x["mgmt_ip"] for x in topo["hosts"]]
    vars_ = inventory.hosts_yml({"topology": topo})["all"]["children"]
    gpu_hosts = next(g["hosts"] for g in vars_.values() if "tray01" in (g.get("hosts") or {}))
    assert gpu_hosts["tray01"]["fabricops_nvlink_domain"] == "rack1"
    # the product reads the same inventory: one domain of three IP addresses, no refusal
    members = {
        n: {"domain": v["fabricops_nvlink_domain"], "address": v["ansible_host"]}
        for n, v in gpu_hosts.items()
    }
    got = product_imex.domain("tray01", members, 18, "gb200-nvl72")
    assert got["errors"] == [] and len(got["nodes"]) == 3


def test_hgx_hosts_have_no_domain_and_default_files_do_not_change():
    topo = topology.load()
    assert all(h["nvlink_domain"] is None for h in topo["hosts"])
    assert "nvlink_domain" not in hardware.hardware_json(topo, topo["hosts"][0], kernel="6.1.0")


@pytest.mark.parametrize(
    ("change", "where", "words"),
    [
        (
            lambda r: r["host_profiles"]["gb200"]["gpus"].update(model="NVIDIA H100 80GB HBM3", count=8),
            "hosts[0].nvlink_domain",
            "not an NVL72 compute tray",
        ),
        (
            lambda r: r["host_profiles"]["gb200"]["gpus"].update(count=8),
            "host_profiles.gb200.gpus.count",
            "is not the 4 GPUs of an NVL72 compute tray",
        ),
        (
            lambda r: r["host_profiles"]["gb200"]["gpus"].update(topology="direct"),
            "host_profiles.gb200.gpus",
            "NVLink 5 through the NVLink switch trays",
        ),
        (
            lambda r: r["hosts"][0].update(nvlink_domain="Rack 1"),
            "hosts[0].nvlink_domain",
            "NVLink domain name",
        ),
    ],
)
def test_domain_refusals_name_the_key(change, where, words):
    raw = nvl72_raw()
    change(raw)
    with pytest.raises(topology.TopologyError) as exc:
        topology.normalise(raw)
    assert exc.value.where == where and words in str(exc.value)


def test_at_most_18_trays_per_domain():
    raw = nvl72_raw(n=19)
    raw["switches"][0]["ports"]["count"] = 80
    with pytest.raises(topology.TopologyError) as exc:
        topology.normalise(raw)
    assert exc.value.where == "hosts[18].nvlink_domain" and "19 compute trays, more than the 18" in str(
        exc.value
    )
    raw["hosts"][18]["nvlink_domain"] = "rack2"
    assert len(topology.normalise(raw)["hosts"]) == 19


def test_gb300_needs_its_memory_named():
    raw = nvl72_raw(model="NVIDIA GB300")
    assert topology.normalise(raw)["hosts"][0]["gpus"]["memory_mib"] == 284208
    del raw["host_profiles"]["gb200"]["gpus"]["memory_mib"]
    with pytest.raises(topology.TopologyError, match="give memory_mib and nvlink_gen"):
        topology.normalise(raw)


# --- nvidia-smi ------------------------------------------------------------------------------------


@pytest.fixture
def tray(tmp_path, monkeypatch, capsys):
    """tray01's hardware.json under EMUL_ROOT; run(tool, *argv) -> (rc, stdout)."""
    topo = topology.normalise(nvl72_raw())
    hw = hardware.hardware_json(topo, topo["hosts"][0], kernel="6.1.0")
    f = tmp_path / "var/lib/emulated-hw/hardware.json"
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps(hw))
    monkeypatch.setenv("EMUL_ROOT", str(tmp_path))

    def run(*argv):
        rc = tools_main("nvidia-smi", list(argv))
        return rc, capsys.readouterr().out

    return type("Tray", (), {"root": tmp_path, "hw": hw, "run": staticmethod(run), "file": f})


def test_smi_names_memory_and_power_as_real_gb200_trays(tray):
    rc, out = tray.run("-L")
    assert rc == 0 and out.splitlines()[0].startswith("GPU 0: NVIDIA GB200 (UUID: GPU-")
    assert len(out.splitlines()) == 4
    _, table = tray.run()
    row = next(ln for ln in table.splitlines() if "MiB /" in ln)
    assert "/ 1200W" in row and "/ 189471MiB" in row
    _, csv = tray.run("--query-gpu=name,memory.total,power.limit", "--format=csv,noheader")
    assert csv.splitlines()[0] == "NVIDIA GB200, 189471 MiB, 1200.00 W"


def test_smi_nvlink_status_is_18_nvlink5_links(tray):
    _, out = tray.run("nvlink", "-s")
    lines = out.splitlines()
    # NVIDIA/k8s-test-infra#371: "GPU 0: NVIDIA GB200 (UUID: ...)" then "\t Link N: 53.125 GB/s" x 18
    assert lines[1] == "\t Link 0: 53.125 GB/s" and lines[18] == "\t Link 17: 53.125 GB/s"
    parsed = parse_nvlink(out)
    assert [g.name for g in parsed.gpus] == ["NVIDIA GB200"] * 4
    assert all(len(g.links) == 18 for g in parsed.gpus)


def test_smi_q_fabric_block_is_the_domain_clique(tray):
    _, out = tray.run("-q", "-i", "0")
    block = out[out.index("    Fabric\n") :].splitlines()[:5]
    dom = tray.hw["nvlink_domain"]
    assert [ln.split(":", 1)[1].strip() for ln in block[1:5]] == [
        "Completed",
        "Success",
        str(dom["clique_id"]),
        dom["cluster_uuid"],
    ]
    assert [ln.split(":")[0].strip() for ln in block[1:5]] == ["State", "Status", "CliqueId", "ClusterUUID"]
    assert "Product Architecture                  : Blackwell" in out


# --- the IMEX channel device -----------------------------------------------------------------------

KERNEL_DEVICES = "Character devices:\n  1 mem\n  4 tty\n 10 misc\n254 gpiochip\n\nBlock devices:\n  8 sd\n"


def reboot(root: Path) -> str:
    """A lab host restart as the channel sees it: /dev and /run are fresh tmpfs, /proc/devices is the
    kernel's again; then emulated-nvidia-driver.service runs driver_load (the unit the host boots)."""
    import shutil

    for d in ("dev", "run"):
        shutil.rmtree(root / d, ignore_errors=True)
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc/devices").write_text(KERNEL_DEVICES)
    return imex.driver_load(mount=False)


def test_proc_devices_lists_the_channel_major_and_the_product_reads_it(tray):
    reboot(tray.root)
    text = (tray.root / "proc/devices").read_text()
    assert "253 nvidia-caps-imex-channels\n254 gpiochip" in text  # highest free dynamic major, in order
    assert product_imex.proc_devices_major(text) == 253


def test_channel_vanishes_on_restart_without_the_module_option(tray):
    reboot(tray.root)
    assert not imex.channel_path().exists()
    # the role's mknod (fabricops.imex.channel_plan: create)
    major = product_imex.proc_devices_major((tray.root / "proc/devices").read_text())
    imex.create_channel(major)
    st = imex.channel_path().stat()
    assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 253 and stat.S_IMODE(st.st_mode) == 0o666
    assert "no channel created" in reboot(tray.root)
    assert not imex.channel_path().exists()


def test_channel_stays_with_the_module_option(tray):
    conf = tray.root / "etc/modprobe.d/nvidia-imex-channel.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("# managed\noptions nvidia NVreg_CreateImexChannel0=1\n")
    for _ in range(2):
        assert "channel0 created" in reboot(tray.root)
        st = imex.channel_path().stat()
        assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 253 and os.minor(st.st_rdev) == 0
    # what the role's stat probe then reads: nothing to do
    probe = subprocess.run(
        ["stat", "-c", "%F|%t|%T|%a", str(imex.channel_path())], capture_output=True, text=True
    )
    plan = product_imex.channel_plan(
        (tray.root / "proc/devices").read_text(), {"rc": probe.returncode, "stdout": probe.stdout}
    )
    assert plan["action"] == "none", plan
    conf.write_text("options nvidia NVreg_CreateImexChannel0=0\n")  # a later value wins: none at boot
    reboot(tray.root)
    assert not imex.channel_path().exists()


def test_no_channel_device_with_the_proprietary_module(tray):
    hw = dict(tray.hw, gpu_kernel_module="proprietary")
    tray.file.write_text(json.dumps(hw))
    assert "no IMEX channel device" in reboot(tray.root)
    assert product_imex.proc_devices_major((tray.root / "proc/devices").read_text()) is None


# --- nvidia-imex and nvidia-imex-ctl ---------------------------------------------------------------


@pytest.fixture
def domain(tmp_path):
    """Three trays of one domain sharing the fabric's imex directory (as the lab's bind does), each
    with the IMEX package's files and the role's config.cfg / nodes_config.cfg."""
    topo = topology.normalise(nvl72_raw())
    fabric = tmp_path / "fabric"
    (fabric / "imex/heartbeat").mkdir(parents=True)
    ips = [h["mgmt_ip"] for h in topo["hosts"]]
    values = product_imex.config_values(
        node_config_file="/etc/nvidia-imex/nodes_config.cfg",
        server_port=50000,
        cmd_enabled=True,
        cmd_port=50005,
        wait_for_quorum="RECOVERY",
    )
    roots = {}
    for h in topo["hosts"]:
        root = tmp_path / h["name"]
        (root / "var/lib/emulated-hw").mkdir(parents=True)
        (root / "var/lib/emulated-hw/hardware.json").write_text(
            json.dumps(hardware.hardware_json(topo, h, "6.1.0"))
        )
        os.symlink(fabric, root / "var/lib/emulated-fabric")
        (root / "usr/share/nvidia-imex").mkdir(parents=True)
        (root / imex.VERSION_FILE).write_text(f"{DRIVER}\n")
        (root / "etc/nvidia-imex").mkdir(parents=True)
        (root / "etc/nvidia-imex/config.cfg").write_text(product_imex.render_config(values))
        (root / "etc/nvidia-imex/nodes_config.cfg").write_text(product_imex.render_nodes(ips))
        roots[h["name"]] = root
    procs: list[subprocess.Popen] = []

    def start(name, *args):
        env = dict(os.environ, EMUL_ROOT=str(roots[name]), PYTHONPATH=str(SRC))
        code = (
            "import sys; from fabricops_lab.emul.services import main; "
            "sys.exit(main('nvidia-imex', sys.argv[1:]))"
        )
        p = subprocess.Popen(
            [sys.executable, "-c", code, "--foreground", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        return p

    def ctl(name, *args):
        env = dict(os.environ, EMUL_ROOT=str(roots[name]), PYTHONPATH=str(SRC))
        code = (
            "import sys; from fabricops_lab.emul.services import main; "
            "sys.exit(main('nvidia-imex-ctl', sys.argv[1:]))"
        )
        return subprocess.run(
            [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=30
        )

    d = type(
        "Domain", (), {"roots": roots, "ips": ips, "start": staticmethod(start), "ctl": staticmethod(ctl)}
    )
    yield d
    for p in procs:
        if p.poll() is None:
            p.terminate()
            p.communicate(timeout=10)


def node_lines(out):
    return [ln for ln in out.splitlines() if ln.startswith("Node #")]


def matrix(out):
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(" Nodes From\\To"))
    rows = []
    for ln in lines[at + 1 :]:
        if not ln.strip():
            break
        rows.append(ln.split()[1:])
    return rows


def test_ctl_refuses_without_a_running_imex(domain):
    r = domain.ctl("tray01", "-N")
    assert r.returncode == 1 and "Connection refused" in r.stderr


def test_ctl_N_text_and_json_when_every_node_runs(domain):
    for name in domain.roots:
        domain.start(name)
    assert wait_for(lambda: domain.ctl("tray02", "-N").stdout.endswith("Domain State: UP\n"))
    out = domain.ctl("tray02", "-N").stdout
    lines = out.splitlines()
    assert lines[0] == "Connectivity Table Legend:" and lines[8] == "C - Connected - Ready for operation"
    # the capture's layout: "Node #0   - 172.31.48.81    - READY                - Version: 570.172"
    assert node_lines(out)[0] == f"Node #0   - {domain.ips[0]:<16}- READY                - Version: 550.54"
    assert lines[lines.index("Nodes:") - 1].count("/") == 2  # 5/12/2025 06:08:10.580
    assert " Nodes From\\To  0   1   2" in lines
    assert "       0        C   C   C" in lines
    assert matrix(out) == [["C"] * 3] * 3
    data = json.loads(domain.ctl("tray01", "-N", "-j").stdout)
    assert data["status"] == "UP" and set(data["nodes"]) == {"0", "1", "2"}
    n0 = data["nodes"]["0"]
    assert (n0["status"], n0["host"]) == ("READY", domain.ips[0]) and "hostName" not in n0
    assert n0["connections"]["2"] == {"host": domain.ips[2], "status": "CONNECTED", "changed": True}
    assert json.loads(domain.ctl("tray01", "-N", "-j", "-H").stdout)["nodes"]["1"]["hostName"] == "tray02"
    assert domain.ctl("tray03", "-q").stdout == "READY\n"


def test_imex_peer_down_shows_on_every_other_node(domain):
    procs = {name: domain.start(name) for name in ("tray01", "tray02")}
    assert wait_for(
        lambda: (
            domain.ctl("tray01", "-N").returncode == 0
            and len([n for n in node_lines(domain.ctl("tray01", "-N").stdout) if "READY" in n]) == 2
        )
    )
    out = domain.ctl("tray01", "-N").stdout
    # tray03's IMEX never ran: UNAVAILABLE, never connected, no status from it
    assert "UNAVAILABLE" in node_lines(out)[2] and "Version: N/A" in node_lines(out)[2]
    assert matrix(out) == [["C", "C", "N"], ["C", "C", "N"], ["I", "I", "I"]]
    assert out.endswith("Domain State: DEGRADED\n")
    procs["tray02"].terminate()
    procs["tray02"].communicate(timeout=10)
    out = domain.ctl("tray01", "-N").stdout
    assert matrix(out) == [["C", "D", "N"], ["I", "I", "I"], ["I", "I", "I"]]
    data = json.loads(domain.ctl("tray01", "-N", "-j").stdout)
    assert data["nodes"]["1"]["status"] == "UNAVAILABLE"
    assert data["nodes"]["0"]["connections"]["1"]["status"] == "DISCONNECTED"
    assert data["nodes"]["1"]["connections"]["0"] == {
        "host": domain.ips[0],
        "status": "INVALID",
        "changed": False,
    }
    domain.start("tray02")
    domain.start("tray03")
    assert wait_for(lambda: domain.ctl("tray03", "-N").stdout.endswith("Domain State: UP\n"))


def test_imex_refuses_a_wrong_version_and_a_node_list_without_itself(domain):
    root = domain.roots["tray01"]
    (root / imex.VERSION_FILE).write_text("550.54.14\n")
    p = domain.start("tray01")
    _, err = p.communicate(timeout=20)
    assert p.returncode == 1 and "does not match the NVIDIA driver version 550.54.15" in err
    (root / imex.VERSION_FILE).write_text(f"{DRIVER}\n")
    (root / "etc/nvidia-imex/nodes_config.cfg").write_text(product_imex.render_nodes(domain.ips[1:]))
    p = domain.start("tray01")
    _, err = p.communicate(timeout=20)
    assert p.returncode == 1 and "none of this node's addresses" in err


def test_node_map_mismatch_shows_as_M(domain):
    root = domain.roots["tray02"]
    (root / "etc/nvidia-imex/nodes_config.cfg").write_text(product_imex.render_nodes(domain.ips[:2]))
    domain.start("tray01")
    domain.start("tray02")
    assert wait_for(lambda: "!M!" in domain.ctl("tray01", "-N").stdout)
    assert matrix(domain.ctl("tray01", "-N").stdout)[0] == ["C", "!M!", "N"]


# --- packaging and boot wiring ---------------------------------------------------------------------


def test_imex_package_and_the_driver_boot_unit(tmp_path, monkeypatch):
    debs = {d.package: d for d in fabric_services.imex_debs()}
    assert set(debs) == {"nvidia-imex-550"}
    files = debs["nvidia-imex-550"].files
    assert 'main("nvidia-imex-ctl"' in files["usr/bin/nvidia-imex-ctl"][0].decode()
    assert (
        b"ExecStart=/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg"
        in files["lib/systemd/system/nvidia-imex.service"][0]
    )
    assert (
        product_imex.parse_config(files["etc/nvidia-imex/config.cfg"][0].decode())["IMEX_CMD_PORT"] == "50005"
    )
    root = tmp_path / "root"
    fabric_services.install_into_root(root)
    assert (root / "etc/systemd/system/multi-user.target.wants/emulated-nvidia-driver.service").is_symlink()
    assert (
        'main("emulated-nvidia-driver-load"'
        in (root / "usr/local/sbin/emulated-nvidia-driver-load").read_text()
    )
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    argv = hosts.nspawn_argv({"name": "tray01"})
    assert f"--bind={paths.fabric_dir() / 'imex'}:/var/lib/emulated-fabric/imex" in argv


# --- faults ----------------------------------------------------------------------------------------


class Hosts:
    def __init__(self, active=True, channel=True):
        self.calls, self.active, self.channel = [], active, channel

    def exec(self, name, argv, check=True):
        self.calls.append((name, list(argv)))
        rc = 0
        if argv[:2] == ["systemctl", "is-active"]:
            rc = 0 if self.active else 3
        if argv[:2] == ["test", "-c"]:
            rc = 0 if self.channel else 1
        return subprocess.CompletedProcess(argv, rc, stdout="", stderr="")


@pytest.fixture
def gb_lab(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setattr(paths, "STATE_DIR", state)
    topo = topology.normalise(nvl72_raw())
    hgx = topology.load()["hosts"][0]
    lab = {
        "name": topo["name"],
        "topology": dict(topo, hosts=[*topo["hosts"], hgx]),
        "hosts": {},
        "switches": {},
    }
    for h in lab["topology"]["hosts"]:
        p = paths.host_dir(h["name"]) / "hw" / "hardware.json"
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps(hardware.hardware_json(topo, h, kernel="6.1.0"), indent=1))
    fake = Hosts()
    monkeypatch.setattr(faults, "_host_exec", fake.exec)
    monkeypatch.setattr(faults, "_resync", lambda name: None)
    return lab, fake


def test_fault_imex_peer_down_kills_and_clear_restarts(gb_lab):
    lab, fake = gb_lab
    rec = faults.inject("tray02", "imex-peer-down", [], lab=lab)
    assert rec["undo"] == [["systemctl", "restart", "nvidia-imex"]]
    kill = ["pkill", "--signal", "KILL", "-x", "nvidia-imex"]
    assert ("tray02", kill) in fake.calls
    faults.clear("tray02", lab=lab)
    assert fake.calls[-1] == ("tray02", ["systemctl", "restart", "nvidia-imex"])
    fake.active = False
    with pytest.raises(faults.FaultError, match="nvidia-imex is not running on tray02"):
        faults.inject("tray02", "imex-peer-down", [], lab=lab)
    with pytest.raises(faults.FaultError, match="not an NVL72 compute tray"):
        faults.inject("gpu01", "imex-peer-down", [], lab=lab)


def test_fault_imex_channel_missing_removes_and_clear_recreates(gb_lab):
    lab, fake = gb_lab
    faults.inject("tray01", "imex-channel-missing", [], lab=lab)
    assert ("tray01", ["rm", "-f", "/dev/nvidia-caps-imex-channels/channel0"]) in fake.calls
    faults.clear(lab=lab)
    assert fake.calls[-1] == ("tray01", ["/usr/local/sbin/emulated-nvidia-driver-load", "mknod-channel0"])
    fake.channel = False  # there was none: clear does not make one
    assert faults.inject("tray01", "imex-channel-missing", [], lab=lab)["undo"] == []


def test_fault_nvlink_tray_down_shows_inactive_links(gb_lab, monkeypatch, capsys, tmp_path):
    lab, _ = gb_lab
    faults.inject("tray03", "nvlink-tray-down", ["2"], lab=lab)
    hw = json.loads((paths.host_dir("tray03") / "hw" / "hardware.json").read_text())
    assert all(g["inactive_nvlinks"] == [2, 3] for g in hw["gpus"])
    root = tmp_path / "tray03"
    (root / "var/lib/emulated-hw").mkdir(parents=True)
    (root / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(hw))
    monkeypatch.setenv("EMUL_ROOT", str(root))
    tools_main("nvidia-smi", ["nvlink", "-s", "-i", "1"])
    out = capsys.readouterr().out.splitlines()
    assert (
        out[3:5] == ["\t Link 2: <inactive>", "\t Link 3: <inactive>"] and out[2] == "\t Link 1: 53.125 GB/s"
    )
    with pytest.raises(faults.FaultError, match=r"TRAY must be 1\.\.9"):
        faults.inject("tray03", "nvlink-tray-down", ["10"], lab=lab)
    faults.clear("tray03", lab=lab)
    hw = json.loads((paths.host_dir("tray03") / "hw" / "hardware.json").read_text())
    assert all(g["inactive_nvlinks"] == [] for g in hw["gpus"])


def test_nccl_runs_over_mnnvl_only_within_one_healthy_domain():
    from fabricops_lab.emul import nccl

    def tray(clique="uuid/1", channel=True, running=True):
        return {"host": "t", "gpus": [{"gen": 5, "links": 18}] * 4,
                "mnnvl": {"clique": clique, "channel": channel, "imex": running}}

    got = nccl.peak_busbw("all_reduce", [tray(), tray()], [{}, {}])
    assert got["mnnvl"] and got["busbw"] == pytest.approx(nccl.EFFICIENCY * 50.0 * 18)
    for trays, envs in [
        ([tray(), tray()], [{"NCCL_MNNVL_ENABLE": "0"}, {}]),  # the network on purpose
        ([tray(), tray(clique="other/2")], [{}, {}]),  # two NVLink domains
        ([tray(), tray(channel=False)], [{}, {}]),  # no IMEX channel to open
        ([tray(), tray(running=False)], [{}, {}]),  # IMEX down on one tray
        ([tray(), dict(tray(), mnnvl=None)], [{}, {}]),  # an HGX host
    ]:
        assert not nccl.mnnvl_used(trays, envs)
