# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters of the fabricops.fabric collection: thin shims over the fabricops package.

The logic lives in plain, unit-tested Python (kolla-ansible's ``filter_plugins/address.py`` is the
model); these functions only adapt arguments and turn package errors into AnsibleFilterError.
Other roles may add their filters here.
"""

from __future__ import annotations

import importlib
import os

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.utils.display import Display
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import LazyModule, missing_package

try:
    importlib.import_module("fabricops.errors")  # is the package there at all
except ImportError as exc:  # pragma: no cover - only without the Python package
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None
# imported on first use (plugin_utils/package.py, LazyModule: a worker per task loads this file)
_errors = LazyModule("fabricops.errors")
_ipoib = LazyModule("fabricops.ipoib")
_nccl = LazyModule("fabricops.nccl")
_platforms = LazyModule("fabricops.platforms")
_validate = LazyModule("fabricops.validate")


def _need_package():
    if IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            missing_package("fabricops.fabric filters", IMPORT_ERROR)
        )


def _plain(value):
    """Ansible's lazy/tagged containers -> plain dicts, lists and scalars."""
    if isinstance(value, dict) or hasattr(value, "keys"):
        return {str(k): _plain(value[k]) for k in value}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    return value


def _nccl_kwargs(roce, socket_ifname, overrides, allow_benchmark, gpudirect=False, plan=None):
    kwargs = {
        "roce": _plain(roce) or None,
        "socket_ifname": str(socket_ifname) if socket_ifname else None,
        "overrides": _plain(overrides) or {},
        # -e key=value gives strings: "false" must not switch the benchmark settings on.
        "allow_benchmark": boolean(allow_benchmark, strict=True) if allow_benchmark is not None else False,
        # nccl_profile_gpudirect: a bool from the role's lsmod check, or "false" from -e
        "gpudirect": boolean(gpudirect, strict=True) if gpudirect is not None else False,
    }
    plan = _plain(plan) or {}
    if not isinstance(plan, dict):
        raise AnsibleFilterError(
            "the NCCL plan must be a dict (nccl_version, cabling, host, cross_nic, net_plugin)"
        )
    unknown = set(plan) - {"nccl_version", "cabling", "host", "cross_nic", "net_plugin"}
    if unknown:
        raise AnsibleFilterError(f"the NCCL plan has unknown keys: {', '.join(sorted(unknown))}")
    for key in ("nccl_version", "host", "net_plugin"):
        if plan.get(key) not in (None, ""):
            kwargs[key] = str(plan[key])
    if plan.get("cabling"):
        kwargs["cabling"] = plan["cabling"]
    if "cross_nic" in plan:
        value = plan["cross_nic"]
        kwargs["cross_nic"] = "auto" if value in ("", "auto") else value
    return kwargs


def nccl_env(facts, profile, roce=None, socket_ifname=None, overrides=None, allow_benchmark=False,
             gpudirect=False, plan=None):
    """``ansible_facts.fabric | fabricops.fabric.nccl_env('roce', fabricops_roce, ...)`` -> env dict."""
    _need_package()
    try:
        return _nccl.nccl_env(
            str(profile), _plain(facts) or {},
            **_nccl_kwargs(roce, socket_ifname, overrides, allow_benchmark, gpudirect, plan),
        )
    except _nccl.NcclProfileError as exc:
        raise AnsibleFilterError(str(exc)) from None


def nccl_profile_errors(facts, profile, roce=None, socket_ifname=None, overrides=None, allow_benchmark=False,
                        gpudirect=False, plan=None):
    """[] or [one-line reason]: the preflight's assert reads this."""
    _need_package()
    try:
        kwargs = _nccl_kwargs(roce, socket_ifname, overrides, allow_benchmark, gpudirect, plan)
    except AnsibleFilterError as exc:
        return [str(exc)]
    return _nccl.nccl_errors(str(profile), _plain(facts) or {}, **kwargs)


def nccl_profile_notes(facts, profile, roce=None, socket_ifname=None, overrides=None, allow_benchmark=False,
                       gpudirect=False, plan=None):
    """What the profile chose on this host and why, one sentence each (the role prints them)."""
    _need_package()
    return _nccl.nccl_notes(
        str(profile), _plain(facts) or {},
        **_nccl_kwargs(roce, socket_ifname, overrides, allow_benchmark, gpudirect, plan),
    )


def nccl_installed_version(paths):
    """File paths (``find`` results or names) -> the newest ``libnccl.so.2.X.Y`` as '2.X.Y', or ''."""
    _need_package()
    items = _plain(paths) or []
    names = [i.get("path", "") if isinstance(i, dict) else str(i) for i in items]
    return _nccl.installed_version(names) or ""


def nccl_socket_ifname_default(ansible_facts, route=None):
    _need_package()
    return _nccl.socket_ifname_default(_plain(ansible_facts), None if route is None else str(route))


def _ipoib_kwargs(plan, host_index, addresses, interfaces, facts, mode, mtu, ib_mtu):
    return {
        "plan": _plain(plan) or {},
        "host_index": _plain(host_index),
        "addresses": _plain(addresses) or {},
        "interfaces": _plain(interfaces) or [],
        "facts": _plain(facts) or {},
        "defaults": {"mode": mode, "mtu": _plain(mtu), "ib_mtu": _plain(ib_mtu)},
    }


def ipoib_interfaces(host, plan=None, host_index=None, addresses=None, interfaces=None, facts=None,
                     mode="datagram", mtu=None, ib_mtu=4096):
    """The IPoIB interfaces of ``host`` (see fabricops.ipoib.host_interfaces)."""
    _need_package()
    try:
        return _ipoib.host_interfaces(
            str(host), **_ipoib_kwargs(plan, host_index, addresses, interfaces, facts, mode, mtu, ib_mtu)
        )
    except _ipoib.IpoibPlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


def ipoib_plan_errors(host, plan=None, host_index=None, addresses=None, interfaces=None, facts=None,
                      mode="datagram", mtu=None, ib_mtu=4096):
    _need_package()
    return _ipoib.plan_errors(
        str(host), **_ipoib_kwargs(plan, host_index, addresses, interfaces, facts, mode, mtu, ib_mtu)
    )


def ipoib_conflicts(hostvars, hosts, host, own_interfaces, plan=None):
    """Address clashes between ``host``'s interfaces and the other ``hosts``' planned ones.

    Other hosts' plans are computed from their inventory variables (``ipoib_plan``,
    ``ipoib_host_index``, ``ipoib_addresses``, ``ipoib_interfaces``), so this works with
    ``serial`` batches too; a host whose own plan is invalid is skipped (it fails on its own).
    ``plan`` (this host's ``ipoib_plan``) stands in for hosts whose hostvars lack one (a play var).
    """
    _need_package()
    plans = {str(host): _plain(own_interfaces) or []}
    for other in hosts:
        other = str(other)
        if other == str(host):
            continue
        hv = hostvars[other]
        try:
            plans[other] = _ipoib.host_interfaces(
                other,
                plan=_plain(hv.get("ipoib_plan")) or _plain(plan) or {},
                host_index=_plain(hv.get("ipoib_host_index")),
                addresses=_plain(hv.get("ipoib_addresses")) or {},
                interfaces=_plain(hv.get("ipoib_interfaces")) or [],
                defaults={"mode": hv.get("ipoib_mode") or "datagram", "mtu": None,
                          "ib_mtu": _plain(hv.get("ipoib_ib_mtu")) or 4096},
                check_devices=False,
            )
        except _ipoib.IpoibPlanError:
            continue
    return _ipoib.address_conflicts(plans, host=str(host))


def ipoib_backend(read, host, interfaces=None):
    """The ipoib role's backend from its preflight ``host_read`` result: ``{"name": networkmanager |
    netplan | ifupdown | none, "refusal": "" or one sentence}`` (fabricops.ipoib.choose_backend)."""
    _need_package()
    read = _plain(read) or {}
    ifaces = _plain(interfaces) or []
    return {"name": _ipoib.choose_backend(read), "refusal": _ipoib.backend_refusal(str(host), read, ifaces)}


def ipoib_netplan(interfaces):
    """The netplan backend's file: the planned interfaces as one netplan YAML document."""
    _need_package()
    try:
        return _ipoib.netplan_yaml(_plain(interfaces) or [])
    except _ipoib.IpoibPlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


def ipoib_pending(interfaces, netdevs, ansible_facts=None, ip_addr=None):
    """Interfaces to re-activate. ``ip_addr``: the live addresses, ``ip -j addr show`` as a
    command result of host_read ({rc, stdout, stderr}) or its stdout; without it, ``ansible_facts``
    from a network ``setup``."""
    _need_package()
    addresses = None
    if ip_addr is not None:
        result = _plain(ip_addr) if hasattr(ip_addr, "keys") else {"rc": 0, "stdout": str(ip_addr)}
        if result.get("rc") != 0:
            detail = str(result.get("stderr") or result.get("stdout") or "no output").strip()[:200]
            raise AnsibleFilterError(
                f"cannot read the live addresses: `ip -j addr show` exited {result.get('rc')} ({detail}); "
                "the ipoib role needs iproute2 4.13 or newer"
            )
        try:
            addresses = _ipoib.primary_ipv4(str(result.get("stdout") or ""))
        except _errors.FabricopsError as exc:
            raise AnsibleFilterError(f"cannot read the live addresses: {exc}") from None
    return _ipoib.pending_changes(
        _plain(interfaces) or [], _plain(netdevs) or {}, _plain(ansible_facts) or {}, addresses
    )


def unsafe_role_vars(names, values=None):
    """One sentence per role variable whose value could inject into what the role renders.

    ``query('ansible.builtin.varnames', '^ROLE_') | fabricops.fabric.unsafe_role_vars(
    query('ansible.builtin.vars', *names))``: the names and their values (fabricops.validate)."""
    _need_package()
    if values is None:
        pairs = _plain(names) or {}
    else:
        names, values = list(names or []), list(values or [])
        if len(names) != len(values):
            raise AnsibleFilterError("unsafe_role_vars: names and values differ in length")
        pairs = {str(n): _plain(v) for n, v in zip(names, values, strict=True)}
    return _validate.role_errors(pairs)


def warn_unknown_role_vars(names, role_path):
    """``names`` unchanged; one warning per name the role at ``role_path`` does not declare.

    ``query('ansible.builtin.varnames', '^ROLE_') | fabricops.fabric.warn_unknown_role_vars(role_path)``
    in a role's first task: a misspelt variable (``mlnx_ofed_allow_restrat: true``) would otherwise
    be ignored without a word. The warning names no host, so Ansible prints it once per run."""
    _need_package()
    names = [str(n) for n in (names or [])]
    role = os.path.basename(str(role_path).rstrip("/"))
    for sentence in _validate.unknown_role_vars(role, names, _validate.role_known_vars(str(role_path))):
        Display().warning(sentence)
    return names


def platform_refusal(ansible_facts, role, allow_untested=False):
    """'' when ROLE supports this host; else one sentence (fabricops.platforms, the one table).

    ``ansible_facts | fabricops.fabric.platform_refusal('ipoib', fabricops_allow_untested_platform
    | default(false))``; ``allow_untested`` as a string from ``-e`` ("false") is read as Ansible does."""
    _need_package()
    try:
        allow = boolean(allow_untested, strict=True) if allow_untested is not None else False
    except TypeError as exc:
        raise AnsibleFilterError(f"fabricops_allow_untested_platform: {exc}") from None
    try:
        return _platforms.refusal(str(role), _plain(ansible_facts) or {}, allow)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {
            "nccl_env": nccl_env,
            "nccl_profile_errors": nccl_profile_errors,
            "nccl_profile_notes": nccl_profile_notes,
            "nccl_installed_version": nccl_installed_version,
            "nccl_socket_ifname_default": nccl_socket_ifname_default,
            "ipoib_interfaces": ipoib_interfaces,
            "warn_unknown_role_vars": warn_unknown_role_vars,
            "ipoib_plan_errors": ipoib_plan_errors,
            "ipoib_conflicts": ipoib_conflicts,
            "ipoib_pending": ipoib_pending,
            "ipoib_backend": ipoib_backend,
            "ipoib_netplan": ipoib_netplan,
            "unsafe_role_vars": unsafe_role_vars,
            "platform_refusal": platform_refusal,
        }
