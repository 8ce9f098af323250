"""Emulated ``ethtool`` for the lab's mlx5 RoCE netdevs (stdlib only, reads devstate).

``ethtool -S NETDEV`` on a netdev that hardware.json lists as an Ethernet (RoCE) HCA port prints
mlx5-style statistics: ``NIC statistics:`` then ``     name: value`` lines (ethtool's own format),
with the counter names of the mlx5 driver (``en_stats.c``: ``rx_prio%d_pause``,
``rx_prio%d_pause_duration``, ``tx_prio%d_pause``, ``tx_prio%d_pause_duration``,
``rx_prio%d_pause_transition``, ``tx_pause_storm_warning_events``, ``tx_pause_storm_error_events``).

Values: ``rx_bytes_phy``/``tx_bytes_phy`` and packet counters follow the port's sysfs counters
(data counters are 4-byte words); the PFC counters come from
``/run/emulated-hw/ethtool/NETDEV.json`` (``{"rx_prio3_pause": 12, ...}``, absent = all 0), which
the lab's physics or a test may write. Every other invocation (other netdevs, other options)
runs the real ethtool with the same arguments, so the tool keeps working for the host's own NICs.

Install (the lab does this, not a role): this module lives in ``/usr/lib/emulated-hw/emul/`` with
the rest of the package, and ``/usr/local/sbin/ethtool`` (ahead of ``/usr/sbin`` on PATH) is::

    #!/usr/bin/python3
    import sys
    sys.path.insert(0, "/usr/lib/emulated-hw")
    from emul.ethtool import main
    sys.exit(main(sys.argv[1:]))
"""

from __future__ import annotations

import json
import os
import sys

from . import devstate

ETHTOOL_DIR = "run/emulated-hw/ethtool"
REAL_ETHTOOL = ("/usr/sbin/ethtool", "/sbin/ethtool")
PRIO_STATS = (
    "rx_prio{p}_pause",
    "rx_prio{p}_pause_duration",
    "tx_prio{p}_pause",
    "tx_prio{p}_pause_duration",
    "rx_prio{p}_pause_transition",
)


def extra_counters(netdev: str) -> dict[str, int]:
    try:
        data = json.loads(devstate.path(f"{ETHTOOL_DIR}/{netdev}.json").read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in data.items() if isinstance(v, int | float)}


def stats(netdev: str) -> list[tuple[str, int]] | None:
    """The (name, value) list for an emulated RoCE netdev, None for anything else."""
    found = devstate.find_port_by_netdev(netdev)
    if not found or found[1].get("link_layer") != "Ethernet":
        return None
    hca, port = found
    dev, p = hca["name"], port["port"]
    extra = extra_counters(netdev)

    def c(name: str) -> int:
        return devstate.read_counter(dev, p, name)

    rows: list[tuple[str, int]] = [
        ("rx_packets", c("port_rcv_packets")),
        ("rx_bytes", c("port_rcv_data") * 4),
        ("tx_packets", c("port_xmit_packets")),
        ("tx_bytes", c("port_xmit_data") * 4),
        ("rx_packets_phy", c("port_rcv_packets")),
        ("tx_packets_phy", c("port_xmit_packets")),
        ("rx_bytes_phy", c("port_rcv_data") * 4),
        ("tx_bytes_phy", c("port_xmit_data") * 4),
        ("rx_discards_phy", 0),
        ("tx_discards_phy", 0),
        ("rx_pause_ctrl_phy", sum(extra.get(f"rx_prio{i}_pause", 0) for i in range(8))),
        ("tx_pause_ctrl_phy", sum(extra.get(f"tx_prio{i}_pause", 0) for i in range(8))),
        ("link_down_events_phy", c("link_downed")),
    ]
    for prio in range(8):
        rows.append((f"rx_prio{prio}_bytes", 0))
        rows.append((f"rx_prio{prio}_packets", 0))
        rows.append((f"tx_prio{prio}_bytes", 0))
        rows.append((f"tx_prio{prio}_packets", 0))
    for prio in range(8):
        for pattern in PRIO_STATS:
            name = pattern.format(p=prio)
            rows.append((name, extra.get(name, 0)))
    for name in ("tx_pause_storm_warning_events", "tx_pause_storm_error_events"):
        rows.append((name, extra.get(name, 0)))
    return rows


def render(rows: list[tuple[str, int]]) -> str:
    return "NIC statistics:\n" + "".join(f"     {name}: {value}\n" for name, value in rows)


def _real(argv: list[str]) -> int:
    me = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    for candidate in REAL_ETHTOOL:
        if os.path.exists(candidate) and os.path.realpath(candidate) != me:
            os.execv(candidate, [candidate, *argv])
    print("ethtool: not found", file=sys.stderr)
    return 127


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] in ("-S", "--statistics"):
        try:
            rows = stats(argv[1])
        except (OSError, ValueError):
            rows = None
        if rows is not None:
            sys.stdout.write(render(rows))
            return 0
    return _real(argv)
