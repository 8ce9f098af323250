"""NVIDIA Onyx (MLNX-OS): the knob table, ``Eth1/N`` ports, ``interface ethernet`` ranges, the reads.

A knob is a running-config line template (``traffic-class {tc} congestion-control ecn
minimum-absolute {min_kb} maximum-absolute {max_kb}``): the regex that reads the line is derived
from the template and rendering fills it (``fabricops.switch.knobs.OnyxKnob``). Per-port knobs are
the commands after ``interface ethernet 1/N``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fabricops.switch.knobs import Facts, Key, OnyxKnob

from .base import PortState, SwitchPlatform, natural, runs, same

__all__ = ["ONYX", "ONYX_KNOBS", "OnyxPlatform", "onyx_facts", "onyx_knob"]

#: Onyx RoCE knobs, in the order commands are sent (global before per-port).
ONYX_KNOBS: tuple[OnyxKnob, ...] = (
    OnyxKnob(
        "pfc",
        "dcb priority-flow-control enable force",
        remove="no dcb priority-flow-control enable",
        accept=r"dcb priority-flow-control enable(?: force)?",
    ),
    OnyxKnob(
        "pfc_priority",
        "dcb priority-flow-control priority {priority} enable",
        keys=("priority",),
        remove="no dcb priority-flow-control priority {priority} enable",
        field_re={"priority": r"[0-7]"},
    ),
    OnyxKnob(
        "pfc_watchdog",
        "dcb priority-flow-control watchdog enable",
        remove="no dcb priority-flow-control watchdog enable",
    ),
    OnyxKnob(
        "roce",
        "roce {mode}",
        remove="no roce",
        field_re={"mode": r"lossless|lossy|semi-lossless"},
    ),
    OnyxKnob(
        "port_pfc",
        "dcb priority-flow-control mode on force",
        per_port=True,
        remove="no dcb priority-flow-control mode",
        accept=r"dcb priority-flow-control mode on(?: force)?",
    ),
    OnyxKnob(
        "port_trust",
        "qos trust {trust}",
        per_port=True,
        remove="no qos trust",
        field_re={"trust": r"L2|L3|both|port"},
    ),
    OnyxKnob(
        "port_ecn",
        "traffic-class {tc} congestion-control ecn minimum-absolute {min_kb} maximum-absolute {max_kb}",
        keys=("tc",),
        per_port=True,
        remove="no traffic-class {tc} congestion-control",
        field_re={"tc": r"[0-7]", "min_kb": r"\d+", "max_kb": r"\d+"},
    ),
    # `no traffic-class <tc> dcb ets` takes the class back to the default scheduling (Onyx user manual,
    # QoS commands: `[no] traffic-class <tc> dcb ets {strict | wrr <weight>}`; the lab's engine has the
    # same no form). Without it a restore could not remove an ETS line the change added.
    OnyxKnob(
        "port_ets",
        "traffic-class {tc} dcb ets {ets}",
        keys=("tc",),
        per_port=True,
        remove="no traffic-class {tc} dcb ets",
        field_re={"tc": r"[0-7]", "ets": r"strict|wrr \d+"},
    ),
    OnyxKnob("port_pfc_wd", "pfc-wd", per_port=True, remove="no pfc-wd"),
)
_ONYX_BY_NAME = {k.name: k for k in ONYX_KNOBS}


def onyx_knob(name: str) -> OnyxKnob:
    return _ONYX_BY_NAME[name]


def onyx_facts(global_lines: Iterable[str], interfaces: Mapping[str, Iterable[str]]) -> Facts:
    """Facts from running-config lines (``RunningConfigRecord.global_lines`` / ``.interfaces``).

    Lines that no knob reads are ignored (hostname, VLANs, ...): they are not RoCE configuration.
    A later line wins over an earlier one, as on the switch.
    """
    facts: Facts = {}
    for line in global_lines:
        for knob in ONYX_KNOBS:
            if not knob.per_port and (hit := knob.parse(line)):
                facts[hit[0]] = hit[1]
                break
    for port, lines in interfaces.items():
        for line in lines:
            for knob in ONYX_KNOBS:
                if knob.per_port and (hit := knob.parse(line, port)):
                    facts[hit[0]] = hit[1]
                    break
    return facts


def _enter_enable(connection: Any) -> None:
    """Onyx's standard mode (``>``) offers a restricted command set; the shows need enable mode
    (Onyx user manual, "Command Line Interface", CLI modes: Standard, Enable, Config). netmiko's
    ``enable()`` sends ``enable`` only when the prompt is not already ``#``; a session without it
    (a plain transport) gets the command itself, which enable mode accepts as a no-op."""
    enable = getattr(connection, "enable", None)
    if callable(enable):
        enable()
    else:
        connection.send_command("enable")


class OnyxPlatform(SwitchPlatform):
    name = "onyx"
    title = "Onyx"
    netmiko_device_type = "mellanox_mlnxos"
    buffer_pools = (None,)
    default_buffer_pool = None
    path_knobs = ("pfc", "pfc_priority", "port_pfc", "port_trust", "port_ecn")
    knobs = ONYX_KNOBS

    # ------------------------------------------------------------------ ports

    def normalize_port(self, port: str) -> str:
        """``Eth1/N`` (``ethernet 1/1``, ``1/1`` accepted; ``Eth1/1/2`` for a split port)."""
        from fabricops.switch.errors import SwitchError

        m = re.fullmatch(r"(?i)(?:eth(?:ernet)? ?)?([0-9]{1,2}/[0-9]{1,3}(?:/[0-9]{1,2})?)", port, re.ASCII)
        if not m:
            raise SwitchError(f"{port!r} is not an Onyx Ethernet port (write Eth1/1).")
        return "Eth" + m.group(1)

    def port_ranges(self, ports: Sequence[str]) -> list[str]:
        """['Eth1/1','Eth1/2','Eth1/4'] -> ['1/1-1/2', '1/4'] (Onyx interface ranges, same slot)."""
        parsed: dict[str, list[int]] = {}
        for p in ports:
            slot, _, num = p[3:].rpartition("/")
            parsed.setdefault(slot, []).append(int(num))
        out = []
        for slot, nums in parsed.items():
            out += [f"{slot}/{a}" if a == b else f"{slot}/{a}-{slot}/{b}" for a, b in runs(nums)]
        return out

    def group_port_lines(self, text: str, ports: Sequence[str]) -> list[str]:
        return [f"interface ethernet {spec} {text}" for spec in self.port_ranges(ports)]

    def config_line(self, knob: Any, key: Key, text: str) -> str:
        return f"interface ethernet {key[1][3:]} {text}" if knob.per_port else text

    # ------------------------------------------------------------------ desired state

    def check_definition(self, cfg: Any) -> None:
        from fabricops.switch.errors import SwitchError

        # Onyx with trust L3 maps DSCP d to switch priority d >> 3 (26 -> 3, 48 -> 6); fabricops
        # does not render a custom DSCP map for Onyx, so a definition that needs one must fail here.
        bad = {d: p for d, p in cfg.dscp2prio.items() if cfg.trust == "dscp" and d >> 3 != p}
        if bad:
            pairs = ", ".join(f"DSCP {d} -> {p}" for d, p in bad.items())
            raise SwitchError(
                f"fabricops_roce needs {pairs}, but Onyx trust L3 maps DSCP d to priority d/8 and fabricops "
                "renders no custom DSCP map for Onyx; choose DSCP values d with d/8 = priority."
            )

    def want_facts(self, spec: Any) -> Facts:
        r = spec.roce
        lp, cnp = r.lossless_priority, r.cnp_priority
        w = spec.ets_lossless_percent
        facts: Facts = {}
        # Onyx maps switch priority N to traffic class N: the ECN and ETS classes are the priorities.
        pfc = r.lossless  # lossy RoCE: no PFC and no PFC watchdog; ECN, trust and ETS stay
        if pfc:
            facts[("pfc",)] = True
            facts[("pfc_priority", lp)] = True
        if spec.pfc_watchdog and pfc:
            facts[("pfc_watchdog",)] = True
        for p in spec.ports:
            if pfc:
                facts[("port_pfc", p)] = True
            facts[("port_trust", p)] = spec.trust
            facts[("port_ecn", p, lp)] = (r.ecn.min_kb, r.ecn.max_kb)
            facts[("port_ets", p, cnp)] = "strict"
            facts[("port_ets", p, lp)] = f"wrr {w}"
            if lp != 0 and cnp != 0:
                facts[("port_ets", p, 0)] = f"wrr {100 - w}"
            if spec.pfc_watchdog and pfc:
                facts[("port_pfc_wd", p)] = True
        return facts

    def user_shape(self, facts: Facts) -> dict[str, Any]:
        """What a user writes for these facts (``gathered``). Onyx holds no DSCP values (trust L3
        maps DSCP d to priority d/8) and no marking probability: those fields are not part of it."""
        notes: list[str] = []
        prios = sorted(k[1] for k, v in facts.items() if k[0] == "pfc_priority" and v)
        ports = sorted({k[1] for k in facts if self.is_port_knob(k)}, key=natural)
        roce: dict[str, Any] = {}
        if facts.get(("pfc",)) and len(prios) == 1:
            roce["lossless_priority"] = prios[0]
        elif len(prios) > 1:
            notes.append(f"PFC is on for priorities {prios}; fabricops_roce has one lossless priority")
        lp = roce.get("lossless_priority")
        trust = same(notes, "qos trust", {p: facts.get(("port_trust", p)) for p in ports})
        if trust in ("L3", "L2"):
            roce["trust"] = "dscp" if trust == "L3" else "pcp"
        strict = same(notes, "strict ETS class", {
            p: tuple(sorted(k[2] for k, v in facts.items() if k[:2] == ("port_ets", p) and v == "strict"))
            for p in ports
        })
        if strict and len(strict) == 1:
            roce["cnp_priority"] = strict[0]
        out: dict[str, Any] = {"roce": roce, "ports": ports}
        if lp is not None:
            ecn = same(
                notes, f"ECN on traffic class {lp}", {p: facts.get(("port_ecn", p, lp)) for p in ports}
            )
            if ecn:
                roce["ecn"] = {"min_kb": ecn[0], "max_kb": ecn[1]}
            ets = same(
                notes, f"ETS of traffic class {lp}", {p: facts.get(("port_ets", p, lp)) for p in ports}
            )
            if isinstance(ets, str) and ets.startswith("wrr "):
                out["ets_lossless_percent"] = int(ets.split()[1])
        out["pfc_watchdog"] = bool(facts.get(("pfc_watchdog",))) and all(
            facts.get(("port_pfc_wd", p)) for p in ports
        )
        if notes:
            out["notes"] = notes
        return out

    # ------------------------------------------------------------------ reading

    def read(self, connection: Any, ports: Sequence[str] = ()) -> dict[str, str]:
        """Raw CLI text of everything the RoCE resource reads (show commands only, in enable mode)."""
        _enter_enable(connection)
        send = connection.send_command
        data = {
            "running-config": send("show running-config"),
            "pfc": send("show dcb priority-flow-control | json-print"),
        }
        if ports:
            data["qos"] = send("show qos | json-print")
        for p in ports:
            data[f"ecn:{p}"] = send(f"show interfaces ethernet {p[3:]} congestion-control | json-print")
        return data

    def parse_config(self, text: str) -> Facts:
        from fabricops.parsers import onyx as onyx_parser

        rc = onyx_parser.parse_running_config(text)
        return onyx_facts(rc.global_lines, rc.interfaces)

    def gather(self, data: Mapping[str, str], ports: Sequence[str] = ()) -> tuple[Facts, dict[str, Any]]:
        from fabricops.parsers import onyx as onyx_parser

        facts = self.parse_config(data["running-config"])
        oper: dict[str, Any] = {"ports": {}}
        if data.get("pfc"):
            pfc = onyx_parser.parse_pfc(data["pfc"])
            oper["pfc"] = {"enabled": pfc.enabled, "priorities": pfc.priorities_enabled}
            for name, iface in pfc.interfaces.items():
                if not ports or name in ports:
                    oper["ports"].setdefault(name, {})["pfc"] = iface.enabled
        if data.get("qos"):
            qos = onyx_parser.parse_qos_trust(data["qos"])
            for name, iface in qos.interfaces.items():
                if not ports or name in ports:
                    oper["ports"].setdefault(name, {})["trust"] = iface.trust
        for name in ports:
            text = data.get(f"ecn:{name}")
            if text:
                ecn = onyx_parser.parse_ecn(text)
                oper["ports"].setdefault(name, {})["ecn"] = {
                    str(tc): [t.min_threshold, t.max_threshold]
                    for tc, t in sorted(ecn.traffic_classes.items())
                    if t.ecn
                }
        return facts, oper

    def oper_state(
        self, oper: Mapping[str, Any], ports: Sequence[str], lossless: int | None
    ) -> dict[str, Any]:
        pfc = oper.get("pfc", {})
        prios = list(pfc.get("priorities") or []) if pfc.get("enabled") else []
        out: dict[str, Any] = {"pfc_priorities": prios, "ports": {}}
        for p in ports:
            po = oper.get("ports", {}).get(p, {})
            tc_ecn = po.get("ecn")
            out["ports"][p] = {
                "pfc_priorities": prios if po.get("pfc", True) else [],
                "ecn": (bool(tc_ecn.get(str(lossless))) if lossless is not None else bool(tc_ecn))
                if tc_ecn is not None
                else None,
            }
        return out

    # ------------------------------------------------------------------ port state (verify)

    #: one show for every port: state, "Actual speed" and the Rx/Tx counter groups (Onyx user
    #: manual, "show interfaces ethernet"; the fields of mellanox.onyx fixture onyx_interfaces_show.cfg)
    PORT_STATE_COMMAND = "show interfaces ethernet | json-print"

    def read_port_state(self, connection: Any, ports: Sequence[str] = ()) -> dict[str, str]:
        _enter_enable(connection)
        return {"interfaces": connection.send_command(self.PORT_STATE_COMMAND)}

    def port_states(self, data: Mapping[str, str], ports: Sequence[str]) -> dict[str, PortState]:
        """Onyx shows no carrier transition count and no lane count here: ``flaps`` and ``width``
        stay None; the error counters are the Rx and Tx "error packets"."""
        from fabricops.parsers import onyx as onyx_parser

        rec = onyx_parser.parse_interfaces(data.get("interfaces") or "")
        out: dict[str, PortState] = {}
        for p in ports:
            it = rec.interfaces.get(p)
            if it is None:
                continue
            errors = {f"{side} {k}": v for side, grp in (("rx", it.rx), ("tx", it.tx))
                      for k, v in grp.items() if k == "error packets"}
            admin = (it.admin_state or "").lower()
            out[p] = PortState(
                port=p,
                oper=None if it.up is None else ("up" if it.up else "down"),
                admin={"enabled": "up", "disabled": "down"}.get(admin),
                speed_gbps=it.speed_gbps,
                speed_text=it.actual_speed,
                rx_bytes=it.rx.get("bytes"),
                tx_bytes=it.tx.get("bytes"),
                errors=errors,
                source=self.PORT_STATE_COMMAND,
            )
        return out

    # ------------------------------------------------------------------ a port's admin state (act)

    def port_admin_state(self, connection: Any, port: str) -> str | None:
        """"Admin state" (Enabled / Disabled) of ``show interfaces ethernet 1/N | json-print`` (Onyx
        user manual, "Ethernet Interface Commands", show interfaces ethernet); None when Onyx answers
        that the interface does not exist."""
        from fabricops.errors import ParseError
        from fabricops.parsers import onyx as onyx_parser

        port = self.normalize_port(port)  # the one shape a command line may carry
        _enter_enable(connection)
        text = connection.send_command(f"show interfaces ethernet {port[3:]} | json-print") or ""
        if text.lstrip().startswith("%"):
            if "does not exist" in text:
                return None
            detail = " ".join(text.split())[:120]
            raise ParseError("onyx show interfaces ethernet", "the port's state", detail)
        it = onyx_parser.parse_interfaces(text).interfaces.get(port)
        if it is None:
            return None
        admin = {"enabled": "up", "disabled": "down"}.get((it.admin_state or "").lower())
        if admin is None:
            raise ParseError("onyx show interfaces ethernet", f"the Admin state of {port}", "not shown")
        return admin

    def port_admin_commands(self, port: str, state: str) -> list[str]:
        """``interface ethernet 1/N shutdown`` / ``... no shutdown`` (Onyx user manual, "Ethernet
        Interface Commands": ``[no] shutdown`` in config interface ethernet mode; one line from config
        mode, as the RoCE knobs are sent), then ``configuration write``."""
        from fabricops.switch.errors import SwitchError

        if state not in ("up", "down"):
            raise SwitchError(f"a port's admin state is up or down, not {state!r}.")
        no = "" if state == "down" else "no "
        port = self.normalize_port(port)
        return [f"interface ethernet {port[3:]} {no}shutdown", "configuration write"]

    def set_port_admin(self, connection: Any, switch: str, port: str, state: str) -> list[str]:
        from fabricops.roce import change

        return change.port_admin_onyx(
            connection,
            switch=switch,
            port=port,
            state=state,
            commands=self.port_admin_commands(port, state),
            read=lambda conn: self.port_admin_state(conn, port),
        )

    # ------------------------------------------------------------------ applying

    def apply(self, conn: Any, commands: Sequence[str], **kw: Any) -> Any:
        from fabricops.roce import change

        kw.pop("confirm_timeout", None)
        data = kw.pop("data")
        return change.apply_onyx(conn, commands, before_config=data["running-config"], **kw)

    # ------------------------------------------------------------------ describing

    def describe(self, key: Key, want: Any, have: Any, lp: int) -> str:
        knob = key[0]
        src = "fabricops_roce.lossless_priority"
        if knob == "pfc":
            return f"PFC disabled on the switch (no `dcb priority-flow-control enable`), priority {lp} lossy"
        if knob == "pfc_priority":
            return f"PFC off on priority {key[1]} switch-wide ({src})"
        if knob == "port_pfc":
            return f"PFC off on priority {lp} ({src})"
        if knob == "port_ecn":
            if have is None:
                return f"no ECN on traffic class {key[2]} (fabricops_roce.ecn)"
            return f"ECN on traffic class {key[2]} at {have[0]}-{have[1]} KB, want {want[0]}-{want[1]} KB"
        return super().describe(key, want, have, lp)


ONYX = OnyxPlatform()
