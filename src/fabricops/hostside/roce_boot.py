"""Re-apply and verify RoCE lossless QoS at boot: ``fabricops-roce-qos`` (roce_host role; docs/roce.md).

mlnx_qos settings, the RoCE ECN / traffic-class knobs and the rdma_cm defaults live in the NIC and
the driver: a reboot or an openibd restart loses them. fabricops-roce-qos.service runs
``fabricops-roce-qos apply --config PATH`` after the driver is up; ``... verify`` only checks.

This is the package's own host QoS logic, not a second implementation: the mlnx_qos argument groups,
parser and comparison come from :mod:`fabricops.hostqos.mlnx_qos`, every other knob (its sysfs path
or command, value format, optional or not) from the knob table :mod:`fabricops.hostqos.knobs`. The
role copies these modules from the package installed on the controller (stdlib-only, like every
host-side module; :mod:`fabricops.hostside.ship`). Every parameter (ports, desired values, how long
to wait for the netdevs) comes from the JSON config the role renders (roce-qos.json.j2): the
per-port documents of :func:`fabricops.hostqos.plan.host_plan`.

Usage: ``fabricops-roce-qos [apply|verify] [--config PATH]`` (default: apply
/etc/fabricops/roce-qos.json). Exit status: 0 the ports match the config, 1 they differ or a
setting failed (one line each, ``NETDEV: KNOB is X, want Y``), 2 bad usage or a config that cannot
be read (nothing is changed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from fabricops.errors import FabricopsError
from fabricops.hostqos import knobs
from fabricops.hostqos import mlnx_qos as qos

CONFIG = "/etc/fabricops/roce-qos.json"
WAIT_S = 30
PROG = "fabricops-roce-qos"
USAGE = f"usage: {PROG} [apply|verify] [--config PATH]"
EXIT_OK, EXIT_DIFFERS, EXIT_BAD_CONFIG = 0, 1, 2

#: What apply assumes the NIC holds: nothing known, so every declared mlnx_qos setting is set
#: (after a reboot or a driver restart the NIC holds firmware defaults, whatever it held before).
UNKNOWN = qos.QosState(trust=None, pfc=(), dscp2prio=None, cable_len=None)


class System:
    """The host: commands and files (tests pass an emulated one)."""

    def run(self, argv: list[str]) -> tuple[int, str]:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        except OSError as exc:
            return 127, str(exc)
        return proc.returncode, proc.stdout + proc.stderr

    def read(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError:
            return None

    def write(self, path: str, value: str) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f"{value}\n")

    def exists(self, path: str) -> bool:
        return os.path.exists(path)


class Port:
    """One port of the config: its checked mlnx_qos settings and its knob table."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.netdev = str(doc["netdev"])
        self.device = str(doc["device"])
        self.port = int(doc["port"])
        self.qos = qos.want_from(doc.get("mlnx_qos") or {})
        self.knobs = knobs.knobs_for(self.netdev, self.device, self.port, doc.get("sysfs") or {})


def load(path: str) -> dict[str, Any]:
    """The config: JSON, with '#' comment lines (the role's header)."""
    with open(path, encoding="utf-8") as fh:
        text = "".join(line for line in fh if not line.lstrip().startswith("#"))
    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("ports"), list):
        raise ValueError("no 'ports' list")
    return doc


def apply_port(system: System, port: Port) -> list[str]:
    """Set every declared setting (mlnx_qos first, then the knob table in order); one line per
    setting that failed."""
    nd = port.netdev
    errors = []

    def run(argv: list[str]) -> None:
        rc, out = system.run(argv)
        if rc != 0:
            last = out.strip().splitlines()[-1] if out.strip() else "no output"
            errors.append(f"{nd}: '{' '.join(argv)}' failed (rc {rc}): {last}")

    for group in qos.plan(port.qos, UNKNOWN):
        run(["mlnx_qos", "-i", nd, *group])
    for knob in port.knobs:
        action = knob.write()
        if "argv" in action:
            run(action["argv"])
        elif knob.optional and not system.exists(knob.path):
            continue  # verify reports the skip
        else:
            try:
                system.write(knob.path, action["value"])
            except OSError as exc:
                errors.append(f"{nd}: {knob.name}: writing {action['value']} to {knob.path} failed: {exc}")
    return errors


def verify_port(system: System, port: Port, notes: list[str]) -> list[str]:
    """What differs from the config, one ``NETDEV: KNOB is X, want Y`` line each."""
    nd = port.netdev
    diffs = []
    rc, out = system.run(["mlnx_qos", "-i", nd])
    if rc != 0:
        diffs.append(f"{nd}: mlnx_qos -i {nd} failed (rc {rc})")
    else:
        try:
            have = qos.have_from(qos.parse(out))
        except FabricopsError as exc:
            diffs.append(f"{nd}: mlnx_qos -i {nd}: {exc}")
        else:
            diffs += [f"{nd}: {line}" for line in qos.verify(port.qos, have)]
    spec = knobs.read_spec(port.knobs)
    raw = {
        "files": {path: system.read(path) for path in spec["files"]},
        "commands": [],
    }
    for argv in spec["commands"]:
        rc, out = system.run(argv)
        raw["commands"].append({"argv": argv, "rc": rc, "stdout": out})
    for knob in port.knobs:
        try:
            values, warnings = knobs.values_from(nd, [knob], raw)
        except knobs.KnobError as exc:
            diffs.append(str(exc))
            continue
        notes += warnings
        diffs += knobs.verify(nd, [knob], values)
    return diffs


def main(argv: list[str] | None = None, system: System | None = None, config: str | None = None,
         wait_s: float | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    action = argv.pop(0) if argv and not argv[0].startswith("-") else "apply"
    if argv[:1] == ["--config"] and len(argv) == 2:
        config = argv[1]
    elif argv or action not in ("apply", "verify"):
        print(USAGE, file=sys.stderr)
        return EXIT_BAD_CONFIG
    config = config or CONFIG
    system = system or System()
    try:
        doc = load(config)
        ports = [Port(p) for p in doc["ports"]]  # all checked before anything is changed
        if wait_s is None:
            wait_s = int(doc.get("boot_wait_s", WAIT_S))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, FabricopsError) as exc:
        print(f"{PROG}: cannot read {config}: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    problems: list[str] = []
    notes: list[str] = []
    for port in ports:
        deadline = time.monotonic() + wait_s
        while not system.exists(f"/sys/class/net/{port.netdev}") and time.monotonic() < deadline:
            time.sleep(1)
        if action == "apply":
            problems += apply_port(system, port)
        problems += verify_port(system, port, notes)
    for line in notes:
        print(f"{PROG}: {line}", file=sys.stderr)
    for line in problems:
        print(line)
    if not problems:
        print(f"{PROG}: {action}: {len(ports)} port(s) match {config}")
    return EXIT_DIFFERS if problems else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
