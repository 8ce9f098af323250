"""Parsers of host files: sysfs (the port walk, attribute values, ECN switches), ``/etc/nccl.conf``
and ``ip -j addr``.

Stdlib-only and Python 3.8: shipped to hosts with the monitor collector (fabricops.hostside.ship).
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from fabricops.evidence.errors import SourceError

__all__ = [
    "parse_ecn_points",
    "parse_gts",
    "parse_ipv4",
    "parse_mtus",
    "parse_nccl_conf",
    "parse_rate",
    "parse_state",
    "parse_sysfs",
]

#: what ``grep -H`` prints when run on absolute paths; :func:`parse_sysfs` reads both forms
_IB_ROOT = "/sys/class/infiniband/"


def parse_sysfs(text: str) -> dict[str, Any]:
    """The ``sysfs`` evidence -> {"ports": {"mlx5_0/1": {...}}, "netdevs": {dev: [names]}, "numa": {}}.

    The text is ``grep -H '' DEV/ports/N/ATTR ...`` run in /sys/class/infiniband (the same lines
    with the absolute ``/sys/class/infiniband/`` prefix are read alike), ``DEV/device/numa_node:N``
    lines and ``netdev:DEV/device/net/IF`` lines. Each port is {"device", "port", ATTR: value,
    "counters": {name: int}, "gid_types": {index: type}}; counters and hw_counters share
    "counters". A line of another shape (a port or GID index that is not a number) is skipped.
    """
    ports: dict[str, dict[str, Any]] = {}
    netdevs: dict[str, list[str]] = {}
    numa: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("netdev:"):
            parts = line[len("netdev:") :].split("/")
            if len(parts) >= 4:
                netdevs.setdefault(parts[0], []).append(parts[-1])
            continue
        path, sep, value = line.partition(":")
        if not sep:
            continue
        if path.startswith(_IB_ROOT):
            path = path[len(_IB_ROOT) :]
        parts = path.split("/")
        if len(parts) == 3 and parts[1:] == ["device", "numa_node"]:
            with contextlib.suppress(ValueError):
                numa[parts[0]] = int(value)
            continue
        if len(parts) < 4 or parts[1] != "ports" or not parts[2].isdecimal():
            continue
        key = f"{parts[0]}/{parts[2]}"
        port = ports.setdefault(
            key, {"device": parts[0], "port": int(parts[2]), "counters": {}, "gid_types": {}}
        )
        rest = parts[3:]
        if len(rest) == 1:
            port[rest[0]] = value.strip()
        elif rest[0] in ("counters", "hw_counters") and value.strip().isdecimal():
            port["counters"][rest[1]] = int(value)
        elif rest[:2] == ["gid_attrs", "types"] and len(rest) == 3 and rest[2].isdecimal():
            port["gid_types"][int(rest[2])] = value.strip()
    return {"ports": ports, "netdevs": netdevs, "numa": numa}


#: NCCL copies at most 1023 bytes of a name and of a value (char envVar[1024], envValue[1024]).
_NCCL_FIELD = 1023


def parse_nccl_conf(text: str) -> dict[str, str]:
    """``/etc/nccl.conf`` (or ``~/.nccl.conf``) -> {name: value}, exactly as NCCL reads it.

    NCCL's reader is ``setEnvFile`` in src/misc/param.cc (github.com/NVIDIA/nccl), and this
    follows it line by line:

    - a line whose *first character* is ``#`` is skipped; there is no other comment syntax, so an
      indented ``  # x`` or a trailing ``A=1 # x`` is not a comment (the value is ``1 # x``);
    - only the final ``\\n`` is removed (a ``\\r`` of a CRLF file stays in the value);
    - the name is everything before the first ``=``, the value everything after it, verbatim:
      no whitespace is stripped and quotes are not removed (``A="x"`` sets ``"x"`` with its
      quotes, which NCCL then takes literally); a line without ``=`` is skipped;
    - name and value are cut at 1023 characters (NCCL: bytes; the names and values are ASCII);
    - each pair is set with ``setenv(name, value, 0)`` (ncclOsSetEnv, src/os/linux.cc), which
      does not overwrite: the *first* line for a name wins within a file. (NCCL reads
      ``$NCCL_CONF_FILE`` or ``~/.nccl.conf`` before ``/etc/nccl.conf``, and the process
      environment beats them all; that layering is the caller's, this reads one file.)

    A name NCCL would set but never read (``" NCCL_IB_HCA"`` with a leading space) is kept as is,
    so a check for ``NCCL_IB_HCA`` sees it missing, as NCCL does. glibc's setenv rejects an empty
    name, so ``=x`` lines are skipped.
    """
    env: dict[str, str] = {}
    for line in text.split("\n"):
        if line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        if not eq or not name:
            continue
        env.setdefault(name[:_NCCL_FIELD], value[:_NCCL_FIELD])
    return env


# --- sysfs attribute values ----------------------------------------------------------------------

RATE_RE = re.compile(r"^\s*([\d.]+)\s*Gb/sec\s*\((\d+)X\s*(\w*)\)")
STATE_RE = re.compile(r"^\s*(\d+):\s*(\S+)")
GTS_RE = re.compile(r"^\s*([\d.]+)\s*GT/s")


def parse_rate(text: str) -> tuple[float, int, str]:
    """sysfs ``ports/N/rate`` ``"400 Gb/sec (4X NDR)"`` -> (400e9 bit/s, 4 lanes, "NDR").

    The controller's typed reading of the same value is fabricops.model.rates.parse_sysfs_rate."""
    m = RATE_RE.match(text or "")
    if not m:
        raise SourceError(f"unreadable sysfs rate {text!r}")
    return float(m.group(1)) * 1e9, int(m.group(2)), m.group(3)


def parse_state(text: str) -> tuple[int, str]:
    """sysfs ``ports/N/state`` / ``phys_state`` ``"4: ACTIVE"`` -> (4, "ACTIVE")."""
    m = STATE_RE.match(text or "")
    if not m:
        raise SourceError(f"unreadable sysfs state {text!r}")
    return int(m.group(1)), m.group(2)


def parse_gts(text: str | None) -> float | None:
    """sysfs PCIe link speed ``32.0 GT/s PCIe`` / ``32 GT/s`` -> 32.0; ``Unknown`` -> 0.0; None
    unreadable (or no file: ``None`` in)."""
    if text is None:
        return None
    m = GTS_RE.match(text)
    if m:
        return float(m.group(1))
    return 0.0 if text.strip() == "Unknown" else None


_ECN_LINE = re.compile(r"^/sys/class/net/([^/]+)/ecn/(roce_np|roce_rp)/enable/(\d):\s*(\d)")


def parse_ecn_points(text: str) -> dict[tuple[str, str, int], bool]:
    """``grep -H '' /sys/class/net/*/ecn/roce_{np,rp}/enable/*`` (mlx5 DCQCN switches): lines
    ``/sys/class/net/IF/ecn/roce_np/enable/3:1`` -> {(IF, "roce_np", 3): True}."""
    out = {}
    for line in (text or "").splitlines():
        m = _ECN_LINE.match(line.strip())
        if m:
            out[(m.group(1), m.group(2), int(m.group(3)))] = m.group(4) == "1"
    return out


# --- ip -j addr ----------------------------------------------------------------------------------


def _ip_links(ip_json: str) -> list[dict]:
    try:
        data = json.loads(ip_json or "[]")
    except (ValueError, RecursionError):
        return []
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def parse_ipv4(ip_json: str) -> dict[str, list[str]]:
    """``ip -j addr show`` -> {ifname: [IPv4 addresses]}; unreadable JSON -> {} (lenient: the
    strict, typed reading is fabricops.parsers.ip_addr)."""
    out = {}
    for d in _ip_links(ip_json):
        infos = d.get("addr_info")
        infos = infos if isinstance(infos, list) else []
        out[d.get("ifname", "")] = [
            a["local"] for a in infos if isinstance(a, dict) and a.get("family") == "inet" and "local" in a
        ]
    return out


def parse_mtus(ip_json: str) -> dict[str, int]:
    """``ip -j addr show`` -> {ifname: mtu} (0: no or unreadable mtu); unreadable JSON -> {}."""
    out = {}
    for d in _ip_links(ip_json):
        try:
            out[d.get("ifname", "")] = int(d.get("mtu") or 0)
        except (TypeError, ValueError):
            out[d.get("ifname", "")] = 0
    return out
