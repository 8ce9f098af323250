"""The cabling as built, read through verify's cabling readers: ibnetdiscover for InfiniBand (a cable
swapped in the fabric but not in the plan moves the hosts), lldpctl + the switches' LLDP for RoCE,
and failing closed when the fabric cannot be read."""

from __future__ import annotations

import pytest
from sched_data import LAYERS_TWO_TIER, FakeRun, hostvars_for, ibnetdiscover, parse, swap, two_tier

from fabricops.errors import CouldNotRun
from fabricops.sched import sources
from fabricops.sched.topology import build_tree, render_tree, select
from fabricops.verify.cabling import End, Peer


def _tree(cabling, fabric="infiniband"):
    sel = select(cabling, fabric)
    return render_tree(build_tree(sel), sel.describe())


def test_ib_as_built_follows_ibnetdiscover_not_the_plan():
    data = two_tier(16)
    hv = hostvars_for(data)
    built = swap(data["fabricops_cabling"], "gpu01", "gpu02")  # the fabric, not the plan
    run = FakeRun(ibnetdiscover(built, data["fabricops_switch_links"], LAYERS_TWO_TIER))
    cab = sources.as_built(run, sorted(hv), hv, LAYERS_TWO_TIER)
    assert run.calls == [("gpu01", "ibnetdiscover")]  # one read for the whole subnet
    text = _tree(cab)
    leaves, uppers = parse(text)
    assert leaves["ib-leaf1"] == ["gpu02", "gpu05", "gpu09", "gpu13"]
    assert leaves["ib-leaf2"] == ["gpu01", "gpu06", "gpu10", "gpu14"]
    assert sorted(uppers) == ["ib-spine1", "ib-spine2"] and len(leaves) == 4
    assert "cabling as built (ibnetdiscover)" in text
    # the plan itself still says otherwise
    planned = parse(_tree(sources.plan(hv, sorted(hv), LAYERS_TWO_TIER)))[0]
    assert planned["ib-leaf1"] == ["gpu01", "gpu05", "gpu09", "gpu13"]


def test_a_host_the_fabric_does_not_show_is_left_out_with_a_note():
    data = two_tier(8)
    hv = hostvars_for(data)
    shown = [c for c in data["fabricops_cabling"] if c["host"] != "gpu08"]
    run = FakeRun(ibnetdiscover(shown, data["fabricops_switch_links"], LAYERS_TWO_TIER))
    cab = sources.as_built(run, sorted(hv), hv, LAYERS_TWO_TIER)
    assert "gpu08" not in {p.host for p in cab.ports}
    assert any(n.startswith("gpu08") for n in cab.notes)


def test_a_fabric_that_shows_none_of_the_plan_is_could_not_run():
    data = two_tier(4)
    hv = hostvars_for(data)
    other = [{**c, "host": c["host"].replace("gpu", "node")} for c in data["fabricops_cabling"]]
    run = FakeRun(ibnetdiscover(other, data["fabricops_switch_links"], LAYERS_TWO_TIER))
    with pytest.raises(CouldNotRun, match="reported none of the planned host ports"):
        sources.as_built(run, sorted(hv), hv, LAYERS_TWO_TIER)


def test_ib_read_that_fails_on_two_hosts_is_could_not_run():
    data = two_tier(8)
    hv = hostvars_for(data)
    bad = {"rc": 1, "stdout": "", "stderr": "ibnetdiscover: iberror: failed: discover failed"}
    run = FakeRun(answers={("gpu01", "ibnetdiscover"): bad, ("gpu02", "ibnetdiscover"): bad})
    with pytest.raises(CouldNotRun, match=r"cannot read the cabling as built: .*discover failed"):
        sources.as_built(run, sorted(hv), hv, LAYERS_TWO_TIER)


def _lldp_kv(cabling):
    out: dict[str, str] = {}
    for c in cabling:
        if c["netdev"].startswith("enp"):
            out[c["host"]] = out.get(c["host"], "") + (
                f"lldp.{c['netdev']}.chassis.name={c['switch']}\nlldp.{c['netdev']}.port.ifname={c['switch_port']}\n"
            )
    return out


def test_roce_as_built_reads_lldpctl_and_the_switches():
    data = two_tier(8)
    hv = hostvars_for(data)
    links = data["fabricops_switch_links"]

    def switch_lldp(switch, ports):
        seen = {}
        for ln in links:
            for (s, p), (o, op) in (
                ((ln["switch_a"], ln["port_a"]), (ln["switch_b"], ln["port_b"])),
                ((ln["switch_b"], ln["port_b"]), (ln["switch_a"], ln["port_a"])),
            ):
                if s == switch:
                    seen[p] = Peer(End(o, op))
        return {p: seen.get(p) for p in ports}

    built = swap(data["fabricops_cabling"], "gpu03", "gpu04", netdev="enp170s0f0np0")
    run = FakeRun(lldp=_lldp_kv(built))
    cab = sources.as_built(run, sorted(hv), hv, LAYERS_TWO_TIER, fabric="roce", switch_lldp=switch_lldp)
    leaves, uppers = parse(_tree(cab, "roce"))
    assert leaves["leaf3"] == ["gpu04", "gpu07"] and leaves["leaf4"] == ["gpu03", "gpu08"]
    assert uppers == {
        "spine1": ["leaf1", "leaf2", "leaf3", "leaf4"],
        "spine2": ["leaf1", "leaf2", "leaf3", "leaf4"],
    }
    assert "lldpctl" in cab.detail


def test_roce_as_built_without_switch_access_is_could_not_run():
    data = two_tier(4)
    hv = hostvars_for(data)
    run = FakeRun(lldp=_lldp_kv(data["fabricops_cabling"]))
    with pytest.raises(CouldNotRun, match=r"switches' LLDP tables.*--from plan"):
        sources.as_built(run, sorted(hv), hv, LAYERS_TWO_TIER, fabric="roce")
