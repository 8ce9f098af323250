"""The alert rules (monitoring/alerts.yml) as data: which alerts exist and which metrics they read."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from fabricops import paths


def alerts_file() -> Path:
    """monitoring/alerts.yml of the installed collection (a checkout is found the same way)."""
    return paths.collection_file("monitoring/alerts.yml")


def tests_dir() -> Path:
    return paths.collection_file("monitoring/tests")

METRIC_RE = re.compile(r"\b(fabricops_[a-z0-9_]+)\b")


def load(path: Path | None = None) -> list[dict[str, Any]]:
    """Every alerting rule of the file, in order."""
    doc = yaml.safe_load((path or alerts_file()).read_text())
    return [r for g in doc.get("groups", []) for r in g.get("rules", []) if "alert" in r]


def metrics_used(rule: dict[str, Any]) -> set[str]:
    return set(METRIC_RE.findall(str(rule.get("expr", ""))))


def dashboard_file() -> Path:
    """monitoring/grafana/fabricops-fabric.json: the Grafana dashboard of the collector's metrics."""
    return paths.collection_file("monitoring/grafana/fabricops-fabric.json")


# What Grafana puts in place of its variables when it sends a panel's query to Prometheus, for a
# dashboard that shows every host: the "All" value of $host, a range for $__rate_interval (Grafana
# makes it at least four scrape intervals; one minute covers a scrape interval of 15 s).
ALL_HOSTS = {"$host": ".*", "$__rate_interval": "1m"}


def panel_queries(dashboard: dict[str, Any] | None = None,
                  variables: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """Every (panel title, PromQL) of the dashboard's panels, rows included, with the variables
    replaced as Grafana would (``ALL_HOSTS`` by default)."""
    import json

    dash = dashboard if dashboard is not None else json.loads(dashboard_file().read_text())
    subst = ALL_HOSTS if variables is None else variables
    out = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                expr = target["expr"]
                for name in sorted(subst, key=len, reverse=True):
                    expr = expr.replace(name, subst[name])
                out.append((f"{panel['title']} [{target['refId']}]", expr))

    walk(dash.get("panels", []))
    return out
