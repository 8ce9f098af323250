"""Fabric monitoring and diagnosis on the lab, host gpu04 only.

node_exporter (Debian's prometheus-node-exporter .deb, served from the controller: the
offline-mirror method of docs/monitoring.md, since lab hosts have no package network) serves the
fabricops collector's metrics; the test scrapes them over HTTP from the controller, injects lab
faults on gpu04 and checks that the metrics move and that ``fabricops diagnose`` names the fault first.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import pytest
from integration.conftest import INVENTORY, REPO, VENV_BIN, ssh
from labtools import ensure_ofed

pytestmark = pytest.mark.lab

HOST = "gpu04"
CONTROLLER_IP = "198.51.100.1"
EMUL = REPO / "src" / "fabricops" / "lab" / "emul" / "ethtool.py"
ETHTOOL_WRAPPER = (
    "#!/usr/bin/python3\nimport sys\nsys.path.insert(0, \"/usr/lib/emulated-hw\")\n"
    "from emul.ethtool import main\nsys.exit(main(sys.argv[1:]))\n"
)
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")


# --- helpers -------------------------------------------------------------------------------------

def fabricops(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "fabricops"), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def fault(*args: str) -> None:
    proc = fabricops("lab", "fault", *args)
    assert proc.returncode == 0, proc.stderr


def scrape(mgmt_ip: str) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://{mgmt_ip}:9100/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m or not m.group(1).startswith("fabricops_"):
            continue
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def value(metrics, name: str, **labels) -> float | None:
    want = {(k, str(v)) for k, v in labels.items()}
    hits = [v for (n, lab), v in metrics.items() if n == name and want <= lab]
    assert len(hits) <= 1, f"{name} {labels}: {len(hits)} samples"
    return hits[0] if hits else None


def diagnose() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "d.json"
        # --no-switches: the leaf switches are shared with other work on the lab; gpu04 is ours
        proc = fabricops("diagnose", "-i", str(INVENTORY), "--limit", HOST, "--no-switches",
                         "--json", str(out))
        assert proc.returncode in (0, 1), proc.stderr
        report = json.loads(out.read_text())
    assert report["healthy"] == (proc.returncode == 0)
    return report


# --- fixtures ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mgmt_ip(lab):
    return lab["hosts"][HOST]["mgmt_ip"]


@pytest.fixture(scope="module")
def ofed(ssh, lab):
    """The emulated MLNX_OFED on gpu04 (installed from the lab's tarball when absent)."""
    return ensure_ofed(ssh, lab, HOST)


@pytest.fixture(scope="module")
def emulated_ethtool(host_exec):
    """The lab's emulated ethtool for mlx5 PFC counters (the lab provides it; installed here if absent)."""
    src = EMUL.read_text()
    have = host_exec(HOST, ["cat", "/usr/lib/emulated-hw/emul/ethtool.py"], check=False)
    if have.returncode != 0 or have.stdout != src:
        host_exec(HOST, ["sh", "-c", "cat > /usr/lib/emulated-hw/emul/ethtool.py"], input=src)
    host_exec(HOST, ["sh", "-c", "cat > /usr/local/sbin/ethtool && chmod 755 /usr/local/sbin/ethtool"],
              input=ETHTOOL_WRAPPER)


def monitor_args(deb_mirror) -> list[str]:
    return ["--limit", HOST, "-e", "fabric_monitor_install_method=deb_url",
            "-e", f"fabric_monitor_node_exporter_deb_url={deb_mirror['url']}",
            "-e", f"fabric_monitor_node_exporter_deb_sha256={deb_mirror['sha256']}"]


@pytest.fixture(scope="module")
def monitored(ansible_playbook, deb_mirror, ofed, emulated_ethtool, mgmt_ip):
    # A healthy host is a converged one: the host phases of the whole job first (OFED, RoCE QoS,
    # NCCL, IPoIB), so "no finding" means the fabric is right, not that nothing was configured.
    converge = ansible_playbook(
        "site.yml", "--limit", HOST, "--tags", "hosts",
        "-e", "mlnx_ofed_allow_restart=true", "-e", "ipoib_allow_restart=true",
    )
    assert converge.rc == 0, converge.stdout[-3000:] + converge.stderr[-2000:]
    extra = monitor_args(deb_mirror)
    run = ansible_playbook("playbooks/monitor.yml", *extra)
    assert run.rc == 0, run.stdout[-3000:] + run.stderr[-2000:]
    again = ansible_playbook("playbooks/monitor.yml", *extra)
    assert again.rc == 0, again.stdout[-3000:]
    assert again.hosts[HOST]["changed"] == 0, again.stdout[-3000:]
    check = ansible_playbook("playbooks/monitor.yml", "--check", *extra)
    assert check.rc == 0 and check.hosts[HOST]["changed"] == 0, check.stdout[-3000:]
    return mgmt_ip


@pytest.fixture
def fresh(monitored, ssh):
    """A function: run the collector now (as its timer would) and scrape node_exporter."""

    def _fresh():
        ssh(HOST, "systemctl start fabricops-collector.service")
        return scrape(monitored)

    yield _fresh
    fabricops("lab", "fault", "clear", HOST)


def _reset_counters(host_exec, names=("link_downed", "symbol_error")) -> None:
    """Counters survive a fault's clear (as on hardware); reset them like `perfquery -R` would."""
    cmd = " ".join(f"/sys/class/infiniband/*/ports/*/counters/{n}" for n in names)
    host_exec(HOST, ["sh", "-c", f"for f in {cmd}; do echo 0 > $f; done"])


# --- tests ---------------------------------------------------------------------------------------

def test_healthy_metrics_and_no_finding(fresh):
    m = fresh()
    assert value(m, "fabricops_ib_port_up", device="mlx5_0", port="1") == 1
    assert value(m, "fabricops_ib_port_rate_bytes_per_second", device="mlx5_0", port="1") == 400e9 / 8
    expected = value(m, "fabricops_ib_port_expected_rate_bytes_per_second", device="mlx5_0", port="1")
    assert expected == 400e9 / 8
    assert value(m, "fabricops_ib_port_width_lanes", device="mlx5_0", port="1") == 4
    assert value(m, "fabricops_nvlink_active_links", gpu="0") == 18
    assert value(m, "fabricops_collector_source_up", source="ethtool") == 1
    assert value(m, "fabricops_pfc_receive_pause_frames_total", netdev="enp170s0f0np0", priority="3") == 0
    assert value(m, "fabricops_roce_cnp_sent_total", device="mlx5_2") is not None
    assert value(m, "fabricops_ib_port_info", device="mlx5_2", link_layer="Ethernet",
                 netdev="enp170s0f0np0") == 1
    report = diagnose()
    assert report["findings"] == []
    # the light tier the role installed beside the collector (issue 36): healthy is silent, exit 0
    health = light_tier()
    assert (health.returncode, health.stdout) == (0, ""), health.stdout + health.stderr


def light_tier():
    """/usr/local/sbin/fabricops-health on the host, as Slurm's HealthCheckProgram runs it."""
    return ssh(HOST, "/usr/local/sbin/fabricops-health", check=False, timeout=30)


def test_port_down(fresh):
    fault(HOST, "port-down", "mlx5_0")
    # the light tier names the port: exit 1 (checked and bad), one line for a HealthCheckProgram's log
    health = light_tier()
    assert health.returncode == 1, health.stdout + health.stderr
    assert health.stdout.startswith("fabricops-health: hca_port mlx5_0/1: state DOWN"), health.stdout
    m = fresh()
    assert value(m, "fabricops_ib_port_up", device="mlx5_0", port="1") == 0
    assert value(m, "fabricops_ib_port_rate_bytes_per_second", device="mlx5_0", port="1") == 10e9 / 8
    assert value(m, "fabricops_ib_port_up", device="mlx5_1", port="1") == 1
    first = diagnose()["findings"][0]
    assert (first["kind"], first["device"]) == ("port_down", "mlx5_0/1")
    fault("clear", HOST)
    assert value(fresh(), "fabricops_ib_port_up", device="mlx5_0", port="1") == 1


def test_port_width(fresh):
    fault(HOST, "port-width", "mlx5_0", "2X")
    m = fresh()
    assert value(m, "fabricops_ib_port_width_lanes", device="mlx5_0", port="1") == 2
    assert value(m, "fabricops_ib_port_rate_bytes_per_second", device="mlx5_0", port="1") == 200e9 / 8
    first = diagnose()["findings"][0]
    assert (first["kind"], first["device"]) == ("port_degraded", "mlx5_0/1")
    assert "2X" in first["cause"]


def test_nvlink_inactive(fresh):
    fault(HOST, "nvlink-inactive", "3", "5")
    m = fresh()
    assert value(m, "fabricops_nvlink_link_up", gpu="3", link="5") == 0
    assert value(m, "fabricops_nvlink_link_up", gpu="3", link="4") == 1
    assert value(m, "fabricops_nvlink_active_links", gpu="3") == 17
    first = diagnose()["findings"][0]
    assert (first["kind"], first["device"]) == ("nvlink_inactive", "GPU3")


def test_flapping(fresh, host_exec):
    before = fresh()
    downed = value(before, "fabricops_ib_port_link_downed_total", device="mlx5_1", port="1")
    symbols = value(before, "fabricops_ib_port_symbol_errors_total", device="mlx5_1", port="1")
    try:
        fault(HOST, "flapping", "mlx5_1")
        m = fresh()
        assert value(m, "fabricops_ib_port_link_downed_total", device="mlx5_1", port="1") == downed + 8
        assert value(m, "fabricops_ib_port_symbol_errors_total", device="mlx5_1", port="1") == symbols + 500
        first = diagnose()["findings"][0]
        assert (first["kind"], first["device"]) == ("link_flapping", "mlx5_1/1")
    finally:
        fabricops("lab", "fault", "clear", HOST)
        _reset_counters(host_exec)


def test_pfc_storm(fresh, host_exec):
    """No lab fault kind makes pause storms: the test writes the NIC's counters below the line."""
    state = "/run/emulated-hw/ethtool/enp170s0f0np0.json"
    counters = {"rx_prio3_pause": 5000, "tx_pause_storm_error_events": 1, "tx_pause_storm_warning_events": 3}
    try:
        host_exec(HOST, ["sh", "-c", f"mkdir -p /run/emulated-hw/ethtool && cat > {state}"],
                  input=json.dumps(counters))
        m = fresh()
        pauses = value(m, "fabricops_pfc_receive_pause_frames_total", netdev="enp170s0f0np0", priority="3")
        assert pauses == 5000
        assert value(m, "fabricops_pfc_pause_storm_error_events_total", netdev="enp170s0f0np0") == 1
        first = diagnose()["findings"][0]
        assert (first["kind"], first["device"]) == ("pfc_storm", "mlx5_2/1")
    finally:
        host_exec(HOST, ["rm", "-f", state])


def test_node_exporter_listens_on_the_management_address(monitored):
    with socket.create_connection((monitored, 9100), timeout=5):
        pass


def test_check_mode_before_the_collector_units_exist(monitored, ansible_playbook, deb_mirror, ssh):
    """A first --check on a host with node_exporter but no collector units yet (a rack the role has
    not reached): it says what it would do and changes nothing; systemd cannot be asked about a unit
    whose file is only reported, so that must not fail the run (it did: "Could not find the
    requested service fabricops-collector.timer")."""
    units = "/etc/systemd/system/fabricops-collector.service /etc/systemd/system/fabricops-collector.timer"
    ssh(HOST, "systemctl disable --now fabricops-collector.timer; "
              f"rm -f {units}; systemctl daemon-reload", check=False)
    try:
        check = ansible_playbook("playbooks/monitor.yml", "--check", *monitor_args(deb_mirror))
        assert check.rc == 0 and check.hosts[HOST]["failures"] == 0, check.stdout[-3000:]
        assert check.hosts[HOST]["changed"] > 0, check.stdout[-3000:]
        assert "would enable and start fabricops-collector.timer" in check.stdout, check.stdout[-3000:]
        assert ssh(HOST, f"ls {units}", check=False).returncode != 0  # check mode wrote nothing
    finally:
        run = ansible_playbook("playbooks/monitor.yml", *monitor_args(deb_mirror))
    assert run.rc == 0, run.stdout[-3000:]
    assert ssh(HOST, "systemctl is-active fabricops-collector.timer").stdout.strip() == "active"
    again = ansible_playbook("playbooks/monitor.yml", "--check", *monitor_args(deb_mirror))
    assert again.rc == 0 and again.hosts[HOST]["changed"] == 0, again.stdout[-3000:]
