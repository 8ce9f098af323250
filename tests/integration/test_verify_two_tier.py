"""Verification at fabric scale on a two-tier lab (issue 18): 8 hosts, each with one NDR InfiniBand
port (4 IB leaves, 2 IB spines) and one 400GbE RoCE port (4 leaves, 2 spines, Cumulus and Onyx).

- healthy: the coverage schedule exercises every cable, each direction, in fewer rounds than the
  circle method (N-1), and passes; the as-built cabling matches the plan;
- each fault is found and named: a degraded ISL, a degraded host port, PFC off on one spine port
  (RoCE), a swapped cable; healthy again after each is cleared;
- the switches are read (issue 35): a RoCE inter-switch link that trained at half width fails the run
  naming both switch ports, and on the healthy rack every RoCE ISL direction is proven by the bytes its
  switch ports counted (no link left unproven);
- the scheduler's topology (issue 36): topology.conf from the cabling as built is what the real
  slurmctld shows, a moved cable moves its node, and at 16 hosts (the rack grown by ``--hosts 16``
  for that one test) slurmctld lists the 4 leaves, 2 spines and 16 nodes.

The module swaps the shared lab for the two-tier rack and, when it ends, puts a fresh default rack
back (the session's ``lab`` data updated in place), so a file that runs after it, in any order,
finds the lab it expects: pristine hosts, as every file that needs OFED or a converge makes its own.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from integration.conftest import rebuild_lab

from fabricops.verify.rounds import ROCE_FOLLOWUP_ROUNDS

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
FABRICOPS = str(Path(sys.executable).with_name("fabricops"))
HOSTS = 8


def _env():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def verify(tmp_path, *args) -> tuple[int, dict, str]:
    out = tmp_path / f"v{len(list(tmp_path.glob('v*.json')))}.json"
    argv = [FABRICOPS, "verify", "-q", "--json", str(out), *args]
    p = subprocess.run(argv, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    return p.returncode, json.loads(out.read_text()), p.stdout + p.stderr


def fault(*args):
    p = subprocess.run([FABRICOPS, "lab", "fault", *args], cwd=ROOT, env=_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def clear():
    fault("clear")


@pytest.fixture(autouse=True)
def faults_cleared():
    """Each test clears the fault it injects (in its own finally); this checks that it did: no fault
    left for the next test to trip over (it replaces a second verify run after each clear)."""
    yield
    p = subprocess.run([FABRICOPS, "lab", "fault", "list", "--json"], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and json.loads(p.stdout) == [], p.stdout + p.stderr


def bad(data) -> list[dict]:
    return [r for r in data["results"] if r["status"] not in ("pass", "skip")]


def _install_ofed(ssh, host: str) -> None:
    """The lab's default MLNX_OFED on ``host`` by its own installer, as a site's image build does."""
    from fabricops_lab import paths

    info = json.loads(paths.lab_json().read_text())["ofed"]
    v = info["versions"][info["default_version"]]
    ssh(
        host,
        f"cd /tmp && python3 -c \"import urllib.request as u; u.urlretrieve('{v['tgz_url']}', 'o.tgz')\" "
        f"&& tar xzf o.tgz && {v['dir']}/mlnxofedinstall --force --skip-distro-check --without-fw-update"
        " >/dev/null && /etc/init.d/openibd restart >/dev/null",
        timeout=300,
    )


@pytest.fixture(scope="module")
def two_tier(lab, ssh, ansible_playbook):
    """The two-tier rack, OFED installed, RoCE lossless on hosts and on every leaf and spine port."""
    data = rebuild_lab(lab, "two-tier", HOSTS)
    with concurrent.futures.ThreadPoolExecutor(len(data["hosts"])) as pool:
        # each host on its own: the eight installs wait on their hosts, not on each other
        list(pool.map(lambda h: _install_ofed(ssh, h), sorted(data["hosts"])))  # re-raises the first failure
    # what the pair and cabling tests judge: the live QoS (roce_host_persist=false leaves out the
    # boot-time unit and its program, whose restore is test_roles_roce_host's and test_host_faults'
    # subject) on every host, and every switch configured at once as a new fabric is
    for play in ("playbooks/roce_host.yml", "playbooks/switches.yml"):
        run = ansible_playbook(play, "-e", "roce_host_persist=false", "-e", "fabricops_switch_serial=100%",
                               timeout=900)
        assert run.rc == 0, run.stdout[-4000:]
    assert {"spine1", "spine2"} <= set(run.hosts), run.stdout[-2000:]  # spines configured too (ISL ports)
    try:
        yield data
    finally:
        clear()
        assert len(rebuild_lab(lab)["hosts"]) == 4


def test_healthy_two_tier_covers_every_cable_in_few_rounds(two_tier, tmp_path):
    rc, data, text = verify(tmp_path, "--only", "pairs")
    assert rc == 0, text
    p = data["pairs"]
    assert p["mode"] == "coverage", text
    # every cable, both directions: 8 host cables + 8 ISLs per fabric, two fabrics
    assert p["links_total"] == 2 * 2 * (HOSTS + 8), p
    ib, roce = p["fabrics"]
    assert ib["links_covered"] == ib["links_total"] == 2 * (HOSTS + 8), ib  # InfiniBand: every cable
    assert not ib["unroutable"] and not ib["not_covered"], ib
    # RoCE: every host cable, and every ISL direction (ECMP paths) proven by the bytes its switch ports
    # counted between rounds -- no link left unproven, none skipped as "not observed"
    assert roce["links_covered"] == roce["links_total"] == 2 * (HOSTS + 8), roce
    assert not roce.get("unproven"), roce
    assert not [r for r in data["results"] if r["check"] == "link_proof" and r["status"] != "pass"], text
    assert "not observed" not in text
    # every RoCE switch port of the fabric read on its switch: up at its planned 400 Gb/s
    ports = [r for r in data["results"] if r["check"] == "switch_port"]
    assert len(ports) == HOSTS + 8 and all(r["status"] == "pass" for r in ports), text
    assert all(r["measured"] == r["threshold"] == 400 for r in ports), text
    # the schedule is within 3x the lower bound; RoCE may add follow-up rounds where the ECMP hash of
    # random QP numbers sent no flow over an ISL -- a bounded number, counted and named apart
    scheduled = p["rounds"] - p["followup_rounds"]
    assert scheduled < HOSTS - 1, text  # the circle method needs N-1 = 7 rounds
    assert scheduled <= 3 * p["lower_bound"], text
    assert all(f["rounds"] <= 3 * f["lower_bound"] for f in p["fabrics"]), text
    assert 0 <= p["followup_rounds"] <= ROCE_FOLLOWUP_ROUNDS, text
    assert ("RoCE follow-up" in text) == bool(p["followup_rounds"]), text
    assert f"lower bound {p['lower_bound']}" in text
    # the negative controls ran on every bandwidth test and found the traffic where it was reported
    bw = [r for r in data["results"] if r["check"] == "ib_write_bw"]
    assert bw and all(r["details"].get("counters") for r in bw), bw[:1]


def test_as_built_cabling_matches_the_plan(two_tier, tmp_path):
    rc, data, text = verify(tmp_path, "--only", "cabling")
    assert rc == 0, text
    checked = [r for r in data["results"] if r["category"] == "cabling"]
    assert len(checked) >= HOSTS, text


def test_a_degraded_isl_is_named(two_tier, tmp_path):
    # ib-leaf2's first uplink (to ib-spine1) trained at 2X: half rate for what crosses it, nothing else
    fault("ib-leaf2", "port-width", "33", "2X")
    try:
        rc, data, text = verify(tmp_path, "--only", "pairs")
    finally:
        clear()
    assert rc == 1, text
    names = [r["message"] for r in bad(data) if r["check"] == "isolation"]
    assert names and all("ib-leaf2:33" in n and "ib-spine1:2" in n and "ISL" in n for n in names), text
    assert all(r["details"]["rail"] == 0 for r in bad(data) if r["check"] == "isolation"), text
    assert all("mlx5_0" in r["device"] for r in bad(data) if r["check"] != "isolation"), text
    # the cable is blamed, not the hosts behind it: every host's own verdict is pass (issue 35: a
    # healthy host was failed "blamed by pair tests on rail(s) 0") and the failed pair tests count
    # against the ISL
    verdicts = data["host_verdicts"]
    assert len(verdicts) == HOSTS and all(v["verdict"] == "pass" for v in verdicts.values()), verdicts
    assert "blamed by pair tests" not in text, text
    parts = data["bad_parts"]
    assert parts and all("ib-leaf2:33" in p["name"] for p in parts) and parts[0]["failed_tests"] > 0, parts
    # issue 36: acting on that verdict names the cable for quarantine and drains no node
    report = sorted(tmp_path.glob("v*.json"))[-1]
    p = subprocess.run([FABRICOPS, "act", str(report), "--state-dir", str(tmp_path / "act")], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    quarantines = [ln for ln in p.stdout.splitlines() if ln.startswith("QUARANTINE")]
    assert quarantines and all("ISL ib-leaf2:33<>ib-spine1:2" in ln for ln in quarantines), p.stdout
    assert not [ln for ln in p.stdout.splitlines() if ln.startswith("DRAIN")], p.stdout
    assert any(ln.startswith("0 drain, ") for ln in p.stdout.splitlines()), p.stdout


def test_a_half_width_roce_isl_fails_naming_both_switch_ports(two_tier, tmp_path):
    # spine2 swp3 <-> leaf3 Eth1/18 (Cumulus to Onyx) trained at 2X: 200 Gb/s at both ends
    fault("spine2", "port-width", "swp3", "2X")
    try:
        rc, data, text = verify(tmp_path, "--only", "pairs")
    finally:
        clear()
    assert rc == 1, text
    (isl,) = [r for r in bad(data) if r["check"] == "switch_port"]
    assert isl["category"] == "switches" and isl["status"] == "fail", isl
    assert isl["message"].startswith("ISL leaf3:Eth1/18<>spine2:swp3 trained at 200 Gb/s, planned 400"), isl
    assert set(isl["details"]["ends"]) == {"leaf3:Eth1/18", "spine2:swp3"}, isl
    assert (isl["measured"], isl["threshold"]) == (200, 400), isl
    assert "[switches/switch_port] ISL leaf3:Eth1/18<>spine2:swp3" in text
    assert not [r for r in data["results"] if r["check"] == "link_proof" and r["status"] != "pass"], text


def test_a_degraded_host_port_is_named(two_tier, tmp_path):
    fault("gpu03", "port-width", "mlx5_0", "2X")
    try:
        rc, data, text = verify(tmp_path, "--only", "pairs")
    finally:
        clear()
    assert rc == 1, text
    names = [r["message"] for r in bad(data) if r["check"] == "isolation"]
    assert names == ["rail mlx5_0/1: bad host port gpu03 mlx5_0/1"] or (
        len(names) == 1 and "host port gpu03 mlx5_0/1" in names[0]
    ), text
    assert all("gpu03" in r["host"] for r in bad(data) if r["check"] != "isolation"), text


def test_pfc_off_on_one_spine_port_fails_only_roce_through_it(two_tier, tmp_path):
    fault("spine1", "pfc-off", "swp1")  # spine1's downlink to leaf1
    try:
        rc, data, text = verify(tmp_path, "--only", "pairs")
    finally:
        clear()
    assert rc == 1, text
    failed = bad(data)
    assert failed, text
    assert all(r["check"] == "isolation" or "mlx5_1" in (r["device"] or "") for r in failed), text
    # the tests that failed crossed leaf1 (spine1 swp1 is its link): isolation narrows it to the ECMP
    # paths in and out of leaf1 (naming the spine port needs the switch counters: not read yet)
    names = [r["message"] for r in failed if r["check"] == "isolation"]
    assert names and all("ECMP paths" in n and "leaf1" in n for n in names), text


def test_a_swapped_cable_is_named(two_tier, tmp_path):
    fault("gpu03", "swapped-cable", "enp170s0f0np0", "gpu07:enp170s0f0np0")
    try:
        rc, data, text = verify(tmp_path, "--only", "cabling")
    finally:
        clear()
    assert rc == 1, text
    msgs = sorted(r["message"] for r in bad(data))
    assert msgs == [
        "gpu03 mlx5_1 is on leaf3 Eth1/2, planned leaf3 Eth1/1",
        "gpu07 mlx5_1 is on leaf3 Eth1/1, planned leaf3 Eth1/2",
    ], text


# --- issue 36: the scheduler's topology from the fabric as built --------------------------------


def _ctl(command: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """COMMAND on the Slurm head node over SSH, as a site's operator runs it."""
    from fabricops_lab import hosts, paths

    ip = paths.load_lab()["slurm"]["controller"]["mgmt_ip"]
    return subprocess.run(["ssh", *hosts.ssh_base_args(), f"root@{ip}", command], input=stdin,
                          capture_output=True, text=True, timeout=60)


def _topology(tmp_path, *args, out: Path | None = None) -> str:
    out = out or tmp_path / f"t{len(list(tmp_path.glob('t*.conf')))}.conf"
    p = subprocess.run([FABRICOPS, "topology", "-o", str(out), *args], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return out.read_text()


def _switches(text: str) -> dict[str, dict[str, str]]:
    """topology.conf or `scontrol show topology` lines -> {SwitchName: {key: value}}."""
    out = {}
    for line in text.splitlines():
        if line.startswith("SwitchName="):
            fields = dict(kv.split("=", 1) for kv in line.split())
            out[fields.pop("SwitchName")] = fields
    return out


def _hosts(expr: str) -> list[str]:
    """A hostlist expanded by Slurm itself (not by the code under test)."""
    p = _ctl(f"scontrol show hostnames {expr}")
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_topology_conf_from_the_cabling_as_built_is_what_slurmctld_places_jobs_by(two_tier, tmp_path):
    text = _topology(tmp_path)  # the InfiniBand fabric, read from ibnetdiscover
    assert "from the InfiniBand fabric's cabling as built" in text, text
    p = _ctl("cat > /etc/slurm/topology.conf && scontrol reconfigure", stdin=text)
    assert p.returncode == 0, p.stderr
    shown = _ctl("scontrol show topology")
    assert shown.returncode == 0, shown.stderr
    tree = _switches(shown.stdout)
    leaves = sorted(s for s, f in tree.items() if f["Level"] == "0")
    spines = sorted(s for s, f in tree.items() if f["Level"] == "1")
    assert leaves == [f"ib-leaf{i}" for i in range(1, 5)], shown.stdout
    assert spines == ["ib-spine1", "ib-spine2"], shown.stdout
    for i in range(1, 5):  # hosts i and i+4 are cabled to ib-leaf<i> (topology-two-tier.yml)
        assert _hosts(tree[f"ib-leaf{i}"]["Nodes"]) == [f"gpu{i:02d}", f"gpu{i + 4:02d}"], shown.stdout
    for spine in spines:
        assert _hosts(tree[spine]["Switches"]) == leaves, shown.stdout  # ib-leaf[1-4]: a hostlist too
        assert _hosts(tree[spine]["Nodes"]) == [f"gpu{i:02d}" for i in range(1, HOSTS + 1)], shown.stdout
    # written only when it differs: a second run leaves the file (and its time) alone
    written = tmp_path / "t0.conf"
    before = written.stat().st_mtime_ns
    assert _topology(tmp_path, out=written) == text and written.stat().st_mtime_ns == before


def test_a_cable_moved_to_another_leaf_moves_its_node_in_topology_conf(two_tier, tmp_path):
    before = _switches(_topology(tmp_path, "--fabric", "roce"))
    assert _hosts(before["leaf3"]["Nodes"]) == ["gpu03", "gpu07"], before
    # gpu03's RoCE cable and gpu04's swapped at the leaves: gpu03 now on leaf4, gpu04 on leaf3
    fault("gpu03", "swapped-cable", "enp170s0f0np0", "gpu04:enp170s0f0np0")
    try:
        after = _switches(_topology(tmp_path, "--fabric", "roce"))
    finally:
        clear()
    assert _hosts(after["leaf3"]["Nodes"]) == ["gpu04", "gpu07"], after
    assert _hosts(after["leaf4"]["Nodes"]) == ["gpu03", "gpu08"], after
    assert {s: f for s, f in after.items() if s not in ("leaf3", "leaf4")} == {
        s: f for s, f in before.items() if s not in ("leaf3", "leaf4")}


def test_sixteen_hosts_topology_conf_is_accepted_with_every_leaf_spine_and_node(lab, ssh, tmp_path):
    """The issue's scale: the two-tier rack grown to 16 hosts (``lab up --topology two-tier --hosts 16``,
    4 hosts per leaf), its InfiniBand cabling read as built (ibnetdiscover on one host: the only one
    that needs the diagnostics installed), and the file pushed to the real slurmctld, whose own
    ``scontrol show topology`` lists the 4 leaves, the 2 spines and all 16 nodes. Last in the file: the
    module's teardown (or the next file's fixture) puts the default rack back."""
    n = 16
    data = rebuild_lab(lab, "two-tier", n)
    try:
        assert len(data["hosts"]) == n
        _install_ofed(ssh, "gpu01")
        text = _topology(tmp_path)  # ibnetdiscover on the first host that has it: the whole fabric
        p = _ctl("cat > /etc/slurm/topology.conf && scontrol reconfigure", stdin=text)
        assert p.returncode == 0, p.stderr
        shown = _ctl("scontrol show topology")
        assert shown.returncode == 0, shown.stderr
        tree = _switches(shown.stdout)
        leaves = sorted(s for s, f in tree.items() if f["Level"] == "0")
        assert leaves == [f"ib-leaf{i}" for i in range(1, 5)], shown.stdout
        assert sorted(s for s, f in tree.items() if f["Level"] == "1") == ["ib-spine1", "ib-spine2"]
        for i in range(1, 5):  # host h on ib-leaf ((h-1) % 4)+1 (topology-two-tier.yml, scaled)
            want = [f"gpu{h:02d}" for h in range(i, n + 1, 4)]
            assert _hosts(tree[f"ib-leaf{i}"]["Nodes"]) == want, shown.stdout
        for spine in ("ib-spine1", "ib-spine2"):
            assert _hosts(tree[spine]["Nodes"]) == [f"gpu{h:02d}" for h in range(1, n + 1)], shown.stdout
        sinfo = _ctl("sinfo -h -N -o %N")
        assert sorted(set(sinfo.stdout.split())) == [f"gpu{h:02d}" for h in range(1, n + 1)], sinfo.stdout
    finally:
        rebuild_lab(lab)
