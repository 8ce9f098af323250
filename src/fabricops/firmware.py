# SPDX-License-Identifier: Apache-2.0
"""NIC firmware, declared and planned on the controller (role fabricops.fabric.nic_firmware).

Pure functions, no Ansible and no host access:

* :func:`declared` - the mlxconfig settings a device must hold (presets in order, then the
  configuration for every device, then the device's own; later wins), validated.
* :func:`config_plan` - what ``mlxconfig set`` must change (next boot) and what waits for a reset
  (next boot holds the declared value, the running configuration does not).
* :func:`fw_plan` - per device, whether the pinned firmware must be burned, only activated
  ("reset"), or nothing. A burned-but-not-running pin is ``reset``, never a second burn: this is
  the rule that keeps the role from burning in a loop.
* :func:`reset_plan` - what to do about the pending activation, with consent.

Every error is :class:`FirmwareInputError`, one sentence that says what to fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from fabricops.errors import BadInput
from fabricops.model import _data


class FirmwareInputError(BadInput, ValueError):
    """A declaration that cannot be applied; str() is one sentence."""


# KEY as mlxconfig names its parameters (upper case, digits, '_'), or one element of an array
# parameter, KEY[N], the form `mlxconfig set` takes for arrays (whole-string match).
KEY = re.compile(r"[A-Z][A-Z0-9_]{0,63}(\[[0-9]{1,3}\])?")
# A value: a decimal or 0x hexadecimal number, a name mlxconfig prints (True, IB, ETH, ...), or the
# "NAME(N)" form `mlxconfig q` prints (declared as N).
_NUMBER = re.compile(r"[0-9]{1,10}|0[xX][0-9a-fA-F]{1,8}")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
_PRINTED = re.compile(r"([A-Za-z][A-Za-z0-9_]{0,31})?\(([0-9]{1,10})\)")
# An HCA name (mlx5_0), PCI address (0000:41:00.0), PSID (MT_0000000838), firmware version.
HCA = re.compile(r"[a-z][a-z0-9_]{0,31}")
BDF = re.compile(r"(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]")
PSID = re.compile(r"[A-Z]{2}_[0-9A-Za-z_]{4,16}")
VERSION = re.compile(r"[0-9]{1,3}\.[0-9]{1,4}\.[0-9]{1,5}")

RESET_METHODS = ("mlxfwreset", "reboot")
#: mlxfwreset's "Driver restart and PCI reset" level: activates new firmware and NVCONFIG without a
#: reboot (NVIDIA MFT documentation, mlxfwreset reset levels).
RESET_LEVEL = 3


def _presets() -> dict[str, Any]:
    return _data.load("nic_firmware_presets.yml")


def preset_names() -> list[str]:
    return sorted(_presets()["presets"])


def preset(name: str) -> dict[str, str]:
    """The settings of one preset (a copy)."""
    found = _presets()["presets"].get(name)
    if found is None:
        raise FirmwareInputError(
            f"nic_firmware_presets names {name!r}, which is not a preset (known: {', '.join(preset_names())})."
        )
    return {str(k): str(v) for k, v in found["config"].items()}


PRESETS = {name: preset(name) for name in preset_names()}


def check_key(where: str, key: Any) -> str:
    if not isinstance(key, str) or not KEY.fullmatch(key):
        raise FirmwareInputError(
            f"{where}: {key!r} is not an mlxconfig parameter name (upper case letters, digits and _, "
            "optionally [N])."
        )
    return key


def check_value(where: str, value: Any) -> str:
    """``value`` as ``mlxconfig set`` takes it: booleans -> 1/0, NAME(N) -> N, numbers and names as given."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int) and 0 <= value <= 0xFFFFFFFF:
        return str(value)
    if isinstance(value, str):
        printed = _PRINTED.fullmatch(value)
        if printed:
            return printed.group(2)
        if _NUMBER.fullmatch(value) or _NAME.fullmatch(value):
            return value
    raise FirmwareInputError(
        f"{where} is {value!r}; use a number (decimal or 0x hex), true/false or a name mlxconfig "
        "prints (IB, ETH, True)."
    )


def check_config(where: str, config: Any) -> dict[str, str]:
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise FirmwareInputError(f"{where} must be a mapping of mlxconfig KEY: value, not {type(config).__name__}.")
    return {check_key(where, k): check_value(f"{where}.{k}", v) for k, v in config.items()}


def declared(presets: Iterable[str] | None, config: Mapping[str, Any] | None,
             device_config: Mapping[str, Any] | None, device: str, ports: int = 1) -> dict[str, str]:
    """KEY -> value the device must hold in firmware; later wins: presets in order, config, device's own.

    Keys of the second port (``_P2``) are left out for a single-port device, as the NVIDIA NIC
    Configuration Operator does. Unknown preset, bad key or bad value -> :class:`FirmwareInputError`.
    """
    names = list(presets or [])
    if isinstance(presets, str):
        raise FirmwareInputError("nic_firmware_presets must be a list of preset names, not one string.")
    for pair in _presets().get("conflicts") or []:
        if all(p in names for p in pair):
            raise FirmwareInputError(
                f"nic_firmware_presets holds both {pair[0]} and {pair[1]}, which contradict each other."
            )
    out: dict[str, str] = {}
    for name in names:
        out.update(preset(str(name)))
    out.update(check_config("nic_firmware_config", config))
    per_device = device_config or {}
    if not isinstance(per_device, Mapping):
        raise FirmwareInputError("nic_firmware_device_config must map device names (mlx5_0) to settings.")
    for dev in per_device:
        if not isinstance(dev, str) or not HCA.fullmatch(dev):
            raise FirmwareInputError(f"nic_firmware_device_config: {dev!r} is not an HCA name like mlx5_0.")
    out.update(check_config(f"nic_firmware_device_config.{device}", per_device.get(device)))
    if ports < 2:
        out = {k: v for k, v in out.items() if not re.fullmatch(r"[A-Z0-9_]*_P2(\[[0-9]+\])?", k)}
    return out


# -- comparing what mlxconfig prints with what was declared -------------------------------------

def _number(value: Any) -> int | None:
    text = str(value).strip()
    printed = _PRINTED.fullmatch(text)
    if printed:
        return int(printed.group(2))
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", text):
        return int(text, 16)
    if text.upper() == "TRUE":
        return 1
    if text.upper() == "FALSE":
        return 0
    return None


def _name(value: Any) -> str:
    text = str(value).strip()
    printed = _PRINTED.fullmatch(text)
    return (printed.group(1) or "").upper() if printed else text.upper()


def same(a: Any, b: Any) -> bool:
    """Equal as mlxconfig means it: by number when both have one ("True(1)" == "1"), else by name."""
    na, nb = _number(a), _number(b)
    if na is not None and nb is not None:
        return na == nb
    return _name(a) == _name(b)


def config_plan(want: Mapping[str, str], query: Mapping[str, Any]) -> dict[str, Any]:
    """Compare the declared settings with a parsed ``mlxconfig -e q`` (fabricops.parsers.mlxconfig).

    ``set``: KEY -> value where the next-boot value differs from the declared one.
    ``reset_pending``: keys whose next boot holds the declared value (or will, after ``set``) but
    the running (current) configuration does not: they take effect after a firmware reset.
    ``unknown``: keys the device does not show - refused, except ``deferred`` ones:
    ``deferred``: keys hidden because ADVANCED_PCI_SETTINGS is not on in the current configuration
    while it is declared on (they can be set only after the reset that activates it).
    ``ok``: keys that hold the declared value now and at next boot.
    """
    configs = query.get("configs") or {}
    has_current = "current" in (query.get("columns") or [])
    adv = configs.get("ADVANCED_PCI_SETTINGS") or {}
    adv_declared = "ADVANCED_PCI_SETTINGS" in want and _number(want["ADVANCED_PCI_SETTINGS"]) == 1
    adv_current_on = _number(adv.get("current", adv.get("next", "0"))) == 1
    plan: dict[str, Any] = {"set": {}, "reset_pending": [], "unknown": [], "deferred": [], "ok": []}
    for key in sorted(want):
        value = want[key]
        row = configs.get(key)
        if row is None or "next" not in row:
            (plan["deferred"] if adv_declared and not adv_current_on else plan["unknown"]).append(key)
            continue
        if not same(row["next"], value):
            plan["set"][key] = value
        current = row.get("current") if has_current else None
        if current is None and not has_current:
            # `mlxconfig q` without -e: the running value is unknown; fail closed = pending
            plan["reset_pending"].append(key)
        elif not same(current, value):
            plan["reset_pending"].append(key)
        elif key not in plan["set"]:
            plan["ok"].append(key)
    if plan["deferred"] and "ADVANCED_PCI_SETTINGS" not in plan["reset_pending"]:
        plan["reset_pending"].append("ADVANCED_PCI_SETTINGS")
        plan["reset_pending"].sort()
    return plan


# -- firmware versions ----------------------------------------------------------------------------

def _fw(record: Mapping[str, Any]) -> tuple[str | None, str | None]:
    fw = (record.get("versions") or {}).get("FW") or {}
    burned = fw.get("current")
    return burned, fw.get("running") or burned


def check_pins(pins: Any, images: Any) -> None:
    for psid, version in dict(pins or {}).items():
        if not PSID.fullmatch(str(psid)):
            raise FirmwareInputError(f"nic_firmware_versions: {psid!r} is not a PSID like MT_0000000838.")
        if not VERSION.fullmatch(str(version)):
            raise FirmwareInputError(
                f"nic_firmware_versions.{psid} is {version!r}; use a firmware version like 28.43.1014."
            )
    for psid, image in dict(images or {}).items():
        if not PSID.fullmatch(str(psid)):
            raise FirmwareInputError(f"nic_firmware_images: {psid!r} is not a PSID like MT_0000000838.")
        if not isinstance(image, Mapping) or not image.get("url") or not re.fullmatch(
            r"[0-9a-fA-F]{64}", str(image.get("sha256") or "")
        ):
            raise FirmwareInputError(f"nic_firmware_images.{psid} needs a url and a sha256 (64 hex digits).")


def fw_plan(pins: Mapping[str, str] | None, records: Iterable[Mapping[str, Any]],
            images: Mapping[str, Mapping[str, str]] | None) -> list[dict[str, Any]]:
    """Per device of ``mlxfwmanager --query`` (fabricops.parsers.mlxfwmanager): what the pin asks.

    ``none``: burned and running are the pin. ``reset``: the pin is burned but not running - only
    an activation (mlxfwreset or reboot) is missing; never burn it again. ``burn``: the burned
    image is not the pin and an image for the PSID is declared. ``no_image``: it must be burned but
    no image is declared. ``unpinned``: no version is pinned for the PSID (not managed).
    """
    pins = dict(pins or {})
    images = dict(images or {})
    check_pins(pins, images)
    out = []
    for rec in records:
        psid = rec.get("psid")
        burned, running = _fw(rec)
        pinned = pins.get(psid) if psid else None
        if pinned is None:
            action = "unpinned"
        elif burned == pinned:
            action = "none" if running == pinned else "reset"
        elif psid in images:
            action = "burn"
        else:
            action = "no_image"
        out.append({"pci": rec.get("pci"), "psid": psid, "running": running, "burned": burned,
                    "pinned": pinned, "action": action})
    return out


# -- activation -----------------------------------------------------------------------------------

def _level_ok(levels: Any, level: int) -> bool:
    """Whether a parsed ``mlxfwreset -d DEV q`` (fabricops.parsers.mlxfwreset) supports ``level``."""
    if not isinstance(levels, Mapping):
        return False
    return any(int(lv.get("level", -1)) == level and lv.get("supported") for lv in levels.get("levels") or [])


def reset_plan(devices_pending: Iterable[str], allow_reset: bool = False, method: str = "mlxfwreset",
               allow_reboot: bool = False, levels: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What to do about devices whose firmware or configuration waits for an activation.

    ``levels``: device -> parsed ``mlxfwreset -d DEV q``. ``action``: ``none`` (nothing pending),
    ``pending`` (no consent: report, change nothing), ``mlxfwreset`` (reset each device at
    ``level``), ``reboot``, or ``refuse`` (consent given, but the method cannot be used and no
    reboot is allowed).
    """
    devices = sorted(set(devices_pending or []))
    if method not in RESET_METHODS:
        raise FirmwareInputError(f"nic_firmware_reset_method is {method!r}; use mlxfwreset or reboot.")
    if not devices:
        return {"action": "none", "message": "no firmware or firmware setting waits for a reset", "level": None}
    names = ", ".join(devices)
    if not allow_reset:
        return {
            "action": "pending",
            "message": f"{names}: the new firmware or settings take effect after a firmware reset; "
            "set nic_firmware_allow_reset=true to reset (mlxfwreset) or reboot",
            "level": None,
        }
    if method == "mlxfwreset":
        levels = levels or {}
        unsupported = [d for d in devices if not _level_ok(levels.get(d), RESET_LEVEL)]
        if not unsupported:
            return {"action": "mlxfwreset", "level": RESET_LEVEL,
                    "message": f"{names}: mlxfwreset level {RESET_LEVEL} (driver restart and PCI reset)"}
        if allow_reboot:
            return {"action": "reboot", "level": None,
                    "message": f"{', '.join(unsupported)}: mlxfwreset level {RESET_LEVEL} is not supported; "
                    "rebooting instead (nic_firmware_allow_reboot)"}
        return {"action": "refuse", "level": None,
                "message": f"{', '.join(unsupported)}: mlxfwreset level {RESET_LEVEL} is not supported and "
                "nic_firmware_allow_reboot is false; allow a reboot or reboot the host yourself"}
    if allow_reboot:
        return {"action": "reboot", "level": None, "message": f"{names}: rebooting to activate the firmware"}
    return {"action": "refuse", "level": None,
            "message": f"{names}: nic_firmware_reset_method is reboot but nic_firmware_allow_reboot is false"}
