"""LLDP neighbours: host side (``lldpctl -f keyvalue``) and switch side (NVUE, Onyx).

**lldpctl -f keyvalue** (lldpd, ``src/client/kv_writer.c``: one ``key=value`` line per attribute,
the key the ``.``-joined path, newlines inside a value turned into spaces)::

    lldp.eno1.chassis.name=toto-chassis.dc42
    lldp.eno1.port.ifname=swp46
    lldp.eno1.port.descr=BXVWNR2:lom2

The second key part is the local interface. The neighbour's port ID is ``port.ifname``,
``port.mac`` or ``port.local`` (the ID subtype it advertised), its description ``port.descr``.
An interface with no neighbour prints nothing, so no neighbour at all is empty output: that is
refused here as for every tool (the cabling check reads an exit status 0 with no output as "no
neighbours" itself). Keys repeated with another value keep the first.

**NVUE** ``nv show interface <port> lldp neighbor`` (Cumulus Linux 5.1+; the NVUE command
reference, "LLDP"): one row per neighbour under a header and a dashes line whose column widths
place the fields::

    Neighbor  Remote IP     Model  SW Version  Remote Port
    --------  ------------  -----  ----------  -----------
    spine01   10.10.10.101                     swp1

**Onyx** ``show lldp interfaces ethernet remote``: a block per local port (``Eth1/3``, or
``Eth1/3 (Po1)``) of ``Remote <field> : <value>`` lines, a value's sub-fields separated by
``" ; "`` (``Remote port-id : swp3 ; port id subtype : Interface Name (5)``). No public capture of
this command's text was found; the field names are those the Onyx JSON answer of the same
command carries (``Remote chassis id``, ``Remote port-id``, ``Remote port description``,
``Remote system name``) and that published clients of the text form match
(``show lldp interfaces ethernet remote | include "^Eth|^ *Remote port-id *:|^ *Remote system name *:"``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricops.errors import ParseError
from fabricops.parsers._text import bounded, clean_lines


@dataclass
class LldpNeighbor:
    interface: str  #: the local port the neighbour was heard on
    system_name: str | None = None  #: chassis.name / Remote system name / Neighbor
    chassis_id: str | None = None
    port_id: str | None = None  #: the neighbour's port ID as advertised
    port_id_type: str | None = None  #: ifname | mac | local | ... (lldpctl); subtype text (Onyx)
    port_descr: str | None = None
    mgmt_ip: list[str] = field(default_factory=list)

    @property
    def port_name(self) -> str | None:
        """The neighbour's port by name: an interface-name port ID, else its description (lldpd
        on a Linux host advertises its MAC as the port ID and the netdev as the description)."""
        if self.port_id and self.port_id_type in ("ifname", "Interface Name (5)", None):
            return self.port_id
        return self.port_descr or self.port_id


@dataclass
class LldpNeighbors:
    neighbors: list[LldpNeighbor]

    def on(self, interface: str) -> LldpNeighbor | None:
        return next((n for n in self.neighbors if n.interface == interface), None)


# --- lldpctl -f keyvalue ----------------------------------------------------------------------

TOOL_KV = "lldpctl"
EXPECTED_KV = "'lldp.<interface>.<path>=<value>' lines (lldpctl -f keyvalue)"
_PORT_ID_KEYS = ("ifname", "mac", "local", "ip", "component", "alias")


@bounded(TOOL_KV, max_mb=1)
def parse_keyvalue(text: str) -> LldpNeighbors:
    if not text or not text.strip():
        raise ParseError(
            TOOL_KV, EXPECTED_KV, "empty input (lldpctl prints nothing when it heard no neighbour)"
        )
    by_if: dict[str, LldpNeighbor] = {}
    seen: set[str] = set()
    last_key: str | None = None
    for lineno, raw in enumerate(clean_lines(text), 1):
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("lldp."):
            if last_key is not None and "=" not in line:
                continue  # an old lldpd's continuation of a multi-line value (a description)
            raise ParseError(TOOL_KV, EXPECTED_KV, f"line {lineno}: {line[:60]!r} is not a 'lldp.' key")
        key, eq, value = line.partition("=")
        parts = key.split(".")
        if not eq or len(parts) < 3 or not parts[1]:
            raise ParseError(TOOL_KV, EXPECTED_KV, f"line {lineno}: {line[:60]!r} is not key=value (cut?)")
        last_key = key
        iface, path = parts[1], ".".join(parts[2:])
        n = by_if.setdefault(iface, LldpNeighbor(interface=iface))
        if path == "chassis.mgmt-ip":
            n.mgmt_ip.append(value)
            continue
        if key in seen:
            continue
        seen.add(key)
        if path == "chassis.name":
            n.system_name = value
        elif path in ("chassis.mac", "chassis.local", "chassis.ip", "chassis.ifname"):
            n.chassis_id = n.chassis_id or value
        elif path.startswith("port.") and path[5:] in _PORT_ID_KEYS and n.port_id is None:
            n.port_id, n.port_id_type = value, path[5:]
        elif path == "port.descr":
            n.port_descr = value
    if not by_if:
        raise ParseError(TOOL_KV, EXPECTED_KV, "no 'lldp.' line")
    return LldpNeighbors(neighbors=list(by_if.values()))


# --- NVUE: nv show interface <port> lldp neighbor ------------------------------------------

TOOL_NVUE = "nvue-lldp-neighbor"
EXPECTED_NVUE = (
    "a 'Neighbor  Remote IP  Model  SW Version  Remote Port' table (nv show interface <port> lldp neighbor)"
)
_NVUE_COLUMNS = ("Neighbor", "Remote IP", "Model", "SW Version", "Remote Port")


@bounded(TOOL_NVUE, max_mb=1)
def parse_nvue_neighbor(text: str, interface: str = "") -> LldpNeighbors:
    """``interface`` names the port the command was run for (the table does not)."""
    if not text or not text.strip():
        raise ParseError(TOOL_NVUE, EXPECTED_NVUE, "empty input")
    lines = [ln for ln in clean_lines(text) if ln.strip()]
    head = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("Neighbor")), None)
    if head is None or head + 1 >= len(lines) or set(lines[head + 1].replace(" ", "")) != {"-"}:
        raise ParseError(TOOL_NVUE, EXPECTED_NVUE, "no 'Neighbor ... Remote Port' header over a dashes line")
    header = lines[head]
    names = [c for c in _NVUE_COLUMNS if c in header]
    if names != list(_NVUE_COLUMNS):
        missing = [c for c in _NVUE_COLUMNS if c not in names]
        raise ParseError(TOOL_NVUE, EXPECTED_NVUE, f"header lacks {', '.join(missing)}")
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[head + 1])]
    if len(spans) != len(_NVUE_COLUMNS):
        raise ParseError(
            TOOL_NVUE, EXPECTED_NVUE, f"{len(spans)} columns under a {len(_NVUE_COLUMNS)}-column header"
        )
    out = []
    for ln in lines[head + 2 :]:
        cells = []
        for k, (a, _b) in enumerate(spans):
            end = spans[k + 1][0] if k + 1 < len(spans) else len(ln)
            cells.append(ln[a:end].strip())
        if not cells[0] or not cells[4]:
            raise ParseError(
                TOOL_NVUE, EXPECTED_NVUE, f"row {ln.strip()[:60]!r} lacks the neighbour or its port"
            )
        out.append(
            LldpNeighbor(
                interface=interface,
                system_name=cells[0],
                port_id=cells[4],
                port_id_type=None,
                mgmt_ip=[cells[1]] if cells[1] else [],
            )
        )
    return LldpNeighbors(neighbors=out)


# --- Onyx: show lldp interfaces ethernet remote --------------------------------------------

TOOL_ONYX = "onyx-lldp-remote"
EXPECTED_ONYX = "'Eth1/N' blocks of 'Remote <field> : <value>' lines (show lldp interfaces ethernet remote)"
_ONYX_PORT = re.compile(r"^(Eth\d+/\d+(?:/\d+)?)(?: \([^)]*\))?:?$")


@bounded(TOOL_ONYX, max_mb=4)
def parse_onyx_remote(text: str) -> LldpNeighbors:
    if not text or not text.strip():
        raise ParseError(TOOL_ONYX, EXPECTED_ONYX, "empty input")
    blocks: list[LldpNeighbor] = []
    cur: LldpNeighbor | None = None
    fields = 0
    for lineno, raw in enumerate(clean_lines(text), 1):
        line = raw.strip()
        if not line or set(line) <= {"-", "="}:
            continue
        m = _ONYX_PORT.match(line)
        if m:
            cur = LldpNeighbor(interface=m.group(1))
            blocks.append(cur)
            continue
        key, colon, value = line.partition(":")
        key = " ".join(key.split())
        if not colon or not key.startswith("Remote"):
            raise ParseError(
                TOOL_ONYX, EXPECTED_ONYX, f"line {lineno}: {line[:60]!r} is not 'Remote <field> : <value>'"
            )
        if cur is None:
            raise ParseError(
                TOOL_ONYX, EXPECTED_ONYX, f"line {lineno}: a 'Remote' field before any Eth1/N port"
            )
        main, _, sub = value.partition(" ; ")
        main = main.strip()
        fields += 1
        if key == "Remote system name":
            cur.system_name = main or None
        elif key == "Remote chassis id":
            cur.chassis_id = main or None
        elif key == "Remote port-id":
            cur.port_id = main or None
            st = sub.partition(":")[2].strip()
            cur.port_id_type = st or None
        elif key == "Remote port description":
            cur.port_descr = main or None
    if not blocks:
        raise ParseError(TOOL_ONYX, EXPECTED_ONYX, "no Eth1/N port block")
    return LldpNeighbors(neighbors=[b for b in blocks if b.system_name or b.port_id or b.chassis_id])
