"""What every switch platform does the same way over its own knob table.

A platform (``onyx.py``, ``nvue.py``) holds everything that differs between switch operating
systems: its knob table, port naming, the desired facts of a :class:`~fabricops.roce.switchspec.SwitchSpec`,
the show commands that read it, how per-port commands are grouped, the apply flow, the
description of a missing knob and the inverse of the desired facts (``gathered`` in the shape users
write). Code above the platforms (``fabricops.roce.resource``, ``runner``, verify, diagnose) asks
:func:`fabricops.roce.platforms.platform` and never branches on the OS name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricops.switch.knobs import Facts, Key

__all__ = ["PortState", "SwitchPlatform", "natural", "same"]


@dataclass(frozen=True)
class PortState:
    """One switch port as the switch reports it (read-only; :meth:`SwitchPlatform.read_port_state`).

    A field the OS does not show is None (Onyx's ``show interfaces ethernet`` has no carrier
    transition count; neither OS's port view shows the lanes a port trained at, only its speed)."""

    port: str
    oper: str | None  #: operational link state: "up" | "down"
    admin: str | None  #: "up" | "down" (administratively)
    speed_gbps: float | None  #: the speed the link trained at
    speed_text: str | None  #: as the switch prints it ("400G", "100 Gbps")
    width: str | None = None  #: lanes ("2X") where the OS shows them
    rx_bytes: int | None = None
    tx_bytes: int | None = None
    #: error counters under the OS's own names ("in-errors", "rx error packets"), since their last clear
    errors: dict[str, int] = field(default_factory=dict)
    #: times the link went down since the counters were cleared (None: the OS does not show it)
    flaps: int | None = None
    flaps_basis: str | None = None  #: what ``flaps`` was computed from
    #: the commands the state was read with (for messages)
    source: str = ""

    def to_data(self) -> dict[str, Any]:
        return {
            "oper": self.oper, "admin": self.admin, "speed_gbps": self.speed_gbps, "speed": self.speed_text,
            "width": self.width, "rx_bytes": self.rx_bytes, "tx_bytes": self.tx_bytes,
            "errors": dict(self.errors), "flaps": self.flaps, "flaps_basis": self.flaps_basis,
            "source": self.source,
        }


def runs(nums: Iterable[int]) -> list[tuple[int, int]]:
    """Consecutive runs of port numbers: [1, 2, 4] -> [(1, 2), (4, 4)] (each OS writes its ranges)."""
    out: list[tuple[int, int]] = []
    for n in sorted(nums):
        if out and n == out[-1][1] + 1:
            out[-1] = (out[-1][0], n)
        elif not out or n != out[-1][1]:
            out.append((n, n))
    return out


def natural(name: Any) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(name))]


def same(notes: list[str], what: str, per_port: Mapping[str, Any]) -> Any:
    """The one value every port holds (None when the ports differ: ``notes`` says how)."""
    values = {p: v for p, v in per_port.items() if v is not None}
    distinct = {repr(v) for v in values.values()}
    if len(distinct) > 1 or (values and len(values) != len(per_port)):
        shown = ", ".join(f"{p}: {v if v is not None else 'none'}" for p, v in per_port.items())
        notes.append(f"the ports differ in {what} ({shown})")
        return None
    return next(iter(values.values()), None)


class SwitchPlatform:
    """The shared half of a switch platform; subclasses set the class attributes and OS hooks."""

    #: our OS name (the value of ``SwitchSpec.os`` and ``SwitchAccess.os_name``)
    name: str = ""
    #: what the error messages call it
    title: str = ""
    #: the netmiko device type of the session
    netmiko_device_type: str = ""
    #: ``roce_switch_buffer_pool`` values this OS accepts (None: leave the buffers alone)
    buffer_pools: tuple[str | None, ...] = (None,)
    #: what ``roce_switch_buffer_pool: default`` means here
    default_buffer_pool: str | None = None
    #: knobs that decide whether the lossless class is lossless (verify's port check)
    path_knobs: tuple[str, ...] = ()
    #: the knob table, in send order (global before per-port)
    knobs: tuple[Any, ...] = ()
    #: the OS serves a REST API ``roce_switch`` can use instead of the CLI (``roce_switch_transport``)
    rest_api: bool = False

    # ------------------------------------------------------------------ the table

    def knob(self, name_or_key: str | Key) -> Any:
        name = name_or_key[0] if isinstance(name_or_key, tuple) else name_or_key
        return self._by_name()[name]

    def _by_name(self) -> dict[str, Any]:
        cache = self.__dict__.get("_by_name_cache")
        if cache is None:
            cache = {k.name: k for k in self.knobs}
            self.__dict__["_by_name_cache"] = cache
        return cache

    def order(self) -> dict[str, int]:
        return {k.name: n for n, k in enumerate(self.knobs)}

    def sort_key(self, key: Key) -> tuple[Any, ...]:
        return (self.order()[key[0]], *[natural(str(k)) for k in key[1:]])

    def is_port_knob(self, key: Key) -> bool:
        return bool(self.knob(key).per_port)

    # ------------------------------------------------------------------ ports

    def normalize_port(self, port: str) -> str:  # pragma: no cover - every platform defines it
        raise NotImplementedError

    def normalize_ports(self, ports: Iterable[Any]) -> list[str]:
        from fabricops.switch.errors import SwitchError

        out: set[str] = set()
        for raw in ports:
            if not isinstance(raw, str | int) or isinstance(raw, bool):
                raise SwitchError(f"{raw!r} is not a switch port name.")
            out.add(self.normalize_port(str(raw).strip(" ")))
        return sorted(out, key=natural)

    def port_ranges(self, ports: Sequence[str]) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def group_port_lines(self, text: str, ports: Sequence[str]) -> list[str]:
        """One per-port command (rendered with :data:`PORT_PLACEHOLDER`) for ``ports``."""
        raise NotImplementedError  # pragma: no cover

    def config_line(self, knob: Any, key: Key, text: str) -> str:
        """A rendered fact as a line of the ``diff`` text."""
        return text

    # ------------------------------------------------------------------ desired state

    def check_definition(self, cfg: Any) -> None:
        """Refuse a valid definition this OS cannot render (one sentence)."""

    def want_facts(self, spec: Any) -> Facts:  # pragma: no cover
        raise NotImplementedError

    def user_shape(self, facts: Facts) -> dict[str, Any]:  # pragma: no cover
        """The inverse of :meth:`want_facts`: what a user writes to get ``facts``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ reading

    def read(self, connection: Any, ports: Sequence[str] = ()) -> dict[str, str]:  # pragma: no cover
        raise NotImplementedError

    def read_ports(self, ports: Sequence[str]) -> tuple[str, ...]:
        """The ports whose per-port shows the read needs (diagnose's operational view)."""
        return tuple(ports)

    def gather(
        self, data: Mapping[str, str], ports: Sequence[str] = ()
    ) -> tuple[Facts, dict[str, Any]]:  # pragma: no cover
        raise NotImplementedError

    def parse_config(self, text: str) -> Facts:  # pragma: no cover
        """Facts of the configuration text a user gives (``state: parsed``)."""
        raise NotImplementedError

    def port_facts(self, facts: Facts, data: Mapping[str, str]) -> Facts:
        """``facts`` completed from shapes of the raw texts the knob table does not read."""
        return facts

    def oper_state(
        self, oper: Mapping[str, Any], ports: Sequence[str], lossless: int | None
    ) -> dict[str, Any]:  # pragma: no cover
        """The operational view normalised for diagnose (PFC priorities, ECN per port)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ port state (verify)

    def read_port_state(  # pragma: no cover
        self, connection: Any, ports: Sequence[str] = ()
    ) -> dict[str, str]:
        """Raw text of the show command(s) that report ``ports``' link state, speed and counters
        (show commands only; one command for the whole switch where the OS offers one)."""
        raise NotImplementedError

    def port_states(  # pragma: no cover
        self, data: Mapping[str, str], ports: Sequence[str]
    ) -> dict[str, PortState]:
        """``ports`` (normalised names) as :meth:`read_port_state` read them; a port the switch did not
        list is left out. Raises :class:`fabricops.errors.ParseError` on output it cannot read."""
        raise NotImplementedError

    # ------------------------------------------------------------------ a port's admin state (act)

    def port_admin_state(self, connection: Any, port: str) -> str | None:  # pragma: no cover
        """``port``'s administrative state as the switch holds it, "up" or "down"; None when the
        switch has no such port. Show commands only (``fabricops act``'s port quarantine)."""
        raise NotImplementedError

    def port_admin_commands(self, port: str, state: str) -> list[str]:  # pragma: no cover
        """Every configuration command :meth:`set_port_admin` sends to make ``port`` administratively
        ``state`` ("up" | "down"), in order, its save included: what a dry run prints, and the
        release of a quarantine (``state`` "up")."""
        raise NotImplementedError

    def set_port_admin(self, connection: Any, switch: str, port: str, state: str) -> list[str]:
        """Send :meth:`port_admin_commands`, read the port back, save; the commands sent. Raises
        :class:`~fabricops.roce.switchspec.SwitchError`: one sentence naming the switch, the step and
        what the switch holds."""
        raise NotImplementedError  # pragma: no cover

    # ------------------------------------------------------------------ applying

    def before_apply(self, conn: Any, switch: str, data: Mapping[str, str], discard: bool) -> list[str]:
        """Commands sent before the change (NVUE: a pending revision); [] when none."""
        return []

    def apply(self, conn: Any, commands: Sequence[str], **kw: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    # ------------------------------------------------------------------ describing

    def describe(self, key: Key, want: Any, have: Any, lp: int) -> str:
        """One sentence for a path knob the port lacks (verify's port check)."""
        knob = key[0]
        if knob in ("port_trust", "trust"):
            return f"trust {have or 'not set'}, want {want} (fabricops_roce.trust)"
        return f"{knob} {have}, want {want}"

    def __repr__(self) -> str:
        return f"<platform {self.name}>"

