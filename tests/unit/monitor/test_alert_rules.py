"""monitoring/alerts.yml: every alert reads real collector metrics, names host, device and cause, and
is tested by promtool with a firing and a non-firing case."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fabricops.monitor import collector, rules

REQUIRED = {
    "FabricopsPortDown",
    "FabricopsPortBelowProfileRate",
    "FabricopsSymbolErrorsRising",
    "FabricopsLinkFlapping",
    "FabricopsPfcPauseStorm",
    "FabricopsEcnWithoutCnp",
    "FabricopsNvlinkInactive",
    "FabricopsCollectorStale",
    "FabricopsCollectorSourceFailing",
}
REPO = Path(__file__).resolve().parents[3]


def test_required_alerts_exist():
    assert {r["alert"] for r in rules.load()} >= REQUIRED


@pytest.mark.parametrize("rule", rules.load(), ids=lambda r: r["alert"])
def test_alert_reads_collector_metrics_and_names_host_device_cause(rule):
    used = rules.metrics_used(rule)
    assert used, rule["alert"]
    known = {collector.PREFIX + m for m in collector.METRICS}
    assert used <= known, used - known
    summary = rule["annotations"]["summary"]
    assert "$labels.host" in summary
    if used <= {collector.PREFIX + m for m in collector.METRICS if m.startswith("collector_")}:
        pass  # the collector's own health: the host (and the source) is the place
    else:  # module: DKMS
        assert any(f"$labels.{x}" in summary for x in ("device", "netdev", "gpu", "module"))
    assert ":" in summary  # "<where>: <likely cause>"
    assert rule["labels"]["severity"] in ("warning", "critical")


def test_flapping_threshold_is_the_profile_threshold():
    from fabricops.model.profiles import load_profile, threshold_for

    t = threshold_for(load_profile("hgx-h100-ndr"), "link_flaps_24h")
    rule = next(r for r in rules.load() if r["alert"] == "FabricopsLinkFlapping")
    assert f">= {t.value}" in rule["expr"] and "[24h]" in rule["expr"]


def test_every_alert_has_firing_and_silent_cases():
    cases: dict[str, dict[str, int]] = {}
    for f in rules.tests_dir().glob("*.yml"):
        for test in yaml.safe_load(f.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                kind = "firing" if case.get("exp_alerts") else "silent"
                cases.setdefault(case["alertname"], {"firing": 0, "silent": 0})[kind] += 1
    for rule in rules.load():
        assert cases.get(rule["alert"], {}).get("firing"), f"{rule['alert']}: no firing case"
        assert cases.get(rule["alert"], {}).get("silent"), f"{rule['alert']}: no non-firing case"


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (scripts/setup.sh installs it)"
)
def test_promtool_check_and_test_rules():
    check = subprocess.run(
        ["promtool", "check", "rules", str(rules.alerts_file())], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    files = sorted(str(p) for p in rules.tests_dir().glob("*.yml"))
    test = subprocess.run(["promtool", "test", "rules", *files], capture_output=True, text=True)
    assert test.returncode == 0, test.stdout + test.stderr
    assert "SUCCESS" in test.stdout


def test_one_alert_prefix():
    """Alertmanager routes and silences match on the name: one prefix, the project's."""
    for rule in rules.load():
        assert rule["alert"].startswith("Fabricops"), rule["alert"]


def _anchors(markdown: str) -> set[str]:
    """GitHub's and mkdocs' anchors of the markdown headings (lower case, spaces to dashes)."""
    out = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().strip("`").lower()
            out.add("".join(ch for ch in title.replace(" ", "-") if ch.isalnum() or ch in "-_"))
    return out


@pytest.mark.parametrize("rule", rules.load(), ids=lambda r: r["alert"])
def test_every_alert_links_its_runbook_section(rule):
    url = rule["annotations"].get("runbook_url", "")
    page, _, anchor = url.partition("#")
    assert page == "docs/alerts.md", url
    assert anchor == rule["alert"].lower(), url
    doc = (REPO / page).read_text()
    assert anchor in _anchors(doc), f"{page} has no section {rule['alert']}"
    section = doc.split(f"## {rule['alert']}", 1)[1].split("\n## ", 1)[0]
    for step in ("**What it means**", "**Check**", "**Fix**"):
        assert step in section, (rule["alert"], step)


def test_renamed_metrics_are_kept_one_release_as_recording_rules():
    doc = yaml.safe_load(rules.alerts_file().read_text())
    records = {r["record"]: r["expr"] for g in doc["groups"] for r in g["rules"] if "record" in r}
    assert records == {
        "fabricops_ib_port_rate_bits_per_second": "fabricops_ib_port_rate_bytes_per_second * 8",
        "fabricops_ib_port_expected_rate_bits_per_second":
            "fabricops_ib_port_expected_rate_bytes_per_second * 8",
    }
    known = {collector.PREFIX + m for m in collector.METRICS}
    assert not set(records) & known  # the collector writes only the new names


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (scripts/setup.sh installs it)"
)
def test_promtool_check_metrics_accepts_the_collector_output(tmp_path):
    """promtool's lint of names, units and HELP/TYPE on what the collector writes for a host with every
    source: an InfiniBand port, a RoCE port with PFC counters, NVLink status and errors (real captures)."""
    from captures import read_fixture
    from test_collector import ETHTOOL, fake_run, make_sysfs

    root = make_sysfs(tmp_path)
    nvlink = read_fixture("nvidia-smi-nvlink", "v100_two_inactive_links.txt")
    errors = read_fixture("nvidia-smi-nvlink-errors", "h100_elided_stas00.txt")
    run = fake_run(
        {"-S enp170s0f0np0": (0, ETHTOOL), "nvlink --status": (0, nvlink), "nvlink -e": (0, errors)}
    )
    text = collector.collect({"expected_rate_gbps": {"InfiniBand": 400}}, sysfs=str(root), run=run,
                             host="gpu04", now=1.5)
    assert "fabricops_ib_port_rate_bytes_per_second" in text
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
