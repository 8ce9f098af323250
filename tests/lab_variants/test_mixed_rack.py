"""site.yml, idempotence, drift and verify on a rack that mixes the host variants (issue 37, "Done when").

- The first run converges on every variant; each host's ipoib role picks its own backend from the
  host's reads: ifupdown on gpu01/gpu02, netplan on gpu03, NetworkManager on gpu04.
- A second run and ``--check`` report changed=0 on every host.
- ``fabricops drift`` names a hand edit of the IPoIB configuration on each variant, without changing
  anything.
- ``fabricops verify`` passes on the ifupdown and netplan hosts.
- gpu04: the real NetworkManager loads and parses the role's keyfiles (type, MTU, transport mode and
  address read back by nmcli) but refuses to activate an InfiniBand profile on the lab's IPoIB links,
  which are veths (docs/lab-fidelity.md, "Host variants"): so its IPoIB is converged without the
  restart consent, and verify names its IPoIB check, the one thing the lab cannot show.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from integration.conftest import REPO, ansible_env, ansible_playbook, ssh

pytestmark = pytest.mark.lab

FABRICOPS = str(Path(sys.executable).with_name("fabricops"))
HOSTS = ("gpu01", "gpu02", "gpu03", "gpu04")
NM_HOST = "gpu04"
ACTIVE = "gpu01,gpu02,gpu03"
#: site.yml's first run on a new rack, less ipoib's restart consent (given below where it can apply)
#: and its verification play (gpu04's IPoIB cannot be live: fabricops verify is run on its own below)
SITE = ("-e", "mlnx_ofed_allow_restart=true", "-e", "fabricops_serial=100%",
        "-e", "fabricops_switch_serial=100%", "--skip-tags", "verify")
#: each variant's IPoIB configuration file as the ipoib role writes it (ibp26s0's)
WRITTEN = {
    "gpu01": "/etc/network/interfaces.d/fabricops-ipoib-ibp26s0",
    "gpu03": "/etc/netplan/60-fabricops-ipoib.yaml",
    "gpu04": "/etc/NetworkManager/system-connections/fabricops-ipoib-ibp26s0.nmconnection",
}


def fabricops(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FABRICOPS, *args], cwd=REPO, env=ansible_env(), capture_output=True, text=True,
                          timeout=900)


@pytest.fixture(scope="module")
def converged(variants_lab):
    site = ansible_playbook("site.yml", *SITE, timeout=1200)
    assert site.rc == 0, site.stdout[-4000:]
    ipoib = ansible_playbook("playbooks/ipoib.yml", "--limit", ACTIVE, "-e", "ipoib_allow_restart=true")
    assert ipoib.rc == 0, ipoib.stdout[-4000:]
    return site, ipoib


def test_each_host_converges_with_its_own_backend(converged):
    site, _ipoib = converged
    for h in HOSTS:
        assert site.hosts[h]["failures"] == 0 and site.hosts[h]["unreachable"] == 0, (h, site.hosts[h])
    out = site.stdout
    assert "configure_ifupdown.yml for gpu01, gpu02" in out
    assert "configure_netplan.yml for gpu03" in out
    assert "configure_networkmanager.yml for gpu04" in out
    assert "restart pending (set ipoib_allow_restart: true to apply): ibp26s0" in out  # gpu04's report
    for h in ("gpu01", "gpu02", "gpu03"):
        addr = ssh(h, "ip -o -4 addr show dev ibp26s0").stdout
        assert f"198.18.0.{h[-1]}/16" in addr, (h, addr)


def test_a_second_run_and_check_mode_change_nothing_on_any_variant(converged):
    again = ansible_playbook("site.yml", *SITE, timeout=1200)
    assert again.rc == 0
    assert {h: again.hosts[h]["changed"] for h in HOSTS} == dict.fromkeys(HOSTS, 0), again.changed_tasks
    check = ansible_playbook("site.yml", "--check", "--skip-tags", "verify", timeout=1200)
    assert check.rc == 0
    assert {h: check.hosts[h]["changed"] for h in HOSTS} == dict.fromkeys(HOSTS, 0), check.changed_tasks


def test_networkmanager_parses_the_keyfiles_and_refuses_them_on_a_non_infiniband_link(converged):
    fields = ("connection.type,connection.interface-name,infiniband.mtu,infiniband.transport-mode,"
              "ipv4.addresses")
    shown = ssh(NM_HOST, f"nmcli -g {fields} connection show fabricops-ipoib-ibp26s0").stdout.split("\n")
    assert shown[:5] == ["infiniband", "ibp26s0", "4092", "datagram", "198.18.0.4/16"], shown
    up = ssh(NM_HOST, "nmcli connection up id fabricops-ipoib-ibp26s0", check=False)
    assert up.returncode == 4 and "No suitable device found for this connection" in up.stderr, up.stderr


def test_drift_names_a_hand_edit_on_each_variant_and_changes_nothing(converged, tmp_path):
    edits = {
        "gpu01": f"sed -i 's#198.18.0.1/16#198.18.0.201/16#' {WRITTEN['gpu01']}",
        "gpu03": f"sed -i 's#198.18.0.3/16#198.18.0.203/16#' {WRITTEN['gpu03']}",
        "gpu04": f"sed -i 's#^mtu=4092#mtu=2044#' {WRITTEN['gpu04']}",
    }
    try:
        for h, cmd in edits.items():
            ssh(h, cmd)
        before = {h: ssh(h, f"sha256sum {WRITTEN[h]}").stdout for h in edits}
        report = tmp_path / "drift.json"
        p = fabricops("drift", "--playbook", "playbooks/ipoib.yml", "--json", str(report))
        assert p.returncode == 3, p.stdout + p.stderr  # EXIT_DRIFT
        assert {h: ssh(h, f"sha256sum {WRITTEN[h]}").stdout for h in edits} == before
        items = json.loads(report.read_text())["items"]
        assert {i["host"] for i in items} == set(edits), items
        by_host = {h: json.dumps([i for i in items if i["host"] == h]) for h in edits}
        # each host's item shows its hand-made value (the keyfile's as its [infiniband] mtu)
        assert "198.18.0.201/16" in by_host["gpu01"] and "198.18.0.203/16" in by_host["gpu03"]
        assert "2044" in by_host["gpu04"], by_host["gpu04"]
    finally:
        fixed = ansible_playbook("playbooks/ipoib.yml", "--limit", ",".join(edits))
        assert fixed.rc == 0, fixed.stdout[-3000:]


def test_verify_passes_where_ipoib_is_live_and_names_the_networkmanager_hosts_ipoib(converged, tmp_path):
    report = tmp_path / "verify.json"
    p = fabricops("verify", "--only", "hosts", "--limit", ACTIVE, "--json", str(report))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    report_nm = tmp_path / "verify-nm.json"
    p = fabricops("verify", "--only", "hosts", "--limit", NM_HOST, "--json", str(report_nm))
    assert p.returncode != 0
    results = json.loads(report_nm.read_text())["results"]
    failed = {c["check"] for c in results if c["status"] in ("fail", "error")}
    assert failed == {"ipoib"}, failed
