"""Every RoCE field, declared once: path, type, range or choices, default, description, scope.

:data:`FIELDS` is the fabric-wide definition (inventory variable ``fabricops_roce``), read by the host
role and the switch role alike. :data:`SWITCH_SETTINGS` are the switch-only settings users set as
``roce_switch_*`` role variables. :data:`PORT_QOS` and :data:`PORT_SYSFS` are the per-port host
values ``roce_plan`` derives from the definition and the ``mlnx_qos`` / ``roce_sysfs`` modules take as
one ``config`` dict.

Everything else is read or generated from these tables: validation, defaults and ``to_data`` of
:mod:`fabricops.model.roce`; the role ``meta/argument_specs.yml`` entries, the module DOCUMENTATION
options and argument specs, and the field table of docs/roce.md (``python -m fabricops.roce.generate``).
Adding a knob: add one :class:`Field` here (and a :data:`RULES` entry if it constrains another field),
then regenerate.

>>> validate_definition({"dscp": 26})["ecn"]["min_kb"]
150
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fabricops.errors import FabricopsError

__all__ = [
    "FIELDS",
    "PORT_QOS",
    "PORT_SYSFS",
    "RULES",
    "SWITCH_SETTINGS",
    "Field",
    "RoceConfigError",
    "ansible_options",
    "argument_spec",
    "defaults",
    "validate_definition",
]

HOST, SWITCH, BOTH = "host", "switch", "both"
ROOT = "fabricops_roce"


class RoceConfigError(FabricopsError):
    """A RoCE definition that does not validate; the message is one sentence that says what to fix."""


@dataclass(frozen=True)
class Field:
    """One RoCE setting.

    ``type``: ``int``, ``str``, ``bool``, ``map`` (int keys ``key_range`` -> int values ``lo..hi``), or
    the per-port shapes ``list`` (``elements``) and ``dict``. ``nullable``: None is a value (unmanaged).
    """

    path: str  #: dotted path in the definition (``ecn.min_kb``), or the option name
    type: str
    default: Any
    description: str  #: one sentence, plain text (rendered into YAML, Markdown and Python)
    scope: str  #: host | switch | both: who acts on it
    lo: int | None = None
    hi: int | None = None
    choices: tuple[Any, ...] | None = None
    nullable: bool = False
    unit: str = ""
    key_range: tuple[int, int] | None = None  #: map keys (``dscp_map``: DSCP 0..63)
    elements: str | None = None  #: list element type (per-port shapes)
    role_var: str | None = None  #: switch settings: the role variable users set

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def group(self) -> str | None:
        """The sub-mapping the field lives in (``ecn``), or None at the top."""
        return self.path.rsplit(".", 1)[0] if "." in self.path else None

    def range_text(self) -> str:
        if self.choices:
            return " | ".join(str(c) for c in self.choices)
        if self.type == "map" and self.key_range:
            return f"{{{self.key_range[0]}..{self.key_range[1]}: {self.lo}..{self.hi}}}"
        if self.lo is not None:
            return f"{self.lo}..{self.hi}"
        return ""

    def check(self, value: Any, where: str) -> Any:
        """``value`` converted and range-checked, or :class:`RoceConfigError` naming ``where``."""
        if value is None and self.nullable:
            return {} if self.type == "map" else None
        if self.type == "int":
            return _int(value, where, self.lo, self.hi)
        if self.type == "str" and self.choices:
            if value not in self.choices:
                raise RoceConfigError(
                    f"{where} is {value!r}; it must be one of {', '.join(map(str, self.choices))}."
                )
            return value
        if self.type == "bool":
            if not isinstance(value, bool):
                raise RoceConfigError(f"{where} is {value!r}; it must be true or false.")
            return value
        if self.type == "map":
            if not isinstance(value, Mapping):
                raise RoceConfigError(f"{where} must be a mapping of DSCP to priority, e.g. {{46: 5}}.")
            klo, khi = self.key_range or (0, 63)
            out: dict[int, int] = {}
            for key, item in value.items():
                k = _int(key, f"{where} key {key!r}", klo, khi)
                out[k] = _int(item, f"{where}[{k}]", self.lo, self.hi)
            return dict(sorted(out.items()))
        return value


def _int(value: Any, where: str, lo: int | None, hi: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise RoceConfigError(f"{where} must be an integer from {lo} to {hi}, not {value!r}.")
    try:
        number = int(value)
    except ValueError:
        raise RoceConfigError(f"{where} must be an integer from {lo} to {hi}, not {value!r}.") from None
    if lo is not None and hi is not None and not lo <= number <= hi:
        raise RoceConfigError(f"{where} is {number}; it must be from {lo} to {hi}.")
    return number


#: The fabric-wide definition ``fabricops_roce``. Defaults: NVIDIA's "lossless" defaults (Onyx
#: "RoCE Commands", Cumulus "RDMA over Converged Ethernet"): RoCE data DSCP 26 on priority 3 (PFC
#: there only), CNP on DSCP 48 / priority 6, ECN 150/1500 KB. Order = the order of errors and docs.
FIELDS: tuple[Field, ...] = (
    Field(
        "lossless", "bool", True,
        "true: PFC on lossless_priority (lossless RoCE); false: lossy RoCE, ECN only, PFC off on hosts and "
        "switches (NVUE qos roce mode lossy).", BOTH,
    ),
    Field("lossless_priority", "int", 3, "The one priority with PFC (RoCE data).", BOTH, 0, 7),
    Field("dscp", "int", 26, "DSCP of RoCE data (ToS = DSCP << 2 | 2, so 26 gives 106).", BOTH, 0, 63),
    Field("cnp_dscp", "int", 48, "DSCP of congestion notification packets (not dscp).", BOTH, 0, 63),
    Field("cnp_priority", "int", 6, "Priority of CNPs (not lossless_priority).", BOTH, 0, 7),
    Field(
        "trust", "str", "dscp", "Priority trust of the NICs and switch ports (dscp L3, pcp L2).", BOTH,
        choices=("dscp", "pcp"),
    ),
    Field("ecn.min_kb", "int", 150, "Switch ECN marking starts at this queue depth.", SWITCH, 1, 100_000,
          unit="KB"),
    Field("ecn.max_kb", "int", 1500, "Switch ECN marking reaches probability here (not below min_kb).",
          SWITCH, 1, 100_000, unit="KB"),
    Field("ecn.probability", "int", 100, "Switch ECN marking probability at max_kb.", SWITCH, 1, 100,
          unit="%"),
    Field(
        "ecn.other_priorities", "str", "enabled",
        "Host DCQCN on the priorities other than the lossless one.", HOST,
        choices=("enabled", "disabled", "unmanaged"),
    ),
    Field(
        "cable_length_m", "int", None, "mlnx_qos cable length (PFC headroom); null leaves it as it is.", HOST,
        1, 1000, nullable=True, unit="m",
    ),
    Field("roce_mode", "int", 2, "rdma_cm default RoCE mode (1 = v1, 2 = v2).", HOST, 1, 2),
    Field(
        "dscp_map", "map", {}, "Extra DSCP to priority entries (the RoCE and CNP entries are always set).",
        BOTH, 0, 7, nullable=True, key_range=(0, 63),
    ),
)

#: The sub-mappings of the definition.
GROUPS = {"ecn": "ECN thresholds (switch side) and host DCQCN on the other priorities."}

#: Switch-only settings, set as role variables of ``roce_switch`` (task options of the module).
SWITCH_SETTINGS: tuple[Field, ...] = (
    Field(
        "pfc_watchdog", "bool", True,
        "PFC watchdog (storm protection) on the configured ports (Onyx also globally).",
        SWITCH, role_var="roce_switch_pfc_watchdog",
    ),
    Field(
        "ets_lossless_percent", "int", 50,
        "DWRR share of the lossless traffic class; class 0 gets the rest, the CNP class is strict.",
        SWITCH, 1, 99, unit="%", role_var="roce_switch_ets_lossless_percent",
    ),
    Field(
        "buffer_pool", "str", "default",
        "NVUE lossless buffer pool layout (qos roce mode); default: lossless on Cumulus, unmanaged on Onyx "
        "(Onyx traffic pool buffers are not managed yet).",
        SWITCH, choices=("default", "lossless", "lossless-single-ipool"), role_var="roce_switch_buffer_pool",
    ),
)

#: Per-port ``mlnx_qos`` values (``roce_plan`` ports[].mlnx_qos): the ``config`` of the mlnx_qos module.
PORT_QOS: tuple[Field, ...] = (
    Field("trust", "str", None, "Priority trust state; dscp for RoCE v2 without VLANs.", HOST,
          choices=("dscp", "pcp")),
    Field("pfc", "list", None, "PFC enable per priority, 8 values of 0 or 1.", HOST, elements="int"),
    Field("dscp2prio", "dict", None, "DSCP to priority entries to hold; other DSCP values are untouched.",
          HOST),
    Field("cable_len", "int", None, "Cable length in metres (sizes the PFC headroom buffer).", HOST),
)

#: Per-port sysfs / rdma_cm values (``roce_plan`` ports[].sysfs): the ``config`` of roce_sysfs.
PORT_SYSFS: tuple[Field, ...] = (
    Field("ecn_np", "list", None, "DCQCN notification point per priority, 8 values true, false or null.",
          HOST, elements="raw"),
    Field("ecn_rp", "list", None, "DCQCN reaction point per priority, as ecn_np.", HOST, elements="raw"),
    Field("cnp_dscp", "int", None, "DSCP of the CNPs this port sends (skipped where the driver lacks it).",
          HOST),
    Field("cnp_priority", "int", None, "Priority of the CNPs this port sends (same caveat).", HOST),
    Field("traffic_class", "int", None, "RoCE traffic class (IP ToS, 106 for DSCP 26).", HOST),
    Field("rdma_cm_tos", "int", None, "rdma_cm default ToS for RoCE connections (cma_roce_tos).", HOST),
    Field("roce_mode", "int", None, "rdma_cm default RoCE mode, 1 or 2 (cma_roce_mode).", HOST,
          choices=(1, 2)),
)


# --- cross-field rules (hand-written; each gets the checked values, raises one sentence) ---


def _ecn_order(v: Mapping[str, Any]) -> None:
    if v["ecn"]["min_kb"] > v["ecn"]["max_kb"]:
        raise RoceConfigError(
            f"{ROOT}.ecn.min_kb ({v['ecn']['min_kb']}) is above ecn.max_kb ({v['ecn']['max_kb']}); "
            "min must not exceed max."
        )


def _cnp_own_priority(v: Mapping[str, Any]) -> None:
    if v["cnp_priority"] == v["lossless_priority"]:
        raise RoceConfigError(
            f"{ROOT}.cnp_priority ({v['cnp_priority']}) equals lossless_priority; CNPs need their own "
            "priority so they are not paused behind the data they throttle."
        )


def _cnp_own_dscp(v: Mapping[str, Any]) -> None:
    if v["cnp_dscp"] == v["dscp"]:
        raise RoceConfigError(
            f"{ROOT}.cnp_dscp ({v['cnp_dscp']}) equals dscp; give CNPs a DSCP of their own (usually 48)."
        )


def _map_keeps_roce(v: Mapping[str, Any]) -> None:
    dscp, lossless, dmap = v["dscp"], v["lossless_priority"], v["dscp_map"]
    if dmap.get(dscp, lossless) != lossless:
        raise RoceConfigError(
            f"{ROOT}.dscp_map maps the RoCE DSCP {dscp} to priority {dmap[dscp]}, "
            f"but RoCE must land on lossless_priority {lossless}."
        )


def _map_keeps_cnp(v: Mapping[str, Any]) -> None:
    dscp, prio, dmap = v["cnp_dscp"], v["cnp_priority"], v["dscp_map"]
    if dmap.get(dscp, prio) != prio:
        raise RoceConfigError(
            f"{ROOT}.dscp_map maps the CNP DSCP {dscp} to priority {dmap[dscp]}, "
            f"but CNPs must land on cnp_priority {prio}."
        )


#: Cross-field rules, checked in this order after every field passed (texts in docs/roce.md).
RULES: tuple[tuple[str, Callable[[Mapping[str, Any]], None]], ...] = (
    ("ecn.min_kb ≤ ecn.max_kb", _ecn_order),
    ("cnp_priority ≠ lossless_priority (CNPs must not be paused behind the data they throttle)",
     _cnp_own_priority),
    ("cnp_dscp ≠ dscp", _cnp_own_dscp),
    ("dscp_map does not map dscp anywhere but lossless_priority", _map_keeps_roce),
    ("dscp_map does not map cnp_dscp anywhere but cnp_priority", _map_keeps_cnp),
)


# --- reading the declaration ---


def _groups(fields: tuple[Field, ...]) -> dict[str | None, list[Field]]:
    out: dict[str | None, list[Field]] = {}
    for f in fields:
        out.setdefault(f.group, []).append(f)
    return out


def top_keys(fields: tuple[Field, ...] = FIELDS) -> tuple[str, ...]:
    """Top-level keys in declaration order (``ecn`` where its first field is)."""
    keys: list[str] = []
    for f in fields:
        key = f.path.split(".", 1)[0]
        if key not in keys:
            keys.append(key)
    return tuple(keys)


def defaults(fields: tuple[Field, ...] = FIELDS) -> dict[str, Any]:
    """The declared defaults as the nested mapping users write (a fresh copy each call)."""
    out: dict[str, Any] = {}
    for f in fields:
        node = out
        if f.group:
            node = out.setdefault(f.group, {})
        node[f.name] = copy.deepcopy(f.default)
    return out


def _unknown(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    extra = sorted(str(k) for k in data if k not in allowed)
    if extra:
        raise RoceConfigError(
            f"{where} has unknown key(s) {', '.join(extra)}; allowed: {', '.join(allowed)}."
        )


def validate_definition(data: Mapping[str, Any] | None) -> dict[str, Any]:
    """``data`` merged over the defaults, every field checked, then :data:`RULES`; the checked values.

    Raises :class:`RoceConfigError` with one sentence naming the field and what to fix.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise RoceConfigError(f"{ROOT} must be a mapping, not {type(data).__name__}.")
    groups = _groups(FIELDS)
    _unknown(data, top_keys(), ROOT)
    merged = defaults()
    for key, value in data.items():
        if key in groups:  # a sub-mapping (ecn)
            if value is None:
                continue
            if not isinstance(value, Mapping):
                names = ", ".join(f.name for f in groups[key][:3])
                raise RoceConfigError(f"{ROOT}.{key} must be a mapping ({names}).")
            _unknown(value, tuple(f.name for f in groups[key]), f"{ROOT}.{key}")
            merged[key].update(value)
        else:
            merged[key] = value
    checked: dict[str, Any] = {}
    for f in FIELDS:
        if f.group:
            checked.setdefault(f.group, {})[f.name] = f.check(merged[f.group][f.name], f"{ROOT}.{f.path}")
        else:
            checked[f.name] = f.check(merged[f.name], f"{ROOT}.{f.path}")
    for _text, rule in RULES:
        rule(checked)
    return checked


def plain_data(values: Mapping[str, Any], fields: tuple[Field, ...] = FIELDS) -> dict[str, Any]:
    """Checked values as plain JSON-able data in the shape users write (map keys as strings)."""
    out: dict[str, Any] = {}
    for f in fields:
        value = values[f.group][f.name] if f.group else values[f.name]
        if f.type == "map":
            value = {str(k): v for k, v in sorted(value.items())}
        node = out.setdefault(f.group, {}) if f.group else out
        node[f.name] = value
    return out


# --- Ansible argument specs (role meta, module options, action plugin validation) ---


def _option(f: Field, *, with_default: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"description": f.description}
    spec["type"] = "dict" if f.type == "map" else f.type
    if f.elements:
        spec["elements"] = f.elements
    if f.choices:
        spec["choices"] = list(f.choices)
    elif f.type == "int" and f.lo is not None and f.hi is not None and f.hi - f.lo < 8:
        spec["choices"] = list(range(f.lo, f.hi + 1))
    elif f.lo is not None:  # a wide range: said, not listed (the model checks it)
        klo, khi = f.key_range or (0, 0)
        what = f"Keys (DSCP) {klo} to {khi}, values" if f.type == "map" else "From"
        unit = {"": "", "%": " percent"}.get(f.unit, f" {f.unit}")
        spec["description"] += f" {what} {f.lo} to {f.hi}{unit}."
    if with_default and f.default is not None:
        spec["default"] = f.default
    elif f.default not in (None, {}):
        spec["description"] += f" Default {_text(f.default)}."
    return spec


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def ansible_options(fields: tuple[Field, ...] = FIELDS, *, with_default: bool = False) -> dict[str, Any]:
    """Ansible ``options`` for ``fields`` (sub-mappings nested as ``type: dict`` with ``options``).

    Definition fields carry their default in the description, not as ``default``: the model merges
    defaults, so an option default would hide "not set" from it.
    """
    out: dict[str, Any] = {}
    for f in fields:
        if f.group:
            if f.group not in out:
                out[f.group] = {
                    "description": GROUPS[f.group],
                    "type": "dict",
                    "options": {},
                }
            out[f.group]["options"][f.name] = _option(f, with_default=with_default)
        else:
            out[f.name] = _option(f, with_default=with_default)
    return out


def argument_spec(fields: tuple[Field, ...]) -> dict[str, Any]:
    """An ``ArgumentSpecValidator`` spec for ``fields`` (no descriptions), defaults included."""
    spec: dict[str, Any] = {}
    for name, option in ansible_options(fields, with_default=True).items():
        entry = {k: v for k, v in option.items() if k != "description"}
        if "options" in entry:
            entry["options"] = {
                n: {k: v for k, v in o.items() if k != "description"} for n, o in entry["options"].items()
            }
        spec[name] = entry
    return spec


def switch_argument_spec() -> dict[str, Any]:
    """The switch-only options of the ``roce_switch`` action (``pfc_watchdog``, ...)."""
    return argument_spec(SWITCH_SETTINGS)
