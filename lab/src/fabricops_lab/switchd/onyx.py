"""The Onyx CLI engine: modes, running vs saved configuration, the RoCE show commands.

Shared per switch: :class:`OnyxSwitch` (running config, saved config on disk, fabric file, faults).
Per SSH session: :class:`OnyxSession` (mode stack, interface context). ``handle(line)`` returns the
text to print and whether to drop the session (fault injection).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

from fabricops.parsers.onyx import expand_interface_range
from fabricops_lab.emul.devstate import switch_port_counters

from .onyx_releases import DEFAULT_RELEASE, release_info
from .state import FaultWatch, atomic_write_json, merge_port_faults, port_entry, run_line, trained_links

__all__ = ["ROCE_DEFAULTS", "OnyxSession", "OnyxSwitch"]

RELEASE = DEFAULT_RELEASE  # kept for importers; a switch answers as its own ``release``
# Default MTU of an Ethernet port: 1500 (mellanox.onyx fixture onyx_facts_show_interfaces_ethernet.cfg,
# a switch as shipped: "MTU": "1500 bytes(Maximum packet size 1522 bytes)"); `mtu` takes 1500-9216
# (Onyx user manual, "mtu" command: "Range: 1500-9216 bytes").
DEFAULT_MTU = 1500
MTU_RANGE = (1500, 9216)
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
        "rewrite_pcp": False,  # `qos rewrite pcp` (show qos: "PCP,DEI rewrite: disabled" by default)
        "rewrite_dscp": False,  # `qos rewrite dscp`
    }


class OnyxSwitch:
    """One emulated Onyx switch: configuration state shared by all its sessions."""

    def __init__(
        self,
        name: str,
        ports: list[str],
        state_dir: str | Path,
        fabric_file: str | Path | None,
        release: str | None = None,
    ):
        self.release, self.traits = release_info(release)
        self.name = name
        self.ports = [self._canon(p) for p in ports]
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.saved_path = self.state_dir / "onyx-saved-config.txt"
        self.fabric_file = fabric_file
        self.faults = FaultWatch(self.state_dir)
        self.pfc_saved: dict[str, Any] = {}  # pfc-off fault: each port's pfc_on before the fault
        self.started = time.time()
        self.cfg = self._empty_config()
        # the login user's password (server.SwitchServer reads it at every login; None: key-only);
        # `username admin password PW` in config mode changes it (docs/runbooks/rotate-switch-credentials.md)
        self.login_user = "admin"
        self.login_password: str | None = None
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
        for tc, (mode, mn, mx, *rel) in pc["ecn"].items():
            if rel and rel[0] == "relative":  # percent of the buffer: no KB to put in the fabric file
                continue
            if mode in ("ecn", "both"):
                ecn[int(tc)] = (int(mn), int(mx))
            else:  # RED only: drops, does not mark
                ecn.pop(int(tc), None)
        link_up = not pc["shutdown"] and port not in self.faults.ports_down()
        cc = {int(tc): (*v[:3], v[3] if len(v) > 3 else "absolute") for tc, v in pc["ecn"].items()}
        if roce and ROCE_DEFAULTS["ecn_tc"] not in cc:
            cc[ROCE_DEFAULTS["ecn_tc"]] = (
                "ecn", ROCE_DEFAULTS["ecn_min_kb"], ROCE_DEFAULTS["ecn_max_kb"], "absolute"
            )
        return {
            "cc": cc,
            "pfc_global": pfc_global,
            "pfc_on": pfc_on,
            "prios": sorted(prios) if pfc_global else [],
            "trust": trust,
            "ecn": ecn,
            "link_up": link_up,
        }

    def sync_pfc_off(self) -> None:
        """The lab's pfc-off fault, as an operator does it: ``interface ethernet 1/N no dcb
        priority-flow-control mode`` on each listed port (running configuration; it shows in
        ``show running-config`` and ``show dcb priority-flow-control``); a port leaving the list gets
        its previous setting back. Onyx manual, "Priority Flow Control" (interface PFC mode)."""
        want = self.faults.pfc_off() & set(self.ports)
        for p in sorted(want - set(self.pfc_saved)):
            self.pfc_saved[p] = self.cfg["ports"][p]["pfc_on"]
            self.cfg["ports"][p]["pfc_on"] = False
        for p in sorted(set(self.pfc_saved) - want):
            self.cfg["ports"][p]["pfc_on"] = self.pfc_saved.pop(p)

    def write_fabric(self) -> None:
        self.sync_pfc_off()
        ports = {}
        for p in self.ports:
            st = self.port_state(p)
            trust = {"L3": "l3", "both": "l3", "L2": "l2", "port": "port"}[st["trust"]]
            pfc = st["prios"] if st["pfc_on"] else []
            ports[p] = port_entry(trust, pfc, st["ecn"], st["link_up"])
        merge_port_faults(ports, self.faults)
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

    def _port_config(self, p: str) -> tuple[list[str], list[str]]:
        """(interface ethernet lines, DCBX lines) of one port's running configuration."""
        pc = self.cfg["ports"][p]
        eth: list[str] = []
        dcb: list[str] = []
        if pc["mtu"]:
            eth.append(f"mtu {pc['mtu']} force")
        if pc["shutdown"]:
            eth.append("shutdown")
        if pc["trust"]:
            eth.append(f"qos trust {pc['trust']}")
        if pc["rewrite_pcp"]:
            eth.append("qos rewrite pcp")
        if pc["rewrite_dscp"]:
            eth.append("qos rewrite dscp")
        for tc, (mode, mn, mx, *rel) in sorted(pc["ecn"].items()):
            kind = rel[0] if rel else "absolute"
            eth.append(
                f"traffic-class {tc} congestion-control {mode} minimum-{kind} {mn} maximum-{kind} {mx}"
            )
        for tc, ets in sorted(pc["ets"].items()):
            eth.append(f"traffic-class {tc} dcb ets {ets}")
        if pc["pfc_on"] is True:
            dcb.append("dcb priority-flow-control mode on force")
        elif pc["pfc_on"] is False:
            dcb.append("no dcb priority-flow-control mode")
        if pc["pfc_wd"]:
            dcb.append("pfc-wd")
        return eth, dcb

    def running_config_interfaces(self, ports: list[str]) -> str:
        """`show running-config interface ethernet 1/1`: that port's lines, one port per line."""
        lines = []
        for p in ports:
            e, d = self._port_config(p)
            lines += [f"interface ethernet {p[3:]} {c}" for c in e + d]
        return "\n".join(lines) + ("\n" if lines else "")

    def running_config(self) -> str:
        cfg = self.cfg
        eth: dict[str, list[str]] = {}
        dcb: dict[str, list[str]] = {}
        for p in self.ports:
            e, d = self._port_config(p)
            if e:
                eth[p] = e
            if d:
                dcb[p] = d
        out = [
            "##",
            '## Running database "initial"',
            "## Generated at " + time.strftime("%Y/%m/%d %H:%M:%S +0000", time.gmtime()),
            f"## Hostname: {cfg['hostname']}",
            f"## Product release: {self.release}",
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
            per_port = {p: [{"PFC admin": a, "PFC oper": o}] for p, a, o in rows}
            if not self.traits["api"]:
                # before 3.6.6000: a dict keyed by interface (mellanox.onyx fixture
                # onyx_pfc_interface_enabled.cfg, read by onyx_pfc_interface's pre-API branch)
                return json.dumps(per_port, indent=4) + "\n"
            # from 3.6.6000 on: a list of blocks, the interfaces in the third (onyx_pfc_interface:
            # `if self._os_version >= self.ONYX_API_VERSION: pfc_config = pfc_config[2]`); the text
            # form's two head paragraphs are the first two blocks (the split of their keys between
            # blocks 1 and 2 is not in a public capture: see docs/lab-fidelity.md)
            doc = [
                {"PFC": "enabled" if enabled else "disabled"},
                {
                    "Priority Enabled List": " ".join(map(str, prios)),
                    "Priority Disabled List": " ".join(map(str, off)),
                },
                per_port,
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
                mode, mn, mx, kind = st["cc"][tc]
                # relative thresholds print as percent (mellanox.onyx fixture
                # onyx_show_interface_congestion_control.cfg: TC-2 "relative", "9%" / "90%")
                unit = "%" if kind == "relative" else " KB"
                blocks.append(
                    {
                        "Threshold mode": kind,
                        "RED dropped packets": "0",
                        "header": f"TC-{tc}",
                        "Mode": _CC_MODE[mode],
                        "Maximum threshold": f"{mx}{unit}",
                        "Minimum threshold": f"{mn}{unit}",
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
        """`show qos interface ethernet X`: trust and rewrite, the PCP/DSCP -> switch-priority map and
        the rewrite map (mellanox.onyx fixture show_qos_interface_ethernet.cfg: three blocks per port;
        onyx_qos reads the first one's "Trust mode", "DSCP rewrite", "PCP,DEI rewrite")."""
        docs = []
        for p in ports:
            st, pc = self.port_state(p), self.cfg["ports"][p]
            head = {
                "PCP,DEI rewrite": "enabled" if pc["rewrite_pcp"] else "disabled",
                "Default switch-priority": "0",
                "IP PCP;DEI rewrite": "enable",
                "Default DEI": "0",
                "Default PCP": "0",
                "Trust mode": st["trust"],
                "DSCP rewrite": "enabled" if pc["rewrite_dscp"] else "disabled",
            }
            # the default maps: DSCP 8*sp..8*sp+7 and PCP sp -> switch-priority sp; sp rewrites to
            # PCP sp, DSCP 8*sp, TC sp (the capture's values, which are the defaults)
            dscp_map = {
                f"{sp}(0) {sp}(1)": [
                    {"switch-priority": str(sp), "DSCP": " ".join(str(8 * sp + k) for k in range(8))}
                ]
                for sp in range(8)
            }
            rewrite = [
                {"Egress Interface": p},
                {
                    str(sp): [{"PCP(DEI)": f"{sp}(0)", "TC": str(sp), "DSCP": str(8 * sp)}]
                    for sp in range(8)
                },
            ]
            docs.append(
                {
                    p: [
                        head,
                        {"PCP(DEI); DSCP to switch-priority mapping": [dscp_map]},
                        {
                            "PCP(DEI); DSCP rewrite mapping (switch-priority to PCP(DEI); DSCP; "
                            "traffic-class)": rewrite
                        },
                    ]
                }
            )
        if as_json:
            return json.dumps(docs, indent=4) + "\n"
        lines = []
        for d in docs:
            ((p, (f, *_)),) = d.items()
            lines.append(f"Interface {p}:")
            lines += [f"  {k}: {v}" for k, v in f.items()]
            lines += ["", "  PCP(DEI); DSCP to switch-priority mapping:"]
            lines += [
                f"    {sp}(0) {sp}(1)  {sp}  " + " ".join(str(8 * sp + k) for k in range(8))
                for sp in range(8)
            ]
            lines.append("")
        return "\n".join(lines)

    def _mac(self, port: str) -> str:
        """A stable per-switch, per-port MAC in NVIDIA's OUI 7c:fe:90 (the captures' prefix)."""
        h = hashlib.sha256(self.name.encode()).digest()
        n = int(port.split("/")[-1])
        return f"7c:fe:90:{h[0]:02x}:{h[1]:02x}:{(h[2] + 2 * n) % 256:02x}"

    def port_counters(
        self, port: str, link: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], dict[str, str]]:
        """The Rx and Tx counter groups of a port, with the fields (and order) of the mellanox.onyx
        fixture onyx_interfaces_show.cfg: bytes and packets are the flow ledger's (the traffic the
        emulated perftest runs through this port, docs/lab-fidelity.md "Fabric physics") over a
        base of control frames. Rx "error packets" are the symbol errors a lab port fault left
        (``flapping``: frames a corrupted symbol spoils fail their FCS and count as errors); the
        lab has no discards of its own to count."""
        c = switch_port_counters(self.fabric_file, self.name, port)
        if link is None:
            link = trained_links(self.fabric_file, self.name, [port], self.faults)[port]
        rx, tx = {}, {}
        for group, side in ((rx, "rx"), (tx, "tx")):
            errors = link["symbol_errors"] if side == "rx" else 0
            group.update({"error packets": str(errors), "packets": str(c[f"{side}_packets"]),
                          "bytes": str(c[f"{side}_bytes"]), "multicast packets": "0",
                          "unicast packets": str(c[f"{side}_packets"]), "discard packets": "0",
                          "broadcast packets": "0"})
        tx["hoq discard packets"] = "0"
        return rx, tx

    def show_counters(self, ports: list[str], as_json: bool) -> str:
        """`show interfaces ethernet 1/N counters`: the port's Rx and Tx counter groups (the same
        groups and fields `show interfaces ethernet` shows, fixture onyx_interfaces_show.cfg); JSON
        in the release's form of `show interfaces ethernet` (a list of one-key dicts from 3.6.6000,
        flat blocks with "header" before)."""
        blocks = []
        links = trained_links(self.fabric_file, self.name, ports, self.faults)
        for p in ports:
            rx, tx = self.port_counters(p, links[p])
            blocks.append((p, {"Rx": rx, "Tx": tx}))
        if as_json:
            return self._port_blocks_json(blocks)
        lines = []
        for p, f in blocks:
            lines.append(f"{p}:")
            for k, v in f.items():
                lines.append(f"  {k}:")
                lines += [f"    {sv:<20} {sk}" for sk, sv in v.items()]
            lines.append("")
        return "\n".join(lines)

    def show_interfaces(self, ports: list[str], as_json: bool) -> str:
        """`show interfaces ethernet`: the fields of mellanox.onyx fixture onyx_interfaces_show.cfg.

        From 3.6.6000 the JSON is a list of one-key dicts ``[{"Eth1/1": [{...}]}]`` (onyx_interface's
        API branch); before, a list of flat blocks with ``header`` (the fixture's own form)."""
        blocks = []
        links = trained_links(self.fabric_file, self.name, ports, self.faults)
        for p in ports:
            st, pc = self.port_state(p), self.cfg["ports"][p]
            mtu = pc["mtu"] or DEFAULT_MTU
            rx, tx = self.port_counters(p, links[p])
            # the rate the link trained at (what both ends agreed on, state.trained_links), in the
            # capture's form ("100 Gbps"); a port with nothing cabled keeps the capture's 100 Gbps
            gbps = links[p]["gbps"]
            blocks.append((p, {
                "Fec": "auto",
                "Mac address": self._mac(p),
                "60 seconds ingress rate": "0 bits/sec, 0 bytes/sec, 0 packets/sec",
                'Last clearing of "show interface" counters': "Never",
                "Actual speed": f"{gbps:g} Gbps" if gbps else "100 Gbps",
                "MTU": f"{mtu} bytes(Maximum packet size {mtu + 22} bytes)",
                "Telemetry threshold": "Disabled\t TCs: N\\A",
                "Telemetry threshold level": "N\\A",
                "Telemetry sampling": "Disabled\t TCs: N\\A",
                "Flow-control": "receive off send off",
                "Forwarding mode": "inherited cut-through",
                "60 seconds egress rate": "0 bits/sec, 0 bytes/sec, 0 packets/sec",
                "Last change in operational status": "Never",
                "Boot delay time": "0 sec",
                "Description": "N\\A",
                "Admin state": "Disabled" if pc["shutdown"] else "Enabled",
                "Operational state": "Up" if st["link_up"] else "Down",
                "Width reduction mode": "Not supported",
                "Tx": tx,
                "MAC learning mode": "Enabled",
                "Switchport mode": "access",
                "Rx": rx,
            }))
        if as_json:
            return self._port_blocks_json(blocks)
        lines = []
        for p, f in blocks:
            lines.append(f"{p}:")
            for k, v in f.items():
                if isinstance(v, dict):
                    lines.append(f"  {k}:")
                    lines += [f"    {sv:<20} {sk}" for sk, sv in v.items()]
                else:
                    lines.append(f"  {k:<33}: {v}")
            lines.append("")
        return "\n".join(lines)

    def version_fields(self) -> dict[str, str]:
        """`show version`: the 17 fields of mellanox.onyx fixtures onyx_command_show_version.txt /
        onyx_facts_show_version.cfg (cliconf get_device_info reads Product name, Product release,
        Version summary, Product model)."""
        h = hashlib.sha256(self.name.encode()).hexdigest().upper()
        up = max(0.0, time.time() - self.started)
        d, rem = divmod(up, 86400)
        hh, rem = divmod(rem, 3600)
        mm, ss = divmod(rem, 60)
        t = self.traits
        return {
            "Product name": str(t["product_name"]),
            "Product release": self.release,
            "Build ID": "#1-dev",
            "Build date": str(t["build_date"]),
            "Target arch": "x86_64",
            "Target hw": "x86_64",
            "Built by": str(t["built_by"]),
            "Version summary": f"X86_64 {self.release} {t['build_date']} x86_64",
            "Product model": "x86onie",
            "Host ID": h[:12],
            "System serial num": f"MT{int(h[12:18], 16) % 10000:04d}X{int(h[18:24], 16) % 100000:05d}",
            "System UUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, self.name)),
            "Uptime": f"{int(d)}d {int(hh)}h {int(mm)}m {ss:.3f}s",
            "CPU load averages": "0.06 / 0.12 / 0.13",
            "Number of CPUs": "4",
            "System memory": "2597 MB used / 5213 MB free / 7810 MB total",
            "Swap": "0 MB used / 0 MB free / 0 MB total",
        }

    def show_version(self, as_json: bool) -> str:
        f = self.version_fields()
        if as_json:
            return json.dumps(f, indent=4) + "\n"
        lines = []
        for k, v in f.items():
            lines.append(f"{k + ':':<19}{v}")
            if k in {"Version summary", "System UUID"}:  # the capture's blank lines
                lines.append("")
        return "\n".join(lines) + "\n"

    def show_hosts(self) -> str:
        """`show hosts`: starts with "Hostname: NAME" (mellanox.onyx cliconf get_device_info reads
        ``show hosts | include Hostname`` and splits it on ':')."""
        return (
            f"Hostname: {self.cfg['hostname']}\nName servers:\nDomain names:\n"
            "Static IPv4 host mappings:\n  127.0.0.1 --> localhost\nStatic IPv6 host mappings:\n"
            "  ::1 --> localhost6\nAutomatically map hostname to loopback address: yes\n"
        )

    def show_ets(self, ports: list[str], as_json: bool) -> str:
        """`show dcb ets interface ethernet X`: mellanox.onyx fixture onyx_show_dcb_ets_interface.cfg
        (onyx_traffic_class reads ``[0][port][2]["ETS per TC"][0][tc][0]`` "S.Mode" and "W").
        Default: every TC WRR, weights 12/13 alternating (the capture's unconfigured TCs)."""
        docs = []
        for p in ports:
            ets = self.cfg["ports"][p]["ets"]
            per_tc: dict[int, tuple[str, int]] = {}
            for tc in range(8):
                v = ets.get(tc)
                if v == "strict":
                    per_tc[tc] = ("Strict", 0)
                elif v:
                    per_tc[tc] = ("WRR", int(v.split()[1]))
                else:
                    per_tc[tc] = ("WRR", 12 if tc % 2 == 0 else 13)
            total = sum(w for m, w in per_tc.values() if m == "WRR") or 1
            rows = {
                str(tc): [{
                    "S.Mode": m,
                    "BW Sh.(Mbps)": "N/A",
                    "W(%)": str(round(100 * w / total) if m == "WRR" else 0),
                    "BW Gr.(Mbps)": "0",
                    "W": str(w),
                }]
                for tc, (m, w) in per_tc.items()
            }
            docs.append({p: [
                {"Multicast unaware mapping": "disabled", "Interface Bandwidth Shape [Mbps]": "N/A"},
                {"Flags": [{"S.Mode": "Scheduling Mode [Strict/WRR]", "Bw.Sh": "Bandwidth Shaper",
                            "D": "-", "W": "Weight", "Bw.Gr": "Bandwidth Guaranteed"}]},
                {"ETS per TC": [rows]},
            ]})
        if as_json:
            return json.dumps(docs, indent=4) + "\n"
        lines = []
        for d in docs:
            ((p, blocks),) = d.items()
            lines += [f"Interface {p}:", "  Multicast unaware mapping: disabled",
                      "  Interface Bandwidth Shape [Mbps]: N/A", "",
                      f"  {'TC':<4}{'S.Mode':<8}{'W':<5}{'W(%)':<6}{'BW Gr.(Mbps)':<14}BW Sh.(Mbps)"]
            for tc, (r,) in blocks[2]["ETS per TC"][0].items():
                lines.append(f"  {tc:<4}{r['S.Mode']:<8}{r['W']:<5}{r['W(%)']:<6}{r['BW Gr.(Mbps)']:<14}"
                             f"{r['BW Sh.(Mbps)']}")
            lines.append("")
        return "\n".join(lines)

    def show_pools(self, name: str | None, as_json: bool) -> str:
        """`show traffic pool [NAME]`: mellanox.onyx fixture onyx_buffer_pool.cfg (onyx_buffer_pool
        reads "Type", "Switch Priorities", "Memory [%]")."""
        pools = self.cfg["pools"]
        if name is not None and name not in pools:
            return f"% Traffic pool {name} does not exist\n"
        doc: dict[str, Any] = {}
        for n, pl in sorted(pools.items()):
            if name is not None and n != name:
                continue
            mem = pl["memory"] or 0.0
            doc[n] = [{
                "Type": pl["type"],
                "Switch Priorities": " ".join(map(str, pl["prios"])),
                "Max Usage": "0",
                "Usage": "0",
                "Memory actual": f"{11.8 * mem / 100:.1f}M",  # the capture: 50.00 % -> 5.9M
                "Memory [%]": f"{mem:.2f}",
            }]
        doc["Exception list"] = {"message": "N/A"}
        if as_json:
            return json.dumps(doc, indent=4) + "\n"
        lines = []
        for n, v in doc.items():
            if n == "Exception list":
                continue
            lines.append(f"Traffic pool {n}:")
            lines += [f"  {k:<18}: {val}" for k, val in v[0].items()]
            lines.append("")
        lines.append("Exception list: N/A")
        return "\n".join(lines) + "\n"

    def _port_blocks_json(self, blocks: list[tuple[str, dict[str, Any]]]) -> str:
        """Per-port blocks as this release's `| json-print` shapes them (api: {port: [fields]})."""
        if self.traits["api"]:
            doc: Any = [{p: [f]} for p, f in blocks]
        else:
            doc = [{**f, "header": p} for p, f in blocks]
        return json.dumps(doc, indent=4) + "\n"

    def show_lldp_remote(self, ports: list[str]) -> str:
        """`show lldp interfaces ethernet [1/N] remote`: the cabling as built next to the fabric file
        (``fabric/cabling.json`` and its override), rendered by emul/fabricdisc.py."""
        from fabricops_lab.emul import fabricdisc

        if not self.fabric_file:
            return ""
        return fabricdisc.onyx_lldp_remote(Path(self.fabric_file).parent.parent, self.name, ports)

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


# The command words each mode knows, for unique-prefix abbreviation ("ena", "conf t", "sh run": the
# Onyx user manual, "Command Line Interface (CLI)" > "CLI Shortcuts": a command or keyword may be
# shortened to any unique prefix). A word that is not a unique prefix stays as typed.
_SHOW_TREE: dict[str, Any] = {
    "running-config": {"interface": {"ethernet": {}}},
    "version": {},
    "hosts": {},
    "clock": {},
    "dcb": {"priority-flow-control": {}, "ets": {"interface": {"ethernet": {}}}},
    "interfaces": {"ethernet": {}},
    "qos": {"interface": {"ethernet": {}}},
    "roce": {},
    "traffic": {"pool": {}},
    "module": {},
    "lldp": {"interfaces": {"ethernet": {}}},
}
_USER_TREE: dict[str, Any] = {
    "enable": {},
    "exit": {},
    "quit": {},
    "show": _SHOW_TREE,
    "terminal": {"length": {}, "width": {}, "type": {}},
    "cli": {"session": {"paging": {"enable": {}}, "terminal": {}}},
    "no": {},  # "no" takes the rest of its mode's tree (see _expand)
}
_ENABLE_TREE = {
    **_USER_TREE,
    "disable": {},
    "configure": {"terminal": {}},
}
_CONFIG_TREE = {
    **_ENABLE_TREE,
    # `configuration write` / `write memory` are Config-mode commands (netmiko's save_config enters
    # config mode first); config mode also takes every enable-mode command (the manual: "Its commands
    # are a superset of those in Enable mode") and `no configure` goes back to enable mode.
    "configuration": {"write": {}},
    "write": {"memory": {}},
    "interface": {"ethernet": {}},
    "dcb": {"priority-flow-control": {"enable": {}, "priority": {}, "watchdog": {}}},
    "roce": {},
    "hostname": {},
    "traffic": {"pool": {}},
    "username": {},
}
_IFACE_TREE = {
    **_CONFIG_TREE,
    "dcb": {"priority-flow-control": {"enable": {}, "priority": {}, "watchdog": {}, "mode": {}}},
    "traffic-class": {},
    "qos": {"trust": {}, "rewrite": {"pcp": {}, "dscp": {}}},
    "mtu": {},
    "shutdown": {},
    "pfc-wd": {},
}
_TREES = {"user": _USER_TREE, "enable": _ENABLE_TREE, "config": _CONFIG_TREE, "interface": _IFACE_TREE}
# Standard mode (the `>` prompt): "the most restrictive mode and only has commands to query a
# restricted set of state information" (NVIDIA MLNX-OS/Onyx User Manual v3.10.4400, "Command Line
# Interface (CLI)", table of CLI modes). What the emulator lets through there: the session settings
# and the identity shows real clients read before `enable` (mellanox.onyx cliconf get_device_info runs
# `show version | json-print` and `show hosts | include Hostname` at login; netmiko and Ansible's
# terminal plugin send `no cli session paging enable` / `terminal ...` there). Configuration and
# `show running-config` need enable mode.
_STANDARD_SHOWS = {"version", "hosts", "clock"}
_SESSION_WORDS = ("terminal", "cli", "no cli")


def _ambiguous(token: str) -> str:
    return f'% Ambiguous command "{token}".\nType "?" for help.\n'


def _expand(words: list[str], tree: dict[str, Any]) -> tuple[list[str], str | None]:
    """Expand unique prefixes along TREE; (words, the ambiguous word or None)."""
    out: list[str] = []
    node: dict[str, Any] = tree
    for i, w in enumerate(words):
        if not node:
            out += words[i:]
            break
        cands = [w] if w in node else [k for k in node if k.startswith(w)]
        if len(cands) > 1:
            return words, w
        if not cands:
            out += words[i:]
            break
        out.append(cands[0])
        node = tree if (cands[0] == "no" and i == 0) else node[cands[0]]
    return out, None


class OnyxSession:
    """One CLI session: standard (>) -> enable (#) -> config -> interface modes."""

    def __init__(self, switch: OnyxSwitch, replay: bool = False):
        self.sw = switch
        self.mode = "config" if replay else "user"
        self.iface: list[str] = []  # ports of the interface context
        self.replay = replay
        self.closed = False  # set when a fault dropped the session (the server then ends the connection)
        self.frozen = False  # a `freeze` fault: no output and no prompt from now on
        # paging is on at login (`cli session paging enable` is the default; netmiko and Ansible's
        # onyx terminal plugin send `no cli session paging enable` first); a page is `terminal length`
        # lines (Onyx user manual, "terminal length": default 24; 0 never pages)
        self.paging = True
        self.length = 24
        self.pending: list[str] = []  # the rest of a paged output, shown on the next key line

    def prompt(self) -> str:
        if self.frozen:
            return ""
        if self.pending:
            return ""  # the pager's own prompt is already on screen
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
        if self.pending:  # the pager: `q` quits, any other key line shows the rest
            rest, self.pending = self.pending, []
            return ("" if line.strip().lower() == "q" else "\n".join(rest) + "\n"), False
        if self.sw.faults.refresh_changed_ports():
            self.sw.write_fabric()
        s = " ".join(line.strip().split())
        rule = self.sw.faults.match(s) if s else None
        # a refused command: an Onyx CLI error line starts with "% " (see _unrecognized)
        out, drop = run_line(self, s, rule, self._dispatch,
                             lambda c: f"% Command rejected by the switch: {c}\n", self.sw.foreign)
        return self._page(out), drop

    def _page(self, out: str) -> str:
        """With paging on, an output longer than a page stops after one, under the pager's prompt."""
        lines = out.split("\n")
        if out.endswith("\n"):
            lines = lines[:-1]
        if self.replay or not self.paging or self.length <= 0 or len(lines) <= self.length:
            return out
        page = self.length - 1
        self.pending = lines[page:]
        return "\n".join(lines[:page]) + f"\nlines 1-{page} "

    def _session_setting(self, s: str) -> bool:
        """`[no] cli session paging enable`, `terminal length N` / `terminal width N`: any mode."""
        if s in {"no cli session paging enable", "cli session paging enable"}:
            self.paging = not s.startswith("no ")
            return True
        m = re.fullmatch(r"terminal length (\d+)", s)
        if m:
            self.length = int(m.group(1))
            return True
        return bool(re.fullmatch(r"(?:terminal (?:width|type) \S+|cli session terminal \S+( \S+)?)", s))

    def _dispatch(self, s: str) -> tuple[str, bool]:
        if not s:
            return "", False
        head, _, pipes = s.partition(" | ")
        words, amb = _expand(head.split(), _TREES[self.mode if self.mode in _TREES else "config"])
        if amb is not None:
            return _ambiguous(amb), False
        s = " ".join(words) + (f" | {pipes}" if pipes else "")
        if pipes and words[0] != "show":
            return _unrecognized("|"), False
        if self._session_setting(s):
            return "", False
        if words[0] == "show":
            if self.mode == "user" and (len(words) < 2 or words[1] not in _STANDARD_SHOWS):
                return (_unrecognized(words[1]) if len(words) > 1 else _INCOMPLETE), False
            return self.show(s), False
        if s in {"exit", "quit"}:
            return self._exit(), self.mode == "closed"
        if self.mode == "user":
            if s == "enable":
                self.mode = "enable"
                return "", False
            return _unrecognized(words[0]), False
        if s == "enable":
            return "", False
        if s == "disable":
            self.mode, self.iface = "user", []
            return "", False
        if s == "configure terminal":
            if self.mode == "enable":
                self.mode = "config"
            return "", False
        if self.mode == "enable":
            return _unrecognized(words[0]), False
        if s == "no configure":  # the manual: 'To return to Enable mode, enter "exit" or "no configure"'
            self.mode, self.iface = "enable", []
            return "", False
        # config or interface mode: every other line here is a configuration command
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
        # `username <user> password [0 | 7] <password>` (NVIDIA Onyx User Manual, "User Management
        # and Security Commands", `username`: 0 = cleartext follows, 7 = an encrypted hash follows).
        # Emulated: a cleartext password for the switch's login user, effective for the next login
        # (sessions already open stay). Not emulated: other users, `7` hashes, the line in
        # `show running-config` (docs/lab-fidelity.md, Onyx, "Known to differ").
        m = re.fullmatch(r"username (\S+) password(?: (0|7))? (\S+)", s)
        if m:
            if m.group(1) != self.sw.login_user:
                return f"% User {m.group(1)} is not emulated (only {self.sw.login_user})\n"
            if m.group(2) == "7":
                return "% Encrypted (7) passwords are not emulated\n"
            if self.sw.login_password is None:
                return "% Password login is not enabled on this switch\n"
            self.sw.login_password = m.group(3)
            return ""
        first = s.split()[0]
        if first in {"dcb", "roce", "hostname", "interface", "traffic", "username"}:
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
        m = re.fullmatch(r"qos rewrite (pcp|dscp)", s)
        if m:
            return setall(f"rewrite_{m.group(1)}", True)
        m = re.fullmatch(r"no qos rewrite (pcp|dscp)", s)
        if m:
            return setall(f"rewrite_{m.group(1)}", False)
        # `traffic-class N congestion-control ecn|red|both minimum-absolute KB maximum-absolute KB` or
        # `... minimum-relative PCT maximum-relative PCT` (mellanox.onyx onyx_traffic_class sends both
        # forms; relative thresholds are percent of the buffer, 0-100)
        m = re.fullmatch(
            r"traffic-class (\S+) congestion-control (ecn|red|both) "
            r"minimum-(absolute|relative) (\S+) maximum-(absolute|relative) (\S+)",
            s,
        )
        if m:
            tc, mode, kind, mn, kind2, mx = m.groups()
            if kind2 != kind:
                return _unrecognized(f"maximum-{kind2}")
            for tok in (tc, mn, mx):
                if not tok.isdigit():
                    return _unrecognized(tok)
            if int(tc) > 7:
                return _unrecognized(tc)
            if kind == "relative" and int(mx) > 100:
                return _unrecognized(mx)
            if int(mn) > int(mx):
                return "% Minimum threshold must be lower or equal to maximum threshold\n"
            for pc in pcs:  # red: drops only, does not mark (the fabric file shows no ECN)
                pc["ecn"][int(tc)] = [mode, int(mn), int(mx), kind]
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
            if not MTU_RANGE[0] <= int(m.group(1)) <= MTU_RANGE[1]:
                return _unrecognized(m.group(1))
            # the default (1500) is no line in the running configuration
            return setall("mtu", None if int(m.group(1)) == DEFAULT_MTU else int(m.group(1)))
        if s in {"no mtu", "no mtu force"}:
            return setall("mtu", None)
        first = s.split()[0]
        known = {"dcb", "qos", "traffic-class", "no", "mtu"}
        if first in known:
            return _INCOMPLETE if len(s.split()) <= 2 else _unrecognized(s.split()[-1])
        return _unrecognized(first)

    # ------------------------------------------------------------------ show
    def show(self, s: str) -> str:
        """A show command with its pipes: `| json-print`, `| include RE`, `| exclude RE` (Onyx user
        manual, "CLI Pipeline Operator Commands"; several pipes chain left to right)."""
        head, *pipes = [p.strip() for p in s.split(" | ")]
        as_json = False
        filters: list[tuple[bool, str]] = []
        for p in pipes:
            if p == "json-print":
                as_json = True
                continue
            m = re.fullmatch(r"(include|exclude) (.+)", p)
            if not m:
                return _unrecognized(p.split()[0]) if p else _INCOMPLETE
            filters.append((m.group(1) == "include", m.group(2).strip('"')))
        out = self._show(head, as_json)
        if out.startswith("% "):
            return out
        for keep, pat in filters:
            try:
                rx = re.compile(pat)
            except re.error:
                rx = re.compile(re.escape(pat))
            out = "".join(ln for ln in out.splitlines(keepends=True) if bool(rx.search(ln)) == keep)
        return out

    def _ports(self, spec: str) -> list[str] | str:
        """Ports of an `ethernet 1/1-1/2` argument, or the CLI error text."""
        try:
            ports = [self.sw._canon(p) for p in expand_interface_range(spec)]
        except ValueError:
            return _unrecognized(spec)
        for p in ports:
            if p not in self.sw.cfg["ports"]:
                return f"% Interface {p} does not exist\n"
        return ports

    def _show(self, s: str, as_json: bool) -> str:
        sw = self.sw
        if s == "show running-config":
            return sw.running_config()
        m = re.fullmatch(r"show running-config interface ethernet (\S+)", s)
        if m:
            ports = self._ports(m.group(1))
            return ports if isinstance(ports, str) else sw.running_config_interfaces(ports)
        if s == "show dcb priority-flow-control":
            return sw.show_pfc(as_json)
        m = re.fullmatch(r"show dcb ets interface ethernet (\S+)", s)
        if m:
            ports = self._ports(m.group(1))
            return ports if isinstance(ports, str) else sw.show_ets(ports, as_json)
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
            ports = self._ports(m.group(1))
            return ports if isinstance(ports, str) else sw.show_qos(ports, as_json)
        m = re.fullmatch(r"show interfaces ethernet (\S+) counters", s)
        if m:
            ports = self._ports(m.group(1))
            return ports if isinstance(ports, str) else sw.show_counters(ports, as_json)
        m = re.fullmatch(r"show interfaces ethernet(?: (\S+))?(?: status)?", s)
        if m:
            ports = self._ports(m.group(1)) if m.group(1) and m.group(1) != "status" else sw.ports
            return ports if isinstance(ports, str) else sw.show_interfaces(ports, as_json)
        m = re.fullmatch(r"show traffic pool(?: (\S+))?", s)
        if m:
            return sw.show_pools(m.group(1), as_json)
        m = re.fullmatch(r"show lldp interfaces ethernet(?: (\S+))? remote", s)
        if m:  # the neighbours the cabling as built gives each port (emul/fabricdisc.py)
            ports = self._ports(m.group(1)) if m.group(1) else sw.ports
            return ports if isinstance(ports, str) else sw.show_lldp_remote(ports)
        if s == "show roce":
            return sw.show_roce()
        if s == "show version":
            return sw.show_version(as_json)
        if s == "show module":  # mellanox.onyx fixture onyx_facts_show_module.cfg (onyx_facts "modules")
            return (
                json.dumps({"MGMT": [{"Status": "ready"}]}, indent=4) + "\n"
                if as_json
                else "Module      Status\n---------------------\nMGMT        ready\n"
            )
        if s == "show hosts":
            return sw.show_hosts()
        if s == "show clock":
            return time.strftime("Time: %H:%M:%S\nDate: %Y/%m/%d\nTime zone: UTC (Etc/UTC)\n", time.gmtime())
        words = s.split()
        return _unrecognized(words[-1] if len(words) > 2 else words[1]) if len(words) > 1 else _INCOMPLETE
