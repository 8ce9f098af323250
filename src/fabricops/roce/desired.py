"""What RoCE state one host or switch should have: the one function everyone asks.

The roles apply an effective definition that is not always ``fabricops_roce`` itself: the
roce_host role applies ``roce_host_roce`` (its default is ``{{ fabricops_roce | default({}) }}``,
so an inventory that sets ``roce_host_roce`` overrides the fabric-wide definition for that host),
the roce_switch role applies ``roce_switch_roce`` with its switch options (``roce_switch_ports``,
``roce_switch_pfc_watchdog``, ``roce_switch_ets_lossless_percent``, ``roce_switch_buffer_pool``).
:func:`desired_state` resolves exactly that from a host's variables and validates it, so what
verify, drift, diagnose and the lab check is what the roles applied, overrides included.

>>> d = desired_state({"fabricops_roce": {"dscp": 26}}, "gpu01")
>>> d.roce.lossless_priority, d.source
(3, 'fabricops_roce')
>>> desired_state({"fabricops_roce": {"dscp": 26}, "roce_host_roce": {"dscp": 34, "lossless_priority": 4}},
...               "gpu01").roce.lossless_priority
4
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import EXIT_BADINPUT, FabricopsError
from fabricops.model.roce import RoceConfig, validate

__all__ = [
    "HOST_OVERRIDE",
    "SWITCH_OPTIONS",
    "SWITCH_OVERRIDE",
    "Desired",
    "DesiredStateError",
    "desired_state",
    "effective_definition",
    "lossless_priority",
    "validated",
]

#: the role variables that override ``fabricops_roce`` (role defaults: ``{{ fabricops_roce | default({}) }}``)
HOST_OVERRIDE = "roce_host_roce"
SWITCH_OVERRIDE = "roce_switch_roce"
#: the roce_switch role's switch options and their role defaults (roles/roce_switch/defaults/main.yml)
SWITCH_OPTIONS = {
    "roce_switch_ports": [],
    "roce_switch_pfc_watchdog": True,
    "roce_switch_ets_lossless_percent": 50,
    "roce_switch_buffer_pool": "default",
}


class DesiredStateError(FabricopsError):
    """The effective RoCE definition of a host or switch does not validate; one sentence naming
    the host and the variable to fix (exit status 5: invalid input data)."""

    exit_status = EXIT_BADINPUT

    def __init__(self, host: str, detail: str):
        super().__init__(f"{host}: {detail}")
        self.host, self.detail = host, detail


@dataclass(frozen=True)
class Desired:
    """The effective, validated RoCE state of one host or switch."""

    name: str
    kind: str  #: "host" | "switch"
    source: str | None  #: the variable the definition came from; None: none set (nothing planned)
    data: Mapping[str, Any] | None  #: the definition as written (rendered), None when none is set
    roce: RoceConfig | None  #: validated; None when no definition is set
    switch: Any = None  #: ``fabricops.roce.switchspec.SwitchSpec`` of a switch (None for a host)
    options: dict[str, Any] = field(default_factory=dict)  #: the roce_switch_* options used

    @property
    def planned(self) -> bool:
        return self.roce is not None


def _render(value: Any, hostvars: Mapping[str, Any], name: str, host: str, render: Any = None) -> Any:
    """An inventory template (``"{{ fabricops_roce | combine(...) }}"``) resolved as a play would
    (``render``: the caller's own templar, e.g. an action plugin's)."""
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        from fabricops.switch.access import ansible_render, from_inventory_json

        try:
            if render is not None:
                return render(value)
            variables = from_inventory_json(hostvars)
            return ansible_render(variables)(from_inventory_json({name: value})[name])
        except Exception as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
            raise DesiredStateError(host, f"{name} could not be resolved ({first}).") from None
    return value


def _is_role_default(value: Any) -> bool:
    """The role's own default (``{{ fabricops_roce | default({}) }}``): no override."""
    return isinstance(value, str) and " ".join(value.split()) in (
        "{{ fabricops_roce | default({}) }}",
        "{{ fabricops_roce }}",
    )


def _definition(
    hostvars: Mapping[str, Any], override: str, host: str, render: Any = None
) -> tuple[str | None, Any]:
    value = hostvars.get(override)
    if value is not None and not _is_role_default(value):
        return override, _render(value, hostvars, override, host, render)
    value = hostvars.get("fabricops_roce")
    if value is None:
        return None, None
    return "fabricops_roce", _render(value, hostvars, "fabricops_roce", host, render)


def effective_definition(
    hostvars: Mapping[str, Any], host: str | None = None, render: Any = None, kind: str | None = None
) -> tuple[str | None, Any]:
    """(the variable, the definition as written) that the role of ``host`` applies, not validated:
    ``roce_switch_roce`` / ``roce_host_roce`` when the inventory sets it, else ``fabricops_roce``;
    (None, None) when neither is set. ``kind`` ("host" / "switch"): which role, when the variables
    do not say (an action plugin given ``os:``); ``render``: the caller's templar. Verify reports a
    definition that does not validate as one check result (:func:`validated`) instead of failing
    the whole host."""
    from fabricops.switch.access import switch_os

    name = str(host or hostvars.get("inventory_hostname") or "host")
    if kind is None:
        kind = "switch" if switch_os(hostvars) is not None else "host"
    override = SWITCH_OVERRIDE if kind == "switch" else HOST_OVERRIDE
    return _definition(hostvars, override, name, render)


def validated(data: Any, source: str | None = "fabricops_roce", host: str = "host") -> RoceConfig:
    """``data`` validated; :class:`DesiredStateError` naming ``host`` and ``source`` else."""
    return _checked(data, source or "fabricops_roce", host)


def _checked(data: Any, source: str, host: str) -> RoceConfig:
    try:
        return validate(data)
    except FabricopsError as exc:
        text = str(exc)
        if source != "fabricops_roce":
            text = text.replace("fabricops_roce", source)
        raise DesiredStateError(host, f"{source} does not validate: {text}") from None


def desired_state(hostvars: Mapping[str, Any], host: str | None = None) -> Desired:
    """The effective RoCE state of ``host`` from its inventory variables, validated.

    A switch (``fabricops_switch_os`` / ``ansible_network_os`` naming Onyx or Cumulus) gets
    ``roce_switch_roce`` over ``fabricops_roce`` and its ``SwitchSpec`` (ports from
    ``roce_switch_ports``, else the ``fabricops_cabling`` entries of this switch and its ends of the
    ``fabricops_switch_links`` inter-switch links); any other host
    gets ``roce_host_roce`` over ``fabricops_roce``. No definition set: ``roce`` is None (no RoCE
    planned). A definition that does not validate raises :class:`DesiredStateError` (never a silent
    default)."""
    from fabricops.switch.access import switch_os

    name = str(host or hostvars.get("inventory_hostname") or "host")
    os_name = switch_os(hostvars)
    if os_name is None:
        source, data = _definition(hostvars, HOST_OVERRIDE, name)
        roce = _checked(data, source, name) if source is not None else None
        return Desired(name=name, kind="host", source=source, data=data, roce=roce)

    source, data = _definition(hostvars, SWITCH_OVERRIDE, name)
    roce = _checked(data, source, name) if source is not None else None
    options = {k: hostvars.get(k, v) for k, v in SWITCH_OPTIONS.items()}
    spec = None
    if roce is not None:
        from fabricops.roce.switchspec import ports_from_cabling, switch_spec

        try:
            ports = list(options["roce_switch_ports"] or []) or ports_from_cabling(
                hostvars.get("roce_switch_cabling") or hostvars.get("fabricops_cabling"),
                name,
                hostvars.get("roce_switch_links") or hostvars.get("fabricops_switch_links"),
            )
            spec = switch_spec(
                os_name,
                roce,
                ports,
                pfc_watchdog=_bool(options["roce_switch_pfc_watchdog"], "roce_switch_pfc_watchdog", name),
                ets_lossless_percent=_int(options["roce_switch_ets_lossless_percent"], name),
                buffer_pool=options["roce_switch_buffer_pool"],
            )
        except DesiredStateError:
            raise
        except FabricopsError as exc:
            raise DesiredStateError(name, str(exc)) from None
    return Desired(
        name=name, kind="switch", source=source, data=data, roce=roce, switch=spec, options=options
    )


def _bool(value: Any, var: str, host: str) -> bool:
    """An inventory boolean as Ansible converts it (``"false"`` from -e or INI is false)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on", "y", "t"):
        return True
    if text in ("0", "false", "no", "off", "n", "f"):
        return False
    raise DesiredStateError(host, f"{var} is {value!r}; use true or false.")


def _int(value: Any, host: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise DesiredStateError(host, f"roce_switch_ets_lossless_percent is {value!r}; use an integer 1 to 99.")


def lossless_priority(hostvars: Mapping[str, Any], host: str | None = None) -> int | None:
    """The lossless priority ``host`` was configured with (validated, defaults and overrides
    applied); None when no RoCE definition is set."""
    d = desired_state(hostvars, host)
    return d.roce.lossless_priority if d.roce is not None else None
