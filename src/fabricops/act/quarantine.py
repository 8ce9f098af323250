"""Port quarantine: shut the switch port a plan names, through the switch platforms (docs/act.md).

A quarantine of the plan (:mod:`fabricops.act.plan`) names a part: a switch's port of a host cable
(``leaf1 swp3``, a ``switch_port`` result), an inter-switch cable (``ISL leaf1:swp31<>spine1:swp1``)
or a host's port (``gpu03 mlx5_0/1``, where a user's action table sends one to quarantine).
:class:`Quarantine` takes each in the plan's order:

1. **Locate** it on one switch port that the inventory's plan names: the switch's
   ``fabricops_cabling`` entries (host cables) and its ends of ``roce_switch_links`` /
   ``fabricops_switch_links`` (inter-switch links), read from the switch's own inventory variables;
   a host's port through its ``fabricops_cabling`` entry; an inter-switch cable at its end on the
   first switch fabricops drives. A port the plan does not name, or a switch not in the inventory, is
   refused. A switch that is not Onyx or Cumulus (an InfiniBand switch), or a part that names no
   single port (one link of an ECMP group), is left to be done by hand (``not_automated``).
2. **Only path.** A port that is the only path of a host the report shows (``Action.only_path``) is
   shut only when that host is out of service: its drain done (in a dry run: planned), or its node
   already drained or down. Otherwise it is refused: the host stays in service, so its port does too.
3. **Read** the port's administrative state (the platform's ``port_admin_state``; show commands
   only), in a dry run too. A port already down is "already quarantined": nothing is sent. An
   inter-switch link of a leaf (a switch with host cables) is refused when it is the leaf's last
   inter-switch link that is up.
4. **Cap.** At most ``Rails.max_ports_per_run`` ports are shut by one run
   (``--max-quarantine-per-run``); a port already down does not count.
5. **Send** (``--execute``): the session is opened under the switch's controller-side lock
   (:func:`fabricops.switch.lock.switch_lock`, the lock the roce_switch role takes, keyed by the
   device's address and port), so a concurrent converge and this change never interleave; the port
   is read again under the lock and set down (the platform's ``set_port_admin``). A dry run records
   the same commands and sends nothing.

The switch is reached as the roce_switch role, verify and diagnose reach it
(:func:`fabricops.switch.access.switch_connection` over the inventory's variables: inline vault,
known_hosts, bastion). Every failure (a switch not reachable, a command refused, output not
understood) is ``failed`` with one sentence. The action keeps the port's previous admin state and the
commands that release it (the same platform hook with state "up").
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from fabricops.act import plan as pl
from fabricops.act.slurm import Node
from fabricops.act.table import DRAIN, QUARANTINE
from fabricops.errors import FabricopsError

__all__ = ["Quarantine", "SwitchPorts"]

#: (switch, OS name, inventory variables) -> an open session (tests: an emulated switch in-process)
Connector = Callable[[str, str, Mapping[str, Any]], Any]

_ISL = re.compile(r"ISL ([^\s:<>]+):([^\s<>]+?)(?:<>|>)([^\s:<>]+):([^\s<>]+)")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return text or type(exc).__name__


class SwitchPorts:
    """The switches as the inventory describes them: their variables (``hostvars(name)``, as
    ``ansible-inventory --list`` prints them; {} for a name the inventory lacks) and a session to
    one, opened as the roce_switch role opens it (or by ``connector``)."""

    def __init__(self, hostvars: Callable[[str], Mapping[str, Any]], connector: Connector | None = None):
        self.hostvars = hostvars
        self.connector = connector
        self._vars: dict[str, dict[str, Any]] = {}

    def vars(self, name: str) -> dict[str, Any]:
        if name not in self._vars:
            try:
                self._vars[name] = dict(self.hostvars(name) or {})
            except Exception:  # a name the inventory cannot resolve is not in it
                self._vars[name] = {}
        return self._vars[name]

    @contextlib.contextmanager
    def session(self, switch: str, os_name: str, lock: str | None = None) -> Iterator[Any]:
        """A session to ``switch``; with ``lock`` (what the lock file says is running), opened and
        used under the switch's controller-side lock. Raises :class:`FabricopsError` (one sentence)."""
        from fabricops.roce import platforms
        from fabricops.switch.access import switch_connection
        from fabricops.switch.errors import SwitchError
        from fabricops.switch.lock import device_key, switch_lock

        hv = self.vars(switch)
        if hv.get("fabricops_switch_reachable") is False:
            raise SwitchError(f"{switch} is marked unreachable (fabricops_switch_reachable: false)")
        if self.connector is not None:
            key = None
            connector = self.connector

            def open_session() -> Any:
                return connector(switch, os_name, hv)
        else:
            access = switch_connection(hv, switch=switch, os_name=os_name, inventory=True)
            key = device_key(access.host, access.port)

            def open_session() -> Any:
                return platforms.connect(access)

        held = switch_lock(switch, lock, key) if lock else contextlib.nullcontext()
        with held:
            try:
                conn = open_session()
            except FabricopsError:
                raise
            except Exception as exc:
                raise SwitchError(f"{switch}: step 'connect' failed: {_one_line(exc)}") from None
            try:
                yield conn
            finally:
                with contextlib.suppress(Exception):  # already closed by a failed change
                    conn.disconnect()


class _Stop(Exception):
    """This quarantine ends here: ``status`` (refused | not_automated | skipped | failed), ``why``."""

    def __init__(self, status: str, why: str):
        super().__init__(why)
        self.status, self.why = status, why


@dataclass(frozen=True)
class _Port:
    switch: str
    port: str  #: the platform's name (Eth1/3, swp3)
    os_name: str
    platform: Any
    isl_peer: tuple[str, str] | None  #: an inter-switch link: its other end


def _links(hv: Mapping[str, Any]) -> Any:
    return hv.get("roce_switch_links") or hv.get("fabricops_switch_links")


class Quarantine:
    """Runs the quarantines of one plan (see the module doc); :meth:`run` updates an action in place."""

    def __init__(
        self,
        ports: SwitchPorts,
        rails: pl.Rails,
        nodes: Mapping[str, Node],
        node_of: Callable[[str], str],
        *,
        execute: bool,
    ):
        self.ports = ports
        self.rails = rails
        self.nodes = nodes
        self.node_of = node_of
        self.execute = execute
        self.counted = 0  #: ports this run shuts (in a dry run: would shut)
        self.down: dict[tuple[str, str], str] = {}  #: (switch, port) down after this run -> its target

    # ----------------------------------------------------------------------- the steps

    def run(self, a: pl.Action, p: pl.Plan) -> None:
        if a.kind != QUARANTINE or a.status != pl.PLANNED:
            return
        try:
            where = self._locate(a)
            a.switch, a.switch_port = where.switch, where.port
            self._only_path(a, p)
            self._send(a, where)
        except _Stop as stop:
            a.status, a.why = stop.status, pl._join(a.why, stop.why)

    def _locate(self, a: pl.Action) -> _Port:
        from fabricops.roce.platforms import switch_platform
        from fabricops.roce.switchspec import SwitchError, ports_from_cabling
        from fabricops.switch.access import switch_os

        isl = _ISL.match(a.target)
        if a.part == "hca_port" and a.ends:
            ends = [self._cabled(*a.ends[0])]
        elif isl:
            ends = [(isl[1], isl[2]), (isl[3], isl[4])]
        elif a.part == "switch_port" and len(a.target.split()) == 2:
            sw, port = a.target.split()
            ends = [(sw, port)]
        else:
            raise _Stop(
                pl.NOT_AUTOMATED,
                f"{a.target} names no single switch port (one link of an ECMP group): find the link on "
                "the switches and quarantine it by hand",
            )
        known = [(sw, port, self.ports.vars(sw)) for sw, port in ends]
        driven = [(sw, port, hv, switch_os(hv)) for sw, port, hv in known if hv and switch_os(hv)]
        if not driven:
            absent = [sw for sw, _p, hv in known if not hv]
            if len(absent) == len(known):
                raise _Stop(
                    pl.REFUSED,
                    f"{' and '.join(absent)} {'is' if len(absent) == 1 else 'are'} not in the inventory: "
                    "act shuts only ports of switches the inventory describes; nothing sent",
                )
            names = " and ".join(sw for sw, _p, hv in known if hv)
            raise _Stop(
                pl.NOT_AUTOMATED,
                f"{names} {'is not a switch' if len(known) == 1 else 'are not switches'} fabricops drives "
                "(fabricops_switch_os onyx or cumulus; act does not shut InfiniBand switch ports): "
                "quarantine it by hand",
            )
        sw, raw_port, hv, os_name = driven[0]
        plat = switch_platform(os_name)
        try:
            port = plat.normalize_port(raw_port)
            planned = plat.normalize_ports(ports_from_cabling(hv.get("fabricops_cabling"), sw, _links(hv)))
        except SwitchError as exc:
            raise _Stop(pl.REFUSED, f"{exc} Nothing sent") from None
        if port not in planned:
            raise _Stop(
                pl.REFUSED,
                f"{sw} {port} is not in the plan (no fabricops_cabling entry or inter-switch link of {sw} "
                "names it): act shuts only the fabric ports the plan names; nothing sent",
            )
        peer = None
        if isl:
            other = [e for e in ends if e != (sw, raw_port)]
            peer = other[0] if other else None
        return _Port(sw, port, os_name, plat, peer)

    def _cabled(self, host: str, device: str) -> tuple[str, str]:
        """The switch port a host's port is cabled to (the host's ``fabricops_cabling`` entry)."""
        for e in self.ports.vars(host).get("fabricops_cabling") or []:
            if not isinstance(e, Mapping) or str(e.get("host")) != host:
                continue
            if f"{e.get('hca')}/{e.get('port', 1)}" == device and e.get("switch") and e.get("switch_port"):
                return str(e["switch"]), str(e["switch_port"])
        raise _Stop(
            pl.REFUSED,
            f"{host} {device} is not in fabricops_cabling: no switch port to shut for it; nothing sent",
        )

    def _only_path(self, a: pl.Action, p: pl.Plan) -> None:
        """Refuse to shut a host's only path while that host is in service."""
        for host in a.only_path:
            drain = next((d for d in p.of(DRAIN) if d.host == host), None)
            if drain is not None and (
                drain.status == pl.DONE or (not self.execute and drain.status == pl.PLANNED)
            ):
                continue
            node = self.nodes.get(self.node_of(host))
            if node is not None and node.out_of_service:
                continue
            state = "not drained" if drain is None else f"not drained ({drain.status}: its DRAIN line)"
            raise _Stop(
                pl.REFUSED,
                f"{a.target} is {host}'s only path to that fabric and {host} is {state}: the port is shut "
                "only once the host behind it is out of service; nothing sent",
            )

    def _send(self, a: pl.Action, where: _Port) -> None:
        what = f"fabricops act quarantine {where.port}" if self.execute else None
        try:
            with self.ports.session(where.switch, where.os_name, what) as conn:
                before = where.platform.port_admin_state(conn, where.port)
                if before is None:
                    raise _Stop(
                        pl.FAILED,
                        f"{where.switch} lists no port {where.port}: the inventory's plan names a port the "
                        "switch does not have; nothing sent",
                    )
                a.previous_admin = before
                key = (where.switch, where.port)
                release = where.platform.port_admin_commands(where.port, "up")
                if before == "down":
                    self.down[key] = a.target
                    raise _Stop(
                        pl.SKIPPED,
                        f"already quarantined: {where.switch} {where.port} is administratively down; "
                        f"nothing sent (release: {'; '.join(release)})",
                    )
                if key in self.down:
                    raise _Stop(pl.SKIPPED, f"the same port as {self.down[key]}; nothing sent")
                self._last_isl(conn, where)
                if self.counted >= self.rails.max_ports_per_run:
                    raise _Stop(
                        pl.REFUSED,
                        f"--max-quarantine-per-run {self.rails.max_ports_per_run} reached; nothing sent",
                    )
                commands = where.platform.port_admin_commands(where.port, "down")
                a.release = release
                if self.execute:
                    a.commands = where.platform.set_port_admin(conn, where.switch, where.port, "down")
                    a.status = pl.DONE
                else:
                    a.commands = commands
                self.counted += 1
                self.down[key] = a.target
        except _Stop:
            raise
        except Exception as exc:  # unreachable, refused, output not understood: one sentence
            text = _one_line(exc)
            if not text.startswith(where.switch):
                text = f"{where.switch}: {text}"
            raise _Stop(pl.FAILED, text) from None

    def _last_isl(self, conn: Any, where: _Port) -> None:
        """Refuse to shut a leaf's last inter-switch link that is up (its hosts would lose the fabric)."""
        from fabricops.roce.switchspec import isl_ports

        if where.isl_peer is None:
            return
        hv = self.ports.vars(where.switch)
        cabled = [e for e in hv.get("fabricops_cabling") or [] if isinstance(e, Mapping)]
        leaf = where.switch if any(str(e.get("switch")) == where.switch for e in cabled) else None
        peer_switch = where.isl_peer[0]
        if leaf is None and any(str(e.get("switch")) == peer_switch for e in cabled):
            leaf = peer_switch
        if leaf is None:
            return
        links = _links(hv)
        plat = where.platform
        if leaf == where.switch:
            others = [p for p in plat.normalize_ports(isl_ports(links, leaf)) if p != where.port]
            others = [p for p in others if (leaf, p) not in self.down]
            states = plat.port_states(plat.read_port_state(conn, others), others) if others else {}
            up = [p for p in others if states.get(p) is not None and states[p].oper == "up"]
        else:  # the leaf is the other end, on a switch this session does not read: count the plan
            up = [p for p in isl_ports(links, leaf) if p != where.isl_peer[1]]
        if not up:
            raise _Stop(
                pl.REFUSED,
                f"{where.switch} {where.port} is on {leaf}'s last inter-switch link that is up: shutting it "
                f"would cut {leaf}'s hosts off the rest of the fabric; nothing sent",
            )
