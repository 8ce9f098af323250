"""site.yml and verification on GB200 NVL72 compute trays (the lab's gb200 topology: NVLink domains
nvl72-a = tray01, tray02 and nvl72-b = tray03, tray04; four NDR ports a tray on one InfiniBand switch).

- the first run converges with no fabric manager on any tray and IMEX configured per domain
  (nodes_config.cfg lists the domain's trays, channel0 is the driver's device, nvidia-imex READY);
- a second run and ``--check`` report changed=0;
- ``fabricops verify --nccl`` passes and prints the per-scale table (intra-node per tray, intra-domain
  with MNNVL=1 and =0 per domain, across domains);
- a tray's IMEX killed (fault imex-peer-down): verify fails naming the tray and does not run that
  domain's MNNVL group, the other domain's runs;
- a tray restarted: channel0 is back at boot from the module option alone, before any playbook run,
  and a run after it changes nothing in the IMEX role.

Each test needs only the converged rack (``converged``) and leaves it healthy, so the order does not
matter. docs/development.md, "The GB200 rack test", says how to run it and what it costs.
"""

from __future__ import annotations

import json
import time

import pytest
from integration.conftest import host_exec, ssh
from lab_gb200.conftest import TOPOLOGY, fabricops, site, verify

pytestmark = pytest.mark.lab

CHANNEL = "/dev/nvidia-caps-imex-channels/channel0"
DRIVER = "550.54.15"  # the lab's driver (fabricops_lab.hardware.DRIVER_VERSION)


def imex_view(tray: str) -> dict:
    """TRAY's ``nvidia-imex-ctl -N -j``: {address: the status of TRAY's connection to it}."""
    from fabricops_lab import paths

    me = paths.load_lab()["hosts"][tray]["mgmt_ip"]
    nodes = json.loads(ssh(tray, "nvidia-imex-ctl -N -j").stdout)["nodes"]
    mine = next(n for n in nodes.values() if n["host"] == me)
    return {c["host"]: c["status"] for c in mine["connections"].values()}


def wait_for(what: str, cond, timeout: float = 60.0, step: float = 1.0):
    end = time.monotonic() + timeout
    while True:
        try:
            got = cond()
        except (AssertionError, ValueError, KeyError, StopIteration):
            got = None
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


def test_converge_without_fabric_manager_and_imex_per_domain(converged, trays, gb200_lab):
    assert set(converged.hosts) >= set(trays)
    bad = {h: s for h, s in converged.hosts.items() if s["failures"] or s["unreachable"]}
    assert not bad, bad
    assert "ROLLOUT DONE: tray01, tray02, tray03, tray04; failed: none" in converged.stdout
    addr = {h["name"]: h["mgmt_ip"] for h in gb200_lab["topology"]["hosts"]}
    probe = "; ".join([
        "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' 'nvidia-fabricmanager*' "
        "'nvidia-imex-*' 2>/dev/null",
        "echo ---", "cat /etc/nvidia-imex/nodes_config.cfg", "echo ---", f"stat -c '%F %t' {CHANNEL}",
        "grep nvidia-caps-imex-channels /proc/devices", "systemctl is-active nvidia-imex",
        "nvidia-imex-ctl -q",
    ])
    out = {t: ssh(t, probe, check=False).stdout for t in trays}
    for tray, domain in trays.items():
        pkgs, nodes, rest = out[tray].split("---\n")
        installed = [ln.split()[:2] for ln in pkgs.splitlines() if ln.split()[2:3] in (["ii"], ["hi"])]
        # no fabric manager (the fabric services table: GB200 runs IMEX instead), IMEX at the driver's version
        assert installed == [["nvidia-imex-550", f"{DRIVER}-1"]], pkgs
        members = sorted(addr[t] for t, d in trays.items() if d == domain)
        assert nodes.split() == members, (tray, nodes)
        chan, proc, active, ready = rest.splitlines()
        major = int(proc.split()[0])
        assert chan == f"character special file {major:x}", rest
        assert (active, ready) == ("active", "READY"), rest


def test_second_run_and_check_change_nothing(converged):
    for extra in ((), ("--check",)):
        run = site(*extra)
        assert run.rc == 0, run.stdout[-3000:]
        changed = {h: s["changed"] for h, s in run.hosts.items()}
        assert set(changed.values()) == {0}, (extra, changed, run.changed_tasks())


def test_verify_nccl_per_scale(converged, trays, tmp_path):
    rc, data, out = verify(tmp_path, "--nccl")
    assert rc == 0, out[-5000:]
    assert "NCCL SCALES" in out
    groups = {(g["group"], g["mnnvl"]): g for g in data["nccl_scales"]}
    domains = sorted(set(trays.values()))
    want = {(f"intra-node {t}", None) for t in trays}
    want |= {(f"intra-domain {d}", m) for d in domains for m in (1, 0)}
    want |= {("across domains", 0)}
    assert set(groups) == want, sorted(groups, key=str)
    assert all(g["verdict"] == "pass" for g in groups.values()), groups
    for d in domains:
        # NVLink across the domain's trays carries more than the network does
        assert groups[(f"intra-domain {d}", 1)]["busbw"] > groups[(f"intra-domain {d}", 0)]["busbw"]
    checks = {(r["check"], r["status"]) for r in data["results"] if r["check"].startswith("imex_")}
    assert checks == {("imex_domain", "pass"), ("imex_channel", "pass")}, checks


def test_imex_peer_down_fails_verify_and_skips_that_domains_mnnvl(converged, trays, gb200_lab, tmp_path):
    addr = {h["name"]: h["mgmt_ip"] for h in gb200_lab["topology"]["hosts"]}
    p = fabricops("lab", "fault", "tray04", "imex-peer-down", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        # the emulated peers notice a killed daemon by its heartbeat (emul/imex.py STALE_S)
        wait_for("tray03 to see tray04 not connected",
                 lambda: imex_view("tray03").get(addr["tray04"]) not in (None, "CONNECTED"), timeout=30)
        rc, data, out = verify(tmp_path, "--nccl")
        assert rc == 1, out[-4000:]
        imex = {r["device"]: r for r in data["results"] if r["check"] == "imex_domain"}
        assert imex["nvl72-a"]["status"] == "pass"
        assert imex["nvl72-b"]["status"] == "fail" and "tray04" in imex["nvl72-b"]["message"], imex["nvl72-b"]
        assert "tray04" in imex["nvl72-b"]["details"]["down"]
        groups = {(g["group"], g["mnnvl"]): g for g in data["nccl_scales"]}
        blocked = groups[("intra-domain nvl72-b", 1)]
        assert blocked["busbw"] is None and blocked["verdict"] != "pass", blocked  # not run
        assert groups[("intra-domain nvl72-a", 1)]["verdict"] == "pass"
        assert groups[("intra-domain nvl72-b", 0)]["verdict"] == "pass"  # the network between them is fine
    finally:
        p = fabricops("lab", "fault", "clear", "tray04", timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
    wait_for("nvl72-b connected again", lambda: set(imex_view("tray03").values()) == {"CONNECTED"},
             timeout=30)


def test_restarted_tray_gets_channel0_from_the_module_option(converged, tmp_path):
    from fabricops_lab import rack

    ssh("tray02", "systemctl reboot", check=False)
    wait_for("tray02 to go down", lambda: rack.status()["hosts"]["tray02"]["state"] != "up", timeout=60)
    rack.up(TOPOLOGY)  # the lab restarts the host that is down (its disk kept, /dev and /run fresh)
    # no playbook yet: the driver's load at boot made channel0 (NVreg_CreateImexChannel0=1 in modprobe.d)
    major = host_exec("tray02", ["grep", "nvidia-caps-imex-channels", "/proc/devices"]).stdout.split()[0]
    stat = host_exec("tray02", ["stat", "-c", "%F %t %T %a", CHANNEL]).stdout.strip()
    assert stat == f"character special file {int(major):x} 0 666", stat
    wait_for("tray02's IMEX READY", lambda: ssh("tray02", "nvidia-imex-ctl -q").stdout.strip() == "READY",
             timeout=60)
    # the IMEX role has nothing to do after the restart (other roles may: the lab starts a restarted
    # host's openibd before its emulated sysfs is back, docs/development.md)
    run = site()
    assert run.rc == 0, run.stdout[-3000:]
    assert not [t for t in run.changed_tasks() if "nvidia_imex" in t], run.changed_tasks()
    rc, _data, out = verify(tmp_path, "--nccl")
    assert rc == 0, out[-4000:]
