"""The emulated fabric's multi-tier physics (docs/lab-fidelity.md, "Fabric physics"): routing over
leaves and spines (InfiniBand D-mod-k, RoCE per-QP ECMP), per-hop health, contention through the
flow ledger, and switch port counters from the ledger.

Each host is its own EMUL_ROOT tree sharing one fabric directory (cabling.json with ``isls`` and
``switches``, switches/*.json, flows/) through a symlink, as lab hosts share
/var/lib/emulated-fabric (flows/ read-write). The pairs that must overlap in time run at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from test_emul_perftest import RUNNER, counter, free_port, make_host, set_switch_port, wait_listening

from fabricops.model import rates
from fabricops.parsers.perftest import parse_bw
from fabricops_lab import hosts, paths, rack, topology
from fabricops_lab.emul import devstate, perftest
from fabricops_lab.switchd.nvue import NvueSession, NvueSwitch
from fabricops_lab.switchd.onyx import OnyxSession, OnyxSwitch

NDR = 400 * perftest.IB_EFFICIENCY  # one NDR flow alone: 392.8 Gb/s


# --- a two-tier fabric ------------------------------------------------------------------------

def _ib_port(n: int) -> str:
    return f"1/{n}"


def two_tier(tmp: Path, *, roce: bool, leaves: int = 4, spines: int = 2, hosts_per_leaf: int = 2,
             uplinks: int = 1, placement: list[int] | None = None) -> tuple[Path, list[dict]]:
    """cabling.json (links, isls, switches) and switches/*.json of LEAVES leaves and SPINES spines,
    each leaf with UPLINKS links to each spine. Host i (1-based) is on leaf ((i-1) % leaves) + 1 (or
    PLACEMENT[i-1]); its LID is i + 1. RoCE: leaves 1-2 Cumulus (swpN), the rest Onyx (Eth1/N),
    spines Cumulus. Host ports are 1..hosts_per_leaf on each leaf; uplinks start at port 31; spine
    port (l-1)*uplinks + u + 1 goes to leaf l."""
    fabric = tmp / "fabric"
    (fabric / "switches").mkdir(parents=True)
    (fabric / "flows").mkdir()
    pre = "" if roce else "ib-"
    netdev, hca = ("enp41s0f0np0", "mlx5_2") if roce else ("ibp65s0", "mlx5_0")
    switches: dict[str, dict] = {}
    ports: dict[str, dict[str, dict]] = {}

    def osname(sw: str, leaf: int | None) -> str:
        if not roce:
            return "ib"
        return "onyx" if leaf is not None and leaf > 2 else "cumulus"

    def pname(sw: str, n: int) -> str:
        os_ = switches[sw]["os"]
        return {"ib": _ib_port(n), "onyx": f"Eth1/{n}", "cumulus": f"swp{n}"}[os_]

    def entry() -> dict:
        if not roce:
            return {"link": "up"}
        return {"trust": "l3", "pfc": [0, 0, 0, 1, 0, 0, 0, 0],
                "ecn": {"3": {"enabled": True, "min_kb": 150, "max_kb": 1500}}, "link": "up"}

    for leaf in range(1, leaves + 1):
        switches[f"{pre}leaf{leaf}"] = {"os": osname("", leaf), "tier": "leaf"}
    for spine in range(1, spines + 1):
        switches[f"{pre}spine{spine}"] = {"os": osname("", None), "tier": "spine"}
    n_hosts = leaves * hosts_per_leaf
    placement = placement or [((i - 1) % leaves) + 1 for i in range(1, n_hosts + 1)]
    links, host_list, used = [], [], {}
    for i in range(1, len(placement) + 1):
        leaf = placement[i - 1]
        sw = f"{pre}leaf{leaf}"
        used[leaf] = used.get(leaf, 0) + 1
        port = pname(sw, used[leaf])
        links.append({"host": f"gpu{i:02d}", "netdev": netdev, "hca": hca, "port": 1, "switch": sw,
                      "switch_port": port})
        ports.setdefault(sw, {})[port] = entry()
        host_list.append({"name": f"gpu{i:02d}", "lid": i + 1, "ip_last": i, "leaf": sw, "port": port})
    isls = []
    for leaf in range(1, leaves + 1):
        for spine in range(1, spines + 1):
            for u in range(uplinks):
                lsw, ssw = f"{pre}leaf{leaf}", f"{pre}spine{spine}"
                lp = pname(lsw, 30 + (spine - 1) * uplinks + u + 1)
                sp = pname(ssw, (leaf - 1) * uplinks + u + 1)
                isls.append({"switch_a": lsw, "port_a": lp, "switch_b": ssw, "port_b": sp,
                             "speed": "400GbE" if roce else "NDR", "width": "4X", "gbps": 400,
                             "tier": "leaf_spine"})
                ports.setdefault(lsw, {})[lp] = entry()
                ports.setdefault(ssw, {})[sp] = entry()
    (fabric / "cabling.json").write_text(json.dumps({"links": links, "isls": isls, "switches": switches}))
    for sw, sw_ports in ports.items():
        (fabric / f"switches/{sw}.json").write_text(
            json.dumps({"name": sw, "os": switches[sw]["os"], "ports": sw_ports}))
    return fabric, host_list


def make_hosts(tmp: Path, fabric: Path, host_list: list[dict], roce: bool) -> dict[str, Path]:
    link = "Ethernet" if roce else "InfiniBand"
    return {h["name"]: make_host(tmp, fabric, h["name"], link=link, lid=h["lid"], ip_last=h["ip_last"])
            for h in host_list}


def _env(root: Path, seconds: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"EMUL_ROOT": str(root), "EMUL_PERFTEST_SECONDS": seconds, "EMUL_SEED": "unit"})
    return env


def run_pairs(pairs: list[tuple[Path, Path]], args: list[str], seconds: str = "1.5",
              tool: str = "ib_write_bw") -> list[subprocess.CompletedProcess]:
    """Run (server, client) pairs at the same time: all servers listen, then all clients start."""
    servers, ports = [], []
    for srv, _ in pairs:
        port = free_port()
        servers.append(subprocess.Popen([sys.executable, "-c", RUNNER, tool, "-p", str(port), *args],
                                        env=_env(srv, seconds), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True))
        ports.append(port)
    for port in ports:
        wait_listening(port)
    clients = [subprocess.Popen([sys.executable, "-c", RUNNER, tool, "-p", str(port), *args, "127.0.0.1"],
                                env=_env(cli, seconds), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
               for (_, cli), port in zip(pairs, ports, strict=True)]
    out = []
    for c in clients:
        o, e = c.communicate(timeout=60)
        out.append(subprocess.CompletedProcess(c.args, c.returncode, o, e))
    for s in servers:
        s.communicate(timeout=60)
    return out


def bw(result: subprocess.CompletedProcess) -> float:
    assert result.returncode == 0, result.stderr
    return parse_bw(result.stdout).results[0].bw_average


def ledger(fabric: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((fabric / "flows").glob("flow-*.json"))]


def _facts(root: Path, dev: str, monkeypatch) -> dict:
    monkeypatch.setenv("EMUL_ROOT", str(root))
    opts = perftest.Options(verb="write", kind="bw", device=dev)
    facts, err = perftest.local_facts(opts)
    assert err is None, err
    return facts


def _plan(roots, src: str, dst: str, monkeypatch, *, roce: bool = False, qps=None, opts=None):
    dev = "mlx5_2" if roce else "mlx5_0"
    server = _facts(roots[dst], dev, monkeypatch)
    client = _facts(roots[src], dev, monkeypatch)
    qps = qps or [{"qpn": 0x100}]
    opts = opts or perftest.Options(verb="write", kind="bw", qps=len(qps))
    peer_qps = [{"qpn": 0x200 + k} for k in range(len(qps))]
    return client, server, perftest.plan_run(opts, client, server, qps, peer_qps)


# --- routing ----------------------------------------------------------------------------------

def test_ib_dmodk_path_on_four_leaves_two_spines_is_the_hand_computed_one(tmp_path):
    fabric, _ = two_tier(tmp_path, roce=False, hosts_per_leaf=4, uplinks=2)
    cab = json.loads((fabric / "cabling.json").read_text())
    fab = perftest.Fabric(cab)
    src = next(ln for ln in cab["links"] if ln["host"] == "gpu01")
    dst = next(ln for ln in cab["links"] if ln["host"] == "gpu14")
    # gpu14 is ib-leaf2's 4th host port (1/4): pos 3. ib-leaf1's uplinks sorted by (spine, port):
    # spine1 1/31, 1/32, spine2 1/33, 1/34 -> n_up 4; 3 % 4 = 3 -> 1/34 to ib-spine2 1/2, rank 1 of
    # leaf1's spine2 uplinks; parallel links ib-spine2 -> ib-leaf2: 1/3, 1/4; 1 % 2 = 1 -> 1/4 (ib-leaf2 1/34)
    assert fab.route(src, dst, lid=15) == [
        ("gpu01", "mlx5_0/1", "ib-leaf1", "1/1"),
        ("ib-leaf1", "1/34", "ib-spine2", "1/2"),
        ("ib-spine2", "1/4", "ib-leaf2", "1/34"),
        ("ib-leaf2", "1/4", "gpu14", "mlx5_0/1"),
    ]
    # OpenSM ftree: the destination port's position picks the path, not its LID value
    assert fab.route(src, dst, lid=12) == fab.route(src, dst, lid=15) == fab.route(src, dst)
    # the same destination from another leaf takes the same spine (deterministic per destination)
    other = next(ln for ln in cab["links"] if ln["host"] == "gpu03")
    assert fab.route(other, dst, lid=15)[1][2] == "ib-spine2"
    # same leaf: host -> leaf -> host
    same = next(ln for ln in cab["links"] if ln["host"] == "gpu05")
    assert fab.route(src, same, lid=6) == [("gpu01", "mlx5_0/1", "ib-leaf1", "1/1"),
                                            ("ib-leaf1", "1/2", "gpu05", "mlx5_0/1")]


def test_roce_udp_source_port_follows_the_kernel_rule():
    # include/rdma/ib_verbs.h: fl = lqpn*rqpn; fl ^= fl >> 20; fl ^= fl >> 40; & 0xFFFFF;
    # sport = ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000
    for lq, rq in ((0x1A2, 0x3B4), (0x4000, 0x4001), (0xFFFFFF, 0xFFFFFE), (1, 1)):
        v = lq * rq
        v ^= v >> 20
        v ^= v >> 40
        fl = v & 0xFFFFF
        assert perftest.roce_udp_sport(lq, rq) == (((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000)
        assert 0xC000 <= perftest.roce_udp_sport(lq, rq) <= 0xFFFF
    assert perftest.roce_udp_sport(0x1A2, 0x3B4) == perftest.roce_udp_sport(0x3B4, 0x1A2)


def test_leaves_without_a_spine_between_them_are_different_fabrics(tmp_path, monkeypatch):
    fabric, host_list = two_tier(tmp_path, roce=False)
    cab = json.loads((fabric / "cabling.json").read_text())
    cab["isls"] = [i for i in cab["isls"] if i["switch_a"] != "ib-leaf2"]
    (fabric / "cabling.json").write_text(json.dumps(cab))
    roots = make_hosts(tmp_path, fabric, host_list[:2], roce=False)
    _, _, plan = _plan(roots, "gpu01", "gpu02", monkeypatch)
    assert plan == {"fatal": "ports on different fabrics"}


# --- per-hop health ---------------------------------------------------------------------------

def test_isl_down_is_no_path_naming_the_switch_port(tmp_path, monkeypatch):
    fabric, host_list = two_tier(tmp_path, roce=False)
    roots = make_hosts(tmp_path, fabric, host_list, roce=False)
    # gpu01 -> gpu06 (ib-leaf2 pos 1): 1 % 2 = 1 -> ib-leaf1 1/32 -> ib-spine2 1/1; down spine2 1/2
    set_switch_port(fabric, "ib-spine2", "1/2", link="down")
    _, _, plan = _plan(roots, "gpu01", "gpu06", monkeypatch)
    assert plan == {"fatal": "switch port ib-spine2 1/2 down"}
    set_switch_port(fabric, "ib-spine2", "1/2", link="up")
    set_switch_port(fabric, "ib-leaf1", "1/32", link="down")
    assert _plan(roots, "gpu01", "gpu06", monkeypatch)[2] == {"fatal": "switch port ib-leaf1 1/32 down"}
    # a test whose path avoids it (gpu05 -> gpu03, ib-leaf3 pos 0, via ib-spine1) still has its path
    assert "fatal" not in _plan(roots, "gpu05", "gpu03", monkeypatch)[2]
    # and the real run fails as perftest does on a dead path, on both sides
    (client,) = run_pairs([(roots["gpu06"], roots["gpu01"])], ["--report_gbits"], seconds="0.2")
    assert client.returncode == 1 and "Completion with error at client" in client.stderr


def test_degraded_isl_width_lowers_only_the_tests_that_cross_it(tmp_path):
    fabric, host_list = two_tier(tmp_path, roce=False)
    roots = make_hosts(tmp_path, fabric, host_list, roce=False)
    set_switch_port(fabric, "ib-leaf1", "1/32", width="2X")  # leaf1 -> spine2 at NDR 2X: 200 Gb/s
    crossing, other = run_pairs([(roots["gpu06"], roots["gpu01"]), (roots["gpu03"], roots["gpu05"])],
                                ["--report_gbits"])
    assert 0.97 * 200 * perftest.IB_EFFICIENCY <= bw(crossing) <= 1.01 * 200 * perftest.IB_EFFICIENCY
    assert bw(other) >= 0.99 * NDR


def test_degraded_isl_speed_uses_the_rate_table(tmp_path, monkeypatch):
    fabric, host_list = two_tier(tmp_path, roce=False)
    roots = make_hosts(tmp_path, fabric, host_list[:2], roce=False)
    # gpu02 is the first host on its leaf (position 0): the route goes up to ib-spine1 and down
    # its port to that leaf, 1/2
    set_switch_port(fabric, "ib-spine1", "1/2", speed="HDR")
    _, _, plan = _plan(roots, "gpu01", "gpu02", monkeypatch)
    assert plan["flows"][0]["caps"] == [400.0, 400.0, 200.0, 400.0]
    set_switch_port(fabric, "ib-spine1", "1/2", speed="HDR100")
    assert _plan(roots, "gpu01", "gpu02", monkeypatch)[2]["flows"][0]["caps"][2] == 100.0


@pytest.mark.parametrize("speed,width", [(s, w) for s in rates.IB for w in ("1X", "2X", "4X")])
def test_switch_port_rates_match_the_model(speed, width):
    assert perftest.speed_rate(speed, width) == rates.ib_port_rate(speed, width)


def test_ethernet_and_variant_rates_match_the_model():
    for spec in ("100GbE", "200GbE", "400GbE", "800GbE"):
        assert perftest.speed_rate(spec) == rates.eth_port_rate(spec)
    for name, v in rates.IB_VARIANTS.items():
        assert perftest.speed_rate(name) == rates.ib_port_rate(v.generation, v.width)


def test_flapping_isl_costs_rate_and_counts_retransmits(tmp_path):
    fabric, host_list = two_tier(tmp_path, roce=False)
    roots = make_hosts(tmp_path, fabric, host_list, roce=False)
    set_switch_port(fabric, "ib-spine2", "1/1", flaps=8)
    crossing, other = run_pairs([(roots["gpu06"], roots["gpu01"]), (roots["gpu03"], roots["gpu05"])],
                                ["--report_gbits"])
    assert bw(crossing) == pytest.approx(NDR * (1 - 8 * perftest.FLAP_COST), rel=0.01)
    assert counter(roots["gpu01"], "packet_seq_err") > 0 and counter(roots["gpu06"], "out_of_sequence") > 0
    assert bw(other) >= 0.99 * NDR
    assert counter(roots["gpu05"], "packet_seq_err") == 0


# --- contention -------------------------------------------------------------------------------

def test_two_tests_sharing_an_uplink_each_get_about_half(tmp_path):
    fabric, host_list = two_tier(tmp_path, roce=False)
    roots = make_hosts(tmp_path, fabric, host_list, roce=False)
    # gpu06 (ib-leaf2) and gpu07 (ib-leaf3) are both their leaf's 2nd host port: pos 1 -> ib-leaf1's 2nd
    # uplink (spine2), whether the client is gpu01 or gpu05
    a, b = run_pairs([(roots["gpu06"], roots["gpu01"]), (roots["gpu07"], roots["gpu05"])], ["--report_gbits"])
    assert bw(a) == pytest.approx(NDR / 2, rel=0.01) and bw(b) == pytest.approx(NDR / 2, rel=0.01)
    entries = ledger(fabric)
    assert len(entries) == 2 and all(e["kind"] == "bw" and e["bytes"] > 0 for e in entries)
    shared = ["ib-leaf1", "1/32", "ib-spine2", "1/1"]
    assert all(shared in e["hops"] for e in entries)
    # each run's bytes are what its client's port counter moved (4-byte words)
    for e in entries:
        host = e["hops"][0][0]
        assert e["bytes"] == counter(roots[host], "port_xmit_data") * 4


def test_non_blocking_disjoint_tests_get_full_rate(tmp_path):
    fabric, host_list = two_tier(tmp_path, roce=False)
    roots = make_hosts(tmp_path, fabric, host_list, roce=False)
    # gpu01 -> gpu02 (LID 3, spine2) and gpu05 -> gpu07 (LID 8, spine1): no cable in common
    a, b = run_pairs([(roots["gpu02"], roots["gpu01"]), (roots["gpu07"], roots["gpu05"])], ["--report_gbits"])
    assert bw(a) >= 0.99 * NDR and bw(b) >= 0.99 * NDR
    hops = [set(map(tuple, e["hops"])) for e in ledger(fabric)]
    assert not hops[0] & hops[1]


def test_oversubscribed_leaf_caps_cross_leaf_traffic(tmp_path):
    # two leaves of four hosts, one uplink to each of two spines: 4 hosts, 2 uplinks (2:1)
    fabric, host_list = two_tier(tmp_path, roce=False, leaves=2, hosts_per_leaf=4,
                                 placement=[1, 1, 1, 1, 2, 2, 2, 2])
    roots = make_hosts(tmp_path, fabric, host_list, roce=False)
    pairs = [(roots[f"gpu0{i + 4}"], roots[f"gpu0{i}"]) for i in range(1, 5)]  # LIDs 6..9: two per uplink
    results = run_pairs(pairs, ["--report_gbits"])
    rates_ = [bw(r) for r in results]
    assert all(r == pytest.approx(NDR / 2, rel=0.01) for r in rates_)
    assert sum(rates_) <= 2 * 400  # what the two uplinks carry
    # the same four tests inside one leaf (host -> leaf -> host) are not capped
    fabric2, host_list2 = two_tier(tmp_path / "one-leaf", roce=False, leaves=1, spines=1, hosts_per_leaf=8)
    roots2 = make_hosts(tmp_path / "one-leaf", fabric2, host_list2, roce=False)
    pairs = [(roots2[f"gpu0{i + 4}"], roots2[f"gpu0{i}"]) for i in range(1, 5)]
    results = run_pairs(pairs, ["--report_gbits"])
    assert all(bw(r) >= 0.99 * NDR for r in results)


def test_latency_tests_add_no_load(tmp_path):
    fabric, host_list = two_tier(tmp_path, roce=False)
    roots = make_hosts(tmp_path, fabric, host_list, roce=False)
    port_l, port_b = free_port(), free_port()
    srv_l = subprocess.Popen([sys.executable, "-c", RUNNER, "ib_write_lat", "-p", str(port_l)],
                             env=_env(roots["gpu06"], "2.0"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_listening(port_l)
    cli_l = subprocess.Popen([sys.executable, "-c", RUNNER, "ib_write_lat", "-p", str(port_l), "127.0.0.1"],
                             env=_env(roots["gpu05"], "2.0"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    srv_b = subprocess.Popen([sys.executable, "-c", RUNNER, "ib_write_bw", "-p", str(port_b),
                              "--report_gbits"],
                             env=_env(roots["gpu02"], "1.0"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    wait_listening(port_b)
    cli_b = subprocess.run([sys.executable, "-c", RUNNER, "ib_write_bw", "-p", str(port_b), "--report_gbits",
                            "127.0.0.1"], env=_env(roots["gpu01"], "1.0"), capture_output=True, text=True,
                           timeout=60)
    for p in (cli_l, srv_l, srv_b):
        p.communicate(timeout=60)
    assert bw(cli_b) >= 0.99 * NDR
    kinds = sorted(e["kind"] for e in ledger(fabric))
    assert kinds == ["bw", "lat"]


# --- RoCE: ECMP per QP, PFC per hop -----------------------------------------------------------

def _uplink_of(entry_flow: dict) -> str:
    return entry_flow["hops"][1][2]  # the spine


def test_roce_q16_flows_spread_over_uplinks_as_the_hash_says(tmp_path):
    fabric, host_list = two_tier(tmp_path, roce=True)
    roots = make_hosts(tmp_path, fabric, host_list[:2], roce=True)
    (result,) = run_pairs([(roots["gpu02"], roots["gpu01"])], ["-d", "mlx5_2", "-q", "16", "--report_gbits"],
                          seconds="0.3")
    assert bw(result) >= 0.95 * 400
    rec = parse_bw(result.stdout)
    (entry,) = ledger(fabric)
    spines = [_uplink_of(f) for f in entry["flows"]]
    assert len(spines) == 16 and set(spines) == {"spine1", "spine2"}
    # each QP's spine is crc32("src|dst|sport") % 2 with the RoCEv2 source port of its QP pair
    for k, (local, remote) in enumerate(zip(rec.local_addresses, rec.remote_addresses, strict=True)):
        v = int(local.qpn, 16) * int(remote.qpn, 16)
        v ^= v >> 20
        v ^= v >> 40
        fl = v & 0xFFFFF
        sport = ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000
        h = zlib.crc32(f"198.51.100.1|198.51.100.2|{sport}".encode())
        assert spines[k] == ("spine1", "spine2")[h % 2]


def _qps_for_spine(want: str, fab: perftest.Fabric, src: dict, dst: dict) -> list[dict]:
    for q in range(0x100, 0x400):
        h = perftest.ecmp_hash("198.51.100.1", "198.51.100.2", perftest.roce_udp_sport(q, 0x200))
        if fab.route(src, dst, flow_hash=h)[1][2] == want:
            return [{"qpn": q}]
    raise AssertionError(want)


def test_pfc_off_on_one_spine_port_degrades_only_roce_flows_through_it(tmp_path, monkeypatch):
    fabric, host_list = two_tier(tmp_path, roce=True)
    roots = make_hosts(tmp_path, fabric, host_list[:2], roce=True)
    set_switch_port(fabric, "spine1", "swp2", pfc=[0] * 8)  # spine1 -> leaf2
    cab = json.loads((fabric / "cabling.json").read_text())
    fab = perftest.Fabric(cab)
    src, dst = cab["links"][0], cab["links"][1]
    for spine, degraded in (("spine1", True), ("spine2", False)):
        qps = _qps_for_spine(spine, fab, src, dst)
        client, server, plan = _plan(roots, "gpu01", "gpu02", monkeypatch, roce=True, qps=qps)
        assert ("switch_pfc" in plan["flows"][0]["problems"]) is degraded
        out = perftest.compute(perftest.Options(verb="write", kind="bw"), client, server, plan=plan)
        assert (out["rows"][0]["avg_gbps"] < 0.6 * 400) is degraded, spine
    # a real run: degraded exactly when its one QP hashed through spine1
    for _ in range(2):
        for f in (fabric / "flows").glob("flow-*"):
            f.unlink()
        (result,) = run_pairs([(roots["gpu02"], roots["gpu01"])], ["-d", "mlx5_2", "--report_gbits"],
                              seconds="0.2")
        (entry,) = ledger(fabric)
        assert (bw(result) < 0.6 * 400) is (_uplink_of(entry["flows"][0]) == "spine1")


# --- switch counters from the ledger ----------------------------------------------------------

def test_switch_counters_move_by_the_bytes_of_the_tests_through_each_port(tmp_path):
    fabric, host_list = two_tier(tmp_path, roce=True)
    roots = make_hosts(tmp_path, fabric, host_list, roce=True)
    # gpu01 (leaf1 swp1, Cumulus) -> gpu03 (leaf3 Eth1/1, Onyx), 8 QPs over both spines
    (result,) = run_pairs([(roots["gpu03"], roots["gpu01"])], ["-d", "mlx5_2", "-q", "8", "--report_gbits"],
                          seconds="0.3")
    assert result.returncode == 0, result.stderr
    sent = counter(roots["gpu01"], "port_xmit_data", "mlx5_2") * 4
    assert sent == counter(roots["gpu03"], "port_rcv_data", "mlx5_2") * 4 > 0
    (entry,) = ledger(fabric)
    by_spine: dict[str, int] = {}
    for f in entry["flows"]:
        by_spine[_uplink_of(f)] = by_spine.get(_uplink_of(f), 0) + f["bytes"]
    assert sum(by_spine.values()) == pytest.approx(sent, abs=16)

    def delta(sw: str, port: str) -> dict[str, int]:
        now = devstate.switch_port_counters(fabric / f"switches/{sw}.json", sw, port)
        base = devstate.switch_port_counters(None, sw, port)
        return {k: now[k] - base[k] for k in now}

    assert delta("leaf1", "swp1")["rx_bytes"] == pytest.approx(sent, abs=16)
    assert delta("leaf3", "Eth1/1")["tx_bytes"] == pytest.approx(sent, abs=16)
    for n, spine in ((1, "spine1"), (2, "spine2")):
        up = delta("leaf1", f"swp3{n}")
        assert up["tx_bytes"] == by_spine.get(spine, 0) and up["rx_bytes"] == 0
        assert delta(spine, "swp1")["rx_bytes"] == by_spine.get(spine, 0)
        assert delta(spine, "swp3")["tx_bytes"] == by_spine.get(spine, 0)
        assert delta("leaf3", f"Eth1/3{n}")["rx_bytes"] == by_spine.get(spine, 0)
    assert delta("leaf2", "swp31") == {"rx_bytes": 0, "tx_bytes": 0, "rx_packets": 0, "tx_packets": 0}
    # ... and the switches' own CLIs say so
    leaf1 = fabric / "switches/leaf1.json"
    nv = NvueSwitch("leaf1", ["swp1", "swp2", "swp31", "swp32"], tmp_path / "nv", leaf1)
    sess = NvueSession(nv)
    text = sess.handle("nv show interface swp1 counters")[0]
    total = next(ln.split() for ln in text.splitlines() if "Total Octets" in ln)
    assert int(total[2]) == devstate.switch_port_counters(leaf1, "leaf1", "swp1")["rx_bytes"]
    stats = json.loads(sess.handle("nv show interface swp31 link stats -o json")[0])
    assert stats["out-bytes"] - devstate.switch_port_counters(None, "leaf1", "swp31")["tx_bytes"] == \
        by_spine.get("spine1", 0)
    onyx = OnyxSwitch("leaf3", ["Eth1/1", "Eth1/31", "Eth1/32"], tmp_path / "onyx",
                      fabric / "switches/leaf3.json")
    osess = OnyxSession(onyx)
    osess.handle("no cli session paging enable")
    osess.handle("enable")
    doc = json.loads(osess.handle("show interfaces ethernet 1/1 counters | json-print")[0])
    onyx_tx = int(doc[0]["Eth1/1"][0]["Tx"]["bytes"])
    onyx_base = devstate.switch_port_counters(None, "leaf3", "Eth1/1")["tx_bytes"]
    assert onyx_tx - onyx_base == pytest.approx(sent, abs=16)
    assert "Tx:" in osess.handle("show interfaces ethernet 1/31 counters")[0]


def test_nvue_counters_view_is_5_5_and_later(tmp_path):
    old = NvueSwitch("leaf", ["swp1"], tmp_path / "54", None, "5.4")
    out = NvueSession(old).handle("nv show interface swp1 counters")[0]
    assert "Detailed Counters" not in out and "Error" in out
    assert "in-bytes" in NvueSession(old).handle("nv show interface swp1 link stats")[0]


# --- the ledger itself ------------------------------------------------------------------------

def _doc(run: str, start: float, end: float, nbytes: int | None, hop: list[str]) -> dict:
    return {"id": run, "kind": "bw", "start": start, "end": end, "bytes": nbytes, "hops": [hop],
            "flows": [{"hops": [hop], "bytes": nbytes,
                       "packets": None if nbytes is None else nbytes // 4096}]}


def test_pruning_folds_old_runs_and_keeps_counters_monotonic(tmp_path):
    fab = tmp_path / "fabric"
    (fab / "flows").mkdir(parents=True)
    hop = ["leaf1", "swp31", "spine1", "swp1"]
    now = 10_000.0
    for n in range(5):
        devstate.ledger_register(_doc(f"old{n}", now - 900 + n, now - 899 + n, 1 << 20, hop), fab)
    devstate.ledger_register(_doc("live", now - 1, now, 4096, hop), fab)
    devstate.ledger_register(_doc("running", now - 900, now - 899, None, hop), fab)  # never finished
    before = devstate.port_totals(fab)
    assert before["leaf1|swp31"]["tx_bytes"] == 5 * (1 << 20) + 4096
    assert before["spine1|swp1"]["rx_bytes"] == 5 * (1 << 20) + 4096
    assert devstate.ledger_prune(now, fab) == 5
    assert devstate.port_totals(fab) == before
    names = sorted(p.name for p in (fab / "flows").glob("flow-*"))
    assert len(names) == 2 and any("live" in n for n in names) and any("running" in n for n in names)
    assert devstate.ledger_prune(now, fab) == 0
    assert devstate.ledger_prune(now + devstate.STALE_AGE_S, fab) == 2  # the unfinished one is dropped
    assert devstate.port_totals(fab) == before
    # a run only sees the runs that overlap it, without opening the others
    devstate.ledger_register(_doc("a", now, now + 2, None, hop), fab)
    assert [d["id"] for d in devstate.ledger_overlapping(now + 1, now + 3, fab)] == ["a"]
    assert devstate.ledger_overlapping(now + 5, now + 6, fab) == []


def test_no_ledger_directory_means_no_ledger_and_the_run_still_works(tmp_path):
    fab = tmp_path / "fabric"
    fab.mkdir()
    assert devstate.ledger_register(_doc("x", 1.0, 2.0, None, ["a", "b", "c", "d"]), fab) is None
    assert devstate.port_totals(fab) == {}


def test_default_single_switch_lab_is_unchanged_with_a_ledger(tmp_path):
    from test_emul_perftest import make_fabric, run_pair

    fabric = make_fabric(tmp_path, roce=False)
    (fabric / "flows").mkdir()
    srv = make_host(tmp_path, fabric, "gpu01", lid=5, ip_last=1)
    cli = make_host(tmp_path, fabric, "gpu02", lid=6, ip_last=2)
    _, client = run_pair("ib_write_bw", srv, cli, ["--report_gbits", "-q", "4"])
    assert 390.0 <= bw(client) <= 394.0
    (entry,) = ledger(fabric)
    assert entry["hops"] == [["gpu02", "mlx5_0/1", "leaf-a", "1/2"], ["leaf-a", "1/1", "gpu01", "mlx5_0/1"]]
    assert len(entry["flows"]) == 4 and entry["bytes"] == counter(cli, "port_xmit_data") * 4


# --- the lab wiring ---------------------------------------------------------------------------

def test_hosts_get_the_ledger_read_write_and_lab_up_makes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    argv = hosts.nspawn_argv({"name": "gpu01"})
    fabric = paths.fabric_dir()
    assert f"--bind={fabric / 'flows'}:/var/lib/emulated-fabric/flows" in argv
    assert argv.index(f"--bind={fabric / 'flows'}:/var/lib/emulated-fabric/flows") > \
        argv.index(f"--bind-ro={fabric}:/var/lib/emulated-fabric")  # over the read-only fabric dir
    rack._write_fabric(topology.load())
    assert (fabric / "flows").is_dir()


def test_switch_counters_see_a_new_run_after_a_cached_read(tmp_path):
    fab = tmp_path / "fabric"
    (fab / "flows").mkdir(parents=True)
    hop = ["leaf1", "swp31", "spine1", "swp1"]
    devstate.ledger_register(_doc("one", 1.0, 2.0, 1000, hop), fab)
    assert devstate.port_totals(fab)["leaf1|swp31"]["tx_bytes"] == 1000
    assert devstate.port_totals(fab)["leaf1|swp31"]["tx_bytes"] == 1000  # cached
    devstate.ledger_register(_doc("two", 3.0, 4.0, 24, hop), fab)
    assert devstate.port_totals(fab)["leaf1|swp31"]["tx_bytes"] == 1024
