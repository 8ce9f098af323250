"""The one module that knows where the emulated device state lives (docs/lab-device-contract.md).

All paths are relative to ``EMUL_ROOT`` (default ``/``) so tests can point the tools at a
temporary tree. Stdlib only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Any

HW_JSON = "var/lib/emulated-hw/hardware.json"
FABRIC_DIR = "var/lib/emulated-fabric"
RUN_DIR = "run/emulated-hw"
QOS_DIR = "run/emulated-hw/qos"
OFED_RELEASE = "usr/share/emulated-ofed/release"
#: the NICs' firmware state, one <bdf>.json per HCA (emul/firmware.py, SPEC-20 C)
FIRMWARE_DIR = "var/lib/emulated-hw/firmware"

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


def fw_running(hca: dict[str, Any]) -> str:
    """The firmware version the HCA runs: the firmware state's ``running`` (emul/firmware.py), or
    hardware.json ``fw_ver`` when there is no state or the silicon changed since it was written."""
    fw = hca.get("fw_ver", "")
    try:
        state = json.loads(path(f"{FIRMWARE_DIR}/{hca.get('pci', '')}.json").read_text())
    except (OSError, ValueError):
        return fw
    if not isinstance(state, dict) or state.get("hw_fw_ver") != fw or not state.get("running"):
        return fw
    return str(state["running"])


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


#: The swapped-cable fault's file (lab/faults.py): host cables as built, laid over cabling.json's plan.
CABLING_OVERRIDE = "cabling-override.json"


def apply_override(links: list[dict[str, Any]], override: Any) -> list[dict[str, Any]]:
    """Host cables with the override's entries in place of those of the same host port."""
    repl = {
        (o.get("host"), o.get("netdev")): o
        for o in (override or {}).get("links") or []
        if isinstance(o, dict)
    }
    return [dict(repl.get((ln.get("host"), ln.get("netdev")), ln)) for ln in links]


def cabling_as_built() -> dict[str, Any] | None:
    """cabling.json with the swapped-cable override applied: what the traffic really crosses."""
    cabling = fabric_json("cabling.json")
    if cabling is None:
        return None
    override = fabric_json(CABLING_OVERRIDE)
    if override:
        cabling = dict(cabling, links=apply_override(list(cabling.get("links") or []), override))
    return cabling


def cable_for(host: str, netdev: str) -> dict[str, Any] | None:
    cabling = cabling_as_built() or {}
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


# --- the flow ledger (docs/lab-fidelity.md, "Fabric physics") -------------------------------
#
# One JSON file per bandwidth/latency run under FABRIC_DIR/flows (read-write in every host, like
# sm/): {"id", "kind", "start", "end", "bytes", "hops", "flows": [{"hops", "bytes", "packets"}]}.
# Every hop is one directed cable [NODE, PORT_OUT, NODE_NEXT, PORT_IN], names as in cabling.json
# (host side "mlx5_1/1"). The file name carries the planned end and start (ms) so a reader can skip
# files that cannot overlap it without opening them. Finished files older than PRUNE_AGE_S are
# folded into totals.json (per-port running sums) under an exclusive lock, so the switch counters
# read from the ledger never go backwards; readers hold the shared lock.

FLOWS_DIR = f"{FABRIC_DIR}/flows"
TOTALS = "totals.json"
LOCK = ".lock"
PRUNE_AGE_S = 120.0
STALE_AGE_S = 3600.0  # a run that never finished (client killed): dropped, it moved nothing


def flows_dir(fabric_dir: str | Path | None = None) -> Path:
    return Path(fabric_dir) / "flows" if fabric_dir is not None else path(FLOWS_DIR)


def write_json_atomic(target: Path, data: Any) -> None:
    """tmp file in the same directory, then rename: readers see the old or the new file, whole."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, target)


def ledger_name(start: float, end: float, run_id: str) -> str:
    return f"flow-{int(end * 1000):015d}-{int(start * 1000):015d}-{run_id}.json"


def _name_times(name: str) -> tuple[float, float] | None:
    """(start, end) from a ledger file name, or None for anything else."""
    parts = name.split("-", 3)
    if len(parts) < 4 or parts[0] != "flow" or not name.endswith(".json"):
        return None
    try:
        return int(parts[2]) / 1000, int(parts[1]) / 1000
    except ValueError:
        return None


def ledger_register(doc: dict[str, Any], fabric_dir: str | Path | None = None) -> Path | None:
    """Write a run's ledger file; None when the ledger is not there or not writable (an older lab
    without the rw bind): the run then only contends with itself."""
    d = flows_dir(fabric_dir)
    if not d.is_dir():
        return None
    target = d / ledger_name(doc["start"], doc["end"], doc["id"])
    try:
        write_json_atomic(target, doc)
    except OSError:
        return None
    return target


def ledger_overlapping(
    start: float, end: float, fabric_dir: str | Path | None = None
) -> list[dict[str, Any]]:
    """Every ledger entry whose [start, end] overlaps the given interval."""
    d = flows_dir(fabric_dir)
    out: list[dict[str, Any]] = []
    try:
        names = os.listdir(d)
    except OSError:
        return out
    for name in names:
        times = _name_times(name)
        if times is None or not (times[0] < end and times[1] > start):
            continue
        try:
            out.append(json.loads((d / name).read_text()))
        except (OSError, ValueError):
            continue
    return out


def _port_sums(doc: dict[str, Any], into: dict[str, dict[str, int]]) -> None:
    """Add one ledger entry's bytes/packets to per-port tx/rx sums keyed "NODE|PORT"."""
    flows = doc.get("flows")
    if flows is None:
        flows = [{"hops": doc.get("hops", []), "bytes": doc.get("bytes"), "packets": doc.get("packets")}]
    for f in flows:
        nbytes, npkts = int(f.get("bytes") or 0), int(f.get("packets") or 0)
        if nbytes <= 0 and npkts <= 0:
            continue
        for node, port_out, nxt, port_in in f.get("hops", []):
            tx = into.setdefault(f"{node}|{port_out}", {})
            rx = into.setdefault(f"{nxt}|{port_in}", {})
            tx["tx_bytes"] = tx.get("tx_bytes", 0) + nbytes
            tx["tx_packets"] = tx.get("tx_packets", 0) + npkts
            rx["rx_bytes"] = rx.get("rx_bytes", 0) + nbytes
            rx["rx_packets"] = rx.get("rx_packets", 0) + npkts


def ledger_prune(now: float, fabric_dir: str | Path | None = None, age: float = PRUNE_AGE_S) -> int:
    """Fold finished entries that ended more than ``age`` seconds ago into totals.json and delete
    them; entries that never finished are dropped after STALE_AGE_S. Skips (returns 0) when another
    process holds the lock. Returns the number of files removed."""
    d = flows_dir(fabric_dir)
    try:
        names = os.listdir(d)
    except OSError:
        return 0
    old = [n for n in names if (t := _name_times(n)) is not None and t[1] < now - age]
    if not old:
        return 0
    try:
        lock = open(d / LOCK, "a+")  # noqa: SIM115 - held across the fold
    except OSError:
        return 0
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0
        try:
            totals = json.loads((d / TOTALS).read_text())
        except (OSError, ValueError):
            totals = {"ports": {}}
        ports = totals.setdefault("ports", {})
        fold, drop = [], []
        for name in old:
            try:
                doc = json.loads((d / name).read_text())
            except (OSError, ValueError):
                drop.append(name)
                continue
            if doc.get("bytes") is None:
                if _name_times(name)[1] < now - STALE_AGE_S:  # type: ignore[index]
                    drop.append(name)
                continue
            _port_sums(doc, ports)
            fold.append(name)
        if fold:
            totals["folded"] = int(totals.get("folded", 0)) + len(fold)
            try:
                write_json_atomic(d / TOTALS, totals)
            except OSError:
                return 0
        for name in fold + drop:
            with contextlib.suppress(OSError):
                (d / name).unlink()
        return len(fold) + len(drop)


_TOTALS_CACHE: dict[str, tuple[tuple[int, int], dict[str, dict[str, int]]]] = {}


def port_totals(fabric_dir: str | Path | None = None) -> dict[str, dict[str, int]]:
    """Per-port sums "NODE|PORT" -> {tx_bytes, rx_bytes, tx_packets, rx_packets} of every finished
    run in the ledger (folded totals plus live files), read under the shared lock. Every change to
    the ledger is a rename or an unlink in its directory, so the directory's mtime keys a cache (a
    switch answers many counter commands between two runs)."""
    d = flows_dir(fabric_dir)
    sums: dict[str, dict[str, int]] = {}
    if not d.is_dir():
        return sums
    try:
        lock = open(d / LOCK, "a+")  # noqa: SIM115 - created before the directory's mtime is read
    except OSError:
        lock = None
    try:
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            key = (d.stat().st_mtime_ns, (d / TOTALS).stat().st_mtime_ns if (d / TOTALS).exists() else 0)
        except OSError:
            key = (0, 0)
        hit = _TOTALS_CACHE.get(str(d))
        if hit is not None and hit[0] == key and key != (0, 0):
            return {k: dict(v) for k, v in hit[1].items()}
        try:
            folded = json.loads((d / TOTALS).read_text()).get("ports", {})
        except (OSError, ValueError):
            folded = {}
        for port, vals in folded.items():
            sums[port] = {k: int(v) for k, v in vals.items()}
        for name in os.listdir(d):
            if _name_times(name) is None:
                continue
            try:
                _port_sums(json.loads((d / name).read_text()), sums)
            except (OSError, ValueError):
                continue
        _TOTALS_CACHE[str(d)] = (key, {k: dict(v) for k, v in sums.items()})
    finally:
        if lock is not None:
            lock.close()
    return sums


def switch_port_counters(fabric_file: str | Path | None, switch: str, port: str) -> dict[str, int]:
    """tx/rx bytes and packets of a switch port for the emulated switch CLIs: a fixed base (the
    control traffic a port sees from boot: LLDP and the like, a few thousand small frames) plus
    every byte the flow ledger says crossed the port. ``fabric_file`` is the switch's
    FABRIC_DIR/switches/NAME.json; without one only the base is there."""
    seed = int(hashlib.sha256(f"{switch}|{port}".encode()).hexdigest()[:8], 16)
    out = {"rx_packets": 2000 + seed % 3000, "tx_packets": 2000 + (seed >> 12) % 3000}
    out["rx_bytes"], out["tx_bytes"] = out["rx_packets"] * 128, out["tx_packets"] * 128
    if fabric_file:
        moved = port_totals(Path(fabric_file).parent.parent).get(f"{switch}|{port}", {})
        for key in out:
            out[key] += int(moved.get(key, 0))
    return out
