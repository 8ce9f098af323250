"""Rail planning over every cabled HCA port (InfiniBand and RoCE), RoCE thresholds and perftest
options, and the switch-port cause of a degraded RoCE pair (fake transports, real perftest captures)."""

from __future__ import annotations

import re

import pytest
from captures import read_fixture
from fake_counters import PortCounters

from fabricops.model.profiles import load_profile
from fabricops.roce.switchspec import switch_spec, want_facts
from fabricops.verify import hostchecks, pairs
from fabricops.verify.engine import Options, explain_roce, plan_rails, verify
from fabricops.verify.expect import host_expect
from fabricops.verify.result import FAIL, PASS, CheckResult
from fabricops.verify.switchstate import nvue_pfc_priorities, port_problems

PROFILE = load_profile("hgx-h100-ndr")
BW = read_fixture("perftest-bw", "csegpu_ndr_write_bw_gbits_client.txt")  # 392.34 Gb/s
LAT = read_fixture("perftest-lat", "csegpu_ndr_send_lat_client.txt")  # t_typical 1.27 us
ROCE = {"lossless_priority": 3, "dscp": 26, "cnp_dscp": 48, "cnp_priority": 6, "trust": "dscp"}
HOSTS = ["gpu01", "gpu02", "gpu03", "gpu04"]
LAYERS = {"ib-sw1": "InfiniBand", "leaf-onyx": "Ethernet", "leaf-cumulus": "Ethernet"}


def _cabling(hosts=HOSTS, speed=None):
    out = []
    for i, h in enumerate(hosts, 1):
        out += [
            {
                "host": h,
                "hca": "mlx5_0",
                "port": 1,
                "netdev": "ibp26s0",
                "switch": "ib-sw1",
                "switch_port": "1",
            },
            {
                "host": h,
                "hca": "mlx5_1",
                "port": 1,
                "netdev": "ibp60s0",
                "switch": "ib-sw1",
                "switch_port": "2",
            },
            {
                "host": h,
                "hca": "mlx5_2",
                "port": 1,
                "netdev": "enp170s0f0np0",
                "switch": "leaf-onyx",
                "switch_port": f"Eth1/{i}",
                **({"speed": speed} if speed else {}),
            },
            {
                "host": h,
                "hca": "mlx5_3",
                "port": 1,
                "netdev": "enp170s0f1np1",
                "switch": "leaf-cumulus",
                "switch_port": f"swp{i}",
                **({"speed": speed} if speed else {}),
            },
        ]
    return out


def _hostvars(hosts=HOSTS, **extra):
    addrs = {
        h: [
            {"netdev": "enp170s0f0np0", "hca": "mlx5_2", "address": f"203.0.113.{i}/26"},
            {"netdev": "enp170s0f1np1", "hca": "mlx5_3", "address": f"203.0.113.{64 + i}/26"},
        ]
        for i, h in enumerate(hosts, 1)
    }
    base = {
        "fabricops_hardware_profile": "hgx-h100-ndr",
        "fabricops_cabling": _cabling(hosts, speed="400GbE"),
        "fabricops_roce": ROCE,
        "fabricops_roce_addresses": addrs,
        "fabricops_verify_perftest": {"server_start_s": 0},
    }
    base.update(extra)
    return {h: dict(base, ansible_host=f"mgmt-{h}") for h in hosts}


def _gids(hca, ip):
    """What `grep -H '' .../gids/* .../gid_attrs/types/*` prints on an mlx5 RoCE port."""
    a, b, c, d = (int(x) for x in ip.split("."))
    mapped = f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"
    base = f"/sys/class/infiniband/{hca}/ports/1"
    lines = [
        f"{base}/gids/0:fe80:0000:0000:0000:ba3f:d2ff:fea0:0120",
        f"{base}/gids/1:fe80:0000:0000:0000:ba3f:d2ff:fea0:0120",
        f"{base}/gids/2:{mapped}",
        f"{base}/gids/3:{mapped}",
        f"{base}/gids/4:0000:0000:0000:0000:0000:0000:0000:0000",
        f"{base}/gid_attrs/types/0:IB/RoCE v1",
        f"{base}/gid_attrs/types/1:RoCE v2",
        f"{base}/gid_attrs/types/2:IB/RoCE v1",
        f"{base}/gid_attrs/types/3:RoCE v2",
    ]
    return "\n".join(lines) + "\n"


def _raws(hosts=HOSTS, drop=()):
    out = {}
    for i, h in enumerate(hosts, 1):
        out[h] = {
            "gids:mlx5_2/1": {
                "rc": 0,
                "stdout": "" if (h, "mlx5_2") in drop else _gids("mlx5_2", f"203.0.113.{i}"),
            },
            "gids:mlx5_3/1": {"rc": 0, "stdout": _gids("mlx5_3", f"203.0.113.{64 + i}")},
        }
    return out


def _expects(hv):
    return {h: host_expect(h, v, switch_link_layers=LAYERS) for h, v in hv.items()}


# --- GID table ------------------------------------------------------------------------------


def test_gid_table_picks_the_roce_v2_ipv4_entry():
    entries = hostchecks.parse_gids(_gids("mlx5_2", "203.0.113.3").replace("\n", "\r\n"))
    assert [e["index"] for e in entries] == [0, 1, 2, 3]  # the all-zero entry is unset
    assert hostchecks.roce_v2_gid(entries, "203.0.113.3")["index"] == 3
    assert hostchecks.roce_v2_gid(entries)["ipv4"] == "203.0.113.3"
    assert hostchecks.roce_v2_gid(entries, "203.0.113.9") is None
    assert hostchecks.parse_gids("grep: /sys/...: No such file\n") == []


def test_commands_read_the_gid_table_of_roce_ports_only():
    e = _expects(_hostvars())["gpu03"]
    cmds = hostchecks.commands(e, None)
    assert set(k for k in cmds if k.startswith("gids:")) == {"gids:mlx5_2/1", "gids:mlx5_3/1"}
    assert "/sys/class/infiniband/mlx5_2/ports/1/gid_attrs/types/*" in cmds["gids:mlx5_2/1"]
    assert not any(k.startswith("gids:") for k in hostchecks.commands(e, "hosts"))


# --- rail planning --------------------------------------------------------------------------


def test_every_cabled_port_is_a_rail_ib_and_roce():
    rails, errors = plan_rails(_expects(_hostvars()), _raws())
    assert errors == []
    assert [(r.index, r.name, r.link_layer, r.switch) for r in rails] == [
        (0, "mlx5_0/1", "InfiniBand", "ib-sw1"),
        (1, "mlx5_1/1", "InfiniBand", "ib-sw1"),
        (2, "mlx5_2/1", "Ethernet", "leaf-onyx"),
        (3, "mlx5_3/1", "Ethernet", "leaf-cumulus"),
    ]
    ib, roce = rails[0], rails[2]
    assert ib.addresses["gpu03"] == "mgmt-gpu03" and ib.tos is None and not ib.gid_index
    assert ib.rate_gbps == 400 and "profile hgx-h100-ndr" in ib.rate_source
    assert roce.addresses == {h: f"203.0.113.{i}" for i, h in enumerate(HOSTS, 1)}
    assert rails[3].addresses["gpu03"] == "203.0.113.67"
    assert roce.gid_index == dict.fromkeys(HOSTS, 3) and roce.tos == 106
    assert roce.rate_gbps == 400 and roce.rate_source == "fabricops_cabling speed 400GbE"
    assert roce.switch_ports["gpu03"] == "Eth1/3" and roce.netdevs["gpu03"] == "enp170s0f0np0"


def test_rounds_hold_every_rail_once_per_host():
    rails, _ = plan_rails(_expects(_hostvars()), _raws())
    rounds = pairs.plan(HOSTS, rails)
    assert len(rounds) == 3  # N-1 for N = 4, all four rails in the same rounds
    assert sum(len(r) for r in rounds) == 6 * 4
    for rnd in rounds:
        assert len(rnd) == 2 * 4
        for rail in range(4):
            hosts = [h for t in rnd if t.rail == rail for h in (t.host_a, t.host_b)]
            assert len(hosts) == len(set(hosts)) == 4


def test_address_from_the_gid_table_when_the_inventory_has_none():
    hv = _hostvars()
    for v in hv.values():
        v.pop("fabricops_roce_addresses")
    rails, errors = plan_rails(_expects(hv), _raws())
    assert not errors and rails[2].addresses["gpu02"] == "203.0.113.2" and rails[2].gid_index["gpu02"] == 3


def test_no_roce_v2_gid_fails_closed_and_drops_the_host_from_that_rail():
    rails, errors = plan_rails(_expects(_hostvars()), _raws(drop={("gpu03", "mlx5_2")}))
    roce = rails[2]
    assert "gpu03" not in roce.devices and set(roce.devices) == {"gpu01", "gpu02", "gpu04"}
    assert "gpu03" in rails[3].devices
    msgs = [e.message for e in errors]
    assert any("gpu03 mlx5_2/1 (enp170s0f0np0): no RoCE v2 GID for 203.0.113.3" in m for m in msgs), msgs
    assert any(m.startswith("rail mlx5_2/1 on leaf-onyx: gpu03 not on this rail") for m in msgs), msgs
    assert all(e.status == "error" for e in errors)


def test_a_port_on_another_switch_is_another_rail_without_peer():
    hv = _hostvars()
    cab = [dict(c) for c in hv["gpu01"]["fabricops_cabling"]]
    for c in cab:
        if c["host"] == "gpu04" and c["hca"] == "mlx5_2":
            c["switch"] = "leaf-cumulus"
    for v in hv.values():
        v["fabricops_cabling"] = cab
    rails, errors = plan_rails(_expects(hv), _raws())
    onyx = next(r for r in rails if r.switch == "leaf-onyx")
    assert set(onyx.devices) == {"gpu01", "gpu02", "gpu03"}
    msgs = [e.message for e in errors]
    assert "rail mlx5_2/1 on leaf-cumulus: only gpu04 can test there, no peer (failing closed)" in msgs


def test_roce_rate_unknown_without_speed_or_ibstat_fails_closed():
    hv = _hostvars(fabricops_cabling=_cabling())
    rails, errors = plan_rails(_expects(hv), _raws())
    assert [r.name for r in rails] == ["mlx5_0/1", "mlx5_1/1"]
    assert any("no rate known for its Ethernet ports" in e.message for e in errors)


# --- thresholds and commands -----------------------------------------------------------------


def test_roce_threshold_is_90_percent_not_the_ndr_floor():
    ib = pairs.rail_threshold(PROFILE, "ib_write_bw", 400, "InfiniBand")
    roce = pairs.rail_threshold(PROFILE, "ib_write_bw", 400, "Ethernet")
    assert (ib.value, ib.op) == (390, ">=") and "azurehpc" in ib.source
    assert (roce.value, roce.op) == (360, ">=") and "ngc_multinode_perf" in roce.source
    assert "floors are for InfiniBand ports" in roce.basis
    assert pairs.rail_threshold(PROFILE, "ib_write_lat", 400, "Ethernet").value == 2.5
    # an Ethernet profile keeps its own rules (no floors: 90 %)
    assert pairs.rail_threshold(load_profile("roce-400g"), "ib_write_bw", 400, "Ethernet").value == 360
    # the evaluation uses it: 384 Gb/s (a matched 400GbE RoCE path) passes, 200 fails
    t = pairs.RailTest(2, "gpu01", "mlx5_2/1", "gpu03", "mlx5_2/1")
    ok = {"rc": 0, "stdout": BW.replace("392.38             392.34", "384.10             384.01")}
    r = pairs.evaluate(t, "ib_write_bw", ok, {"rc": 0}, PROFILE, 400, link_layer="Ethernet")
    assert r.status == PASS and r.measured == 384.01 and r.threshold == 360
    bad = {"rc": 0, "stdout": BW.replace("392.38             392.34", "170.10             168.20")}
    r = pairs.evaluate(t, "ib_write_bw", bad, {"rc": 0}, PROFILE, 400, link_layer="Ethernet")
    assert r.status == FAIL and "lossy RoCE path" in r.cause


def _peer(server):
    """The host behind a perftest server address (mgmt-gpuNN, 203.0.113.N, 203.0.113.64+N)."""
    if server.startswith("mgmt-"):
        return server[len("mgmt-") :]
    last = int(server.rsplit(".", 1)[1])
    return HOSTS[(last - 1) % 64]


class Fake:
    """Perftest from real captures; gpu03's RoCE pairs on mlx5_2 are slow (a lossy path). The
    ports' data counters move by what each client reports."""

    def __init__(self, counters=None):
        self.calls = []
        self.counters = counters or PortCounters()

    def run(self, host, cmd, timeout=60):
        self.calls.append((host, cmd))
        answer = self.counters.answer(host, cmd)
        if answer is not None:
            return answer
        if "wait $p" in cmd or "kill" in cmd or "while :; do out=$(" not in cmd:
            return {"rc": 0, "stdout": "", "stderr": ""}
        server = cmd.split("2>&1")[0].split()[-1].rstrip(")")
        slow = "-d mlx5_2" in cmd and (host == "gpu03" or server == "203.0.113.3")
        if "ib_write_bw" in cmd:
            text = BW.replace("392.38             392.34", "170.10             168.20") if slow else BW
            hca = re.search(r"-d (mlx5_\d+)", cmd)[1]
            self.counters.credit(host, hca, _peer(server), hca, text)
            return {"rc": 0, "stdout": text, "stderr": ""}
        text = LAT.replace("1.27", "5.90") if slow else LAT
        return {"rc": 0, "stdout": text, "stderr": ""}


def test_roce_tests_use_the_roce_address_gid_and_tclass_ib_tests_do_not():
    rails, _ = plan_rails(_expects(_hostvars()), _raws())
    fake = Fake()
    pr = pairs.run_pairs(
        fake.run, HOSTS, rails, {}, PROFILE, 400, dict(_expects(_hostvars())["gpu01"].perftest)
    )
    assert pr.rounds == 3 and len(pr.results) == 6 * 4 * 2
    clients = [(h, c) for h, c in fake.calls if "while :; do out=$(" in c]
    roce = [c for h, c in clients if "-d mlx5_2" in c and h == "gpu01" and "203.0.113.3" in c]
    assert roce and all("-x 3 --tclass=106" in c and "-p 18517" in c for c in roce)
    ib = [c for h, c in clients if "-d mlx5_0" in c]
    assert ib and all("--tclass" not in c and " -x " not in c and "mgmt-gpu" in c for c in ib)
    servers = [c for h, c in fake.calls if "wait $p" in c and "-d mlx5_3" in c]
    assert servers and all("-x 3 --tclass=106" in c and "-p 18518" in c for c in servers)
    r = next(r for r in pr.results if r.details.get("rail_name") == "mlx5_2/1")
    assert r.details["link_layer"] == "Ethernet" and r.details["switch"] == "leaf-onyx"
    assert r.details["roce"]["tclass"] == 106


# --- the switch-port cause ---------------------------------------------------------------------


def test_onyx_port_without_pfc_is_named():
    ports = ["Eth1/1", "Eth1/3"]
    have = want_facts(switch_spec("onyx", ROCE, ports))
    assert port_problems("onyx", have, ROCE, "Eth1/3") == []
    del have[("port_pfc", "Eth1/3")]
    have[("port_trust", "Eth1/1")] = "L2"
    assert port_problems("onyx", have, ROCE, "Eth1/3") == [
        "PFC off on priority 3 (fabricops_roce.lossless_priority)"
    ]
    assert port_problems("onyx", have, ROCE, "Eth1/1") == ["trust L2, want L3 (fabricops_roce.trust)"]
    del have[("port_ecn", "Eth1/1", 3)]
    assert "no ECN on traffic class 3 (fabricops_roce.ecn)" in port_problems("onyx", have, ROCE, "Eth1/1")
    # ETS weights and the PFC watchdog do not make the class lossy: not a path cause
    del have[("port_pfc_wd", "Eth1/3")]
    assert port_problems("onyx", have, ROCE, "Eth1/3") == [
        "PFC off on priority 3 (fabricops_roce.lossless_priority)"
    ]


def test_nvue_pfc_and_dscp_map_are_named():
    have = want_facts(switch_spec("cumulus", ROCE, ["swp3"]))
    assert port_problems("cumulus", have, ROCE, "swp3") == []
    del have[("pfc_priority", 3)]
    have[("dscp_map", 26)] = 0
    probs = port_problems("cumulus", have, ROCE, "swp3")
    assert probs[0].startswith("PFC off on priority 3 (fabricops_roce.lossless_priority")
    assert "DSCP 26 maps to priority 0, want 3" in probs


@pytest.mark.parametrize(
    "text,want",
    [
        ('{"pfc": {"default-global": {"switch-priority": "3"}}}', {3}),
        ('{"pfc": {"default-global": {"switch-priority": "3,4"}}}', {3, 4}),
        ('{"pfc": {"default-global": {"switch-priority": {"3": {}, "5": {}}}}}', {3, 5}),
        ('{"pfc": {"default-global": {"switch-priority": [3]}}}', {3}),
        ('{"roce": {"mode": "lossless"}}', set()),
        ("Error: The requested item does not exist.", set()),
    ],
)
def test_nvue_pfc_priorities_in_every_shape(text, want):
    assert nvue_pfc_priorities(text) == want


def _failing(rail=2, a="gpu01", b="gpu03"):
    return CheckResult(
        "pairs",
        "ib_write_bw",
        f"{a}<->{b}",
        "mlx5_2/1<->mlx5_2/1",
        FAIL,
        "slow",
        measured=168.2,
        cause="gpu03 mlx5_2/1: fails with 3 different peers (gpu01, gpu02, gpu04); below 90% of 400 Gb/s",
        details={"rail": rail, "client": a, "server": b},
    )


def test_explain_roce_names_switch_port_and_host_qos():
    rails, _ = plan_rails(_expects(_hostvars()), _raws())
    seen = []

    def reader(sw, ports):
        seen.append((sw, list(ports)))
        return {
            p: (["PFC off on priority 3 (fabricops_roce.lossless_priority)"] if p == "Eth1/3" else [])
            for p in ports
        }

    r = _failing()
    qos = CheckResult(
        "hosts", "roce_qos", "gpu01", "enp170s0f0np0", FAIL, "x", measured=["trust is pcp, want dscp"]
    )
    explain_roce([r], rails, [qos], reader)
    assert seen == [("leaf-onyx", ["Eth1/1", "Eth1/3"])]  # one read per switch, only the path's ports
    assert r.cause.startswith(
        "gpu01 enp170s0f0np0 (mlx5_2/1): trust is pcp, want dscp; "
        "leaf-onyx Eth1/3 (gpu03 mlx5_2/1): PFC off on priority 3 (fabricops_roce.lossless_priority) -- gpu03"
    )
    assert r.details["path"]["switch_ports"] == {
        "Eth1/1": [],
        "Eth1/3": ["PFC off on priority 3 (fabricops_roce.lossless_priority)"],
    }


def test_explain_roce_when_the_switch_cannot_be_read_or_is_clean():
    rails, _ = plan_rails(_expects(_hostvars()), _raws())
    r = _failing()

    def broken(sw, ports):
        raise OSError("connection refused")

    explain_roce([r], rails, [], broken)
    assert r.cause.endswith("; leaf-onyx could not be read (connection refused)")
    r2 = _failing()
    explain_roce([r2], rails, [], lambda sw, ports: {p: [] for p in ports})
    assert r2.cause.endswith("; leaf-onyx Eth1/1, Eth1/3 hold the lossless class as declared")
    ib = _failing(rail=0)
    before = ib.cause
    explain_roce([ib], rails, [], broken)  # InfiniBand rails are not RoCE paths
    assert ib.cause == before and "path" not in ib.details


def test_engine_fails_only_gpu03_roce_pairs_and_names_the_switch_port():
    hv = _hostvars()
    fake = Fake()
    raws = _raws()

    def run(host, cmd, timeout=60):
        if cmd.startswith("grep -H '' /sys/class/infiniband/mlx5_"):
            hca = re.search(r"infiniband/(mlx5_\d)/", cmd)[1]
            return raws[host][f"gids:{hca}/1"]
        if cmd == "ibstat":
            return {"rc": 0, "stdout": "", "stderr": ""}
        return fake.run(host, cmd, timeout)

    def reader(sw, ports):
        return {
            p: (["PFC off on priority 3 (fabricops_roce.lossless_priority)"] if p == "Eth1/3" else [])
            for p in ports
        }

    vr = verify(run, HOSTS, hv, Options(only="pairs"), LAYERS, switch_reader=reader)
    assert vr.pairs.rounds == 3 and len(vr.pairs.rails) == 4
    bad = [r for r in vr.results if not r.ok]
    assert {r.host for r in bad} == {"gpu01<->gpu03", "gpu02<->gpu03", "gpu03<->gpu04"}
    assert all(r.device == "mlx5_2/1<->mlx5_2/1" and r.details["blamed"] == ["gpu03"] for r in bad)
    assert all(
        r.cause.startswith(
            "leaf-onyx Eth1/3 (gpu03 mlx5_2/1): PFC off on priority 3 (fabricops_roce.lossless_priority)"
        )
        for r in bad
    ), [r.cause for r in bad]
    assert len([r for r in vr.results if r.check == "ib_write_bw"]) == 24
