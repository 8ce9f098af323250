"""Shared switch state plumbing: the normalised fabric file and the lab's fault file."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "FaultWatch", "atomic_write_json", "merge_port_faults", "port_entry", "sync_faults", "trained_links",
    "write_fabric_file",
]


def atomic_write_json(path: str | Path, data: Any) -> None:
    """Write JSON next to the target then rename over it (readers never see half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def port_entry(trust: str, pfc: list[int], ecn: dict[int, tuple[int, int]], link_up: bool) -> dict[str, Any]:
    """One port in docs/lab-device-contract.md "switches/SWITCH.json" form."""
    return {
        "trust": trust,
        "pfc": [1 if p in pfc else 0 for p in range(8)],
        "ecn": {
            str(tc): {"enabled": True, "min_kb": mn, "max_kb": mx} for tc, (mn, mx) in sorted(ecn.items())
        },
        "link": "up" if link_up else "down",
    }


def write_fabric_file(
    path: str | Path | None, name: str, os_name: str, ports: dict[str, dict[str, Any]]
) -> None:
    if path:
        atomic_write_json(path, {"name": name, "os": os_name, "ports": ports})


class FaultWatch:
    """Reads STATE_DIR/faults.json at each command (the lab writes it).

    ``{"drop_after_commands": N}`` arms a counter when the value (or the file) changes; after N more
    configuration commands the session is dropped. ``{"ports_down": ["Eth1/3"]}`` marks links down.

    ``{"rules": [{"match": REGEX, "action": A, "nth": N, "commands": [...]}]}`` (emulator-only fault
    injection; the product never sees it): the Nth line (default 1st) that REGEX matches (``re.search``)
    triggers A once per arming:

    - ``drop``: the session is cut before the line runs (the command is lost);
    - ``drop_after``: the line runs, then the session is cut before the answer (the answer is lost);
    - ``reject``: the switch answers the OS's error for the line and does not run it;
    - ``freeze`` / ``freeze_after``: the session stops answering (no output, no prompt) before / after
      the line runs; the connection stays up, so the client waits for a prompt that never comes;
    - ``foreign``: after the line runs, ``commands`` run in another session of the switch (a second
      operator changing the switch in between).
    """

    ACTIONS = ("drop", "drop_after", "reject", "freeze", "freeze_after", "foreign")

    def __init__(self, state_dir: str | Path):
        self.path = Path(state_dir) / "faults.json"
        self._armed_sig: tuple[float, int] | None = None
        self._remaining: int | None = None
        self._rules_sig: tuple[float, str] | None = None
        self._rule_hits: list[int] = []
        self.faults: dict[str, Any] = {}

    def refresh(self) -> dict[str, Any]:
        try:
            st = self.path.stat()
            self.faults = json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            self.faults, st = {}, None
        n = self.faults.get("drop_after_commands")
        if isinstance(n, int) and st is not None:
            sig = (st.st_mtime, n)
            if sig != self._armed_sig:
                self._armed_sig, self._remaining = sig, n
        else:
            self._armed_sig, self._remaining = None, None
        rules = self.faults.get("rules") or []
        sig = (st.st_mtime, json.dumps(rules, sort_keys=True)) if st is not None and rules else None
        if sig != self._rules_sig:
            self._rules_sig, self._rule_hits = sig, [0] * len(rules)
        return self.faults

    def match(self, line: str) -> dict[str, Any] | None:
        """The rule this line triggers (each rule fires once per arming), or None."""
        rules = self.faults.get("rules") or []
        for n, rule in enumerate(rules):
            if n >= len(self._rule_hits) or self._rule_hits[n] < 0:
                continue
            if rule.get("action") not in self.ACTIONS or not re.search(str(rule.get("match", "")), line):
                continue
            self._rule_hits[n] += 1
            if self._rule_hits[n] >= int(rule.get("nth", 1)):
                self._rule_hits[n] = -1  # fired
                return rule
        return None

    def refresh_changed_ports(self) -> bool:
        """Refresh; True when a port fault changed (downed ports, ``port_faults``, ``pfc_off``): the
        switch must re-apply them and rewrite the fabric file."""
        before = (self.ports_down(), self.port_faults(), self.pfc_off())
        self.refresh()
        return (self.ports_down(), self.port_faults(), self.pfc_off()) != before

    def ports_down(self) -> set[str]:
        return {str(p) for p in self.faults.get("ports_down", []) or []}

    def port_faults(self) -> dict[str, dict[str, Any]]:
        """``{"port_faults": {PORT: {"speed", "width", "gbps", "flaps", "symbol_errors"}}}``: what the
        port's link trained at and how often it flapped (``fabricops lab fault SWITCH port-width|
        port-speed|flapping``); merged into the port's entry of the fabric file (the physics reads it)."""
        pf = self.faults.get("port_faults") or {}
        return {str(p): dict(v) for p, v in pf.items() if isinstance(v, dict)} if isinstance(pf, dict) else {}

    def pfc_off(self) -> set[str]:
        """``{"pfc_off": [PORT]}``: ports whose PFC an operator turned off (``fabricops lab fault SWITCH
        pfc-off PORT``); the switch changes its running configuration for them, and restores the
        port's previous configuration when the port leaves the list."""
        return {str(p) for p in self.faults.get("pfc_off", []) or []}

    def count_config_command(self) -> bool:
        """Count one configuration command; True when the session must now be dropped."""
        if self._remaining is None:
            return False
        self._remaining -= 1
        if self._remaining <= 0:
            self._remaining = None  # fires once per arming
            return True
        return False


def merge_port_faults(ports: dict[str, dict[str, Any]], faults: FaultWatch) -> dict[str, dict[str, Any]]:
    """The fabric file's port entries with each port's ``port_faults`` overlay (speed, width, flaps)."""
    for port, extra in faults.port_faults().items():
        if port in ports:
            ports[port].update(extra)
    return ports


def sync_faults(switch: Any) -> bool:
    """Re-read the lab's faults.json and, when a port fault changed, rewrite the switch's fabric file
    (switchd's ticker calls this, so a fault reaches the physics without a CLI session)."""
    if switch.faults.refresh_changed_ports():
        switch.write_fabric()
        return True
    return False


def run_line(
    session: Any,
    line: str,
    rule: dict[str, Any] | None,
    dispatch: Callable[[str], tuple[str, bool]],
    reject: Callable[[str], str],
    foreign: Callable[[list[str]], None],
) -> tuple[str, bool]:
    """Run LINE through DISPATCH under the fault RULE it triggered (FaultWatch.match), for both OSes.

    SESSION has ``closed`` and ``frozen``; REJECT gives the OS's own error text for a refused line;
    FOREIGN runs another operator's commands between ours. Returns (output, session dropped)."""
    act = rule["action"] if rule else ""
    if act == "drop":
        session.closed = True
        return "", True
    if act == "freeze":
        session.frozen = True
        return "", False
    if act == "reject":
        return reject(line), False
    out, drop = dispatch(line)
    if act == "drop_after":
        session.closed = True
        return "", True
    if act == "freeze_after":
        session.frozen = True
        return "", False
    if act == "foreign":
        foreign([str(c) for c in rule.get("commands") or []])
    return out, drop


def _json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def trained_links(
    fabric_file: str | Path | None, switch: str, ports: list[str], faults: FaultWatch
) -> dict[str, dict[str, Any]]:
    """What each of ``ports`` trained at and what the lab's port faults left in its counters:
    ``{port: {"gbps", "width", "flaps", "symbol_errors"}}`` (``gbps`` None for a port nothing is
    cabled to).

    A link trains at what both ends agree on: a port fault (``port_faults``: ``fabricops lab fault
    SWITCH port-width|port-speed|flapping``, which the lab writes at both ends of an inter-switch
    link) gives its rate; otherwise the cabling does -- an inter-switch link's ``gbps`` in
    FABRIC_DIR/cabling.json, a host cable's the host port's ``rate_gbps`` in the host's
    hw/hardware.json (so a host port fault shows on the switch side of its cable too, as on a real
    link). This is what the switch's own port views report (Onyx "Actual speed", NVUE link
    ``speed``)."""
    out: dict[str, dict[str, Any]] = {p: {"gbps": None, "width": None, "flaps": 0, "symbol_errors": 0}
                                      for p in ports}
    if fabric_file:
        fabric_dir = Path(fabric_file).parent.parent
        cabling = _json_file(fabric_dir / "cabling.json") or {}
        for isl in cabling.get("isls") or []:
            if not isinstance(isl, dict):
                continue
            ends = ((isl.get("switch_a"), isl.get("port_a")), (isl.get("switch_b"), isl.get("port_b")))
            for sw, port in ends:
                if sw == switch and port in out and isl.get("gbps"):
                    out[port].update(gbps=float(isl["gbps"]), width=isl.get("width"))
        hw_cache: dict[str, Any] = {}
        for ln in cabling.get("links") or []:
            if not isinstance(ln, dict) or ln.get("switch") != switch or ln.get("switch_port") not in out:
                continue
            host = str(ln.get("host"))
            if host not in hw_cache:  # STATE_DIR/hosts/HOST/hw/hardware.json (lab/paths.py host_dir)
                hw_cache[host] = _json_file(fabric_dir.parent / "hosts" / host / "hw" / "hardware.json") or {}
            for hca in hw_cache[host].get("hcas") or []:
                for hp in hca.get("ports") or []:
                    if hp.get("netdev") == ln.get("netdev") and hp.get("rate_gbps"):
                        out[ln["switch_port"]].update(gbps=float(hp["rate_gbps"]), width=hp.get("width"))
    for port, fault in faults.port_faults().items():
        if port not in out:
            continue
        if fault.get("gbps"):
            out[port]["gbps"] = float(fault["gbps"])
        if fault.get("width"):
            out[port]["width"] = fault["width"]
        out[port]["flaps"] = int(fault.get("flaps") or 0)
        out[port]["symbol_errors"] = int(fault.get("symbol_errors") or 0)
    return out
