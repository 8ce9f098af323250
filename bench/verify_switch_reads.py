"""What keeping one SSH session per switch saves `fabricops verify`: N reads of every switch's port
state, a new netmiko session per read (login, enable, paging off) vs one session per switch kept for
the run (fabricops.verify.switchstate.SwitchReader.keep_sessions).

Usage: .venv/bin/python bench/verify_switch_reads.py [N] [--base-port P]   (default: 10, 42201)

The switches are the lab's emulated ones (``python -m fabricops_lab.switchd``: the same emulator
`fabricops lab` runs, over real SSH, with strict host-key checking), started here on 127.0.0.1 as the
two-tier lab's six RoCE switches (leaf1, leaf2, spine1, spine2: Cumulus NVUE, 64 ports; leaf3, leaf4:
Onyx, 32 ports) and stopped at the end; no lab is needed or touched. Each read is what verify does per
round: ``switchports.read_switches`` over all six switches in parallel, a host port and an ISL port
each (``nv show interface -o json`` / ``show interfaces ethernet | json-print``).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="DSA is deprecated")  # asyncssh's import, not ours

SWITCHES = [("leaf1", "cumulus", "swp{n}", 64), ("leaf2", "cumulus", "swp{n}", 64),
            ("leaf3", "onyx", "Eth1/{n}", 32), ("leaf4", "onyx", "Eth1/{n}", 32),
            ("spine1", "cumulus", "swp{n}", 64), ("spine2", "cumulus", "swp{n}", 64)]
PASSWORD = "bench-Pw1"


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"switchd on port {port} exited ({proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"switchd on port {port} did not listen within {timeout:g} s")


def start(tmp: Path, base: int) -> tuple[list[subprocess.Popen], dict[str, tuple[str, int]], str]:
    import asyncssh

    (tmp / "pw").write_text(PASSWORD + "\n")
    known = []
    procs, where = [], {}
    for i, (name, os_name, fmt, count) in enumerate(SWITCHES):
        port = base + i
        sdir = tmp / name
        sdir.mkdir()
        key = asyncssh.generate_private_key("ssh-ed25519")
        key.write_private_key(str(sdir / "host_key"))
        known.append(f"[127.0.0.1]:{port} {key.export_public_key('openssh').decode().strip()}")
        ports = ",".join(fmt.format(n=n) for n in range(1, count + 1))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "fabricops_lab.switchd", "--name", name, "--os", os_name,
             "--listen", "127.0.0.1", "--port", str(port), "--host-key", str(sdir / "host_key"),
             "--password-file", str(tmp / "pw"), "--state-dir", str(sdir), "--ports", ports],
            stdout=subprocess.DEVNULL, stderr=(sdir / "switchd.log").open("wb")))
        where[name] = (os_name, port)
    (tmp / "known_hosts").write_text("\n".join(known) + "\n")
    for p, (_os, port) in zip(procs, where.values(), strict=True):
        _wait_port(port, p)
    return procs, where, str(tmp / "known_hosts")


def make_reader(where: dict[str, tuple[str, int]], known_hosts: str):
    from fabricops.switch import transport
    from fabricops.switch.access import SwitchAccess
    from fabricops.verify.switchstate import SwitchReader
    from fabricops_lab.switchd.server import USERS

    def connector(switch, os_name, _hv):
        _os, port = where[switch]
        return transport.connect(SwitchAccess(
            switch=switch, os_name=os_name, host="127.0.0.1", port=port, username=USERS[os_name],
            known_hosts=known_hosts, password=PASSWORD, timeout=30.0, sources={"password": "bench"}))

    hv = {name: {"fabricops_switch_os": os_name} for name, (os_name, _p) in where.items()}
    return SwitchReader(lambda n: hv.get(n, {}), None, connector=connector)


def ports_of(where: dict[str, tuple[str, int]]) -> dict[str, list[str]]:
    return {name: (["swp1", "swp33"] if os_name == "cumulus" else ["Eth1/1", "Eth1/18"])
            for name, (os_name, _p) in where.items()}


def run_reads(rd, ports, n: int, keep: bool) -> tuple[list[float], list]:
    from fabricops.verify import switchports

    times, reads = [], []
    handle = rd.keep_sessions() if keep else None
    try:
        for _ in range(n):
            t0 = time.monotonic()
            got = switchports.read_switches(rd, ports)
            times.append(time.monotonic() - t0)
            if got.errors:
                raise SystemExit(f"read failed: {got.errors}")
            reads.append({sw: r.states for sw, r in sorted(got.reads.items())})
    finally:
        if handle is not None:
            handle.close()
    return times, reads


def _same(a: list, b: list) -> bool:
    """Same ports, states, speeds and errors; the byte counters only grow (the emulator's counters tick
    with the clock between reads)."""
    def strip(reads):
        return [{sw: {p: (s.oper, s.admin, s.speed_gbps, s.speed_text, s.errors, s.flaps)
                      for p, s in st.items()} for sw, st in r.items()} for r in reads]
    return strip(a) == strip(b)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=10)
    ap.add_argument("--base-port", type=int, default=42201)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fabricops-bench-sw-") as tmp:
        procs, where, known = start(Path(tmp), a.base_port)
        try:
            rd = make_reader(where, known)
            ports = ports_of(where)
            run_reads(rd, ports, 1, keep=False)  # warm up (imports, the emulators' first answers)
            new_t, new_r = run_reads(rd, ports, a.n, keep=False)
            kept_t, kept_r = run_reads(rd, ports, a.n, keep=True)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)
    print(f"{len(where)} emulated switches (python -m fabricops_lab.switchd, real SSH through netmiko), "
          f"{a.n} reads of all of them in parallel each")
    print(f"{'read':>5} {'new session each s':>19} {'one kept session s':>19}")
    for i, (x, y) in enumerate(zip(new_t, kept_t, strict=True), 1):
        print(f"{i:>5} {x:>19.3f} {y:>19.3f}")
    print(f"{'total':>5} {sum(new_t):>19.2f} {sum(kept_t):>19.2f}")
    print(f"{'mean':>5} {statistics.mean(new_t):>19.3f} {statistics.mean(kept_t):>19.3f}")
    print(f"{'median':>5} {statistics.median(new_t):>19.3f} {statistics.median(kept_t):>19.3f}")
    print(f"same port states both ways: {'yes' if _same(new_r, kept_r) else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
