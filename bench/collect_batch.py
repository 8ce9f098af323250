#!/usr/bin/env python3
"""Wall time of N evidence commands on one host: one at a time (Fabric.run, one session each) vs one
batch (Fabric.batch, one session), against a local ``sh`` through testinfra's local backend (no lab,
no SSH). Figures, not asserts.

    .venv/bin/python bench/collect_batch.py [--n 10 30 100] [--repeat 3] [--rtt 0.05]

``--rtt S`` adds S seconds per session, a stand-in for an SSH round trip (ControlPersist on a LAN is
a few ms; the lab's per-command cost is ~0.1 s): local ``sh`` alone shows only the process costs.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import testinfra

from fabricops.verify.transport import Fabric

COMMANDS = [
    "cat /proc/cmdline",
    "uname -r",
    "grep -H '' /sys/class/net/*/mtu 2>/dev/null; true",
    "ls -1 /usr/bin | head -n 50",
    "echo probe; echo err >&2; exit 3",
]


class SlowHost:
    """testinfra's local host, each session ``rtt`` seconds longer (a stand-in for SSH)."""

    def __init__(self, rtt: float):
        self.host = testinfra.get_host("local://")
        self.backend = self.host.backend
        self.rtt = rtt

    def run(self, command: str) -> Any:
        time.sleep(self.rtt)
        return self.host.run(command)


def fabric(rtt: float) -> Fabric:
    fab = Fabric.__new__(Fabric)  # no inventory: the one host is this machine
    fab._lock = threading.Lock()
    fab._hosts = {"local": SlowHost(rtt)}
    return fab


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[10, 30, 100])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rtt", type=float, default=0.0)
    args = ap.parse_args()
    fab = fabric(args.rtt)
    print(f"local sh, best of {args.repeat}, {args.rtt:g} s added per session")
    print(f"{'commands':>8}  {'one by one':>11}  {'batched':>9}  {'speed-up':>8}  same answer")
    for n in args.n:
        cmds = {f"k{i}": COMMANDS[i % len(COMMANDS)] for i in range(n)}
        single: dict[str, Any] = {}
        batched: dict[str, Any] = {}

        def one_by_one(cmds=cmds, single=single) -> None:
            single.update({k: dict(fab.run("local", c, 60)) for k, c in cmds.items()})

        def batch(cmds=cmds, batched=batched) -> None:
            batched.update(fab.batch("local", cmds, 60))

        t1, tb = best(one_by_one, args.repeat), best(batch, args.repeat)
        print(f"{n:>8}  {t1:>10.3f}s  {tb:>8.3f}s  {t1 / tb:>7.1f}x  {single == batched}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
