#!/usr/bin/env python3
"""Time the light tier, fabricops-health (fabricops.hostside.health), per node run.

    .venv/bin/python bench/light_tier.py [--runs 30] [--ports 8] [--gpus 8]

Ships the package's files for fabricops.hostside.health into a temporary tree exactly as the
fabric_monitor role does (fabricops.hostside.ship.files_for + the role's launcher template) and runs the
launcher with ``python3 -I -S`` (what a host offers) against a fake node: a sysfs tree with PORTS
InfiniBand ports and ``/bin/sh`` stand-ins for ``nvidia-smi`` (the real H800 NVLink capture, its elided
GPUs filled in) and ``scontrol`` that only print, so the figures are the program's own cost (interpreter
start, imports, sysfs walk, parsing, process starts) and not a vendor tool's. Cases:

- ``check``: judge only (healthy);
- ``drain+resume healthy``: ``--drain --resume-own`` on a healthy, undrained node (+1 scontrol read);
- ``port down, --drain``: a failing port, the node drained (+1 scontrol read, +1 update);
- ``nvidia-smi hangs``: nvidia-smi never answers: the run ends at the command limit (timeout_s) --
  the worst case of the check phase.

Prints the median, 90th percentile and maximum wall time of each, and the in-process time of the
judgement alone. No assertion: the stated budget (docs/operations.md) is checked by reading these.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jinja2

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from fabricops.hostside import health, ship  # noqa: E402

NVLINK = REPO / "tests/fixtures/nvidia-smi-nvlink/h800_8_links_elided_spaces.txt"


def nvlink_text(gpus: int) -> str:
    lines = [ln for ln in NVLINK.read_text().splitlines() if not ln.startswith("# source")]
    gpu0 = lines[:9]
    out = []
    for i in range(gpus):
        out.append(gpu0[0].replace("GPU 0:", f"GPU {i}:"))
        out.extend(gpu0[1:])
    return "\n".join(out) + "\n"


def build(root: Path, ports: int, gpus: int) -> tuple[Path, Path, Path]:
    lib = root / "lib"
    for f in ship.files_for("fabricops.hostside.health"):
        (lib / f["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f["src"], lib / f["path"])
    config = root / "collector.json"
    checks = {"ports": ports, "gpus": gpus, "nvlink_links": 8, "timeout_s": 2}
    config.write_text(json.dumps({"expected_rate_gbps": {"InfiniBand": 400}, "health": checks}))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(REPO / "roles/fabric_monitor/templates")))
    launcher = root / "fabricops-health"
    launcher.write_text(env.get_template("fabricops-health-launcher.j2").render(
        ansible_managed="bench", __fabric_monitor_lib_dir=str(lib), fabric_monitor_config_path=str(config)))
    sysfs = root / "sys"
    for i in range(ports):
        pdir = sysfs / f"class/infiniband/mlx5_{i}/ports/1"
        pdir.mkdir(parents=True)
        for name, value in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"),
                            ("rate", "400 Gb/sec (4X NDR)"), ("link_layer", "InfiniBand")):
            (pdir / name).write_text(value + "\n")
        for n in range(40):  # counters: the collector's walk reads them too
            (pdir / "counters").mkdir(exist_ok=True)
            (pdir / "counters" / f"c{n}").write_text("12345\n")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (root / "query.txt").write_text("".join(f"{i}, 00000000:{18 + i:02X}:00.0\n" for i in range(gpus)))
    (root / "nvlink.txt").write_text(nvlink_text(gpus))
    (bin_dir / "nvidia-smi").write_text(
        "#!/bin/sh\n[ -n \"$BENCH_HANG\" ] && exec sleep 60\n"
        f"if [ \"$1\" = nvlink ]; then cat {root}/nvlink.txt; else cat {root}/query.txt; fi\n")
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\n[ \"$1\" = -o ] && echo \"NodeName=$5 Arch=x86_64 State=IDLE ThreadsPerCore=1\"\n"
        "exit 0\n")
    for tool in ("nvidia-smi", "scontrol"):
        (bin_dir / tool).chmod(0o755)
    return launcher, sysfs, bin_dir


def time_runs(argv: list[str], env: dict, runs: int) -> tuple[list[float], int]:
    times, rc = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-I", "-S", *argv], env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - t0)
        rc = proc.returncode
    return times, rc


def row(name: str, times: list[float], rc: int) -> str:
    q = sorted(times)
    p90 = q[min(len(q) - 1, round(0.9 * (len(q) - 1)))]
    return f"{name:<26} exit {rc}  median {statistics.median(q) * 1e3:7.1f} ms  p90 {p90 * 1e3:7.1f} ms  " \
           f"max {q[-1] * 1e3:7.1f} ms  ({len(q)} runs)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--ports", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="light-tier-") as tmp:
        root = Path(tmp)
        launcher, sysfs, bin_dir = build(root, args.ports, args.gpus)
        env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin")
        base = [str(launcher), "--sysfs", str(sysfs), "--node", "gpu01"]
        print(f"fabricops-health, {args.ports} IB ports, {args.gpus} GPUs x 8 NVLink links, python3 -I -S "
              f"{sys.version.split()[0]}, {os.cpu_count()} CPUs")
        time_runs(base, env, 2)  # warm the page cache and __pycache__
        print(row("check", *time_runs(base, env, args.runs)))
        print(row("drain+resume healthy", *time_runs([*base, "--drain", "--resume-own"], env, args.runs)))
        down = sysfs / "class/infiniband/mlx5_1/ports/1"
        (down / "state").write_text("1: DOWN\n")
        (down / "phys_state").write_text("3: Disabled\n")
        print(row("port down, --drain", *time_runs([*base, "--drain"], env, args.runs)))
        (down / "state").write_text("4: ACTIVE\n")
        (down / "phys_state").write_text("5: LinkUp\n")
        hang = dict(env, BENCH_HANG="1")
        print(row("nvidia-smi hangs (2 s)", *time_runs(base, hang, 3)))

        config = health.load_config(str(root / "collector.json"))
        os.environ["PATH"] = env["PATH"]
        t = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            health.judge(config, str(sysfs))
            t.append(time.perf_counter() - t0)
        print(f"{'judge() in process':<26} median {statistics.median(t) * 1e3:7.1f} ms "
              "(sysfs walk + 2 nvidia-smi stand-ins at once + parsing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
