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

    .venv/bin/python bench/ansible_speed.py --vs v0.2.0 --runs rerun drift [--top 15] [--floor]

``--vs REV`` times the same runs with the code of REV (a git worktree of it, its own roles, plugins
and Python package) and with this checkout, alternately on the same lab, both with the
repository's settings. Each row gives, besides the wall time: the tasks each host went through
(ok, skipped), the seconds per host, and where the CPU went: the controller (ansible-playbook,
its forks and the SSH clients) and the rest of the machine (on the lab: the hosts' modules and
emulated tools). ``--top N`` lists the N tasks that took longest in each tree's no-change run.

``--settle`` runs each tree's site.yml once, untimed, before its timed runs: right after the other
tree's run, a re-run would first undo what that code wrote its own way (files it renders or ships
differently), so without it the second tree's "re-run" is not a no-change run.

``--floor`` also times the floor: ``bench/floor_probe.sh``, one batched read of what the host
phases read to find nothing to change, in one SSH round trip per host, on every host at once
(the median of three runs), so the gap between a run and one read per host is on the same page.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import resource
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
    from fabricops_lab import paths

    try:
        return sorted(paths.load_lab()["hosts"])
    except Exception:  # no lab up
        return []


def _busy() -> float:
    """CPU seconds the whole machine has spent (every core, user + system), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv: list[str], env: dict[str, str], cwd: Path = REPO) -> tuple[float, int, str, float, float]:
    """(wall s, exit, output tail, controller CPU s, other CPU s) of one run."""
    t0, b0, c0 = time.monotonic(), _busy(), _children()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall, busy, ctl = time.monotonic() - t0, _busy() - b0, _children() - c0
    return wall, proc.returncode, proc.stdout[-2000:] + proc.stderr[-2000:], ctl, max(busy - ctl, 0.0)


def _tasks(path: Path, hosts: int) -> str:
    """``T tasks/host (ok O, skipped S)`` from the timing callback's records."""
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        return ""
    ok = sum(r["ok"] for r in rows) / hosts
    skipped = sum(r["skipped"] for r in rows) / hosts
    return f"{ok + skipped:5.0f} tasks/host (ok {ok:.0f}, skipped {skipped:.0f})"


def worktree(rev: str) -> Path:
    """A git worktree of ``rev`` set up as the collection fabricops.fabric, reused when present."""
    sha = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout.strip()
    tree = Path(tempfile.gettempdir()) / f"fabricops-bench-{sha[:12]}"
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), sha], cwd=REPO, check=True)
    link = tree / ".collections/ansible_collections/fabricops/fabric"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to("../../..")
    # the lab's inventory is written by `fabricops lab up` (ignored by git): both trees use the one up
    lab = tree / "inventories/lab"
    if not lab.is_symlink():
        if lab.exists():
            subprocess.run(["rm", "-rf", str(lab)], check=True)
        lab.symlink_to(REPO / "inventories/lab")
    return tree


def reset(hosts: list[str]) -> None:
    for h in hosts:
        subprocess.run([str(BIN / "fabricops"), "lab", "ssh", h, RESET], check=True, capture_output=True)


def _callbacks(cfg: Path) -> str:
    """The timing callback added to what ``cfg`` enables (the environment variable replaces it)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(cfg)
    given = parser.get("defaults", "callbacks_enabled", fallback="")
    enabled = [c.strip() for c in given.split(",") if c.strip()]
    return ",".join([*enabled, "fabricops_tasktime"])


RUNS = {"converge": "converge", "rerun": "re-run (no change)", "drift": "drift (check mode)"}


TOP: dict[str, list[dict]] = {}


def bench(limit: str, hosts: list[str], cfg: Path, label: str, runs: list[str],
          root: Path = REPO, settle: bool = False) -> list[str]:
    timing = Path(tempfile.mkdtemp(prefix="fabricops-bench-")) / "tasks.json"
    env = dict(os.environ, ANSIBLE_CONFIG=str(cfg), ANSIBLE_NOCOLOR="1", PATH=f"{BIN}:{os.environ['PATH']}",
               PYTHONPATH=str(root / "src"), ANSIBLE_CALLBACK_PLUGINS=str(REPO / "bench/callback_plugins"),
               ANSIBLE_CALLBACKS_ENABLED=_callbacks(cfg), FABRICOPS_TASKTIME_OUT=str(timing))
    play = [str(BIN / "ansible-playbook"), "site.yml", "--limit", limit, "--tags", "hosts",
            "-e", f"fabricops_serial={len(hosts)}", *EXTRA]
    drift = [str(BIN / "fabricops"), "drift", "--limit", limit, *EXTRA]
    rows = []
    if "converge" in runs:
        reset(hosts)
    elif settle:
        # untimed: this tree's own converge, so its timed re-run is a no-change run for this code
        # (right after another tree's run it would first undo what that code wrote its own way)
        subprocess.run(play, cwd=root, env=dict(env, FABRICOPS_TASKTIME_OUT=os.devnull),
                       capture_output=True, check=False)
    for key, argv in (("converge", play), ("rerun", play), ("drift", drift)):
        if key not in runs:
            continue
        name = RUNS[key]
        timing.unlink(missing_ok=True)
        secs, rc, tail, ctl, other = timed(argv, env, root)
        ok = rc == 0 or (name.startswith("drift") and rc in (0, 3))
        tasks = _tasks(timing, len(hosts)) if key != "drift" else ""
        if key == "rerun" and timing.exists():
            TOP[label] = json.loads(timing.read_text())
        per = secs / len(hosts)
        rows.append(f"{label:<22} {len(hosts):>5}  {name:<20} {secs:7.1f} s  {per:6.1f} s/host  "
                    f"CPU controller {ctl:6.1f} s, hosts {other:6.1f} s  {tasks}"
                    f"{'' if ok else f'  (exit {rc})'}")
        if not ok:
            print(tail, file=sys.stderr)
    return rows


FLOOR_PROBE = REPO / "bench/floor_probe.sh"


def floor(hosts: list[str], runs: int = 3) -> str:
    """One row: the median of ``runs`` rounds of floor_probe.sh on every host at once."""
    probe = FLOOR_PROBE.read_bytes()
    rounds = []
    for _ in range(runs):
        t0, b0, c0 = time.monotonic(), _busy(), _children()
        ssh = [str(BIN / "fabricops"), "lab", "ssh"]
        procs = [subprocess.Popen([*ssh, h, "sh", "-s"], stdin=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for h in hosts]
        for p in procs:  # the probe is far smaller than a pipe's buffer: every host starts at once
            p.stdin.write(probe)
            p.stdin.close()
        for p in procs:
            p.wait()
        wall, busy, ctl = time.monotonic() - t0, _busy() - b0, _children() - c0
        failed = [h for h, p in zip(hosts, procs, strict=True) if p.returncode != 0]
        if failed:
            return (f"{'one batched read':<22} {len(hosts):>5}  could not run: the probe failed on "
                    f"{', '.join(failed)}")
        rounds.append((wall, ctl, max(busy - ctl, 0.0)))
    wall, ctl, other = sorted(rounds)[len(rounds) // 2]
    return (f"{'one batched read':<22} {len(hosts):>5}  {'floor (probe)':<20} {wall:7.1f} s  "
            f"{wall / len(hosts):6.1f} s/host  CPU controller {ctl:6.1f} s, hosts {other:6.1f} s")


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
    ap.add_argument("--vs", metavar="REV",
                    help="also time the code of git revision REV (a worktree), side by side, repo settings")
    ap.add_argument("--top", type=int, default=0, metavar="N",
                    help="list the N slowest tasks of each no-change run")
    ap.add_argument("--settle", action="store_true",
                    help="before each tree's timed runs (without converge), run its site.yml once untimed, "
                         "so every re-run timed is a no-change run for the code being timed")
    ap.add_argument("--floor", action="store_true",
                    help="also time one batched read per host (bench/floor_probe.sh), the no-change floor")
    args = ap.parse_args()
    up = lab_hosts()
    if not up:
        print("no lab is up: run `fabricops lab up` (as root) first")
        return 1
    stock = Path(tempfile.mkdtemp(prefix="fabricops-bench-")) / "stock.cfg"
    stock.write_text(STOCK_CFG.format(repo=REPO))
    configs = [(cfg, label, REPO) for key, cfg, label in (("repo", REPO / "ansible.cfg", "repo ansible.cfg"),
                                                           ("stock", stock, "stock settings"))
               if key in args.settings]
    if args.vs:
        old = worktree(args.vs)
        configs = [(old / "ansible.cfg", f"{args.vs[:12]} (before)", old),
                   (REPO / "ansible.cfg", "this checkout", REPO)]
    print(f"{'settings':<22} {'hosts':>5}  {'run':<20} {'time':>9}")
    if args.limit:
        hosts = [h for h in up if h in args.limit.split(",")] or up
        for cfg, label, root in configs:
            print("\n".join(bench(args.limit, hosts, cfg, label, args.runs, root, args.settle)), flush=True)
        if args.floor:
            print(floor(hosts), flush=True)
        top(args.top)
        return 0
    for n in args.sizes:
        if n != len(up):
            print(f"{'-':<22} {n:>5}  not measured: the lab has {len(up)} hosts; on a machine of your own "
                  f"run `fabricops lab down && fabricops lab up --hosts {n}` (32 needs "
                  f"fs.inotify.max_user_instances=256) and run this again")
            continue
        for cfg, label, root in configs:
            print("\n".join(bench("gpu_hosts", up, cfg, label, args.runs, root, args.settle)), flush=True)
        if args.floor:
            print(floor(up), flush=True)
    top(args.top)
    return 0


def top(n: int) -> None:
    for label, rows in TOP.items():
        if n <= 0:
            return
        print(f"\n{label}: the {n} slowest tasks of the no-change run (wall s, all hosts together)")
        for r in sorted(rows, key=lambda r: -r["seconds"])[:n]:
            print(f"  {r['seconds']:6.2f}  {r['action']:<36} {r['task'][:90]}")


if __name__ == "__main__":
    sys.exit(main())
