"""ipoib on the emulated rack (issue 4, "Done when"), on gpu01 (ifupdown, no NetworkManager).

A plan on the host's two IB netdevs (one datagram with an explicit MTU, one connected on an HCA
name) converges a deconfigured host with ``ipoib_allow_restart``; mode, MTU and address are live;
a second run and ``--check`` change nothing; a mode written behind the role's back is reported by
``--check`` and not fixed; MTU 70000 in datagram mode fails before any change.

Lab limit: the IB netdevs are veths, not IPoIB devices, so P_Key children (``create_child``)
cannot be created; the P_Key plan and refusals are unit-tested (tests/unit/test_ipoib_plan.py)
and here only rendered in check mode.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json

import pytest

pytestmark = pytest.mark.lab

HOST = "gpu01"
PLAYBOOK = "playbooks/ipoib.yml"
STANZAS = "/etc/network/interfaces.d"


def ib_netdevs(lab: dict) -> dict[str, str]:
    """HCA -> netdev of the host's InfiniBand ports, from the lab's topology."""
    host = next(h for h in lab["topology"]["hosts"] if h["name"] == HOST)
    return {hca["name"]: p["netdev"] for hca in host["hcas"] for p in hca["ports"]
            if p["link_layer"] == "InfiniBand"}


@pytest.fixture(scope="module")
def plan(lab, tmp_path_factory) -> dict:
    (_, nd0), (hca1, nd1) = sorted(ib_netdevs(lab).items())
    index = next(h["index"] for h in lab["topology"]["hosts"] if h["name"] == HOST)
    data = {
        "ipoib_plan": {"networks": {
            nd0: {"prefix": "198.18.0.0/16", "mtu": 2044},
            "storage": {"device": hca1, "prefix": "198.19.0.0/24", "mode": "connected"},
        }},
        "ipoib_host_index": index,
        "ipoib_allow_restart": True,
    }
    path = tmp_path_factory.mktemp("ipoib") / "vars.json"
    path.write_text(json.dumps(data))
    def addr(net: str) -> str:
        return f"{ipaddress.ip_network(net)[index]}/{net.split('/')[1]}"

    want = {
        nd0: {"mode": "datagram", "mtu": 2044, "address": addr("198.18.0.0/16")},
        nd1: {"mode": "connected", "mtu": 65520, "address": addr("198.19.0.0/24")},
    }
    return {"file": str(path), "want": want}


def play(ansible_playbook, plan: dict, *args: str):
    return ansible_playbook(PLAYBOOK, "--limit", HOST, "-e", f"@{plan['file']}", *args)


def stats(run, ok: bool = True) -> dict:
    assert HOST in run.hosts, f"no PLAY RECAP for {HOST}:\n{run.stdout[-3000:]}\n{run.stderr[-2000:]}"
    s = run.hosts[HOST]
    if ok:
        assert run.rc == 0 and s["failures"] == 0, run.stdout[-4000:]
    return s


def live(ssh, netdev: str) -> dict:
    link = json.loads(ssh(HOST, f"ip -j addr show dev {netdev}").stdout)[0]
    v4 = [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if a["family"] == "inet"]
    return {
        "mode": ssh(HOST, f"cat /sys/class/net/{netdev}/mode").stdout.strip(),
        "mtu": link["mtu"],
        "address": v4[0] if len(v4) == 1 else v4 or None,
        "up": "UP" in link["flags"],
    }


def host_state(ssh, plan) -> str:
    parts = [ssh(HOST, f"ls -l --time-style=+ {STANZAS}; cat {STANZAS}/*").stdout]
    parts += [json.dumps(live(ssh, nd), sort_keys=True) for nd in plan["want"]]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@pytest.fixture(scope="module")
def converged(lab, ssh, ansible_playbook, plan):
    """Deconfigure the IB netdevs (what a fresh host has), then converge with consent."""
    for nd in plan["want"]:
        ssh(HOST, f"ifdown --force {nd} >/dev/null 2>&1; rm -f {STANZAS}/fabricops-ipoib-{nd}; "
                  f"ip addr flush dev {nd}; ip link set dev {nd} down mtu 1500; "
                  f"echo datagram > /sys/class/net/{nd}/mode")
    run = play(ansible_playbook, plan)
    assert stats(run)["changed"] > 0
    return run


def test_converge_applies_mode_mtu_and_address(converged, ssh, plan):
    for nd, want in plan["want"].items():
        assert live(ssh, nd) == {**want, "up": True}, nd
        stanza = ssh(HOST, f"cat {STANZAS}/fabricops-ipoib-{nd}").stdout
        assert f"pre-up echo {want['mode']} > /sys/class/net/{nd}/mode" in stanza
        assert f"    address {want['address']}" in stanza and f"    mtu {want['mtu']}" in stanza


def test_second_run_changes_nothing(converged, ansible_playbook, plan):
    assert stats(play(ansible_playbook, plan))["changed"] == 0


def test_check_on_converged_host_changes_nothing(converged, ansible_playbook, plan):
    assert stats(play(ansible_playbook, plan, "--check", "--diff"))["changed"] == 0


def test_check_reports_mode_drift_without_fixing_it(converged, ssh, ansible_playbook, plan):
    nd = next(iter(plan["want"]))  # the datagram interface
    ssh(HOST, f"echo connected > /sys/class/net/{nd}/mode")
    try:
        run = play(ansible_playbook, plan, "--check", "--diff")
        assert stats(run)["changed"] == 1
        assert f"would re-activate (ipoib_allow_restart): {nd}: mode connected -> datagram" in run.stdout
        # Without consent the same drift is a reported pending restart, not a change.
        run = play(ansible_playbook, plan, "--check", "-e", "ipoib_allow_restart=false")
        assert stats(run)["changed"] == 0
        assert f"restart pending (set ipoib_allow_restart: true to apply): {nd}: mode connected -> datagram" \
            in run.stdout
        assert live(ssh, nd)["mode"] == "connected"  # reported, not fixed
    finally:
        stats(play(ansible_playbook, plan))
    assert live(ssh, nd)["mode"] == "datagram"


def test_mtu_70000_in_datagram_mode_fails_before_any_change(converged, ssh, ansible_playbook, plan):
    nd = next(iter(plan["want"]))
    before = host_state(ssh, plan)
    run = play(ansible_playbook, plan, "-e", "ipoib_mtu=70000", "-e", f'{{"ipoib_plan": {{"networks": '
               f'{{"{nd}": "198.18.0.0/16"}}}}}}')
    s = stats(run, ok=False)
    assert run.rc != 0 and s["failures"] == 1 and s["changed"] == 0
    reason = (f"{HOST} {nd}: MTU 70000 is too big for datagram mode (at most 4092, IB MTU 4096 - 4); "
              "lower the MTU or use connected mode")
    assert f'"msg": "{reason}"' in run.stdout, run.stdout[-3000:]
    assert "Write the ifupdown stanzas" not in run.stdout
    assert host_state(ssh, plan) == before


def test_pkey_child_is_planned_in_check_mode_only(converged, ssh, ansible_playbook, plan):
    """The lab cannot create P_Key children (veths); check mode shows the stanza it would write."""
    nd = next(iter(plan["want"]))
    before = host_state(ssh, plan)
    extra = {"ipoib_plan": {"networks": {"pk": {"device": nd, "prefix": "198.20.0.0/24", "pkey": "0x0010"}}}}
    run = play(ansible_playbook, plan, "--check", "--diff", "-e", json.dumps(extra))
    stats(run)
    stanza = f"pre-up [ -e /sys/class/net/{nd}.8010 ] || echo 0x8010 > /sys/class/net/{nd}/create_child"
    assert stanza in run.stdout
    assert f"would re-activate (ipoib_allow_restart): {nd}.8010: absent" in run.stdout
    assert host_state(ssh, plan) == before
