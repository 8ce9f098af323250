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
