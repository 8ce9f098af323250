"""Apply flows at the transport seam: dropped sessions, rejected commands, NVUE confirm/detach."""

from __future__ import annotations

import pytest

from fabricops.errors import FabricopsError
from fabricops.roce.resource import facts_from_onyx_config, get_roce_data
from fabricops.roce.runner import run
from fabricops.switch.transport import known_hosts_from_ssh_args

ROCE = {"lossless_priority": 3, "dscp": 26}
ROCE4 = {"lossless_priority": 4, "dscp": 34}


def _run(rack, **kw):
    kw.setdefault("roce", ROCE)
    ports = ["Eth1/1", "Eth1/2", "Eth1/3"] if rack.os == "onyx" else ["swp1", "swp2", "swp3"]
    kw.setdefault("ports", ports)
    return run(switch=rack.switch.name, os_name=rack.os, connector=rack.connect, **kw)


@pytest.mark.parametrize("after", [1, 2, "last"])
def test_onyx_session_drop_restores_previous_config(onyx_rack, after):
    _run(onyx_rack)
    saved = onyx_rack.switch.saved_path.read_text()
    before = onyx_rack.state()
    planned = _run(onyx_rack, roce=ROCE4, state="overridden", check_mode=True)["commands"]
    assert len(planned) >= 3
    onyx_rack.arm_drop(len(planned) if after == "last" else after)
    with pytest.raises(FabricopsError) as err:
        _run(onyx_rack, roce=ROCE4, state="overridden")
    msg = str(err.value)
    assert msg.startswith("leaf-onyx: step 'send' failed: the session dropped")
    assert "previous configuration was restored" in msg
    now = facts_from_onyx_config("\n".join(onyx_rack.state()))
    was = facts_from_onyx_config("\n".join(before))
    # every knob has a removal now (ETS: `no traffic-class N dcb ets`): nothing stays behind
    residue = {k: v for k, v in now.items() if k not in was}
    assert residue == {}
    assert {k: v for k, v in now.items() if k in was} == was
    assert onyx_rack.state() == before  # the whole running config, not only the RoCE knobs
    assert onyx_rack.switch.saved_path.read_text() == saved  # configuration write never sent
    assert "configuration write" not in onyx_rack.log[-1:]


def test_onyx_rejected_command_restores(onyx_rack, monkeypatch):
    _run(onyx_rack)
    before = onyx_rack.state()
    import fabricops.roce.resource as resource

    real = resource.compute
    calls = {"n": 0}

    def poisoned(*a, **kw):
        out = real(*a, **kw)
        calls["n"] += 1
        return [*out[:2], "traffic-class 9 bogus", *out[2:]] if calls["n"] == 1 and out else out

    monkeypatch.setattr("fabricops.roce.runner.compute", poisoned)
    with pytest.raises(FabricopsError, match=r"leaf-onyx: step 'send' failed: the switch rejected a command"):
        _run(onyx_rack, roce=ROCE4, state="overridden")
    assert onyx_rack.state() == before


def test_onyx_saves_only_after_success(onyx_rack):
    res = _run(onyx_rack)
    assert res["sent"][-1] == "configuration write"
    assert "priority 3 enable" in onyx_rack.switch.saved_path.read_text()
    # the saved file is the same text as the running configuration
    assert "qos trust L3" in onyx_rack.switch.saved_path.read_text()


@pytest.mark.parametrize("after", [1, 5])
def test_nvue_drop_while_staging_detaches(nvue_rack, after):
    _run(nvue_rack)
    applied = nvue_rack.state()
    nvue_rack.arm_drop(after)
    with pytest.raises(FabricopsError) as err:
        _run(nvue_rack, roce=ROCE4, state="overridden")
    assert str(err.value).startswith("leaf-cumulus: step 'stage' failed: the session dropped")
    assert "pending revision was detached" in str(err.value)
    assert nvue_rack.state() == applied and nvue_rack.switch.pending == nvue_rack.switch.applied


def test_nvue_drop_at_apply_rolls_back(nvue_rack):
    _run(nvue_rack)
    applied = nvue_rack.state()
    startup = nvue_rack.switch.startup_path.read_text()
    n = len(run(switch="x", os_name="cumulus", state="rendered", roce=ROCE4, ports=["swp1"])["commands"])
    staged = len(_run(nvue_rack, roce=ROCE4, ports=["swp1", "swp2", "swp3"], check_mode=True)["commands"])
    assert n
    nvue_rack.arm_drop(staged + 1)  # the apply itself is the last command before the drop
    with pytest.raises(FabricopsError) as err:
        _run(nvue_rack, roce=ROCE4)
    assert str(err.value).startswith("leaf-cumulus: step 'apply' failed")
    assert "rolled back" in str(err.value)
    assert nvue_rack.state() == applied
    assert nvue_rack.switch.startup_path.read_text() == startup


def test_nvue_flow_confirms_from_a_new_session_then_saves(nvue_rack):
    res = _run(nvue_rack)
    assert res["sent"][-3:] == [
        "nv config apply --confirm 120s -y",
        "nv config apply --confirm-yes",
        "nv config save",
    ]
    assert nvue_rack.sessions >= 2  # the reachability check is a new session
    assert nvue_rack.switch.confirm_deadline is None
    assert "switch-priority: '3'" in nvue_rack.switch.startup_path.read_text()


def test_nvue_empty_diff_detaches_and_reports_no_change(nvue_rack):
    _run(nvue_rack)
    # a command that changes nothing: the knob already holds the value in another spelling
    nvue_rack.switch.applied["qos"]["congestion-control"]["default-global"]["traffic-class"]["3"][
        "min-threshold"] = "150000"
    nvue_rack.switch.pending = __import__("copy").deepcopy(nvue_rack.switch.applied)
    res = _run(nvue_rack)
    assert res["commands"] == []  # 150000 == 150KB: same bytes, nothing to send


def test_nvue_refuses_a_foreign_pending_revision(nvue_rack):
    nvue_rack.connect().send_command("nv set system hostname other")
    with pytest.raises(FabricopsError, match="pending revision that is not ours"):
        _run(nvue_rack)
    res = _run(nvue_rack, discard_pending=True)
    assert res["sent"][0] == "nv config detach" and res["changed"]


def test_get_roce_data_uses_json_print_on_onyx(onyx_rack):
    data = get_roce_data(onyx_rack.connect(), "onyx", ["Eth1/2"])
    assert set(data) == {"running-config", "pfc", "qos", "ecn:Eth1/2"}
    assert data["pfc"].lstrip().startswith("[") and data["ecn:Eth1/2"].lstrip().startswith("[")
    assert "show interfaces ethernet 1/2 congestion-control | json-print" in onyx_rack.log


def test_known_hosts_from_ssh_args():
    args = "-o UserKnownHostsFile=/var/lib/lab/ssh/known_hosts -o StrictHostKeyChecking=yes"
    assert known_hosts_from_ssh_args(args) == "/var/lib/lab/ssh/known_hosts"
    assert known_hosts_from_ssh_args("-o StrictHostKeyChecking=yes") is None
    assert known_hosts_from_ssh_args(None) is None
