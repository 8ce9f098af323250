"""The one module that knows where the emulated device state lives (docs/lab-device-contract.md).

All paths are relative to ``EMUL_ROOT`` (default ``/``) so tests can point the tools at a
temporary tree. Stdlib only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

HW_JSON = "var/lib/emulated-hw/hardware.json"
FABRIC_DIR = "var/lib/emulated-fabric"
RUN_DIR = "run/emulated-hw"
QOS_DIR = "run/emulated-hw/qos"
OFED_RELEASE = "usr/share/emulated-ofed/release"

DEFAULT_QOS: dict[str, Any] = {
    "trust": "pcp",
    "pfc": [0] * 8,
    "prio_tc": [1, 0, 2, 3, 4, 5, 6, 7],
    "tsa": ["vendor"] * 8,
    "bw": [0] * 8,
    "cable_len": 7,
}


def root() -> Path:
    return Path(os.environ.get("EMUL_ROOT", "/"))


def path(rel: str) -> Path:
    return root() / rel.lstrip("/")


# --- the silicon --------------------------------------------------------------------------

def load_hardware() -> dict[str, Any]:
    return json.loads(path(HW_JSON).read_text())


def hcas() -> list[dict[str, Any]]:
    return load_hardware().get("hcas", [])


def find_hca(name: str) -> dict[str, Any] | None:
    return next((h for h in hcas() if h["name"] == name), None)


def find_port_by_netdev(netdev: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    for hca in hcas():
        for port in hca["ports"]:
            if port.get("netdev") == netdev:
                return hca, port
    return None


# --- sysfs (live state) -------------------------------------------------------------------

def sysfs(rel: str) -> Path:
    return path("sys") / rel.lstrip("/")


def read_sysfs(rel: str, default: str | None = None) -> str | None:
    try:
        return sysfs(rel).read_text().strip()
    except OSError:
        return default


def write_sysfs(rel: str, value: str) -> None:
    sysfs(rel).write_text(f"{value}\n")


def port_dir(dev: str, port: int) -> str:
    return f"class/infiniband/{dev}/ports/{port}"


def read_counter(dev: str, port: int, name: str) -> int:
    for sub in ("counters", "hw_counters"):
        value = read_sysfs(f"{port_dir(dev, port)}/{sub}/{name}")
        if value is not None:
            return int(value)
    return 0


def add_counter(dev: str, port: int, name: str, delta: int) -> None:
    """Increment a port counter (counters/ or hw_counters/, wherever it lives)."""
    for sub in ("counters", "hw_counters"):
        rel = f"{port_dir(dev, port)}/{sub}/{name}"
        if sysfs(rel).exists():
            write_sysfs(rel, str(int(read_sysfs(rel) or 0) + delta))
            return
    raise KeyError(f"no counter {name} on {dev} port {port}")


def ecn_enabled(netdev: str, point: str, prio: int) -> bool:
    """point: 'roce_np' (notification point) or 'roce_rp' (reaction point)."""
    return read_sysfs(f"class/net/{netdev}/ecn/{point}/enable/{prio}", "0") == "1"


def traffic_class(dev: str) -> int | None:
    raw = read_sysfs(f"class/infiniband/{dev}/tc/1/traffic_class")
    if not raw:
        return None
    digits = "".join(ch for ch in raw.split("=")[-1] if ch.isdigit())
    return int(digits) if digits else None


def roce_mode(dev: str, port: int = 1) -> str | None:
    return read_sysfs(f"kernel/config/rdma_cm/{dev}/ports/{port}/default_roce_mode")


def roce_tos(dev: str, port: int = 1) -> int | None:
    raw = read_sysfs(f"kernel/config/rdma_cm/{dev}/ports/{port}/default_roce_tos")
    return int(raw) if raw and raw.isdigit() else None


# --- volatile QoS (mlnx_qos) --------------------------------------------------------------

def default_qos() -> dict[str, Any]:
    qos = json.loads(json.dumps(DEFAULT_QOS))
    qos["dscp2prio"] = {str(d): d >> 3 for d in range(64)}
    return qos


def qos_state(netdev: str) -> dict[str, Any]:
    try:
        state = json.loads(path(f"{QOS_DIR}/{netdev}.json").read_text())
    except (OSError, ValueError):
        return default_qos()
    merged = default_qos()
    merged.update(state)
    return merged


def save_qos_state(netdev: str, state: dict[str, Any]) -> None:
    target = path(f"{QOS_DIR}/{netdev}.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, sort_keys=True))
    tmp.replace(target)


def reset_qos() -> None:
    """What a driver restart does: every netdev back to firmware defaults."""
    qdir = path(QOS_DIR)
    if qdir.is_dir():
        for f in qdir.glob("*.json"):
            f.unlink()


# --- the wire and installed software ------------------------------------------------------

def fabric_json(rel: str) -> Any:
    try:
        return json.loads(path(f"{FABRIC_DIR}/{rel}").read_text())
    except (OSError, ValueError):
        return None


def cable_for(host: str, netdev: str) -> dict[str, Any] | None:
    cabling = fabric_json("cabling.json") or {}
    return next(
        (ln for ln in cabling.get("links", []) if ln["host"] == host and ln["netdev"] == netdev), None
    )


def switch_port_state(switch: str, port: str) -> dict[str, Any] | None:
    data = fabric_json(f"switches/{switch}.json") or {}
    return data.get("ports", {}).get(port)


def ofed_release() -> str | None:
    try:
        return path(OFED_RELEASE).read_text().strip() or None
    except OSError:
        return None
