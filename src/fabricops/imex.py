"""NVIDIA IMEX on multi-node NVLink systems (GB200/GB300 NVL72): the logic of the ``nvidia_imex`` role.

Which hosts may run IMEX (the fabric services table, ``fabricops.services``), the NVLink domain a
host belongs to and the node addresses its ``nodes_config.cfg`` lists (from the inventory), the
settings of ``config.cfg`` fabricops owns, and the IMEX channel device. Pure functions, no Ansible and
no I/O; the filters in ``plugins/filter/fabric_services.py`` are thin shims over them.

Sources: NVIDIA IMEX guide, docs.nvidia.com/multi-node-nvlink-systems/imex-guide/ (``config.html``:
the config keys and their defaults; ``imexchannels.html``: channels are not created by default, do
not survive a reboot, ``mknod /dev/nvidia-caps-imex-channels/channel0 c <major> 0`` with the major of
``nvidia-caps-imex-channels`` in ``/proc/devices``, or the module parameter ``NVreg_CreateImexChannel0=1``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from fabricops import services as svc

#: the character device the driver registers for IMEX channels (/proc/devices)
CHANNEL_DEVICE = "nvidia-caps-imex-channels"
#: IMEX_WAIT_FOR_QUORUM values (IMEX guide, config.html)
QUORUM = ("NONE", "RECOVERY")
#: The config.cfg keys fabricops owns, in file order, with the IMEX guide's description. Every other
#: key is left out of the file and takes the default the guide documents.
CONFIG_KEYS = {
    "IMEX_NODE_CONFIG_FILE": "File with the IP addresses of the nodes of this IMEX domain, one a line",
    "SERVER_PORT": "TCP port for IMEX peer communication (0..65535; default 50000)",
    "BIND_INTERFACE_IP": "Address to listen on for peers; empty: the node file's address of this host",
    "IMEX_CMD_ENABLED": "Command/control service that nvidia-imex-ctl queries (0 or 1)",
    "IMEX_CMD_PORT": "Port of the command/control service (ignored when IMEX_CMD_ENABLED=0)",
    "IMEX_WAIT_FOR_QUORUM": "NONE: do not wait for peers; RECOVERY: after an unsafe stop, wait for the "
    "nodes that had imported (default RECOVERY)",
}


def _services_text(row: svc.PlatformServices) -> str:
    if not row.services:
        return "no host NVLink service (no NVSwitch fabric)"
    labels = {
        "fabric_manager": "the NVIDIA fabric manager",
        "nvlink_subnet_manager": "the NVLink subnet manager (NVLSM)",
        "imex": "NVIDIA IMEX",
    }
    return " and ".join(labels[s] for s in row.services)


def refusal(host: str, profile: str) -> str:
    """'' when IMEX may run on ``profile`` (its platform's row of the table has the imex service),
    else the one sentence that refuses it, naming the host, the profile and what the platform uses."""
    if not profile:
        return (
            f"{host}: no hardware profile is named (fabricops_hardware_profile): nvidia_imex runs only on a "
            "platform whose fabric services include IMEX (gb200-nvl72, gb300-nvl72), and reads the NVLink "
            "domain size from the profile."
        )
    try:
        row = svc.profile_services(profile)
    except ValueError as exc:
        return f"{host}: {exc}"
    if row is None:
        return (
            f"{host}: hardware profile {profile} names no GPU platform, so nothing says it runs IMEX: "
            "name the platform in the profile or leave nvidia_imex off (fabricops_site_imex: false)."
        )
    if "imex" in row.services:
        return ""
    return (
        f"{host}: hardware profile {profile} is a {row.label} platform, which uses {_services_text(row)} "
        "and no IMEX, so leave nvidia_imex off (fabricops_site_imex: false)."
    )


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def member_address(host_vars: Mapping[str, Any], host: str) -> str:
    """A host's IMEX address as the inventory gives it: ``nvidia_imex_address``, else ``ansible_host``,
    else the inventory name."""
    for key in ("nvidia_imex_address", "ansible_host"):
        value = host_vars.get(key)
        if value not in (None, ""):
            return str(value).strip()
    return str(host)


def domain(
    host: str, members: Mapping[str, Mapping[str, Any]], max_nodes: int | None, profile: str = ""
) -> dict[str, Any]:
    """The NVLink domain of ``host`` and its node list, from every inventory host's
    ``{"domain", "address"}`` (``members``: host -> that). Returns ``{"domain", "nodes" (the
    addresses, sorted as addresses), "hosts" (host -> address), "errors" (one sentence each: no domain,
    an address that is not an IP, one address twice, more nodes than ``max_nodes``)}``. Only this host's
    domain is checked: another domain's mistakes are that domain's hosts' refusal."""
    me = members.get(host) or {}
    name = str(me.get("domain") or "").strip()
    out: dict[str, Any] = {"domain": name or None, "nodes": [], "hosts": {}, "errors": []}
    if not name:
        out["errors"].append(
            f"{host}: fabricops_nvlink_domain is not set: name the NVLink domain (the NVL72 rack) "
            "this compute tray belongs to, the same name on every tray of that domain."
        )
        return out
    hosts = {
        h: str(v.get("address") or "").strip()
        for h, v in sorted(members.items())
        if str(v.get("domain") or "").strip() == name
    }
    out["hosts"] = hosts
    bad = [f"{h} ({a!r})" for h, a in hosts.items() if not _is_ip(a)]
    if bad:
        out["errors"].append(
            f"{host}: NVLink domain {name}: the IMEX address of {', '.join(bad)} is not an IP address "
            "(nodes_config.cfg lists IP addresses: set nvidia_imex_address or ansible_host to one)."
        )
    seen: dict[str, str] = {}
    for h, a in hosts.items():
        if not _is_ip(a):
            continue
        key = str(ipaddress.ip_address(a))
        if key in seen:
            out["errors"].append(
                f"{host}: NVLink domain {name}: {seen[key]} and {h} both have the IMEX address {a}."
            )
        else:
            seen[key] = h
    if max_nodes is not None and len(hosts) > int(max_nodes):
        out["errors"].append(
            f"{host}: NVLink domain {name} has {len(hosts)} nodes ({', '.join(hosts)}), more than the "
            f"{int(max_nodes)} compute trays one NVLink domain of hardware profile {profile or '?'} holds."
        )
    if not out["errors"]:
        out["nodes"] = sorted(
            {str(ipaddress.ip_address(a)) for a in hosts.values()},
            key=lambda a: (ipaddress.ip_address(a).version, ipaddress.ip_address(a)),
        )
    return out


def profile_max_nodes(profile: str) -> int | None:
    """The profile's ``nvlink_domain.max_nodes`` (None when it has none)."""
    from fabricops.model.profiles import ProfileError, load_profile

    try:
        prof = load_profile(profile)
    except ProfileError as exc:
        raise ValueError(str(exc)) from None
    nd = getattr(prof, "nvlink_domain", None)
    if nd is None:
        return None
    value = nd.get("max_nodes") if isinstance(nd, Mapping) else getattr(nd, "max_nodes", None)
    return int(value) if value is not None else None


def config_values(
    *,
    node_config_file: str,
    server_port: int,
    cmd_enabled: bool,
    cmd_port: int,
    wait_for_quorum: str,
    bind_interface_ip: str = "",
) -> dict[str, str]:
    """The owned ``config.cfg`` settings as text, checked; ValueError names the bad one."""
    for name, port in (("server_port", server_port), ("cmd_port", cmd_port)):
        if isinstance(port, bool) or not 0 <= int(port) <= 65535:
            raise ValueError(f"nvidia_imex_{name} {port!r} is not a TCP port 0..65535")
    if cmd_enabled and int(cmd_port) == int(server_port):
        raise ValueError(f"nvidia_imex_cmd_port {cmd_port} is the same port as nvidia_imex_server_port")
    if wait_for_quorum not in QUORUM:
        raise ValueError(f"nvidia_imex_wait_for_quorum {wait_for_quorum!r} is not one of {', '.join(QUORUM)}")
    if bind_interface_ip and not _is_ip(bind_interface_ip):
        raise ValueError(f"nvidia_imex_bind_interface_ip {bind_interface_ip!r} is not an IP address")
    if not re.fullmatch(r"/[A-Za-z0-9._+@/-]{1,255}", node_config_file or ""):
        raise ValueError(f"nvidia_imex_nodes_config_path {node_config_file!r} is not an absolute path")
    return {
        "IMEX_NODE_CONFIG_FILE": node_config_file,
        "SERVER_PORT": str(int(server_port)),
        "BIND_INTERFACE_IP": bind_interface_ip,
        "IMEX_CMD_ENABLED": "1" if cmd_enabled else "0",
        "IMEX_CMD_PORT": str(int(cmd_port)),
        "IMEX_WAIT_FOR_QUORUM": wait_for_quorum,
    }


def render_config(values: Mapping[str, str]) -> str:
    """The body of ``config.cfg`` (``KEY=value`` lines, each after its ``#`` description), without header."""
    lines: list[str] = []
    for key, note in CONFIG_KEYS.items():
        lines += [f"# {note}", f"{key}={values[key]}", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def parse_config(text: str) -> dict[str, str]:
    """``KEY=value`` lines of a config.cfg (comments and blank lines skipped)."""
    out: dict[str, str] = {}
    for raw in (text or "").replace("\r", "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def render_nodes(nodes: list[str]) -> str:
    """``nodes_config.cfg``: one IP address a line."""
    if not nodes:
        raise ValueError("an NVLink domain without nodes has no nodes_config.cfg")
    for a in nodes:
        if not _is_ip(a):
            raise ValueError(f"{a!r} is not an IP address")
    return "".join(f"{a}\n" for a in nodes)


def proc_devices_major(text: str, name: str = CHANNEL_DEVICE) -> int | None:
    """The major number of character device ``name`` in ``/proc/devices``; None when absent."""
    section = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        if line.endswith("devices:"):
            section = line.split()[0].lower()
            continue
        parts = line.split()
        if section == "character" and len(parts) == 2 and parts[1] == name and parts[0].isdigit():
            return int(parts[0])
    return None


def channel_plan(
    proc_devices: str, stat: Mapping[str, Any], minor: int = 0, mode: str = "0666"
) -> dict[str, Any]:
    """What to do for ``/dev/nvidia-caps-imex-channels/channel<minor>``.

    ``stat``: a registered ``stat -c '%F|%t|%T|%a' PATH`` result (``rc``, ``stdout``; major and minor in
    hex). Returns ``{"major", "minor", "action": "none" | "create" | "replace", "msg"}``; ``major`` None
    means the loaded driver registers no IMEX channel device (``action`` "none", ``msg`` the reason)."""
    major = proc_devices_major(proc_devices)
    plan: dict[str, Any] = {"major": major, "minor": int(minor), "action": "none", "msg": ""}
    if major is None:
        plan["msg"] = (
            f"the loaded NVIDIA driver registers no {CHANNEL_DEVICE} character device (/proc/devices): "
            "IMEX channels need the NVIDIA open GPU kernel module of a driver with IMEX support, loaded"
        )
        return plan
    if int(stat.get("rc", 1)) != 0:
        plan.update(action="create", msg=f"channel{minor} is missing: create it ({major}, {minor})")
        return plan
    kind, _, rest = str(stat.get("stdout") or "").strip().partition("|")
    fields = rest.split("|")
    try:
        have = (kind, int(fields[0], 16), int(fields[1], 16), fields[2].zfill(4))
    except (IndexError, ValueError):
        have = (kind, -1, -1, "")
    if have == ("character special file", major, int(minor), mode):
        plan["msg"] = f"channel{minor} is the character device ({major}, {minor}), mode {mode}"
        return plan
    plan.update(
        action="replace",
        msg=(
            f"channel{minor} is {kind or 'unreadable'} ({have[1]}, {have[2]}) mode "
            f"{have[3] or '?'}, not the character device ({major}, {minor}) mode {mode}"
        ),
    )
    return plan


def package_choice(driver_version: str, available: list[str], installed: str | None = None) -> dict[str, Any]:
    """The IMEX package version for a driver: exactly the driver's (the table pins it), as
    ``fabricops.services.fm_choice`` decides it for the fabric manager."""
    return svc.fm_choice(driver_version, available, installed, label="nvidia-imex", noun="IMEX")


def package_name(driver_version: str) -> str:
    """``nvidia-imex-<branch>`` from the fabric services table."""
    (pkg,) = svc.service_packages("imex", driver_version)
    return str(pkg["name"])
