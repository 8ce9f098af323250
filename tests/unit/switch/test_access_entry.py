"""verify and diagnose reach a switch through the roce_switch role's one access function.

``fabricops.switch.access.switch_connection(hostvars, inventory=True)``: the password from
$FABRICOPS_SWITCH_PASSWORD, the OS from ``ansible_network_os``, ``roce_switch_known_hosts``, the
same error sentences. The session itself is the lab's Onyx engine (conftest's ``Rack``); only the
SSH login (``transport.connect``) is replaced, after the access was resolved.
"""

from __future__ import annotations

import pytest

from fabricops.diagnose import switch_states
from fabricops.roce.runner import run
from fabricops.switch import transport
from fabricops.switch.access import SwitchAccessError, switch_connection, switch_os
from fabricops.verify.switchstate import SwitchReader

ENV_PASSWORD = "env-Pw-7731"
CABLE = [{"host": "gpu01", "switch": "leaf-onyx", "switch_port": "Eth1/1"}]


class _Fabric:
    def __init__(self, hv):
        self.hv = hv

    def hostvars(self, name):
        return dict(self.hv) if name == "leaf-onyx" else {}


@pytest.fixture
def onyx(onyx_rack, tmp_path, monkeypatch):
    run(switch="leaf-onyx", os_name="onyx", state="merged", roce={}, ports=["Eth1/1"],
        connector=onyx_rack.connect)
    kh = tmp_path / "known_hosts"
    kh.write_text("[127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3a\n")
    seen = []

    def connect(access, *a, **kw):
        seen.append(access)
        return onyx_rack.connect()

    monkeypatch.setattr(transport, "connect", connect)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("FABRICOPS_SWITCH_PASSWORD", ENV_PASSWORD)
    hv = {
        "inventory_hostname": "leaf-onyx",
        "ansible_host": "127.0.0.1",
        "ansible_port": 2222,
        "ansible_user": "admin",
        "ansible_network_os": "mellanox.onyx.onyx",  # no fabricops_switch_os
        "roce_switch_known_hosts": str(kh),
        "fabricops_roce": {"lossless_priority": 3},
    }
    return {"hv": hv, "seen": seen, "kh": kh, "rack": onyx_rack}


def _check_access(access, kh):
    assert access.os_name == "onyx" and access.host == "127.0.0.1" and access.port == 2222
    assert access.password == ENV_PASSWORD and access.sources["password"] == "$FABRICOPS_SWITCH_PASSWORD"
    assert access.known_hosts == str(kh)
    assert ENV_PASSWORD not in repr(access)


def test_verify_and_diagnose_use_env_password_and_ansible_network_os(onyx):
    problems = SwitchReader(lambda name: onyx["hv"], None)("leaf-onyx", ["Eth1/1"])
    assert problems == {"Eth1/1": []}  # read, and as the role configured it
    states, notes = switch_states(_Fabric(onyx["hv"]), CABLE, ["gpu01"], 3)
    assert notes == [] and states["leaf-onyx"]["pfc_priorities"] == [3]
    assert states["leaf-onyx"]["ports"]["Eth1/1"] == {"pfc_priorities": [3], "ecn": True}
    assert len(onyx["seen"]) == 2
    for access in onyx["seen"]:
        _check_access(access, onyx["kh"])
    # the role's action plugin resolves the same access from the same variables
    _check_access(switch_connection(onyx["hv"], switch="leaf-onyx", render=lambda v: v), onyx["kh"])


@pytest.mark.parametrize(
    ("change", "sentence"),
    [
        ({"roce_switch_known_hosts": "/nonexistent/known_hosts"},
         "no known_hosts file (/nonexistent/known_hosts)"),
        ({"ansible_user": None}, "no user; set ansible_user."),
        ({"ansible_port": "ssh"}, "ansible_port 'ssh' is not a TCP port."),
    ],
)
def test_verify_and_diagnose_fail_with_the_same_sentence(onyx, change, sentence):
    hv = {k: v for k, v in {**onyx["hv"], **change}.items() if v is not None}
    with pytest.raises(SwitchAccessError) as err:
        SwitchReader(lambda name: hv, {})("leaf-onyx", ["Eth1/1"])
    assert sentence in str(err.value) and str(err.value).startswith("leaf-onyx: step 'connect' failed:")
    states, notes = switch_states(_Fabric(hv), CABLE, ["gpu01"], 3)
    assert states == {} and notes == [f"switch leaf-onyx: state not read ({err.value})"]
    assert onyx["seen"] == []  # nothing connected


def test_no_credentials_names_the_env_variable_everywhere(onyx, monkeypatch):
    monkeypatch.delenv("FABRICOPS_SWITCH_PASSWORD")
    with pytest.raises(SwitchAccessError, match="export FABRICOPS_SWITCH_PASSWORD"):
        SwitchReader(lambda name: onyx["hv"], {})("leaf-onyx", ["Eth1/1"])
    _states, notes = switch_states(_Fabric(onyx["hv"]), CABLE, ["gpu01"], 3)
    assert "export FABRICOPS_SWITCH_PASSWORD" in notes[0]


def test_inline_unsafe_password_wins_over_env(onyx):
    hv = dict(onyx["hv"], roce_switch_password={"__ansible_unsafe": "Pw{{not-a-template}}"})
    switch_states(_Fabric(hv), CABLE, ["gpu01"], 3)
    assert onyx["seen"][0].password == "Pw{{not-a-template}}"
    assert onyx["seen"][0].sources["password"] == "roce_switch_password"


@pytest.mark.parametrize(
    ("hv", "want"),
    [
        ({"fabricops_switch_os": "cumulus", "ansible_network_os": "onyx"}, "cumulus"),
        ({"ansible_network_os": "nvidia.nvue.nvue"}, "cumulus"),
        ({"ansible_network_os": "mellanox.onyx.onyx"}, "onyx"),
        ({"ansible_network_os": "mlnx-os-ib"}, None),  # an InfiniBand switch: not read, not an error
        ({}, None),
    ],
)
def test_switch_os_is_the_access_resolution(hv, want):
    assert switch_os(hv) == want


def test_verify_checks_the_switch_against_its_roce_switch_roce(onyx):
    """The switch was configured for priority 3; an inventory whose roce_switch_roce says 4 makes
    verify name the missing PFC priority (what is verified is what the role was told to apply)."""
    hv = dict(onyx["hv"], roce_switch_roce={"lossless_priority": 4, "dscp": 34})
    problems = SwitchReader(lambda name: hv, {"lossless_priority": 3})("leaf-onyx", ["Eth1/1"])
    assert "PFC off on priority 4 switch-wide (fabricops_roce.lossless_priority)" in problems["Eth1/1"]
