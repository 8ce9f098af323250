"""The Onyx CLI engine: modes, running vs saved configuration, the RoCE show commands.

Shared per switch: :class:`OnyxSwitch` (running config, saved config on disk, fabric file, faults).
Per SSH session: :class:`OnyxSession` (mode stack, interface context). ``handle(line)`` returns the
text to print and whether to drop the session (fault injection).
"""

from __future__ import annotations

import copy
import json
import re
import time
from pathlib import Path
from typing import Any

from fabricops.parsers.onyx import expand_interface_range

from .state import FaultWatch, atomic_write_json, port_entry, run_line

__all__ = ["ROCE_DEFAULTS", "OnyxSession", "OnyxSwitch"]

RELEASE = "3.10.4504"
ROCE_DEFAULTS = {"pfc_priority": 3, "ecn_tc": 3, "ecn_min_kb": 150, "ecn_max_kb": 1500, "trust": "L3"}
_TRUST = {"l2": "L2", "l3": "L3", "both": "both", "port": "port"}
POOL_TYPES = ("lossless", "lossy", "lossy-mc")  # `traffic pool NAME type T`; a new pool is lossy
_CC_MODE = {"ecn": "ECN", "red": "RED", "both": "both"}  # as `show ... congestion-control` prints it


def _unrecognized(token: str) -> str:
    return f'% Unrecognized command "{token}".\nType "?" for help.\n'


_INCOMPLETE = '% Incomplete command.\nType "?" for help.\n'


def _empty_port() -> dict[str, Any]:
    return {
        "pfc_on": None,
        "trust": None,
        "ecn": {},
        "shutdown": False,
        "pfc_wd": False,
        "ets": {},
        "mtu": None,
    }


class OnyxSwitch:
    """One emulated Onyx switch: configuration state shared by all its sessions."""

    def __init__(self, name: str, ports: list[str], state_dir: str | Path, fabric_file: str | Path | None):
        self.name = name
        self.ports = [self._canon(p) for p in ports]
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.saved_path = self.state_dir / "onyx-saved-config.txt"
        self.fabric_file = fabric_file
        self.faults = FaultWatch(self.state_dir)
        self.cfg = self._empty_config()
        if self.saved_path.exists():
            self.load_commands(self.saved_path.read_text(encoding="utf-8").splitlines())
        self.write_fabric()

    @staticmethod
    def _canon(port: str) -> str:
        m = re.fullmatch(r"(?i)(?:eth|ethernet)?\s*(\d+/\d+)", port.strip())
        if not m:
            raise ValueError(f"not an Onyx port name: {port!r} (want Eth1/N)")
        return "Eth" + m.group(1)

    def _empty_config(self) -> dict[str, Any]:
        return {
            "hostname": self.name,
            "pfc_enabled": False,
            "pfc_prios": [],
            "roce": None,
            "pfc_wd": False,
            "pools": {},  # name -> {"type": str, "prios": [int], "memory": float | None}
            "ports": {p: _empty_port() for p in self.ports},
        }

    # ---------------------------------------------------------------- effective state
    def port_state(self, port: str) -> dict[str, Any]:
        """What the ASIC does on a port: roce defaults overlaid with explicit configuration."""
        cfg, pc = self.cfg, self.cfg["ports"][port]
        roce = cfg["roce"]
        pfc_global = cfg["pfc_enabled"] or roce == "lossless"
        prios = set(cfg["pfc_prios"]) | ({ROCE_DEFAULTS["pfc_priority"]} if roce == "lossless" else set())
        pfc_on = pc["pfc_on"] if pc["pfc_on"] is not None else roce == "lossless"
        trust = pc["trust"] or (ROCE_DEFAULTS["trust"] if roce else "L2")
        ecn: dict[int, tuple[int, int]] = {}
        if roce:
            ecn[ROCE_DEFAULTS["ecn_tc"]] = (ROCE_DEFAULTS["ecn_min_kb"], ROCE_DEFAULTS["ecn_max_kb"])
        for tc, (mode, mn, mx) in pc["ecn"].items():
            if mode in ("ecn", "both"):
                ecn[int(tc)] = (int(mn), int(mx))
            else:  # RED only: drops, does not mark
                ecn.pop(int(tc), None)
        link_up = not pc["shutdown"] and port not in self.faults.ports_down()
        cc = {int(tc): tuple(v) for tc, v in pc["ecn"].items()}
        if roce and ROCE_DEFAULTS["ecn_tc"] not in cc:
            cc[ROCE_DEFAULTS["ecn_tc"]] = ("ecn", ROCE_DEFAULTS["ecn_min_kb"], ROCE_DEFAULTS["ecn_max_kb"])
        return {
            "cc": cc,
            "pfc_global": pfc_global,
            "pfc_on": pfc_on,
            "prios": sorted(prios) if pfc_global else [],
            "trust": trust,
            "ecn": ecn,
            "link_up": link_up,
        }

    def write_fabric(self) -> None:
        ports = {}
        for p in self.ports:
            st = self.port_state(p)
            trust = {"L3": "l3", "both": "l3", "L2": "l2", "port": "port"}[st["trust"]]
            pfc = st["prios"] if st["pfc_on"] else []
            ports[p] = port_entry(trust, pfc, st["ecn"], st["link_up"])
        if self.fabric_file:
            pools = {
                name: {
                    "type": pl["type"],
                    "switch_priorities": list(pl["prios"]),
                    "memory_percent": pl["memory"],
                }
                for name, pl in sorted(self.cfg["pools"].items())
            }
            atomic_write_json(
                self.fabric_file, {"name": self.name, "os": "onyx", "ports": ports, "buffer_pools": pools}
            )

    # ---------------------------------------------------------------- running-config text
    def _ranges(self, ports: list[str]) -> list[str]:
        """['Eth1/1','Eth1/2','Eth1/4'] -> ['1/1-1/2', '1/4'] (as Onyx prints ranges)."""
        nums = sorted(int(p.split("/")[1]) for p in ports)
        out, start, prev = [], None, None
        for n in [*nums, None]:
            if start is None:
                start = prev = n
            elif n is not None and n == prev + 1:
                prev = n
            else:
                out.append(f"1/{start}" if start == prev else f"1/{start}-1/{prev}")
                start = prev = n
        return out

    def _grouped(self, per_port: dict[str, list[str]]) -> list[str]:
        by_cmd: dict[str, list[str]] = {}
        for p in self.ports:
            for c in per_port.get(p, []):
                by_cmd.setdefault(c, []).append(p)
        lines = []
        for c, ps in by_cmd.items():
            for r in self._ranges(ps):
                lines.append(f"   interface ethernet {r} {c}")
        return lines

    def running_config(self) -> str:
        cfg = self.cfg
        eth: dict[str, list[str]] = {}
        dcb: dict[str, list[str]] = {}
        for p in self.ports:
            pc = cfg["ports"][p]
            if pc["mtu"]:
                eth.setdefault(p, []).append(f"mtu {pc['mtu']} force")
            if pc["shutdown"]:
                eth.setdefault(p, []).append("shutdown")
            if pc["trust"]:
                eth.setdefault(p, []).append(f"qos trust {pc['trust']}")
            for tc, (mode, mn, mx) in sorted(pc["ecn"].items()):
                eth.setdefault(p, []).append(
                    f"traffic-class {tc} congestion-control {mode} "
                    f"minimum-absolute {mn} maximum-absolute {mx}"
                )
            for tc, ets in sorted(pc["ets"].items()):
                eth.setdefault(p, []).append(f"traffic-class {tc} dcb ets {ets}")
            if pc["pfc_on"] is True:
                dcb.setdefault(p, []).append("dcb priority-flow-control mode on force")
            elif pc["pfc_on"] is False:
                dcb.setdefault(p, []).append("no dcb priority-flow-control mode")
            if pc["pfc_wd"]:
                dcb.setdefault(p, []).append("pfc-wd")
        out = [
            "##",
            '## Running database "initial"',
            "## Generated at " + time.strftime("%Y/%m/%d %H:%M:%S +0000", time.gmtime()),
            f"## Hostname: {cfg['hostname']}",
            f"## Product release: {RELEASE}",
            "##",
            "",
            "##",
            "## Running-config temporary prefix mode setting",
            "##",
            "no cli default prefix-modes enable",
            "",
        ]
        eth_lines = self._grouped(eth)
        if eth_lines:
            out += ["##", "## Interface Ethernet configuration", "##", *eth_lines, "   "]
        pool_lines = []
        for name, pl in cfg["pools"].items():
            pool_lines.append(f"   traffic pool {name} type {pl['type']}")
            if pl["memory"] is not None:
                pool_lines.append(f"   traffic pool {name} memory percent {pl['memory']:.2f}")
            pool_lines += [f"   traffic pool {name} map switch-priority {pr}" for pr in pl["prios"]]
        if pool_lines:
            out += ["##", "## Interface Ethernet buffer configuration", "##", *pool_lines, ""]
        out += ["##", "## Other IP configuration", "##", f"hostname {cfg['hostname']}", ""]
        dcb_lines = []
        if cfg["pfc_enabled"]:
            dcb_lines.append("   dcb priority-flow-control enable force")
        for pr in cfg["pfc_prios"]:
            dcb_lines.append(f"   dcb priority-flow-control priority {pr} enable")
        if cfg["pfc_wd"]:
            dcb_lines.append("   dcb priority-flow-control watchdog enable")
        dcb_lines += self._grouped(dcb)
        if dcb_lines:
            out += ["##", "## DCBX PFC configuration", "##", *dcb_lines, "   "]
        if cfg["roce"]:
            out += ["##", "## RoCE configuration", "##", f"   roce {cfg['roce']}", "   "]
        out += ["##", "## Persistent prefix mode setting", "##", "cli default prefix-modes enable"]
        return "\n".join(out) + "\n"

    def save(self) -> None:
        tmp = self.saved_path.with_suffix(".tmp")
        tmp.write_text(self.running_config(), encoding="utf-8")
        tmp.replace(self.saved_path)

    def foreign(self, commands: list[str]) -> None:
        """Configuration commands from another operator's session (the ``foreign`` fault)."""
        sess = OnyxSession(self, replay=True)
        for c in commands:
            sess.config_command(" ".join(c.split()))
        self.write_fabric()

    def load_commands(self, lines: list[str]) -> None:
        """Replay saved running-config lines (comments and mode lines skipped)."""
        sess = OnyxSession(self, replay=True)
        for ln in lines:
            s = ln.strip()
            if not s or s.startswith("#") or "prefix-modes" in s:
                continue
            out = sess.config_command(s)
            if out:
                raise ValueError(f"saved configuration line rejected: {s!r}: {out.strip()}")

    # ---------------------------------------------------------------- show renderers
    def show_pfc(self, as_json: bool) -> str:
        cfg = self.cfg
        st0 = (
            self.port_state(self.ports[0]) if self.ports else {"pfc_global": cfg["pfc_enabled"], "prios": []}
        )
        enabled = st0["pfc_global"]
        prios = st0["prios"] if enabled else sorted(set(cfg["pfc_prios"]))
        off = [p for p in range(8) if p not in prios]
        rows = []
        for p in self.ports:
            st = self.port_state(p)
            admin = "on" if st["pfc_on"] else "Auto"
            oper = "Enabled" if (enabled and st["pfc_on"] and st["link_up"]) else "Disabled"
            rows.append((p, admin, oper))
        if as_json:
            doc = [
                {
                    "PFC": "enabled" if enabled else "disabled",
                    "Priority Enabled List": " ".join(map(str, prios)),
                    "Priority Disabled List": " ".join(map(str, off)),
                },
                {p: [{"PFC admin": a, "PFC oper": o}] for p, a, o in rows},
            ]
            return json.dumps(doc, indent=4) + "\n"
        bar = "-" * 49
        lines = [
            "",
            f"PFC: {'enabled' if enabled else 'disabled'}",
            f"Priority Enabled List: {' '.join(map(str, prios))}",
            f"Priority Disabled List: {' '.join(map(str, off))}",
            "",
            bar,
            f"{'Interface':<17}{'PFC admin':<17}PFC oper",
            bar,
        ]
        lines += [f"{p:<17}{a:<17}{o}" for p, a, o in rows]
        return "\n".join(lines) + "\n"

    def show_ecn(self, port: str, as_json: bool) -> str:
        st = self.port_state(port)
        blocks: list[dict[str, str]] = [{"Interface ethernet": port[3:], "ECN marked packets": "0"}]
        for tc in range(8):
            if tc in st["cc"]:
                mode, mn, mx = st["cc"][tc]
                blocks.append(
                    {
                        "Threshold mode": "absolute",
                        "RED dropped packets": "0",
                        "header": f"TC-{tc}",
                        "Mode": _CC_MODE[mode],
                        "Maximum threshold": f"{mx} KB",
                        "Minimum threshold": f"{mn} KB",
                    }
                )
            else:
                blocks.append({"header": f"TC-{tc}", "Mode": "none"})
        if as_json:
            return json.dumps(blocks, indent=4) + "\n"
        lines = [f"Interface ethernet {port[3:]}", "ECN marked packets: 0", ""]
        for b in blocks[1:]:
            lines.append(f"{b['header']}:")
            lines.append(f"  Mode: {b['Mode']}")
            if b["Mode"] != "none":
                lines += [
                    f"  Threshold mode: {b['Threshold mode']}",
                    f"  Minimum threshold: {b['Minimum threshold']}",
                    f"  Maximum threshold: {b['Maximum threshold']}",
                    f"  RED dropped packets: {b['RED dropped packets']}",
                ]
            lines.append("")
        return "\n".join(lines)

    def show_qos(self, ports: list[str], as_json: bool) -> str:
        docs = []
        for p in ports:
            st = self.port_state(p)
            docs.append(
                {
                    p: [
                        {
                            "PCP,DEI rewrite": "disabled",
                            "Default switch-priority": "0",
                            "IP PCP;DEI rewrite": "enable",
                            "Default DEI": "0",
                            "Default PCP": "0",
                            "Trust mode": st["trust"],
                            "DSCP rewrite": "disabled",
                        }
                    ]
                }
            )
        if as_json:
            return json.dumps(docs, indent=4) + "\n"
        lines = []
        for d in docs:
            ((p, (f,)),) = d.items()
            lines.append(f"Interface {p}:")
            lines += [f"  {k}: {v}" for k, v in f.items()]
            lines.append("")
        return "\n".join(lines)

    def show_interfaces(self, ports: list[str], as_json: bool) -> str:
        rows = []
        for p in ports:
            st = self.port_state(p)
            admin = "Disabled" if self.cfg["ports"][p]["shutdown"] else "Enabled"
            rows.append((p, admin, "Up" if st["link_up"] else "Down", self.cfg["ports"][p]["mtu"] or 9216))
        if as_json:
            return (
                json.dumps(
                    {
                        p: [{"Admin state": a, "Operational state": o, "MTU": f"{m} bytes"}]
                        for p, a, o, m in rows
                    },
                    indent=4,
                )
                + "\n"
            )
        lines = []
        for p, a, o, m in rows:
            lines += [
                f"{p}:",
                f"  Admin state                      : {a}",
                f"  Operational state                : {o}",
                f"  MTU                              : {m} bytes",
                "",
            ]
        return "\n".join(lines)

    def show_roce(self) -> str:
        roce = self.cfg["roce"]
        if not roce:
            return "\nRoCE mode: N/A\n\n"
        r = ROCE_DEFAULTS
        return (
            f"\nRoCE mode : {roce}\nLLDP : enabled\nPort trust mode: {r['trust']}\n\n"
            f"Application TLV:\nSelector: udp\nProtocol: 4791\nPriority: {r['pfc_priority']}\n\n"
            "Port congestion-control:\nMode: ecn, absolute\n"
            f"Min : {r['ecn_min_kb']}\nMax : {r['ecn_max_kb']}\n\n"
            f"PFC : {'enabled' if roce == 'lossless' else 'disabled'}\n"
            f"switch-priority {r['pfc_priority']}: {'enabled' if roce == 'lossless' else 'disabled'}\n\n"
        )


class OnyxSession:
    """One CLI session: user -> enable -> config -> interface modes."""

    def __init__(self, switch: OnyxSwitch, replay: bool = False):
        self.sw = switch
        self.mode = "config" if replay else "user"
        self.iface: list[str] = []  # ports of the interface context
        self.replay = replay
        self.closed = False  # set when a fault dropped the session (the server then ends the connection)
        self.frozen = False  # a `freeze` fault: no output and no prompt from now on

    def prompt(self) -> str:
        if self.frozen:
            return ""
        base = f"{self.sw.cfg['hostname']} [standalone: master]"
        if self.mode == "user":
            return f"{base} > "
        if self.mode == "enable":
            return f"{base} # "
        if self.mode == "config":
            return f"{base} (config) # "
        spec = self.sw._ranges(self.iface)
        return f"{base} (config interface ethernet {','.join(spec)}) # "

    def banner(self) -> str:
        return "\nNVIDIA Onyx Switch Management\n\n"

    # ------------------------------------------------------------------ dispatch
    def handle(self, line: str) -> tuple[str, bool]:
        """Run one line; returns (output, drop_session)."""
        if self.closed:
            return "", True
        if self.frozen:
            return "", False
        if self.sw.faults.refresh_changed_ports():
            self.sw.write_fabric()
        s = " ".join(line.strip().split())
        rule = self.sw.faults.match(s) if s else None
        # a refused command: an Onyx CLI error line starts with "% " (see _unrecognized)
        return run_line(self, s, rule, self._dispatch, lambda c: f"% Command rejected by the switch: {c}\n",
                        self.sw.foreign)

    def _dispatch(self, s: str) -> tuple[str, bool]:
        if not s:
            return "", False
        if s in {"no cli session paging enable", "cli session paging enable"} or s.startswith(
            ("terminal ", "cli session")
        ):
            return "", False
        if s.startswith("show ") or s == "show":
            return self.show(s), False
        if s in {"exit", "quit"}:
            return self._exit(), self.mode == "closed"
        if self.mode == "user":
            if s == "enable":
                self.mode = "enable"
                return "", False
            return _unrecognized(s.split()[0]), False
        if self.mode == "enable":
            if s == "enable":
                return "", False
            if s == "disable":
                self.mode = "user"
                return "", False
            if re.fullmatch(r"conf(?:ig(?:ure)?)?\s+t(?:erm(?:inal)?)?", s):
                self.mode = "config"
                return "", False
            if s in {"configuration write", "write memory"}:
                self.sw.save()
                return "", False
            return _unrecognized(s.split()[0]), False
        # config or interface mode: every line here is a configuration command
        out = self.config_command(s)
        if s in {"configuration write", "write memory"}:
            return out, False
        drop = self.sw.faults.count_config_command()
        if drop:
            self.closed = True
        return out, drop

    def _exit(self) -> str:
        if self.mode == "interface":
            self.mode, self.iface = "config", []
        elif self.mode == "config":
            self.mode = "enable"
        else:
            self.mode = "closed"
        return ""

    # ------------------------------------------------------------------ configuration
    def config_command(self, s: str) -> str:
        """Apply one configuration-mode line; '' on success, the CLI error text otherwise."""
        cfg = self.sw.cfg
        if s in {"configuration write", "write memory"}:
            self.sw.save()
            return ""
        m = re.match(r"^interface ethernet (\S+)(?: (.+))?$", s)
        if m:
            try:
                ports = [self.sw._canon(p) for p in expand_interface_range(m.group(1))]
            except ValueError:
                return _unrecognized(m.group(1))
            unknown = [p for p in ports if p not in cfg["ports"]]
            if unknown:
                return f"% Interface {unknown[0]} does not exist\n"
            if m.group(2):
                return self._iface_command(ports, m.group(2))
            self.mode, self.iface = "interface", ports
            return ""
        if self.mode == "interface":
            return self._iface_command(self.iface, s)
        return self._global_command(s)

    def _changed(self) -> str:
        self.sw.write_fabric()
        return ""

    def _global_command(self, s: str) -> str:
        cfg = self.sw.cfg
        if re.fullmatch(r"dcb priority-flow-control enable(?: force)?", s):
            cfg["pfc_enabled"] = True
            return self._changed()
        if s == "no dcb priority-flow-control enable":
            cfg["pfc_enabled"] = False
            return self._changed()
        m = re.fullmatch(r"(no )?dcb priority-flow-control priority (\S+) enable", s)
        if m:
            if not m.group(2).isdigit() or int(m.group(2)) > 7:
                return _unrecognized(m.group(2))
            prios = set(cfg["pfc_prios"])
            (prios.discard if m.group(1) else prios.add)(int(m.group(2)))
            cfg["pfc_prios"] = sorted(prios)
            return self._changed()
        if re.fullmatch(r"(no )?dcb priority-flow-control watchdog enable", s):
            cfg["pfc_wd"] = not s.startswith("no ")
            return ""
        m = re.fullmatch(r"roce(?: (\S+))?", s)
        if m:
            mode = m.group(1) or "lossless"
            if mode not in {"lossless", "lossy", "semi-lossless"}:
                return _unrecognized(mode)
            cfg["roce"] = mode
            return self._changed()
        if s == "no roce":
            cfg["roce"] = None
            return self._changed()
        m = re.fullmatch(r"hostname (\S+)", s)
        if m:
            cfg["hostname"] = m.group(1)
            return ""
        if re.match(r"(?:no )?traffic pool\b", s):
            return self._pool_command(s)
        first = s.split()[0]
        if first in {"dcb", "roce", "hostname", "interface", "traffic"}:
            return _INCOMPLETE if len(s.split()) <= 2 else _unrecognized(s.split()[-1])
        return _unrecognized(first)

    def _pool_command(self, s: str) -> str:
        """`[no] traffic pool NAME [force] | type T | map switch-priority P... | memory percent X`."""
        pools = self.sw.cfg["pools"]
        words = s.split()
        neg = words[0] == "no"
        words = words[1:] if neg else words
        if len(words) < 3:
            return _INCOMPLETE
        name, rest = words[2], words[3:]
        if len(name) > 20:
            return _unrecognized(name)
        if rest in ([], ["force"]):
            if neg:
                if name not in pools:
                    return f"% Traffic pool {name} does not exist\n"
                del pools[name]
            else:
                pools.setdefault(name, {"type": "lossy", "prios": [], "memory": None})
            return self._changed()
        pool = pools.get(name)
        if rest[0] == "type":
            if not neg and len(rest) != 2:
                return _INCOMPLETE if len(rest) < 2 else _unrecognized(rest[2])
            if len(rest) == 2 and rest[1] not in POOL_TYPES:
                return _unrecognized(rest[1])
            if neg:  # resets the pool type to the default
                if pool is None:
                    return f"% Traffic pool {name} does not exist\n"
                pool["type"] = "lossy"
            else:
                pools.setdefault(name, {"type": "lossy", "prios": [], "memory": None})["type"] = rest[1]
            return self._changed()
        if rest[:2] == ["map", "switch-priority"]:
            prios = rest[2:]
            if not prios:
                return _INCOMPLETE
            for pr in prios:
                if not pr.isdigit() or int(pr) > 7:
                    return _unrecognized(pr)
            wanted = {int(pr) for pr in prios}
            if neg:
                if pool is None:
                    return f"% Traffic pool {name} does not exist\n"
                pool["prios"] = [pr for pr in pool["prios"] if pr not in wanted]
                return self._changed()
            pool = pools.setdefault(name, {"type": "lossy", "prios": [], "memory": None})
            for other in pools.values():  # a switch priority maps to one pool
                if other is not pool:
                    other["prios"] = [pr for pr in other["prios"] if pr not in wanted]
            pool["prios"] = sorted(set(pool["prios"]) | wanted)
            return self._changed()
        if rest[:2] == ["memory", "percent"]:
            if neg:
                if pool is None:
                    return f"% Traffic pool {name} does not exist\n"
                pool["memory"] = None
                return self._changed()
            if len(rest) != 3:
                return _INCOMPLETE if len(rest) < 3 else _unrecognized(rest[3])
            if not re.fullmatch(r"\d+(?:\.\d{1,2})?", rest[2]) or float(rest[2]) > 100:
                return _unrecognized(rest[2])
            pools.setdefault(name, {"type": "lossy", "prios": [], "memory": None})["memory"] = float(rest[2])
            return self._changed()
        return _INCOMPLETE if len(rest) == 1 and rest[0] in {"map", "memory"} else _unrecognized(rest[0])

    def _iface_command(self, ports: list[str], s: str) -> str:
        pcs = [self.sw.cfg["ports"][p] for p in ports]

        def setall(key: str, value: Any) -> str:
            for pc in pcs:
                pc[key] = copy.deepcopy(value)
            return self._changed()

        if re.fullmatch(r"dcb priority-flow-control mode on(?: force)?", s):
            return setall("pfc_on", True)
        if re.fullmatch(r"no dcb priority-flow-control mode(?: on)?(?: force)?", s):
            return setall("pfc_on", None)
        m = re.fullmatch(r"qos trust (\S+)", s)
        if m:
            val = _TRUST.get(m.group(1).lower())
            return setall("trust", val) if val else _unrecognized(m.group(1))
        if s == "no qos trust":
            return setall("trust", None)
        m = re.fullmatch(
            r"traffic-class (\S+) congestion-control (ecn|red|both) "
            r"minimum-absolute (\S+) maximum-absolute (\S+)",
            s,
        )
        if m:
            tc, mn, mx = m.group(1), m.group(3), m.group(4)
            for tok in (tc, mn, mx):
                if not tok.isdigit():
                    return _unrecognized(tok)
            if int(tc) > 7:
                return _unrecognized(tc)
            if int(mn) > int(mx):
                return "% Minimum threshold must be lower or equal to maximum threshold\n"
            for pc in pcs:  # red: drops only, does not mark (the fabric file shows no ECN)
                pc["ecn"][int(tc)] = [m.group(2), int(mn), int(mx)]
            return self._changed()
        m = re.fullmatch(r"no traffic-class (\S+) congestion-control", s)
        if m:  # removes the line (back to the default: none, or the `roce` one-shot's ECN)
            if not m.group(1).isdigit() or int(m.group(1)) > 7:
                return _unrecognized(m.group(1))
            for pc in pcs:
                pc["ecn"].pop(int(m.group(1)), None)
            return self._changed()
        m = re.fullmatch(r"(no )?traffic-class (\S+) dcb ets(?: (strict|wrr)(?: (\S+))?)?", s)
        if m:
            neg, tc, mode, weight = m.groups()
            if not tc.isdigit() or int(tc) > 7:
                return _unrecognized(tc)
            if neg:  # `no traffic-class N dcb ets`: back to the default scheduling
                if mode:
                    return _unrecognized(mode)
                for pc in pcs:
                    pc["ets"].pop(int(tc), None)
                return ""
            if mode is None or (mode == "wrr" and weight is None):
                return _INCOMPLETE
            if mode == "strict" and weight is not None:
                return _unrecognized(weight)
            if mode == "wrr" and (not weight.isdigit() or not 0 <= int(weight) <= 100):
                return _unrecognized(weight)
            for pc in pcs:
                pc["ets"][int(tc)] = "strict" if mode == "strict" else f"wrr {int(weight)}"
            return ""
        if s in {"pfc-wd", "no pfc-wd"}:
            return setall("pfc_wd", s == "pfc-wd")
        if s in {"shutdown", "no shutdown"}:
            return setall("shutdown", s == "shutdown")
        m = re.fullmatch(r"mtu (\d+)(?: force)?", s)
        if m:
            return setall("mtu", int(m.group(1)))
        first = s.split()[0]
        known = {"dcb", "qos", "traffic-class", "no", "mtu"}
        if first in known:
            return _INCOMPLETE if len(s.split()) <= 2 else _unrecognized(s.split()[-1])
        return _unrecognized(first)

    # ------------------------------------------------------------------ show
    def show(self, s: str) -> str:
        sw = self.sw
        as_json = False
        m = re.fullmatch(r"(.*?)\s*\|\s*json-print", s)
        if m:
            s, as_json = m.group(1), True
        if s in {"show running-config", "show running-config | include"}:
            return sw.running_config()
        if s == "show dcb priority-flow-control":
            return sw.show_pfc(as_json)
        m = re.fullmatch(r"show interfaces ethernet (\d+/\d+) congestion-control", s)
        if m:
            port = "Eth" + m.group(1)
            return (
                sw.show_ecn(port, as_json)
                if port in sw.cfg["ports"]
                else f"% Interface {port} does not exist\n"
            )
        if s == "show qos":
            return sw.show_qos(sw.ports, as_json)
        m = re.fullmatch(r"show qos interface ethernet (\S+)", s)
        if m:
            try:
                ports = [sw._canon(p) for p in expand_interface_range(m.group(1))]
            except ValueError:
                return _unrecognized(m.group(1))
            return sw.show_qos([p for p in ports if p in sw.cfg["ports"]], as_json)
        m = re.fullmatch(r"show interfaces ethernet(?: (\S+))?(?: status)?", s)
        if m:
            ports = sw.ports
            if m.group(1):
                try:
                    ports = [sw._canon(p) for p in expand_interface_range(m.group(1))]
                except ValueError:
                    return _unrecognized(m.group(1))
            return sw.show_interfaces([p for p in ports if p in sw.cfg["ports"]], as_json)
        if s == "show roce":
            return sw.show_roce()
        if s == "show version":
            return (
                f"Product name:      Onyx\nProduct release:   {RELEASE}\nBuild ID:          #1-dev\n"
                f"Product model:     x86onie\nHost ID:           {sw.name}\n"
            )
        words = s.split()
        return _unrecognized(words[1]) if len(words) > 1 else _INCOMPLETE
