# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters of the subnet_manager, nvidia_fabric_manager, nvidia_imex and gpudirect roles: thin shims over
fabricops.services (unit-tested without Ansible). Collection roles do not load role-embedded
plugins, so they live here.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import LazyModule, missing_package

try:
    from fabricops.errors import ParseError
except ImportError as exc:  # pragma: no cover - only without the Python package
    ParseError = Exception
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None
# imported on first use (plugin_utils/package.py, LazyModule: a worker per task loads this file)
_svc = LazyModule("fabricops.services")
_nvsmi = LazyModule("fabricops.parsers.nvidia_smi")
_sminfo = LazyModule("fabricops.parsers.sminfo")
_imex = LazyModule("fabricops.imex")


def _need():
    if IMPORT_ERROR is not None:
        raise AnsibleFilterError(missing_package("the fabric services filters", IMPORT_ERROR))


def _sminfo_record(text):
    try:
        return _sminfo.parse(text or "")
    except ParseError:
        return None


def sminfo_parse(text):
    """sminfo output -> {lid, guid, activity_count, priority, state, state_name} or None."""
    _need()
    rec = _sminfo_record(text)
    if rec is None:
        return None
    return {"lid": rec.lid, "guid": rec.guid, "activity_count": rec.activity_count,
            "priority": rec.priority, "state": rec.state, "state_name": rec.state_name}


def subnet_manager_plan_errors(sm_hosts, guids=None):
    """sm_hosts: {host: priority}; guids: {host: port guid} (optional)."""
    _need()
    guids = guids or {}
    plan = [{"host": h, "priority": p, "guid": guids.get(h)} for h, p in (sm_hosts or {}).items()]
    return _svc.plan_errors(plan)


def subnet_manager_routing_engine(topology, override=None):
    _need()
    try:
        return _svc.routing_engine(str(topology or ""), override or None)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def subnet_manager_bind_port(fabric, port_guid=None, hca=None):
    """{hca, port, netdev, state, phys_state, guid} or {"error": reason}."""
    _need()
    try:
        return _svc.bind_port(fabric or {}, port_guid or None, hca or None)
    except ValueError as exc:
        return {"error": str(exc)}


def subnet_manager_conf(guid, priority, engine, sweep_interval=10, log_file="/var/log/opensm.log",
                        partition_config_file="/etc/opensm/partitions.conf", header=""):
    _need()
    return _svc.render_conf(guid, int(priority), engine, sweep_interval=int(sweep_interval),
                            log_file=log_file, partition_config_file=partition_config_file,
                            header=header or "")


def subnet_manager_conflict(sminfo_text, priority, guid):
    """'' or why this SM must not start."""
    _need()
    return _svc.conflict(_sminfo_record(sminfo_text), int(priority), guid) or ""


def subnet_manager_verify(sminfo_text, fabric, expected_guid=None, expected_priority=None):
    _need()
    prio = None if expected_priority in (None, "") else int(expected_priority)
    return _svc.verify(_sminfo_record(sminfo_text), _svc.ib_ports(fabric or {}), expected_guid or None, prio)


def nvidia_smi_q_summary(text):
    """nvidia-smi -q -> {driver_version, nvswitch, gpus: [{pci_bus_id, fabric_state, fabric_status}]}."""
    _need()
    try:
        rep = _nvsmi.parse_q(text or "")
    except ParseError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    gpus = [{"pci_bus_id": g.pci_bus_id, "fabric_state": g.fabric_state, "fabric_status": g.fabric_status}
            for g in rep.gpus]
    return {"driver_version": rep.driver_version, "nvswitch": _svc.is_nvswitch_system(gpus), "gpus": gpus,
            "fabric_errors": _svc.fabric_errors(gpus)}


def fabric_manager_package(driver_version, pattern="nvidia-fabricmanager-{branch}"):
    _need()
    try:
        return _svc.fm_package(str(driver_version), pattern)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def fabric_manager_installed(listing, package):
    """One package of a ``dpkg-query -W`` listing (fabricops.services.fm_installed)."""
    _need()
    return _svc.fm_installed(str(listing or ""), str(package))


def apt_packages_versions(text, package):
    """Versions of a package in an apt ``Packages`` index or ``apt-cache madison`` output."""
    versions = []
    current = None
    for line in (text or "").replace("\r", "").splitlines():
        if "|" in line:  # madison: "pkg | version | source"
            parts = [p.strip() for p in line.split("|")]
            if len(parts) >= 2 and parts[0] == package:
                versions.append(parts[1])
            continue
        if line.startswith("Package:"):
            current = line.split(":", 1)[1].strip()
        elif line.startswith("Version:") and current == package:
            versions.append(line.split(":", 1)[1].strip())
    return sorted(set(versions))


def versionlock_versions(text, package):
    """The versions dnf's versionlock list locks a package to (fabricops.services.versionlock_versions)."""
    _need()
    return _svc.versionlock_versions(str(text or ""), str(package))


def fabric_manager_choice(driver_version, available, installed=None):
    _need()
    try:
        return _svc.fm_choice(str(driver_version), list(available or []), installed or None)
    except ValueError as exc:
        return {"ok": False, "version": None, "change": False, "msg": str(exc)}


def fabric_services(profile):
    """The host services of a hardware profile's platform (gpu_platforms.yml): ``{platform, services,
    fabric_manager}``; ``{platform: None, services: [], fabric_manager: None}`` for a profile naming none."""
    _need()
    try:
        row = _svc.profile_services(str(profile)) if profile else None
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    if row is None:
        return {"platform": None, "services": [], "fabric_manager": None}
    return {"platform": row.platform, "services": list(row.services), "fabric_manager": row.fabric_manager}


def fabric_manager_refusal(profile, host):
    """'' or the sentence refusing the host fabric manager on this profile (fabricops.services.fm_refusal)."""
    _need()
    return _svc.fm_refusal(str(host), str(profile or ""))


def fabric_manager_companions(listing, profile, driver_version):
    """Packages to install beside the fabric manager (fabricops.services.fm_companions)."""
    _need()
    try:
        return _svc.fm_companions(str(profile or ""), str(driver_version), str(listing or ""))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def fabric_manager_companion_patterns(profile):
    """dpkg-query patterns of those packages (fabricops.services.fm_companion_patterns)."""
    _need()
    try:
        return _svc.fm_companion_patterns(str(profile or ""))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def lsmod_modules(text):
    _need()
    return _svc.lsmod_modules(text or "")


# --- nvidia_imex (fabricops.imex) ---------------------------------------------------------------

def imex_refusal(profile, host):
    """'' or the sentence refusing IMEX on this profile (fabricops.imex.refusal)."""
    _need()
    return _imex.refusal(str(host), str(profile or ""))


def imex_domain(names, hostvars, host, profile, domain=None, address=None):
    """The NVLink domain of ``host`` among the inventory hosts ``names`` (``groups['all']``), read from
    their ``fabricops_nvlink_domain`` and address (fabricops.imex.domain): ``{domain, nodes, hosts,
    errors}``. A profile that does not load is an error, not an exception (the first task
    names it)."""
    _need()
    members = {}
    for name in names or []:
        hv = hostvars[name]
        members[str(name)] = {"domain": hv.get("fabricops_nvlink_domain"),
                              "address": _imex.member_address(hv, str(name))}
    if domain is not None:  # the host's own values as the role sees them (any precedence)
        own = address or members.get(str(host), {}).get("address")
        members[str(host)] = {"domain": domain, "address": own}
    try:
        max_nodes = _imex.profile_max_nodes(str(profile)) if profile else None
    except ValueError as exc:
        return {"domain": None, "nodes": [], "hosts": {}, "errors": [f"{host}: {exc}"]}
    return _imex.domain(str(host), members, max_nodes, str(profile or ""))


def imex_config(settings):
    """``{text, error}``: the owned config.cfg settings rendered (fabricops.imex.render_config), or why."""
    _need()
    s = dict(settings or {})
    try:
        values = _imex.config_values(
            node_config_file=str(s.get("node_config_file") or ""),
            server_port=int(s.get("server_port")),
            cmd_enabled=bool(s.get("cmd_enabled")),
            cmd_port=int(s.get("cmd_port")),
            wait_for_quorum=str(s.get("wait_for_quorum") or ""),
            bind_interface_ip=str(s.get("bind_interface_ip") or ""),
        )
    except (TypeError, ValueError) as exc:
        return {"text": "", "error": str(exc)}
    return {"text": _imex.render_config(values), "error": ""}


def imex_nodes(nodes):
    """nodes_config.cfg text: one IP address a line (fabricops.imex.render_nodes)."""
    _need()
    try:
        return _imex.render_nodes(list(nodes or []))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def imex_channel_plan(proc_devices, stat, minor=0):
    """What to do for the IMEX channel device (fabricops.imex.channel_plan)."""
    _need()
    return _imex.channel_plan(str(proc_devices or ""), dict(stat or {}), int(minor))


def imex_package(driver_version):
    """nvidia-imex-<branch> for a driver version (the fabric services table)."""
    _need()
    try:
        return _imex.package_name(str(driver_version))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def imex_choice(driver_version, available, installed=None):
    """The IMEX package version: exactly the driver's (fabricops.imex.package_choice)."""
    _need()
    try:
        return _imex.package_choice(str(driver_version), list(available or []), installed or None)
    except ValueError as exc:
        return {"ok": False, "version": None, "change": False, "msg": str(exc)}


class FilterModule:
    def filters(self):
        return {
            "sminfo_parse": sminfo_parse,
            "subnet_manager_plan_errors": subnet_manager_plan_errors,
            "subnet_manager_routing_engine": subnet_manager_routing_engine,
            "subnet_manager_bind_port": subnet_manager_bind_port,
            "subnet_manager_conf": subnet_manager_conf,
            "subnet_manager_conflict": subnet_manager_conflict,
            "subnet_manager_verify": subnet_manager_verify,
            "nvidia_smi_q_summary": nvidia_smi_q_summary,
            "fabric_manager_package": fabric_manager_package,
            "fabric_manager_installed": fabric_manager_installed,
            "apt_packages_versions": apt_packages_versions,
            "fabric_manager_choice": fabric_manager_choice,
            "versionlock_versions": versionlock_versions,
            "lsmod_modules": lsmod_modules,
            "fabric_services": fabric_services,
            "fabric_manager_refusal": fabric_manager_refusal,
            "fabric_manager_companions": fabric_manager_companions,
            "fabric_manager_companion_patterns": fabric_manager_companion_patterns,
            "imex_refusal": imex_refusal,
            "imex_domain": imex_domain,
            "imex_config": imex_config,
            "imex_nodes": imex_nodes,
            "imex_channel_plan": imex_channel_plan,
            "imex_package": imex_package,
            "imex_choice": imex_choice,
        }
