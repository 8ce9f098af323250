"""The alert rules (monitoring/alerts.yml) as data: which alerts exist and which metrics they read."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
ALERTS_FILE = REPO / "monitoring" / "alerts.yml"
TESTS_DIR = REPO / "monitoring" / "tests"
METRIC_RE = re.compile(r"\b(fabricops_[a-z0-9_]+)\b")


def load(path: Path = ALERTS_FILE) -> list[dict[str, Any]]:
    """Every alerting rule of the file, in order."""
    doc = yaml.safe_load(path.read_text())
    return [r for g in doc.get("groups", []) for r in g.get("rules", []) if "alert" in r]


def metrics_used(rule: dict[str, Any]) -> set[str]:
    return set(METRIC_RE.findall(str(rule.get("expr", ""))))
