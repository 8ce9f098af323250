#!/usr/bin/env python3
"""Time a converge, a no-change re-run and a drift run of site.yml's host phases on the lab.

    .venv/bin/python bench/ansible_speed.py [--limit gpu04] [--sizes 4 16 32]

Each figure is measured twice: with the repository's ansible.cfg (forks 25, pipelining, SSH
ControlPersist, JSON fact cache, only the fact subsets roles use) and with stock settings (forks 5,
no pipelining, no ControlPersist, full fact gathering, no fact cache). "Converge" starts from hosts
whose RoCE QoS and NCCL files were reset (mlnx_qos PFC off, /etc/nccl.conf removed): the
configuration phases do real work, the OFED phase finds its version installed. Sizes larger than
the lab that is up are not measured; the script prints how to bring such a lab up (`fabricops lab
up --hosts N`, which replaces the shared 4-host lab: do it only on a machine of your own).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
EXTRA = ["-e", "nccl_profile_name=ib"]
RESET = (
    "for i in $(ls /sys/class/net | grep '^enp'); do mlnx_qos -i $i --pfc 0,0,0,0,0,0,0,0 >/dev/null; done; "
    "rm -f /etc/nccl.conf /etc/profile.d/nccl.sh"
)

STOCK_CFG = """[defaults]
# Stock Ansible for comparison: forks 5, implicit full fact gathering, no fact cache.
inventory = {repo}/inventories/lab/hosts.yml
collections_path = {repo}/.collections
roles_path = {repo}/roles
host_key_checking = True
retry_files_enabled = False

[ssh_connection]
pipelining = False
ssh_args = -o ControlMaster=no
"""


def lab_hosts() -> list[str]:
    sys.path.insert(0, str(REPO / "src"))
    from fabricops.lab import paths

    try:
        return sorted(paths.load_lab()["hosts"])
    except Exception:  # no lab up
        return []


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    return time.monotonic() - t0, proc.returncode, proc.stdout[-2000:] + proc.stderr[-2000:]


def reset(hosts: list[str]) -> None:
    for h in hosts:
        subprocess.run([str(BIN / "fabricops"), "lab", "ssh", h, RESET], check=True, capture_output=True)


RUNS = {"converge": "converge", "rerun": "re-run (no change)", "drift": "drift (check mode)"}


def bench(limit: str, hosts: list[str], cfg: Path, label: str, runs: list[str]) -> list[str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(cfg), ANSIBLE_NOCOLOR="1", PATH=f"{BIN}:{os.environ['PATH']}")
    play = [str(BIN / "ansible-playbook"), "site.yml", "--limit", limit, "--tags", "hosts",
            "-e", f"fabricops_serial={len(hosts)}", *EXTRA]
    drift = [str(BIN / "fabricops"), "drift", "--limit", limit, *EXTRA]
    rows = []
    if "converge" in runs:
        reset(hosts)
    for key, argv in (("converge", play), ("rerun", play), ("drift", drift)):
        if key not in runs:
            continue
        name = RUNS[key]
        secs, rc, tail = timed(argv, env)
        ok = rc == 0 or (name.startswith("drift") and rc in (0, 2))
        rows.append(f"{label:<22} {len(hosts):>5}  {name:<20} {secs:7.1f} s{'' if ok else f'  (exit {rc})'}")
        if not ok:
            print(tail, file=sys.stderr)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", help="host pattern (default: every lab host)")
    ap.add_argument("--sizes", type=int, nargs="*", default=[4, 16, 32],
                    help="lab sizes to report (measured only when a lab of that size is up)")
    ap.add_argument("--settings", nargs="*", choices=["repo", "stock"], default=["repo", "stock"],
                    help="which ansible settings to time (default: both)")
    ap.add_argument("--runs", nargs="*", choices=list(RUNS), default=list(RUNS),
                    help="which runs to time (default: all; a re-run without a converge before it "
                         "times a lab that is already converged)")
    args = ap.parse_args()
    up = lab_hosts()
    if not up:
        print("no lab is up: run `fabricops lab up` (as root) first")
        return 1
    stock = Path(tempfile.mkdtemp(prefix="fabricops-bench-")) / "stock.cfg"
    stock.write_text(STOCK_CFG.format(repo=REPO))
    configs = [(cfg, label) for key, cfg, label in (("repo", REPO / "ansible.cfg", "repo ansible.cfg"),
                                                     ("stock", stock, "stock settings"))
               if key in args.settings]
    print(f"{'settings':<22} {'hosts':>5}  {'run':<20} {'time':>9}")
    if args.limit:
        hosts = [h for h in up if h in args.limit.split(",")] or up
        for cfg, label in configs:
            print("\n".join(bench(args.limit, hosts, cfg, label, args.runs)), flush=True)
        return 0
    for n in args.sizes:
        if n != len(up):
            print(f"{'-':<22} {n:>5}  not measured: the lab has {len(up)} hosts; on a machine of your own "
                  f"run `fabricops lab down && fabricops lab up --hosts {n}` (32 needs "
                  f"fs.inotify.max_user_instances=256) and run this again")
            continue
        for cfg, label in configs:
            print("\n".join(bench("gpu_hosts", up, cfg, label, args.runs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
