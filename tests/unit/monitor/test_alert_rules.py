"""monitoring/alerts.yml: every alert reads real collector metrics, names host, device and cause, and
is tested by promtool with a firing and a non-firing case."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from fabricops.monitor import collector, rules

REQUIRED = {
    "FabricPortDown",
    "FabricPortBelowProfileRate",
    "FabricSymbolErrorsRising",
    "FabricLinkFlapping",
    "FabricPfcPauseStorm",
    "FabricEcnWithoutCnp",
    "FabricNvlinkInactive",
}


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
    assert any(f"$labels.{x}" in summary for x in ("device", "netdev", "gpu", "module"))  # module: DKMS
    assert ":" in summary  # "<where>: <likely cause>"
    assert rule["labels"]["severity"] in ("warning", "critical")


def test_flapping_threshold_is_the_profile_threshold():
    from fabricops.model.profiles import load_profile, threshold_for

    t = threshold_for(load_profile("hgx-h100-ndr"), "link_flaps_24h")
    rule = next(r for r in rules.load() if r["alert"] == "FabricLinkFlapping")
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
