"""monitoring/grafana: the dashboard reads only what the collector writes, every query is valid PromQL
(promtool parses it), and Grafana's file provisioning finds it. tests/integration/test_monitor.py runs
every panel's query against a real Prometheus that scrapes a lab host."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from fabricops.monitor import collector, rules

DASH = json.loads(rules.dashboard_file().read_text())
QUERIES = rules.panel_queries(DASH)
KNOWN = {collector.PREFIX + m for m in collector.METRICS}


def test_the_dashboard_has_panels_for_every_concern():
    titles = " ".join(t for t, _ in QUERIES).lower()
    for concern in ("collection", "ports", "rate", "pfc", "ecn", "nvlink", "pcie"):
        assert concern in titles, concern
    assert len(QUERIES) >= 14


@pytest.mark.parametrize(("title", "expr"), QUERIES, ids=[t for t, _ in QUERIES])
def test_panel_reads_collector_metrics(title, expr):
    used = set(rules.METRIC_RE.findall(expr))
    assert used, title
    assert used <= KNOWN, used - KNOWN  # no old name (the recording rules), no typo
    assert "$" not in expr, f"{title}: a variable the dashboard does not define: {expr}"


def test_panels_name_their_unit_source_and_variables():
    variables = {v["name"] for v in DASH["templating"]["list"]}
    assert variables == {"datasource", "host"}
    host = next(v for v in DASH["templating"]["list"] if v["name"] == "host")
    assert set(rules.METRIC_RE.findall(host["definition"])) <= KNOWN
    ids = []
    for panel in DASH["panels"]:
        ids.append(panel["id"])
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert panel["description"], panel["title"]
        for target in panel["targets"]:
            assert 'host=~"$host"' in target["expr"], (panel["title"], target["expr"])
    assert len(ids) == len(set(ids))


def test_provisioning_points_grafana_at_a_file_provider():
    prov = yaml.safe_load((rules.dashboard_file().parent / "provisioning.yml").read_text())
    (provider,) = prov["providers"]
    assert prov["apiVersion"] == 1 and provider["type"] == "file"
    assert provider["options"]["path"].startswith("/")
    assert provider["allowUiUpdates"] is False  # the file is the truth, as in GitOps


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (scripts/setup.sh)")
def test_every_panel_query_is_valid_promql(tmp_path):
    """promtool parses each query as the expression of a recording rule."""
    rules_file = tmp_path / "panels.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": [
        {"record": f"panel_{i}", "expr": expr} for i, (_, expr) in enumerate(QUERIES)
    ]}]}))
    check = subprocess.run(["promtool", "check", "rules", str(rules_file)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
