"""The multi-node NCCL phase (fabricops.verify.nccl_phase) against a fake transport.

The fake ``run`` answers the launcher line with nccl-tests text in the real format (header, Rank lines,
``HOST:PID:TID [DEV] NCCL INFO`` lines, the size table, footer), its busbw from the same physics the
lab emulator uses (SPEC-19 D): 0.94 x rails used x the slowest rail's GB/s, x1.6 on two hosts without
NCCL_ALGO=Ring (Tree, nccl-tests#196). It reads only the command, as mpirun would.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from fabricops.model import busbw as model
from fabricops.verify import engine
from fabricops.verify.engine import Options, verify
from fabricops.verify.expect import (
    NCCL_LAUNCHER_DEFAULT,
    NcclSettings,
    NcclSettingsError,
    host_expect,
    nccl_settings,
)
from fabricops.verify.nccl_phase import build_command, parse_nccl_info, phase, plan_rails

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-log"
HOSTS = ["gpu01", "gpu02", "gpu03", "gpu04"]
GBS = 50.0  # NDR 400 Gb/s


def hostvars(hosts=HOSTS, **extra):
    cabling = [
        {
            "host": h,
            "hca": hca,
            "port": 1,
            "switch": "ib1",
            "switch_port": str(i * 2 + j + 1),
            "link_layer": "InfiniBand",
            "speed": "NDR",
        }
        for i, h in enumerate(hosts)
        for j, hca in enumerate(("mlx5_0", "mlx5_1"))
    ]
    hv = {
        "fabricops_hardware_profile": "hgx-h100-ndr",
        "fabricops_cabling": cabling,
        "nccl_profile_name": "ib",
    }
    hv.update(extra)
    return {h: dict(hv) for h in hosts}


class FakeMpi:
    """mpirun + nccl-tests, from the command line only. ``rates``: (host, hca) -> GB/s."""

    def __init__(self, hosts=HOSTS, rates=None, gdr=None, rc=0, hang=False, garbage=False):
        self.rates = {(h, hca): GBS for h in hosts for hca in ("mlx5_0", "mlx5_1")}
        self.rates.update(rates or {})
        self.gdr = gdr or {}  # host -> False: Disabled
        self.calls: list[tuple[str, str, float]] = []
        self.rc, self.hang, self.garbage = rc, hang, garbage

    def __call__(self, host, command, timeout=60):
        self.calls.append((host, command, timeout))
        if self.hang:
            return {
                "rc": 124,
                "stdout": "gpu01:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n",
                "stderr": "",
            }
        if self.rc:
            # a rank on a missing GPU (nccl-tests src/common.h CUDACHECK), then mpirun's own banner
            return {
                "rc": self.rc,
                "stdout": "gpu03: Test CUDA failure common.cu:892 'invalid device ordinal'\n",
                "stderr": "-" * 74 + "\nPrimary job  terminated normally, but 1 process returned\n"
                "a non-zero exit code. Per user-direction, the job has been aborted.\n" + "-" * 74 + "\n",
            }
        if self.garbage:
            return {"rc": 0, "stdout": "hello\n", "stderr": ""}
        argv = shlex.split(command)
        hostslots = argv[argv.index("-H") + 1].split(",")
        hosts = [hs.split(":")[0] for hs in hostslots]
        slots = int(hostslots[0].split(":")[1])
        env = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-x")
        hcas = ["mlx5_0", "mlx5_1"]
        if "NCCL_IB_HCA" in env:
            hcas = [env["NCCL_IB_HCA"].lstrip("=")]
        r = min(self.rates[(h, c)] for h in hosts for c in hcas)
        peak = min(0.94 * len(hcas) * r, 450 * 0.94)
        if len(hosts) == 2 and env.get("NCCL_ALGO") != "Ring":
            peak *= 1.6
        binary = next(a for a in argv if a.endswith("_perf"))
        max_bytes = 1 << 30
        return {"rc": 0, "stdout": nccl_text(hosts, slots, peak, binary, max_bytes, self.gdr), "stderr": ""}


def nccl_text(hosts, slots, peak, binary, max_bytes, gdr):
    coll = binary.rsplit("/", 1)[-1].removesuffix("_perf")
    out = [
        f"# Collective test starting: {binary.rsplit('/', 1)[-1]}",
        f"# nThread 1 nGpus 1 minBytes 8 maxBytes {max_bytes} step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    rank = 0
    for h in hosts:
        for d in range(slots):
            out.append(
                f"#  Rank {rank:>2} Group  0 Pid {1000 + rank:>6} on {h:>10} device {d:>2} "
                f"[0000:{0x18 + d:02x}:00] "
                "NVIDIA H100 80GB HBM3"
            )
            rank += 1
    for i, h in enumerate(hosts):
        pre = f"{h}:{2000 + i}:{3000 + i} [0] NCCL INFO"
        on = gdr.get(h, True)
        out.append(f"{pre} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.{i + 1}<0>")
        if on:
            out.append(f"{pre} DMA-BUF is available on GPU device 0")
        for k, hca in enumerate(("mlx5_0", "mlx5_1")):
            out.append(
                f"{pre} NET/IB : GPU Direct RDMA {'Enabled' if on else 'Disabled'} for HCA {k} '{hca}'"
            )
            out.append(
                f"{pre} Channel 0{k}/0 : {i * slots}[0] -> {((i + 1) % len(hosts)) * slots}[0] [send] "
                f"via NET/IB/{k}" + ("/GDRDMA" if on else "")
            )
    out += [
        "#",
        "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)",
    ]
    n = len(hosts) * slots
    factor = 2 * (n - 1) / n if coll == "all_reduce" else (n - 1) / n
    size = 8
    total = 0.0
    rows = 0
    while size <= max_bytes:
        bus = peak * size / (size + 4e6)  # latency + bandwidth: rises with size like the real table
        alg = bus / factor
        t = size / (alg * 1e3) if alg else 0
        out.append(
            f"{size:>12} {size // 4:>13}     float     sum      -1 {t:>8.1f} {alg:>7.2f} {bus:>7.2f}      0 "
            f"{t:>8.1f} {alg:>7.2f} {bus:>7.2f}      0"
        )
        total += bus
        rows += 1
        size *= 2
    out += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {total / rows:.3f}", "#"]
    return "\n".join(out) + "\n"


def run_phase(fake, hosts=HOSTS, hv=None, only="nccl"):
    hv = hv or hostvars(hosts)
    ibstat = {"rc": 1, "stdout": "", "stderr": "not asked"}

    def run(host, command, timeout=60):
        if command == "ibstat":
            return ibstat
        return fake(host, command, timeout)

    return verify(run, hosts, hv, Options(only=only))


def by(vr, check):
    return [r for r in vr.results if r.check == check]


# --- command -------------------------------------------------------------------------------------


def test_command_is_built_exactly_four_hosts_no_ring():
    s = nccl_settings({})
    cmd = build_command(s, HOSTS, 8, "all_reduce")
    assert cmd == (
        "mpirun --allow-run-as-root -np 32 -H gpu01:8,gpu02:8,gpu03:8,gpu04:8 --bind-to none "
        "-x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET all_reduce_perf -b 8 -e 1G -f 2 -g 1"
    )


def test_two_hosts_force_ring_and_subset_names_one_rail():
    s = nccl_settings({"fabricops_verify_nccl_tests_dir": "/opt/nccl-tests/bin"})
    cmd = build_command(s, ["gpu01", "gpu02"], 8, "all_gather", hca="mlx5_1")
    assert cmd == (
        "mpirun --allow-run-as-root -np 16 -H gpu01:8,gpu02:8 --bind-to none -x NCCL_DEBUG=INFO "
        "-x NCCL_DEBUG_SUBSYS=INIT,NET -x NCCL_ALGO=Ring -x NCCL_IB_HCA==mlx5_1 "
        "/opt/nccl-tests/bin/all_gather_perf -b 8 -e 1G -f 2 -g 1"
    )
    assert "NCCL_ALGO" not in build_command(s, HOSTS[:3], 8, "all_reduce")


SRUN = "env {env} srun -N {nodes} --ntasks-per-node {ppn} -w {hosts} {binary} -e {max_bytes}"


def test_srun_template_with_bare_placeholders_builds_one_word_per_value():
    s = nccl_settings({"fabricops_verify_nccl_launcher": SRUN})
    cmd = build_command(s, ["gpu-a.rack1", "gpu_b"], 4, "all_reduce")
    assert cmd == (
        "env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_ALGO=Ring srun -N 2 --ntasks-per-node 4 "
        "-w gpu-a.rack1,gpu_b all_reduce_perf -e 1G"
    )
    assert shlex.split(cmd)[10] == "gpu-a.rack1,gpu_b"


def test_json_template_reads_the_result_file_in_the_same_call():
    s = nccl_settings({"fabricops_verify_nccl_launcher": NCCL_LAUNCHER_DEFAULT + " -J {json}"})
    cmd = build_command(s, HOSTS[:2], 8, "all_reduce")
    assert cmd.startswith("fo_nccl_dir=$(mktemp -d /tmp/fabricops-nccl.XXXXXX) || exit 1; mpirun ")
    assert '-J "$fo_nccl_dir/result.json"; fo_rc=$?;' in cmd and cmd.endswith("exit $fo_rc")


# --- judgement -----------------------------------------------------------------------------------


def test_healthy_four_hosts_pass_within_the_band():
    fake = FakeMpi()
    vr = run_phase(fake)
    [b] = by(vr, "nccl_busbw")
    assert b.status == "pass", b.message
    assert b.category == "nccl" and b.device == "all_reduce" and b.host == "gpu01,gpu02,gpu03,gpu04"
    assert b.measured == pytest.approx(94.0, abs=0.5)  # 0.94 x 2 rails x 50 GB/s
    assert b.threshold == pytest.approx(87.4)  # 2 rails x 43.7 GB/s per 400G NIC (46 less 5 %)
    assert "min(2 rails x 400 Gb/s / 8 = 100 GB/s, NVLink 4 per-GPU 450 GB/s)" in b.details["prediction"]
    gdr = by(vr, "nccl_gdr")
    assert {(r.host, r.device, r.status) for r in gdr} == {
        (h, c, "pass") for h in HOSTS for c in ("mlx5_0", "mlx5_1")
    }
    assert not by(vr, "nccl_rail") and len(fake.calls) == 1
    assert fake.calls[0][0] == "gpu01"  # launched from the first host
    assert all(r.category == "nccl" for r in vr.results)  # --only nccl: no host check results


def test_low_rail_fails_and_subset_reruns_name_rail_and_host():
    fake = FakeMpi(rates={("gpu03", "mlx5_1"): 25.0})  # a degraded port: half rate
    vr = run_phase(fake)
    [b] = by(vr, "nccl_busbw")
    assert b.status == "fail" and "too low" in b.message
    assert b.cause.startswith("slowest rail mlx5_1 (23.4 GB/s alone); slowest host gpu03 (46.8 GB/s)")
    rails = {r.device: r.status for r in by(vr, "nccl_rail") if r.device}
    assert rails == {"mlx5_0": "pass", "mlx5_1": "fail"}
    hosts = {r.host: r.status for r in by(vr, "nccl_rail") if r.device is None}
    assert hosts == {"gpu02": "pass", "gpu03": "fail", "gpu04": "pass"}
    causes = {r.device or r.host: r.cause for r in by(vr, "nccl_rail") if r.status == "fail"}
    assert causes["mlx5_1"].startswith("rail mlx5_1 is slow on its own: check its ports")
    assert "check gpu03's HCA ports and PCIe links" in causes["gpu03"]
    cmds = [c for _h, c, _t in fake.calls]
    assert sum("NCCL_IB_HCA==mlx5_" in c for c in cmds) == 2
    assert any("-H gpu01:8,gpu03:8" in c and "NCCL_ALGO=Ring" in c for c in cmds)
    assert len(fake.calls) == 1 + 2 + 3  # main, per rail, per host with the reference


def test_slow_reference_host_is_named_by_the_confirming_pair():
    fake = FakeMpi(rates={("gpu01", "mlx5_0"): 20.0, ("gpu01", "mlx5_1"): 20.0})
    vr = run_phase(fake)
    slow = [r for r in by(vr, "nccl_rail") if r.device is None and r.status == "fail"]
    assert [r.host for r in slow] == ["gpu01"]
    assert "gpu01 is the slow host" in slow[0].message


def test_too_high_on_two_hosts_fails_as_tree():
    class NoRing(FakeMpi):
        def __call__(self, host, command, timeout=60):
            return super().__call__(host, command.replace(" -x NCCL_ALGO=Ring", ""), timeout)

    vr = run_phase(NoRing(hosts=HOSTS[:2]), hosts=HOSTS[:2])
    [b] = by(vr, "nccl_busbw")
    assert b.status == "fail" and "was Tree used on two nodes?" in b.message
    assert b.measured == pytest.approx(149.8, abs=0.3)


def test_two_hosts_with_ring_pass():
    fake = FakeMpi(hosts=HOSTS[:2])
    vr = run_phase(fake, hosts=HOSTS[:2])
    assert by(vr, "nccl_busbw")[0].status == "pass"
    assert "-x NCCL_ALGO=Ring" in fake.calls[0][1]


def test_timeout_is_an_error_never_a_pass():
    vr = run_phase(FakeMpi(hang=True))
    [b] = by(vr, "nccl_busbw")
    assert b.status == "error" and "could not run: no result within 180 s" in b.message
    assert "Bootstrap : Using eth0" in b.message  # the last line of output
    assert not by(vr, "nccl_gdr")


def test_missing_gpu_quotes_the_cause_and_the_host_not_mpiruns_banner():
    """nccl-tests 2.18 (src/common.cu) on a host with fewer GPUs than ranks, then Open MPI's abort
    banner naming the rank: the error quotes nccl-tests' two lines."""
    res = {
        "rc": 5,
        "stdout": "Invalid number of GPUs: 8 requested but only 7 were found.\n"
        " .. gpu03 pid 600: Test failure common.cu:1206\n",
        "stderr": "-" * 74 + "\nPrimary job  terminated normally, but 1 process returned\n"
        "a non-zero exit code. Per user-direction, the job has been aborted.\n" + "-" * 74 + "\n"
        "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
        "the job to be terminated. The first process to do so was:\n\n  Process name: [[1,1],15]\n",
    }
    [b] = by(run_phase(lambda host, command, timeout=60: res), "nccl_busbw")
    assert b.status == "error", b.message
    assert ("exit 5: Invalid number of GPUs: 8 requested but only 7 were found. / .. gpu03 pid 600: "
            "Test failure common.cu:1206") in b.message


def test_nonzero_exit_and_unreadable_output_are_errors():
    [b] = by(run_phase(FakeMpi(rc=1)), "nccl_busbw")
    assert b.status == "error" and "exit 1: gpu03: Test CUDA failure" in b.message
    [b] = by(run_phase(FakeMpi(garbage=True)), "nccl_busbw")
    assert b.status == "error" and "could not run: unreadable output" in b.message


def test_gdr_disabled_fails_with_cause():
    vr = run_phase(FakeMpi(gdr={"gpu02": False}))
    bad = [r for r in by(vr, "nccl_gdr") if r.status != "pass"]
    assert {(r.host, r.device) for r in bad} == {("gpu02", "mlx5_0"), ("gpu02", "mlx5_1")}
    assert "neither nvidia_peermem nor DMA-BUF" in bad[0].cause and "gpu02" in bad[0].cause


def test_every_collective_is_run():
    fake = FakeMpi()
    hv = hostvars(fabricops_verify_nccl_collectives=["all_reduce", "all_gather", "reduce_scatter"])
    vr = run_phase(fake, hv=hv)
    assert [r.device for r in by(vr, "nccl_busbw")] == ["all_reduce", "all_gather", "reduce_scatter"]
    assert all(r.status == "pass" for r in by(vr, "nccl_busbw"))


@pytest.mark.parametrize(
    "var,value,words",
    [
        ("fabricops_verify_nccl_launcher", "mpirun {binary} {bogus}", "unknown placeholder {bogus}"),
        ("fabricops_verify_nccl_launcher", "mpirun {mpi_env} all_reduce_perf", "must contain {binary}"),
        ("fabricops_verify_nccl_launcher", "mpirun {binary}", "{mpi_env}"),
        ("fabricops_verify_nccl_launcher", "mpirun {binary.__class__} {env}", "unknown placeholder"),
        ("fabricops_verify_nccl_collectives", ["all_reduce", "alltoall"], "unknown collective 'alltoall'"),
        ("fabricops_verify_nccl_max_bytes", "1T", "not a size"),
        ("fabricops_verify_nccl_timeout_s", "soon", "not a whole number"),
        # a placeholder inside the template's own quotes, or in a sh -c string: the value's quoting
        # would end those quotes / a second shell would parse it again (the audit's escapes)
        (
            "fabricops_verify_nccl_launcher",
            'env {env} srun -N {nodes} -w "{hosts}" {binary}',
            "puts {hosts} inside double quotes, which the value's own shell quoting would break; "
            'write {hosts} bare instead of "{hosts}"',
        ),
        (
            "fabricops_verify_nccl_launcher",
            "env {env} srun -N {nodes} -w '{hosts}' {binary}",
            "puts {hosts} inside single quotes",
        ),
        (
            "fabricops_verify_nccl_launcher",
            'bash -c "mpirun -H {hostslots} {mpi_env} {binary}"',
            "puts {hostslots} after -c, in a command string that a second shell parses again",
        ),
        ("fabricops_verify_nccl_launcher", "sh -lc 'mpirun {mpi_env} {binary}'", "puts {mpi_env} after -c"),
        (
            "fabricops_verify_nccl_launcher",
            'env {env} srun -w {hosts} {binary} -J "x',
            "unterminated double quote",
        ),
        (
            "fabricops_verify_nccl_tests_dir",
            "/opt/$(id)",
            "fabricops_verify_nccl_tests_dir: '/opt/$(id)' is not an absolute path",
        ),
        ("fabricops_verify_nccl_tests_dir", "/opt/nccl tests/bin", "is not an absolute path"),
        ("fabricops_verify_nccl_tests_dir", "/opt/../tmp", "contains a '..' component"),
    ],
)
def test_bad_inventory_values_are_one_sentence_and_nothing_runs(var, value, words):
    """Refused before any host is run, not even the host phase's ibstat: the verify CLI's "invalid
    input" status (5)."""
    with pytest.raises(NcclSettingsError) as exc:
        nccl_settings({var: value})
    assert words in str(exc.value) and "\n" not in str(exc.value)
    assert exc.value.exit_status == 5
    calls = []

    def run(host, command, timeout=60):
        calls.append((host, command))
        return {"rc": 1, "stdout": "", "stderr": "not asked"}

    with pytest.raises(NcclSettingsError) as exc:
        verify(run, HOSTS, hostvars(**{var: value}), Options(only="nccl"))
    assert words in str(exc.value)
    assert calls == []


class ShellRun:
    """The first host's shell, for real: each command runs under sh in ``cwd`` with stub ``srun`` and
    ``mpirun`` on PATH, so a value that escapes the template's quoting runs (``touch X``)."""

    def __init__(self, cwd):
        self.cwd, self.calls = cwd, []
        stubs = cwd / "stubs"
        stubs.mkdir()
        for name in ("srun", "mpirun", "all_reduce_perf"):
            (stubs / name).write_text("#!/bin/sh\nexit 0\n")
            (stubs / name).chmod(0o755)
        self.path = f"{stubs}:/usr/bin:/bin"

    def __call__(self, host, command, timeout=60):
        import subprocess

        self.calls.append((host, command))
        if command == "ibstat":
            return {"rc": 1, "stdout": "", "stderr": "not asked"}
        p = subprocess.run(
            ["sh", "-c", command],
            cwd=self.cwd,
            env={"PATH": self.path},
            capture_output=True,
            text=True,
            timeout=30,
        )
        return {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


@pytest.mark.parametrize(
    "template,words",
    [
        (NCCL_LAUNCHER_DEFAULT, "host name: 'gpu$(touch X)' is not an inventory host name"),
        ('env {env} srun -N {nodes} -w "{hosts}" {binary} -e {max_bytes}', "{hosts} inside double quotes"),
        ("env {env} srun -N {nodes} -w '{hosts}' {binary} -e {max_bytes}", "{hosts} inside single quotes"),
        ('bash -c "mpirun -np {np} --bind-to none {mpi_env} -H {hostslots} {binary}"', "{np} after -c"),
        ("env {env} srun -N {nodes} -w {hosts} {binary}", "is not an inventory host name"),
    ],
)
def test_a_host_named_like_a_command_is_refused_and_nothing_runs(tmp_path, template, words):
    """The audit's escape: an inventory host ``gpu$(touch X)`` with a launcher that quotes its
    placeholder ran ``touch X`` on the first host. Refused (exit 5) before any host is run."""
    hosts = ["gpu$(touch X)", "gpu02"]
    run = ShellRun(tmp_path)
    try:
        verify(run, hosts, hostvars(hosts, fabricops_verify_nccl_launcher=template), Options(only="nccl"))
        refused = None
    except NcclSettingsError as exc:
        refused = str(exc)
    assert not (tmp_path / "X").exists(), "the host name ran as a command on the first host"
    assert run.calls == [], "a host was run before the launcher line was refused"
    assert refused and words in refused and "\n" not in refused
    assert NcclSettingsError(refused).exit_status == 5  # the verify CLI's "invalid input"
    with pytest.raises(NcclSettingsError):  # the line itself is never built either
        build_command(NcclSettings(launcher=NCCL_LAUNCHER_DEFAULT), hosts, 8, "all_reduce")


def test_full_run_includes_nccl_only_when_asked():
    fake = FakeMpi()
    calls = []

    def run(host, command, timeout=60):
        calls.append(command)
        if "mpirun" in command:
            return fake(host, command, timeout)
        return {"rc": 1, "stdout": "", "stderr": "no tool"}

    assert not engine._nccl_wanted(Options(), HOSTS, hostvars())
    assert engine._nccl_wanted(Options(nccl=True), HOSTS, hostvars())
    assert engine._nccl_wanted(Options(), HOSTS, hostvars(fabricops_verify_nccl=True))
    assert not engine._nccl_wanted(Options(only="pairs", nccl=True), HOSTS, hostvars())
    verify(run, HOSTS, hostvars(), Options(only="hosts"))
    assert not any("mpirun" in c for c in calls)


def test_rails_follow_the_nccl_profile_link_layer():
    hv = hostvars(["gpu01", "gpu02"])
    for h in hv.values():
        h["fabricops_cabling"] = h["fabricops_cabling"] + [
            {
                "host": x,
                "hca": "mlx5_2",
                "port": 1,
                "switch": "leaf1",
                "link_layer": "Ethernet",
                "speed": "400GbE",
            }
            for x in ("gpu01", "gpu02")
        ]
    exps = {h: host_expect(h, hv[h]) for h in hv}
    rails, layer = plan_rails(exps, {})
    assert layer == "InfiniBand" and rails["gpu01"] == {"mlx5_0": 400.0, "mlx5_1": 400.0}
    hv2 = {h: {**v, "nccl_profile_name": "roce"} for h, v in hv.items()}
    rails, layer = plan_rails({h: host_expect(h, hv2[h]) for h in hv2}, {})
    assert layer == "Ethernet" and rails["gpu02"] == {"mlx5_2": 400.0}


# --- NCCL INFO lines (real captures, tests/fixtures/nccl-log) -----------------------------------


def test_parse_real_disabled_lines_with_peermem_loaded():
    info = parse_nccl_info((FIX / "roce-disabled-peermem-loaded.txt").read_text())
    assert [(g.host, g.index, g.hca, g.enabled, g.net) for g in info.gdr] == [
        ("hostname1", 0, "mlx5_0", False, "IB"),
        ("hostname1", 1, "mlx5_1", False, "IB"),
    ]


def test_parse_old_no_module_wording_and_channels_without_gdrdma():
    info = parse_nccl_info((FIX / "old-no-module.txt").read_text())
    assert [g.hca for g in info.gdr] == ["mlx5_1", "mlx5_2", "mlx5_3"] and not any(
        g.enabled for g in info.gdr
    )
    assert info.channels[("21346d5cefce", 0)] == [0, 3]
    assert info.channels[("6a5a91752e39", 0)] == [0, 2]


def test_parse_dmabuf_lines():
    info = parse_nccl_info((FIX / "dmabuf-ib-8hca.txt").read_text())
    assert info.dmabuf == {"nccl-tests-worker-0": {3, 7}, "nccl-tests-worker-1": {1}}
    assert info.gdr == []


def test_parse_enabled_without_host_prefix_and_gdrdma_channels():
    info = parse_nccl_info((FIX / "roce-enabled-no-prefix.txt").read_text())
    assert [(g.host, g.hca, g.enabled) for g in info.gdr] == [(None, "mlx5_1", True)]
    assert info.channels[(None, 1)] == [4, 0]
    # the per-GPU topology lines ("for GPU 1 / HCA 1") are not per-HCA verdicts
    assert len(info.gdr) == 1


def test_parse_sharp_plugin_dmabuf_wording():
    # NET/IB wording of the SHARP plugin (Mellanox/nccl-rdma-sharp-plugins; capture quoted in a GB10
    # write-up found with find_string id 55120155377)
    info = parse_nccl_info(
        "spark-01:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA (DMABUF) enabled for HCA 0 'rocep1s0f0'\n"
        "[1,0]<stdout>:spark-01:1:2 [0] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'"
    )
    assert [(g.net, g.hca, g.enabled) for g in info.gdr] == [
        ("IB", "rocep1s0f0", True),
        ("Socket", "eth0", False),
    ]


def test_enabled_but_no_channel_uses_gdrdma_fails():
    from fabricops.verify.nccl_phase import judge_gdr

    exps = {h: host_expect(h, v) for h, v in hostvars(["gpu01", "gpu02"]).items()}
    text = (
        "gpu01:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
        "gpu01:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0\n"
        "gpu02.example.com:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
    )
    res = {(r.host, r.status) for r in judge_gdr(text, exps, {})}
    assert res == {("gpu01", "fail"), ("gpu02", "pass")}


def test_host_without_gdr_line_is_an_error():
    from fabricops.verify.nccl_phase import judge_gdr

    exps = {h: host_expect(h, v) for h, v in hostvars(["gpu01", "gpu02"]).items()}
    text = "gpu01:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
    res = {(r.host, r.status) for r in judge_gdr(text, exps, {})}
    assert res == {("gpu01", "pass"), ("gpu02", "error")}


def test_json_result_is_parsed_when_the_template_asks_for_it():
    hv = hostvars(["gpu01", "gpu02"], fabricops_verify_nccl_launcher=NCCL_LAUNCHER_DEFAULT + " -J {json}")
    base = FakeMpi(hosts=["gpu01", "gpu02"])

    def fake(host, command, timeout=60):
        inner = re.search(r"(mpirun .*?); fo_rc", command).group(1)
        out = base(host, inner, timeout)
        doc = {
            "nccl_version": 22304,
            "config": {"devices": [{"rank": i} for i in range(16)]},
            "args": ["all_reduce_perf"],
            "average_bus_bandwidth": {"bandwidth": 40.0},
            "results": [
                {
                    "size": 1 << 30,
                    "count": 1 << 28,
                    "type": "float",
                    "redop": "sum",
                    "root": -1,
                    "out_of_place": {"time": 1.0, "alg_bw": 50.0, "bus_bw": 93.5, "nwrong": 0},
                    "in_place": {"time": 1.0, "alg_bw": 50.0, "bus_bw": 93.0, "nwrong": 0},
                }
            ],
        }
        out["stdout"] += "\n=== fabricops nccl -J result ===\n" + json.dumps(doc)
        return out

    vr = run_phase(fake, hosts=["gpu01", "gpu02"], hv=hv)
    [b] = by(vr, "nccl_busbw")
    assert b.status == "pass" and b.measured == 93.5
    assert {r.status for r in by(vr, "nccl_gdr")} == {"pass"}  # INFO lines still read from stdout


def test_single_host_uses_the_single_node_floor():
    pred = model.predict({"gpu01": [400.0] * 8}, 4)
    f = model.floor(pred, "hgx-h200-ndr")
    assert (pred.busbw_gbs, f.value) == (450.0, 431.0) and "nd96isr_h200_v5" in f.source


def test_phase_without_rails_is_an_error():
    hv = hostvars(["gpu01", "gpu02"], nccl_profile_name="roce")
    vr = run_phase(FakeMpi(hosts=["gpu01", "gpu02"]), hosts=["gpu01", "gpu02"], hv=hv)
    [b] = by(vr, "nccl_busbw")
    assert b.status == "error" and "plan no Ethernet port" in b.message


def test_phase_function_reports_settings_error_without_running():
    fake = FakeMpi()
    exps = {h: host_expect(h, v) for h, v in hostvars().items()}
    [r] = phase(fake, exps, {}, NcclSettingsError("fabricops_verify_nccl_max_bytes '1T' is not a size."))
    assert r.status == "error" and fake.calls == []


def test_terminal_report_shows_the_nccl_column_and_fails_the_host():
    from fabricops.verify import report

    vr = run_phase(FakeMpi(gdr={"gpu02": False}))
    text = report.terminal(vr)
    row = next(ln for ln in text.splitlines() if ln.startswith("gpu02"))
    assert "nccl" in text.splitlines()[2] and "2 FAIL" in row and "GPU Direct RDMA Disabled" in row
    assert report.exit_status(vr) == 1


def test_cli_accepts_only_nccl_and_the_opt_in_flag():
    from fabricops.cli import build_parser

    args = build_parser().parse_args(["verify", "--only", "nccl"])
    assert (args.only, args.nccl) == ("nccl", False)
    assert build_parser().parse_args(["verify", "--nccl"]).nccl is True


def test_ranks_all_on_one_host_are_an_error():
    class OneHost(FakeMpi):
        def __call__(self, host, command, timeout=60):
            res = super().__call__(host, command, timeout)
            res["stdout"] = re.sub(r" on +gpu0[234] ", " on      gpu01 ", res["stdout"])
            return res

    [b] = by(run_phase(OneHost()), "nccl_busbw")
    assert b.status == "error" and "its ranks ran on 1 host(s) (gpu01), 4 were asked for" in b.message
