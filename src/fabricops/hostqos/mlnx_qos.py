"""mlnx_qos: desired trust / PFC / DSCP->priority / cable length vs what ``mlnx_qos -i IF`` prints.

Only what is declared is managed (a ``None`` field is left as it is). The commands are argument
groups, one ``mlnx_qos -i IF ...`` run each:

1. ``--trust``, ``--pfc`` and ``--cable_len`` together, when any differs;
2. one ``--dscp2prio set,DSCP,PRIO`` per entry that differs (mlnx_qos refuses ``--trust`` and
   ``--dscp2prio`` in the same run, and one entry per run works with every mlnx-tools version).

``mlnx_qos`` prints no DSCP map while trust is ``pcp``: the map is then unknown and every desired
entry is planned (a check-mode run says so instead of guessing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import FabricopsError
from fabricops.parsers.mlnx_qos import MlnxQos
from fabricops.parsers.mlnx_qos import parse as parse_mlnx_qos

__all__ = ["QosState", "QosWant", "have_from", "parse", "plan", "predict", "render", "verify", "want_from"]

parse = parse_mlnx_qos


@dataclass(frozen=True)
class QosWant:
    trust: str | None = None  #: "dscp" | "pcp"; None = not managed
    pfc: tuple[int, ...] | None = None  #: 8 values 0/1; None = not managed
    dscp2prio: Mapping[int, int] = field(default_factory=dict)  #: entries to hold; others untouched
    cable_len: int | None = None  #: metres; None = not managed


@dataclass(frozen=True)
class QosState:
    """The managed subset of what mlnx_qos printed (``dscp2prio`` None when it printed no map)."""

    trust: str | None
    pfc: tuple[int, ...]
    dscp2prio: dict[int, int] | None
    cable_len: int | None


class QosError(FabricopsError):
    """Desired mlnx_qos settings that are not valid; one sentence."""


def want_from(args: Mapping[str, Any]) -> QosWant:
    """Module arguments (trust, pfc, dscp2prio, cable_len) -> a checked :class:`QosWant`."""
    trust = args.get("trust")
    if trust is not None and trust not in ("dscp", "pcp"):
        raise QosError(f"trust must be dscp or pcp, not {trust!r}.")
    pfc = args.get("pfc")
    if pfc is not None:
        if isinstance(pfc, str):
            pfc = [p for p in pfc.split(",") if p != ""]
        try:
            pfc = tuple(int(v) for v in pfc)
        except (TypeError, ValueError):
            raise QosError(f"pfc must be 8 values of 0 or 1, not {args.get('pfc')!r}.") from None
        if len(pfc) != 8 or any(v not in (0, 1) for v in pfc):
            raise QosError(f"pfc must be 8 values of 0 or 1, not {args.get('pfc')!r}.")
    entries: dict[int, int] = {}
    for dscp, prio in (args.get("dscp2prio") or {}).items():
        try:
            d, p = int(dscp), int(prio)
        except (TypeError, ValueError):
            raise QosError(
                f"dscp2prio entry {dscp!r}: {prio!r} is not DSCP (0..63): priority (0..7)."
            ) from None
        if not (0 <= d <= 63 and 0 <= p <= 7):
            raise QosError(f"dscp2prio entry {d}: {p} is out of range (DSCP 0..63, priority 0..7).")
        entries[d] = p
    if entries and trust == "pcp":
        raise QosError("dscp2prio entries need trust dscp; with trust pcp the NIC ignores the DSCP map.")
    cable = args.get("cable_len")
    if cable is not None:
        cable = int(cable)
        if cable < 1:
            raise QosError(f"cable_len must be a positive number of metres, not {cable}.")
    return QosWant(trust=trust, pfc=pfc, dscp2prio=dict(sorted(entries.items())), cable_len=cable)


def have_from(record: MlnxQos) -> QosState:
    d2p = None
    if record.dscp2prio is not None:
        d2p = {d: p for p, ds in record.dscp2prio.items() for d in ds}
    return QosState(
        trust=record.trust, pfc=tuple(record.pfc_enabled), dscp2prio=d2p, cable_len=record.cable_len
    )


def plan(want: QosWant, have: QosState) -> list[list[str]]:
    """Argument groups (without ``mlnx_qos -i IF``) that take ``have`` to ``want``; [] when equal."""
    first: list[str] = []
    if want.trust is not None and want.trust != have.trust:
        first += ["--trust", want.trust]
    if want.pfc is not None and tuple(want.pfc) != tuple(have.pfc):
        first += ["--pfc", ",".join(str(v) for v in want.pfc)]
    if want.cable_len is not None and want.cable_len != have.cable_len:
        first += ["--cable_len", str(want.cable_len)]
    groups = [first] if first else []
    trust_after = want.trust or have.trust
    if trust_after == "dscp" or want.dscp2prio:
        current = have.dscp2prio if have.trust == "dscp" else None
        for d, p in want.dscp2prio.items():
            if current is None or current.get(d) != p:
                groups.append(["--dscp2prio", f"set,{d},{p}"])
    return groups


def predict(want: QosWant, have: QosState) -> QosState:
    """The state after :func:`plan`'s commands (what check mode reports as ``after``)."""
    d2p = None if have.dscp2prio is None else dict(have.dscp2prio)
    if want.dscp2prio:
        d2p = dict(d2p or {})
        d2p.update(want.dscp2prio)
    return QosState(
        trust=want.trust if want.trust is not None else have.trust,
        pfc=tuple(want.pfc) if want.pfc is not None else have.pfc,
        dscp2prio=d2p,
        cable_len=want.cable_len if want.cable_len is not None else have.cable_len,
    )


def verify(want: QosWant, have: QosState) -> list[str]:
    """What still differs, one phrase per knob (empty list: converged)."""
    out = []
    if want.trust is not None and want.trust != have.trust:
        out.append(f"trust is {have.trust}, want {want.trust}")
    if want.pfc is not None and tuple(want.pfc) != tuple(have.pfc):
        out.append(f"pfc is {_vec(have.pfc)}, want {_vec(want.pfc)}")
    if want.cable_len is not None and want.cable_len != have.cable_len:
        out.append(f"cable_len is {have.cable_len}, want {want.cable_len}")
    for d, p in want.dscp2prio.items():
        now = (have.dscp2prio or {}).get(d) if have.trust == "dscp" else None
        if now != p:
            out.append(f"dscp2prio {d} is {'unknown' if now is None else now}, want {p}")
    return out


def render(state: QosState, want: QosWant) -> str:
    """The managed fields of ``state`` as diff text, one knob a line."""
    lines = []
    if want.trust is not None:
        lines.append(f"trust: {state.trust}")
    if want.pfc is not None:
        lines.append(f"pfc: {_vec(state.pfc)}")
    if want.cable_len is not None:
        lines.append(f"cable_len: {state.cable_len}")
    for d in want.dscp2prio:
        now = (state.dscp2prio or {}).get(d) if state.trust == "dscp" else None
        lines.append(f"dscp2prio {d}: {'unknown' if now is None else now}")
    return "\n".join(lines) + "\n"


def to_data(state: QosState) -> dict[str, Any]:
    return {
        "trust": state.trust,
        "pfc": list(state.pfc),
        "dscp2prio": None
        if state.dscp2prio is None
        else {str(k): v for k, v in sorted(state.dscp2prio.items())},
        "cable_len": state.cable_len,
    }


def _vec(values: tuple[int, ...] | list[int]) -> str:
    return ",".join(str(v) for v in values)
