"""Cross-host consistency per rail: ``rail_consistency`` results (check names: SPEC-19 F).

A rail is the same HCA port on every host (``mlx5_0/1``, as :class:`fabricops.verify.pairs.Rail`).
Every host on a rail must agree on

- the port's **active MTU** (``ibv_devinfo``: the IB path MTU; on RoCE the kernel derives it from
  the netdev MTU). Queue pairs between hosts with different MTUs fail or stall, and NCCL hangs at
  connection setup (NVIDIA/nccl#1524);
- the **NCCL settings** that must be the same on both ends of a connection (:data:`SETTINGS`,
  from each host's ``/etc/nccl.conf``, the read the ``nccl_profile`` host check already made) and
  whether the rail's port is in the host's ``NCCL_IB_HCA``.

Per rail: FAIL naming the hosts that differ from the majority and the setting; fewer than two hosts
with evidence: SKIP saying so; a host whose evidence is missing or unreadable: ERROR (no verdict
without evidence). Ports that are not ACTIVE are left to the ``hca_port`` check and named here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fabricops.errors import ParseError
from fabricops.evidence.hostfiles import parse_nccl_conf
from fabricops.verify.expect import HostExpect, _natural
from fabricops.verify.result import ERROR, FAIL, PASS, SKIP, CheckResult

CHECK = "rail_consistency"
#: What is read on each host (plain ibv_devinfo prints every port's active_mtu).
COMMAND = "ibv_devinfo"
KEY = "ibv_devinfo"
#: NCCL settings both ends of a connection must share (NCCL env docs): transport on/off and plugin,
#: the RoCE traffic class / IB service level the switches map to the lossless class, the GID family
#: and RoCE version, cross-NIC ring policy, and the IB timeouts. Per-host values (NCCL_IB_HCA
#: itself, NCCL_IB_GID_INDEX, NCCL_SOCKET_IFNAME) are not compared; rail membership is.
SETTINGS = (
    "NCCL_IB_DISABLE",
    "NCCL_NET_PLUGIN",
    "NCCL_NET",
    "NCCL_IB_TC",
    "NCCL_IB_SL",
    "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_ADDR_FAMILY",
    "NCCL_CROSS_NIC",
    "NCCL_IB_TIMEOUT",
    "NCCL_IB_RETRY_CNT",
    "NCCL_ALGO",
    "NCCL_PROTO",
)
CAUSE_MTU = (
    "{hosts} {device}: active MTU {odd} where the rest of the rail has {common}: queue pairs between "
    "them fail or stall and NCCL hangs at connection setup (NVIDIA/nccl#1524); set the same MTU on "
    "every host and switch port of the rail (RoCE: netdev MTU 4200 or more for a 4096 path MTU; "
    "InfiniBand: the switch/SM MTU)"
)
CAUSE_NCCL = (
    "{hosts}: /etc/nccl.conf differs from the rest of rail {device} ({what}): run the nccl_profile "
    "role on every host of the rail with the same variables"
)

RunFn = Callable[[str, str, float], Mapping[str, Any]]


def _nccl_conf(raw: Mapping[str, Any]) -> dict[str, str] | str | None:
    """The host's nccl.conf as a dict; None when it was not read (no nccl_profile planned); a
    sentence when the read failed."""
    res = raw.get("nccl_conf")
    if res is None:
        return None
    if res.get("rc") != 0:
        err = (res.get("stderr") or res.get("stdout") or "").strip().splitlines()
        return f"nccl.conf unreadable ({err[-1] if err else 'exit ' + str(res.get('rc'))})"
    return parse_nccl_conf(res.get("stdout") or "")


def _listed(env: Mapping[str, str], hca: str, port: int) -> bool:
    """Whether NCCL_IB_HCA selects ``hca:port`` (NCCL's rules: ``=`` exact, ``^`` exclude, prefix)."""
    spec = env.get("NCCL_IB_HCA")
    if not spec:
        return True  # NCCL uses every port
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    hit = False
    for item in filter(None, spec.split(",")):
        name, _, p = item.partition(":")
        if (name == hca if exact else hca.startswith(name)) and (not p or p == str(port)):
            hit = True
    return hit != exclude


def _mtus(raw: Mapping[str, Any]) -> tuple[dict[str, tuple[str | None, int | None]] | None, str | None]:
    """``hca/port`` -> (state, active_mtu) from ibv_devinfo, or (None, why)."""
    from fabricops.parsers.ibv_devinfo import parse

    res = raw.get(KEY)
    if res is None:
        return None, "ibv_devinfo was not run"
    if res.get("rc") not in (0, None):
        err = (res.get("stderr") or res.get("stdout") or "").strip().splitlines()
        return None, f"ibv_devinfo failed ({err[-1] if err else 'exit ' + str(res.get('rc'))})"
    try:
        info = parse(res.get("stdout") or "")
    except ParseError as exc:
        return None, f"ibv_devinfo unreadable ({exc})"
    return {f"{d.hca_id}/{p.port}": (p.state, p.active_mtu) for d in info.devices for p in d.ports}, None


def _odd(values: Mapping[str, Any]) -> tuple[bool, Any, list[str]]:
    """(there is a majority, its value, hosts that differ). A tie has no majority: every host is named."""
    ranked = Counter(values.values()).most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return False, None, sorted(values, key=_natural)
    common = ranked[0][0]
    return True, common, sorted((h for h, v in values.items() if v != common), key=_natural)


def _others(majority: bool, common: Any) -> str:
    return f" (the others {_show(common)})" if majority else " (no majority)"


def _show(value: Any) -> str:
    return "unset" if value is None else str(value)


def judge(expects: Mapping[str, HostExpect], raws: Mapping[str, Mapping[str, Any]]) -> list[CheckResult]:
    """``rail_consistency`` per rail from what the hosts returned (``raws[host]``)."""
    rails: dict[str, dict[str, Any]] = {}
    for h, e in expects.items():
        for p in e.ports:
            rails.setdefault(p.device, {})[h] = p
    out: list[CheckResult] = []
    parsed = {h: _mtus(raws.get(h) or {}) for h in expects}
    confs = {h: _nccl_conf(raws.get(h) or {}) for h in expects}
    for device in sorted(rails, key=_natural):
        members = rails[device]
        hosts = sorted(members, key=_natural)
        mtu: dict[str, int] = {}
        missing: list[str] = []
        inactive: list[str] = []
        for h in hosts:
            ports, why = parsed[h]
            if ports is None:
                missing.append(f"{h}: {why}")
                continue
            state, active = ports.get(device, (None, None))
            if device not in ports:
                missing.append(f"{h}: {device} not in ibv_devinfo")
            elif not state or "ACTIVE" not in state.upper():
                inactive.append(h)
            elif not active:
                missing.append(f"{h}: no active_mtu for {device}")
            else:
                mtu[h] = int(active)
        hca, _, port = device.partition("/")
        settings: dict[str, dict[str, Any]] = {}
        for h in mtu:
            conf = confs[h]
            if isinstance(conf, str):
                missing.append(f"{h}: {conf}")
                continue
            if conf is None:
                continue
            for name in SETTINGS:
                settings.setdefault(name, {})[h] = conf.get(name)
            settings.setdefault("in NCCL_IB_HCA", {})[h] = "yes" if _listed(conf, hca, int(port)) else "no"
        problems: list[str] = []
        odd_hosts: list[str] = []
        causes: list[str] = []
        measured: dict[str, Any] = {"active_mtu": dict(mtu)}
        if len(mtu) >= 2:
            majority, common, odd = _odd(mtu)
            if odd:
                detail = ", ".join(f"{h} {mtu[h]}" for h in odd)
                problems.append(f"active MTU differs: {detail}{_others(majority, common)}")
                odd_hosts += odd
                causes.append(
                    CAUSE_MTU.format(
                        hosts=", ".join(odd),
                        device=device,
                        odd="/".join(sorted({str(mtu[h]) for h in odd})),
                        common=common if majority else "another",
                    )
                )
            diffs = []
            for name, values in settings.items():
                if len(values) < 2:
                    continue
                measured[name] = dict(values)
                majority, common, odd = _odd(values)
                if odd:
                    diffs.append((name, odd, (majority, common), values))
            if diffs:
                whats = []
                for name, odd, common, values in diffs:
                    detail = ", ".join(f"{h} {_show(values[h])}" for h in odd)
                    whats.append(f"{name}: {detail}{_others(*common)}")
                    odd_hosts += odd
                problems.append("; ".join(whats))
                causes.append(
                    CAUSE_NCCL.format(
                        hosts=", ".join(sorted({h for _n, o, _c, _v in diffs for h in o}, key=_natural)),
                        device=device,
                        what=", ".join(n for n, *_ in diffs),
                    )
                )
        note = f"; not ACTIVE (left to hca_port): {', '.join(inactive)}" if inactive else ""
        if problems:
            if missing:
                note += f"; no evidence from {'; '.join(missing)}"
            who = sorted(set(odd_hosts), key=_natural)
            out.append(
                CheckResult(
                    "hosts",
                    CHECK,
                    ",".join(who),
                    device,
                    FAIL,
                    f"rail {device}: {'; '.join(problems)}{note}",
                    measured=measured,
                    cause="; ".join(causes),
                    details={"hosts": hosts, "differ": who},
                )
            )
        elif missing:
            out.append(
                CheckResult(
                    "hosts",
                    CHECK,
                    ",".join(hosts),
                    device,
                    ERROR,
                    f"rail {device}: no evidence from {'; '.join(missing)} (failing closed){note}",
                    measured=measured,
                    details={"hosts": hosts},
                )
            )
        elif len(mtu) < 2:
            out.append(
                CheckResult(
                    "hosts",
                    CHECK,
                    ",".join(hosts),
                    device,
                    SKIP,
                    f"rail {device}: {len(mtu)} host(s) with the port ACTIVE, nothing to compare{note}",
                    measured=measured,
                    details={"hosts": hosts},
                )
            )
        else:
            compared = "active MTU " + str(next(iter(mtu.values())))
            if settings:
                compared += " and the NCCL settings of /etc/nccl.conf"
            out.append(
                CheckResult(
                    "hosts",
                    CHECK,
                    ",".join(sorted(mtu, key=_natural)),
                    device,
                    PASS,
                    f"rail {device}: {len(mtu)} hosts agree ({compared}){note}",
                    measured=measured,
                    details={"hosts": hosts},
                )
            )
    return out


def phase(
    run: RunFn,
    expects: Mapping[str, HostExpect],
    raws: Mapping[str, Mapping[str, Any]],
    timeout: float,
    skip: Sequence[str] = (),
) -> list[CheckResult]:
    """Read each host's ports (ibv_devinfo) and judge every rail; nothing when the check is skipped."""
    wanted = {h: e for h, e in expects.items() if CHECK not in e.skip and CHECK not in skip}
    if not wanted:
        return []

    def one(h: str) -> tuple[str, dict[str, Any]]:
        raw = dict(raws.get(h) or {})
        if KEY not in raw:
            raw[KEY] = dict(run(h, COMMAND, timeout))
        return h, raw

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(wanted)))) as pool:
        got = dict(pool.map(one, list(wanted)))
    return judge(wanted, got)
