"""``fabricops verify`` in coverage mode against fake hosts whose perftest results follow the
fabric's routing (real ibstat and perftest captures; a mock only below the hosts' shell)."""

from __future__ import annotations

import json
import re

from captures import read_fixture
from fake_counters import PortCounters

from fabricops.model.fabric import Fabric, dirlink_str
from fabricops.verify import report
from fabricops.verify.engine import Options, verify

BW = read_fixture("perftest-bw", "csegpu_ndr_write_bw_gbits_client.txt")  # 392.34 Gb/s, NDR
LAT = read_fixture("perftest-lat", "csegpu_ndr_send_lat_client.txt")
SLOW = BW.replace("392.38             392.34", "196.20             196.17")
_IBSTAT = read_fixture("ibstat", "h100_cx7_ib_cx6dx_eth_down.txt")
IBSTAT_MLX5_0 = _IBSTAT[_IBSTAT.index("CA 'mlx5_0'") : _IBSTAT.index("CA 'mlx5_1'")]  # Base lid: 75


def _inventory(n=16, leaves=4, spines=2, per_spine=2):
    """The lab's two-tier shape (SPEC-18 §1): host i on leaf ((i-1) % leaves) + 1."""
    hosts = [f"gpu{i:02d}" for i in range(1, n + 1)]
    cab, links, per = [], [], {}
    for i, h in enumerate(hosts, 1):
        leaf = f"ib-leaf{(i - 1) % leaves + 1}" if spines else "ib-sw1"
        per[leaf] = per.get(leaf, 0) + 1
        cab.append(
            {
                "host": h,
                "hca": "mlx5_0",
                "port": 1,
                "netdev": "ibp26s0",
                "switch": leaf,
                "switch_port": str(per[leaf]),
            }
        )
    down = max(per.values())
    for li in range(leaves if spines else 0):
        for s in range(spines):
            for u in range(per_spine):
                links.append(
                    {
                        "switch_a": f"ib-leaf{li + 1}",
                        "port_a": str(down + s * per_spine + u + 1),
                        "switch_b": f"ib-spine{s + 1}",
                        "port_b": str(li * per_spine + u + 1),
                        "tier": "leaf_spine",
                    }
                )
    hv = {
        "fabricops_hardware_profile": "hgx-h100-ndr",
        "fabricops_cabling": cab,
        "fabricops_verify_perftest": {"server_start_s": 0},
    }
    if links:
        hv["fabricops_switch_links"] = links
    return hosts, {h: dict(hv, ansible_host=f"addr-{h}") for h in hosts}


class Hosts:
    """Each host's shell: ibstat with its LID (host i: LID i + 1, as the lab assigns them), and
    ib_write_bw at half rate when the test's path crosses a bad directed cable."""

    def __init__(self, hostvars, bad=()):
        hv = next(iter(hostvars.values()))
        self.lids = {(h, "mlx5_0/1"): i + 2 for i, h in enumerate(hostvars)}
        (self.fabric,) = Fabric.from_inventory(
            hv["fabricops_cabling"], hv.get("fabricops_switch_links"), lids=self.lids
        )
        self.bad = set(bad)
        self.clients = []
        self.port_counters = PortCounters()  # the negative controls read them around every bw test

    def run(self, host, cmd, timeout=60):
        answer = self.port_counters.answer(host, cmd)
        if answer is not None:
            return answer
        if cmd == "ibstat":
            lid = self.lids[(host, "mlx5_0/1")]
            return {
                "rc": 0,
                "stdout": IBSTAT_MLX5_0.replace("Base lid: 75", f"Base lid: {lid}"),
                "stderr": "",
            }
        if "while :; do out=$(" not in cmd:  # servers, stops, other checks
            return {"rc": 0, "stdout": "", "stderr": ""}
        peer = re.search(r"addr-(gpu\d+)", cmd)[1]
        self.clients.append((host, peer, cmd))
        dev = re.search(r" -d (mlx5_\d+) ", cmd)[1] + "/1"
        path = self.fabric.path((host, dev), (peer, dev)) if dev == "mlx5_0/1" else []
        slow = bool(set(path) & self.bad)
        if "ib_write_bw" in cmd:
            text = SLOW if slow else BW
            self.port_counters.credit(host, dev.split("/")[0], peer, dev.split("/")[0], text)
            return {"rc": 0, "stdout": text, "stderr": ""}
        return {"rc": 0, "stdout": LAT, "stderr": ""}


def test_single_switch_coverage_is_one_round_instead_of_n_minus_1():
    hosts, hv = _inventory(spines=0)
    cov = verify(Hosts(hv).run, hosts, hv, Options(only="pairs"))
    allp = verify(Hosts(hv).run, hosts, hv, Options(only="pairs", all_pairs=True))
    assert cov.ok and allp.ok
    assert cov.pairs.mode == "coverage" and cov.pairs.rounds == 1 == cov.pairs.lower_bound
    assert allp.pairs.rounds == 15 and getattr(allp.pairs, "mode", "all-pairs") == "all-pairs"
    assert cov.pairs.links_covered == cov.pairs.links_total == 32
    text = report.terminal(cov)
    assert "COVERAGE (1 rounds, lower bound 1; links covered 32/32" in text


def test_single_switch_two_ports_per_host_is_two_rails_of_one_round():
    hosts, hv = _inventory(spines=0)
    for v in hv.values():
        v["fabricops_cabling"] = v["fabricops_cabling"] + [
            dict(c, hca="mlx5_1", netdev="ibp60s0", switch_port=str(100 + i))
            for i, c in enumerate(v["fabricops_cabling"])
        ]
    fake = Hosts({h: dict(v, fabricops_cabling=v["fabricops_cabling"][:16]) for h, v in hv.items()})
    vr = verify(fake.run, hosts, hv, Options(only="pairs"), {"ib-sw1": "InfiniBand"})
    assert vr.ok and vr.pairs.mode == "coverage"
    assert [r.name for r in vr.pairs.rails] == ["mlx5_0/1", "mlx5_1/1"]
    assert vr.pairs.rounds == 1 and vr.pairs.links_covered == vr.pairs.links_total == 64
    ports = {re.search(r" -p (\d+) ", c)[1] for _h, _p, c in fake.clients}
    assert ports == {"18515", "18516"}  # one TCP port per rail, as in all-pairs mode


def test_two_tier_bad_isl_is_named_and_all_pairs_never_crosses_it():
    hosts, hv = _inventory()
    fake = Hosts(hv)
    bad = next(d for d in sorted(fake.fabric.isl_links()) if d[0][0] == "ib-leaf2")
    assert dirlink_str(bad).startswith("ib-leaf2:5>ib-spine1:")
    fake.bad = {bad}
    vr = verify(fake.run, hosts, hv, Options(only="pairs"))
    assert not vr.ok
    pr = vr.pairs
    assert pr.mode == "coverage" and pr.lower_bound >= 1 and 1 <= pr.isolation_rounds <= 2
    named = [r for r in vr.results if r.check == "isolation"]
    assert [r.message for r in named] == [f"rail mlx5_0/1: bad ISL {dirlink_str(bad)}"]
    failed = [r for r in vr.results if not r.ok and r.check == "ib_write_bw"]
    assert failed and all(f"bad: ISL {dirlink_str(bad)}" in r.cause for r in failed)
    # the report says rounds, bound, links covered and the named cable
    text = report.terminal(vr)
    assert (
        f"lower bound {pr.lower_bound}" in text
        and f"isolation: rail mlx5_0/1: bad: ISL {dirlink_str(bad)}" in text
    )
    data = json.loads(report.to_json(vr))
    assert data["pairs"]["mode"] == "coverage" and data["pairs"]["links_total"] == 2 * (16 + 16)
    assert data["pairs"]["fabrics"][0]["isolation"]["bad"] == [f"ISL {dirlink_str(bad)}"]
    # every provable cable crossed; the D-mod-k-unused ones are listed, not claimed
    fab = data["pairs"]["fabrics"][0]
    assert fab["links_covered"] + len(fab["unroutable"]) == fab["links_total"]
    assert sorted(fab["not_covered"]) == sorted(fab["unroutable"])
    # --all-pairs: the rail spans the leaves of the linked fabric (fabricops_switch_links), so the
    # circle method runs N-1 rounds of every pair, crosses the ISL too, and has no planning errors --
    # but only blames hosts, never the cable
    allp = verify(Hosts(hv, bad={bad}).run, hosts, hv, Options(only="pairs", all_pairs=True))
    assert allp.pairs.rounds == len(hosts) - 1 > pr.rounds
    assert not [r for r in allp.results if r.check == "schedule"]
    assert [r for r in allp.results if r.check == "ib_write_bw" and not r.ok]
    assert not [r for r in allp.results if r.check == "isolation"]


def test_two_tier_healthy_passes_with_fewer_tests_than_all_pairs():
    hosts, hv = _inventory()
    fake = Hosts(hv)
    vr = verify(fake.run, hosts, hv, Options(only="pairs"))
    assert vr.ok, [r.message for r in vr.results if not r.ok]
    assert vr.pairs.isolation_rounds == 0 and vr.pairs.reruns == 0
    bw = [c for c in fake.clients if "ib_write_bw" in c[2]]
    crossing = [
        c for c in bw if fake.fabric.leaf_of((c[0], "mlx5_0/1")) != fake.fabric.leaf_of((c[1], "mlx5_0/1"))
    ]
    assert crossing  # ISLs really are tested
    assert vr.pairs.rounds <= 2 * vr.pairs.lower_bound + 1


# --- RoCE: ISL coverage observed from switch counters ------------------------------------------


def _roce(n=8, leaves=4):
    import random

    from fabricops.verify import pairs

    hosts = [f"gpu{i:02d}" for i in range(1, n + 1)]
    cab, per = [], {}
    for i, h in enumerate(hosts, 1):
        leaf = f"leaf{(i - 1) % leaves + 1}"
        per[leaf] = per.get(leaf, 0) + 1
        cab.append(
            {
                "host": h,
                "hca": "mlx5_1",
                "port": 1,
                "netdev": "enp170s0f0np0",
                "switch": leaf,
                "switch_port": f"swp{per[leaf]}",
            }
        )
    links = [
        {
            "switch_a": f"leaf{li}",
            "port_a": f"swp{30 + s}",
            "switch_b": f"spine{s}",
            "port_b": f"swp{li}",
            "tier": "leaf_spine",
        }
        for li in range(1, leaves + 1)
        for s in (1, 2)
    ]
    rail = pairs.Rail(
        0,
        "mlx5_1/1",
        "Ethernet",
        400.0,
        {h: "mlx5_1/1" for h in hosts},
        {h: f"203.0.113.{i}" for i, h in enumerate(hosts, 1)},
        gid_index=dict.fromkeys(hosts, 3),
        tos=106,
    )
    return hosts, cab, links, rail, random.Random(7)


class RoceFabric:
    """Hosts plus the switches' port counters: each QP of a test is a flow hashed onto an uplink
    (ECMP excludes a link that is down), its bytes added to the counters of every ISL it crosses."""

    def __init__(self, fabric, rng, down=()):
        self.f, self.rng, self.down = fabric, rng, set(down)
        self.ip = {f"203.0.113.{i}": h for i, (h, _d) in enumerate(fabric.endpoints, 1)}
        self.tx = dict.fromkeys(fabric.isl_links(), 1000)  # a base, as real counters have
        self.qps = []
        self.port_counters = PortCounters()

    def run(self, host, cmd, timeout=60):
        answer = self.port_counters.answer(host, cmd)
        if answer is not None:
            return answer
        if "while :; do out=$(" not in cmd:
            return {"rc": 0, "stdout": "", "stderr": ""}
        if "ib_write_bw" not in cmd:
            return {"rc": 0, "stdout": LAT, "stderr": ""}
        peer = self.ip[re.search(r"(203\.0\.113\.\d+)", cmd)[1]]
        q = int(re.search(r" -q (\d+)", cmd)[1])
        src, dst = (host, "mlx5_1/1"), (peer, "mlx5_1/1")
        ls, ld = self.f.leaf_of(src), self.f.leaf_of(dst)
        if ls != ld:
            self.qps.append(q)
            for _ in range(q):
                ups = [u for u in self.f.uplinks(ls) if u not in self.down]
                up = ups[self.rng.randrange(len(ups))]
                (dn,) = self.f.downlinks(up[1][0], ld)
                self.tx[up] += 8 << 20
                self.tx[dn] += 8 << 20
        self.port_counters.credit(host, "mlx5_1", peer, "mlx5_1", BW)
        return {"rc": 0, "stdout": BW, "stderr": ""}

    def counters(self, fabric, links):
        return {d: self.tx[d] for d in links}


def test_roce_isls_are_covered_only_when_their_counters_move():
    from fabricops.model.profiles import load_profile
    from fabricops.verify import rounds

    _hosts, cab, links, rail, rng = _roce()
    plans, why = rounds.plan_fabrics([rail], cab, links, {})
    assert plans and not why and plans[0].fabric.roce
    fake = RoceFabric(plans[0].fabric, rng)
    opts = {
        "bw_size": 8388608,
        "bw_qps": 1,
        "lat_size": 2,
        "base_port": 18515,
        "timeout_s": 60,
        "connect_retries": 5,
        "server_start_s": 0,
    }
    cr = rounds.run_coverage(fake.run, plans, load_profile("hgx-h100-ndr"), opts, counters=fake.counters)
    assert fake.qps and min(fake.qps) >= 2 * 2  # cross-leaf tests carry 2 x n_up QPs
    assert cr.links_covered == cr.links_total == 2 * (8 + 8)
    assert all(r.ok for r in cr.results)
    # without counters (and no switch read) the ISLs are not claimed: host links only, and each ISL is
    # unproven -- an error that says why (no verdict), never a pass or a quiet skip
    cr = rounds.run_coverage(RoceFabric(plans[0].fabric, rng).run, plans, load_profile("hgx-h100-ndr"), opts)
    assert cr.links_covered == 16 and cr.links_total == 32
    assert not [r for r in cr.results if r.check == "coverage"]
    unproven = [r for r in cr.results if r.check == "link_proof"]
    assert len(unproven) == 8 and all(r.status == "error" and r.details["no_verdict"] for r in unproven)
    assert all("unproven (both directions): not measured (no switch port counters were read" in r.message
               for r in unproven)
    assert {r.details["link"] for r in unproven} == {f"leaf{li}:swp{30 + s}<>spine{s}:swp{li}"
                                                     for li in range(1, 5) for s in (1, 2)}
    assert len(cr.fabrics[0]["unproven"]) == 16


def test_roce_isl_out_of_the_ecmp_group_is_a_failure_naming_it():
    from fabricops.model.profiles import load_profile
    from fabricops.verify import rounds

    _hosts, cab, links, rail, rng = _roce()
    plans, _ = rounds.plan_fabrics([rail], cab, links, {})
    f = plans[0].fabric
    dead = f.uplinks("leaf3")[1]  # leaf3 -> spine2, down: ECMP sends nothing over it
    fake = RoceFabric(f, rng, down={dead})
    opts = {
        "bw_size": 8388608,
        "bw_qps": 1,
        "lat_size": 2,
        "base_port": 18515,
        "timeout_s": 60,
        "connect_retries": 5,
        "server_start_s": 0,
    }
    cr = rounds.run_coverage(fake.run, plans, load_profile("hgx-h100-ndr"), opts, counters=fake.counters)
    bad = [r for r in cr.results if not r.ok]
    assert [r.message.split(" carried")[0] for r in bad] == [f"rail mlx5_1/1: ISL {dirlink_str(dead)}"]
    assert cr.rounds > len(plans[0].rounds)  # follow-up rounds were run for it


def test_roce_capacity_two_tests_per_leaf_only_when_an_uplink_carries_two_ports():
    from fabricops.verify import rounds

    _hosts, cab, links, rail, _rng = _roce()
    (plan,), _ = rounds.plan_fabrics([rail], cab, links, {})
    assert rounds.roce_capacity(plan.fabric, links, 400.0) == 1  # no ISL speed: one test per leaf
    fast = [dict(x, speed="800GbE") for x in links]
    assert rounds.roce_capacity(plan.fabric, fast, 400.0) == 2
    assert rounds.roce_capacity(plan.fabric, [*fast[:-1], dict(links[-1], speed="400GbE")], 400.0) == 1
    (plan2,), _ = rounds.plan_fabrics([rail], cab, fast, {})
    per_round = [
        max(
            sum(1 for t in rnd if plan2.fabric.leaf_of(t.src) == leaf != plan2.fabric.leaf_of(t.dst))
            for leaf in plan2.fabric.leaves
        )
        for rnd in plan2.rounds
    ]
    assert max(per_round) <= 2


def test_coverage_pair_results_carry_each_hosts_leaf_for_the_isl_explanation():
    """engine.explain_roce reads the inter-switch link ends of a failed cross-leaf RoCE pair only
    when the result says which switch each host is on (details.switches)."""
    from fabricops.model.profiles import load_profile
    from fabricops.verify import rounds
    from fabricops.verify.engine import explain_roce

    _hosts, cab, links, rail, rng = _roce()
    plans, _why = rounds.plan_fabrics([rail], cab, links, {})
    fab = plans[0].fabric
    opts = {"bw_size": 8388608, "bw_qps": 1, "lat_size": 2, "base_port": 18515, "timeout_s": 60,
            "connect_retries": 5, "server_start_s": 0}
    cr = rounds.run_coverage(RoceFabric(fab, rng).run, plans, load_profile("hgx-h100-ndr"), opts)
    tests = [r for r in cr.results if r.check in ("ib_write_bw", "ib_write_lat")]
    assert tests
    for r in tests:
        c, s = r.details["client"], r.details["server"]
        assert r.details["switches"] == {c: fab.leaf_of((c, "mlx5_1/1")), s: fab.leaf_of((s, "mlx5_1/1"))}
    cross = next(r for r in tests if len(set(r.details["switches"].values())) == 2)
    a, b = sorted(set(cross.details["switches"].values()))

    class Reader:  # the switch side: one spine port lost PFC on the lossless priority
        def __init__(self):
            self.reads = []

        def __call__(self, switch, ports):
            self.reads.append((switch, list(ports)))
            return {p: (["PFC off on priority 3"] if (switch, p) == ("spine1", f"swp{a[-1]}") else [])
                    for p in ports}

        def isl_path(self, x, y):
            from fabricops.verify.switchstate import isl_path

            return isl_path(links, x, y)

    cross.status, cross.cause = "fail", "below 90% of 400 Gb/s"
    reader = Reader()
    explain_roce([cross], [rail], [], reader)
    assert {sw for sw, _ports in reader.reads} >= {a, b, "spine1", "spine2"}
    assert f"spine1 swp{a[-1]} (inter-switch link to {a} swp31): PFC off on priority 3" in cross.cause


def test_roce_followup_rounds_are_counted_apart_from_the_schedule():
    """An ECMP hash that sent every flow of the scheduled rounds up one uplink leaves the other ISLs
    unseen: follow-up rounds cover them, and the report counts them apart from the schedule (whose
    length is the algorithm's, bounded by the lower bound; the follow-ups are the hash's luck)."""
    from fabricops.model.profiles import load_profile
    from fabricops.verify import report, rounds

    _hosts, cab, links, rail, rng = _roce()
    plans, _why = rounds.plan_fabrics([rail], cab, links, {})
    scheduled = len(plans[0].rounds)

    class Stuck(type(rng)):
        stuck = True

        def randrange(self, n):
            return 0 if self.stuck else super().randrange(n)

    hashed = Stuck(7)
    fake = RoceFabric(plans[0].fabric, hashed)
    reads = []

    def counters(fabric, links):
        reads.append(1)
        if len(reads) > scheduled:  # read after the last scheduled round: the hash spreads again
            hashed.stuck = False
        return fake.counters(fabric, links)

    opts = {"bw_size": 8388608, "bw_qps": 1, "lat_size": 2, "base_port": 18515, "timeout_s": 60,
            "connect_retries": 5, "server_start_s": 0}
    cr = rounds.run_coverage(fake.run, plans, load_profile("hgx-h100-ndr"), opts, counters=counters)
    assert cr.links_covered == cr.links_total == 2 * (8 + 8)
    assert 1 <= cr.followup_rounds <= rounds.ROCE_FOLLOWUP_ROUNDS
    assert cr.rounds == scheduled + cr.followup_rounds
    data = report._coverage_data(cr)
    assert data["followup_rounds"] == cr.followup_rounds
