"""A real Slurm in the lab (docs/lab.md, "Slurm"; docs/lab-fidelity.md, "Slurm").

Debian 12's own packages (slurm-wlm 22.05, MUNGE 0.5.15) from the lab image: ``slurmctld`` runs on
one extra small container, the Slurm head node ``slurmctl`` (same image, own network namespace, on
the management network at :data:`CONTROLLER_IP`, reached over SSH like the hosts), and ``slurmd``
on every GPU host. The lab lays out what a site's provisioning lays out:

- one MUNGE key per lab (``STATE_DIR/slurm/munge.key``), written into every container before it
  boots as ``/etc/munge/munge.key`` (0400, owned by the image's ``munge`` user);
- the daemon each container runs, enabled the way ``systemctl enable`` does it (the image enables
  neither: lab/image.py);
- one ``slurm.conf`` (``STATE_DIR/slurm/slurm.conf``, copied to ``/etc/slurm/slurm.conf`` everywhere),
  written by :func:`slurm_conf` from the topology and from what ``slurmd -C`` reports on the first
  GPU host, once that host has booted (a site runs ``slurmd -C`` on a node for its NodeName line).

``lab up`` then starts slurmctld, waits for ``scontrol ping``, starts slurmd everywhere and waits
until ``sinfo`` shows every GPU host ``idle`` (or, when reconciling, answering), or fails with one
sentence naming the nodes and their states. Nothing here is visible to roles beyond what a site's
Slurm shows: the inventory lists the head node in its own group, ``slurm_controller``.
"""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fabricops.errors import FabricopsError
from fabricops_lab import hardware, hosts, network, paths
from fabricops_lab.procs import alive
from fabricops_lab.topology import MGMT_NET

#: the Slurm head node: its container's name, host name and management address (hosts are
#: .11-.73, switches .201-.254: topology.py)
CONTROLLER = "slurmctl"
CONTROLLER_IP = f"{MGMT_NET}.100"
#: MACs only (hardware.mgmt_mac): outside the hosts' indexes 1..63
CONTROLLER_INDEX = 256
#: its management veth in the root namespace (a host's is fo-m<index>)
CONTROLLER_VETH = "fo-mslurm"
PARTITION = "gpu"
CONF = "etc/slurm/slurm.conf"
#: topology.conf for TopologyPlugin=topology/tree, read from beside slurm.conf (topology.conf(5))
TOPOLOGY_CONF = "etc/slurm/topology.conf"
MUNGE_KEY = "etc/munge/munge.key"
#: how long `lab up` waits for slurmctld to answer and for the nodes to register
READY_TIMEOUT = 60.0
#: `slurmd -C` fields that a NodeName line takes as they are (slurm.conf(5), NODE CONFIGURATION)
HARDWARE_KEYS = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
#: sinfo's compact node states (sinfo(1), NODE STATE CODES) that mean slurmctld has not heard from
#: slurmd as configured: unknown, invalid registration; a trailing '*' is "not responding"
NOT_REGISTERED = ("unk", "inval")


def slurm_dir() -> Path:
    return paths.STATE_DIR / "slurm"


def controller_host() -> dict[str, Any]:
    """The head node in the shape hosts.wait_ssh and the inventory take."""
    return {"name": CONTROLLER, "mgmt_ip": CONTROLLER_IP}


# --- slurm.conf ---------------------------------------------------------------------------------


def parse_slurmd_c(text: str, where: str = "slurmd -C") -> dict[str, int]:
    """The hardware line of ``slurmd -C`` (``NodeName=gpu01 CPUs=2 Boards=1 ... RealMemory=24105``,
    then ``UpTime=...``) as {key: int} for :data:`HARDWARE_KEYS`."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("NodeName="):
            fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            break
    missing = [k for k in HARDWARE_KEYS if not fields.get(k, "").isdigit()]
    if missing:
        raise FabricopsError(
            f"{where} printed no {', '.join(missing)} for a NodeName line: {text.strip()[:200]!r}"
        )
    return {k: int(fields[k]) for k in HARDWARE_KEYS}


def slurm_conf(topo: dict[str, Any], hw: dict[str, int]) -> str:
    """slurm.conf for the lab's rack as a site writes it (Slurm 22.05, slurm.conf(5) of that release:
    https://slurm.schedmd.com/archive/slurm-22.05.8/slurm.conf.html). HW is what slurmd -C reports
    on a host (every lab host runs on the same kernel, so one answer holds for all)."""
    names = [h["name"] for h in topo["hosts"]]
    lines = [
        f"# slurm.conf of the fabricops lab {topo['name']!r}, written by `fabricops lab up`",
        "# (fabricops_lab.slurm; docs/lab.md, \"Slurm\"). Slurm 22.05 from Debian 12 (slurm-wlm).",
        f"ClusterName={topo['name']}",
        # the head node by name and address: slurmd reaches it without a resolver
        f"SlurmctldHost={CONTROLLER}({CONTROLLER_IP})",
        "SlurmUser=slurm",
        "SlurmctldPort=6817",
        "SlurmdPort=6818",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # Debian's directories (made and chowned to slurm by the slurmctld / slurmd postinsts) and the
        # pid files its units name (PIDFile=/run/slurmctld.pid, /run/slurmd.pid)
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        # No cgroup plugins: inside the lab's containers the cgroup v1 controllers (cpuset, memory,
        # freezer, ...) are mounted read-only, so Slurm's cgroup plugins cannot make their hierarchy;
        # ProctrackType defaults to proctrack/cgroup in 22.05, hence set, as containerised Slurm
        # setups do (SlinkyProject/slurm-operator#82).
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        # no slurmdbd: no accounting, no job completion log
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        # 1: a node that went DOWN only because it stopped responding (a host rebooted) is back in
        # service when its slurmd registers with a valid configuration; a node an operator set DOWN,
        # or one that registered with less hardware than configured, stays DOWN for a person to look
        # at. No value of ReturnToService undoes a DRAIN: a drain (fabricops' action on a failed
        # check) ends only with `scontrol update state=resume`, by whoever owns the drain reason.
        "ReturnToService=1",
        # a dead slurmd is marked DOWN within a minute (slurmctld pings every SlurmdTimeout/3)
        "SlurmdTimeout=60",
        "SlurmctldTimeout=120",
        # jobs placed by the fabric's tree (topology.conf(5)): `scontrol reconfigure` re-reads the file
        # (`fabricops topology` writes it); changing the plugin itself needs a slurmctld restart
        "TopologyPlugin=topology/tree",
    ]
    hardware_ = " ".join(f"{k}={hw[k]}" for k in HARDWARE_KEYS)
    for h in topo["hosts"]:
        lines.append(f"NodeName={h['name']} NodeAddr={h['mgmt_ip']} {hardware_} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes={','.join(names)} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def topology_conf(topo: dict[str, Any]) -> str:
    """The topology.conf a site writes by hand before it has the fabric's shape: one switch over every
    node (Slurm then treats the rack as one leaf). ``fabricops topology`` replaces it on the head node;
    ``lab up`` never writes over a topology.conf that is there."""
    names = [h["name"] for h in topo["hosts"]]
    return (
        f"# topology.conf of the fabricops lab {topo['name']!r}, written by `fabricops lab up` as a site's\n"
        "# first hand-written one: the whole rack under one switch. `fabricops topology` writes the\n"
        "# fabric's own tree (docs/scheduler-topology.md).\n"
        f"SwitchName=rack Nodes={','.join(names)}\n"
    )


# --- files in a container's root ----------------------------------------------------------------


def ensure_munge_key() -> bytes:
    """The lab's MUNGE key: 1024 random bits, as `mungekey --create` makes by default (mungekey(8)).
    Made once before the containers are prepared in parallel (rack._bring_up)."""
    d = slurm_dir()
    d.mkdir(parents=True, exist_ok=True)
    key = d / "munge.key"
    if not key.exists():
        tmp = key.with_suffix(".tmp")
        tmp.write_bytes(os.urandom(128))
        os.chmod(tmp, 0o400)
        tmp.replace(key)
    return key.read_bytes()


def _id_in(root: Path, db: str, name: str) -> int:
    """uid (db=passwd) or gid (db=group) of NAME in the image's own database."""
    for line in (root / "etc" / db).read_text().splitlines():
        parts = line.split(":")
        if len(parts) > 2 and parts[0] == name:
            return int(parts[2])
    raise FabricopsError(f"the lab image has no {name!r} in /etc/{db}: did the munge package install?")


def _write(path: Path, data: bytes, mode: int, owner: tuple[int, int] = (0, 0)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    tmp = path.with_name(f".{path.name}.fabricops")
    tmp.write_bytes(data)
    os.chown(tmp, *owner)
    os.chmod(tmp, mode)
    tmp.replace(path)


def install(root: Path, daemon: str) -> None:
    """Before boot: the lab's MUNGE key, slurm.conf when the lab has written it, DAEMON enabled."""
    munge = (_id_in(root, "passwd", "munge"), _id_in(root, "group", "munge"))
    _write(root / MUNGE_KEY, ensure_munge_key(), 0o400, munge)
    conf = slurm_dir() / "slurm.conf"
    if conf.exists():
        _write(root / CONF, conf.read_bytes(), 0o644)
    topology = slurm_dir() / "topology.conf"
    if topology.exists() and not (root / TOPOLOGY_CONF).exists():
        _write(root / TOPOLOGY_CONF, topology.read_bytes(), 0o644)
    link = root / "etc/systemd/system/multi-user.target.wants" / f"{daemon}.service"
    if not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(f"/lib/systemd/system/{daemon}.service")


# --- the head node's container ------------------------------------------------------------------


def nspawn_argv() -> list[str]:
    """As a host's (hosts.nspawn_argv) without the emulated hardware and fabric: a plain server."""
    root = paths.host_dir(CONTROLLER) / "root"
    return [
        "systemd-nspawn", "--boot", "--quiet", "--directory", str(root), "--machine", f"fo-{CONTROLLER}",
        "--hostname", CONTROLLER,
        f"--network-namespace-path={network.NETNS_DIR / network.host_netns(CONTROLLER)}",
        "--capability=CAP_NET_ADMIN", "--register=no", "--keep-unit", "--console=read-only",
        "--resolv-conf=off", "--timezone=off", "--link-journal=no",
    ]


def create_netns() -> None:
    ns = network.host_netns(CONTROLLER)
    destroy_netns()
    network.run(["ip", "netns", "add", ns])
    network.ip_batch([
        f"link add {CONTROLLER_VETH} address {hardware.mgmt_mac(CONTROLLER_INDEX, 'bridge')} type veth "
        f"peer name eth0 address {hardware.mgmt_mac(CONTROLLER_INDEX, 'host')} netns {ns}",
        f"link set {CONTROLLER_VETH} master {network.MGMT_BRIDGE} up",
    ])
    network.ip_batch(["link set lo up"], ns)


def destroy_netns() -> None:
    ns = network.host_netns(CONTROLLER)
    if network.netns_exists(ns):
        network.run(["ip", "netns", "del", ns], check=False)
    if network.link_exists(CONTROLLER_VETH):
        network.run(["ip", "link", "del", CONTROLLER_VETH], check=False)


def start_controller(topo: dict[str, Any], lower: Path, authorized_key: str) -> dict[str, Any]:
    """Prepare and boot the head node's container (returns its lab.json entry; SSH not yet up)."""
    taken = [n["name"] for n in topo["hosts"] + topo["switches"] if n["name"] == CONTROLLER]
    if taken:
        raise FabricopsError(f"the topology names a host or switch {CONTROLLER!r}, the lab's Slurm head node")
    hosts.ensure_host_key(CONTROLLER)
    root = hosts.mount_root(CONTROLLER, lower)
    hd = paths.host_dir(CONTROLLER)
    etc = root / "etc"
    hosts._write(etc / "hostname", f"{CONTROLLER}\n")
    hosts._write(etc / "hosts", hosts.etc_hosts(topo, CONTROLLER))
    hosts._write(etc / "machine-id", hardware.machine_id(CONTROLLER) + "\n", 0o444)
    for suffix, mode in (("", 0o600), (".pub", 0o644)):
        src = hd / "ssh" / f"ssh_host_ed25519_key{suffix}"
        hosts._write(etc / "ssh" / f"ssh_host_ed25519_key{suffix}", src.read_text(), mode)
    (root / "root/.ssh").mkdir(mode=0o700, parents=True, exist_ok=True)
    hosts._write(root / "root/.ssh/authorized_keys", authorized_key.strip() + "\n", 0o600)
    hosts._write(etc / "network/interfaces.d/eth0",
                 f"auto eth0\niface eth0 inet static\n    address {CONTROLLER_IP}/24\n")
    install(root, "slurmctld")
    create_netns()
    nspawn = hosts.start_host(controller_host(), nspawn_argv())
    return {
        "name": CONTROLLER,
        "mgmt_ip": CONTROLLER_IP,
        "nspawn_pid": nspawn,
        "leader_pid": hosts.find_leader(nspawn),
        "machine": f"fo-{CONTROLLER}",
        "netns": network.host_netns(CONTROLLER),
    }


def controller_leader() -> int:
    nspawn = hosts.nspawn_pid_of(CONTROLLER)
    if not (nspawn and alive(nspawn)):
        raise FabricopsError(f"the Slurm head node {CONTROLLER} is down; run fabricops lab up")
    return hosts.find_leader(nspawn, timeout=2)


def controller_exec(argv: list[str], check: bool = True, timeout: float = 30):
    """ARGV inside the head node (nsenter, as hosts.host_exec does for the hosts)."""
    return hosts.host_exec(CONTROLLER, argv, check=check, timeout=timeout, leader=controller_leader())


def controller_is_up() -> bool:
    try:
        controller_leader()
    except FabricopsError:
        return False
    return network.link_exists(CONTROLLER_VETH) and _port_open(CONTROLLER_IP, 22)


def _port_open(ip: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((ip, port), timeout=1.0):
            return True
    except OSError:
        return False


def stop_controller() -> None:
    hosts.stop_host(CONTROLLER, hosts.nspawn_pid_of(CONTROLLER))
    destroy_netns()


def remove() -> None:
    """`lab down`: the head node's network and the lab's Slurm files (the container itself is
    stopped with the hosts: its directory is STATE_DIR/hosts/slurmctl)."""
    destroy_netns()
    shutil.rmtree(slurm_dir(), ignore_errors=True)


# --- bringing Slurm up --------------------------------------------------------------------------


def _node_states(text: str) -> dict[str, tuple[str, str]]:
    """``sinfo -h -N -o '%N|%t|%E'`` -> {node: (compact state, reason)} (a node in two partitions
    prints twice: same state)."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) == 3:
            out[parts[0]] = (parts[1], parts[2])
    return out


def not_ready(states: dict[str, tuple[str, str]], names: list[str], idle: bool) -> dict[str, str]:
    """Nodes of NAMES that are not ready, with 'state (reason)': with IDLE, every node must be
    ``idle``; else answering and registered (drained or down by an operator is their business)."""
    bad = {}
    for n in names:
        state, reason = states.get(n, ("missing", "not in sinfo"))
        ok = state == "idle" if idle else not (state.endswith("*") or state.rstrip("*~#!%$@^-") in
                                                NOT_REGISTERED or state == "missing")
        if not ok:
            bad[n] = f"{state} ({reason})" if reason and reason != "none" else state
    return bad


def _wait(what: str, probe, timeout: float) -> None:
    """Poll PROBE (returns None when done, else what is still wrong) until TIMEOUT."""
    deadline = time.monotonic() + timeout
    while True:
        wrong = probe()
        if wrong is None:
            return
        if time.monotonic() >= deadline:
            raise FabricopsError(
                f"Slurm {what} within {timeout:.0f} s: {wrong}; see /var/log/slurm/ on "
                f"{CONTROLLER} and the hosts (fabricops lab ssh NAME)"
            )
        time.sleep(0.2)


def _ping() -> str | None:
    proc = controller_exec(["scontrol", "ping"], check=False)
    return None if " is UP" in proc.stdout else (proc.stdout + proc.stderr).strip() or "no answer"


def _systemctl(name: str, verb: str, unit: str) -> None:
    argv = ["systemctl", verb, unit]
    proc = (controller_exec(argv, check=False, timeout=60) if name == CONTROLLER
            else hosts.host_exec(name, argv, check=False, timeout=60))
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()[-200:]
        raise FabricopsError(f"Slurm did not start: systemctl {verb} {unit} on {name} failed ({detail})")


def start(lab: dict[str, Any], fresh: bool, timeout: float = READY_TIMEOUT) -> list[str]:
    """slurm.conf everywhere, slurmctld up, slurmd on every host, nodes ready; returns what changed.

    FRESH (a lab just created): every node must come up ``idle``; else (reconcile) registered and
    answering, whatever state an operator or a test left it in."""
    topo = lab["topology"]
    names = [h["name"] for h in topo["hosts"]]
    changed: list[str] = []
    conf = slurm_dir() / "slurm.conf"
    if not conf.exists():
        first = names[0]
        out = hosts.host_exec(first, ["slurmd", "-C"], check=False)
        hw = parse_slurmd_c(out.stdout, f"slurmd -C on {first}")
        slurm_dir().mkdir(parents=True, exist_ok=True)
        conf.write_text(slurm_conf(topo, hw))
        (slurm_dir() / "topology.conf").write_text(topology_conf(topo))
        changed.append("wrote slurm.conf")
    text = conf.read_bytes()
    stale = []
    for name in [CONTROLLER, *names]:
        target = paths.host_dir(name) / "root" / CONF
        if not (target.exists() and target.read_bytes() == text):
            _write(target, text, 0o644)
            stale.append(name)
        # the site's topology.conf, once there, is the site's (fabricops topology may have replaced it)
        topology = slurm_dir() / "topology.conf"
        target = paths.host_dir(name) / "root" / TOPOLOGY_CONF
        if not target.exists():
            if not topology.exists():
                topology.write_text(topology_conf(topo))
            _write(target, topology.read_bytes(), 0o644)
            if name not in stale:
                stale.append(name)

    def run(name: str, unit: str) -> None:
        _systemctl(name, "restart" if name in stale else "start", unit)

    run(CONTROLLER, "slurmctld")
    _wait("did not answer (scontrol ping)", _ping, timeout)
    with ThreadPoolExecutor(max_workers=min(16, len(names))) as pool:
        list(pool.map(lambda n: run(n, "slurmd"), names))

    def nodes() -> str | None:
        proc = controller_exec(["sinfo", "-h", "-N", "-o", "%N|%t|%E"], check=False)
        if proc.returncode != 0:
            return f"sinfo failed: {(proc.stderr or proc.stdout).strip()[-200:]}"
        bad = not_ready(_node_states(proc.stdout), names, idle=fresh)
        return ", ".join(f"{n} {s}" for n, s in bad.items()) or None

    goal = "idle" if fresh else "registered"
    _wait(f"did not bring every lab host to {goal}", nodes, timeout)
    if stale and not changed:
        changed.append(f"rewrote slurm.conf on {', '.join(stale)}")
    return changed


def reconcile(lab: dict[str, Any], lower_fn, authorized_key: str) -> list[str]:
    """`lab up` on a lab that is up: the head node restarted when it went down, then :func:`start`."""
    if not lab.get("slurm"):
        raise FabricopsError(
            "the lab that is up was made without Slurm (an older fabricops); run fabricops lab down, "
            "then fabricops lab up"
        )
    changed: list[str] = []
    if not controller_is_up():
        stop_controller()
        lab["slurm"] = {"controller": start_controller(lab["topology"], lower_fn(), authorized_key)}
        hosts.wait_ssh(controller_host())
        changed.append(f"restarted {CONTROLLER}")
    return changed + start(lab, fresh=False)
