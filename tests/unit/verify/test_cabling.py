"""The cabling check: compare() on hand-built plans and observations (the swapped-cable sentence exactly),
the phase against fake hosts (which tool runs where, fail closed), and its hook in verify()."""

from __future__ import annotations

import pytest

from fabricops.parsers.lldp import LldpNeighbor
from fabricops.verify import cabling
from fabricops.verify.cabling import End, Observed, Peer

LAYERS = {"leaf2": "Ethernet", "spine1": "Ethernet", "ib-leaf1": "InfiniBand", "ib-spine1": "InfiniBand"}
CABLING = [
    {
        "host": "gpu07",
        "netdev": "enp1s0",
        "hca": "mlx5_3",
        "port": 1,
        "switch": "leaf2",
        "switch_port": "swp11",
    },
    {
        "host": "gpu07",
        "netdev": "enp2s0",
        "hca": "mlx5_4",
        "port": 1,
        "switch": "leaf2",
        "switch_port": "swp9",
    },
    {
        "host": "gpu08",
        "netdev": "enp1s0",
        "hca": "mlx5_3",
        "port": 1,
        "switch": "leaf2",
        "switch_port": "swp12",
    },
    {
        "host": "gpu07",
        "netdev": "ibp26s0",
        "hca": "mlx5_0",
        "port": 1,
        "switch": "ib-leaf1",
        "switch_port": "3",
    },
    {
        "host": "gpu08",
        "netdev": "ibp26s0",
        "hca": "mlx5_0",
        "port": 1,
        "switch": "ib-leaf1",
        "switch_port": "4",
    },
]
LINKS = [
    {"switch_a": "leaf2", "port_a": "swp31", "switch_b": "spine1", "port_b": "swp1"},
    {"switch_a": "ib-leaf1", "port_a": "33", "switch_b": "ib-spine1", "port_b": "1"},
]


def _plan():
    return cabling.plan(CABLING, LINKS, LAYERS)


def _host_view(pairs: dict[tuple[str, str, int], tuple[str, str] | None], source="lldpctl on gpu07"):
    obs = Observed(source)
    for (h, hca, p), peer in pairs.items():
        end = End(h, hca, p)
        obs.covers.add(end)
        obs.peers[end] = Peer(End(*peer)) if peer else None
    return obs


def test_swapped_cable_is_one_sentence_per_port():
    planned = _plan()
    obs = _host_view({("gpu07", "mlx5_3", 1): ("leaf2", "swp9"), ("gpu07", "mlx5_4", 1): ("leaf2", "swp11")})
    res = cabling.compare(planned, [obs])
    bad = [r for r in res if not r.ok]
    assert [r.message for r in bad] == [
        "gpu07 mlx5_3 is on leaf2 swp9, planned leaf2 swp11",
        "gpu07 mlx5_4 is on leaf2 swp11, planned leaf2 swp9",
    ]
    assert bad[0].status == "fail" and bad[0].category == "cabling" and bad[0].host == "gpu07"
    assert bad[0].measured == "leaf2 swp9" and bad[0].threshold == "leaf2 swp11"
    # only the cables a source could see have a result: gpu08's and the ISLs are not judged here
    assert len(res) == 2


def test_matching_cables_pass_and_missing_ones_fail():
    planned = _plan()
    obs = _host_view({("gpu07", "mlx5_3", 1): ("leaf2", "swp11"), ("gpu07", "mlx5_4", 1): None})
    res = {r.device: r for r in cabling.compare(planned, [obs])}
    assert res["mlx5_3"].ok and res["mlx5_3"].message == "gpu07 mlx5_3 <-> leaf2 swp11 as planned"
    assert res["mlx5_4"].message == (
        "gpu07 mlx5_4 has no neighbour (lldpctl on gpu07), planned leaf2 swp9: cable missing or link down"
    )


def test_switch_side_names_the_host_it_sees():
    planned = _plan()
    obs = Observed("leaf2 LLDP")
    for port in ("swp9", "swp11", "swp12", "swp31"):
        obs.covers.add(End("leaf2", port))
    obs.peers[End("leaf2", "swp11")] = Peer(End("gpu08", "mlx5_3", 1))
    obs.peers[End("leaf2", "swp12")] = Peer(End("gpu07", "mlx5_3", 1))
    obs.peers[End("leaf2", "swp31")] = Peer(None, "core9 port Ethernet1")
    obs.peers[End("leaf2", "swp9")] = Peer(End("gpu07", "mlx5_4", 1))
    msgs = sorted(r.message for r in cabling.compare(planned, [obs]) if not r.ok)
    assert msgs == [
        "leaf2 swp11 has gpu08 mlx5_3, planned gpu07 mlx5_3",
        "leaf2 swp12 has gpu07 mlx5_3, planned gpu08 mlx5_3",
        "leaf2 swp31 is on an unknown device (core9 port Ethernet1), planned spine1 swp1",
    ]


def test_unplanned_cables_are_reported_once():
    planned = _plan()
    obs = Observed("ibnetdiscover on gpu07")
    obs.peers[End("ib-leaf1", "7")] = Peer(End("gpu09", "mlx5_0", 1))
    obs.peers[End("gpu09", "mlx5_0", 1)] = Peer(End("ib-leaf1", "7"))
    obs.peers[End("ib-leaf1", "40")] = Peer(End("ib-spine1", "9"))
    res = [r for r in cabling.compare(planned, [obs]) if not r.ok]
    assert sorted(r.message for r in res) == [
        "unplanned cable ib-leaf1 40 <-> ib-spine1 9 (ibnetdiscover on gpu07; not in fabricops_switch_links)",
        "unplanned cable ib-leaf1 7 <-> gpu09 mlx5_0 (ibnetdiscover on gpu07; not in fabricops_cabling)",
    ]


def test_names_from_node_descriptions_and_lldp():
    names = cabling.Names(_plan())
    assert names.ib_node("MF0;ib-leaf1:MQM9700/U1", 3).end == End("ib-leaf1", "3")
    assert names.ib_node("gpu07 mlx5_0", 1, "Ca").end == End("gpu07", "mlx5_0", 1)
    assert names.ib_node("Quantum-2 Mellanox Technologies", 5).end is None
    assert names.lldp_peer("leaf2.dc.example.com", "swp9").end == End("leaf2", "swp9")
    assert names.lldp_peer("gpu07", "enp2s0").end == End("gpu07", "mlx5_4", 1)
    assert str(names.lldp_peer("gpu07", "eth9")) == "an unknown device (gpu07 port eth9)"


# --- the phase -----------------------------------------------------------------------------------

IBNET = """#
# Topology file: generated on Tue Dec  1 10:00:00 2026
#
# Initiated from node b83fd20300a00100 port b83fd20300a00100

switchguid=0xfc6a1c0300000001(fc6a1c0300000001)
Switch\t64 "S-fc6a1c0300000001"\t\t# "MF0;ib-leaf1:MQM9700/U1" enhanced port 0 lid 1 lmc 0
[3]\t"H-b83fd20300a00100"[1](b83fd20300a00100) \t\t# "gpu07 mlx5_0" lid 2 4xNDR
[4]\t"H-b83fd20300a00200"[1](b83fd20300a00200) \t\t# "gpu08 mlx5_0" lid 3 4xNDR
[33]\t"S-fc6a1c0300000002"[1]\t\t# "MF0;ib-spine1:MQM9700/U1" lid 4 4xNDR

switchguid=0xfc6a1c0300000002(fc6a1c0300000002)
Switch\t64 "S-fc6a1c0300000002"\t\t# "MF0;ib-spine1:MQM9700/U1" enhanced port 0 lid 4 lmc 0
[1]\t"S-fc6a1c0300000001"[33]\t\t# "MF0;ib-leaf1:MQM9700/U1" lid 1 4xNDR
"""
KV = {
    "gpu07": "lldp.enp1s0.chassis.name=leaf2\nlldp.enp1s0.port.ifname=swp11\n"
    "lldp.enp2s0.chassis.name=leaf2\nlldp.enp2s0.port.ifname=swp9\n",
    "gpu08": "lldp.enp1s0.chassis.name=leaf2\nlldp.enp1s0.port.ifname=swp12\n",
}


class FakeRun:
    def __init__(self, answers=None):
        self.answers = answers or {}
        self.calls: list[tuple[str, str]] = []

    def __call__(self, host, cmd, timeout=60):
        self.calls.append((host, cmd))
        key = (host, cmd)
        if key in self.answers:
            return self.answers[key]
        if cmd == "ibnetdiscover":
            return {"rc": 0, "stdout": IBNET, "stderr": ""}
        if cmd == cabling.LLDP_COMMAND:
            return {"rc": 0, "stdout": KV[host], "stderr": ""}
        return {"rc": 127, "stdout": "", "stderr": f"sh: 1: {cmd}: not found"}


def _hv():
    return {h: {"fabricops_cabling": CABLING, "fabricops_switch_links": LINKS} for h in ("gpu07", "gpu08")}


def test_phase_runs_one_ib_read_per_fabric_and_lldpctl_per_host():
    run = FakeRun()
    res = cabling.phase(run, ["gpu07", "gpu08"], _hv(), LAYERS)
    assert sorted(run.calls) == [
        ("gpu07", "ibnetdiscover"),
        ("gpu07", cabling.LLDP_COMMAND),
        ("gpu08", cabling.LLDP_COMMAND),
    ]
    # IB: 2 host cables + the ISL; Ethernet: 3 host cables (the Ethernet ISL has no reader: no result)
    assert [r.status for r in res] == ["pass"] * 6, [r.message for r in res]


def test_phase_with_switch_lldp_checks_the_ethernet_isl_too():
    seen = {
        "swp9": LldpNeighbor(
            "swp9", "gpu07", port_id="02:00:00:00:00:01", port_id_type="mac", port_descr="enp2s0"
        ),
        "swp11": LldpNeighbor("swp11", "gpu07", port_descr="enp1s0", port_id_type="mac"),
        "swp12": LldpNeighbor("swp12", "gpu08", port_descr="enp1s0", port_id_type="mac"),
        "swp31": LldpNeighbor("swp31", "spine1", port_id="swp2", port_id_type="ifname"),
    }
    asked = []

    def read(switch, ports):
        asked.append((switch, list(ports)))
        if switch == "spine1":
            raise cabling.FabricopsError("spine1 unreachable over SSH")
        return seen

    res = cabling.phase(FakeRun(), ["gpu07", "gpu08"], _hv(), LAYERS, switch_lldp=read)
    assert asked == [("leaf2", ["swp11", "swp12", "swp31", "swp9"]), ("spine1", ["swp1"])]
    bad = [(r.status, r.message) for r in res if not r.ok]
    assert bad == [
        (
            "error",
            "spine1: LLDP not read (spine1 unreachable over SSH); its ports are checked from the hosts' "
            "side only",
        ),
        ("fail", "leaf2 swp31 is on spine1 swp2, planned spine1 swp1"),
    ]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            {"rc": 1, "stdout": "", "stderr": "lldpctl: unable to connect to lldpd daemon"},
            "is lldpd running?",
        ),
        ({"rc": 127, "stdout": "", "stderr": "lldpctl: command not found"}, "install lldpd"),
        ({"rc": 0, "stdout": "Interface: enp1s0, via: LLDP\n", "stderr": ""}, "not a 'lldp.' key"),
    ],
)
def test_unreadable_lldp_is_an_error_and_its_cables_are_not_passed(answer, why):
    run = FakeRun({("gpu08", cabling.LLDP_COMMAND): answer})
    res = cabling.phase(run, ["gpu07", "gpu08"], _hv(), LAYERS)
    errors = [r for r in res if r.status == "error"]
    assert len(errors) == 1 and errors[0].host == "gpu08" and why in errors[0].message
    assert not any(r.host == "gpu08" and r.device == "mlx5_3" for r in res)  # not judged: no evidence


def test_unreadable_ibnetdiscover_tries_the_next_host_then_fails_closed():
    bad = {"rc": 255, "stdout": "", "stderr": "ibnetdiscover: iberror: failed: discover failed"}
    run = FakeRun({("gpu07", "ibnetdiscover"): bad})
    res = cabling.phase(run, ["gpu07", "gpu08"], _hv(), LAYERS)
    assert ("gpu08", "ibnetdiscover") in run.calls
    assert sum(1 for r in res if r.details.get("layer") == "InfiniBand" and r.ok) == 3
    run = FakeRun({("gpu07", "ibnetdiscover"): bad, ("gpu08", "ibnetdiscover"): bad})
    res = cabling.phase(run, ["gpu07", "gpu08"], _hv(), LAYERS)
    [err] = [r for r in res if r.status == "error"]
    assert err.message.startswith(
        "InfiniBand fabric ib-leaf1, ib-spine1: cabling not read: gpu07: `ibnetdiscover` "
        "failed: ibnetdiscover: iberror: failed: discover failed; gpu08:"
    )


def test_iblinkinfo_is_the_fallback_when_ibnetdiscover_is_missing():
    linkinfo = (
        "Switch: 0xfc6a1c0300000001 MF0;ib-leaf1:MQM9700/U1:\n"
        '           1    3[  ] ==( 4X 106.25 Gbps Active/  LinkUp)==>       2    1[  ] "gpu07 mlx5_0" ( )\n'
        '           1    4[  ] ==( 4X 106.25 Gbps Active/  LinkUp)==>       3    1[  ] "gpu08 mlx5_0" ( )\n'
        '           1   33[  ] ==(                Down/ Polling)==>             [  ] "" ( )\n'
    )
    run = FakeRun(
        {
            ("gpu07", "ibnetdiscover"): {"rc": 127, "stdout": "", "stderr": "not found"},
            ("gpu07", "iblinkinfo"): {"rc": 0, "stdout": linkinfo, "stderr": ""},
        }
    )
    res = cabling.phase(run, ["gpu07", "gpu08"], _hv(), LAYERS)
    bad = [r.message for r in res if not r.ok]
    assert bad == [
        "ib-leaf1 33 has no neighbour (iblinkinfo on gpu07), planned ib-spine1 1: cable missing or link down"
    ]


def test_nothing_to_check_is_an_error():
    res = cabling.phase(FakeRun(), ["gpu01"], {"gpu01": {"fabricops_cabling": CABLING}}, LAYERS)
    assert [(r.status, r.message) for r in res] == [
        ("error", "no cable to check: fabricops_cabling lists none of the verified hosts (failing closed)")
    ]
    everything_fails = FakeRun(
        {
            (h, c): {"rc": 1, "stdout": "", "stderr": "boom"}
            for h in ("gpu07", "gpu08")
            for c in ("ibnetdiscover", cabling.LLDP_COMMAND)
        }
    )
    res = cabling.phase(everything_fails, ["gpu07", "gpu08"], _hv(), LAYERS)
    assert res[-1].status == "error" and res[-1].message.startswith("no cable checked (7 planned)")
    assert all(r.status == "error" for r in res)


def test_verify_runs_the_phase_and_skip_and_only_select_it(monkeypatch):
    from fabricops.verify import engine

    calls = []
    monkeypatch.setattr(cabling, "phase", lambda *a, **k: calls.append(a[1]) or [])
    monkeypatch.setattr(engine, "_pair_phase", lambda *a, **k: None)
    hv = {"gpu07": {"fabricops_hardware_profile": "hgx-h100-ndr"}}
    run = FakeRun()
    engine.verify(run, ["gpu07"], hv, engine.Options(only="cabling"))
    engine.verify(run, ["gpu07"], hv, engine.Options())
    engine.verify(run, ["gpu07"], hv, engine.Options(skip=["cabling"]))
    engine.verify(run, ["gpu07"], hv, engine.Options(only="hosts"))
    engine.verify(
        run, ["gpu07"], {"gpu07": {**hv["gpu07"], "fabricops_verify_skip": ["cabling"]}}, engine.Options()
    )
    assert calls == [["gpu07"], ["gpu07"]]
