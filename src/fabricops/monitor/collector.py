#!/usr/bin/python3
"""fabricops collector: fabric counters for node_exporter's textfile collector.

Stdlib only: the role ``fabric_monitor`` copies this very module and the evidence parsers it imports
(``fabricops.evidence``: the package's one copy of each host-evidence parser, which verify and
diagnose read with too) from the fabricops package installed on the controller to the hosts
(``/usr/local/lib/fabricops``, started by the ``fabricops-collector`` launcher;
fabricops.hostside.ship). On the controller it imports as ``fabricops.monitor.collector``: the
metric-building logic is unit-tested against real captures.

Sources (docs/monitoring.md lists every metric):
- ``/sys/class/infiniband/DEV/ports/P/{state,phys_state,rate,link_layer}``, ``counters/*`` and
  ``hw_counters/*`` (InfiniBand port counters; RoCE CNP/ECN/retransmit counters);
- ``ethtool -S NETDEV`` for the RoCE netdevs (mlx5 per-priority PFC pause counters);
- ``nvidia-smi nvlink --status`` and ``nvidia-smi nvlink -e`` (NVLink state and error counters);
- ``/sys/bus/pci/devices/BDF/{current,max}_link_{speed,width}`` of every HCA
  (``/sys/class/infiniband/DEV/device/uevent`` PCI_SLOT_NAME) and GPU (``nvidia-smi --query-gpu``),
  and ``lspci -D -vvv`` for the ACS control bits of the bridges between a GPU and an HCA under the
  same PCIe switch (root needed, as the collector runs);
- ``mlxconfig -d BDF -e q`` per HCA and ``mlxfwmanager --query`` (NVIDIA MFT: a firmware reset
  pending, the PSID and the burned and running firmware), ``dkms status``, ``uname -r`` and
  ``/boot/vmlinuz-*`` (DKMS modules of the running and the next-boot kernel) and
  ``mokutil --sb-state`` (issue 20; stdlib readings of the formats that ``fabricops.parsers.mlxconfig``,
  ``mlxfwmanager``, ``dkms`` and ``mokutil`` read on the controller).

Usage: ``fabricops-collector [--config FILE] [--output FILE] [--sysfs DIR]``. Without ``--output``
the metrics go to stdout; with it they are written to a temporary file in the same directory and
renamed over FILE, so node_exporter never reads half a file.

Failure modes (a stale file must never pass for a healthy fabric):

- every number of the configuration is checked when it is loaded (:func:`check_config`:
  ``expected_rate_gbps`` finite, above 0, at most :data:`MAX_RATE_GBPS`); a configuration that fails
  is refused with one line on stderr and exit status 2, and FILE is replaced by one that holds only
  ``collector_source_up{source="config"} 0``, the run's timestamp and the previous run's
  ``collector_last_success_timestamp_seconds`` -- no port values left frozen, and a staleness alert
  on that gauge fires;
- a source that fails (a command, a port that cannot be read, an unexpected error in one source)
  sets its ``collector_source_up`` to 0; the other sources' metrics are still written;
- ``collector_last_success_timestamp_seconds`` is written by every run that collected: it stops
  moving when the collector is dead (the timer stopped, the program crashes, the configuration is
  refused), which is what a staleness alert watches.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable

# The parsers are the package's one copy (fabricops.evidence, stdlib-only; shipped with this module
# by fabricops.hostside.ship). Re-exported: fabricops.monitor.collector.parse_* stay importable.
from fabricops.evidence.errors import SourceError
from fabricops.evidence.hostfiles import parse_gts, parse_rate, parse_state
from fabricops.evidence.tools import (
    BDF_RE,
    parse_dkms_status,
    parse_ethtool_stats,
    parse_gpu_addresses,
    parse_lspci_acs,
    parse_mlxconfig_pending,
    parse_mlxfwmanager,
    parse_nvlink_errors,
    parse_nvlink_status,
    parse_sb_state,
    pci_address,
)

PREFIX = "fabricops_"

# name (without prefix), type, help: the one catalogue of what the collector can export.
_CATALOGUE = """
ib_port_transmit_bytes_total counter
    Data bytes transmitted (port_xmit_data x 4: sysfs counts 4-byte words).
ib_port_receive_bytes_total counter
    Data bytes received (port_rcv_data x 4: sysfs counts 4-byte words).
ib_port_transmit_packets_total counter
    Packets transmitted (port_xmit_packets).
ib_port_receive_packets_total counter
    Packets received (port_rcv_packets).
ib_port_symbol_errors_total counter
    Minor link errors detected on a physical lane (symbol_error).
ib_port_link_downed_total counter
    Times the link error recovery process failed and the link went down (link_downed).
ib_port_link_error_recovery_total counter
    Successful link error recoveries (link_error_recovery).
ib_port_receive_errors_total counter
    Received packets with errors (port_rcv_errors).
ib_port_transmit_discards_total counter
    Outbound packets discarded because the port was down or congested (port_xmit_discards).
ib_port_up gauge
    1 when the port is ACTIVE with physical state LinkUp, else 0.
ib_port_state gauge
    Logical port state as the kernel numbers it (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE).
ib_port_physical_state gauge
    Physical port state (2 Polling, 3 Disabled, 5 LinkUp, ...).
ib_port_rate_bytes_per_second gauge
    Port rate as the kernel reports it (sysfs rate, Gb/s x 1e9 / 8: Prometheus' base unit is bytes).
ib_port_width_lanes gauge
    Active link width in lanes (4 for 4X).
ib_port_expected_rate_bytes_per_second gauge
    Rate the hardware profile expects for this port (bytes per second, as ib_port_rate_bytes_per_second).
ib_port_info gauge
    Port description: link layer, netdev, state names (always 1).
roce_cnp_sent_total counter
    CNPs sent by the notification point (hw_counters np_cnp_sent).
roce_cnp_handled_total counter
    CNPs handled by the reaction point (hw_counters rp_cnp_handled).
roce_ecn_marked_packets_total counter
    ECN-marked RoCE packets received (hw_counters np_ecn_marked_roce_packets).
roce_out_of_sequence_total counter
    Out-of-sequence packets received (hw_counters out_of_sequence).
roce_packet_sequence_errors_total counter
    NAK sequence errors received (hw_counters packet_seq_err).
roce_local_ack_timeouts_total counter
    Local ACK timeouts: a retransmission after no ACK (hw_counters local_ack_timeout_err).
roce_retransmits_total counter
    Adaptive retransmissions of RoCE traffic (hw_counters roce_adp_retrans).
pfc_receive_pause_frames_total counter
    PFC pause frames received on a priority (ethtool -S rx_prioN_pause).
pfc_transmit_pause_frames_total counter
    PFC pause frames sent on a priority (ethtool -S tx_prioN_pause).
pfc_receive_pause_duration_seconds_total counter
    Time the port was paused on a priority (ethtool -S rx_prioN_pause_duration, microseconds / 1e6).
pfc_transmit_pause_duration_seconds_total counter
    Time the port paused its peer on a priority (ethtool -S tx_prioN_pause_duration, microseconds / 1e6).
pfc_receive_pause_transitions_total counter
    XOFF to XON transitions received on a priority (ethtool -S rx_prioN_pause_transition).
pfc_pause_storm_warning_events_total counter
    Times the NIC sent pauses for a long period (ethtool -S tx_pause_storm_warning_events).
pfc_pause_storm_error_events_total counter
    Times pause storm prevention stopped pause transmission (ethtool -S tx_pause_storm_error_events).
nvlink_link_up gauge
    1 when the NVLink link reports a speed, 0 when <inactive> (nvidia-smi nvlink --status).
nvlink_link_speed_bytes_per_second gauge
    NVLink link speed per direction as nvidia-smi prints it (GB/s x 1e9).
nvlink_active_links gauge
    Active NVLink links of a GPU.
nvlink_replay_errors_total counter
    NVLink replay errors (nvidia-smi nvlink -e).
nvlink_recovery_errors_total counter
    NVLink recovery errors (nvidia-smi nvlink -e).
nvlink_crc_errors_total counter
    NVLink CRC errors (nvidia-smi nvlink -e; flit and data CRC summed where printed apart).
pcie_link_width gauge
    Negotiated PCIe link width of a GPU or HCA in lanes (sysfs current_link_width).
pcie_link_speed_gts gauge
    Negotiated PCIe link speed in GT/s (sysfs current_link_speed; 0 when Unknown: no link).
pcie_link_max_width gauge
    Maximum PCIe link width of the device in lanes (sysfs max_link_width).
pcie_link_max_speed_gts gauge
    Maximum PCIe link speed of the device in GT/s (sysfs max_link_speed).
pcie_acs_redirect gauge
    1 when ACS on a bridge between a GPU and an HCA under the same PCIe switch redirects peer-to-peer
    traffic to the root complex (ACSCtl ReqRedir+ or CmpltRedir+), else 0.
nic_fw_reset_pending gauge
    1 when the NIC has settings stored for the next boot that differ from the current ones (mlxconfig -e q
    Next Boot != Current) or a burned firmware image that is not running yet (mlxfwmanager FW (Running)),
    else 0.
nic_fw_info gauge
    NIC firmware: PSID, running and burned version (mlxfwmanager --query; always 1).
nic_fw_compliant gauge
    1 when the running firmware is the version pinned for the PSID (collector config nic_firmware_versions),
    else 0; absent when the PSID is not pinned.
dkms_modules_missing gauge
    1 when a DKMS module is not installed for the running or the next-boot kernel (dkms status), else 0.
secure_boot_enabled gauge
    1 when Secure Boot is on (mokutil --sb-state), 0 when off or the host does not boot with EFI.
collector_source_up gauge
    1 when a source could be read on the last run, 0 when it failed (source "config": the configuration
    was refused, nothing was collected).
collector_last_run_timestamp_seconds gauge
    Unix time of the last collector run.
collector_last_success_timestamp_seconds gauge
    Unix time of the last run that collected (its configuration was valid; a failed source is marked by
    collector_source_up); it stops moving when the collector is dead or its configuration is refused.
collector_duration_seconds gauge
    How long the last collector run took.
"""


def _catalogue(text: str) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    name = ""
    for line in text.strip().splitlines():
        if line.startswith("    "):
            out[name] = (out[name][0], (out[name][1] + " " + line.strip()).strip())
        else:
            name, mtype = line.split()
            out[name] = (mtype, "")
    return out


METRICS: dict[str, tuple[str, str]] = _catalogue(_CATALOGUE)

# sysfs counters/ file -> (metric, multiplier)
IB_COUNTERS: dict[str, tuple[str, int]] = {
    "port_xmit_data": ("ib_port_transmit_bytes_total", 4),
    "port_rcv_data": ("ib_port_receive_bytes_total", 4),
    "port_xmit_packets": ("ib_port_transmit_packets_total", 1),
    "port_rcv_packets": ("ib_port_receive_packets_total", 1),
    "symbol_error": ("ib_port_symbol_errors_total", 1),
    "link_downed": ("ib_port_link_downed_total", 1),
    "link_error_recovery": ("ib_port_link_error_recovery_total", 1),
    "port_rcv_errors": ("ib_port_receive_errors_total", 1),
    "port_xmit_discards": ("ib_port_transmit_discards_total", 1),
}
# sysfs hw_counters/ file -> metric
HW_COUNTERS: dict[str, str] = {
    "np_cnp_sent": "roce_cnp_sent_total",
    "rp_cnp_handled": "roce_cnp_handled_total",
    "np_ecn_marked_roce_packets": "roce_ecn_marked_packets_total",
    "out_of_sequence": "roce_out_of_sequence_total",
    "packet_seq_err": "roce_packet_sequence_errors_total",
    "local_ack_timeout_err": "roce_local_ack_timeouts_total",
    "roce_adp_retrans": "roce_retransmits_total",
}
# ethtool -S per-priority name (mlx5 en_stats.c "rx_prio%d_pause" ...) -> (metric, scale)
PFC_STATS: dict[str, tuple[str, float]] = {
    "rx_prio{p}_pause": ("pfc_receive_pause_frames_total", 1),
    "tx_prio{p}_pause": ("pfc_transmit_pause_frames_total", 1),
    "rx_prio{p}_pause_duration": ("pfc_receive_pause_duration_seconds_total", 1e-6),
    "tx_prio{p}_pause_duration": ("pfc_transmit_pause_duration_seconds_total", 1e-6),
    "rx_prio{p}_pause_transition": ("pfc_receive_pause_transitions_total", 1),
}
STORM_STATS = {
    "tx_pause_storm_warning_events": "pfc_pause_storm_warning_events_total",
    "tx_pause_storm_error_events": "pfc_pause_storm_error_events_total",
}
NVLINK_ERRORS = {
    "replay": "nvlink_replay_errors_total",
    "recovery": "nvlink_recovery_errors_total",
    "crc": "nvlink_crc_errors_total",
}

Runner = "Callable[[list[str]], tuple[int, str]]"

#: The largest expected port rate accepted, in Gb/s: four times the fastest port (InfiniBand XDR and
#: 800GbE: 800 Gb/s on a 4X port: REFERENCE.md "InfiniBand rates", model/data/rates.yml), room for a 12X XDR
#: port (2400). Larger is a typo or a unit mistake (bit/s for Gb/s). The fabric_monitor role's
#: preflight refuses the same (roles/fabric_monitor/vars/main.yml __fabric_monitor_max_rate_gbps).
MAX_RATE_GBPS = 3200
#: expected_rate_gbps keys (fabricops.validate.rate_key): a link layer or DEV/PORT
RATE_KEY_RE = re.compile(r"^(?:InfiniBand|Ethernet|[A-Za-z0-9_]{1,32}/[0-9]{1,3})$")
_DECIMAL_RE = re.compile(r"^[0-9]{1,12}(?:\.[0-9]{1,12})?$")


class ConfigError(Exception):
    """The configuration cannot be used; str() is one line naming the setting."""


def _show(value: object) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def check_rate(where: str, value: object) -> float:
    """A rate in Gb/s from the configuration: a number (or a decimal string), finite, above 0 and at
    most MAX_RATE_GBPS; else ConfigError. NaN, infinity, negatives, 1e300, true: refused."""
    rate = math.nan
    if isinstance(value, bool):
        pass
    elif isinstance(value, (int, float)):
        try:
            rate = float(value)
        except OverflowError:  # an int beyond any float
            rate = math.inf
    elif isinstance(value, str) and _DECIMAL_RE.match(value.strip()):
        rate = float(value)
    if not (math.isfinite(rate) and 0 < rate <= MAX_RATE_GBPS):
        raise ConfigError(
            f"{where}: {_show(value)} is not a port rate in Gb/s (a finite number above 0, at most "
            f"{MAX_RATE_GBPS})"
        )
    return rate


def check_config(config: object) -> dict:
    """The configuration with every number it holds checked (one ConfigError, one line, for the first
    bad one): ``expected_rate_gbps`` maps InfiniBand, Ethernet or DEV/PORT to a rate in Gb/s
    (:func:`check_rate`; returned as floats)."""
    if not isinstance(config, dict):
        raise ConfigError(f"expected a JSON object, got {_show(config)}")
    rates = config.get("expected_rate_gbps")
    if rates is None:
        rates = {}
    if not isinstance(rates, dict):
        raise ConfigError(f"expected_rate_gbps: expected an object (port -> Gb/s), got {_show(rates)}")
    checked = {}
    for key, value in rates.items():
        if not RATE_KEY_RE.match(key):
            raise ConfigError(
                f"expected_rate_gbps: {_show(key)} is not InfiniBand, Ethernet or DEV/PORT (mlx5_0/1)"
            )
        checked[key] = check_rate(f"expected_rate_gbps.{key}", value)
    return dict(config, expected_rate_gbps=checked)


def load_config(path: str | None) -> dict:
    """The checked configuration of FILE; {} when there is no such file (the defaults)."""
    if not path or not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text") from None
    except ValueError as exc:
        raise ConfigError(f"not JSON ({exc})") from None
    return check_config(config)


def _warn(text: str) -> None:
    print("fabricops-collector: " + " ".join(str(text).split())[:300], file=sys.stderr)


# --- exposition ------------------------------------------------------------------------------

class Registry:
    """Samples by metric name; renders the Prometheus text exposition format (0.0.4)."""

    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[dict[str, str], float]]] = {}

    def add(self, name: str, labels: dict[str, object], value: float) -> None:
        if name not in METRICS:
            raise KeyError(f"metric {name} is not in the catalogue")
        self.samples.setdefault(name, []).append(({k: str(v) for k, v in labels.items()}, float(value)))

    def merge(self, other: Registry) -> None:
        for name, samples in other.samples.items():
            self.samples.setdefault(name, []).extend(samples)

    def render(self) -> str:
        out: list[str] = []
        for name in sorted(self.samples):
            mtype, help_text = METRICS[name]
            full = PREFIX + name
            out.append(f"# HELP {full} {help_text}")
            out.append(f"# TYPE {full} {mtype}")
            for labels, value in sorted(self.samples[name], key=lambda s: sorted(s[0].items())):
                lab = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
                out.append(f"{full}{{{lab}}} {_number(value)}")
        return "\n".join(out) + "\n" if out else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 2**63:
        return str(int(value))
    return repr(value)


# --- sysfs -----------------------------------------------------------------------------------

def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _port_netdev(sysfs: str, dev: str, port: str) -> str:
    """The netdev of an HCA port: device/net/*, matched by dev_port when the HCA has several."""
    netdir = os.path.join(sysfs, "class/infiniband", dev, "device/net")
    names = _listdir(netdir)
    if len(names) <= 1:
        return names[0] if names else ""
    for name in names:
        dev_port = _read(os.path.join(netdir, name, "dev_port"))
        if dev_port is not None and dev_port.isdigit() and int(dev_port) == int(port) - 1:
            return name
    return names[0]


def read_ports(sysfs: str = "/sys") -> list[dict]:
    """Every HCA port: state, rate, link layer, netdev and its counters (raw sysfs values)."""
    ports = []
    base = os.path.join(sysfs, "class/infiniband")
    for dev in _listdir(base):
        for port in _listdir(os.path.join(base, dev, "ports")):
            pdir = os.path.join(base, dev, "ports", port)
            entry = {
                "device": dev, "port": port,
                "state": _read(os.path.join(pdir, "state")) or "",
                "phys_state": _read(os.path.join(pdir, "phys_state")) or "",
                "rate": _read(os.path.join(pdir, "rate")) or "",
                "link_layer": _read(os.path.join(pdir, "link_layer")) or "InfiniBand",
                "netdev": _port_netdev(sysfs, dev, port),
                "counters": {}, "hw_counters": {},
            }
            for sub in ("counters", "hw_counters"):
                for name in _listdir(os.path.join(pdir, sub)):
                    raw = _read(os.path.join(pdir, sub, name))
                    if raw is not None and raw.isdigit() and len(raw) <= 20:  # a 64-bit counter
                        entry[sub][name] = int(raw)
            ports.append(entry)
    return ports


def port_metrics(
    reg: Registry, host: str, ports: Iterable[dict], expected: dict[str, float] | None = None
) -> list[str]:
    """Each port's metrics; a port whose state or rate cannot be read is left out, the others are
    written. Returns why each left-out port was ("mlx5_0/1: unreadable sysfs rate ''")."""
    failed = []
    for p in ports:
        one = Registry()
        try:
            _port_metrics(one, host, p, expected or {})
        except (SourceError, ValueError, OverflowError) as exc:
            failed.append(f"{p.get('device')}/{p.get('port')}: {exc}")
            continue
        reg.merge(one)
    return failed


def _port_metrics(reg: Registry, host: str, p: dict, expected: dict[str, float]) -> None:
    """One port's metrics (raises SourceError / ValueError when its state or rate is unreadable)."""
    labels = {"host": host, "device": p["device"], "port": p["port"]}
    state_num, state = parse_state(p["state"])
    phys_num, phys = parse_state(p["phys_state"])
    rate, lanes, _speed = parse_rate(p["rate"])
    reg.add("ib_port_up", labels, 1 if state == "ACTIVE" and phys == "LinkUp" else 0)
    reg.add("ib_port_state", labels, state_num)
    reg.add("ib_port_physical_state", labels, phys_num)
    reg.add("ib_port_rate_bytes_per_second", labels, rate / 8)
    reg.add("ib_port_width_lanes", labels, lanes)
    reg.add("ib_port_info", {**labels, "link_layer": p["link_layer"], "netdev": p.get("netdev") or "",
                             "state": state, "phys_state": phys}, 1)
    want = expected.get(f"{p['device']}/{p['port']}", expected.get(p["link_layer"]))
    if want:
        reg.add("ib_port_expected_rate_bytes_per_second", labels, float(want) * 1e9 / 8)
    for name, (metric, mult) in IB_COUNTERS.items():
        if name in p["counters"]:
            reg.add(metric, labels, p["counters"][name] * mult)
    if p["link_layer"] == "Ethernet":
        rlabels = {**labels, "netdev": p.get("netdev") or ""}
        for name, metric in HW_COUNTERS.items():
            if name in p["hw_counters"]:
                reg.add(metric, rlabels, p["hw_counters"][name])


# --- ethtool -S ------------------------------------------------------------------------------

def pfc_metrics(reg: Registry, host: str, netdev: str, device: str, stats: dict[str, int]) -> None:
    base = {"host": host, "netdev": netdev, "device": device}
    for prio in range(8):
        for pattern, (metric, scale) in PFC_STATS.items():
            key = pattern.format(p=prio)
            if key in stats:
                reg.add(metric, {**base, "priority": prio}, stats[key] * scale)
    for key, metric in STORM_STATS.items():
        if key in stats:
            reg.add(metric, base, stats[key])


# --- nvidia-smi ------------------------------------------------------------------------------

def nvlink_metrics(reg: Registry, host: str, status: list[dict], errors: list[dict] | None = None) -> None:
    active: dict[int, int] = {}
    for link in status:
        labels = {"host": host, "gpu": link["gpu"], "link": link["link"]}
        reg.add("nvlink_link_up", labels, 1 if link["up"] else 0)
        if link["speed_gbs"] is not None:
            reg.add("nvlink_link_speed_bytes_per_second", labels, link["speed_gbs"] * 1e9)
        active[link["gpu"]] = active.get(link["gpu"], 0) + (1 if link["up"] else 0)
    for gpu, count in active.items():
        reg.add("nvlink_active_links", {"host": host, "gpu": gpu}, count)
    summed: dict[tuple[int, int, str], int] = {}
    for err in errors or []:
        key = (err["gpu"], err["link"], err["kind"])
        summed[key] = summed.get(key, 0) + err["value"]
    for (gpu, link, kind), value in summed.items():
        reg.add(NVLINK_ERRORS[kind], {"host": host, "gpu": gpu, "link": link}, value)


# --- PCIe --------------------------------------------------------------------------------------

def hca_pci_addresses(sysfs: str = "/sys") -> dict[str, str]:
    """RDMA device -> its PCI function (uevent PCI_SLOT_NAME, else the device link's name)."""
    base = os.path.join(sysfs, "class/infiniband")
    out = {}
    for dev in _listdir(base):
        addr = None
        for line in (_read(os.path.join(base, dev, "device/uevent")) or "").splitlines():
            if line.startswith("PCI_SLOT_NAME="):
                addr = line.split("=", 1)[1].strip()
        if not addr:
            addr = os.path.basename(os.path.realpath(os.path.join(base, dev, "device")))
        if not BDF_RE.match(addr or ""):
            # the path-based netdev name carries the address (systemd.net-naming-scheme(7))
            named = {netdev_pci_address(n) for n in _listdir(os.path.join(base, dev, "device/net"))} - {None}
            addr = named.pop() if len(named) == 1 else None
        if addr and BDF_RE.match(addr):
            out[dev] = pci_address(addr)
    return out


NETDEV_PATH_RE = re.compile(r"^(?:en|ib)(?:P(\d+))?p(\d+)s(\d+)(?:f(\d+))?(?:n\S*|d\d+)?$")


def netdev_pci_address(name: str) -> str | None:
    """``ibp26s0`` -> ``0000:1a:00.0`` (path-based names), else None."""
    m = NETDEV_PATH_RE.match(name)
    if not m:
        return None
    dom, bus, slot, fn = int(m.group(1) or 0), int(m.group(2)), int(m.group(3)), int(m.group(4) or 0)
    if dom > 0xFFFF or bus > 0xFF or slot > 0x1F or fn > 7:
        return None
    return f"{dom:04x}:{bus:02x}:{slot:02x}.{fn}"


def read_pcie_links(sysfs: str, devices: dict[str, str]) -> list[dict]:
    """Current and maximum width/speed per device (missing files: the device is left out)."""
    out = []
    for name, addr in sorted(devices.items()):
        d = os.path.join(sysfs, "bus/pci/devices", addr)
        vals = {
            "width": _read(os.path.join(d, "current_link_width")),
            "speed": parse_gts(_read(os.path.join(d, "current_link_speed"))),
            "max_width": _read(os.path.join(d, "max_link_width")),
            "max_speed": parse_gts(_read(os.path.join(d, "max_link_speed"))),
        }
        if any(v is None for v in vals.values()):
            continue
        try:
            vals["width"], vals["max_width"] = int(vals["width"]), int(vals["max_width"])
        except ValueError:
            continue
        out.append(dict(vals, device=name, pci=addr))
    return out


def _upstream(devs: dict[str, dict], addr: str) -> list[str]:
    """The bridges above ``addr``, nearest first."""
    chain: list[str] = []
    while True:
        dom, bus = addr[:4], int(addr[5:7], 16)
        up = [b for b, d in devs.items() if b[:4] == dom and d["secondary"] == bus and b not in chain]
        if not up:
            return chain
        addr = up[0]
        chain.append(addr)


def acs_paths(devs: dict[str, dict], gpus: dict[str, str], hcas: dict[str, str]) -> list[dict]:
    """Per GPU-HCA pair under one PCIe switch (a common bridge below the host bridge, nvidia-smi
    topo's PIX/PXB): each bridge on the path with its redirect state."""
    out = []
    for g, ga in sorted(gpus.items()):
        for h, ha in sorted(hcas.items()):
            if ga not in devs or ha not in devs:
                continue
            up_g, up_h = _upstream(devs, ga), _upstream(devs, ha)
            common = next((b for b in up_g if b in up_h), None)
            if common is None:  # they meet only at the host bridge (PHB/NODE/SYS): no P2P path
                continue
            path = up_g[: up_g.index(common) + 1] + up_h[: up_h.index(common)]
            for b in path:
                out.append({"gpu": g, "hca": h, "bridge": b, "redirect": bool(devs[b]["redirect"])})
    return out


def pcie_metrics(reg: Registry, host: str, links: list[dict], acs: list[dict] | None) -> None:
    for ln in links:
        labels = {"host": host, "device": ln["device"], "pci": ln["pci"]}
        reg.add("pcie_link_width", labels, ln["width"])
        reg.add("pcie_link_speed_gts", labels, ln["speed"])
        reg.add("pcie_link_max_width", labels, ln["max_width"])
        reg.add("pcie_link_max_speed_gts", labels, ln["max_speed"])
    for a in acs or []:
        reg.add("pcie_acs_redirect", {"host": host, "bridge": a["bridge"], "gpu": a["gpu"], "hca": a["hca"]},
                1 if a["redirect"] else 0)


# --- one run ---------------------------------------------------------------------------------

def run_command(argv: list[str]) -> tuple[int, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout


def collect(
    config: dict | None = None,
    sysfs: str = "/sys",
    run: Runner = run_command,
    host: str | None = None,
    now: float | None = None,
) -> str:
    """Everything, as exposition text. A failing source sets its ``collector_source_up`` to 0 and the
    others are still written (an unexpected error in one source costs only that source). Raises
    ConfigError (one line) for a configuration :func:`check_config` refuses."""
    config = check_config(config or {})
    start = time.monotonic()
    host = str(host or config.get("host") or socket.gethostname().split(".")[0])
    reg = Registry()
    up: dict[str, bool] = {}

    def source(name: str, ok: bool) -> None:
        up[name] = up.get(name, True) and ok

    def section(name: str, body: Callable[[Registry], None]) -> None:
        scratch = Registry()  # a source that breaks half-way leaves none of its samples behind
        try:
            body(scratch)
        except Exception as exc:  # one broken source must not cost the others their metrics
            source(name, False)
            _warn(f"{name}: {type(exc).__name__}: {exc}")
            return
        reg.merge(scratch)

    ports: list[dict] = []

    def sysfs_source(r: Registry) -> None:
        ports.extend(read_ports(sysfs))
        failed = port_metrics(r, host, ports, config["expected_rate_gbps"])
        for why in failed:
            _warn(f"sysfs: {why}")
        source("sysfs", not failed)

    def ethtool_source(r: Registry) -> None:
        ethtool = config.get("ethtool", "ethtool")
        roce = [p for p in ports if p["link_layer"] == "Ethernet" and p.get("netdev")]
        if not roce:
            return
        ok = True
        for p in roce:
            rc, out = run([ethtool, "-S", p["netdev"]])
            one = Registry()
            try:
                if rc != 0:
                    raise SourceError(f"ethtool exited {rc}")
                pfc_metrics(one, host, p["netdev"], p["device"], parse_ethtool_stats(out))
            except (SourceError, ValueError):
                ok = False
                continue
            r.merge(one)
        source("ethtool", ok)

    def nvlink_source(r: Registry) -> None:
        smi = config.get("nvidia_smi", "nvidia-smi")
        rc, out = run([smi, "nvlink", "--status"])
        status: list[dict] = []
        try:
            if rc != 0:
                raise SourceError(f"nvidia-smi exited {rc}")
            status = parse_nvlink_status(out)
            source("nvlink_status", True)
        except (SourceError, ValueError):
            source("nvlink_status", False)
        errors = None
        rc, out = run([smi, "nvlink", "-e"])
        try:
            if rc != 0:
                raise SourceError(f"nvidia-smi exited {rc}")
            errors = parse_nvlink_errors(out)
            source("nvlink_errors", True)
        except (SourceError, ValueError):
            source("nvlink_errors", False)
        nvlink_metrics(r, host, status, errors)

    section("sysfs", sysfs_source)
    section("ethtool", ethtool_source)
    if config.get("nvlink", True):
        section("nvlink", nvlink_source)
    if config.get("pcie", True):
        section("pcie", lambda r: _collect_pcie(r, host, config, sysfs, run, source))
    if config.get("firmware", "auto"):
        section("firmware", lambda r: _collect_firmware(r, host, config, sysfs, run, source))
    if config.get("dkms", "auto"):
        section("dkms", lambda r: _collect_dkms(r, host, config, sysfs, run, source))

    for name, ok in up.items():
        reg.add("collector_source_up", {"host": host, "source": name}, 1 if ok else 0)
    stamp = round(now if now is not None else time.time(), 3)
    reg.add("collector_last_run_timestamp_seconds", {"host": host}, stamp)
    reg.add("collector_last_success_timestamp_seconds", {"host": host}, stamp)
    reg.add("collector_duration_seconds", {"host": host}, round(time.monotonic() - start, 6))
    return reg.render()


_SUCCESS_RE = re.compile(
    r'^fabricops_collector_last_success_timestamp_seconds\{host="((?:[^"\\]|\\.)*)"\} (\S+)$', re.M
)


def refused(previous: str, host: str, now: float | None = None) -> str:
    """The exposition text written in place of the metrics when the configuration is refused:
    ``collector_source_up{source="config"} 0``, this run's timestamp and the last success of the
    ``previous`` file (so it keeps ageing); no port value is left to look healthy."""
    reg = Registry()
    m = _SUCCESS_RE.search(previous or "")
    if m:
        host = re.sub(r"\\(.)", lambda x: "\n" if x.group(1) == "n" else x.group(1), m.group(1))
        try:
            last = float(m.group(2))
        except ValueError:
            last = math.nan
        if math.isfinite(last):
            reg.add("collector_last_success_timestamp_seconds", {"host": host}, last)
    reg.add("collector_source_up", {"host": host, "source": "config"}, 0)
    stamp = round(now if now is not None else time.time(), 3)
    reg.add("collector_last_run_timestamp_seconds", {"host": host}, stamp)
    return reg.render()


def _collect_pcie(reg: Registry, host: str, config: dict, sysfs: str, run: Runner,
                  source: Callable[[str, bool], None]) -> None:
    hcas = hca_pci_addresses(sysfs)
    gpus: dict[str, str] = {}
    if config.get("gpus", config.get("nvlink", True)):  # a host without NVLink reading has no GPUs
        rc, out = run([config.get("nvidia_smi", "nvidia-smi"), "--query-gpu=index,pci.bus_id",
                       "--format=csv,noheader"])
        try:
            if rc != 0:
                raise SourceError(f"nvidia-smi exited {rc}")
            gpus = parse_gpu_addresses(out)
            source("gpu_pci", True)
        except SourceError:
            source("gpu_pci", False)
    devices = dict(hcas, **gpus)
    links = read_pcie_links(sysfs, devices)
    source("pcie_sysfs", len(links) == len(devices))
    acs = None
    if gpus and hcas:
        rc, out = run([config.get("lspci", "lspci"), "-D", "-vvv"])
        try:
            if rc != 0:
                raise SourceError(f"lspci exited {rc}")
            acs = acs_paths(parse_lspci_acs(out), gpus, hcas)
            source("lspci", True)
        except SourceError:
            source("lspci", False)
    pcie_metrics(reg, host, links, acs)


# --- NIC firmware, DKMS, Secure Boot (issue 20) ----------------------------------------------------

def _kernel_key(release: str) -> list:
    """Order kernel releases as version numbers (6.1.0-21 after 6.1.0-18, 6.10 after 6.9)."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.findall(r"\d+|[A-Za-z]+", release)]


def next_boot_kernel(boot_dir: str, running: str) -> str:
    """The newest ``vmlinuz-*`` in ``boot_dir`` (the one the boot loader starts by default on
    Debian/Ubuntu); the running kernel when there is none."""
    names = [n[len("vmlinuz-"):] for n in _listdir(boot_dir) if n.startswith("vmlinuz-")]
    names = [n for n in names if n]
    return max(names, key=_kernel_key) if names else running


def _absent(rc: int, config: dict, key: str) -> bool:
    """The tool is not installed and the config does not require the source ("auto")."""
    return rc == 127 and config.get(key, "auto") == "auto"


def _collect_firmware(reg: Registry, host: str, config: dict, sysfs: str, run: Runner,
                      source: Callable[[str, bool], None]) -> None:
    hcas = hca_pci_addresses(sysfs)
    if not hcas:
        return
    pending: dict[str, bool] = {}
    ok = True
    for dev, addr in sorted(hcas.items()):
        rc, out = run([config.get("mlxconfig", "mlxconfig"), "-d", addr, "-e", "q"])
        if _absent(rc, config, "firmware"):
            return
        try:
            if rc != 0:
                raise SourceError(f"mlxconfig exited {rc}")
            pending[dev] = bool(parse_mlxconfig_pending(out))
        except SourceError:
            ok = False
    source("mlxconfig", ok)
    rc, out = run([config.get("mlxfwmanager", "mlxfwmanager"), "--query"])
    records: list[dict] = []
    try:
        if rc != 0:
            raise SourceError(f"mlxfwmanager exited {rc}")
        records = parse_mlxfwmanager(out)
        source("mlxfwmanager", True)
    except SourceError:
        source("mlxfwmanager", False)
    by_pci = {r["pci"]: r for r in records}
    pins = config.get("nic_firmware_versions") or {}
    for dev, addr in sorted(hcas.items()):
        rec = by_pci.get(addr)
        if rec is not None:
            reg.add("nic_fw_info", {"host": host, "device": dev, "pci": addr, "psid": rec["psid"],
                                    "running": rec["running"], "burned": rec["burned"]}, 1)
            if rec["psid"] in pins:
                reg.add("nic_fw_compliant", {"host": host, "device": dev, "psid": rec["psid"],
                                             "pinned": str(pins[rec["psid"]])},
                        1 if rec["running"] == str(pins[rec["psid"]]) else 0)
        if dev in pending and (rec is not None or not records):
            fw_pending = rec is not None and rec["running"] != rec["burned"]
            reg.add("nic_fw_reset_pending", {"host": host, "device": dev, "pci": addr},
                    1 if pending[dev] or fw_pending else 0)


def _collect_dkms(reg: Registry, host: str, config: dict, sysfs: str, run: Runner,
                  source: Callable[[str, bool], None]) -> None:
    rc, out = run([config.get("dkms_cmd", "dkms"), "status"])
    if _absent(rc, config, "dkms"):
        return
    try:
        if rc != 0:
            raise SourceError(f"dkms exited {rc}")
        status = parse_dkms_status(out)
        src, rel = run(["uname", "-r"])
        running = rel.strip() if src == 0 else ""
        if not running:
            raise SourceError("uname -r failed")
        source("dkms", True)
    except SourceError:
        source("dkms", False)
        status, running = [], ""
    if running:
        nxt = next_boot_kernel(config.get("boot_dir", "/boot"), running)
        modules = config.get("dkms_modules") or sorted({s["module"] for s in status})
        kernels = {running: "running"}
        kernels[nxt] = "running" if nxt == running else "next"
        for kernel, boot in kernels.items():
            for mod in modules:
                ok = any(s["module"] == mod and s["kernel"] == kernel and s["state"] == "installed"
                         for s in status)
                reg.add("dkms_modules_missing", {"host": host, "kernel": kernel, "module": mod, "boot": boot},
                        0 if ok else 1)
    rc, out = run([config.get("mokutil", "mokutil"), "--sb-state"])
    if rc == 127 and not os.path.isdir(os.path.join(sysfs, "firmware", "efi")):
        reg.add("secure_boot_enabled", {"host": host}, 0)  # no EFI: no Secure Boot, mokutil or not
        return
    try:
        sb = parse_sb_state(out)
        reg.add("secure_boot_enabled", {"host": host}, 1 if sb else 0)
        source("mokutil", True)
    except SourceError:
        source("mokutil", False)


def write_atomic(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".fabricops.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fabricops-collector", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--config", help="JSON file: expected_rate_gbps, ethtool, nvidia_smi, nvlink, host, pcie, gpus, lspci"
    )
    parser.add_argument("--output", help="write the metrics to this .prom file (atomically)")
    parser.add_argument("--sysfs", default="/sys", help="sysfs root (tests)")
    args = parser.parse_args(argv)
    try:
        text = collect(load_config(args.config), sysfs=args.sysfs)
    except ConfigError as exc:
        print(f"fabricops-collector: --config {args.config}: {exc}", file=sys.stderr)
        if args.output:  # no frozen values: the file says the configuration was refused
            previous = _read(args.output) or ""
            write_atomic(args.output, refused(previous, socket.gethostname().split(".")[0]))
        return 2
    if args.output:
        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
