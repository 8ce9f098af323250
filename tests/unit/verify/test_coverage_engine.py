"""``fabricops verify`` in coverage mode against fake hosts whose perftest results follow the
fabric's routing (real ibstat and perftest captures; a mock only below the hosts' shell)."""

from __future__ import annotations

import json
import re

from captures import read_fixture

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

    def run(self, host, cmd, timeout=60):
        if cmd == "ibstat":
            lid = self.lids[(host, "mlx5_0/1")]
            return {
                "rc": 0,
                "stdout": IBSTAT_MLX5_0.replace("Base lid: 75", f"Base lid: {lid}"),
                "stderr": "",
            }
        if not cmd.startswith("n=0"):  # servers, stops, other checks
            return {"rc": 0, "stdout": "", "stderr": ""}
        peer = re.search(r"addr-(gpu\d+)", cmd)[1]
        self.clients.append((host, peer, cmd))
        path = self.fabric.path((host, "mlx5_0/1"), (peer, "mlx5_0/1"))
        slow = bool(set(path) & self.bad)
        if "ib_write_bw" in cmd:
            return {"rc": 0, "stdout": SLOW if slow else BW, "stderr": ""}
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
    # --all-pairs (today's behaviour) groups ports by switch: it never crosses the ISL and sees
    # no bandwidth failure (only its "not on this rail" planning errors)
    allp = verify(Hosts(hv, bad={bad}).run, hosts, hv, Options(only="pairs", all_pairs=True))
    assert allp.pairs.rounds == 11 > pr.rounds  # circle rounds holding a same-leaf pair
    assert not [r for r in allp.results if r.check == "ib_write_bw" and not r.ok]


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
