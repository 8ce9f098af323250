#!/usr/bin/env python3
"""The controller's CPU seconds of ``fabricops verify`` through SSH and through Slurm, side by side.

    flock /work/lab.lock .venv/bin/python bench/verify_launchers.py [--runs 3] [--limit gpu01,gpu02]
        [-- VERIFY ARGS ...]    (default: --only pairs --all-pairs, the lab's InfiniBand rails)

Runs the same ``fabricops verify`` with ``--launcher ssh`` and ``--launcher slurm``, alternating,
``--runs`` times each, on the lab (or ``-i INVENTORY``). Per run: user and system CPU seconds of the
whole ``fabricops verify`` process tree on this machine (what ``/usr/bin/time`` reports: the process
and every child it waited for -- every ``ssh`` client) plus the SSH ControlMaster the Slurm launcher
starts for its controller connection, which daemonises and is not a waited-for child: this script
makes itself the tree's child subreaper (``PR_SET_CHILD_SUBREAPER``), so that master is reparented to
it and its CPU counted when it exits at the end of the run (``ssh -O exit``). The hosts' and the Slurm
controller's own CPU (sshd, srun, slurmd, perftest) is not the controller's and is not counted (in
the lab they share this machine, so wall times are shown only as context).

Prints one row per launcher: median user, sys, user+sys, wall, the step count (Slurm) and the exit
status; and the verdicts of each run, which must be the same (else the row says so).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FABRICOPS = str(Path(sys.executable).with_name("fabricops"))
PR_SET_CHILD_SUBREAPER = 36


def ib_only_vars(limit: list[str], path: Path) -> None:
    """The lab's cabling less its RoCE ports (the RoCE rails need the roce_host role converged)."""
    import yaml

    gv = yaml.safe_load((REPO / "inventories/lab/group_vars/all.yml").read_text())
    cabling = [c for c in gv["fabricops_cabling"] if c["host"] in limit and str(c["switch"]).startswith("ib")]
    path.write_text(json.dumps({"fabricops_cabling": cabling}))


def reap() -> None:
    """Wait for every orphan the subreaper took over (the ControlMaster), so its CPU is counted."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def one(launcher: str, args: list[str], env: dict[str, str], tmp: Path) -> dict:
    report = tmp / f"{launcher}.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run([FABRICOPS, "verify", "-q", *args, "--launcher", launcher, "--json", str(report)],
                          cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # a master that outlives the run by a moment is still ours
        try:
            pid, _s = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.05)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    data = json.loads(report.read_text()) if report.exists() and report.stat().st_size else {}
    return {
        "user": after.ru_utime - before.ru_utime,
        "sys": after.ru_stime - before.ru_stime,
        "wall": wall,
        "rc": proc.returncode,
        "steps": (data.get("launcher") or {}).get("steps"),
        "verdicts": sorted((r["name"], r["status"]) for r in data.get("results", [])),
        "err": proc.stderr.strip().splitlines()[-1:] if proc.returncode not in (0, 1) else [],
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--limit", default="gpu01,gpu02")
    p.add_argument("-i", "--inventory")
    p.add_argument("verify_args", nargs="*", help="after --: fabricops verify's own arguments")
    a = p.parse_args(argv)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("prctl(PR_SET_CHILD_SUBREAPER) failed: the ControlMaster's CPU would not be counted",
              file=sys.stderr)
        return 1
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        args = ["--limit", a.limit, *(["-i", a.inventory] if a.inventory else [])]
        if a.verify_args:
            args += a.verify_args
        else:
            ib_only_vars(a.limit.split(","), tmp / "ib.json")
            args += ["--only", "pairs", "--all-pairs", "-e", f"@{tmp / 'ib.json'}"]
        runs: dict[str, list[dict]] = {"ssh": [], "slurm": []}
        for _ in range(a.runs):
            for launcher in runs:
                runs[launcher].append(one(launcher, args, env, tmp))
        reap()
    shown = ["-e (IB cabling)" if x.startswith("@") else x for x in args if x != "-e"]
    print(f"fabricops verify {' '.join(shown)}")
    print(f"{a.runs} run(s) each, medians; CPU = this machine's, the verify process tree (+ its ssh master)")
    print(f"{'launcher':<9} {'user s':>7} {'sys s':>7} {'cpu s':>7} {'wall s':>7} {'steps':>6}  exit  "
          "verdicts")
    ref = runs["ssh"][0]["verdicts"]
    for launcher, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("user", "sys", "wall")}
        cpu = statistics.median(r["user"] + r["sys"] for r in rs)
        same = all(r["verdicts"] == ref for r in rs)
        steps = rs[0]["steps"] if rs[0]["steps"] is not None else "-"
        print(f"{launcher:<9} {med['user']:>7.2f} {med['sys']:>7.2f} {cpu:>7.2f} {med['wall']:>7.1f} "
              f"{steps!s:>6}  {','.join(str(r['rc']) for r in rs):<4}  "
              f"{len(ref)} results, {'same as ssh' if same else 'DIFFER from ssh'}"
              + (f"  ({rs[0]['err'][0][:80]})" if rs[0]["err"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
