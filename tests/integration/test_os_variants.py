"""The ipoib role on a netplan host (issue 37, "Done when"): gpu03 is the lab's `netplan` variant,
Ubuntu Server's network stack built from Debian's packages (netplan.io over systemd-networkd, neither
ifupdown nor NetworkManager; docs/lab-fidelity.md, "Host variants").

The role chooses its netplan backend from the host's own reads, writes one netplan file that
`netplan generate` validated, applies it with `netplan apply` on consent, and systemd-networkd puts
the addresses and MTU on the links. A second run and check mode change nothing; `fabricops drift`
names a hand edit of the file without touching the host, and ``--fix`` puts it back. After a restart
the addresses come back from networkd at boot, without a playbook. site.yml and `fabricops verify`
across the whole rack, this host included, are test_verify.py's.
"""

from __future__ import annotations

import json
import time

import pytest
from labtools import fabricops_drift

from fabricops_lab import rack

pytestmark = pytest.mark.lab

HOST = "gpu03"
PLAYBOOK = "playbooks/ipoib.yml"
CONSENT = ["-e", "ipoib_allow_restart=true"]
IPOIB_FILE = "/etc/netplan/60-fabricops-ipoib.yaml"
#: the plan's addresses of gpu03 (inventories/lab: one /16 per IB port, host index 3) and the MTU of
#: datagram mode on a 4K IB MTU
PLANNED = {"ibp26s0": "198.18.0.3/16", "ibp60s0": "198.19.0.3/16"}
MTU = "4092"


def _live(ssh) -> dict[str, tuple[str, str]]:
    out = json.loads(ssh(HOST, "ip -j addr show").stdout)
    return {
        link["ifname"]: (
            str(link["mtu"]),
            ",".join(
                f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if a["family"] == "inet"
            ),
        )
        for link in out
        if link["ifname"] in PLANNED
    }


def _drift(*args: str, json_path=None) -> tuple[int, str, dict | None]:
    return fabricops_drift("--limit", HOST, "--playbook", PLAYBOOK, *args, json_path=json_path)


@pytest.fixture(scope="module")
def converged(ansible_playbook):
    run = ansible_playbook(PLAYBOOK, "--limit", HOST, *CONSENT)
    assert run.rc == 0, run.stdout[-3000:]
    return run


def test_the_netplan_host_runs_ubuntu_servers_network_stack(ssh):
    probe = ssh(HOST, "systemctl is-active systemd-networkd NetworkManager; "
                      "command -v netplan ifup nmcli; test -e /etc/network/interfaces; echo $?", check=False)
    lines = probe.stdout.split()
    assert lines[:2] == ["active", "inactive"], probe.stdout  # NetworkManager: no such unit
    assert "/usr/sbin/netplan" in lines and not any(x.endswith(("/ifup", "/nmcli")) for x in lines)
    assert lines[-1] == "1"  # no /etc/network/interfaces


def test_ipoib_is_written_by_netplan_and_applied_by_networkd(converged, ssh):
    assert "Apply the netplan configuration" in converged.stdout, converged.stdout[-3000:]
    stat = ssh(HOST, f"stat -c %a {IPOIB_FILE}").stdout.strip()
    assert stat == "600"
    text = ssh(HOST, f"cat {IPOIB_FILE}").stdout
    for netdev, cidr in PLANNED.items():
        assert f"{netdev}:" in text and cidr in text
    assert _live(ssh) == {n: (MTU, cidr) for n, cidr in PLANNED.items()}
    status = ssh(HOST, "networkctl status ibp26s0").stdout
    assert "/run/systemd/network/10-netplan-ibp26s0.network" in status, status
    # nothing from the other backends
    other = ssh(HOST, "ls /etc/network/interfaces.d /etc/NetworkManager 2>/dev/null | wc -l").stdout
    assert other.strip() == "0"


def test_a_second_run_and_check_mode_change_nothing(converged, ansible_playbook):
    again = ansible_playbook(PLAYBOOK, "--limit", HOST, *CONSENT)
    assert again.rc == 0 and again.hosts[HOST]["changed"] == 0, again.changed_tasks
    check = ansible_playbook(PLAYBOOK, "--limit", HOST, "--check", "--diff")
    assert check.rc == 0 and check.hosts[HOST]["changed"] == 0, check.changed_tasks


def test_drift_names_a_hand_edit_of_the_netplan_file_and_fix_puts_it_back(converged, ssh, tmp_path):
    # (a clean drift first would repeat what check mode's changed=0 above shows: 10 s of CI)
    ssh(HOST, f"sed -i 's#198.18.0.3/16#198.18.0.203/16#' {IPOIB_FILE}")
    before = ssh(HOST, f"sha256sum {IPOIB_FILE}; ip -br addr").stdout
    rc, out, data = _drift(json_path=tmp_path / "drift.json")
    assert rc == 3, out  # EXIT_DRIFT (docs/cli.md)
    assert ssh(HOST, f"sha256sum {IPOIB_FILE}; ip -br addr").stdout == before, "drift changed the host"
    items = [i for i in data["items"] if i["host"] == HOST]
    assert items and any("netplan" in i["task"] for i in items), data["items"]
    assert "198.18.0.203/16" in json.dumps(items)  # the diff shows the hand-made value
    rc, out, _ = _drift("--fix", *CONSENT)
    assert rc == 0, out
    assert "198.18.0.203" not in ssh(HOST, f"cat {IPOIB_FILE}").stdout
    assert _live(ssh) == {n: (MTU, cidr) for n, cidr in PLANNED.items()}


def test_a_restarted_netplan_host_gets_its_ipoib_addresses_from_networkd_at_boot(converged, ssh):
    ssh(HOST, "systemctl reboot", check=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and ssh(HOST, "true", check=False).returncode == 0:
        time.sleep(0.5)
    rack.up(None)  # the lab restarts the host that is down (its disk kept, /dev and /run fresh)
    deadline = time.monotonic() + 30
    live = {}
    while time.monotonic() < deadline:
        live = _live(ssh)
        if live == {n: (MTU, cidr) for n, cidr in PLANNED.items()}:
            break
        time.sleep(0.5)
    assert live == {n: (MTU, cidr) for n, cidr in PLANNED.items()}
