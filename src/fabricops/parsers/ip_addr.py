"""Parser for ``ip -j addr show`` (iproute2): every link with its addresses, as JSON.

iproute2 prints one JSON array, one object per link (``ip/ipaddress.c``, ``print_linkinfo`` and
``print_addrinfo`` with ``-json``)::

    [{"ifindex":7,"ifname":"ib0","flags":["BROADCAST","MULTICAST","UP"],"mtu":2044,
      "operstate":"UP","link_type":"infiniband","address":"00:00:10:29:fe:80:...",
      "addr_info":[{"family":"inet","local":"172.20.8.245","prefixlen":21,"scope":"global",
                    "label":"ib0","valid_life_time":4294967295,"preferred_life_time":4294967295}]}]

A link with no address has ``"addr_info": []``; ``ip -j -4 addr`` instead leaves such links out,
so callers that must see "no address" read ``ip -j addr show`` whole. An address added beside a
primary one in the same subnet carries ``"secondary": true``. Some releases print ``{}`` for a link
a filter dropped (coreemu/core PR #348, ``ip -j link show type bridge``): skipped. iproute2 before
4.13 has no ``-j``: it prints the text form, which is refused here (not JSON) rather than read as
"no addresses".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, load_json

TOOL = "ip-addr"
EXPECTED = "the JSON array `ip -j addr show` prints (iproute2 4.13 or newer)"

_FAMILIES = ("inet", "inet6")


@dataclass
class IpAddress:
    family: str  # "inet" or "inet6"
    local: str
    prefixlen: int
    scope: str | None = None
    secondary: bool = False

    @property
    def cidr(self) -> str:
        return f"{self.local}/{self.prefixlen}"


@dataclass
class IpLink:
    ifname: str
    mtu: int | None = None
    operstate: str | None = None
    link_type: str | None = None
    flags: list[str] = field(default_factory=list)
    addresses: list[IpAddress] = field(default_factory=list)

    @property
    def ipv4_primary(self) -> IpAddress | None:
        """The link's primary IPv4 address: its first ``inet`` entry not flagged secondary."""
        return next((a for a in self.addresses if a.family == "inet" and not a.secondary), None)


@dataclass
class IpAddrShow:
    links: list[IpLink]

    def link(self, name: str) -> IpLink | None:
        return next((lk for lk in self.links if lk.ifname == name), None)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or any(c in value for c in "\n\r\x00"):
        raise ParseError(TOOL, EXPECTED, f"{what} is {value!r}, not a name")
    return value


def _int(value: Any, what: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise ParseError(TOOL, EXPECTED, f"{what} is {value!r}, not a number in 0..{high}")
    return value


def _address(entry: Any, ifname: str) -> IpAddress | None:
    if not isinstance(entry, dict):
        raise ParseError(TOOL, EXPECTED, f"{ifname}: an addr_info entry is not an object")
    family = entry.get("family")
    if family not in _FAMILIES:
        return None  # other families (none today) are not addresses a role compares
    local = _text(entry.get("local"), f"{ifname}: an address")
    prefixlen = _int(entry.get("prefixlen"), f"{ifname} {local}: prefixlen", 32 if family == "inet" else 128)
    scope = entry.get("scope")
    return IpAddress(
        family=family,
        local=local,
        prefixlen=prefixlen,
        scope=scope if isinstance(scope, str) else None,
        secondary=entry.get("secondary") is True,
    )


@bounded(TOOL, max_mb=16)
def parse(text: str) -> IpAddrShow:
    if text is None or not text.strip():
        raise ParseError(TOOL, EXPECTED, "empty input")
    body = text.strip()
    if not body.startswith("["):
        raise ParseError(TOOL, EXPECTED, f"got {body[:60]!r} (the text form, or another tool's output?)")
    doc = load_json(body, TOOL, EXPECTED)
    if not isinstance(doc, list):
        raise ParseError(TOOL, EXPECTED, "not a JSON array")
    links = []
    seen = set()
    for obj in doc:
        if not isinstance(obj, dict):
            raise ParseError(TOOL, EXPECTED, "a link is not a JSON object")
        if not obj:
            continue  # a link a filter dropped after its object was opened (coreemu/core PR #348)
        ifname = _text(obj.get("ifname"), "a link's ifname")
        if ifname in seen:
            raise ParseError(TOOL, EXPECTED, f"link {ifname} printed twice")
        seen.add(ifname)
        if "addr_info" not in obj:
            raise ParseError(TOOL, EXPECTED, f"{ifname} has no addr_info (`ip -j link`, not `ip -j addr`?)")
        infos = obj["addr_info"]
        if not isinstance(infos, list):
            raise ParseError(TOOL, EXPECTED, f"{ifname}: addr_info is not a list")
        mtu = obj.get("mtu")
        flags = obj.get("flags", [])
        links.append(IpLink(
            ifname=ifname,
            mtu=None if mtu is None else _int(mtu, f"{ifname}: mtu", 1 << 20),
            operstate=obj["operstate"] if isinstance(obj.get("operstate"), str) else None,
            link_type=obj["link_type"] if isinstance(obj.get("link_type"), str) else None,
            flags=[f for f in flags if isinstance(f, str)] if isinstance(flags, list) else [],
            addresses=[a for a in (_address(e, ifname) for e in infos) if a is not None],
        ))
    if not links:
        raise ParseError(TOOL, EXPECTED, "no links (every host has at least lo)")
    return IpAddrShow(links=links)
