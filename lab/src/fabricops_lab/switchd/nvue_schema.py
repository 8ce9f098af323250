"""The part of the NVUE object model the emulated Cumulus switch knows, as data.

NVUE is "an object-oriented, schema driven model" defined by an OpenAPI (OAS 3.0.2) document
(Cumulus Linux user guide, "NVIDIA User Experience - NVUE"; the spec itself: NVIDIA, "NVUE OpenAPI
Specification for Cumulus Linux 5.x", published with each release in CumulusNetworks/docs, e.g.
PR #2401 "Updated NVUE OpenAPI Specification for Cumulus Linux 5.8.0"). Only the subtrees fabricops
and its users touch are modelled; every other first-level node (``bridge``, ``vrf``, ...) is known
but refuses anything below it, so an unknown path is refused instead of silently stored.

Node kinds (``SCHEMA`` below is a tree of them):

- a ``dict``: an object with fixed attribute names (``nv set qos roce <attribute>``);
- :class:`Coll`: a collection keyed by an ID (``interface <interface-id>``, ``traffic-class
  <qos-tc-id>``); ``ids`` validates the ID, ``child`` the member;
- :class:`IdSet`: a collection of bare IDs (``qos pfc <profile-id> switch-priority <qos-sp-id>``;
  JSON ``{"3": {}}``): ``nv set`` adds members, ``nv unset ... N`` removes one;
- :class:`Leaf`: a value (enum, integer range, size, string);
- :data:`PRESENCE`: an object with no attributes that exists or not (``interface <id> qos
  pfc-watchdog``; JSON ``{}``).

Sources, per subtree (NVIDIA "NVUE Command Reference", https://docs.nvidia.com/networking-ethernet-
software/nvue-reference/, pages "QoS Commands", "Interface Commands", "Router Commands", "System
Commands"; and the Cumulus Linux 5.x user guide pages "RDMA over Converged Ethernet - RoCE",
"Quality of Service", "Adaptive Routing"):

- ``qos roce``: ``enable on|off``, ``mode lossless|lossy`` (5.x user guide "RoCE": "nv set qos roce
  mode lossy"; ``lossless-single-ipool`` / ``lossy-multi-tc`` appear in ``nv show qos roce`` of 5.14,
  tests/fixtures/nvue-qos-roce/cl514-lossless-single-ipool.txt), ``cable-length``;
- ``qos pfc <profile> switch-priority|cable-length|port-buffer|tx|rx`` ("QoS" page, "Priority Flow
  Control": ``nv set qos pfc default-global switch-priority 3,5``, ``tx enable``, ``rx enable``,
  ``cable-length 50``, ``port-buffer 25000``);
- ``qos congestion-control <profile> traffic-class <tc> min-threshold|max-threshold|probability|
  ecn|red`` ("QoS", "ECN": ``... traffic-class 4,5,7 min-threshold 40000`` and ``ecn enable``);
- ``qos mapping <profile> trust|port-default-sp|dscp <id> switch-priority|pcp <id>
  switch-priority`` ("QoS", "Classification");
- ``qos egress-scheduler <profile> traffic-class <tc> mode dwrr|strict, bw-percent 0-100`` and
  ``qos egress-queue-mapping <profile> switch-priority <sp> traffic-class <tc>`` ("QoS", "Egress
  Scheduling", "Egress Queue Mapping");
- ``qos traffic-pool <pool> memory-percent|switch-priority`` and ``qos advance-buffer-config``
  ("QoS", "Lossy and Lossless Buffer Pools");
- ``interface <id> link state|mtu``, ``interface <id> qos pfc-watchdog|pfc profile|
  congestion-control profile|mapping profile|egress-scheduler profile`` ("Interface Commands";
  ``link mtu`` is "integer:552 - 9216", user guide "NVUE CLI" ``nv set interface swp1 link mtu ?``);
- ``router adaptive-routing enable on|off`` ("Adaptive Routing");
- ``system hostname``, ``system config auto-save enable on|off`` ("System Commands"; "Config
  Commands": "run the nv set system config auto-save enable on command").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["PRESENCE", "SCHEMA", "Coll", "IdSet", "Leaf", "to_bytes"]


def to_bytes(value: str) -> int | None:
    """'150KB' -> 150000, '1.5MB' -> 1500000, '40000' -> 40000 (input units are decimal)."""
    m = re.fullmatch(r"([\d.]+)\s*([KMG]?B?)", str(value).strip(), re.I)
    if not m:
        return None
    try:
        num = float(m.group(1))
    except ValueError:
        return None
    mult = {"": 1, "B": 1, "K": 1000, "KB": 1000, "M": 10**6, "MB": 10**6, "G": 10**9, "GB": 10**9}
    return round(num * mult[m.group(2).upper()])


@dataclass(frozen=True)
class Leaf:
    kind: str  #: "enum" | "int" | "size" | "str"
    choices: tuple[str, ...] = ()
    lo: int = 0
    hi: int = 0
    number: bool = False  #: stored and shown as a JSON number (else as the string typed)

    def check(self, value: str) -> str | None:
        """None when VALUE is valid, else NVUE's complaint (the text after '<name>: ')."""
        if self.kind == "enum" and value not in self.choices:
            return f"'{value}' is not one of {sorted(self.choices)}"
        if self.kind == "int" and not (re.fullmatch(r"\d+", value) and self.lo <= int(value) <= self.hi):
            return f"'{value}' is not an integer in {self.lo}-{self.hi}"
        if self.kind == "size" and to_bytes(value) is None:
            return f"'{value}' is not a size"
        if self.kind == "str" and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", value):
            return f"'{value}' is not a valid name"
        return None

    def typed(self, value: str) -> Any:
        return int(value) if self.number else value


@dataclass(frozen=True)
class Coll:
    ids: str  #: regex an ID must match (fullmatch)
    child: Any
    what: str = "id"


@dataclass(frozen=True)
class IdSet:
    lo: int
    hi: int


PRESENCE: dict[str, Any] = {}  # an object without attributes (``nv set interface swp1 qos pfc-watchdog``)

ON_OFF = Leaf("enum", ("on", "off"))
ENABLE = Leaf("enum", ("enable", "disable"))
PROFILE = r"[A-Za-z0-9][A-Za-z0-9_-]*"
TC = r"[0-7]"
SP = r"[0-7]"


def _int(lo: int, hi: int, number: bool = False) -> Leaf:
    return Leaf("int", lo=lo, hi=hi, number=number)


_PROFILE_REF = {"profile": Leaf("str")}

SCHEMA: dict[str, Any] = {
    "qos": {
        "roce": {
            "enable": ON_OFF,
            "mode": Leaf("enum", ("lossless", "lossy", "lossless-single-ipool", "lossy-multi-tc")),
            "cable-length": _int(1, 100000),
        },
        "pfc": Coll(
            PROFILE,
            {
                "switch-priority": IdSet(0, 7),
                "cable-length": _int(1, 100000),
                "port-buffer": Leaf("size"),
                "xoff-threshold": Leaf("size"),
                "xon-threshold": Leaf("size"),
                "tx": ENABLE,
                "rx": ENABLE,
            },
            "profile-id",
        ),
        "link-pause": Coll(
            PROFILE,
            {"switch-priority": IdSet(0, 7), "tx": ENABLE, "rx": ENABLE, "cable-length": _int(1, 100000)},
            "profile-id",
        ),
        "congestion-control": Coll(
            PROFILE,
            {
                "traffic-class": Coll(
                    TC,
                    {
                        "min-threshold": Leaf("size"),
                        "max-threshold": Leaf("size"),
                        "probability": _int(0, 100),
                        "ecn": ENABLE,
                        "red": ENABLE,
                    },
                    "qos-tc-id",
                )
            },
            "profile-id",
        ),
        "mapping": Coll(
            PROFILE,
            {
                "trust": Leaf("enum", ("l2", "l3", "both", "port")),
                "port-default-sp": _int(0, 7),
                "dscp": Coll(r"\d|[1-5]\d|6[0-3]", {"switch-priority": _int(0, 7)}, "qos-dscp-id"),
                "pcp": Coll(SP, {"switch-priority": _int(0, 7)}, "qos-pcp-id"),
            },
            "profile-id",
        ),
        "egress-scheduler": Coll(
            PROFILE,
            {
                "traffic-class": Coll(
                    TC,
                    {"mode": Leaf("enum", ("dwrr", "strict")), "bw-percent": _int(0, 100, True)},
                    "qos-tc-id",
                )
            },
            "profile-id",
        ),
        "egress-queue-mapping": Coll(
            PROFILE,
            {"switch-priority": Coll(SP, {"traffic-class": _int(0, 7)}, "qos-sp-id")},
            "profile-id",
        ),
        "traffic-pool": Coll(
            PROFILE, {"memory-percent": _int(0, 100), "switch-priority": IdSet(0, 7)}, "traffic-pool-id"
        ),
        "advance-buffer-config": Coll(PROFILE, {}, "profile-id"),
    },
    "interface": Coll(
        r"swp\d+(?:s\d)?|eth\d+|lo|bond\d+|vlan\d+|br_default",
        {
            "link": {
                "state": Leaf("enum", ("up", "down")),
                "mtu": _int(552, 9216, True),
                "speed": Leaf(
                    "enum", ("auto", "1G", "10G", "25G", "40G", "50G", "100G", "200G", "400G", "800G")
                ),
            },
            "qos": {
                "pfc-watchdog": PRESENCE,
                "pfc": _PROFILE_REF,
                "congestion-control": _PROFILE_REF,
                "mapping": _PROFILE_REF,
                "egress-scheduler": _PROFILE_REF,
                "egress-queue-mapping": _PROFILE_REF,
            },
            "description": Leaf("str"),
        },
        "interface-id",
    ),
    "router": {"adaptive-routing": {"enable": ON_OFF}},
    "system": {
        "hostname": Leaf("str"),
        "config": {"auto-save": {"enable": ON_OFF}},
    },
    # known first-level nodes outside fabricops' subtrees: nothing below them is modelled here
    "bridge": None,
    "vrf": None,
    "service": None,
    "mlag": None,
    "evpn": None,
    "nve": None,
    "acl": None,
    "platform": None,
}
