"""Pairwise bandwidth and latency: ``ib_write_bw`` and ``ib_write_lat`` between hosts, per rail.

Rounds come from the model's circle method (:func:`fabricops.model.schedule.rail_pairs`): every
round holds disjoint host pairs, so all of its tests run at once; for N hosts (N even) there are
N-1 rounds instead of N(N-1)/2 one-at-a-time runs. For each rail test the server is started on
the peer (``host_b``) first, then the client on ``host_a`` connects to the peer's address.

A failed test is re-run alone before anything is blamed; a host is blamed only when its tests
with *different* peers fail (:func:`blame`).
"""

from __future__ import annotations

import secrets
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from fabricops.errors import ParseError
from fabricops.model.profiles import Profile, Threshold, threshold_for
from fabricops.model.schedule import RailPair, pair_rounds, rail_pairs
from fabricops.parsers import parse
from fabricops.verify import counters as negative
from fabricops.verify.result import ERROR, FAIL, PASS, CheckResult

RunFn = Callable[[str, str, float], Mapping[str, Any]]  # (host, command, timeout_s) -> {rc, stdout, stderr}
TESTS = ("ib_write_bw", "ib_write_lat")
#: Parent of the per-run private directory on the server host. The directory's name carries an
#: unguessable token and is made with ``mkdir`` under ``umask 077`` (which fails rather than reuse
#: a path someone planted), so no other user can write the pid file the stop command reads.
RUN_DIR_PARENT = "/tmp"
_TOKEN_CHARS = frozenset("0123456789abcdef")


def new_token() -> str:
    """A fresh token naming one server run's private directory (128 bits)."""
    return secrets.token_hex(16)


def _run_dir(token: str) -> str:
    if len(token) < 16 or not set(token) <= _TOKEN_CHARS:
        raise ValueError(f"run token {token!r} is not a hex string of at least 16 digits")
    return f"{RUN_DIR_PARENT}/fabricops-verify.{token}"


@dataclass(frozen=True)
class RailTest:
    """One rail of one host pair: client ``host_a`` ``dev_a`` -> server ``host_b`` ``dev_b``."""

    rail: int
    host_a: str
    dev_a: str  #: "mlx5_0/1"
    host_b: str
    dev_b: str

    @property
    def pair(self) -> str:
        return f"{self.host_a}<->{self.host_b}"

    @property
    def label(self) -> str:
        return f"{self.host_a} {self.dev_a} <-> {self.host_b} {self.dev_b}"

    @staticmethod
    def from_rail_pair(rp: RailPair) -> RailTest:
        return RailTest(rp.rail, rp.host_a, rp.hca_a, rp.host_b, rp.hca_b)


@dataclass(frozen=True, eq=False)
class Rail:
    """One rail: the same HCA port on every host, cabled to the same switch.

    ``devices`` holds the hosts that have it (host -> "mlx5_2/1"); a RoCE rail (``link_layer``
    Ethernet) also carries each host's RoCE data address, GID index (RoCE v2, IPv4) and netdev, and
    the ToS of the lossless class (``fabricops.model.roce``)."""

    index: int  #: 0-based; the rail's perftest TCP port is ``base_port + index``
    name: str  #: "mlx5_2/1"
    link_layer: str  #: InfiniBand | Ethernet
    rate_gbps: float  #: the rate the ports should run at
    devices: Mapping[str, str]
    addresses: Mapping[str, str]  #: host -> address the perftest client connects to
    switch: str | None = None
    rate_source: str = "profile"  #: where ``rate_gbps`` comes from, in words
    switch_ports: Mapping[str, str] = field(default_factory=dict)
    netdevs: Mapping[str, str] = field(default_factory=dict)
    gid_index: Mapping[str, int] = field(default_factory=dict)
    tos: int | None = None

    @property
    def roce(self) -> bool:
        return self.link_layer == "Ethernet"

    @property
    def label(self) -> str:
        return f"{self.name}" + (f" ({self.switch})" if self.switch else "")


def rails_from_mapping(
    rails: Mapping[str, Sequence[str]], addresses: Mapping[str, str], link_layer: str, rate: float
) -> list[Rail]:
    """The older form (host -> its compute ports in rail order) as :class:`Rail` s."""
    per_host = {h: list(v) for h, v in rails.items()}
    counts = {len(v) for v in per_host.values()}
    if len(counts) > 1:
        detail = ", ".join(f"{h}: {len(v)}" for h, v in per_host.items())
        raise ValueError(f"hosts have different numbers of rails ({detail})")
    n = counts.pop() if counts else 0
    return [
        Rail(
            i,
            next(iter(per_host.values()))[i],
            link_layer,
            rate,
            {h: v[i] for h, v in per_host.items()},
            dict(addresses),
        )
        for i in range(n)
    ]


def plan(hosts: Sequence[str], rails: Mapping[str, Sequence[str]] | Sequence[Rail]) -> list[list[RailTest]]:
    """Rounds of rail tests.

    ``rails``: :class:`Rail` s, or a mapping host -> its compute ports ("mlx5_0/1") in rail order.
    Rounds come from the circle method over ``hosts`` (N-1 rounds for N even); in each round every
    host pair holds one test per rail that both hosts have, so within a round a host runs at most one
    test per rail (one TCP port per rail) and all of them at once."""
    if isinstance(rails, Mapping):
        return [[RailTest.from_rail_pair(rp) for rp in rnd] for rnd in rail_pairs(list(hosts), rails)]
    out = []
    for rnd in pair_rounds(list(hosts)):
        tests = [
            RailTest(r.index, a, r.devices[a], b, r.devices[b])
            for a, b in rnd
            for r in rails
            if a in r.devices and b in r.devices
        ]
        if tests:
            out.append(tests)
    return out


def rail_threshold(profile: Profile, name: str, port_rate: float, link_layer: str | None = None) -> Threshold:
    """The pass criterion of a pair test on a port of ``port_rate`` and ``link_layer``.

    A profile's published bandwidth floors were measured on its own fabric (``hca.link_layer``, e.g.
    the Azure NDR floor of 390 Gb/s is InfiniBand); on a port of the other link layer (a RoCE or
    storage rail of an InfiniBand profile) only the 90 %-of-port-rate default applies."""
    if link_layer and link_layer != profile.hca.link_layer and profile.floors:
        thr = threshold_for(replace(profile, floors=()), name, port_rate=port_rate)
        if name.endswith("_bw"):
            kind = "RoCE" if link_layer == "Ethernet" else link_layer
            thr = replace(
                thr,
                basis=f"{thr.basis} ({kind} port: profile {profile.name}'s floors are for "
                f"{profile.hca.link_layer} ports)",
            )
        return thr
    return threshold_for(profile, name, port_rate=port_rate)


def _dev(device: str) -> tuple[str, str]:
    hca, _, port = device.partition("/")
    return hca, port or "1"


def _env(opts: Mapping[str, Any]) -> list[str]:
    """``env`` (fabricops_verify_perftest.env): NAME=value pairs put before perftest."""
    return [f"{k}={v}" for k, v in sorted((opts.get("env") or {}).items())]


def roce_args(gid_index: int | None, tos: int | None) -> list[str]:
    """RoCE: the GID (``-x``, the RoCE v2 IPv4 entry of the GID table) and the traffic class of the
    lossless class (``--tclass``, the ToS of ``fabricops_roce``) -- the path NCCL takes with
    NCCL_IB_GID_INDEX and NCCL_IB_TC. (perftest's ``-T`` sets the ToS of rdma_cm QPs only.)"""
    out = []
    if gid_index is not None:
        out += ["-x", str(gid_index)]
    if tos is not None:
        out += [f"--tclass={tos}"]
    return out


def _args(
    test: str, device: str, tcp_port: int, opts: Mapping[str, Any], extra: Sequence[str] = ()
) -> list[str]:
    hca, port = _dev(device)
    argv = [
        *(["env", *_env(opts)] if opts.get("env") else []),
        test,
        "-d",
        hca,
        "-i",
        port,
        "-p",
        str(tcp_port),
        *extra,
    ]
    if test.endswith("_bw"):
        argv += ["--report_gbits", "-s", str(opts["bw_size"]), "-q", str(opts["bw_qps"])]
    else:
        argv += ["-s", str(opts["lat_size"])]
    return argv


def _server_argv(
    test: str, device: str, tcp_port: int, opts: Mapping[str, Any], extra: Sequence[str] = ()
) -> list[str]:
    return ["timeout", str(int(opts["timeout_s"])), *_args(test, device, tcp_port, opts, extra)]


def server_command(
    test: str,
    device: str,
    tcp_port: int,
    opts: Mapping[str, Any],
    extra: Sequence[str] = (),
    token: str | None = None,
) -> str:
    """Server side, bounded by ``timeout``. Its pid goes into a private directory of this run
    (``token``), so a failed client can stop exactly this server (:func:`stop_server_command`)."""
    d = shlex.quote(_run_dir(token or new_token()))
    argv = shlex.join(_server_argv(test, device, tcp_port, opts, extra))
    return (
        f'umask 077; d={d}; mkdir "$d" || exit 4; '
        f'{argv} & p=$!; echo "$p" > "$d/server.pid"; wait $p; rc=$?; '
        f'rm -f "$d/server.pid"; rmdir "$d"; exit $rc'
    )


def stop_server_command(
    test: str,
    device: str,
    tcp_port: int,
    opts: Mapping[str, Any],
    extra: Sequence[str] = (),
    token: str = "",
) -> str:
    """Stop the server :func:`server_command` started with ``token`` -- and nothing else.

    The pid is read only from the run's own directory, and only when that directory is a real
    directory owned by the caller; it is signalled only when it is a plain number above 1, the
    process belongs to the caller, and its command line is exactly the server's ``timeout ...``
    line (``timeout`` passes the signal on to perftest)."""
    d = shlex.quote(_run_dir(token))
    want = shlex.quote("".join(f"{a} " for a in _server_argv(test, device, tcp_port, opts, extra)))
    return (
        f'd={d}; f="$d/server.pid"; '
        'if [ -d "$d" ] && [ ! -L "$d" ] && [ -O "$d" ] && [ -f "$f" ] && [ ! -L "$f" ]; then '
        'p=$(head -c 32 "$f"); case "$p" in ""|*[!0-9]*) exit 0;; esac; '
        f'if [ "$p" -gt 1 ] && [ -O "/proc/$p" ] && [ "$(tr "\\000" " " < "/proc/$p/cmdline")" = {want} ]; '
        'then kill "$p" 2>/dev/null; fi; fi; true'
    )


def _client_dir(token: str) -> str:
    return _run_dir(token).replace("fabricops-verify.", "fabricops-verify-client.", 1)


def client_command(
    test: str,
    device: str,
    tcp_port: int,
    server: str,
    opts: Mapping[str, Any],
    extra: Sequence[str] = (),
    token: str | None = None,
) -> str:
    """Client side: retries while the server is not listening yet (perftest fails at once then).

    With ``token`` the retries also stop as soon as the run's own private directory holds a
    ``stop`` file (:func:`stop_client_command`): the engine writes it when the server has already
    exited with an error (a port that is down fails the server at once), so a dead server costs one
    round trip instead of ``connect_retries`` attempts. The client's output and status stay those of
    its last attempt. A stop that came before the client started (the server failed within
    ``server_start_s``) is already there: the client makes one attempt and ends."""
    argv = shlex.join(
        ["timeout", str(int(opts["timeout_s"])), *_args(test, device, tcp_port, opts, extra), server]
    )
    retries = int(opts["connect_retries"])
    if token is None:
        return (
            f"n=0; while :; do out=$({argv} 2>&1); rc=$?; "
            f'case "$out" in *"Couldn\'t connect"*) n=$((n+1)); [ $n -ge {retries} ] && break; sleep 0.25;; '
            f"*) break;; esac; done; printf '%s\\n' \"$out\"; exit $rc"
        )
    d = shlex.quote(_client_dir(token))
    return (
        f'd={d}; if (umask 077; mkdir "$d") 2>/dev/null; then :; '
        'elif [ -d "$d" ] && [ ! -L "$d" ] && [ -O "$d" ] && [ -f "$d/stop" ]; then :; else d=; fi; '
        f"n=0; while :; do out=$({argv} 2>&1); rc=$?; "
        f'case "$out" in *"Couldn\'t connect"*) n=$((n+1)); [ $n -ge {retries} ] && break; '
        '[ -n "$d" ] && [ -e "$d/stop" ] && break; sleep 0.25;; '
        f"*) break;; esac; done; "
        '[ -n "$d" ] && { rm -f "$d/stop"; rmdir "$d"; }; '
        f"printf '%s\\n' \"$out\"; exit $rc"
    )


def stop_client_command(token: str) -> str:
    """Tell the client :func:`client_command` started with ``token`` to stop retrying: a ``stop``
    file in its private directory, written only when that directory is a real directory owned by
    the caller (so nobody else's directory, and no symlink, is written through). The directory is
    made (0700) when the client has not made it yet: a server that fails at once (a port that is
    down) is often stopped before its client starts, and a stop that was dropped then cost the
    client's whole retry budget (13 s a test in the lab)."""
    d = shlex.quote(_client_dir(token))
    return (f'd={d}; (umask 077; mkdir "$d") 2>/dev/null; '
            'if [ -d "$d" ] && [ ! -L "$d" ] && [ -O "$d" ]; then : > "$d/stop"; fi; true')


# --- evaluation ----------------------------------------------------------------------------

PAIR_CAUSES = [
    (
        "Port number",
        "state is Down",
        "{side_host} {side_dev}: port is down (perftest: 'Port number .. state is Down')",
    ),
    ("not found", "Unable to find the Infiniband/RoCE device", "{side_host} {side_dev}: HCA not found"),
    (
        "Completion with error",
        "",
        "no data path between the ports (transport retry count exceeded): "
        "a switch port down, wrong cabling or partition, or a lossy RoCE path",
    ),
    (
        "Couldn't connect",
        "",
        "the server on {host_b} did not accept the connection: perftest server failed "
        "to start (port down?) or {host_b} is unreachable on its perftest address",
    ),
    ("command not found", "", "{side_host}: perftest is not installed (MLNX_OFED perftest package)"),
]


def _diagnose(test: RailTest, client: Mapping[str, Any], server: Mapping[str, Any]) -> str | None:
    sides = [(client, test.host_a, test.dev_a), (server, test.host_b, test.dev_b)]
    for res, host, dev in sides:
        text = f"{res.get('stdout') or ''}\n{res.get('stderr') or ''}"
        for a, b, cause in PAIR_CAUSES:
            if a in text and b in text:
                return cause.format(side_host=host, side_dev=dev, host_b=test.host_b)
        if res.get("rc") == 127:
            return f"{host}: perftest is not installed (MLNX_OFED perftest package)"
        if res.get("rc") == 124:
            return f"{host}: perftest timed out"
    return None


def evaluate(
    test: RailTest,
    name: str,
    client: Mapping[str, Any],
    server: Mapping[str, Any],
    profile: Profile,
    port_rate: float,
    wall_s: float | None = None,
    link_layer: str | None = None,
    counters: tuple[Sequence[negative.Snapshot], Sequence[negative.Snapshot]] | None = None,
) -> CheckResult:
    """One ``ib_write_bw`` / ``ib_write_lat`` result for a rail test (``link_layer`` of the rail).

    ``counters``: the (client, server) port counter snapshots before and after a bandwidth test
    (:func:`run_test` takes them). With them, a result whose ports did not carry the bytes it
    reports is an error, whatever its bandwidth (:func:`fabricops.verify.counters.judge`)."""
    thr = rail_threshold(profile, name, port_rate, link_layer)
    base = dict(
        category="pairs",
        check=name,
        host=test.pair,
        device=f"{test.dev_a}<->{test.dev_b}",
        threshold=thr.value,
        op=thr.op,
        unit=thr.unit,
        source=thr.source,
    )
    details: dict[str, Any] = {
        "rail": test.rail,
        "client": test.host_a,
        "server": test.host_b,
        "client_rc": client.get("rc"),
        "server_rc": server.get("rc"),
        "basis": thr.basis,
        "wall_s": wall_s,
        "link_layer": link_layer or profile.hca.link_layer,
    }
    label = test.label
    if client.get("rc") != 0:
        cause = _diagnose(test, client, server) or "perftest failed"
        tail = ((client.get("stdout") or "") + (client.get("stderr") or "")).strip().splitlines()
        details["output_tail"] = tail[-3:]
        return CheckResult(
            status=FAIL, message=f"{label}: {name} failed ({cause})", cause=cause, details=details, **base
        )
    try:
        if name.endswith("_bw"):
            rec = parse("perftest-bw", client.get("stdout") or "")
            if rec.units != "Gb/sec" or not rec.results:
                raise ParseError("perftest-bw", "a --report_gbits result row", f"units {rec.units}")
            measured = rec.results[-1].bw_average
        else:
            rec = parse("perftest-lat", client.get("stdout") or "")
            if not rec.results or rec.results[0].t_typical_us is None:
                raise ParseError("perftest-lat", "a result row with t_typical")
            measured = rec.results[0].t_typical_us
    except ParseError as exc:
        return CheckResult(status=ERROR, message=f"{label}: {name}: {exc}", details=details, **base)
    ok = thr.passes(measured)
    unit = thr.unit
    if counters is not None and name.endswith("_bw"):
        before, after = counters
        verdict = negative.judge(
            name,
            dict(zip(("client", "server"), before, strict=False)),
            dict(zip(("client", "server"), after, strict=False)),
            negative.reported_bytes(rec.results),
            bool(getattr(rec, "bidirectional", False)),
        )
        details["counters"] = verdict.details
        if not verdict.ok:
            return CheckResult(
                status=ERROR,
                message=f"{label}: {name} {measured:g} {unit} not counted on its ports: {verdict.message}",
                measured=measured,
                cause=verdict.message,
                details=details,
                **base,
            )
    msg = f"{label}: {name} {measured:g} {unit} ({thr.op} {thr.value:g})"
    cause = None
    if not ok:
        cause = f"below {thr.basis}" if name.endswith("_bw") else f"above {thr.basis}"
        if details["link_layer"] == "Ethernet":
            cause += (
                ": a lossy RoCE path (PFC, trust or DSCP map differing on a host or switch port), "
                "a degraded link, or congestion"
            )
        else:
            cause += ": a degraded port or link on the path, or congestion"
    return CheckResult(
        status=PASS if ok else FAIL, message=msg, measured=measured, cause=cause, details=details, **base
    )


# --- blame ---------------------------------------------------------------------------------


def blame(results: Sequence[CheckResult]) -> dict[tuple[str, int], list[str]]:
    """(host, rail) -> the distinct peers it failed with, for the hosts to blame.

    Per rail, the failed pairs (after the re-run) form edges; the host with the most distinct
    failing peers (at least two) is blamed and its edges are removed; repeat. Edges left over are
    pair-specific failures and blame no host.

    A failed test that isolation explained (``details["explained_by"]``, set by
    :func:`fabricops.verify.rounds.explained_by`) is attributed to the part it names: a cable between
    switches blames no host (the hosts at its ends are healthy), a host's port blames that host.
    """
    edges: dict[int, set[tuple[str, str]]] = {}
    out: dict[tuple[str, int], list[str]] = {}
    for r in results:
        if r.category != "pairs" or r.ok:
            continue
        a, b = r.details.get("client"), r.details.get("server")
        part = r.details.get("explained_by")
        if isinstance(part, dict):
            if part.get("kind") == "hca_port" and part.get("host") in (a, b):
                key = (str(part["host"]), int(r.details.get("rail", 0)))
                peer = b if part["host"] == a else a
                out[key] = sorted({*out.get(key, []), *([peer] if peer else [])})
            continue
        if a and b:
            edges.setdefault(int(r.details.get("rail", 0)), set()).add(tuple(sorted((a, b))))
    for rail, es in sorted(edges.items()):
        remaining = set(es)
        while True:
            peers: dict[str, set[str]] = {}
            for a, b in remaining:
                peers.setdefault(a, set()).add(b)
                peers.setdefault(b, set()).add(a)
            if not peers:
                break
            host = max(sorted(peers), key=lambda h: len(peers[h]))
            if len(peers[host]) < 2:
                break
            out[(host, rail)] = sorted(peers[host])
            remaining = {e for e in remaining if host not in e}
    return out


def annotate(
    results: Sequence[CheckResult], host_results: Sequence[CheckResult] = (), n_hosts: int = 0
) -> None:
    """Write blame and likely cause into failed pair results (in place)."""
    blamed = blame(results)
    host_fail = {}
    for hr in host_results:
        if not hr.ok and hr.device:
            host_fail.setdefault((hr.host, hr.device), hr)
    for r in results:
        if r.category != "pairs" or r.ok:
            continue
        rail = int(r.details.get("rail", 0))
        a, b = r.details.get("client"), r.details.get("server")
        devs = (r.device or "").split("<->")
        who = [h for h in (a, b) if (h, rail) in blamed]
        r.details["blamed"] = who
        if who:
            h = who[0]
            dev = devs[0] if h == a else devs[-1]
            known = host_fail.get((h, dev))
            why = known.cause if known is not None and known.cause else r.cause
            r.cause = (
                f"{h} {dev}: fails with {len(blamed[(h, rail)])} different peers "
                f"({', '.join(blamed[(h, rail)])}); {why}"
            )
        else:
            hints = [host_fail[(h, d)] for h, d in ((a, devs[0]), (b, devs[-1])) if (h, d) in host_fail]
            if hints:
                r.cause = f"{hints[0].host} {hints[0].device}: {hints[0].cause}"
            elif n_hosts == 2:
                r.cause = f"only one peer: cannot tell which host; {r.cause}"
            else:
                r.cause = (
                    f"pair-specific (each host passes with its other peers): the path between them; {r.cause}"
                )


# --- running ------------------------------------------------------------------------------


@dataclass
class PairRun:
    results: list[CheckResult] = field(default_factory=list)
    rounds: int = 0
    round_wall_s: list[float] = field(default_factory=list)
    rerun_wall_s: float = 0.0
    wall_s: float = 0.0
    reruns: int = 0
    rails: list[Rail] = field(default_factory=list)


def run_test(
    run: RunFn,
    test: RailTest,
    addresses: Mapping[str, str],
    profile: Profile,
    port_rate: float,
    opts: Mapping[str, Any],
    tests: Sequence[str] = TESTS,
    rail: Rail | None = None,
) -> list[CheckResult]:
    """Run each perftest of one rail test (server on the peer first, then the client).

    With ``rail``, its addresses, rate, link layer and RoCE options (GID index per side, ToS) are used.
    Around each bandwidth test the data counters of both ports are read (before the server starts,
    after the client ends): the negative control of :mod:`fabricops.verify.counters`."""
    out = []
    tcp = int(opts["base_port"]) + test.rail
    server_addr = (rail.addresses if rail is not None else addresses)[test.host_b]
    rate = rail.rate_gbps if rail is not None else port_rate
    layer = rail.link_layer if rail is not None else None
    watched = [
        (test.host_a, test.dev_a, layer or profile.hca.link_layer),
        (test.host_b, test.dev_b, layer or profile.hca.link_layer),
    ]
    x_a: list[str] = []
    x_b: list[str] = []
    if rail is not None and rail.roce:
        x_a = roce_args(rail.gid_index.get(test.host_a), rail.tos)
        x_b = roce_args(rail.gid_index.get(test.host_b), rail.tos)
    for name in tests:
        server_res: dict[str, Any] = {}
        token = new_token()

        client_done = threading.Event()

        def serve(
            name: str = name,
            box: dict[str, Any] = server_res,
            token: str = token,
            done: threading.Event = client_done,
        ) -> None:
            box.update(
                run(
                    test.host_b,
                    server_command(name, test.dev_b, tcp, opts, x_b, token=token),
                    opts["timeout_s"] + 10,
                )
            )
            if box.get("rc") != 0 and not done.is_set():  # a dead server: the client stops retrying
                run(test.host_a, stop_client_command(token), 30)

        before = negative.snapshot(run, watched) if name.endswith("_bw") else None
        t0 = time.monotonic()
        th = threading.Thread(target=serve, daemon=True)
        th.start()
        time.sleep(float(opts.get("server_start_s", 0.2)))
        client = dict(
            run(
                test.host_a,
                client_command(name, test.dev_a, tcp, server_addr, opts, x_a, token=token),
                opts["timeout_s"] + 30,
            )
        )
        client_done.set()
        if client.get("rc") != 0:
            run(test.host_b, stop_server_command(name, test.dev_b, tcp, opts, x_b, token=token), 30)
        th.join(opts["timeout_s"] + 15)
        if th.is_alive():
            server_res = {"rc": None, "stdout": "", "stderr": "server did not return"}
        wall = time.monotonic() - t0
        seen = None
        if before is not None and client.get("rc") == 0:
            seen = (before, negative.snapshot(run, watched))
        res = evaluate(test, name, client, server_res, profile, rate, wall, layer, counters=seen)
        if rail is not None:
            res.details["rail_name"] = rail.name
            if rail.switch:
                res.details["switch"] = rail.switch
            if rail.roce:
                res.details["roce"] = {
                    "server_address": server_addr,
                    "gid_index": {h: rail.gid_index.get(h) for h in (test.host_a, test.host_b)},
                    "tclass": rail.tos,
                }
        out.append(res)
    return out


def mark_rerun(first: Sequence[CheckResult], again: Sequence[CheckResult]) -> None:
    """Record on each re-run result what its first attempt said (the re-run's verdict stands)."""
    for old, new in zip(first, again, strict=True):
        first_attempt = {"status": old.status, "measured": old.measured, "message": old.message}
        new.details["first_attempt"] = first_attempt
        new.details["rerun"] = True


def run_pairs(
    run: RunFn,
    hosts: Sequence[str],
    rails: Mapping[str, Sequence[str]] | Sequence[Rail],
    addresses: Mapping[str, str],
    profile: Profile,
    port_rate: float,
    opts: Mapping[str, Any],
    *,
    progress: Callable[[str], None] | None = None,
    serial: bool = False,
    rerun: bool = True,
    tests: Sequence[str] = TESTS,
) -> PairRun:
    """All rounds in parallel (or one test at a time with ``serial``), then failed tests alone.

    ``rails``: :class:`Rail` s (each with its own addresses, rate and link layer), or the older
    mapping host -> compute ports in rail order (``addresses``, ``port_rate`` and the profile's link
    layer then apply to every rail)."""
    say = progress or (lambda _m: None)
    if isinstance(rails, Mapping):
        rails = rails_from_mapping(rails, addresses, profile.hca.link_layer, port_rate)
    by_index = {r.index: r for r in rails}
    rounds = plan(hosts, rails)
    pr = PairRun(rounds=len(rounds), rails=list(rails))
    t_start = time.monotonic()
    by_test: dict[RailTest, list[CheckResult]] = {}
    for i, rnd in enumerate(rounds, 1):
        t0 = time.monotonic()
        say(f"pairs round {i}/{len(rounds)}: " + ", ".join(sorted({t.pair for t in rnd})))
        if serial:
            for t in rnd:
                by_test[t] = run_test(run, t, addresses, profile, port_rate, opts, tests, by_index[t.rail])
        else:
            with ThreadPoolExecutor(max_workers=max(1, len(rnd))) as pool:
                futs = {
                    t: pool.submit(
                        run_test, run, t, addresses, profile, port_rate, opts, tests, by_index[t.rail]
                    )
                    for t in rnd
                }
                for t, f in futs.items():
                    by_test[t] = f.result()
        pr.round_wall_s.append(time.monotonic() - t0)
        bad = sum(1 for t in rnd for r in by_test[t] if not r.ok)
        say(
            f"pairs round {i}/{len(rounds)} done in {pr.round_wall_s[-1]:.1f} s"
            + (f", {bad} failed" if bad else "")
        )
    if rerun:
        t0 = time.monotonic()
        for t, res in list(by_test.items()):
            if all(r.ok for r in res):
                continue
            say(f"re-running alone: {t.label}")
            pr.reruns += 1
            again = run_test(run, t, addresses, profile, port_rate, opts, tests, by_index[t.rail])
            mark_rerun(res, again)
            by_test[t] = again
        pr.rerun_wall_s = time.monotonic() - t0
    for t in sorted(by_test, key=lambda x: (x.host_a, x.host_b, x.rail)):
        pr.results.extend(by_test[t])
    pr.wall_s = time.monotonic() - t_start
    return pr
