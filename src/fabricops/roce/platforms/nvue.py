"""Cumulus Linux NVUE: the knob table, ``swpN`` ports, port lists, the reads, the pending revision.

A knob is a path in the applied revision's tree (``qos congestion-control default-global
traffic-class {tc} min-threshold``): reading walks the tree along the path, rendering is ``nv set
<path> <value>`` / ``nv unset <path>`` (``fabricops.switch.knobs.NvueKnob``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fabricops.switch.knobs import PORT_PLACEHOLDER, Facts, Key, NvueKnob, _size_text, bytes_value

from .base import PortState, SwitchPlatform, natural, runs

__all__ = ["NVUE", "NVUE_KNOBS", "NvuePlatform", "nvue_facts", "nvue_knob"]


def _int(v: Any) -> int:
    return int(str(v).strip().rstrip("%"))


_CC = ("qos", "congestion-control", "default-global", "traffic-class", "{tc}")
#: NVUE RoCE knobs (CL 5.x ``default-global`` profiles, which apply to every swp port).
NVUE_KNOBS: tuple[NvueKnob, ...] = (
    NvueKnob("roce_mode", ("qos", "roce", "mode"), unset=("qos", "roce")),
    # PFC switch priorities are a set in NVUE's data model: `nv set ... switch-priority 4` adds 4,
    # `nv unset ... switch-priority 3` removes only 3. One presence fact per member.
    NvueKnob("pfc_priority", ("qos", "pfc", "default-global", "switch-priority", "{sp}"), leaf=False),
    NvueKnob("trust", ("qos", "mapping", "default-global", "trust")),
    NvueKnob(
        "dscp_map",
        ("qos", "mapping", "default-global", "dscp", "{dscp}", "switch-priority"),
        read=_int,
    ),
    NvueKnob(
        "sp_tc",
        ("qos", "egress-queue-mapping", "default-global", "switch-priority", "{sp}", "traffic-class"),
        read=_int,
    ),
    NvueKnob("ecn_enable", (*_CC, "ecn")),
    NvueKnob("ecn_min", (*_CC, "min-threshold"), read=bytes_value, write=_size_text),
    NvueKnob("ecn_max", (*_CC, "max-threshold"), read=bytes_value, write=_size_text),
    NvueKnob("ecn_probability", (*_CC, "probability"), read=_int),
    NvueKnob("ets_mode", ("qos", "egress-scheduler", "default-global", "traffic-class", "{tc}", "mode")),
    NvueKnob(
        "ets_bw",
        ("qos", "egress-scheduler", "default-global", "traffic-class", "{tc}", "bw-percent"),
        read=_int,
    ),
    NvueKnob("port_pfc_wd", ("interface", "{port}", "qos", "pfc-watchdog"), leaf=False, per_port=True),
)
_NVUE_BY_NAME = {k.name: k for k in NVUE_KNOBS}


def nvue_knob(name: str) -> NvueKnob:
    return _NVUE_BY_NAME[name]


def nvue_facts(qos_tree: Mapping[str, Any] | None, interface_tree: Mapping[str, Any] | None) -> Facts:
    """Facts from the applied revision: ``nv show qos`` and ``nv show interface`` (``-o json``)."""
    tree = {"qos": qos_tree or {}, "interface": interface_tree or {}}
    facts: Facts = {}
    for knob in NVUE_KNOBS:
        for key, value in knob.walk(tree):
            facts[key] = value
    return facts

def _json_tree(text: str, what: str) -> dict[str, Any]:
    from fabricops.errors import ParseError

    body = "\n".join(ln for ln in text.replace("\r\n", "\n").splitlines() if not ln.startswith("Error:"))
    if "Error: The requested item does not exist" in text or not body.strip():
        return {}  # nothing configured under that path
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise ParseError(what, "JSON from -o json", f"got {text.strip()[:60]!r}") from None
    if not isinstance(doc, dict):
        raise ParseError(what, "a JSON object", f"got {type(doc).__name__}")
    return doc


def nvue_pfc_priorities(qos_json: str) -> set[int]:
    """PFC switch priorities of ``nv show qos -o json`` in every shape NVUE prints them: a set of keys
    (``{"3": {}}``), a list, or a plain value / comma list (``"3"``, ``"3,4"``; what the lab's NVUE
    prints). The knob table reads only the first shape."""
    try:
        node = json.loads(qos_json or "{}")
    except (ValueError, RecursionError):
        return set()
    for part in ("pfc", "default-global", "switch-priority"):
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return set()
    items = node if isinstance(node, list | dict) else str(node).split(",")
    return {int(str(i).strip()) for i in items if str(i).strip().isdigit()}


class NvuePlatform(SwitchPlatform):
    name = "cumulus"
    title = "Cumulus"
    netmiko_device_type = "cumulus_linux"
    rest_api = True  # NVUE API, HTTPS on 8765 (fabricops.roce.platforms.nvue_rest)
    buffer_pools = (None, "lossless", "lossless-single-ipool")
    default_buffer_pool = "lossless"
    path_knobs = ("pfc_priority", "trust", "dscp_map", "sp_tc", "ecn_enable")
    knobs = NVUE_KNOBS

    # ------------------------------------------------------------------ ports

    def normalize_port(self, port: str) -> str:
        """``swpN`` (``swp1s0`` for a breakout port)."""
        from fabricops.switch.errors import SwitchError

        if not re.fullmatch(r"swp[0-9]{1,3}(?:s[0-9]{1,2})?", port, re.ASCII):
            raise SwitchError(f"{port!r} is not a Cumulus switch port (write swp1).")
        return port

    def port_ranges(self, ports: Sequence[str]) -> list[str]:
        """['swp1','swp2','swp4'] -> ['swp1-2', 'swp4'] (breakout ports stay single)."""
        singles = [p for p in ports if "s" in p[3:]]
        nums = sorted(int(p[3:]) for p in ports if p not in singles)
        out = [f"swp{a}" if a == b else f"swp{a}-{b}" for a, b in runs(nums)]
        return out + singles

    def group_port_lines(self, text: str, ports: Sequence[str]) -> list[str]:
        return [text.replace(PORT_PLACEHOLDER, ",".join(self.port_ranges(ports)))]

    # ------------------------------------------------------------------ desired state

    def want_facts(self, spec: Any) -> Facts:
        r = spec.roce
        lp, cnp = r.lossless_priority, r.cnp_priority
        w = spec.ets_lossless_percent
        facts: Facts = {}
        if not r.lossless:  # lossy RoCE: `nv set qos roce mode lossy` (5.x user guide, "RoCE"), no PFC
            facts[("roce_mode",)] = "lossy"
        elif spec.buffer_pool:
            facts[("roce_mode",)] = spec.buffer_pool
        if r.lossless:
            facts[("pfc_priority", lp)] = True
        facts[("trust",)] = "l3" if r.trust == "dscp" else "l2"
        if r.trust == "dscp":
            for d, prio in r.dscp2prio.items():
                facts[("dscp_map", d)] = prio
        facts[("sp_tc", lp)] = lp
        facts[("sp_tc", cnp)] = cnp
        facts[("ecn_enable", lp)] = "enable"
        facts[("ecn_min", lp)] = r.ecn.min_kb * 1000
        facts[("ecn_max", lp)] = r.ecn.max_kb * 1000
        facts[("ecn_probability", lp)] = r.ecn.probability
        facts[("ets_mode", cnp)] = "strict"
        facts[("ets_mode", lp)] = "dwrr"
        facts[("ets_bw", lp)] = w
        if lp != 0 and cnp != 0:
            facts[("ets_mode", 0)] = "dwrr"
            facts[("ets_bw", 0)] = 100 - w
        if spec.pfc_watchdog and r.lossless:  # the watchdog guards PFC; lossy has none
            for p in spec.ports:
                facts[("port_pfc_wd", p)] = True
        return facts

    def user_shape(self, facts: Facts) -> dict[str, Any]:
        """What a user writes for these facts (``gathered``). NVUE's default-global profiles apply to
        every swp port: the ports listed are those with the PFC watchdog (the one per-port knob)."""
        notes: list[str] = []
        roce: dict[str, Any] = {}
        out: dict[str, Any] = {"roce": roce}
        prios = sorted(k[1] for k, v in facts.items() if k[0] == "pfc_priority" and v)
        if len(prios) == 1:
            roce["lossless_priority"] = prios[0]
        elif len(prios) > 1:
            notes.append(f"PFC is on for priorities {prios}; fabricops_roce has one lossless priority")
        if facts.get(("roce_mode",)) == "lossy":
            roce["lossless"] = False
            ecn_on = sorted(k[1] for k, v in facts.items() if k[0] == "ecn_enable" and v == "enable")
            if not prios and len(ecn_on) == 1:
                roce["lossless_priority"] = ecn_on[0]
        lp = roce.get("lossless_priority")
        trust = facts.get(("trust",))
        if trust in ("l3", "l2"):
            roce["trust"] = "dscp" if trust == "l3" else "pcp"
        strict = [k[1] for k, v in facts.items() if k[0] == "ets_mode" and v == "strict"]
        if len(strict) == 1:
            roce["cnp_priority"] = strict[0]
        dscp_map = {k[1]: v for k, v in facts.items() if k[0] == "dscp_map"}
        if roce.get("trust") == "dscp" and dscp_map:
            data = sorted(d for d, p in dscp_map.items() if p == lp)
            cnp = sorted(d for d, p in dscp_map.items() if p == roce.get("cnp_priority"))
            if data:
                roce["dscp"] = 26 if 26 in data else data[0]
            if cnp:
                roce["cnp_dscp"] = 48 if 48 in cnp else cnp[0]
            extra = {
                d: p for d, p in sorted(dscp_map.items()) if d not in (roce.get("dscp"), roce.get("cnp_dscp"))
            }
            if extra:
                roce["dscp_map"] = extra
        if lp is not None:
            ecn: dict[str, Any] = {}
            if facts.get(("ecn_min", lp)) is not None:
                ecn["min_kb"] = facts[("ecn_min", lp)] // 1000
            if facts.get(("ecn_max", lp)) is not None:
                ecn["max_kb"] = facts[("ecn_max", lp)] // 1000
            if facts.get(("ecn_probability", lp)) is not None:
                ecn["probability"] = facts[("ecn_probability", lp)]
            if ecn and facts.get(("ecn_enable", lp)) == "enable":
                roce["ecn"] = ecn
            if facts.get(("ets_bw", lp)) is not None:
                out["ets_lossless_percent"] = facts[("ets_bw", lp)]
        ports = sorted({k[1] for k, v in facts.items() if k[0] == "port_pfc_wd" and v}, key=natural)
        out["ports"] = ports
        out["pfc_watchdog"] = bool(ports)
        out["buffer_pool"] = facts.get(("roce_mode",))
        if notes:
            out["notes"] = notes
        return out

    # ------------------------------------------------------------------ reading

    def read(self, connection: Any, ports: Sequence[str] = ()) -> dict[str, str]:
        """Raw CLI text of everything the RoCE resource reads (show commands only)."""
        send = connection.send_command
        return {
            "qos": send("nv show qos --rev=applied -o json"),
            "interface": send("nv show interface --rev=applied -o json"),
            "roce": send("nv show qos roce -o json"),
            "diff": send("nv config diff"),
        }

    def read_ports(self, ports: Sequence[str]) -> tuple[str, ...]:
        return ()  # the NVUE reads are switch-wide

    def parse_config(self, text: str) -> Facts:
        """Facts of ``nv config show`` (YAML or JSON) text."""
        import yaml

        from fabricops import safeyaml
        from fabricops.switch.errors import SwitchError

        text = text.strip()
        try:  # `nv config show` text from the user: no YAML aliases (an alias bomb), bounded nesting
            doc: Any = json.loads(text) if text[:1] in "[{" else safeyaml.load(text)
        except (ValueError, RecursionError, yaml.YAMLError) as exc:
            raise SwitchError(
                f"running_config for cumulus is not the YAML/JSON of `nv config show`: "
                f"{str(exc).splitlines()[0]}"
            ) from None
        if isinstance(doc, list):  # nv config show: [ {header: ...}, {set: {...}} ]
            tree: dict[str, Any] = {}
            for item in doc:
                if isinstance(item, Mapping) and isinstance(item.get("set"), Mapping):
                    tree.update(item["set"])
            doc = tree
        if not isinstance(doc, Mapping):
            raise SwitchError("running_config for cumulus must be the YAML/JSON of `nv config show`.")
        return nvue_facts(doc.get("qos"), doc.get("interface"))

    def gather(self, data: Mapping[str, str], ports: Sequence[str] = ()) -> tuple[Facts, dict[str, Any]]:
        from fabricops.parsers import nvue as nvue_parser

        qos = _json_tree(data.get("qos", ""), "nv show qos --rev=applied -o json")
        ifaces = _json_tree(data.get("interface", ""), "nv show interface --rev=applied -o json")
        facts = nvue_facts(qos, ifaces)
        oper: dict[str, Any] = {}
        if data.get("roce"):
            rec = nvue_parser.parse_qos_roce(data["roce"])
            oper = {
                "mode": rec.mode,
                "pfc_priority": rec.pfc_priority,
                "trust": rec.trust,
                "ecn_traffic_classes": rec.ecn_traffic_classes,
                "min_threshold_bytes": rec.min_threshold_bytes,
                "max_threshold_bytes": rec.max_threshold_bytes,
            }
        return facts, oper

    def port_facts(self, facts: Facts, data: Mapping[str, str]) -> Facts:
        facts = dict(facts)
        for sp in nvue_pfc_priorities(data.get("qos", "")):
            facts.setdefault(("pfc_priority", sp), True)
        return facts

    def oper_state(
        self, oper: Mapping[str, Any], ports: Sequence[str], lossless: int | None
    ) -> dict[str, Any]:
        prio = oper.get("pfc_priority")
        prios = [
            int(x) for x in (prio if isinstance(prio, list) else [prio]) if x is not None and str(x).isdigit()
        ]
        ecn_tcs = [int(x) for x in oper.get("ecn_traffic_classes") or [] if str(x).isdigit()]
        return {
            "pfc_priorities": prios if oper.get("mode") == "lossless" or prios else [],
            "ecn": (lossless in ecn_tcs) if lossless is not None else bool(ecn_tcs),
            "ports": {},
        }

    # ------------------------------------------------------------------ port state (verify)

    #: the operational interface tree: per interface its ``link`` with state, speed and ``stats``
    #: (NVUE command reference, "nv show interface <interface-id> link": operational speed, state,
    #: stats carrier-transitions / in-bytes / in-errors ...; NVUE API guide, GET /nvue_v1/interface)
    PORT_STATE_COMMAND = "nv show interface -o json"

    def read_port_state(self, connection: Any, ports: Sequence[str] = ()) -> dict[str, str]:
        return {"interfaces": connection.send_command(self.PORT_STATE_COMMAND)}

    def port_states(self, data: Mapping[str, str], ports: Sequence[str]) -> dict[str, PortState]:
        """Flaps: ``carrier-down-count`` where the release prints it (5.9+), else half the
        ``carrier-transitions`` (each flap is a down and an up); errors: ``in-errors``, ``out-errors``."""
        from fabricops.parsers import nvue as nvue_parser

        rec = nvue_parser.parse_interface_links(data.get("interfaces") or "")
        links = dict(rec.interfaces)
        if set(links) == {""} and len(ports) == 1:  # a one-port view (``nv show interface swp1 link``)
            links = {ports[0]: links[""]}
        out: dict[str, PortState] = {}
        for p in ports:
            ln = links.get(p)
            if ln is None:
                continue
            st = ln.stats
            if "carrier-down-count" in st:
                flaps, basis = st["carrier-down-count"], "carrier-down-count"
            elif "carrier-transitions" in st:
                flaps, basis = st["carrier-transitions"] // 2, "carrier-transitions / 2"
            else:
                flaps, basis = None, None
            out[p] = PortState(
                port=p,
                oper=ln.state,
                admin=ln.admin_status,
                speed_gbps=ln.speed_gbps,
                speed_text=ln.speed,
                rx_bytes=st.get("in-bytes"),
                tx_bytes=st.get("out-bytes"),
                errors={k: st[k] for k in ("in-errors", "out-errors") if k in st},
                flaps=flaps,
                flaps_basis=basis,
                source=self.PORT_STATE_COMMAND,
            )
        return out

    # ------------------------------------------------------------------ a port's admin state (act)

    def port_admin_state(self, connection: Any, port: str) -> str | None:
        """The ``link state`` of the applied revision (``nv show interface swpN link --rev=applied -o
        json``: what ``nv set interface swpN link state up|down`` set); where it sets none, the
        operational ``admin-status`` the release prints (newer releases), else "up". None when the
        switch has no such port (``nv show interface swpN link``: "The requested item does not
        exist")."""
        from fabricops.errors import ParseError

        port = self.normalize_port(port)  # the one shape a command line may carry
        oper_text = connection.send_command(f"nv show interface {port} link -o json") or ""
        if "does not exist" in oper_text:
            return None
        if re.search(r"^(?:Error:|Usage:|-bash: )", oper_text, re.M):
            detail = " ".join(oper_text.split())[:120]
            raise ParseError("nvue nv show interface link", f"{port}'s link", detail)
        oper = _json_tree(oper_text, f"nv show interface {port} link -o json")
        applied_text = connection.send_command(f"nv show interface {port} link --rev=applied -o json") or ""
        applied = {} if "does not exist" in applied_text else _json_tree(
            applied_text, f"nv show interface {port} link --rev=applied -o json"
        )
        for value in (applied.get("state"), oper.get("admin-status")):
            # a value ("down"), or NVUE's JSON form of an enum, a one-key set ({"down": {}})
            names = list(value) if isinstance(value, dict) else [value]
            if len(names) == 1 and str(names[0]).lower() in ("up", "down"):
                return str(names[0]).lower()
        return "up"

    def port_admin_commands(self, port: str, state: str) -> list[str]:
        """``nv set interface swpN link state down|up``, ``nv config apply -y``, ``nv config save``
        (Cumulus Linux user guide, "Interface Configuration and Management", "Bring an Interface Up or
        Down": "nv set interface swp1 link state down", "nv config apply"; NVUE command reference,
        "Config Commands": ``nv config save``)."""
        from fabricops.switch.errors import SwitchError

        if state not in ("up", "down"):
            raise SwitchError(f"a port's admin state is up or down, not {state!r}.")
        port = self.normalize_port(port)
        return [f"nv set interface {port} link state {state}", "nv config apply -y", "nv config save"]

    def set_port_admin(self, connection: Any, switch: str, port: str, state: str) -> list[str]:
        from fabricops.roce import change

        return change.port_admin_nvue(
            connection,
            switch=switch,
            port=port,
            state=state,
            commands=self.port_admin_commands(port, state),
            read=lambda conn: self.port_admin_state(conn, port),
        )

    # ------------------------------------------------------------------ applying

    def before_apply(self, conn: Any, switch: str, data: Mapping[str, str], discard: bool) -> list[str]:
        """Refuse to mix our change with someone else's pending revision (or detach it when allowed)."""
        from fabricops.switch.transport import require_no_pending

        return require_no_pending(conn, switch, data, discard)

    def apply(self, conn: Any, commands: Sequence[str], **kw: Any) -> Any:
        from fabricops.roce import change

        kw.pop("data", None)
        return change.apply_nvue(conn, commands, **kw)

    # ------------------------------------------------------------------ describing

    def describe(self, key: Key, want: Any, have: Any, lp: int) -> str:
        knob = key[0]
        if knob == "pfc_priority":
            return (
                f"PFC off on priority {key[1]} (fabricops_roce.lossless_priority; qos pfc default-global "
                f"is {have or 'unset'})"
            )
        if knob == "ecn_enable":
            return f"no ECN on traffic class {key[1]} (fabricops_roce.ecn)"
        if knob == "dscp_map":
            return f"DSCP {key[1]} maps to priority {have if have is not None else 'none'}, want {want}"
        if knob == "sp_tc":
            return f"switch priority {key[1]} goes to traffic class {have}, want {want}"
        return super().describe(key, want, have, lp)


NVUE = NvuePlatform()
