"""What asking the switch for its prompt before every show command costs: netmiko's default
``send_command`` (``auto_find_prompt=True``: a newline, a fixed 0.25 s sleep and a read first) against
the prompt the session learned at login (``fabricops.switch.transport.known_prompt``), side by side, on
the same kept sessions.

Usage: .venv/bin/python bench/switch_prompt.py [N] [--base-port P]   (default: 5, 42301)

The switches are bench/verify_switch_reads.py's: the two-tier lab's six emulated RoCE switches
(``python -m fabricops_lab.switchd``, real SSH, strict host keys) on 127.0.0.1, stopped at the end; no
lab is needed or touched. Each read is verify's switch-port phase for every switch in parallel
(``switchports.read_switches``): the port state, one show command per switch (these switches carry no
RoCE definition, so the lossless-class gather -- 5 to 9 more show commands per switch on the lab, each
saving the same -- is not run). Prints seconds per read both ways, and whether both ways read the same
port states.

Measured on the lab's own two switches (per command, same session): 0.45-0.49 s with netmiko's
default, 0.03-0.05 s with the known prompt.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify_switch_reads import _same, make_reader, ports_of, start


def reads(rd, ports, n: int) -> tuple[list[float], list]:
    from fabricops.verify import switchports

    times, got_all = [], []
    with rd.keep_sessions():
        switchports.read_switches(rd, ports, qos=True)  # sessions opened (login not counted)
        for _ in range(n):
            t0 = time.monotonic()
            got = switchports.read_switches(rd, ports, qos=True)
            times.append(time.monotonic() - t0)
            if got.errors:
                raise SystemExit(f"read failed: {got.errors}")
            got_all.append({sw: r.states for sw, r in sorted(got.reads.items())})
    return times, got_all


def main(argv: list[str]) -> int:
    from fabricops.switch import transport

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=5)
    ap.add_argument("--base-port", type=int, default=42301)
    a = ap.parse_args(argv)
    known_prompt = transport.known_prompt
    with tempfile.TemporaryDirectory(prefix="fabricops-bench-prompt-") as tmp:
        procs, where, known = start(Path(tmp), a.base_port)
        try:
            ports = ports_of(where)
            transport.known_prompt = lambda conn: conn  # netmiko's default: find_prompt() per command
            old_t, old_r = reads(make_reader(where, known), ports, a.n)
            transport.known_prompt = known_prompt
            new_t, new_r = reads(make_reader(where, known), ports, a.n)
        finally:
            transport.known_prompt = known_prompt
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)
    print(f"{len(where)} emulated switches, {a.n} reads of every switch's port state and lossless class "
          "(qos=True) in parallel, one kept session each")
    print(f"{'read':>6} {'find_prompt each s':>19} {'known prompt s':>15}")
    for i, (x, y) in enumerate(zip(old_t, new_t, strict=True), 1):
        print(f"{i:>6} {x:>19.3f} {y:>15.3f}")
    print(f"{'median':>6} {statistics.median(old_t):>19.3f} {statistics.median(new_t):>15.3f}")
    print(f"same port states both ways: {'yes' if _same(old_r, new_r) else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
