"""Read-only: what a switch port on a RoCE path has against ``fabricops_roce`` (the likely cause of a
degraded RoCE pair), and every fabric port's link state, speed and counters
(:meth:`SwitchReader.port_states`, the platform's ``read_port_state``: Onyx ``show interfaces
ethernet | json-print``, NVUE ``nv show interface -o json``).

The switch is read through the project's switch transport (``fabricops.switch.transport``: netmiko,
show commands only: ``get_roce_data``) and its configured state gathered with
``fabricops.roce.resource.gather``; the wanted state is ``fabricops.roce.switchspec.want_facts`` of the
same validated definition the roce_switch role applies. Nothing here configures a switch.

:func:`port_problems` is pure (facts in, sentences out); :class:`SwitchReader` connects: a session per
read, or, while :meth:`SwitchReader.keep_sessions` holds them (``fabricops verify`` for its whole
run), one session per switch reused by every read (a lock per session: one thread on it at a time; a
session that died between reads is reopened once and the read retried).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import FabricopsError
from fabricops.roce.platforms import SWITCH_OS, switch_platform
from fabricops.roce.platforms.base import PortState, natural
from fabricops.roce.platforms.nvue import nvue_pfc_priorities

__all__ = [
    "PATH_KNOBS",
    "PortState",
    "SwitchPortsRead",
    "SwitchReader",
    "SwitchSessions",
    "inventory_access",
    "isl_path",
    "keep_sessions",
    "nvue_pfc_priorities",
    "port_problems",
]

#: (switch, ports) -> {port: [problem sentences]} (empty list: the port is as declared)
ReadFn = Callable[[str, Sequence[str]], Mapping[str, list[str]]]
PASSWORD_ENV = "FABRICOPS_SWITCH_PASSWORD"  # read by fabricops.switch.access
_LOADER_READY = False
#: Ansible's plugin loader and Templar are not safe to set up from several threads at once (switches
#: are read in parallel): the inventory's access is resolved one switch at a time, the sessions open
#: in parallel
_ACCESS_LOCK = threading.Lock()
#: closing the kept sessions waits this long for a read still running on one
CLOSE_WAIT_S = 60.0

#: knobs that decide whether the lossless class is lossless (ETS weights and the watchdog do not);
#: each platform's ``path_knobs`` (``fabricops.roce.platforms``)
PATH_KNOBS = {name: switch_platform(name).path_knobs for name in SWITCH_OS}


def _describe(os_name: str, key: tuple, want: Any, have: Any, lp: int) -> str:
    return switch_platform(os_name).describe(key, want, have, lp)


def port_problems(
    os_name: str, have: Mapping[tuple, Any], roce: Mapping[str, Any] | None, port: str
) -> list[str]:
    """What ``port`` (configured facts ``have``) lacks for the lossless class of ``roce``.

    Empty when the port holds every PFC / trust / ECN / DSCP-map fact the roce_switch role would set.
    Raises :class:`FabricopsError` when ``roce`` does not validate."""
    from fabricops.roce.switchspec import normalize_os, switch_spec, want_facts

    os_name = normalize_os(os_name)
    spec = switch_spec(os_name, roce, [port])
    want = want_facts(spec)
    lp = spec.roce.lossless_priority
    out = []
    for key, value in want.items():
        if key[0] not in spec.platform.path_knobs:
            continue
        got = have.get(key)
        if got != value:
            out.append(_describe(os_name, key, value, got, lp))
    return out


#: one inter-switch link end on a path: (switch, port, peer switch, peer port)
IslEnd = tuple[str, str, str, str]


def isl_path(links: Sequence[Mapping[str, Any]] | None, switch_a: str, switch_b: str) -> list[IslEnd]:
    """Every inter-switch link end a packet from ``switch_a`` to ``switch_b`` may cross
    (``fabricops_switch_links`` entries, checked by :func:`fabricops.roce.switchspec.isl_ports`): the
    direct links, and both ends of every link of a two-tier path ``switch_a - X - switch_b`` through a
    switch X linked to both. RoCE ECMP (and, from verify's side, InfiniBand routing) may take any of
    them, so each is a candidate. Empty when both are the same switch."""
    from fabricops.roce.switchspec import isl_ports

    if switch_a == switch_b:
        return []
    isl_ports(links, switch_a)  # a half-written entry: one sentence, not a silent gap
    pairs: list[tuple[str, str, str, str]] = []
    for e in links or []:
        pairs.append((str(e["switch_a"]), str(e["port_a"]), str(e["switch_b"]), str(e["port_b"])))
        pairs.append((str(e["switch_b"]), str(e["port_b"]), str(e["switch_a"]), str(e["port_a"])))
    near = {sw for sw, _p, peer, _pp in pairs if peer == switch_a}
    far = {sw for sw, _p, peer, _pp in pairs if peer == switch_b}
    via = (near & far) - {switch_a, switch_b}
    out: list[IslEnd] = []
    for end in pairs:
        sw, _port, peer, _peer_port = end
        direct = {sw, peer} == {switch_a, switch_b}
        hop = (sw in via and peer in (switch_a, switch_b)) or (peer in via and sw in (switch_a, switch_b))
        if (direct or hop) and end not in out:
            out.append(end)
    return sorted(out, key=lambda e: (natural(e[0]), natural(e[1])))


def _render(value: Any, variables: Mapping[str, Any]) -> Any:
    """Resolve an inventory template (``{{ lookup('file', ...) }}``) as Ansible would."""
    if not isinstance(value, str) or "{{" not in value:
        return value
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar

    global _LOADER_READY
    if not _LOADER_READY:
        init_plugin_loader()
        _LOADER_READY = True
    try:
        from ansible.template import trust_as_template  # ansible-core >= 2.19

        value = trust_as_template(value)
    except ImportError:  # pragma: no cover - older ansible-core renders plain strings
        pass
    return Templar(loader=DataLoader(), variables=dict(variables)).template(value)


def inventory_access(hostvars: Mapping[str, Any], switch: str, os_name: str | None = None) -> Any:
    """How to reach ``switch`` from its ``ansible-inventory --list`` variables: the roce_switch role's
    own :func:`fabricops.switch.access.switch_connection` (inline vault decrypted with Ansible's vault
    secrets, ``!unsafe`` never templated, every other template rendered by Ansible's Templar)."""
    from fabricops.switch.access import switch_connection

    return switch_connection(hostvars, switch=switch, os_name=os_name, inventory=True)


@dataclass
class SwitchPortsRead:
    """What one read of a switch's fabric ports found (:meth:`SwitchReader.port_states`)."""

    switch: str
    os_name: str
    #: the caller's port name -> its state; a port the switch did not list is in ``missing``
    states: dict[str, PortState] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    #: port -> what it lacks for the lossless class of ``fabricops_roce`` ([]: as declared); None when
    #: not judged (``qos=False``, no RoCE definition for the switch, or ``qos_error``)
    qos: dict[str, list[str]] | None = None
    qos_error: str | None = None


def _disconnect(conn: Any) -> None:
    with contextlib.suppress(Exception):  # a dead session may fail to close
        conn.disconnect()


@dataclass
class _Session:
    """One switch's kept session; ``lock``: one thread at a time on it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    conn: Any = None
    os_name: str = ""
    hv: dict[str, Any] = field(default_factory=dict)
    closed: bool = False  #: the kept sessions were closed: a read still holding this opens its own

    def drop(self) -> None:
        if self.conn is not None:
            _disconnect(self.conn)
        self.conn = None


class SwitchSessions:
    """The handle :meth:`SwitchReader.keep_sessions` returns: ``close()`` (or leaving its ``with``
    block) closes the kept sessions."""

    def __init__(self, reader: SwitchReader | None):
        self.reader = reader

    def close(self) -> None:
        reader, self.reader = self.reader, None
        if reader is not None:
            reader.close_sessions()

    def __enter__(self) -> SwitchSessions:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def keep_sessions(reader: Any) -> SwitchSessions:
    """Keep one session per switch open for a run of ``reader`` (a :class:`SwitchReader`; anything
    else: a handle that does nothing), closed by the handle's ``close()``."""
    keep = getattr(reader, "keep_sessions", None)
    return keep() if callable(keep) else SwitchSessions(None)


class SwitchReader:
    """Reads switch ports through ``fabricops.switch.transport`` (show commands only).

    ``hostvars(name)`` gives a switch's inventory variables (as ``ansible-inventory --list`` prints
    them); the switch is reached as the roce_switch role reaches it (:func:`inventory_access`) and
    checked against the definition that role applied to it (``fabricops.roce.desired``)."""

    def __init__(
        self,
        hostvars: Callable[[str], Mapping[str, Any]],
        roce: Mapping[str, Any] | None,
        connector: Callable[..., Any] | None = None,
    ):
        self.hostvars = hostvars
        self.roce = roce
        self.connector = connector
        #: switch -> its kept session while sessions are kept (:meth:`keep_sessions`), else None
        self._kept: dict[str, _Session] | None = None
        self._kept_lock = threading.Lock()

    def _open(self, switch: str) -> tuple[Any, str, dict[str, Any]]:
        """(session, OS name, inventory variables) of ``switch``, reached as the roce_switch role
        reaches it; raises :class:`FabricopsError` with one sentence when it cannot be."""
        from fabricops.roce import platforms
        from fabricops.roce.switchspec import normalize_os
        from fabricops.switch import transport
        from fabricops.switch.access import switch_os

        with _ACCESS_LOCK:
            hv = dict(self.hostvars(switch) or {})
        if not hv:
            raise FabricopsError(f"{switch} is not in the inventory")
        if hv.get("fabricops_switch_reachable") is False:
            raise FabricopsError(f"{switch} is marked unreachable (fabricops_switch_reachable: false)")
        os_name = switch_os(hv)
        if os_name is None:  # the same sentence as the roce_switch role's
            os_name = normalize_os(hv.get("fabricops_switch_os") or hv.get("ansible_network_os"))
        if self.connector is not None:
            conn = self.connector(switch, os_name, hv)
        else:
            with _ACCESS_LOCK:
                access = inventory_access(hv, switch, os_name)
            conn = platforms.connect(access)
        # show commands only: no prompt probe before each (transport.known_prompt)
        return transport.known_prompt(conn), os_name, hv

    def _problems(
        self,
        switch: str,
        os_name: str,
        hv: Mapping[str, Any],
        data: Mapping[str, str],
        names: Mapping[str, str],
    ) -> dict[str, list[str]]:
        from fabricops.roce.resource import gather

        facts, _oper = gather(os_name, data, sorted(set(names.values())))
        # NVUE: PFC priorities in every shape `nv show qos` prints them (nvue_pfc_priorities)
        facts = switch_platform(os_name).port_facts(facts, data)
        return {p: port_problems(os_name, facts, self._roce(switch, hv), n) for p, n in names.items()}

    def __call__(self, switch: str, ports: Sequence[str]) -> dict[str, list[str]]:
        from fabricops.roce.resource import get_roce_data
        from fabricops.roce.switchspec import normalize_ports

        def read(conn: Any, os_name: str, hv: Mapping[str, Any]) -> dict[str, list[str]]:
            names = {p: normalize_ports(os_name, [p])[0] for p in ports}
            data = get_roce_data(conn, os_name, sorted(set(names.values())))
            return self._problems(switch, os_name, hv, data, names)

        return self._in_session(switch, read)

    def port_states(self, switch: str, ports: Sequence[str], qos: bool = False) -> SwitchPortsRead:
        """``ports``' link state, speed and counters as the switch reports them (the platform's
        ``read_port_state``: one show for the whole switch), and with ``qos`` what each lacks for the
        lossless class (:func:`port_problems`), in the same session. Show commands only. Raises
        :class:`FabricopsError` (or a transport error) when the switch cannot be read."""
        from fabricops.roce.resource import get_roce_data
        from fabricops.roce.switchspec import normalize_ports

        def read(conn: Any, os_name: str, hv: Mapping[str, Any]) -> tuple[SwitchPortsRead, Any, dict, list]:
            plat = switch_platform(os_name)
            names = {p: normalize_ports(os_name, [p])[0] for p in ports}
            wanted = sorted(set(names.values()), key=natural)
            out = SwitchPortsRead(switch, os_name)
            raw = plat.read_port_state(conn, wanted)
            roce = self._roce(switch, hv) if qos else None
            if roce is not None:
                try:
                    data = get_roce_data(conn, os_name, wanted)
                    out.qos = self._problems(switch, os_name, hv, data, names)
                except Exception as exc:  # the port state stands; its lossless class is not judged
                    out.qos_error = " ".join(str(exc).split())[:200]
            return out, raw, names, wanted

        out, raw, names, wanted = self._in_session(switch, read)
        states = switch_platform(out.os_name).port_states(raw, wanted)
        for p, n in names.items():
            if n in states:
                out.states[p] = states[n]
            else:
                out.missing.append(p)
        return out

    def lldp(self, switch: str, ports: Sequence[str]) -> dict[str, Any]:
        """``ports``' LLDP neighbours as the switch reports them (show commands only:
        :func:`fabricops.verify.cabling.read_lldp`), in the switch's kept session when sessions are
        kept (the cabling phase reads the switches the switch-port phase and the pair rounds read)."""
        from fabricops.roce.switchspec import normalize_ports
        from fabricops.verify.cabling import read_lldp

        def read(conn: Any, os_name: str, _hv: Mapping[str, Any]) -> dict[str, Any]:
            return read_lldp(conn, os_name, ports, normalize_ports)

        return self._in_session(switch, read)

    # ----------------------------------------------------------------------- sessions

    def keep_sessions(self) -> SwitchSessions:
        """Keep one session per switch open from now until the returned handle's ``close()`` (or the
        end of its ``with`` block): every read of a switch (:meth:`port_states`, :meth:`__call__`)
        reuses that switch's session instead of logging in again. Already kept (an outer caller
        keeps them): a handle whose ``close()`` leaves them to that caller."""
        with self._kept_lock:
            if self._kept is not None:
                return SwitchSessions(None)
            self._kept = {}
        return SwitchSessions(self)

    def close_sessions(self) -> None:
        """Close every kept session; reads after this open a session each again."""
        with self._kept_lock:
            kept, self._kept = self._kept, None
        for slot in (kept or {}).values():
            # a read still running on the session finishes first (bounded: a hung read is cut off)
            locked = slot.lock.acquire(timeout=CLOSE_WAIT_S)
            try:
                slot.closed = True
                slot.drop()
            finally:
                if locked:
                    slot.lock.release()

    def _in_session(self, switch: str, read: Callable[[Any, str, Mapping[str, Any]], Any]) -> Any:
        """``read(session, OS name, inventory variables)`` of ``switch``: in its kept session when
        sessions are kept (one thread at a time on it: the session's lock), else in a session opened
        for this read and closed after it. A kept session that fails a read (the switch or an idle
        timeout dropped it since its last read) is reopened once and the read retried; a read that
        fails on a session just opened fails as it would without kept sessions."""
        with self._kept_lock:
            slot = None if self._kept is None else self._kept.setdefault(switch, _Session())
        if slot is not None:
            with slot.lock:
                if not slot.closed:
                    return self._read_kept(switch, slot, read)
        conn, os_name, hv = self._open(switch)
        try:
            return read(conn, os_name, hv)
        finally:
            _disconnect(conn)

    def _read_kept(self, switch: str, slot: _Session, read: Callable[..., Any]) -> Any:
        reused = slot.conn is not None
        if not reused:
            slot.conn, slot.os_name, slot.hv = self._open(switch)
        try:
            return read(slot.conn, slot.os_name, slot.hv)
        except Exception:
            slot.drop()  # dead or in an unknown state: never read through it again
            if not reused:
                raise
        slot.conn, slot.os_name, slot.hv = self._open(switch)  # reopened once, the read retried
        try:
            return read(slot.conn, slot.os_name, slot.hv)
        except Exception:
            slot.drop()
            raise

    def roce_ports(self, switch: str) -> list[str]:
        """The ports the roce_switch role configures on ``switch``: its ``fabricops_cabling`` ports
        and its ends of the inter-switch links (``fabricops.roce.desired``, the role's own
        ``ports_from_cabling``). Raises :class:`FabricopsError` when the switch has no RoCE plan."""
        from fabricops.roce.desired import desired_state

        hv = dict(self.hostvars(switch) or {})
        if not hv:
            raise FabricopsError(f"{switch} is not in the inventory")
        desired = desired_state(hv, switch)
        if desired.switch is None:
            raise FabricopsError(f"{switch} has no RoCE definition (fabricops_roce / roce_switch_roce)")
        return list(desired.switch.ports)

    def check_switch(self, switch: str) -> dict[str, list[str]]:
        """Every port the role configures on ``switch`` (host ports and ISL ends) against the
        definition: {port: [problem sentences]}."""
        return self(switch, self.roce_ports(switch))

    def isl_path(self, switch_a: str, switch_b: str) -> list[IslEnd]:
        """The inter-switch link ends between two switches (:func:`isl_path`), from the links in
        ``switch_a``'s inventory (``roce_switch_links``, else ``fabricops_switch_links``)."""
        hv = dict(self.hostvars(switch_a) or {})
        links = hv.get("roce_switch_links") or hv.get("fabricops_switch_links")
        return isl_path(links, switch_a, switch_b)

    def _roce(self, switch: str, hv: Mapping[str, Any]) -> Any:
        """What the roce_switch role applied to this switch (``roce_switch_roce`` over
        ``fabricops_roce``, ``fabricops.roce.desired``); the fabric-wide definition given when the
        switch's variables hold none."""
        from fabricops.roce.desired import desired_state

        desired = desired_state(hv, switch)
        return desired.roce if desired.roce is not None else self.roce
