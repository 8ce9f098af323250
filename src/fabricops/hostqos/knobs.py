"""RoCE knobs of one HCA port outside mlnx_qos: one table that both reads and writes each knob.

Per port (netdev ``IF`` of device ``DEV``, port ``P``):

=====================  ================================================  ===========================
knob                   read                                              write
=====================  ================================================  ===========================
``ecn_np[prio]``       ``/sys/class/net/IF/ecn/roce_np/enable/PRIO``     the file (``0``/``1``)
``ecn_rp[prio]``       ``/sys/class/net/IF/ecn/roce_rp/enable/PRIO``     the file (``0``/``1``)
``cnp_dscp``           ``/sys/class/net/IF/ecn/roce_np/cnp_dscp``        the file (optional knob)
``cnp_priority``       ``/sys/class/net/IF/ecn/roce_np/cnp_802p_prio``   the file (optional knob)
``traffic_class``      ``/sys/class/infiniband/DEV/tc/P/traffic_class``  the file (the ToS)
``rdma_cm_tos``        ``cma_roce_tos -d DEV -p P``                      ``... -t TOS``
``roce_mode``          ``cma_roce_mode -d DEV -p P``                     ``... -m 1|2``
=====================  ================================================  ===========================

An *optional* knob whose file is absent (older MLNX_OFED) is reported and skipped; a required one
that is absent fails the task. Values are compared as canonical strings.

Each file knob's path is declared once, in :data:`PATHS`. This module is stdlib-only: it also runs on
the hosts, inside the boot-time program :mod:`fabricops.hostside.roce_boot`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fabricops.errors import FabricopsError

__all__ = ["PATHS", "Knob", "KnobError", "knobs_for", "plan", "read_spec", "render", "values_from", "verify"]

ROCE_MODE_NAMES = {"1": "IB/RoCE v1", "2": "RoCE v2"}

#: The sysfs file of each file knob (``{netdev}``, ``{device}``, ``{port}``, ``{prio}`` filled in):
#: the one declaration the role's modules, verification and the boot-time program all read.
PATHS = {
    "ecn_np": "/sys/class/net/{netdev}/ecn/roce_np/enable/{prio}",
    "ecn_rp": "/sys/class/net/{netdev}/ecn/roce_rp/enable/{prio}",
    "cnp_dscp": "/sys/class/net/{netdev}/ecn/roce_np/cnp_dscp",
    "cnp_priority": "/sys/class/net/{netdev}/ecn/roce_np/cnp_802p_prio",
    "traffic_class": "/sys/class/infiniband/{device}/tc/{port}/traffic_class",
}


class KnobError(FabricopsError):
    """A knob that could not be read or set; one sentence naming the netdev and the knob."""


def _flag(text: str) -> str | None:
    s = text.strip()
    return s if s in ("0", "1") else None


def _int_text(text: str) -> str | None:
    """'106', 'Global tclass=106', 'tclass=106' -> '106'; '' or '-1' (unset) -> None."""
    m = re.findall(r"-?\d+", text or "")
    if not m or int(m[-1]) < 0:
        return None
    return str(int(m[-1]))


def _roce_mode(text: str) -> str | None:
    s = (text or "").strip()
    for key, name in ROCE_MODE_NAMES.items():
        if s in (name, key):
            return key
    return None


@dataclass(frozen=True)
class Knob:
    name: str  #: e.g. "ecn_np[3]", "traffic_class"
    desired: str  #: canonical desired value
    path: str | None = None  #: file knob: the sysfs path
    read_argv: tuple[str, ...] | None = None  #: command knob: how to read it
    write_argv: tuple[str, ...] | None = None  #: command knob: how to set it
    parse: Callable[[str], str | None] = _int_text
    optional: bool = False

    @property
    def key(self) -> str:
        return self.path or " ".join(self.read_argv or ())

    def write(self) -> dict[str, Any]:
        if self.path:
            return {"path": self.path, "value": self.desired}
        return {"argv": list(self.write_argv or ())}


def knobs_for(netdev: str, device: str, port: int, want: Mapping[str, Any]) -> list[Knob]:
    """The knob table of one port for the declared values in ``want`` (absent/None = unmanaged).

    ``want`` keys: ``ecn_np`` and ``ecn_rp`` (8 values: true/false/None), ``cnp_dscp``,
    ``cnp_priority``, ``traffic_class``, ``rdma_cm_tos``, ``roce_mode`` (1 or 2).
    """
    out: list[Knob] = []
    for point in ("np", "rp"):
        values = want.get(f"ecn_{point}") or []
        if values and len(values) != 8:
            raise KnobError(f"{netdev}: ecn_{point} must list 8 priorities (true, false or null).")
        for prio, on in enumerate(values):
            if on is None:
                continue
            out.append(
                Knob(
                    name=f"ecn_{point}[{prio}]",
                    desired="1" if on else "0",
                    path=PATHS[f"ecn_{point}"].format(netdev=netdev, prio=prio),
                    parse=_flag,
                )
            )
    for key in ("cnp_dscp", "cnp_priority"):
        if want.get(key) is not None:
            out.append(
                Knob(
                    name=key,
                    desired=str(int(want[key])),
                    path=PATHS[key].format(netdev=netdev),
                    optional=True,
                )
            )
    if want.get("traffic_class") is not None:
        out.append(
            Knob(
                name="traffic_class",
                desired=str(int(want["traffic_class"])),
                path=PATHS["traffic_class"].format(device=device, port=port),
            )
        )
    base = ("-d", device, "-p", str(port))
    if want.get("rdma_cm_tos") is not None:
        tos = str(int(want["rdma_cm_tos"]))
        out.append(
            Knob(
                name="rdma_cm_tos",
                desired=tos,
                read_argv=("cma_roce_tos", *base),
                write_argv=("cma_roce_tos", *base, "-t", tos),
            )
        )
    if want.get("roce_mode") is not None:
        mode = str(int(want["roce_mode"]))
        if mode not in ROCE_MODE_NAMES:
            raise KnobError(f"{netdev}: roce_mode must be 1 or 2, not {mode}.")
        out.append(
            Knob(
                name="roce_mode",
                desired=mode,
                read_argv=("cma_roce_mode", *base),
                write_argv=("cma_roce_mode", *base, "-m", mode),
                parse=_roce_mode,
            )
        )
    return out


def read_spec(knobs: list[Knob]) -> dict[str, list[Any]]:
    """What the host module must read: files and commands."""
    return {
        "files": [k.path for k in knobs if k.path],
        "commands": [list(k.read_argv) for k in knobs if k.read_argv],
    }


def values_from(
    netdev: str, knobs: list[Knob], raw: Mapping[str, Any]
) -> tuple[dict[str, str | None], list[str]]:
    """Module read result -> ({knob name: canonical value or None}, warnings). Raises on a missing
    required file or a failed read command."""
    files = raw.get("files") or {}
    commands = {" ".join(c["argv"]): c for c in raw.get("commands") or []}
    values: dict[str, str | None] = {}
    warnings: list[str] = []
    for k in knobs:
        if k.path:
            text = files.get(k.path)
            if text is None:
                if k.optional:
                    warnings.append(f"{netdev}: {k.name} ({k.path}) is absent on this driver; skipped")
                    continue
                raise KnobError(
                    f"{netdev}: {k.name} cannot be read: {k.path} is absent (MLNX_OFED's mlx5 driver "
                    "provides it; is OFED installed and the driver loaded?)."
                )
        else:
            res = commands.get(" ".join(k.read_argv or ()))
            if res is None or res.get("rc") != 0:
                detail = ((res or {}).get("stdout") or (res or {}).get("stderr") or "not run").strip()
                raise KnobError(
                    f"{netdev}: {k.name} cannot be read with {' '.join(k.read_argv or ())}: "
                    f"{detail.splitlines()[-1] if detail else 'no output'}."
                )
            text = res.get("stdout") or ""
        values[k.name] = k.parse(text)
    return values, warnings


def plan(knobs: list[Knob], current: Mapping[str, str | None]) -> list[Knob]:
    """The knobs whose current value differs from the desired one (skipped optional knobs excluded)."""
    return [k for k in knobs if k.name in current and current[k.name] != k.desired]


def verify(netdev: str, knobs: list[Knob], current: Mapping[str, str | None]) -> list[str]:
    return [
        f"{netdev}: {k.name} is {_show(current[k.name])}, want {k.desired}"
        for k in knobs
        if k.name in current and current[k.name] != k.desired
    ]


def render(knobs: list[Knob], current: Mapping[str, str | None]) -> str:
    lines = [f"{k.name}: {_show(current[k.name])}" for k in knobs if k.name in current]
    return "\n".join(lines) + "\n"


def _show(value: str | None) -> str:
    return "unset" if value is None else value
