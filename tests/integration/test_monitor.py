"""Fabric monitoring and diagnosis on the lab, host gpu04 only.

node_exporter (Debian's prometheus-node-exporter .deb, served from the controller: the
offline-mirror method of docs/monitoring.md, since lab hosts have no package network) serves the
fabricops collector's metrics; the test scrapes them over HTTP from the controller, injects lab
faults on gpu04 and checks that the metrics move and that ``fabricops diagnose`` names the fault first.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from integration.conftest import INVENTORY, REPO, VENV_BIN, ssh
from labtools import ensure_ofed

pytestmark = pytest.mark.lab

HOST = "gpu04"
CONTROLLER_IP = "198.51.100.1"
EMUL = REPO / "lab" / "src" / "fabricops_lab" / "emul" / "ethtool.py"
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


def scrape_text(mgmt_ip: str) -> str:
    with urllib.request.urlopen(f"http://{mgmt_ip}:9100/metrics", timeout=10) as resp:
        return resp.read().decode()


def scrape(mgmt_ip: str) -> dict[tuple[str, frozenset], float]:
    text = scrape_text(mgmt_ip)
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


# --- a real Prometheus, the dashboard and the stale collector (issue 39) --------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prom_query(url: str, expr: str) -> list[dict]:
    query = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


@pytest.fixture(scope="module")
def prometheus(monitored, tmp_path_factory):
    """Debian's Prometheus server (the prometheus package scripts/setup.sh installs) scraping gpu04's
    node_exporter every second, with the fabricops rules loaded; ready once it holds three scrapes, so
    a rate() over a minute has points."""
    from fabricops.monitor import rules

    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: scripts/setup.sh installs Debian's prometheus package")
    work = tmp_path_factory.mktemp("prometheus")
    (work / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules.alerts_file())],
        "scrape_configs": [{"job_name": "node", "static_configs": [{"targets": [f"{monitored}:9100"]}]}],
    }))
    log = (work / "prometheus.log").open("w")
    for _attempt in range(3):  # a port taken between _free_port and the bind: Prometheus exits, try another
        url = f"http://127.0.0.1:{_free_port()}"
        proc = subprocess.Popen(
            [binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address={url.removeprefix('http://')}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        ready = False
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if prom_query(url, 'count_over_time(up{job="node"}[1m]) >= 3 and up{job="node"} == 1'):
                    ready = True
                    break
            except OSError:
                pass  # not listening yet
            time.sleep(0.5)
        if ready:
            break
        proc.terminate()
        proc.wait(10)
    else:
        log.flush()
        tail = (work / "prometheus.log").read_text()[-2000:]
        pytest.fail(f"Prometheus did not scrape node_exporter: {tail}")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_every_dashboard_panel_returns_series_from_a_real_prometheus(prometheus, fresh):
    """The Grafana dashboard's queries, with $host = All as Grafana sends them, each return series
    from Prometheus scraping the lab host: a panel on a misspelt or never-written metric stays empty."""
    from fabricops.monitor import rules

    fresh()
    empty = [f"{title}: {expr}" for title, expr in rules.panel_queries() if not prom_query(prometheus, expr)]
    assert not empty, "panels without data:\n" + "\n".join(empty)
    # and the host variable's own query lists the host
    hosts = prom_query(prometheus, "group by (host) (fabricops_collector_last_run_timestamp_seconds)")
    assert [r["metric"]["host"] for r in hosts] == [HOST]


def _series_from(text: str, shift: float) -> list[dict]:
    """promtool input series from a host's real exposition: every fabricops sample held at its value
    (node_exporter serves the same file until the collector writes another), the collector's
    timestamps moved to promtool's clock, whose 0 is the last collection (`shift`)."""
    out = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m or not m.group(1).startswith("fabricops_"):
            continue
        name, labels, val = m.group(1), m.group(2) or "", float(m.group(3))
        if name.endswith("_timestamp_seconds"):
            val -= shift
        out.append({"series": f"{name}{{{labels}}}", "values": f"{val!r}x40"})
    return out


def _annotations(rule: dict, host: str, value_text: str) -> dict[str, str]:
    def render(text: str) -> str:
        text = text.replace("{{ $labels.host }}", host).replace("{{ $value | humanizeDuration }}", value_text)
        return " ".join(text.split())

    return {k: render(v) for k, v in rule["annotations"].items()}


def test_a_stopped_collector_timer_fires_the_stale_alert(monitored, ssh, tmp_path):
    """Stop the collector's timer on the lab host: node_exporter keeps serving the last file (its
    ports still "up"). A promtool test built from that real output: no alert for 10 minutes, then
    FabricopsCollectorStale for the host and no other alert; the same samples with a collector that
    runs every minute raise nothing (a healthy host is quiet)."""
    from fabricops.monitor import rules

    # one run now (a oneshot: start returns when it is done), then no more: the timer and any run it
    # started in between stopped, so the file cannot change under the two scrapes
    ssh(HOST, "systemctl start fabricops-collector.service && "
              "systemctl stop fabricops-collector.timer fabricops-collector.service")
    try:
        timer = ssh(HOST, "systemctl is-active fabricops-collector.timer", check=False)
        assert timer.stdout.strip() == "inactive"
        text = scrape_text(monitored)
        again = scrape_text(monitored)  # the dead collector's file, served as long as node_exporter runs
        stamp = SAMPLE.match(next(x for x in text.splitlines()
                                  if x.startswith("fabricops_collector_last_success_timestamp_seconds{")))
        assert stamp and stamp.group(1) in again and stamp.group(0) in again
        assert 'fabricops_ib_port_up{device="mlx5_0",host="gpu04",port="1"} 1' in again
    finally:
        ssh(HOST, "systemctl start fabricops-collector.timer")
    frozen = _series_from(text, float(stamp.group(3)))
    alive = [dict(s, values=("0+60x40" if "_timestamp_seconds{" in s["series"] else s["values"]))
             for s in frozen]
    names = [r["alert"] for r in rules.load()]
    stale = next(r for r in rules.load() if r["alert"] == "FabricopsCollectorStale")
    quiet = lambda t: [{"eval_time": t, "alertname": n, "exp_alerts": []} for n in names]  # noqa: E731
    spec = {
        "rule_files": [str(rules.alerts_file())],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m", "input_series": frozen, "alert_rule_test": [
                *quiet("9m"),
                *[c for c in quiet("11m") if c["alertname"] != stale["alert"]],
                {"eval_time": "11m", "alertname": stale["alert"], "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "host": HOST},
                    "exp_annotations": _annotations(stale, HOST, "11m 0s")}]},
            ]},
            {"interval": "1m", "input_series": alive, "alert_rule_test": quiet("30m")},
        ],
    }
    (tmp_path / "stale_test.yml").write_text(yaml.safe_dump(spec, width=1000))
    proc = subprocess.run(["promtool", "test", "rules", str(tmp_path / "stale_test.yml")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
