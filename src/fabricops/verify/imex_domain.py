"""The IMEX domain of each NVLink domain (GB200/GB300 NVL72): every member READY and connected to every other.

Each compute tray's ``nvidia-imex-ctl -N -j`` (read in the host phase, :data:`KEY`) is that tray's view of
the whole domain: the state of every node its nodes_config.cfg lists, its own connection to each, and the
domain state. :func:`judge` puts the views of one domain's members side by side (a pure function: no
I/O) and gives one ``imex_domain`` result per domain:

- a member is **down** when its own daemon is not READY, or when every other member that could be read
  sees it not connected (its own view unreadable, the host unreachable, or it sees no one: the others'
  views are the evidence);
- a connection that fails between two members that are not down is a **broken link**;
- a view whose node list differs from the inventory's domain (an address missing or extra: the node
  maps IMEX compares at start) and a domain state other than UP are failures too;
- a member whose view could not be read while its peers see it connected is no verdict: ``error``
  (fail closed), as is a domain of which no view could be read.

The result names the domain in ``device`` and as its component (``fabric``), every member in ``host``,
and carries ``details = {"domain", "down": [hosts], "members": {host: address}, ...}`` so that later
phases (NCCL across the domain) can leave an unhealthy domain out. :func:`phase` builds the members from
the expectations (``HostExpect.imex``) and reads the raw outputs; the host phase collects them
(``fabricops.verify.hostchecks.commands``).
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Mapping
from typing import Any

from fabricops.errors import ParseError
from fabricops.parsers import parse
from fabricops.parsers.nvidia_imex_ctl import CONNECTED, READY, UP, ImexDomainStatus
from fabricops.result import Component
from fabricops.verify.result import ERROR, FAIL, PASS, CheckResult

CHECK = "imex_domain"
CATEGORY = "gpus"
#: the raw key of the host phase's read
KEY = "imex_domain"
TOOL = "nvidia-imex-ctl-json"
#: the IMEX config the command service is found through (the nvidia_imex role's default)
DEFAULT_CONFIG = "/etc/nvidia-imex/config.cfg"

CAUSE = (
    "a compute tray's nvidia-imex is not running, not READY, or cannot reach its peers (node rebooted, "
    "service stopped, SERVER_PORT blocked, a different nodes_config.cfg): CUDA fabric memory and NCCL "
    "MNNVL across this NVLink domain fail"
)
ACTION = (
    "on the down trays: systemctl status nvidia-imex, journalctl -u nvidia-imex; re-run the nvidia_imex "
    "role (the same nodes_config.cfg on every tray); keep jobs spanning this domain off it until it passes"
)

#: a member's view: the parsed output, a sentence saying why there is none, or None (not in this run)
Report = ImexDomainStatus | str | None


def command(config_path: str = DEFAULT_CONFIG) -> str:
    """The host phase's read: the whole domain's status as this tray's IMEX sees it, in JSON."""
    return shlex.join(["nvidia-imex-ctl", "-N", "-j", "-c", config_path or DEFAULT_CONFIG])


def read(res: Mapping[str, Any] | None) -> ImexDomainStatus | str:
    """A raw ``{"rc", "stdout", "stderr"}`` of :data:`KEY`: the parsed view, or why there is none."""
    if res is None:
        return "nvidia-imex-ctl -N -j was not run (no data)"
    if res.get("rc") not in (0, None):
        lines = (res.get("stderr") or res.get("stdout") or "").strip().splitlines()
        last = lines[-1].strip() if lines else f"exit {res.get('rc')}"
        return f"`nvidia-imex-ctl -N -j` failed: {last}"
    try:
        return parse(TOOL, res.get("stdout") or "")
    except ParseError as exc:
        return str(exc)


def _addr(text: str | None) -> str:
    try:
        return str(ipaddress.ip_address(str(text or "").strip()))
    except ValueError:
        return str(text or "").strip()


def _own(view: ImexDomainStatus, address: str) -> Any:
    """The entry of the node at ``address`` in ``view`` (None: the view does not list it)."""
    return next((n for n in view.nodes if _addr(n.host) == address), None)


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _names(hosts: Any) -> str:
    return ", ".join(sorted(hosts, key=_natural))


def judge(domain: str, members: Mapping[str, str], reports: Mapping[str, Report]) -> list[CheckResult]:
    """One ``imex_domain`` result for NVLink domain ``domain``.

    ``members``: every host of the domain -> its IMEX address (``fabricops.imex.member_address``).
    ``reports``: host -> its parsed ``nvidia-imex-ctl -N -j``, or a sentence why it could not be read
    (unreachable, command failed, unreadable output); a member absent here (or None) was not read in
    this run and is judged only by what the others see of it."""
    hosts = sorted(members, key=_natural)
    addr = {h: _addr(members[h]) for h in hosts}
    owner = {a: h for h, a in addr.items()}
    views = {h: r for h, r in reports.items() if h in addr and isinstance(r, ImexDomainStatus)}
    unread = {h: r for h, r in reports.items() if h in addr and isinstance(r, str)}
    details: dict[str, Any] = {"domain": domain, "down": [], "members": dict(addr.items())}

    def result(status: str, message: str, **kw: Any) -> list[CheckResult]:
        return [
            CheckResult(
                CATEGORY,
                CHECK,
                ",".join(hosts) or "-",
                domain,
                status,
                f"NVLink domain {domain} ({len(hosts)} nodes): {message}",
                component=Component("fabric", domain),
                details=details,
                **kw,
            )
        ]

    if not views:
        details["down"] = sorted(unread, key=_natural)
        details["unread"] = dict(unread)
        why = "; ".join(f"{h}: {r}" for h, r in sorted(unread.items(), key=lambda x: _natural(x[0])))
        return result(
            ERROR,
            f"no member's IMEX view could be read ({why or 'none read in this run'}): "
            "could not run, failing closed",
        )

    problems: list[str] = []
    not_ready: dict[str, str] = {}  # member -> the state its own daemon reports (or a peer reports for it)
    missed: dict[str, list[str]] = {h: [] for h in hosts}  # member -> "reporter: STATUS" that miss it
    want = set(addr.values())
    for h, view in sorted(views.items(), key=lambda x: _natural(x[0])):
        listed = {_addr(n.host) for n in view.nodes if n.host}
        missing, extra = want - listed, listed - want
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"lacks {_names(owner[a] + ' (' + a + ')' for a in missing)}")
            if extra:
                parts.append(f"lists {', '.join(sorted(extra))} that no inventory host of the domain has")
            problems.append(f"{h}'s node list {' and '.join(parts)} (its nodes_config.cfg differs)")
        own = _own(view, addr[h])
        if own is None:
            continue
        if own.status != READY:
            not_ready[h] = own.status
        seen = {_addr(c.host): c.status for c in own.connections if c.host}
        for m in hosts:
            if m != h and seen.get(addr[m]) != CONNECTED:
                missed[m].append(f"{h}: {seen.get(addr[m]) or 'no connection'}")
        for n in view.nodes:
            m = owner.get(_addr(n.host))
            if m and m != h and m not in views and n.status != READY:
                not_ready.setdefault(m, n.status)
        if view.status != UP:
            problems.append(f"{h} reports domain state {view.status}")
    down: list[str] = []
    for m in hosts:
        others = [h for h in views if h != m and _own(views[h], addr[h]) is not None]
        unseen = bool(others) and len(missed[m]) >= len(others)
        if m in not_ready or unseen:
            down.append(m)
    links = sorted(
        {
            (reporter.split(": ")[0], m)
            for m in hosts
            if m not in down
            for reporter in missed[m]
            if reporter.split(": ")[0] not in down
        },
        key=lambda p: (_natural(p[0]), _natural(p[1])),
    )
    details.update(
        down=down,
        states={h: v.status for h, v in views.items()},
        links=[f"{a}->{b}" for a, b in links],
        unread=dict(unread),
    )
    if down:
        say = []
        for m in down:
            why = []
            if m in not_ready:
                why.append(f"IMEX {not_ready[m]}")
            if missed[m]:
                why.append(
                    f"not connected as seen by {'; '.join(missed[m][:3])}"
                    + (f" (+{len(missed[m]) - 3} more)" if len(missed[m]) > 3 else "")
                )
            if m in unread:
                why.append(f"its own view: {unread[m]}")
            elif m not in views and m not in unread:
                why.append("not read in this run")
            say.append(f"{m} ({addr[m]}) down: {', '.join(why)}")
        problems.insert(0, "; ".join(say))
    if links:
        problems.append("not connected: " + ", ".join(f"{a} -> {b}" for a, b in links))
    if problems:
        return result(
            FAIL,
            "; ".join(problems),
            measured=len(down),
            threshold=0,
            op="==",
            unit="down nodes",
            cause=CAUSE,
            action=ACTION,
        )
    if unread:
        why = "; ".join(f"{h}: {r}" for h, r in sorted(unread.items(), key=lambda x: _natural(x[0])))
        details["down"] = sorted(unread, key=_natural)
        return result(ERROR, f"its peers see every node connected, but {why} (could not run: failing closed)")
    return result(
        PASS,
        f"every node READY and connected to every other, domain state UP "
        f"(the views of {len(views)} of {len(hosts)} nodes agree)",
        measured=0,
        threshold=0,
        op="==",
        unit="down nodes",
    )


def phase(
    expects: Mapping[str, Any],
    raws: Mapping[str, Mapping[str, Any]],
    unreached: Mapping[str, str] | None = None,
    hostvars: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[CheckResult]:
    """One :func:`judge` per NVLink domain of the hosts whose ``HostExpect.imex`` is set (their platform
    runs IMEX) and that do not skip the check.

    Call it with the expectations of every host of the run, the unreachable ones included
    (``unreached``: host -> why), so that an unreachable tray counts as a member whose view is missing.
    ``hostvars`` (every inventory host's variables), when given, adds the domain's trays that are not in
    this run as members judged by their peers' views."""
    from fabricops import imex

    unreached = unreached or {}
    domains: dict[str, dict[str, str]] = {}
    out: list[CheckResult] = []
    for h, e in sorted(expects.items(), key=lambda x: _natural(x[0])):
        plan = getattr(e, "imex", None)
        if not plan or CHECK in getattr(e, "skip", ()):
            continue
        if not plan.get("domain"):
            message = (
                f"{h}: fabricops_nvlink_domain is not set: name the NVLink domain (the NVL72 rack) of this "
                "compute tray; its IMEX domain cannot be judged (failing closed)"
            )
            out.append(
                CheckResult(CATEGORY, CHECK, h, None, ERROR, message, details={"domain": None, "down": [h]})
            )
            continue
        domains.setdefault(str(plan["domain"]), {})[h] = str(plan["address"])
    for name, members in domains.items():
        for h, hv in (hostvars or {}).items():
            same = str(hv.get("fabricops_nvlink_domain") or "").strip() == name
            if same and h not in members and h not in expects:
                members[h] = imex.member_address(hv, h)
        reports: dict[str, Report] = {}
        for h in members:
            if h in unreached:
                reports[h] = f"host unreachable ({unreached[h]})"
            elif h in expects:
                reports[h] = read((raws.get(h) or {}).get(KEY))
        out.extend(judge(name, members, reports))
    return out
