# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters of the mlnx_ofed role: thin shims over fabricops.ofed (unit-tested, no Ansible there).

Collection roles do not load role-embedded plugins, so they live here (file of the mlnx_ofed role).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import missing_package

try:
    from fabricops import ofed as _ofed
    from fabricops.errors import FabricopsError
except ImportError as exc:  # pragma: no cover - only without the Python package
    _ofed = None
    FabricopsError = Exception
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None


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
                           repo_signed_by=None, repo_key_url=None, repo_key_sha256=None):
    """[] or one-line reasons (the preflight asserts on the first)."""
    _need_package()
    return _ofed.input_errors(
        _str(version) or None, _str(method), tarball_url=tarball_url, tarball_sha256=tarball_sha256,
        iso_url=iso_url, iso_sha256=iso_sha256, repo_url=repo_url,
        add_kernel_support=bool(add_kernel_support), distro=_str(distro) or None,
        skip_distro_check=bool(skip_distro_check), restart_method=_str(restart_method),
        repo_trusted=boolean(repo_trusted, strict=True) if repo_trusted is not None else False,
        repo_signed_by=_str(repo_signed_by) or None, repo_key_url=_str(repo_key_url) or None,
        repo_key_sha256=_str(repo_key_sha256) or None,
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


def mlnx_ofed_restart_reasons(installer_restart, action, version, conf_changed, pending, method="tarball"):
    _need_package()
    return _ofed.restart_reasons(bool(installer_restart), _str(action), _str(version), _list(conf_changed),
                                 _str(pending) or None, _str(method))


def mlnx_ofed_restart_plan(reasons, holders=None, allow_restart=False, allow_unload_users=False,
                           allow_reboot=False, method="openibd", host=""):
    _need_package()
    return _ofed.restart_plan(
        _list(reasons), holders=_list(holders), allow_restart=bool(allow_restart),
        allow_unload_users=bool(allow_unload_users), allow_reboot=bool(allow_reboot), method=_str(method),
        host=_str(host),
    )


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
        }
