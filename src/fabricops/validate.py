"""Boundary checks for every value a role renders into a command, script, unit or config file.

Ansible's role argument specs check types and choices but have no patterns, and a string that is
fine as a type can still carry a newline (a new line in a unit, an ifupdown stanza, openib.conf
which openibd sources as shell), a ``;`` or ``$()`` (a command), a quote (a script's source) or
``..`` (a path outside its directory). Each role's first task therefore passes its variables to
:func:`role_errors` (filter ``fabricops.fabric.unsafe_role_vars``), which refuses, in one sentence
per variable, anything outside a deliberately narrow allow-list.

The allow-lists are whole-string matches (:func:`re.fullmatch`, never ``^...$``: Python's ``$``
also matches before a trailing newline). ``ROLE_VARS`` names the validator of every rendered role
variable; ``NOT_RENDERED`` lists the string-like variables that reach no file or command, with the
reason. tests/unit/test_injection.py fails when an argument spec gains a variable that is in
neither.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from fabricops.errors import FabricopsError


class UnsafeValue(FabricopsError, ValueError):
    """A value refused at the boundary; str() names the variable and says what is allowed."""


Validator = Callable[[str, Any], None]

_PATH = re.compile(r"/[A-Za-z0-9._+@/-]*")
_PROGRAM = re.compile(r"[A-Za-z0-9._+-]+|/[A-Za-z0-9._+@/-]+")
_UNIT = re.compile(r"[A-Za-z0-9][A-Za-z0-9:_.@-]{0,254}")
_KMOD = re.compile(r"[A-Za-z0-9_-]{1,55}")
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]{0,127}")
_NETDEV = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9_.-]{1,15}")
_HCA = re.compile(r"[A-Za-z0-9_]{1,32}")
_HCA_PORT = re.compile(r"[A-Za-z0-9_]{1,32}(?:[:/][0-9]{1,3})?")
_LABEL = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_URL = re.compile(r"(?:https?|ftp|file)://[A-Za-z0-9._~:/?#@!&+,=%-]+")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_LISTEN = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*):[0-9]{1,5}")
_SPAN_PART = r"[0-9]+(?:\.[0-9]+)?(?:us|ms|s|sec|min|m|h|hr|d|w)?"
_SPAN = re.compile(rf"{_SPAN_PART}(?: {_SPAN_PART})*")
_FLAG = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9._-]*(?:=[A-Za-z0-9._,:/@+=-]*)?")
_OFED_VERSION = re.compile(r"[0-9]+\.[0-9]+-[0-9]+(?:\.[0-9]+)*")
_DISTRO = re.compile(r"[a-z]+[0-9][A-Za-z0-9.]{0,31}")
_GUID = re.compile(r"0x[0-9A-Fa-f]{16}")
_HOSTNAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252}[A-Za-z0-9_])?")
_IPV4_IFACE = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}(?:/[0-9]{1,2})?")
_CONF_KEY = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
_CONF_WORD = re.compile(r"[A-Za-z0-9_.,:/+@-]{0,256}")
_NCCL_NAME = re.compile(r"NCCL_[A-Z0-9_]+")
_NCCL_IFNAME = re.compile(r"[=^]?[A-Za-z0-9_.:@-]+(?:,[A-Za-z0-9_.:@-]+)*")
#: Package pattern of nvidia_fabric_manager: a Debian name in which ``{branch}`` is the driver branch.
_PACKAGE_PATTERN = re.compile(r"[a-z0-9][a-z0-9+.-]*(?:\{branch\}[a-z0-9+.-]*)*")
#: OpenSM's routing engines (opensm(8), --routing_engine), possibly comma-chained.
OPENSM_ENGINES = (
    "minhop",
    "updn",
    "dnup",
    "file",
    "ftree",
    "lash",
    "dor",
    "torus-2QoS",
    "nue",
    "dfsssp",
    "sssp",
    "chain",
)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _string(var: str, value: Any) -> str:
    if not isinstance(value, str):
        raise UnsafeValue(f"{var}: expected a string, got {type(value).__name__} {_show(value)}")
    return value


def pattern(regex: re.Pattern[str], what: str, *, empty: bool = False, dotdot: bool = True) -> Validator:
    """A validator: the whole string matches ``regex`` (``empty``: "" is allowed too).

    ``dotdot``: also refuse a ``..`` path component (a path that climbs out of its directory)."""

    def check(var: str, value: Any) -> None:
        text = _string(var, value)
        if empty and text == "":
            return
        if not regex.fullmatch(text):
            raise UnsafeValue(f"{var}: {_show(text)} is not {what}")
        if dotdot and ".." in re.split(r"[/:]", text):
            raise UnsafeValue(f"{var}: {_show(text)} contains a '..' component")

    check.__doc__ = what
    return check


def choice(*allowed: str) -> Validator:
    def check(var: str, value: Any) -> None:
        if value not in allowed:
            raise UnsafeValue(f"{var}: {_show(value)} is not one of {', '.join(allowed)}")

    check.__doc__ = f"one of {', '.join(allowed)}"
    return check


def list_of(element: Validator) -> Validator:
    def check(var: str, value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, (list, tuple)):
            raise UnsafeValue(f"{var}: expected a list, got {type(value).__name__}")
        for i, item in enumerate(value):
            element(f"{var}[{i}]", item)

    check.__doc__ = f"a list of {element.__doc__}"
    return check


def dict_of(key: Validator, val: Validator) -> Validator:
    def check(var: str, value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, Mapping):
            raise UnsafeValue(f"{var}: expected a mapping, got {type(value).__name__}")
        for k, v in value.items():
            key(f"{var} key", k)
            val(f"{var}.{k}", v)

    check.__doc__ = f"a mapping of {key.__doc__} to {val.__doc__}"
    return check


def number(var: str, value: Any) -> None:
    """a number"""
    numeric = not isinstance(value, bool) and isinstance(value, (int, float))
    if not numeric and not (isinstance(value, str) and re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", value)):
        raise UnsafeValue(f"{var}: {_show(value)} is not a number")


def integer(lo: int, hi: int) -> Validator:
    def check(var: str, value: Any) -> None:
        if isinstance(value, str) and re.fullmatch(r"[0-9]+", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise UnsafeValue(f"{var}: {_show(value)} is not an integer {lo}-{hi}")

    check.__doc__ = f"an integer {lo}-{hi}"
    return check


path = pattern(_PATH, "an absolute path of letters, digits and ._+@-/ (no '..')")
program = pattern(_PROGRAM, "a program name or absolute path (letters, digits, ._+-/)")
unit = pattern(_UNIT, "a systemd unit name (letters, digits, :_.@-)")
kmod = pattern(_KMOD, "a kernel module name (letters, digits, _-)")
package = pattern(_PACKAGE, "a Debian package name (lower case, digits, +.-)")
package_pattern = pattern(_PACKAGE_PATTERN, "a Debian package name in which {branch} may appear")
netdev = pattern(_NETDEV, "a network interface name (1-15 letters, digits, _.-)")
hca = pattern(_HCA, "an HCA name like mlx5_0", empty=True)
hca_or_netdev = pattern(
    re.compile(f"{_NETDEV.pattern}|{_HCA_PORT.pattern}"), "a netdev (ibp26s0) or an HCA (mlx5_0, mlx5_0:1)"
)
label = pattern(_LABEL, "a name of letters, digits and _.:- (at most 64)")
url = pattern(_URL, "an http(s)/ftp/file URL without spaces, quotes, ';', '$' or backticks")
url_or_empty = pattern(
    _URL, "an http(s)/ftp/file URL without spaces, quotes, ';', '$' or backticks", empty=True
)
sha256 = pattern(_SHA256, "a sha256 (64 hexadecimal digits)", empty=True)
listen = pattern(_LISTEN, "a listen address like :9100, 127.0.0.1:9100 or [::1]:9100")
timespan = pattern(_SPAN, "a systemd time span like 30s or 1min")
flag = pattern(_FLAG, "a command-line option like --name or --name=value (no spaces, quotes or $)")
ofed_version = pattern(_OFED_VERSION, "an MLNX_OFED version like 24.10-1.1.4.0")
distro = pattern(_DISTRO, "an MLNX_OFED distro name like debian12.1", empty=True)
guid = pattern(_GUID, "a port GUID like 0x0002c90300a1b2c3", empty=True)
hostname = pattern(_HOSTNAME, "an inventory host name (letters, digits, _.-)")
ipv4_iface = pattern(_IPV4_IFACE, "an IPv4 address, optionally with /prefix")
nccl_ifname = pattern(_NCCL_IFNAME, "NCCL_SOCKET_IFNAME syntax (e.g. =eth0 or ^docker,lo)", empty=True)
optional_path = pattern(_PATH, "an absolute path of letters, digits and ._+@-/ (no '..')", empty=True)


def routing_engine(var: str, value: Any) -> None:
    """OpenSM routing engines, comma-separated"""
    text = _string(var, value)
    if text and any(e not in OPENSM_ENGINES for e in text.split(",")):
        raise UnsafeValue(f"{var}: {_show(text)} is not OpenSM routing engines ({', '.join(OPENSM_ENGINES)})")


def rate_key(var: str, value: Any) -> None:
    """InfiniBand, Ethernet or DEV/PORT"""
    text = _string(var, value)
    if text not in ("InfiniBand", "Ethernet") and not re.fullmatch(r"[A-Za-z0-9_]{1,32}/[0-9]{1,3}", text):
        raise UnsafeValue(f"{var}: {_show(text)} is not InfiniBand, Ethernet or DEV/PORT (mlx5_0/1)")


def openib_value(var: str, value: Any) -> None:
    """yes/no, a number or a plain word (openibd sources openib.conf as shell)"""
    if isinstance(value, bool) or (isinstance(value, int) and not isinstance(value, bool)):
        return
    text = _string(var, value)
    if not _CONF_WORD.fullmatch(text) or ".." in text.split("/"):
        raise UnsafeValue(
            f"{var}: {_show(text)} is not yes/no, a number or a plain word (letters, digits, _.,:/+@-): "
            "openibd sources openib.conf as a shell script"
        )


openib_key = pattern(_CONF_KEY, "an openib.conf key (upper case, digits, _)")
openib_conf = dict_of(openib_key, openib_value)


def nccl_value(var: str, value: Any) -> None:
    """one line of printable ASCII (nccl.conf is NAME=value lines; nccl.sh quotes it)"""
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return
    text = _string(var, value)
    if not re.fullmatch(r"[\x20-\x7e]*", text):
        raise UnsafeValue(f"{var}: the value must be one line of printable ASCII, got {_show(text)}")


nccl_name = pattern(_NCCL_NAME, "an NCCL variable name (NCCL_ in capitals)")
nccl_overrides = dict_of(nccl_name, nccl_value)


def _ipoib_networks(var: str, value: Any) -> None:
    """{networks: {NAME: CIDR or {prefix, device, mode, mtu, pkey, full_membership}}}"""
    if value is None or value == {}:
        return
    if not isinstance(value, Mapping):
        raise UnsafeValue(f"{var}: expected a mapping")
    networks = value.get("networks") or {}
    if not isinstance(networks, Mapping):
        raise UnsafeValue(f"{var}.networks: expected a mapping of network name to a CIDR or a mapping")
    for name, spec in networks.items():
        label(f"{var}.networks key", name)
        if isinstance(spec, str):
            ipv4_iface(f"{var}.networks.{name}", spec)
            continue
        if not isinstance(spec, Mapping):
            raise UnsafeValue(f"{var}.networks.{name}: expected a CIDR or a mapping")
        _ipoib_fields(f"{var}.networks.{name}", spec)


def _ipoib_fields(var: str, spec: Mapping[str, Any]) -> None:
    for key, check in (
        ("prefix", ipv4_iface),
        ("device", hca_or_netdev),
        ("name", label),
        ("address", ipv4_iface),
        ("mode", choice("datagram", "connected")),
    ):
        if spec.get(key) not in (None, ""):
            check(f"{var}.{key}", spec[key])
    for key in ("mtu", "ib_mtu"):
        if spec.get(key) not in (None, ""):
            integer(1, 65520)(f"{var}.{key}", spec[key])
    pkey = spec.get("pkey")
    if pkey not in (None, "") and not isinstance(pkey, int):
        pattern(re.compile(r"0[xX][0-9A-Fa-f]{1,4}|[0-9]{1,5}"), "a P_Key like 0x0010")(f"{var}.pkey", pkey)


def _ipoib_interfaces(var: str, value: Any) -> None:
    """a list of {device, name, address, mode, mtu, pkey, full_membership}"""
    if not value:
        return
    if not isinstance(value, (list, tuple)):
        raise UnsafeValue(f"{var}: expected a list")
    for i, entry in enumerate(value):
        if not isinstance(entry, Mapping):
            raise UnsafeValue(f"{var}[{i}]: expected a mapping")
        _ipoib_fields(f"{var}[{i}]", entry)


def _roce(var: str, value: Any) -> None:
    """a fabricops_roce definition (fabricops.model.roce)"""
    if not value:
        return
    from fabricops.model import roce as roce_model

    try:
        roce_model.validate(value)
    except roce_model.RoceConfigError as exc:
        raise UnsafeValue(f"{var}: {exc}") from None


_PSID = re.compile(r"[A-Z]{2}_[0-9A-Za-z_]{4,16}")
_FW_VERSION = re.compile(r"[0-9]{1,3}\.[0-9]{1,4}\.[0-9]{1,5}")


def _mlx_config(var: str, value: Any) -> None:
    """a mapping of mlxconfig KEY to a number, true/false or a name (fabricops.firmware)"""
    from fabricops import firmware

    if value is None:
        return
    if not isinstance(value, Mapping):
        raise UnsafeValue(f"{var}: expected a mapping, got {type(value).__name__}")
    for k, v in value.items():
        try:
            firmware.check_key(var, k)
            firmware.check_value(f"{var}.{k}", v)
        except firmware.FirmwareInputError as exc:
            raise UnsafeValue(str(exc)) from None


def _fw_image(var: str, value: Any) -> None:
    """a mapping with url (http(s)/ftp/file) and sha256 (64 hex digits)"""
    if not isinstance(value, Mapping) or set(value) - {"url", "sha256"}:
        raise UnsafeValue(f"{var}: expected a mapping of url and sha256")
    url(f"{var}.url", value.get("url"))
    pattern(_SHA256, "a sha256 (64 hexadecimal digits)")(f"{var}.sha256", value.get("sha256"))


#: Every role variable that reaches a command, a script, a unit or a config file -> its validator.
ROLE_VARS: dict[str, Validator] = {
    # fabric_monitor
    "fabric_monitor_install_method": choice("apt", "deb_url"),
    "fabric_monitor_node_exporter_package": package,
    "fabric_monitor_node_exporter_deb_url": url_or_empty,
    "fabric_monitor_node_exporter_deb_sha256": sha256,
    "fabric_monitor_listen_address": listen,
    "fabric_monitor_textfile_dir": path,
    "fabric_monitor_node_exporter_extra_args": list_of(flag),
    "fabric_monitor_interval": timespan,
    "fabric_monitor_collector_path": path,
    "fabric_monitor_config_path": path,
    "fabric_monitor_expected_rate_gbps": dict_of(rate_key, number),
    "fabric_monitor_ethtool": program,
    "fabric_monitor_nvidia_smi": program,
    "fabric_monitor_nic_firmware_versions": dict_of(
        pattern(_PSID, "a PSID like MT_0000000838"),
        pattern(_FW_VERSION, "a firmware version like 28.43.1014"),
    ),
    # gpudirect
    "gpudirect_module": kmod,
    "gpudirect_unit_name": unit,
    "gpudirect_unit_path": path,
    "gpudirect_after_unit": unit,
    # ipoib
    "ipoib_plan": _ipoib_networks,
    "ipoib_addresses": dict_of(label, ipv4_iface),
    "ipoib_interfaces": _ipoib_interfaces,
    "ipoib_mode": choice("datagram", "connected"),
    "ipoib_nm_connection_dir": path,
    "ipoib_ifupdown_dir": path,
    "ipoib_netplan_file": path,
    # mlnx_ofed
    "mlnx_ofed_version": ofed_version,
    "mlnx_ofed_install_method": choice("tarball", "iso", "repo", "doca"),
    "mlnx_ofed_tarball_url": url_or_empty,
    "mlnx_ofed_tarball_sha256": sha256,
    "mlnx_ofed_iso_url": url_or_empty,
    "mlnx_ofed_iso_sha256": sha256,
    "mlnx_ofed_iso_extractor": choice("xorriso", "bsdtar", "7z"),
    "mlnx_ofed_repo_url": url_or_empty,
    "mlnx_ofed_repo_key_url": url_or_empty,
    "mlnx_ofed_repo_key_sha256": sha256,
    "mlnx_ofed_repo_signed_by": optional_path,
    "mlnx_ofed_work_dir": path,
    "mlnx_ofed_distro": distro,
    "mlnx_ofed_installer_extra_args": list_of(flag),
    "mlnx_ofed_openib_conf": openib_conf,
    "mlnx_ofed_openib_conf_path": path,
    "mlnx_ofed_restart_method": choice("openibd", "reboot"),
    "mlnx_ofed_modules_file": path,
    "mlnx_ofed_state_dir": path,
    "mlnx_ofed_doca_version": pattern(
        re.compile(r"[0-9]+\.[0-9]+\.[0-9]+"), "a DOCA release like 2.9.1", empty=True
    ),
    "mlnx_ofed_doca_profile": choice("doca-ofed", "doca-roce", "doca-networking", "doca-all"),
    "mlnx_ofed_doca_repo_url": url_or_empty,
    "mlnx_ofed_doca_repo_key_url": url_or_empty,
    "mlnx_ofed_doca_repo_key_sha256": sha256,
    "mlnx_ofed_doca_repo_signed_by": optional_path,
    "mlnx_ofed_dkms_kernels": list_of(
        pattern(
            re.compile(r"running|next|[0-9][A-Za-z0-9._+~-]{0,127}"),
            "running, next or a kernel release like 6.1.0-18-amd64",
        )
    ),
    # nccl_profile
    "nccl_profile_name": choice("ib", "roce", "socket"),
    "nccl_profile_socket_ifname": nccl_ifname,
    "nccl_profile_overrides": nccl_overrides,
    "nccl_profile_roce": _roce,
    "nccl_profile_gpudirect_modules": list_of(kmod),
    "nccl_profile_conf_path": path,
    "nccl_profile_shell_path": path,
    "nccl_profile_nccl_version": pattern(
        re.compile(r"\d+\.\d+\.\d+(?:-\d+)?"), "an NCCL version like 2.23.4", empty=True
    ),
    "nccl_profile_nccl_lib_dirs": list_of(path),
    "nccl_profile_cross_nic": lambda var, value: choice("auto", "0", "1", "2")(
        var, str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    ),
    "nccl_profile_net_plugin": pattern(
        re.compile(r"[A-Za-z0-9_.+-]{1,128}"),
        "an NCCL net plugin suffix or library name (none, a .so)",
        empty=True,
    ),
    # nic_firmware (the mlxconfig keys and values: fabricops.firmware's allow-list)
    "nic_firmware_presets": list_of(
        pattern(re.compile(r"[a-z][a-z0-9_]{0,31}"), "a preset name like gpudirect")
    ),
    "nic_firmware_config": _mlx_config,
    "nic_firmware_device_config": dict_of(pattern(_HCA, "an HCA name like mlx5_0"), _mlx_config),
    "nic_firmware_devices": list_of(pattern(_HCA, "an HCA name like mlx5_0")),
    "nic_firmware_versions": dict_of(
        pattern(_PSID, "a PSID like MT_0000000838"),
        pattern(_FW_VERSION, "a firmware version like 28.43.1014"),
    ),
    "nic_firmware_images": dict_of(pattern(_PSID, "a PSID like MT_0000000838"), _fw_image),
    "nic_firmware_reset_method": choice("mlxfwreset", "reboot"),
    "nic_firmware_work_dir": path,
    # nvidia_fabric_manager
    "nvidia_fabric_manager_repo_url": url_or_empty,
    "nvidia_fabric_manager_repo_file": path,
    "nvidia_fabric_manager_repo_key_url": url_or_empty,
    "nvidia_fabric_manager_repo_key_sha256": sha256,
    "nvidia_fabric_manager_repo_keyring": path,
    "nvidia_fabric_manager_package_pattern": package_pattern,
    "nvidia_fabric_manager_service": unit,
    # nvidia_imex (addresses, ports and the node list are checked by fabricops.imex in the same first task)
    "nvidia_imex_address": pattern(re.compile(r"[0-9A-Fa-f.:]{2,45}"), "an IP address"),
    "nvidia_imex_managed_by": choice("host", "dra"),
    "nvidia_imex_service": unit,
    "nvidia_imex_config_path": path,
    "nvidia_imex_nodes_config_path": path,
    "nvidia_imex_bind_interface_ip": pattern(re.compile(r"[0-9A-Fa-f.:]{2,45}"), "an IP address", empty=True),
    "nvidia_imex_wait_for_quorum": choice("NONE", "RECOVERY"),
    "nvidia_imex_modprobe_path": path,
    "nvidia_imex_channel_dir": path,
    # roce_host
    "roce_host_roce": _roce,
    "roce_host_interfaces": list_of(netdev),
    "roce_host_unit_name": unit,
    "roce_host_script_path": path,
    "roce_host_config_path": path,
    # subnet_manager
    "subnet_manager_mode": choice("hosts", "switch"),
    "subnet_manager_hosts": dict_of(hostname, integer(0, 15)),
    "subnet_manager_topology": choice("fat_tree", "single_switch", "other"),
    "subnet_manager_routing_engine": routing_engine,
    "subnet_manager_port_guid": guid,
    "subnet_manager_hca": hca,
    "subnet_manager_conf_path": path,
    "subnet_manager_log_file": path,
    "subnet_manager_partition_config_file": path,
    "subnet_manager_service": unit,
    "subnet_manager_package": package,
}

#: String-like role variables that reach no file and no command, and why.
NOT_RENDERED: dict[str, str] = {
    "nccl_profile_cabling": "read to choose among the host's own HCA ports (fabric facts); only port names "
    "from the facts reach nccl.conf",
    "nvidia_fabric_manager_hardware_profile": "read on the controller only, to pick the platform's row of "
    "the fabric services table (a shipped profile name or a profile file that must load and name a known "
    "platform); only package names from that table reach apt",
    "nvidia_imex_hardware_profile": "read on the controller only, to pick the platform's row of the fabric "
    "services table and its NVLink domain size; nothing from it reaches the host",
    "mlnx_ofed_mok_password": "goes only to mokutil --generate-hash on stdin (never a command line, "
    "a file or a log; the hash it prints goes to a 0600 temporary file removed after mokutil --import)",
}

#: Options of the collection's modules that reach a command line or a sysfs path: validated inside
#: the module (which runs on the host without this package) with the same patterns as here.
MODULE_OPTIONS: dict[str, Validator] = {
    "mlnx_qos.interface": netdev,
    "roce_sysfs.netdev": netdev,
    "roce_sysfs.device": pattern(_HCA, "an HCA name like mlx5_0"),
}


def check(var: str, value: Any) -> None:
    """Raise :class:`UnsafeValue` unless ``value`` is allowed for role variable ``var``."""
    ROLE_VARS[var](var, value)


def role_errors(values: Mapping[str, Any]) -> list[str]:
    """One sentence per refused variable of ``values`` (role variable -> value); [] when all are safe.

    Variables without a validator (booleans, integers the argument spec converts, other roles'
    variables) are ignored; an unset (None) variable is ignored."""
    errors = []
    for var in sorted(values):
        validator = ROLE_VARS.get(var)
        if validator is None or values[var] is None:
            continue
        try:
            validator(var, values[var])
        except UnsafeValue as exc:
            errors.append(str(exc))
    return errors


def role_known_vars(role_dir: str | os.PathLike[str]) -> set[str]:
    """The variables a role declares: every option of every entry point of its
    ``meta/argument_specs.yml``, the keys of ``defaults/main.yml`` and ``vars/main.yml``, and the
    facts its tasks set (``set_fact``, ``register``: a second run of the role in one play sees them)."""
    root = Path(role_dir)
    known: set[str] = set()
    specs = _yaml_file(root / "meta" / "argument_specs.yml").get("argument_specs") or {}
    for entry in specs.values():
        known.update((entry or {}).get("options") or {})
    for part in ("defaults", "vars"):
        known.update(_yaml_file(root / part / "main.yml"))
    for tasks in sorted((root / "tasks").glob("*.yml")):  # what the role sets for later plays
        known.update(_facts_set(_yaml_any(tasks)))
    return known


def _facts_set(node: Any) -> set[str]:
    """The names a task list sets: ``set_fact`` keys and ``register`` names, blocks included."""
    out: set[str] = set()
    if isinstance(node, list):
        for item in node:
            out |= _facts_set(item)
    elif isinstance(node, dict):
        for key in ("ansible.builtin.set_fact", "set_fact"):
            if isinstance(node.get(key), dict):
                out.update(k for k in node[key] if k != "cacheable")
        if isinstance(node.get("register"), str):
            out.add(node["register"])
        for key in ("block", "rescue", "always"):
            out |= _facts_set(node.get(key))
    return out


def _yaml_any(path: Path) -> Any:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _yaml_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def unknown_role_vars(role: str, names: Iterable[str], known: Iterable[str]) -> list[str]:
    """One sentence per name in ``names`` (the variables set that start with the role's prefix)
    that the role does not declare (``known``), naming the closest declared name when one is close:
    ``mlnx_ofed_allow_restrat`` would otherwise be ignored without a word."""
    import difflib

    known = sorted(set(known))
    out = []
    for name in sorted(set(names) - set(known)):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else f"; see roles/{role}/meta/argument_specs.yml"
        out.append(f"{role}: {name} is not a variable of the role and is ignored{hint}")
    return out
