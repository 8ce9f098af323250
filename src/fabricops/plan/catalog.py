"""The switch catalogue and planning guidance (data: ``fabricops/model/data/switches.yml``).

A :class:`Switch` is a real Quantum or Spectrum model: its radix (logical ports at the native speed)
and the port rate that speed has in the project's one rate table (``fabricops.model.rates``: NDR 4X
is 400 Gb/s; the per-lane figure is never used as a port rate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fabricops.errors import FabricopsError
from fabricops.model import _data, rates

__all__ = [
    "SWITCHES",
    "PlanInputError",
    "Switch",
    "host_profile",
    "rule_of_thumb",
    "scenario_rows",
    "switch",
    "topology_rules",
]


class PlanInputError(FabricopsError):
    """Input a plan cannot be made from; str() says what to fix. Exit status 2."""

    exit_status = 2


@dataclass(frozen=True)
class Switch:
    model: str  #: short model, e.g. "QM9700"
    name: str  #: full product name, e.g. "NVIDIA Quantum-2 QM9700"
    aliases: tuple[str, ...]
    asic: str
    link_layer: str  #: "InfiniBand" or "Ethernet"
    ports: int  #: radix: logical ports at the native speed
    speed: str  #: IB generation (4X) or Ethernet speed name
    split: dict[str, Any] | None  #: documented breakout mode {ports, speed}, information only
    lab_os: str  #: ib | onyx | cumulus
    source: str

    @property
    def port_rate_gbps(self) -> float:
        """Rate of one port in Gb/s per direction (from rates.yml)."""
        return rates.port_rate(self.link_layer, self.speed, "4X")

    @property
    def radix(self) -> int:
        return self.ports


def _load() -> dict[str, Switch]:
    out: dict[str, Switch] = {}
    for row in _data.load("switches.yml")["switches"]:
        sw = Switch(
            model=row["model"],
            name=row["name"],
            aliases=tuple(row.get("aliases") or ()),
            asic=row["asic"],
            link_layer=row["link_layer"],
            ports=int(row["ports"]),
            speed=row["speed"],
            split=dict(row["split"]) if row.get("split") else None,
            lab_os=row["lab_os"],
            source=" ".join(str(row["source"]).split()),
        )
        out[sw.model] = sw
    return out


#: Switches by model name.
SWITCHES: dict[str, Switch] = _load()

_LOOKUP: dict[str, str] = {}
for _sw in SWITCHES.values():
    for _key in (_sw.model, _sw.name, *_sw.aliases):
        _LOOKUP[_key.lower().replace(" ", "")] = _sw.model


def switch(name: str) -> Switch:
    """A switch by model, product name or alias (case-insensitive); PlanInputError when unknown."""
    key = str(name).strip().lower().replace(" ", "")
    if key.startswith("nvidia"):
        key = key[len("nvidia") :]
    model = _LOOKUP.get(key) or _LOOKUP.get("nvidia" + key)
    if model is None:
        raise PlanInputError(
            f"unknown switch {name!r}: use one of {', '.join(SWITCHES)} (see docs/plan.md, switch catalogue)"
        )
    return SWITCHES[model]


def topology_rules() -> list[dict[str, Any]]:
    """The rule-of-thumb table: rows {max_gpus, topology, tiers}, the last with max_gpus None."""
    return [dict(r) for r in _data.load("switches.yml")["topology_rules"]["rows"]]


def rule_of_thumb(gpus: int) -> dict[str, Any]:
    """The rule-of-thumb row for a GPU count (first row with gpus <= max_gpus)."""
    for row in topology_rules():
        if row["max_gpus"] is None or gpus <= row["max_gpus"]:
            return row
    raise AssertionError("topology_rules must end with a catch-all row")  # pragma: no cover


def scenario_rows() -> list[dict[str, Any]]:
    """The scenario table (first match wins), as in switches.yml."""
    return [dict(r) for r in _data.load("switches.yml")["scenarios"]["rows"]]


def host_profile(link_layer: str, speed: str) -> dict[str, Any] | None:
    """{profile, gpu} for host NICs of this link layer and speed; None when no profile is shipped."""
    for row in _data.load("switches.yml")["host_profiles"]:
        if row["link_layer"] == link_layer and row["speed"] == speed:
            return dict(row)
    return None
