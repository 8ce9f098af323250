"""Emulated multi-node NCCL (lab/emul/nccl.py): nccl-tests output, Open MPI's mpirun, the physics.

Two lab hosts are two EMUL_ROOT trees built from the default topology (hardware.json exactly as
``lab up`` writes it, in the host dir the lab's fault code edits, bound at var/lib/emulated-hw)
sharing one fabric directory (cabling.json, switches/*.json) as lab hosts share
/var/lib/emulated-fabric. mpirun runs in this process as gpu01; the one thing replaced is the SSH
hop: ``nccl.REMOTE`` runs gpu02's ``nccl-rank-info`` as a separate process in gpu02's tree (the
JSON crosses a process boundary, as it crosses ssh in the lab).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fabricops.parsers import nccl_tests
from fabricops_lab import faults, hardware, hosts, paths, topology
from fabricops_lab.emul import nccl

RUN = "import sys; from fabricops_lab.emul.tools import main; sys.exit(main(sys.argv[1], sys.argv[2:]))"
MPIRUN = [
    "--allow-run-as-root",
    "-np",
    "16",
    "-H",
    "gpu01:8,gpu02:8",
    "--bind-to",
    "none",
    "-x",
    "NCCL_DEBUG=INFO",
]
TEST = ["-b", "8", "-e", "1G", "-f", "2", "-g", "1"]
LINE_GBS = 400 / 8
RING_2RAIL = nccl.EFFICIENCY * 2 * LINE_GBS  # 94 GB/s: the figure at line rate


def _tree(tmp: Path, monkeypatch) -> Path:
    topo = topology.resolve(None, None)
    monkeypatch.setattr(paths, "STATE_DIR", tmp / "state")
    fab = paths.fabric_dir()
    (fab / "switches").mkdir(parents=True)
    (fab / "flows").mkdir()
    (fab / "cabling.json").write_text(json.dumps(hardware.cabling_json(topo)))
    for sw in topo["switches"]:
        ports = {p: {"link": "up"} for p in sw["ports"]}
        (fab / "switches" / f"{sw['name']}.json").write_text(json.dumps({"name": sw["name"], "ports": ports}))
    for h in topo["hosts"][:2]:
        root = tmp / h["name"]
        hw_dir = paths.host_dir(h["name"]) / "hw"
        hw_dir.mkdir(parents=True)
        (hw_dir / "hardware.json").write_text(
            json.dumps(hardware.hardware_json(topo, h, kernel="6.1.0-18-amd64"))
        )
        (root / "var/lib").mkdir(parents=True)
        os.symlink(hw_dir, root / "var/lib/emulated-hw")
        os.symlink(fab, root / "var/lib/emulated-fabric")
        (fab / "hosts" / h["name"]).mkdir(parents=True)
        (fab / "hosts" / h["name"] / "addresses.json").write_text(
            json.dumps(hardware.addresses_json(topo, h))
        )
        hosts.install_nccl(root)
        # /etc/nccl.conf as the nccl_profile role writes it for the lab's IB rails
        (root / "etc").mkdir()
        (root / "etc/nccl.conf").write_text(
            '# NCCL profile "ib" (fabricops.fabric.nccl_profile)\n'
            "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1\nNCCL_IB_DISABLE=0\n"
        )
    monkeypatch.setenv("EMUL_ROOT", str(tmp / "gpu01"))
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")

    def remote(host: str, argv: list[str]) -> tuple[int, str, str]:
        env = dict(os.environ, EMUL_ROOT=str(tmp / host), PYTHONPATH=os.pathsep.join(sys.path))
        proc = subprocess.run(
            [sys.executable, "-c", RUN, "nccl-rank-info", *argv[1:]],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        return proc.returncode, proc.stdout, proc.stderr

    monkeypatch.setattr(nccl, "REMOTE", remote)
    return tmp


@pytest.fixture
def lab(tmp_path, monkeypatch):
    return _tree(tmp_path, monkeypatch)


def _fault(host: str, plan_fn, args: list[str]) -> None:
    """Apply a lab fault's planned hardware.json as `fabricops lab fault` writes it."""
    plan = plan_fn(host, args)
    for path, data in plan.files.items():
        Path(path).write_bytes(data)


def _edit_hw(host: str, fn) -> None:
    f = paths.host_dir(host) / "hw" / "hardware.json"
    hw = json.loads(f.read_text())
    fn(hw)
    f.write_text(json.dumps(hw))


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = nccl.mpirun(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _peak(out: str) -> float:
    rec = nccl_tests.parse(out)
    assert rec.complete
    return rec.results[-1].busbw


# --- healthy --------------------------------------------------------------------------------


def test_healthy_two_rail_ring_parses_and_follows_the_line_rate(lab, capsys):
    rc, out, err = _run(capsys, [*MPIRUN, "-x", "NCCL_ALGO=Ring", "all_reduce_perf", *TEST])
    assert rc == 0, err
    rec = nccl_tests.parse(out)
    assert rec.format == "text" and rec.collective == "all_reduce" and rec.collective_from == "header"
    assert rec.ranks == 16 and {d.host for d in rec.devices} == {"gpu01", "gpu02"}
    assert (
        rec.devices[8].host == "gpu02"
        and rec.devices[8].device == 0
        and rec.devices[8].bus_id == "0000:18:00"
    )
    assert rec.nccl_version == 22304 and rec.max_bytes == 1 << 30 and rec.out_of_bounds == 0
    peak = rec.results[-1].busbw
    # E x 2 rails x the perftest physics' achievable NDR rate (0.982 x 400 Gb/s): 92.3 GB/s
    assert 0.96 * RING_2RAIL <= peak <= RING_2RAIL
    busbw = [r.busbw for r in rec.results]
    assert busbw[0] < 0.01 and busbw[14] < 0.5 * peak < busbw[-4]  # rises with size like the real table
    assert all(b2 >= b1 * 0.99 for b1, b2 in itertools.pairwise(busbw))
    assert rec.results[-1].algbw == pytest.approx(peak / (2 * 15 / 16), rel=0.01)
    assert 0 < rec.avg_busbw < peak
    # NCCL's own lines (NCCL 2.23.4 formats); the GPU Direct RDMA lines are NCCL_NET only, which
    # NCCL's default NCCL_DEBUG_SUBSYS (INIT,BOOTSTRAP,ENV) leaves out
    assert "GPU Direct RDMA" not in out and "NET/IB : Using" in out
    argv = [*MPIRUN, "-x", "NCCL_DEBUG_SUBSYS=INIT,NET", "-x", "NCCL_ALGO=Ring", "all_reduce_perf", *TEST]
    rc, out, err = _run(capsys, argv)
    assert rc == 0 and "Bootstrap : Using" not in out  # BOOTSTRAP is no longer asked for
    assert (
        "gpu01:" in out
        and " [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:198.51.100." in out
    )
    assert "NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'" in out
    assert "NCCL INFO DMA-BUF is available on GPU device 0" in out
    assert "NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA" in out
    assert "NCCL INFO Channel 01/0 : 1[1] -> 9[1] [send] via NET/IB/1/GDRDMA" in out


def test_json_output_is_what_nccl_tests_writes_and_parses(lab, capsys, tmp_path):
    target = tmp_path / "run.json"
    rc, out, _ = _run(capsys, [*MPIRUN, "-x", "NCCL_ALGO=Ring", "all_reduce_perf", *TEST, "-J", str(target)])
    assert rc == 0 and out.startswith(f"# Writing JSON output to {target}\n")
    doc = json.loads(target.read_text())
    assert list(doc)[:5] == ["version", "start_time", "args", "env", "nccl_version"]
    assert doc["config"]["devices"][8]["hostname"] == "gpu02" and doc["results"][0]["root"] == "    -1"
    rec = nccl_tests.parse(target.read_text())
    text = nccl_tests.parse(out)
    assert rec.format == "json" and rec.collective == "all_reduce" and rec.ranks == 16
    assert rec.results[-1].busbw == pytest.approx(text.results[-1].busbw, abs=0.006)
    # a second run does not overwrite: nccl-tests opens "wx" and tries FILE.0
    _run(capsys, [*MPIRUN, "all_reduce_perf", *TEST, "-J", str(target)])
    assert (tmp_path / "run.json.0").exists()


def test_all_gather_and_reduce_scatter_have_the_ring_peak_and_no_tree(lab, capsys):
    ring = _peak(_run(capsys, [*MPIRUN, "-x", "NCCL_ALGO=Ring", "all_reduce_perf", *TEST])[1])
    for binary, coll in (("all_gather_perf", "all_gather"), ("reduce_scatter_perf", "reduce_scatter")):
        rc, out, _ = _run(capsys, [*MPIRUN, binary, *TEST])  # no NCCL_ALGO: still Ring
        rec = nccl_tests.parse(out)
        assert rc == 0 and rec.collective == coll
        assert rec.results[-1].busbw == pytest.approx(ring, rel=0.02)
        assert rec.results[-1].algbw == pytest.approx(rec.results[-1].busbw * 16 / 15, rel=0.01)
        assert rec.results[0].bytes == 0  # 8 B over 16 ranks rounds down to nothing, as the real test


# --- the physics ----------------------------------------------------------------------------


def test_two_hosts_without_ring_report_tree_inflated_busbw(lab, capsys):
    ring = _peak(_run(capsys, [*MPIRUN, "-x", "NCCL_ALGO=Ring", "all_reduce_perf", *TEST])[1])
    tree = _peak(_run(capsys, [*MPIRUN, "all_reduce_perf", *TEST])[1])
    assert tree == pytest.approx(nccl.TREE_INFLATION * ring, rel=0.02)
    assert tree > RING_2RAIL  # visibly more than the NICs carry (nccl-tests#196)


def test_a_port_at_2x_lowers_busbw_by_that_rail(lab, capsys):
    _fault("gpu02", faults.plan_port_width, ["mlx5_1", "2X"])
    rc, out, _ = _run(capsys, [*MPIRUN, "-x", "NCCL_ALGO=Ring", "all_reduce_perf", *TEST])
    peak = _peak(out)
    # min-rail rule: both rails run at the slow one's 200 Gb/s
    assert rc == 0 and 0.96 * RING_2RAIL / 2 <= peak <= RING_2RAIL / 2


def test_nccl_ib_hca_selects_the_rails(lab, capsys):
    rc, out, _ = _run(
        capsys, [*MPIRUN, "-x", "NCCL_ALGO=Ring", "-x", "NCCL_IB_HCA==mlx5_0", "all_reduce_perf", *TEST]
    )
    assert rc == 0 and "NET/IB : Using [0]mlx5_0:1/IB ; OOB" in out and "mlx5_1:1/IB" not in out
    assert 0.96 * RING_2RAIL / 2 <= _peak(out) <= RING_2RAIL / 2


def test_hca_selection_rules_follow_nccl():
    assert nccl.hca_selected("mlx5_1", 1, None)
    assert nccl.hca_selected("mlx5_10", 1, "mlx5_1")  # a prefix without '='
    assert not nccl.hca_selected("mlx5_10", 1, "=mlx5_1")
    assert not nccl.hca_selected("mlx5_1", 1, "^mlx5_1")
    assert nccl.hca_selected("mlx5_0", 1, "^=mlx5_1")
    assert not nccl.hca_selected("mlx5_0", 2, "=mlx5_0:1")
    assert nccl.algo_allows_tree(None) and not nccl.algo_allows_tree("Ring")
    assert not nccl.algo_allows_tree("^tree") and nccl.algo_allows_tree("Tree,Ring")


def test_no_gpudirect_prints_disabled_and_bounces_through_host_memory(lab, capsys):
    ring = _peak(_run(capsys, [*MPIRUN, "-x", "NCCL_ALGO=Ring", "all_reduce_perf", *TEST])[1])
    # proprietary kernel module: no DMA-BUF; nvidia_peermem not loaded
    _edit_hw("gpu02", lambda hw: hw.update(gpu_kernel_module="proprietary"))
    argv = [*MPIRUN, "-x", "NCCL_ALGO=Ring", "-x", "NCCL_DEBUG_SUBSYS=^COLL", "all_reduce_perf", *TEST]
    rc, out, _ = _run(capsys, argv)
    assert rc == 0
    assert "gpu02:" in out and "NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'" in out
    gpu02 = [ln for ln in out.splitlines() if ln.startswith("gpu02:") and "Channel" in ln]
    assert gpu02 and not any("GDRDMA" in ln for ln in gpu02)
    peak = _peak(out)
    assert (
        peak == pytest.approx(nccl.EFFICIENCY * 2 * nccl.HOST_BOUNCE * LINE_GBS, rel=0.02)
        and peak < 0.7 * ring
    )


def test_socket_transport_when_ib_is_disabled(lab, capsys):
    rc, out, _ = _run(capsys, [*MPIRUN, "-x", "NCCL_IB_DISABLE=1", "all_reduce_perf", *TEST])
    assert rc == 0 and "NET/Socket : Using [0]eth0:" in out and "via NET/Socket/0" in out
    assert _peak(out) < 5


def test_nvlink_table_agrees_with_the_model():
    data = yaml.safe_load((Path(__file__).parents[3] / "src/fabricops/model/data/nvlink.yml").read_text())
    assert {int(e["version"]): float(e["per_link_gbs"]) for e in data["nvlink"]} == nccl.NVLINK_PER_LINK_GBS


# --- failures as the real job shows them -----------------------------------------------------


def test_missing_gpu_fails_with_the_real_text(lab, capsys):
    _fault("gpu02", faults.plan_gpu_missing, ["3"])
    rc, out, err = _run(capsys, [*MPIRUN, "all_reduce_perf", *TEST])
    assert rc != 0
    assert "Invalid number of GPUs: 8 requested but only 7 were found." in err
    assert " .. gpu02 pid " in out and ": Test failure common.cu:1206" in out
    assert "Process name: [[" in err and ",1],15]" in err and "exited with non-zero status" in err
    with pytest.raises(nccl_tests.ParseError):
        nccl_tests.parse(out)


def test_mtu_mismatch_hangs(lab, tmp_path):
    _edit_hw("gpu02", lambda hw: hw["hcas"][0]["ports"][0].update(active_mtu=2048))
    script = tmp_path / "job.py"
    script.write_text(
        "import os, subprocess, sys\n"
        "from fabricops_lab.emul import nccl\n"
        "def remote(host, argv):\n"
        f"    env = dict(os.environ, EMUL_ROOT={str(tmp_path)!r} + '/' + host)\n"
        f"    p = subprocess.run([sys.executable, '-c', {RUN!r}, 'nccl-rank-info', *argv[1:]],"
        " capture_output=True, text=True, env=env)\n"
        "    return p.returncode, p.stdout, p.stderr\n"
        "nccl.REMOTE = remote\n"
        "sys.exit(nccl.mpirun(sys.argv[1:]))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        subprocess.run(
            [sys.executable, str(script), *MPIRUN, "-x", "NCCL_ALGO=Ring", "all_reduce_perf", *TEST],
            capture_output=True,
            text=True,
            env=env,
            timeout=6,
        )
    out = exc.value.stdout or b""
    out = out.decode() if isinstance(out, bytes) else out
    assert "Init COMPLETE" in out and "out-of-place" in out
    assert "float     sum" not in out and "Avg bus bandwidth" not in out


def test_mpirun_refuses_root_without_the_override(lab, capsys, monkeypatch):
    monkeypatch.setattr(nccl.os, "geteuid", lambda: 0)
    monkeypatch.delenv("OMPI_ALLOW_RUN_AS_ROOT", raising=False)
    rc, out, err = _run(
        capsys, [a for a in MPIRUN if a != "--allow-run-as-root"] + ["all_reduce_perf", *TEST]
    )
    assert rc == 1 and out == ""
    assert (
        "mpirun has detected an attempt to run as root." in err and "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" in err
    )
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT", "1")
    rc, _, _ = _run(capsys, [a for a in MPIRUN if a != "--allow-run-as-root"] + ["all_reduce_perf", *TEST])
    assert rc == 1  # both variables are needed
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    rc, out, _ = _run(capsys, [a for a in MPIRUN if a != "--allow-run-as-root"] + ["all_reduce_perf", *TEST])
    assert rc == 0 and "Avg bus bandwidth" in out


def test_mpirun_refuses_more_ranks_than_slots(lab, capsys):
    argv = ["--allow-run-as-root", "-np", "17", "-H", "gpu01:8,gpu02:8", "all_reduce_perf", *TEST]
    rc, out, err = _run(capsys, argv)
    assert rc == 1 and out == ""
    assert "There are not enough slots available in the system to satisfy the 17\nslots" in err
    assert "\n  all_reduce_perf\n" in err


def test_mpirun_reports_a_host_it_cannot_reach(lab, capsys, monkeypatch):
    monkeypatch.setattr(
        nccl,
        "REMOTE",
        lambda host, argv: (255, "", f"ssh: Could not resolve hostname {host}: Name or service not known\n"),
    )
    rc, out, err = _run(
        capsys, ["--allow-run-as-root", "-np", "16", "-H", "gpu01:8,gpu09:8", "all_reduce_perf", *TEST]
    )
    assert rc == 1 and out == ""
    assert "ssh: Could not resolve hostname gpu09" in err
    assert "ORTE was unable to reliably start one or more daemons." in err


def test_the_ssh_hop_is_batch_mode_ssh(monkeypatch):
    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 0, "{}", "")

    monkeypatch.setattr(nccl, "REMOTE", None)
    monkeypatch.setattr(nccl.subprocess, "run", fake_run)
    nccl._reach("gpu02", [nccl.RANK_INFO, "all_reduce_perf"])
    assert seen["cmd"][:4] == ["ssh", "-o", "BatchMode=yes", "gpu02"]
    assert seen["cmd"][4] == f"{nccl.RANK_INFO} all_reduce_perf"


def test_missing_library_fails_like_the_loader(lab, capsys):
    (lab / "gpu02/usr/lib/x86_64-linux-gnu/libnccl.so.2").unlink()
    rc, _, err = _run(capsys, [*MPIRUN, "all_reduce_perf", *TEST])
    assert rc == 127 and "libnccl.so.2: cannot open shared object file" in err


# --- the lab's installs and in-rack SSH -------------------------------------------------------


def test_install_nccl_puts_the_library_and_tools_in_place(tmp_path, monkeypatch):
    hosts.install_nccl(tmp_path)
    lib = tmp_path / "usr/lib/x86_64-linux-gnu"
    assert (lib / "libnccl.so.2").is_symlink() and os.readlink(lib / "libnccl.so.2") == "libnccl.so.2.23.4"
    monkeypatch.setenv("EMUL_ROOT", str(tmp_path))
    assert nccl.nccl_library() == "2.23.4"
    for tool in (
        "usr/bin/mpirun",
        "usr/local/bin/all_reduce_perf",
        "usr/local/bin/all_gather_perf",
        "usr/local/bin/reduce_scatter_perf",
        "usr/lib/emulated-hw/bin/nccl-rank-info",
    ):
        f = tmp_path / tool
        assert os.access(f, os.X_OK) and f'main("{f.name}"' in f.read_text()
    hosts.install_nccl(tmp_path)  # again: idempotent


def test_rack_ssh_material_lists_every_host_with_its_key(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    topo = topology.resolve(None, None)
    key = hosts.ensure_rack_key()
    assert hosts.ensure_rack_key() == key and key.with_suffix(".pub").exists()  # generated once
    first = key.read_text()
    hosts.ensure_rack_key()
    assert key.read_text() == first
    files = hosts.rack_ssh_files(topo, key, "ssh-ed25519 AAAAcontroller fabricops-lab")
    assert files["id_ed25519"] == (first, 0o600)
    auth = files["authorized_keys"][0].splitlines()
    assert auth[0].endswith("fabricops-lab") and auth[1] == key.with_suffix(".pub").read_text().strip()
    known = files["known_hosts"][0].splitlines()
    assert len(known) == len(topo["hosts"])
    for h, line in zip(topo["hosts"], known, strict=True):
        pub = (paths.host_dir(h["name"]) / "ssh/ssh_host_ed25519_key.pub").read_text().split()
        assert line == f"{h['name']},{h['mgmt_ip']} {pub[0]} {pub[1]}"
    etc = hosts.etc_hosts(topo, "gpu01")
    assert all(f"{h['mgmt_ip']}\t{h['name']}" in etc for h in topo["hosts"])


def _acs_redirect_above_gpu0(hw: dict) -> None:
    """The PCIe tree as hardware.json "pcie" has it (SPEC-19 C, flat devices with bus ranges):
    the acs-enabled fault's ReqRedir+ CmpltRedir+ on the switch downstream port above GPU0."""
    on = {"SrcValid": True, "ReqRedir": True, "CmpltRedir": True}
    hw["pcie"] = {"devices": [
        {"bdf": "0000:17:00.0", "kind": "downstream_port", "bus": {"primary": 0x16, "secondary": 0x18,
                                                                   "subordinate": 0x18}, "acs_ctl": on},
        {"bdf": "0000:17:01.0", "kind": "downstream_port", "bus": {"primary": 0x16, "secondary": 0x1a,
                                                                   "subordinate": 0x1a}, "acs_ctl": {}},
        {"bdf": "0000:18:00.0", "kind": "gpu"}, {"bdf": "0000:1a:00.0", "kind": "hca"}],
        "iommu_groups": {"10": "identity"}}


def test_acs_redirect_on_a_gpu_nic_path_slows_that_rail_and_nccl_still_says_enabled(lab, capsys):
    _edit_hw("gpu02", _acs_redirect_above_gpu0)
    argv = [*MPIRUN, "-x", "NCCL_ALGO=Ring", "-x", "NCCL_DEBUG_SUBSYS=ALL", "all_reduce_perf", *TEST]
    rc, out, _ = _run(capsys, argv)
    assert rc == 0 and "gpu02:" in out and "NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'" in out
    # NCCL cannot see ACS: it enables GPUDirect RDMA and the hardware sends P2P via the root complex
    assert "NCCL INFO NET/IB : GPU Direct RDMA Disabled" not in out and "via NET/IB/0/GDRDMA" in out
    assert _peak(out) == pytest.approx(nccl.EFFICIENCY * 2 * nccl.HOST_BOUNCE * LINE_GBS, rel=0.02)


def test_iommu_translation_counts_as_no_gpudirect_path(lab, capsys):
    _edit_hw("gpu01", lambda hw: hw.update(pcie={"devices": [], "iommu_groups": {"10": "DMA-FQ"}}))
    rc, out, _ = _run(capsys, [*MPIRUN, "-x", "NCCL_ALGO=Ring", "all_reduce_perf", *TEST])
    assert rc == 0
    assert _peak(out) == pytest.approx(nccl.EFFICIENCY * 2 * nccl.HOST_BOUNCE * LINE_GBS, rel=0.02)


def test_a_rail_without_a_data_path_is_a_network_error(lab, capsys):
    sw = paths.fabric_dir() / "switches/ib-sw1.json"
    doc = json.loads(sw.read_text())
    doc["ports"]["3"]["link"] = "down"  # gpu02 mlx5_0's switch port
    sw.write_text(json.dumps(doc))
    rc, out, err = _run(capsys, [*MPIRUN, "-x", "NCCL_ALGO=Ring", "all_reduce_perf", *TEST])
    assert rc == 3 and "NCCL WARN NET/IB : Got completion from peer" in out and "status=12" in out
    assert "Test NCCL failure" in out and "exited with non-zero status" in err


def test_the_binary_alone_runs_one_process_over_nvlink(lab, capsys):
    rc = nccl.all_reduce_perf(["-b", "8", "-e", "256M", "-f", "2", "-g", "8"])
    rec = nccl_tests.parse(capsys.readouterr().out)
    assert rc == 0 and rec.ranks == 8 and {d.host for d in rec.devices} == {"gpu01"}
    assert rec.results[-1].busbw == pytest.approx(nccl.EFFICIENCY * 18 * 25, rel=0.05)  # NVLink 4: 450 GB/s


def test_a_lossy_roce_rail_lowers_busbw(lab, capsys):
    # the RoCE rail with the hosts' and switches' QoS untouched: no PFC, no ECN (a lossy path)
    argv = [*MPIRUN, "-x", "NCCL_ALGO=Ring", "-x", "NCCL_IB_HCA==mlx5_2", "all_reduce_perf", *TEST]
    rc, out, _ = _run(capsys, argv)
    assert rc == 0 and "NET/IB : Using [0]mlx5_2:1/RoCE ; OOB" in out
    assert _peak(out) < 0.5 * nccl.EFFICIENCY * LINE_GBS
