# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters of the nic_firmware role: thin shims over fabricops.firmware and the MFT parsers.

Collection roles do not load role-embedded plugins, so they live here (file of the nic_firmware role).
"""

from __future__ import annotations

import posixpath
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import LazyModule, missing_package

try:
    from fabricops.errors import FabricopsError
except ImportError as exc:  # pragma: no cover - only without the Python package
    FabricopsError = Exception
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None
# imported on first use (plugin_utils/package.py, LazyModule: a worker per task loads this file)
_fw = LazyModule("fabricops.firmware")
_mlxfwmanager = LazyModule("fabricops.parsers.mlxfwmanager")
_mlxfwreset = LazyModule("fabricops.parsers.mlxfwreset")


def _need_package():
    if IMPORT_ERROR is not None:
        raise AnsibleFilterError(missing_package("the nic_firmware filters", IMPORT_ERROR))


def _plain(value):
    if isinstance(value, dict) or hasattr(value, "keys"):
        return {str(k): _plain(value[k]) for k in value}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def card(bdf):
    """The device's function 0 (a dual-port ConnectX is one card behind functions .0 and .1)."""
    bdf = str(bdf or "")
    return bdf[:-1] + "0" if re.fullmatch(r".*\.[0-7]", bdf) else bdf


def nic_firmware_bdf(link_source, uevent=""):
    """The PCI address of an HCA: the basename of /sys/class/infiniband/DEV/device's target, else
    PCI_SLOT_NAME of its uevent; '' when neither says (the role then fails, naming the device)."""
    _need_package()
    for candidate in (posixpath.basename(str(link_source or "").rstrip("/")),):
        if _fw.BDF.fullmatch(candidate):
            return candidate
    for line in str(uevent or "").splitlines():
        key, _sep, value = line.partition("=")
        if key.strip() == "PCI_SLOT_NAME" and _fw.BDF.fullmatch(value.strip()):
            return value.strip()
    return ""


def nic_firmware_declared(hca, presets=None, config=None, device_config=None):
    """The settings one HCA (a fabric_facts hcas[] entry) must hold (fabricops.firmware.declared)."""
    _need_package()
    hca = _plain(hca or {})
    try:
        return _fw.declared(_plain(presets or []), _plain(config or {}), _plain(device_config or {}),
                            str(hca.get("name")), ports=len(hca.get("ports") or []) or 1)
    except FabricopsError as exc:
        raise AnsibleFilterError(str(exc)) from None


def nic_firmware_fw_plan(query_stdout, pins=None, images=None, pcis=None):
    """``mlxfwmanager --query`` text, or its command result (host_read: rc, stdout, stderr) ->
    fabricops.firmware.fw_plan for the cards of ``pcis``. A failed query fails, naming its error."""
    _need_package()
    if hasattr(query_stdout, "keys"):
        result = _plain(query_stdout)
        if result.get("rc") != 0:
            detail = str(result.get("stderr") or result.get("stdout") or "no output").strip()[:200]
            raise AnsibleFilterError(
                f"mlxfwmanager --query exited {result.get('rc')} ({detail}): no firmware evidence."
            )
        query_stdout = result.get("stdout")
    try:
        records = _mlxfwmanager.parse_query(str(query_stdout or ""))
        wanted = {card(p) for p in _plain(pcis or [])}
        records = [r for r in records if card(r.get("pci")) in wanted]
        found = {card(r.get("pci")) for r in records}
        missing = sorted(wanted - found)
        if missing:
            raise AnsibleFilterError(
                f"mlxfwmanager --query does not list {', '.join(missing)}: no firmware evidence for it."
            )
        return _fw.fw_plan(_plain(pins or {}), records, _plain(images or {}))
    except FabricopsError as exc:
        raise AnsibleFilterError(str(exc)) from None


def nic_firmware_reset_plan(pending, allow_reset=False, method="mlxfwreset", allow_reboot=False, levels=None):
    """``levels``: registered ``mlxfwreset -d BDF q`` results (loop results with ``item`` = BDF)."""
    _need_package()
    parsed = {}
    for res in _plain(levels or []):
        if res.get("skipped") or res.get("rc", 1) != 0:
            continue  # no evidence: the level counts as unsupported (fail closed)
        try:
            device = str(res.get(res.get("ansible_loop_var") or "item"))
            parsed[device] = _mlxfwreset.parse_query(str(res.get("stdout") or ""))
        except FabricopsError:
            continue
    try:
        return _fw.reset_plan(
            [card(p) for p in _plain(pending or [])],
            allow_reset=boolean(allow_reset, strict=True),
            method=str(method),
            allow_reboot=boolean(allow_reboot, strict=True),
            levels=parsed,
        )
    except FabricopsError as exc:
        raise AnsibleFilterError(str(exc)) from None


def nic_firmware_state(devices, config_results=None, fw_plan=None):
    """D1's nic_firmware_state: device -> pci, psid, fw_running, fw_burned, fw_pinned, fw_action,
    config_drift, reset_pending.

    ``devices``: [{name, pci, declared}]; ``config_results``: the registered mlxconfig loop (item =
    device entry); ``fw_plan``: nic_firmware_fw_plan's list.
    """
    by_card = {card(p.get("pci")): p for p in _plain(fw_plan or [])}
    results = {}
    for res in _plain(config_results or []):
        item = res.get(res.get("ansible_loop_var") or "item") or {}
        results[str(item.get("name"))] = res
    state = {}
    for dev in _plain(devices or []):
        res = results.get(dev["name"]) or {}
        fwp = by_card.get(card(dev.get("pci"))) or {}
        # declared keys whose next-boot value is not the declared one (to set, or hidden until a reset)
        drift = sorted(k for k in (dev.get("declared") or {})
                       if k in _changed_keys(res) or k in (res.get("deferred") or []))
        pending = list(res.get("reset_pending") or [])
        if fwp.get("action") == "reset":
            pending.append("FW")
        state[dev["name"]] = {
            "pci": dev.get("pci"),
            "psid": fwp.get("psid"),
            "fw_running": fwp.get("running"),
            "fw_burned": fwp.get("burned"),
            "fw_pinned": fwp.get("pinned"),
            "fw_action": fwp.get("action"),
            "config_drift": drift,
            "reset_pending": pending,
        }
    return state


def _changed_keys(res):
    keys = set()
    for cmd in res.get("commands") or []:
        for word in str(cmd).split():
            if "=" in word:
                keys.add(word.split("=", 1)[0])
    return keys


class FilterModule:
    def filters(self):
        return {
            "nic_firmware_bdf": nic_firmware_bdf,
            "nic_firmware_declared": nic_firmware_declared,
            "nic_firmware_fw_plan": nic_firmware_fw_plan,
            "nic_firmware_reset_plan": nic_firmware_reset_plan,
            "nic_firmware_state": nic_firmware_state,
        }
