"""fabricops_roce.lossless: false (lossy RoCE, ECN only) end to end from one declaration.

The knob added to prove issue 16's change cost: one schema field; the hosts' PFC vector, both
switch platforms, verification, diagnosis, gathered and the emulated switches follow it.
"""

from __future__ import annotations

import pytest
from unit.switch.test_states import _ports, _run

from fabricops.diagnose import Context, context_from_hostvars
from fabricops.hostqos.plan import host_plan
from fabricops.model.roce import RoceConfigError, validate
from fabricops.roce.switchspec import switch_spec, want_facts
from fabricops.verify.switchstate import port_problems

LOSSY = {"lossless": False, "lossless_priority": 3, "dscp": 26}
HCAS = [{"name": "mlx5_0", "ports": [{"port": 1, "link_layer": "Ethernet", "netdev": "enp1s0f0np0"}]}]


def test_lossy_turns_pfc_off_on_the_hosts_and_keeps_dcqcn():
    cfg = validate(LOSSY)
    assert cfg.lossless is False and cfg.pfc_vector == [0] * 8
    assert validate({}).lossless is True and validate({}).pfc_vector == [0, 0, 0, 1, 0, 0, 0, 0]
    assert cfg.to_data()["lossless"] is False
    port = host_plan(LOSSY, HCAS)["ports"][0]
    assert [int(v) for v in port["mlnx_qos"]["pfc"]] == [0] * 8
    assert port["sysfs"]["ecn_np"][3] is True and port["sysfs"]["ecn_rp"][3] is True  # DCQCN stays


@pytest.mark.parametrize("value", ["false", 0, None, "no"])
def test_lossless_takes_a_boolean_only(value):
    with pytest.raises(RoceConfigError, match="lossless"):
        validate({"lossless": value})


@pytest.mark.parametrize("os_name", ["onyx", "cumulus"])
def test_lossy_switches_have_ecn_and_no_pfc(os_name):
    ports = ["Eth1/1"] if os_name == "onyx" else ["swp1"]
    lossy = want_facts(switch_spec(os_name, LOSSY, ports))
    lossless = want_facts(switch_spec(os_name, {}, ports))
    pfc_knobs = {"pfc", "pfc_priority", "pfc_watchdog", "port_pfc", "port_pfc_wd"}
    assert {k[0] for k in lossless} & pfc_knobs
    assert not {k[0] for k in lossy} & pfc_knobs
    ecn = {k: v for k, v in lossless.items() if k[0] in ("port_ecn", "ecn_enable", "ecn_min", "ecn_max")}
    assert ecn and all(lossy[k] == v for k, v in ecn.items())
    if os_name == "cumulus":
        assert lossy[("roce_mode",)] == "lossy" and lossless[("roce_mode",)] == "lossless"


def test_verify_checks_a_lossy_port_against_the_lossy_definition():
    have = dict(want_facts(switch_spec("cumulus", LOSSY, ["swp1"])))
    assert port_problems("cumulus", have, LOSSY, "swp1") == []
    problems = port_problems("cumulus", have, {}, "swp1")  # the lossless definition wants PFC on 3
    assert any("3" in p for p in problems)


@pytest.mark.parametrize("state", ["replaced", "overridden"])
def test_emulated_switch_goes_lossy_and_stays(rack, state):
    _run(rack, state="merged")
    view = rack.switch.roce_view(rack.switch.applied) if rack.os == "cumulus" else None
    moved = _run(rack, state=state, roce=LOSSY)
    assert moved["changed"]
    if rack.os == "onyx":
        assert "no dcb priority-flow-control priority 3 enable" in moved["commands"]
        config = "\n".join(rack.state())
        assert "priority-flow-control" not in config and "pfc-wd" not in config
        assert "congestion-control ecn minimum-absolute 150 maximum-absolute 1500" in config
    else:
        assert view["pfc"] == [3]
        assert "nv set qos roce mode lossy" in moved["commands"]
        assert rack.switch.roce_view(rack.switch.applied)["pfc"] == []
    rack.log.clear()
    again = _run(rack, state=state, roce=LOSSY)
    assert again["changed"] is False and again["commands"] == []
    gathered = _run(rack, state="gathered", ports=_ports(rack, 4))["gathered"]
    if rack.os == "cumulus":
        assert gathered["roce"]["lossless"] is False and gathered["roce"]["lossless_priority"] == 3


def test_diagnose_reads_the_knob_and_wants_pfc_off():
    from unit import test_diagnose as td

    ctx = context_from_hostvars({"fabricops_roce": LOSSY})
    assert ctx.lossless is False and ctx.lossless_priority == 3
    assert context_from_hostvars({"fabricops_roce": {}}).lossless is True
    assert Context().lossless is True
    found = td.d.analyse({"h": td.evidence()}, ctx)  # the host's mlnx_qos has PFC on priority 3
    assert td.kinds(found) == [("pfc_mismatch", "mlx5_2/1")]
    assert "wants no PFC (lossy RoCE)" in found[0].evidence[0] and "lossy RoCE fabric" in found[0].cause
    pfc5 = td.read_fixture("mlnx_qos", "default_priority_strict.txt")  # a real capture: PFC on 5
    found = td.d.analyse({"h": td.evidence(**{"mlnx_qos:enp170s0f0np0": td.ok(pfc5)})}, ctx)
    assert td.kinds(found) == [("pfc_mismatch", "mlx5_2/1")] and "PFC on [5]" in found[0].evidence[0]
    # the same capture with PFC off on every priority (no public capture prints that line)
    line = "enabled     0   0   0   0   0   1   0   0"
    assert line in pfc5
    no_pfc = td.ok(pfc5.replace(line, "enabled     0   0   0   0   0   0   0   0"))
    assert td.d.analyse({"h": td.evidence(**{"mlnx_qos:enp170s0f0np0": no_pfc})}, ctx) == []
