"""Negative controls: a bandwidth test passes only when its traffic crossed the ports it names.

A perftest that silently used another device (awslabs/awsome-distributed-ai#1221: a per-device
test exercised the default HCA and passed with a device name that did not exist) reports a good
bandwidth for a port that carried nothing. So around every bandwidth test the data counters of
both named ports are read (:func:`snapshot_command`) before the client starts and after it ends,
and :func:`judge` requires the sender's transmit and the receiver's receive counter to have moved
by at least the bytes the test reports (size x iterations of its result rows, each direction of a
``-b`` run). Otherwise the test is an error -- "traffic did not cross mlx5_2/1 on gpu03" -- never a
pass; a counter that cannot be read, is unparsable or went backwards is an error too (fail closed).

Where the counters come from:

- InfiniBand: ``perfquery -x -C HCA -P PORT`` (the local port's PortCountersExtended, 64-bit),
  parsed with :mod:`fabricops.parsers.perfquery`.
- RoCE (no InfiniBand PMA over Ethernet): the kernel's
  ``/sys/class/infiniband/HCA/ports/PORT/counters/port_xmit_data`` and ``port_rcv_data``, read with
  one ``cat``.

Both count 4-octet words, not octets: "Total number of data octets, divided by 4 (lanes),
transmitted on all VLs. This is 64 bit counter" (Linux Documentation/ABI/stable/
sysfs-class-infiniband; IB spec vol. 1, PortCounters/PortCountersExtended PortXmitData, also
perfquery(8): "components that represent Data ... indicate octets divided by 4"); mlx5 fills them
from the vport octet counters shifted right by 2 (drivers/infiniband/hw/mlx5/mad.c). They count
headers as well as payload, so a port that carried the test moves by at least the payload.

:func:`switch_port_bytes` applies the same rule to switch ports on a RoCE path (the caller reads
the switch counters and knows the path).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fabricops.errors import ParseError
from fabricops.parsers import parse

RunFn = Callable[[str, str, float], Mapping[str, Any]]

#: bytes per unit of PortXmitData / PortRcvData / sysfs port_{xmit,rcv}_data
WORD = 4
SYSFS = "/sys/class/infiniband"


def _dev(device: str) -> tuple[str, str]:
    hca, _, port = device.partition("/")
    return hca, port or "1"


def snapshot_command(device: str, link_layer: str) -> str:
    """The one command that reads the data counters of ``device`` ("mlx5_2/1")."""
    hca, port = _dev(device)
    if link_layer == "Ethernet":
        base = f"{SYSFS}/{hca}/ports/{port}/counters"
        return "cat " + " ".join(shlex.quote(f"{base}/{n}") for n in ("port_xmit_data", "port_rcv_data"))
    return f"perfquery -x -C {shlex.quote(hca)} -P {shlex.quote(port)}"


@dataclass(frozen=True)
class Snapshot:
    """The data counters of one port at one moment, in octets (or why they could not be read)."""

    host: str
    device: str  #: "mlx5_2/1"
    link_layer: str
    xmit: int | None = None
    rcv: int | None = None
    error: str | None = None

    @property
    def names(self) -> tuple[str, str]:
        """The counters' names as the operator knows them (for messages)."""
        return ("PortXmitData", "PortRcvData") if self.link_layer != "Ethernet" else (
            "port_xmit_data", "port_rcv_data")


def read_snapshot(host: str, device: str, link_layer: str, res: Mapping[str, Any]) -> Snapshot:
    """A :class:`Snapshot` from the result ``{rc, stdout, stderr}`` of :func:`snapshot_command`."""
    snap = Snapshot(host, device, link_layer)
    out = res.get("stdout") or ""
    if res.get("rc") != 0:
        why = ((res.get("stderr") or "") + out).strip().splitlines()
        return _err(snap, f"exit {res.get('rc')}" + (f": {why[-1]}" if why else ""))
    if link_layer == "Ethernet":
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        if len(lines) != 2 or not all(ln.isdigit() and len(ln) <= 20 for ln in lines):
            return _err(snap, f"expected two counter values from sysfs, got {out.strip()[:80]!r}")
        return Snapshot(host, device, link_layer, int(lines[0]) * WORD, int(lines[1]) * WORD)
    try:
        rec = parse("perfquery", out)
    except ParseError as exc:
        return _err(snap, f"perfquery -x: {exc}")
    _hca, port = _dev(device)
    block = next((b for b in rec.blocks if b.group == "PortCountersExtended" and b.port == port), None)
    if block is None or block.xmit_bytes is None or block.rcv_bytes is None:
        return _err(snap, f"perfquery -x printed no extended counters for port {port}")
    return Snapshot(host, device, link_layer, block.xmit_bytes, block.rcv_bytes)


def _err(snap: Snapshot, why: str) -> Snapshot:
    return Snapshot(snap.host, snap.device, snap.link_layer, error=why)


def snapshot(run: RunFn, ports: Iterable[tuple[str, str, str]], timeout: float = 30) -> list[Snapshot]:
    """Read the counters of several ``(host, device, link_layer)`` ports at once (one command each)."""
    ports = list(ports)

    def one(p: tuple[str, str, str]) -> Snapshot:
        host, device, layer = p
        try:
            res = run(host, snapshot_command(device, layer), timeout)
        except Exception as exc:  # a transport failure is a failed read, not a crash
            return Snapshot(host, device, layer, error=f"could not run: {exc}")
        return read_snapshot(host, device, layer, res)

    if len(ports) <= 1:
        return [one(p) for p in ports]
    with ThreadPoolExecutor(max_workers=len(ports)) as pool:
        return list(pool.map(one, ports))


# --- the judgement -----------------------------------------------------------------------------


def human_bytes(n: int) -> str:
    """``7.3 GB`` (decimal units, as perftest's Gb/s are)."""
    if abs(n) < 1000:
        return f"{n} B"
    value = float(n)
    for unit in ("kB", "MB", "GB", "TB", "PB"):
        value /= 1000
        if abs(value) < 1000 or unit == "PB":
            return f"{value:.1f} {unit}"
    return f"{n} B"  # pragma: no cover


def reported_bytes(rows: Iterable[Any]) -> int:
    """The bytes one direction of a bandwidth test moved by its own report: the sum over its
    result rows of ``#bytes x #iterations`` (perftest prints the iterations of all QPs together:
    perftest_parameters.c print_report_bw multiplies iters by num_of_qps before printing)."""
    return sum(int(r.bytes) * int(r.iterations) for r in rows)


def senders(test: str, bidirectional: bool) -> tuple[str, ...]:
    """Which side's port transmits the test's data: the client for write/send, the server for
    read (the responder returns the data), both for ``-b``."""
    if bidirectional:
        return ("client", "server")
    return ("server",) if "_read_" in test else ("client",)


@dataclass
class Verdict:
    ok: bool
    message: str | None  #: why not (one line), None when ok
    details: dict[str, Any]


def judge(
    test: str,
    before: Mapping[str, Snapshot],
    after: Mapping[str, Snapshot],
    reported: int,
    bidirectional: bool = False,
) -> Verdict:
    """Did the named ports carry the test? ``before``/``after``: side ("client"/"server") -> snapshot.

    The sending side's transmit counter and the receiving side's receive counter must each have
    moved by at least ``reported`` bytes (both counters on both sides for ``-b``). Anything short
    of that evidence -- a side missing, a read that failed, a counter that went backwards -- is not
    a pass."""
    details: dict[str, Any] = {"reported_bytes": reported, "bidirectional": bidirectional}
    tx = senders(test, bidirectional)
    need: list[tuple[str, str]] = []
    for side in ("client", "server"):
        other = "server" if side == "client" else "client"
        if side in tx:
            need.append((side, "xmit"))
        if other in tx:
            need.append((side, "rcv"))
    problems: list[str] = []
    for side in ("client", "server"):
        b, a = before.get(side), after.get(side)
        if b is None or a is None:
            problems.append(f"no {side} counter snapshot (failing closed)")
            continue
        for snap, when in ((b, "before"), (a, "after")):
            if snap.error:
                problems.append(
                    f"counters of {snap.device} on {snap.host} could not be read {when} the test "
                    f"({snap.error}) (failing closed)"
                )
        if b.error or a.error:
            continue
        moved = {"xmit": a.xmit - b.xmit, "rcv": a.rcv - b.rcv}  # type: ignore[operator]
        details[side] = {"host": a.host, "device": a.device, "xmit_moved": moved["xmit"],
                         "rcv_moved": moved["rcv"]}
        for s, kind in need:
            if s != side:
                continue
            name = a.names[0] if kind == "xmit" else a.names[1]
            delta = moved[kind]
            if delta < 0:
                problems.append(
                    f"{name} of {a.device} on {a.host} went backwards by {human_bytes(-delta)} "
                    "(counters reset during the test?) (failing closed)"
                )
            elif delta + (WORD - 1) < reported:  # the counters count whole 4-octet words
                problems.append(
                    f"traffic did not cross {a.device} on {a.host} ({name} moved {human_bytes(delta)}, "
                    f"the test reports {human_bytes(reported)})"
                )
    if problems:
        details["problems"] = problems
        return Verdict(False, "; ".join(problems), details)
    return Verdict(True, None, details)


def switch_port_bytes(
    before: Mapping[str, int | None],
    after: Mapping[str, int | None],
    expected_min: int,
    switch: str = "",
) -> list[str]:
    """Switch ports on a test's path (port -> byte counter of the direction the test used, in
    octets, before and after): each must have moved by at least ``expected_min``. Returns the
    problems (empty: every port carried the test). A port missing from either reading, or not
    read (None), is a problem -- fail closed."""
    where = f"{switch} " if switch else ""
    problems = []
    for port in sorted(set(before) | set(after)):
        b, a = before.get(port), after.get(port)
        if b is None or a is None:
            problems.append(f"{where}{port}: counter not read (failing closed)")
        elif a < b:
            problems.append(f"{where}{port}: counter went backwards by {human_bytes(b - a)} (failing closed)")
        elif a - b < expected_min:
            problems.append(
                f"traffic did not cross {where}{port} (moved {human_bytes(a - b)}, "
                f"the test reports {human_bytes(expected_min)})"
            )
    if not before and not after:
        problems.append(f"{where}no switch port counters given (failing closed)")
    return problems


def switch_ports_total(
    before: Mapping[str, int | None], after: Mapping[str, int | None], expected_min: int, switch: str = ""
) -> list[str]:
    """Like :func:`switch_port_bytes` for a set of ports a test's flows were spread over (RoCE ECMP
    uplinks: which one each QP took is not predictable): together they must have moved at least
    ``expected_min``."""
    where = f"{switch} " if switch else ""
    ports = sorted(set(before) | set(after))
    missing = [p for p in ports if before.get(p) is None or after.get(p) is None]
    if not ports or missing:
        return [f"{where}{', '.join(missing) or 'no ports'}: counter not read (failing closed)"]
    deltas = {p: after[p] - before[p] for p in ports}  # type: ignore[operator]
    back = [p for p, d in deltas.items() if d < 0]
    if back:
        return [f"{where}{', '.join(back)}: counter went backwards (failing closed)"]
    total = sum(deltas.values())
    if total < expected_min:
        return [
            f"traffic did not cross {where}{', '.join(ports)} (together moved {human_bytes(total)}, "
            f"the test reports {human_bytes(expected_min)})"
        ]
    return []


# --- error counters against a baseline (``fabricops verify --counters-baseline``) ----------------

#: the largest value a port counter holds (PortCountersExtended are 64-bit; the error counters are
#: narrower): a baseline value above it was not read from a port
COUNTER_MAX = 2**64 - 1


def baseline_value_problem(value: Any) -> str | None:
    """Why ``value`` (from an edited or foreign baseline file) is not a counter reading, or None.

    A counter reading is a non-negative integer of at most 64 bits. ``true`` (a bool is an int to
    Python), floats (``1e18``, ``NaN``, ``Infinity``: JSON floats, never what a counter holds),
    strings and negative numbers are refused: subtracted, they would silently hide errors or
    crash the check."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{_show(value)} is not an integer counter value"
    if value < 0:
        return f"{value} is negative (a counter counts up from 0)"
    if value > COUNTER_MAX:
        return f"{value} does not fit a 64-bit counter"
    return None


def _show(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def increase_since(
    current: Mapping[str, int | None], baseline: Mapping[str, int] | None
) -> tuple[dict[str, int | None], bool]:
    """The error counters' increase since ``baseline`` (counter -> value of an earlier report), and
    whether the counters were reset since then.

    A counter below its baseline value means the port's counters were reset after the baseline (a
    reboot, a driver reload, ``perfquery -R``): the increase since the baseline is unknown, but at
    least what the counters show now, so every counter of the port is judged by its current
    (absolute) value -- never by a negative difference, which would pass any number of new errors.
    Without a baseline the current values are returned (reset False)."""
    out = dict(current)
    if baseline is None:
        return out, False
    reset = any(v is not None and v < int(baseline.get(k) or 0) for k, v in current.items())
    if reset:
        return out, True
    return {k: (None if v is None else v - int(baseline.get(k) or 0)) for k, v in current.items()}, False
