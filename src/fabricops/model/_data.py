"""Load the model's YAML data files (package data under ``fabricops/model/data``)."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml


@functools.cache
def load(name: str) -> Any:
    """Parse ``data/<name>`` once; the result is shared, so callers must not mutate it."""
    text = resources.files("fabricops.model").joinpath("data", name).read_text(encoding="utf-8")
    return yaml.safe_load(text)


def profile_names() -> list[str]:
    """Names of the profiles shipped in ``data/profiles/*.yml``."""
    folder = resources.files("fabricops.model").joinpath("data", "profiles")
    return sorted(p.name[: -len(".yml")] for p in folder.iterdir() if p.name.endswith(".yml"))


def profile_text(name: str) -> str:
    return (
        resources.files("fabricops.model")
        .joinpath("data", "profiles", f"{name}.yml")
        .read_text(encoding="utf-8")
    )
