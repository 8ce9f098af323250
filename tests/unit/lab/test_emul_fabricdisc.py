"""Emulated ibnetdiscover / iblinkinfo / lldpctl and the switches' LLDP show commands, read back by the
product's own parsers and cabling check (round trip); the swapped-cable fault shows up in all of them."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from fabricops.parsers import parse
from fabricops.verify import cabling
from fabricops_lab import faults, hardware, paths, topology
from fabricops_lab.emul import fabricdisc, hwctl, tools
from fabricops_lab.switchd.nvue import NvueSession, NvueSwitch
from fabricops_lab.switchd.onyx import OnyxSession, OnyxSwitch

LAYERS = {
    "ib-sw1": "InfiniBand",
    "ib-spine1": "InfiniBand",
    "leaf-onyx": "Ethernet",
    "leaf-cumulus": "Ethernet",
}
ISL = {
    "switch_a": "ib-sw1",
    "port_a": "33",
    "switch_b": "ib-spine1",
    "port_b": "1",
    "speed": "NDR",
    "width": "4X",
}


def _run(tool: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = tools.main(tool, list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def rack(tmp_path, monkeypatch):
    """gpu01 of the default rack (EMUL_ROOT) with the fabric dir it binds: cabling.json plus one IB
    spine on an ISL, and every switch's port file. The same fabric dir is the lab's (faults write it)."""
    root = tmp_path / "root"
    monkeypatch.setenv("EMUL_ROOT", str(root))
    state = tmp_path / "state"
    monkeypatch.setattr(paths, "STATE_DIR", state)
    fab = root / "var/lib/emulated-fabric"
    monkeypatch.setattr(paths, "fabric_dir", lambda: fab)
    topo = topology.load()
    hw = hardware.hardware_json(topo, topo["hosts"][0], kernel="6.1.0-test")
    (root / "var/lib/emulated-hw").mkdir(parents=True)
    (fab / "switches").mkdir(parents=True)
    cab = hardware.cabling_json(topo)
    cab["isls"] = [ISL]
    cab["switches"] = {s["name"]: {"os": s["os"], "tier": "leaf"} for s in topo["switches"]}
    cab["switches"]["ib-spine1"] = {"os": "ib", "tier": "spine"}
    (fab / "cabling.json").write_text(json.dumps(cab))
    for s in [*topo["switches"], {"name": "ib-spine1", "os": "ib", "ports": [str(n) for n in range(1, 65)]}]:
        (fab / "switches" / f"{s['name']}.json").write_text(
            json.dumps(
                {"name": s["name"], "os": s["os"], "ports": {str(p): {"link": "up"} for p in s["ports"]}}
            )
        )
    (root / "usr/share/emulated-ofed").mkdir(parents=True)
    (root / "usr/share/emulated-ofed/release").write_text("MLNX_OFED_LINUX-24.10-1.1.4.0\n")
    (root / "var/lib/emulated-hw/hardware.json").write_text(json.dumps(hw))
    hwctl.sync(mount=False)
    lab = {
        "name": topo["name"],
        "topology": topo,
        "hosts": {h["name"]: {} for h in topo["hosts"]},
        "switches": {},
    }
    return {"topo": topo, "hw": hw, "fab": fab, "lab": lab, "cabling": cab}


def _plan(rack):
    return cabling.plan(rack["cabling"]["links"], rack["cabling"]["isls"], LAYERS)


def _ib_check(rack, tool="ibnetdiscover"):
    rc, out, err = _run(tool)
    assert rc == 0, err
    planned = _plan(rack)
    obs = cabling.observe_ib(out, tool, cabling.Names(planned), f"{tool} on gpu01")
    obs.covers = {e for c in planned if c.layer == "InfiniBand" for e in (c.a, c.b)}
    return cabling.compare([c for c in planned if c.layer == "InfiniBand"], [obs])


@pytest.mark.parametrize("tool", ["ibnetdiscover", "iblinkinfo"])
def test_ib_discovery_round_trips_to_every_planned_cable(rack, tool):
    results = _ib_check(rack, tool)
    # 4 hosts x 2 IB ports + the ISL, every one seen as planned
    assert [r.status for r in results] == ["pass"] * 9, [r.message for r in results if not r.ok]
    assert {r.details["kind"] for r in results} == {"host", "isl"}


def test_ibnetdiscover_lids_and_guids_are_the_hosts_own(rack):
    """Other hosts' LIDs and node GUIDs follow hardware.lids / node_guid: what their ibstat says."""
    _rc, out, _ = _run("ibnetdiscover")
    topo = parse("ibnetdiscover", out)
    lids = hardware.lids(rack["topo"])
    for h in rack["topo"]["hosts"]:
        hw = hardware.hardware_json(rack["topo"], h, kernel="-")
        for hca in hw["hcas"]:
            if hca["ports"][0]["link_layer"] != "InfiniBand":
                continue
            node = topo.node("0x" + hca["node_guid"].replace(":", ""))
            assert node is not None and node.desc == hca["node_desc"]
            assert node.cables[0].lid == lids[(h["name"], hca["name"], 1)]
    sw = next(n for n in topo.nodes if n.desc == "MF0;ib-sw1:MQM9700/U1")
    assert sw.lid == 1 and sw.num_ports == 64
    assert topo.initiated_from == hardware.node_guid(1, 0).replace(":", "")


def test_swapped_cable_fault_is_named_by_every_tool(rack):
    faults.inject("gpu02", "swapped-cable", ["ibp26s0", "ibp60s0"], lab=rack["lab"])
    for tool in ("ibnetdiscover", "iblinkinfo"):
        bad = [r.message for r in _ib_check(rack, tool) if not r.ok]
        assert bad == [
            "gpu02 mlx5_0 is on ib-sw1 4, planned ib-sw1 3",
            "gpu02 mlx5_1 is on ib-sw1 3, planned ib-sw1 4",
        ], tool
    faults.clear("gpu02", lab=rack["lab"])
    assert not (rack["fab"] / fabricdisc.OVERRIDE).exists()
    assert all(r.ok for r in _ib_check(rack))


def test_swapped_ethernet_cables_across_hosts_show_in_lldpctl_and_the_switches(rack, tmp_path):
    # gpu01's leaf-onyx port and gpu02's: the cable pulled from Eth1/1 went into Eth1/2 and back
    faults.inject("gpu01", "swapped-cable", ["enp170s0f0np0", "gpu02:enp170s0f0np0"], lab=rack["lab"])
    rc, out, err = _run("lldpctl", "-f", "keyvalue")
    assert rc == 0, err
    planned = _plan(rack)
    names = cabling.Names(planned)
    netdevs = {c.netdev: c.a for c in planned if c.a.node == "gpu01" and c.layer == "Ethernet"}
    obs = cabling.observe_lldpctl("gpu01", out, names, netdevs)
    eth_gpu01 = [c for c in planned if c.layer == "Ethernet" and c.a.node == "gpu01"]
    bad = [r.message for r in cabling.compare(eth_gpu01, [obs], planned) if not r.ok]
    assert bad == ["gpu01 mlx5_2 is on leaf-onyx Eth1/2, planned leaf-onyx Eth1/1"]
    # the switch's own view, through the emulated Onyx CLI and the product's reader
    sw = OnyxSwitch(
        "leaf-onyx",
        [f"Eth1/{n}" for n in range(1, 5)],
        tmp_path / "st",
        rack["fab"] / "switches" / "leaf-onyx.json",
    )
    sess = OnyxSession(sw)
    sess.handle("no cli session paging enable")  # a fresh login: standard (user) mode, as netmiko leaves it

    class Conn:  # netmiko's shape: the reader must enter enable mode itself (LLDP is not a user-mode show)
        def send_command(self, cmd):
            return sess.handle(cmd)[0]

        def enable(self):
            sess.handle("enable")

    from fabricops.roce.switchspec import normalize_ports

    seen = cabling.read_lldp(Conn(), "onyx", ["Eth1/1", "Eth1/2", "Eth1/3"], normalize_ports)
    assert seen["Eth1/1"].system_name == "gpu02" and seen["Eth1/1"].port_name == "enp170s0f0np0"
    assert seen["Eth1/2"].system_name == "gpu01" and seen["Eth1/3"].system_name == "gpu03"
    sobs = cabling._read_switch(
        cabling._named(lambda s, p: seen, names),
        "leaf-onyx",
        [c for c in planned if c.layer == "Ethernet"],
        names,
        [],
    )
    msgs = [
        r.message
        for r in cabling.compare([c for c in planned if c.b.node == "leaf-onyx"], [sobs], planned)
        if not r.ok
    ]
    assert msgs[:2] == [
        "leaf-onyx Eth1/1 has gpu02 mlx5_2, planned gpu01 mlx5_2",
        "leaf-onyx Eth1/2 has gpu01 mlx5_2, planned gpu02 mlx5_2",
    ]


def test_nvue_lldp_neighbor_table_reparses(rack, tmp_path):
    sw = NvueSwitch(
        "leaf-cumulus",
        [f"swp{n}" for n in range(1, 5)],
        tmp_path / "nv",
        rack["fab"] / "switches" / "leaf-cumulus.json",
    )
    sess = NvueSession(sw)
    out, _ = sess.handle("nv show interface swp3 lldp neighbor")
    rows = parse("nvue-lldp-neighbor", out).neighbors
    assert [(n.system_name, n.port_name) for n in rows] == [("gpu03", "enp170s0f1np1")]
    assert sess.handle("nv show interface swp9 lldp neighbor")[0].startswith("Error: The requested item")


def test_switch_port_down_removes_the_cable(rack):
    f = rack["fab"] / "switches" / "ib-sw1.json"
    data = json.loads(f.read_text())
    data["ports"]["33"]["link"] = "down"  # the ISL
    data["ports"]["5"]["link"] = "down"  # gpu03 mlx5_0
    f.write_text(json.dumps(data))
    bad = sorted(r.message for r in _ib_check(rack) if not r.ok)
    why = "(ibnetdiscover on gpu01), planned {}: cable missing or link down"
    assert bad == [f"gpu03 mlx5_0 has no neighbour {why.format('ib-sw1 5')}",
                   f"ib-sw1 33 has no neighbour {why.format('ib-spine1 1')}"]
    _rc, out, _ = _run("iblinkinfo")
    assert '      1   33[  ] ==(                Down/Disabled)==>             [  ] "" ( )' in out


def test_no_active_ib_port_is_the_tools_error(rack):
    hw = rack["hw"]
    for hca in hw["hcas"]:
        for p in hca["ports"]:
            p["phys_state"] = "Disabled"
    (fabricdisc.devstate.path(fabricdisc.devstate.HW_JSON)).write_text(json.dumps(hw))
    rc, out, err = _run("ibnetdiscover")
    assert rc == 255 and out == "" and "ibnetdiscover: iberror: failed: discover failed" in err


def test_lldpctl_refuses_formats_it_does_not_emulate(rack):
    assert _run("lldpctl", "-f", "json")[0] == 1
    assert _run("ibnetdiscover", "-p")[0] == 255


def test_swapped_cable_requests_are_checked(rack):
    with pytest.raises(faults.FaultError, match="different fabrics"):
        faults.inject("gpu01", "swapped-cable", ["ibp26s0", "enp170s0f0np0"], lab=rack["lab"])
    with pytest.raises(faults.FaultError, match="no cabled netdev 'eth9'"):
        faults.inject("gpu01", "swapped-cable", ["eth9", "ibp26s0"], lab=rack["lab"])
    with pytest.raises(faults.FaultError, match="two different ports"):
        faults.inject("gpu01", "swapped-cable", ["ibp26s0", "ibp26s0"], lab=rack["lab"])
    assert faults.active() == [] and not (rack["fab"] / fabricdisc.OVERRIDE).exists()


def test_discovery_tools_ship_where_the_real_ones_do(tmp_path):
    """ibnetdiscover/iblinkinfo come with infiniband-diags (emulated MLNX_OFED), lldpctl with the
    server image (lldpd), never inside an OFED package."""
    from fabricops_lab import hosts, ofed_repo

    packaged = ofed_repo.ofed_tools()
    assert {"ibnetdiscover", "iblinkinfo"} <= set(packaged["infiniband-diags"])
    assert not any("lldpctl" in tools_ for tools_ in packaged.values())
    hosts.install_emulated_software(tmp_path)
    wrapper = (tmp_path / "usr/sbin/lldpctl").read_text()
    assert 'main("lldpctl", sys.argv[1:])' in wrapper
    assert (tmp_path / "usr/sbin/lldpctl").stat().st_mode & 0o111
