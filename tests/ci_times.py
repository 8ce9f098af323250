"""Where a test run's time went: the table scripts/test.sh prints at its end.

Reads the phase log scripts/test.sh writes (one line per phase: name, start and end in seconds since
the epoch, exit status; tab-separated) and pytest's JUnit XML files, and prints

- each phase's wall-clock seconds and status, in the order they started (phases that ran beside
  each other say so: their start offsets overlap);
- each integration file's seconds (the sum of its tests' setup, call and teardown; they run one
  after another, so this is wall-clock time);
- the 15 slowest tests of the whole run (setup + call + teardown, as JUnit records them);
- with ``--cpu CPU_LOG`` (lines ``EPOCH cpu USER NICE SYSTEM IDLE IOWAIT ...``: the first line of
  /proc/stat, sampled every few seconds), how busy the machine's CPU was during each phase: busy
  time over all time between the samples around the phase, idle and iowait counted as not busy.

Usage: python tests/ci_times.py PHASE_LOG [--cpu CPU_LOG] [JUNIT_XML ...]. It only reads; the output
goes to the run's log.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

SLOWEST = 15


def phases(log: Path) -> list[tuple[str, float, float, str]]:
    rows = []
    for line in log.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) != 4:
            continue
        name, start, end, status = parts
        try:
            rows.append((name, float(start), float(end), status))
        except ValueError:
            continue
    return sorted(rows, key=lambda r: r[1])


def cpu_samples(log: Path) -> list[tuple[float, int, int]]:
    """(epoch, busy jiffies, total jiffies) per sample, in time order; unreadable lines skipped."""
    out = []
    try:
        lines = log.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] != "cpu":
            continue
        try:
            t = float(parts[0])
            ticks = [int(x) for x in parts[2:]]
        except ValueError:
            continue
        total = sum(ticks[:8])  # user nice system idle iowait irq softirq steal (guest is in user)
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        out.append((t, total - idle, total))
    return sorted(out)


def busy_percent(samples: list[tuple[float, int, int]], start: float, end: float) -> float | None:
    """CPU busy % between the last sample at or before ``start`` and the first at or after ``end``
    (the nearest ones where the log does not reach that far); None without two distinct samples."""
    if len(samples) < 2:
        return None
    before = [s for s in samples if s[0] <= start]
    after = [s for s in samples if s[0] >= end]
    a = before[-1] if before else samples[0]
    b = after[0] if after else samples[-1]
    if b[2] <= a[2]:
        return None
    return 100.0 * (b[1] - a[1]) / (b[2] - a[2])


def testcases(paths: list[Path]) -> list[tuple[str, str, float]]:
    """(file, test id, seconds) for every test case in the JUnit files that exist and parse."""
    out = []
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            continue
        for case in root.iter("testcase"):
            classname = case.get("classname", "")
            # classname is the dotted module (+ class): tests.integration.test_verify[.TestX]
            module = classname.split(".")
            file_parts = [p for p in module if not p[:1].isupper()]
            if file_parts[:1] == ["tests"]:
                file_parts = file_parts[1:]
            file = "/".join(file_parts) + ".py" if file_parts else "?"
            try:
                seconds = float(case.get("time", "0"))
            except ValueError:
                seconds = 0.0
            out.append((file, f"{file}::{case.get('name', '?')}", seconds))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: ci_times.py PHASE_LOG [--cpu CPU_LOG] [JUNIT_XML ...]", file=sys.stderr)
        return 2
    log = Path(argv[0])
    rest = argv[1:]
    samples: list[tuple[float, int, int]] = []
    if rest[:1] == ["--cpu"]:
        samples = cpu_samples(Path(rest[1])) if len(rest) > 1 else []
        rest = rest[2:]
    rows = phases(log) if log.exists() else []
    cases = testcases([Path(p) for p in rest])
    print("\n== where the time went (wall-clock seconds; offsets from the start of the run)")
    if rows:
        t0 = min(r[1] for r in rows)
        t_end = max(r[2] for r in rows)
        print(f"{'phase':<44} {'start':>7} {'seconds':>8} {'cpu busy':>8}  status")

        def cpu(start: float, end: float) -> str:
            pct = busy_percent(samples, start, end)
            return f"{pct:>7.0f}%" if pct is not None else f"{'-':>8}"

        for name, start, end, status in rows:
            print(f"{name:<44} {start - t0:>7.0f} {end - start:>8.1f} {cpu(start, end)}  {status}")
        print(f"{'whole run':<44} {0:>7.0f} {t_end - t0:>8.1f} {cpu(t0, t_end)}")
    else:
        print("(no phase was recorded)")
    per_file: dict[str, float] = defaultdict(float)
    for file, _test, seconds in cases:
        if file.startswith("integration/"):
            per_file[file] += seconds
    if per_file:
        print(f"\n{'integration file':<52} {'seconds':>8}")
        for file, seconds in sorted(per_file.items(), key=lambda kv: -kv[1]):
            print(f"{file:<52} {seconds:>8.1f}")
        print(f"{'all integration files':<52} {sum(per_file.values()):>8.1f}")
    if cases:
        print(f"\n{SLOWEST} slowest tests (setup + call + teardown)")
        for _file, test, seconds in sorted(cases, key=lambda c: -c[2])[:SLOWEST]:
            print(f"{seconds:>8.1f}  {test}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
