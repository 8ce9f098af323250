"""``fabricops lab up|down|status|ssh|fault``: the emulated rack (docs/lab.md)."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys

from fabricops.errors import FabricopsError
from fabricops_lab import paths


def register(subparsers) -> None:
    lab = subparsers.add_parser(
        "lab",
        help="the emulated rack: up, down, status, ssh, fault",
        description="Run the emulated rack (booted Debian hosts, emulated "
        "switches and vendor tools) on this machine. Needs root.",
    )
    lab_sub = lab.add_subparsers(dest="lab_command", metavar="LAB_COMMAND")
    lab_sub.required = True

    up = lab_sub.add_parser("up", help="bring the lab up (or reconcile the one that is up)")
    up.add_argument(
        "--topology",
        metavar="NAME|FILE",
        help="a lab topology by name (default: the 4-host HGX H100 rack; two-tier: 8 hosts on leaf-spine "
        "InfiniBand and RoCE fabrics; gb200: two NVLink domains of two GB200 NVL72 trays) or a topology file",
    )
    up.add_argument(
        "--hosts", type=int, metavar="N", help="that topology's shape with N hosts (default topology if none)"
    )
    up.add_argument(
        "--inventory-dir",
        metavar="DIR",
        help="where to write the Ansible inventory (default: inventories/lab in a checkout, else "
        "$FABRICOPS_LAB_INVENTORY or the lab state dir's inventory/)",
    )
    up.set_defaults(func=cmd_up)

    down = lab_sub.add_parser("down", help="stop everything the lab started and remove what it made")
    down.set_defaults(func=cmd_down)

    st = lab_sub.add_parser("status", help="hosts and switches: up/down, addresses")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=cmd_status)

    ssh = lab_sub.add_parser("ssh", help="log in to a lab host (or run CMD there)")
    ssh.add_argument("name", metavar="NAME", help="host name (gpu01) or switch name")
    ssh.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD", help="command to run")
    ssh.set_defaults(func=cmd_ssh)

    try:
        faults = importlib.import_module("fabricops_lab.faults")
    except ModuleNotFoundError as exc:
        if exc.name != "fabricops_lab.faults":
            raise
    else:
        faults.register(lab_sub)


def _logging() -> None:
    logger = logging.getLogger("fabricops")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("fabricops lab: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def cmd_up(args) -> int:
    from fabricops_lab import rack

    _logging()
    lab = rack.up(args.topology, args.hosts, args.inventory_dir)
    print(rack.format_status(rack.status()))
    t = lab.get("timings")
    if t:
        print(
            f"\nup in {t['total_s']} s (image {t['image_s']} s, hosts {t.get('hosts_s')} s, "
            f"switches/repository {t.get('services_s')} s, slurm {t.get('slurm_s')} s)"
        )
    return 0


def cmd_down(args) -> int:
    from fabricops_lab import rack

    _logging()
    done = rack.down()
    print("lab down" + (f" ({', '.join(done)} stopped)" if done else " (nothing was up)"))
    return 0


def cmd_status(args) -> int:
    from fabricops_lab import rack

    st = rack.status()
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        print(rack.format_status(st))
    down = [n for n, h in st["hosts"].items() if h["state"] != "up"]
    return 1 if down else 0


def cmd_ssh(args) -> int:
    from fabricops_lab import hosts

    lab = paths.load_lab()
    topo = lab["topology"]
    host = next((h for h in topo["hosts"] if h["name"] == args.name), None)
    ctl = (lab.get("slurm") or {}).get("controller")
    if host is None and ctl and ctl["name"] == args.name:
        host = ctl  # the Slurm head node (fabricops_lab.slurm): a lab server like the hosts
    if host is None:
        sw = next((s for s in topo["switches"] if s["name"] == args.name), None)
        if sw is None:
            names = [h["name"] for h in topo["hosts"]] + [s["name"] for s in topo["switches"]]
            names += [ctl["name"]] if ctl else []
            raise FabricopsError(f"{args.name!r} is not in the lab (try one of: {', '.join(names)})")
        info = (lab.get("switches") or {}).get(sw["name"])
        if not info:
            raise FabricopsError(
                f"switch {sw['name']} is not emulated in this lab (no SSH server runs for it)"
            )
        kh = paths.ssh_dir() / "known_hosts"
        user = info.get("user") or {"onyx": "admin", "cumulus": "cumulus"}.get(sw["os"], "admin")
        port = int(info.get("port") or 22)
        print(
            f"{sw['name']} ({sw['os']}) is an emulated switch; log in with its password:\n"
            f"  ssh -o UserKnownHostsFile={kh} -p {port} {user}@{info.get('mgmt_ip') or sw['mgmt_ip']}\n"
            f"  password: cat {info.get('password_file', paths.switch_dir(sw['name']) / 'password')}"
        )
        return 0
    argv = ["ssh", *hosts.ssh_base_args(), "-o", "BatchMode=no"]
    if not args.cmd and sys.stdin.isatty():
        argv.append("-t")
    argv += [f"root@{host['mgmt_ip']}", *args.cmd]
    sys.stdout.flush()
    os.execvp("ssh", argv)
    return 0  # pragma: no cover
