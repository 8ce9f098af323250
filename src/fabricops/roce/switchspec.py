"""The RoCE QoS a switch should have, derived from the one fabric-wide definition.

:func:`switch_spec` turns ``fabricops_roce`` (validated by :func:`fabricops.model.roce.validate`,
the same code the host role uses) plus the switch-only options into a :class:`SwitchSpec`;
:func:`want_facts` turns a spec into the knob facts of the switch's OS (see ``knobs.py``).
Host and switch cannot disagree: priority, DSCP and ECN come from the same validated object.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricops.model.roce import RoceConfig, validate
from fabricops.model.roce_schema import SWITCH_SETTINGS
from fabricops.roce.platforms import switch_platform
from fabricops.switch.errors import SwitchError
from fabricops.switch.knobs import Facts
from fabricops.switch.oses import OS_NAMES, normalize_os

__all__ = [
    "LINK_KEYS",
    "OS_NAMES",
    "SwitchError",
    "SwitchSpec",
    "confirm_seconds",
    "isl_ports",
    "normalize_confirm_timeout",
    "normalize_os",
    "normalize_ports",
    "ports_from_cabling",
    "switch_spec",
    "want_facts",
]

#: NVUE ``nv config apply --confirm <time>``: seconds/minutes/hours, a bare number is minutes
#: (NVUE reference, Config Commands: "nv config apply --confirm 60 requires you to confirm within
#: one hour"). 10 s to 1 h: the check session needs time, and a longer window leaves a switch open.
_CONFIRM = re.compile(r"([0-9]{1,4})([smh]?)", re.ASCII)


def confirm_seconds(value: str) -> int:
    m = _CONFIRM.fullmatch(value)
    if not m:
        raise ValueError(value)
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "": 60}[m.group(2)]


def normalize_confirm_timeout(value: Any) -> str:
    """``roce_switch_confirm_timeout`` checked before it reaches ``nv config apply --confirm``."""
    text = str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None
    try:
        seconds = confirm_seconds(text) if text is not None else -1
    except ValueError:
        seconds = -1
    if not 10 <= seconds <= 3600:
        raise SwitchError(
            f"roce_switch_confirm_timeout {value!r} is not a confirm time; write 10s to 3600s, 1m to 60m "
            "or 1h (digits and one unit letter, nothing else)."
        )
    return text


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def normalize_ports(os_name: str, ports: Iterable[str]) -> list[str]:
    """Ports in the platform's own naming: Onyx ``Eth1/N`` (``ethernet 1/1``, ``1/1`` accepted),
    Cumulus ``swpN`` (``swp1s0`` too); sorted, without duplicates."""
    return switch_platform(os_name).normalize_ports(ports)


#: the keys every inter-switch link entry needs (``fabricops_switch_links``, docs/plan.md)
LINK_KEYS = ("switch_a", "port_a", "switch_b", "port_b")


def isl_ports(
    links: Sequence[Mapping[str, Any]] | None, switch: str, source: str = "fabricops_switch_links"
) -> list[str]:
    """This switch's ends of the inter-switch links (``fabricops_switch_links`` entries
    ``{switch_a, port_a, switch_b, port_b}`` whose ``switch_a`` or ``switch_b`` is ``switch``).

    Every entry must carry the four keys, whichever switch it joins: a half-written entry could be
    one of this switch's uplinks, so it stops the task (one sentence naming the entry)."""
    if links is None:
        return []
    if not isinstance(links, Sequence) or isinstance(links, str | bytes):
        raise SwitchError(f"{switch}: {source} must be a list of {{{', '.join(LINK_KEYS)}}} items.")
    ports = []
    for entry in links:
        if not isinstance(entry, Mapping):
            raise SwitchError(
                f"{switch}: {source} entry {entry!r} is not a mapping; each entry is "
                f"{{{', '.join(LINK_KEYS)}}}."
            )
        missing = [k for k in LINK_KEYS if entry.get(k) in (None, "")]
        if missing:
            raise SwitchError(
                f"{switch}: {source} entry {dict(entry)!r} has no {' or '.join(missing)}; each entry "
                f"needs {', '.join(LINK_KEYS)}."
            )
        for end in ("a", "b"):
            if str(entry[f"switch_{end}"]) == switch:
                ports.append(str(entry[f"port_{end}"]))
    return ports


def ports_from_cabling(
    cabling: Sequence[Mapping[str, Any]] | None,
    switch: str,
    links: Sequence[Mapping[str, Any]] | None = None,
) -> list[str]:
    """The switch ports the RoCE traffic crosses: those host ports are cabled to (``fabricops_cabling``
    entries of this switch), then its ends of the inter-switch links (``links``, the
    ``fabricops_switch_links`` shape; :func:`isl_ports`). The platform sorts them
    (:func:`normalize_ports`)."""
    ports = []
    for entry in cabling or []:
        if not isinstance(entry, Mapping):
            raise SwitchError(
                "fabricops_cabling must be a list of {host, netdev, switch, switch_port} items."
            )
        if entry.get("switch") == switch:
            port = entry.get("switch_port", entry.get("port"))
            if port in (None, ""):
                raise SwitchError(f"fabricops_cabling entry {dict(entry)!r} for {switch} has no switch_port.")
            ports.append(str(port))
    return ports + isl_ports(links, switch)


@dataclass(frozen=True)
class SwitchSpec:
    """The RoCE QoS of one switch (units: KB for ECN thresholds, percent for ETS and probability)."""

    os: str  #: onyx | cumulus
    roce: RoceConfig  #: the validated fabric-wide definition
    ports: list[str]  #: switch ports facing RoCE host ports and its inter-switch link ends
    pfc_watchdog: bool = True  #: PFC watchdog (storm protection) on the ports / globally
    ets_lossless_percent: int = 50  #: DWRR share of the lossless class; the rest to class 0
    buffer_pool: str | None = None  #: NVUE ``qos roce mode`` (lossless | lossless-single-ipool); None: leave
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def trust(self) -> str:
        return "L3" if self.roce.trust == "dscp" else "L2"

    @property
    def platform(self) -> Any:
        """The platform of :attr:`os` (``fabricops.roce.platforms``)."""
        return switch_platform(self.os)


def switch_spec(
    os_name: str,
    roce: Mapping[str, Any] | RoceConfig | None,
    ports: Iterable[str],
    *,
    pfc_watchdog: bool = True,
    ets_lossless_percent: int = 50,
    buffer_pool: str | None = "default",
) -> SwitchSpec:
    """Validate everything a switch needs; raises :class:`FabricopsError` with one sentence."""
    os_name = normalize_os(os_name)
    cfg = roce if isinstance(roce, RoceConfig) else validate(roce)
    port_list = normalize_ports(os_name, ports)
    # the range is the schema's (fabricops.model.roce_schema.SWITCH_SETTINGS), the one declaration
    ets = next(f for f in SWITCH_SETTINGS if f.name == "ets_lossless_percent")
    if isinstance(ets_lossless_percent, bool) or not isinstance(ets_lossless_percent, int):
        raise SwitchError(
            f"{ets.role_var} is {ets_lossless_percent!r}; use an integer {ets.lo} to {ets.hi}."
        )
    if not ets.lo <= int(ets_lossless_percent) <= ets.hi:
        raise SwitchError(f"{ets.role_var} is {ets_lossless_percent}; use {ets.lo} to {ets.hi}.")
    plat = switch_platform(os_name)
    if buffer_pool == "default":
        buffer_pool = plat.default_buffer_pool
    if buffer_pool not in plat.buffer_pools:
        allowed = ", ".join(str(b) for b in plat.buffer_pools)
        raise SwitchError(
            f"roce_switch_buffer_pool {buffer_pool!r} is not available on {os_name} (allowed: {allowed})."
        )
    plat.check_definition(cfg)
    return SwitchSpec(
        os=os_name,
        roce=cfg,
        ports=port_list,
        pfc_watchdog=bool(pfc_watchdog),
        ets_lossless_percent=int(ets_lossless_percent),
        buffer_pool=buffer_pool,
    )


def want_facts(spec: SwitchSpec) -> Facts:
    """The knob facts of ``spec`` for its OS (the platform's table; see ``fabricops.roce.platforms``)."""
    return spec.platform.want_facts(spec)
