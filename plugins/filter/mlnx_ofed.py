# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters of the mlnx_ofed role: thin shims over fabricops.ofed (unit-tested, no Ansible there).

Collection roles do not load role-embedded plugins, so they live here (file of the mlnx_ofed role).
"""

from __future__ import annotations

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
_doca = LazyModule("fabricops.doca")
_ofed = LazyModule("fabricops.ofed")
_dkms_parser = LazyModule("fabricops.parsers.dkms")
_mokutil = LazyModule("fabricops.parsers.mokutil")


def _need_package():
    if IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            missing_package("the mlnx_ofed filters", IMPORT_ERROR)
        )


def _str(value):
    return "" if value is None else str(value)


def _list(value):
    if value is None or isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value]


def mlnx_ofed_input_errors(version, method, tarball_url=None, tarball_sha256=None, iso_url=None,
                           iso_sha256=None, repo_url=None, add_kernel_support=False, distro=None,
                           skip_distro_check=False, restart_method="openibd", repo_trusted=False,
                           repo_signed_by=None, repo_key_url=None, repo_key_sha256=None, doca=None):
    """[] or one-line reasons (the preflight asserts on the first). ``doca``: the doca method's inputs
    (version, profile, repo_url, key_url, key_sha256, signed_by, dkms_kernels, secure_boot_enroll,
    mok_password)."""
    _need_package()
    return _ofed.input_errors(
        _str(version) or None, _str(method), tarball_url=tarball_url, tarball_sha256=tarball_sha256,
        iso_url=iso_url, iso_sha256=iso_sha256, repo_url=repo_url,
        add_kernel_support=bool(add_kernel_support), distro=_str(distro) or None,
        skip_distro_check=bool(skip_distro_check), restart_method=_str(restart_method),
        repo_trusted=boolean(repo_trusted, strict=True) if repo_trusted is not None else False,
        repo_signed_by=_str(repo_signed_by) or None, repo_key_url=_str(repo_key_url) or None,
        repo_key_sha256=_str(repo_key_sha256) or None, doca=dict(doca or {}),
    )


def mlnx_ofed_repo_keyring(signed_by=None, key_url=None):
    """The keyring path for the apt source's signed-by ('' when trusted=yes is used instead)."""
    _need_package()
    return _ofed.repo_keyring(_str(signed_by) or None, _str(key_url) or None) or ""


def mlnx_ofed_installed_version(result):
    """A registered ``ofed_info -s`` result -> '24.10-1.1.4.0' or '' (not installed)."""
    _need_package()
    result = result or {}
    if result.get("skipped"):
        return ""
    rc = result.get("rc", 1)
    try:
        return _ofed.installed_version(_str(result.get("stdout")), int(rc) if rc is not None else 1) or ""
    except FabricopsError as exc:
        raise AnsibleFilterError(f"ofed_info -s printed something that is not a version: {exc}") from None


def mlnx_ofed_action(installed, wanted):
    _need_package()
    return _ofed.install_action(_str(installed) or None, _str(wanted))


def mlnx_ofed_dist_dir(url):
    _need_package()
    return _ofed.dist_dir(_str(url))


def mlnx_ofed_kernels_from_debs(names):
    _need_package()
    return _ofed.kernels_from_debs(_list(names))


def mlnx_ofed_kernels_from_depends(text):
    _need_package()
    return _ofed.kernels_from_depends(_str(text))


def mlnx_ofed_kernel_check(running, built_for, add_kernel_support=False, method="tarball", version=""):
    _need_package()
    return _ofed.kernel_check(_str(running), _list(built_for), bool(add_kernel_support), _str(method),
                              _str(version))


def mlnx_ofed_distro_check(host, build, user_distro=None, skip=False):
    _need_package()
    return _ofed.distro_check(_str(host), _str(build), _str(user_distro) or None, bool(skip))


def mlnx_ofed_installer_args(distro_args=None, add_kernel_support=False, fw_update=False, tmpdir=None,
                             extra=None):
    _need_package()
    return _ofed.installer_args(distro_args=_list(distro_args), add_kernel_support=bool(add_kernel_support),
                                fw_update=bool(fw_update), tmpdir=_str(tmpdir) or None, extra=_list(extra))


def mlnx_ofed_installer_result(result):
    """A registered mlnxofedinstall result -> {ok, restart_needed, error}."""
    _need_package()
    result = result or {}
    return _ofed.installer_result(int(result.get("rc", 1)), _str(result.get("stdout")),
                                  _str(result.get("stderr")))


def mlnx_ofed_stack_holders(text):
    _need_package()
    try:
        return _ofed.stack_holders(_str(text))
    except FabricopsError as exc:
        raise AnsibleFilterError(str(exc)) from None


def mlnx_ofed_pending(marker, boot_id):
    _need_package()
    return _ofed.pending_from_marker(_str(marker) or None, _str(boot_id) or None) or ""


def mlnx_ofed_restart_reasons(installer_restart, action, version, conf_changed, pending, method="tarball",
                              dkms=""):
    _need_package()
    return _ofed.restart_reasons(bool(installer_restart), _str(action), _str(version), _list(conf_changed),
                                 _str(pending) or None, _str(method), _str(dkms) or None)


def mlnx_ofed_restart_plan(reasons, holders=None, allow_restart=False, allow_unload_users=False,
                           allow_reboot=False, method="openibd", host="", blocked=""):
    _need_package()
    return _ofed.restart_plan(
        _list(reasons), holders=_list(holders), allow_restart=bool(allow_restart),
        allow_unload_users=bool(allow_unload_users), allow_reboot=bool(allow_reboot), method=_str(method),
        host=_str(host), blocked=_str(blocked) or None,
    )


# --- DOCA-Host (method doca) ----------------------------------------------------------------------

def _rc(result):
    rc = (result or {}).get("rc", 1)
    return int(rc) if rc is not None else 1


def mlnx_ofed_doca_repo_url(version, distribution, major, dist_version, arch, override=""):
    """NVIDIA's DOCA-Host apt URL for this release/OS/arch, or the mirror ``override``."""
    _need_package()
    try:
        return _doca.repo_url(_str(version), _str(distribution), _str(major), _str(dist_version), _str(arch),
                              _str(override) or None)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


def mlnx_ofed_headers_package(kernel, ansible_facts):
    """The headers package of kernel release KERNEL on this host (fabricops.platforms, the one table):
    ``linux-headers-K`` on Debian/Ubuntu (64k kernels too), ``kernel-devel-K`` / ``kernel-64k-devel-``
    on EL."""
    _need_package()
    facts = dict(ansible_facts) if ansible_facts else None
    try:
        return _doca.headers_package(_str(kernel), facts)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


def mlnx_ofed_doca_keyring(signed_by=""):
    _need_package()
    return _doca.keyring(_str(signed_by) or None)


def mlnx_ofed_doca_state(ofed_info, dpkg_query, madison, url, doca_version, profile, allow_stack_change=False,
                         host=""):
    """Registered ofed_info -s, dpkg-query and apt-cache madison results -> the doca preflight decision."""
    _need_package()
    try:
        return _doca.state(
            _str((ofed_info or {}).get("stdout")), _rc(ofed_info), _str((dpkg_query or {}).get("stdout")),
            _rc(dpkg_query), _str((madison or {}).get("stdout")), _str(url), doca_version=_str(doca_version),
            profile=_str(profile), allow_stack_change=boolean(allow_stack_change, strict=True),
            host=_str(host))
    except FabricopsError as exc:
        raise AnsibleFilterError(f"ofed_info -s printed something that is not a version: {exc}") from None


def mlnx_ofed_stack_kind(result):
    """A registered ``ofed_info -s`` result -> ``mlnx_ofed``, ``doca`` or '' (none / cannot tell)."""
    _need_package()
    result = result or {}
    if result.get("skipped") or _rc(result) != 0:
        return ""
    try:
        return _doca.stack_kind(_str(result.get("stdout"))) or ""
    except FabricopsError as exc:
        raise AnsibleFilterError(f"ofed_info -s printed something that is not a version: {exc}") from None


def _dkms_status(result):
    result = result or {}
    if result.get("skipped") or _rc(result) != 0:
        return []
    return _dkms_parser.parse_status(_str(result.get("stdout")))


def mlnx_ofed_dkms_plan(dkms_status, vmlinuz, running, kernels, with_headers, method="doca",
                        check_mode=False):
    """A registered ``dkms status`` result and the kernels -> which kernels need the DKMS modules built."""
    _need_package()
    try:
        status = _dkms_status(dkms_status)
    except FabricopsError as exc:
        raise AnsibleFilterError(f"dkms status printed something unreadable: {exc}") from None
    return _doca.dkms_plan(status, _list(vmlinuz), _str(running), _list(kernels), _list(with_headers),
                           method=_str(method), check_mode=bool(check_mode))


def mlnx_ofed_secure_boot_plan(sb_state, test_key, enroll=False, host="", queued=False):
    """Registered ``mokutil --sb-state`` / ``mokutil --test-key`` results -> the Secure Boot plan
    (``secure_boot``: true/false/null and ``key`` added). ``queued``: the role queued the enrollment in
    this boot (its marker)."""
    _need_package()
    sb_state, test_key = sb_state or {}, test_key or {}
    try:
        if sb_state.get("skipped"):
            on = None  # no mokutil on a host without EFI (the role asserts that first): no Secure Boot
        else:
            on = _mokutil.parse_sb_state(f"{_str(sb_state.get('stdout'))}\n{_str(sb_state.get('stderr'))}")
        key = None
        if queued:
            key = "queued"
        elif on and not test_key.get("skipped"):
            enrolled = _mokutil.parse_test_key(_str(test_key.get("stdout")) or _str(test_key.get("stderr")))
            key = "enrolled" if enrolled else "not_enrolled"
    except FabricopsError as exc:
        raise AnsibleFilterError(
            f"mokutil printed something unreadable (Secure Boot unknown): {exc}") from None
    plan = _doca.secure_boot_plan(on, key, enroll=boolean(enroll, strict=True), host=_str(host))
    return {**plan, "secure_boot": on, "key": key}


class FilterModule:
    def filters(self):
        return {
            "mlnx_ofed_input_errors": mlnx_ofed_input_errors,
            "mlnx_ofed_repo_keyring": mlnx_ofed_repo_keyring,
            "mlnx_ofed_installed_version": mlnx_ofed_installed_version,
            "mlnx_ofed_action": mlnx_ofed_action,
            "mlnx_ofed_dist_dir": mlnx_ofed_dist_dir,
            "mlnx_ofed_kernels_from_debs": mlnx_ofed_kernels_from_debs,
            "mlnx_ofed_kernels_from_depends": mlnx_ofed_kernels_from_depends,
            "mlnx_ofed_kernel_check": mlnx_ofed_kernel_check,
            "mlnx_ofed_distro_check": mlnx_ofed_distro_check,
            "mlnx_ofed_installer_args": mlnx_ofed_installer_args,
            "mlnx_ofed_installer_result": mlnx_ofed_installer_result,
            "mlnx_ofed_stack_holders": mlnx_ofed_stack_holders,
            "mlnx_ofed_pending": mlnx_ofed_pending,
            "mlnx_ofed_restart_reasons": mlnx_ofed_restart_reasons,
            "mlnx_ofed_restart_plan": mlnx_ofed_restart_plan,
            "mlnx_ofed_doca_repo_url": mlnx_ofed_doca_repo_url,
            "mlnx_ofed_doca_keyring": mlnx_ofed_doca_keyring,
            "mlnx_ofed_headers_package": mlnx_ofed_headers_package,
            "mlnx_ofed_doca_state": mlnx_ofed_doca_state,
            "mlnx_ofed_dkms_plan": mlnx_ofed_dkms_plan,
            "mlnx_ofed_stack_kind": mlnx_ofed_stack_kind,
            "mlnx_ofed_secure_boot_plan": mlnx_ofed_secure_boot_plan,
        }
