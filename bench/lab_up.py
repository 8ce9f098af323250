"""Time to bring the emulated rack up and down, and memory per host.

Usage (root): .venv/bin/python bench/lab_up.py [N ...]   (default: 4 16 32)

For each N: `lab down` (if a lab is up), `lab up --hosts N` timed end to end (hosts booted and
answering SSH, emulated sysfs synced, switches and OFED repository started, inventory written),
then memory of every host's processes (PSS sum, and RSS sum, over PID 1 and its descendants) and
the time of `lab down`. The image is built first (not timed) when the recipe changed.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time

from fabricops_lab import hosts, image, paths, rack


def bench(n: int) -> dict[str, float]:
    if paths.lab_json().exists():
        rack.down()
    t0 = time.monotonic()
    lab = rack.up(n_hosts=n)
    up_s = time.monotonic() - t0
    time.sleep(2)  # let boot-time services settle before measuring memory
    mem = [hosts.memory_kib(name) for name in lab["hosts"]]
    t1 = time.monotonic()
    rack.down()
    down_s = time.monotonic() - t1
    return {
        "hosts": n,
        "up_s": up_s,
        "hosts_s": lab.get("timings", {}).get("hosts_s", 0.0),
        "down_s": down_s,
        "pss_mib": statistics.mean(m["pss_kib"] for m in mem) / 1024,
        "rss_mib": statistics.mean(m["rss_kib"] for m in mem) / 1024,
        "procs": statistics.mean(m["processes"] for m in mem),
    }


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    sizes = [int(a) for a in argv] or [4, 16, 32]
    t0 = time.monotonic()
    image.ensure_image()
    info = image.image_info() or {}
    print(f"image {info.get('sha')}: built in {info.get('build_seconds')} s, {info.get('size_mb')} MB "
          f"(this run: {time.monotonic() - t0:.1f} s)")
    print(f"{'hosts':>5} {'up s':>7} {'boot+ssh s':>10} {'down s':>7} {'PSS MiB/host':>13} "
          f"{'RSS MiB/host':>13} {'procs/host':>10}")
    for n in sizes:
        r = bench(n)
        print(f"{r['hosts']:>5} {r['up_s']:>7.1f} {r['hosts_s']:>10.1f} {r['down_s']:>7.1f} "
              f"{r['pss_mib']:>13.1f} {r['rss_mib']:>13.1f} {r['procs']:>10.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
