#!/usr/bin/python3
"""fabricops-health: the light tier -- is this node's fabric fit for a job, in seconds, with no traffic.

A Slurm ``HealthCheckProgram`` or prolog runs it on each node (docs/operations.md, "Wiring fabricops
into Slurm"). It reads the node's expectations from the fabric_monitor role's collector config
(``/etc/fabricops/collector.json``: ``expected_rate_gbps``, ``nvidia_smi``, and its ``health``
object, below), the live state from sysfs and ``nvidia-smi``, and judges:

- ``hca_port``: every RDMA port with an expected rate (a ``DEV/PORT`` key of ``expected_rate_gbps``,
  or any port of a link layer that has a key) is ACTIVE with physical state LinkUp at exactly that
  rate, as verify judges it (fabricops.verify.hostchecks, "hca_port"); a named port that is absent
  fails; fewer such ports than ``health.ports`` fails; a port of another link layer is not judged;
- ``gpu_count``: ``nvidia-smi --query-gpu=index,pci.bus_id`` lists ``health.gpus`` GPUs;
- ``nvlink``: every GPU has ``health.nvlink_links`` links up in ``nvidia-smi nvlink --status``,
  none ``<inactive>``.

The sysfs walk is the collector's (:func:`fabricops.monitor.collector.read_ports`), every value is
read by the package's one evidence parser (:mod:`fabricops.evidence`) and every command is the probe
table's (:data:`fabricops.evidence.probes.PROBES`). Stdlib-only and Python 3.8: the fabric_monitor
role ships this module with the modules it imports (:mod:`fabricops.hostside.ship`) and installs the
launcher ``/usr/local/sbin/fabricops-health``.

The ``health`` object of the config (every key optional; integers, 0 = not checked)::

    {"ports": 8, "gpus": 8, "nvlink_links": 18, "timeout_s": 2}

Usage: ``fabricops-health [--config FILE] [--node NAME] [--drain] [--resume-own] [-v] [--json]``.

Exit status (the product's table, fabricops.errors / docs/cli.md): 0 healthy (silent); 1 checked
and bad; 4 could not check (a config that cannot be read, sysfs absent, a command that failed or
timed out, output no parser reads); 2 usage. On 1 and 4 one line on stdout names the first failing
check and its component (a failure before an error).

LBNL NHC's conventions (github.com/mej/nhc: ``helpers/node-mark-offline``, ``node-mark-online``,
README "Slurm Integration"), with fabricops' own prefix:

- ``--drain``: a node that is not healthy drains itself, argv only, no shell:
  ``scontrol update NodeName=NODE State=DRAIN Reason=fabricops: CHECK COMPONENT``; a node already
  drained, down or carrying a reason that is not ``fabricops:`` is left alone (NHC keeps an
  operator's note; we never write over one), and a reason that is already the same is not rewritten;
  a config that cannot be read drains nothing (a bad rollout is not a node fault: draining every
  node of a partition for it would be the outage);
- ``--resume-own``: a healthy node is resumed (``State=RESUME``) only when it is drained and its reason
  is ``fabricops: CHECK ...`` with CHECK one of the light tier's own (:data:`OWN_CHECKS`): a drain
  of the intensive tier (``fabricops: ib_write_bw ...``, ``nccl``) stays until a run of that tier
  passes, which this program cannot see;
- the node's state and reason are read first with ``scontrol -o show node NODE`` (each command with
  its own timeout); NODE is ``--node``, else ``$SLURMD_NODENAME`` (set by slurmd for a prolog), else
  the short hostname, and must be a plain host name.

Time budget: the two nvidia-smi reads run at once, each bounded by ``timeout_s`` (default 2 s); the
sysfs walk takes milliseconds; with ``--drain``/``--resume-own`` one ``scontrol show`` and at most one
``scontrol update`` follow, each bounded by ``timeout_s``: at most 3 x ``timeout_s`` (6 s) in all,
against Slurm's 60 s limit for a HealthCheckProgram (slurm.conf(5)). A command stuck in the kernel
(a hung GPU) is killed and left behind, never waited on. bench/light_tier.py measures it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import time

from fabricops.errors import EXIT_FAILED, EXIT_NORUN, EXIT_OK, EXIT_USAGE
from fabricops.evidence.errors import SourceError
from fabricops.evidence.hostfiles import parse_rate, parse_state
from fabricops.evidence.probes import PROBES
from fabricops.evidence.tools import parse_gpu_addresses, parse_nvlink_status
from fabricops.monitor.collector import ConfigError, check_config, read_ports

PROG = "fabricops-health"
CONFIG = "/etc/fabricops/collector.json"
#: the reason prefix fabricops owns in Slurm (``fabricops act`` drains with the same one)
REASON_PREFIX = "fabricops:"
#: the checks of this program: the drains ``--resume-own`` may lift (verify's names for the same checks)
OWN_CHECKS = ("hca_port", "gpu_count", "nvlink")
#: statuses, as fabricops.result names them (a unit test keeps them equal)
PASS, FAIL, ERROR = "pass", "fail", "error"
TIMEOUT_S = 2.0
MAX_TIMEOUT_S = 30.0
#: what ``scontrol -o show node`` and ``update`` may carry: a plain host name ...
NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: ... and a reason of our own making, no quote, no newline, no shell character
REASON_RE = re.compile(r"^fabricops: [a-z_]{1,32}(?: [A-Za-z0-9_./:@+-]{1,64})?$")
_COMPONENT_RE = re.compile(r"^[A-Za-z0-9_./:@+-]{1,64}$")
_HEALTH_KEYS = ("ports", "gpus", "nvlink_links")


class Finding:
    """One verdict of the light tier: a check about one component (the fields of fabricops.result.Result
    it fills: category "health", check, host, device, status, message, measured, threshold)."""

    __slots__ = ("check", "device", "measured", "message", "status", "threshold")

    def __init__(self, check: str, device: str | None, status: str, message: str,
                 measured: object = None, threshold: object = None) -> None:
        self.check, self.device, self.status, self.message = check, device, status, message
        self.measured, self.threshold = measured, threshold

    def to_data(self, host: str) -> dict:
        return {"category": "health", "check": self.check, "host": host, "device": self.device,
                "status": self.status, "message": self.message, "measured": self.measured,
                "threshold": self.threshold}


# --- configuration ---------------------------------------------------------------------------

def load_config(path: str) -> dict:
    """The collector config with its ``health`` object checked; ConfigError (one line) otherwise.

    Unlike the collector (which exports what it finds without a config), a missing file is an error:
    without expectations there is nothing to judge."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        raise ConfigError("no such file (is the fabric_monitor role applied?)") from None
    except OSError as exc:
        raise ConfigError(f"cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text") from None
    except ValueError as exc:
        raise ConfigError(f"not JSON ({exc})") from None
    config = check_config(raw)  # the collector's own checks of expected_rate_gbps
    health = config.get("health")
    health = {} if health is None else health
    if not isinstance(health, dict):
        raise ConfigError("health: expected an object (ports, gpus, nvlink_links, timeout_s)")
    checked: dict = {}
    for key in _HEALTH_KEYS:
        value = health.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 4096:
            raise ConfigError(f"health.{key}: {value!r} is not a count (an integer from 0 to 4096)")
        checked[key] = value
    timeout = health.get("timeout_s", TIMEOUT_S)
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
            or not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S)):
        raise ConfigError(f"health.timeout_s: {timeout!r} is not a number of seconds above 0, at most "
                          f"{MAX_TIMEOUT_S:g}")
    checked["timeout_s"] = float(timeout)
    smi = config.get("nvidia_smi", "nvidia-smi")
    if not isinstance(smi, str) or not smi:
        raise ConfigError(f"nvidia_smi: {smi!r} is not a command")
    return dict(config, health=checked, nvidia_smi=smi)


# --- commands --------------------------------------------------------------------------------

class Outcome:
    """What one command gave: ``rc`` None when it did not finish (timed out or could not start)."""

    __slots__ = ("err", "out", "rc", "why")

    def __init__(self, rc: int | None, out: str = "", err: str = "", why: str = "") -> None:
        self.rc, self.out, self.err, self.why = rc, out, err, why

    def problem(self, name: str) -> str | None:
        """One line saying why the output is no evidence, or None when the command succeeded."""
        if self.rc is None:
            return f"{name} {self.why}"
        if self.rc != 0:
            first = (self.err.strip() or self.out.strip()).splitlines()[:1]
            return f"{name} exited {self.rc}" + (f": {first[0][:120]}" if first else "")
        return None


def run_commands(commands: dict[str, list[str]], timeout: float) -> dict[str, Outcome]:
    """Start every command at once (no shell), each bounded by ``timeout`` seconds from the start.

    A command still running at its deadline is killed; one that does not die within half a second
    (stuck in the kernel on a hung device) is left behind and never waited on again."""
    procs: dict[str, subprocess.Popen | Outcome] = {}
    env = dict(os.environ, LC_ALL="C")
    for name, argv in commands.items():
        try:
            procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True, env=env)
        except OSError as exc:
            procs[name] = Outcome(None, why=f"could not start ({exc.strerror or exc})")
    deadline = time.monotonic() + timeout
    out: dict[str, Outcome] = {}
    for name, proc in procs.items():
        if isinstance(proc, Outcome):
            out[name] = proc
            continue
        try:
            stdout, stderr = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            out[name] = Outcome(proc.returncode, stdout, stderr)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):  # uninterruptible: abandoned
                proc.communicate(timeout=0.5)
            out[name] = Outcome(None, why=f"timed out after {timeout:g} s")
    return out


def run_one(argv: list[str], timeout: float) -> Outcome:
    return run_commands({"cmd": argv}, timeout)["cmd"]


# --- checks ----------------------------------------------------------------------------------

def _gbps(bits: float) -> str:
    return f"{bits / 1e9:g}"


def check_ports(config: dict, sysfs: str) -> list[Finding]:
    """``hca_port`` findings: the expected ports' state and rate (see the module's docstring)."""
    expected = config["expected_rate_gbps"]
    if not expected:
        return []
    named = {k: v for k, v in expected.items() if "/" in k}
    layers = {k: v for k, v in expected.items() if "/" not in k}
    base = os.path.join(sysfs, "class", "infiniband")
    if not os.path.isdir(base):
        return [Finding("hca_port", "sysfs", ERROR, f"{base} is absent (no RDMA driver loaded?)")]
    found: list[Finding] = []
    seen = set()
    for p in sorted(read_ports(sysfs), key=_port_order):
        key = f"{p['device']}/{p['port']}"
        want = named.get(key, layers.get(p["link_layer"]))
        if want is None:
            continue  # not the compute fabric (a port of a link layer without an expected rate)
        seen.add(key)
        found.append(_judge_port(key, p, float(want)))
    for key in sorted(set(named) - seen):
        found.append(Finding("hca_port", key, FAIL, f"{key}: not found in {base} (HCA missing or not "
                             "seen by its driver)", measured="absent", threshold="present"))
    need = config["health"]["ports"]
    if need and len(seen) < need:
        found.append(Finding("hca_port", None, FAIL, f"{len(seen)} fabric ports found, expected {need}",
                             measured=len(seen), threshold=need))
    return found


def _port_order(p: dict) -> tuple:
    return p["device"], int(p["port"]) if p["port"].isdigit() else 0


def _judge_port(key: str, p: dict, want: float) -> Finding:
    try:
        _n, state = parse_state(p["state"])
        _n, phys = parse_state(p["phys_state"])
    except SourceError as exc:
        return Finding("hca_port", key, ERROR, f"{key}: {exc}")
    if state != "ACTIVE" or phys != "LinkUp":
        return Finding("hca_port", key, FAIL, f"{key}: state {state}, physical state {phys} (expected "
                       "ACTIVE/LinkUp)", measured=f"{state}/{phys}", threshold="ACTIVE/LinkUp")
    try:
        bits, lanes, speed = parse_rate(p["rate"])
    except SourceError as exc:
        return Finding("hca_port", key, ERROR, f"{key}: {exc}")
    got = bits / 1e9
    shape = f"{lanes}X {speed}".strip()
    if got != want:  # verify's rule: the rate is the profile's, exactly (a faster port is another cable)
        return Finding("hca_port", key, FAIL, f"{key}: rate {_gbps(bits)} Gb/s ({shape}), expected "
                       f"{want:g} Gb/s", measured=got, threshold=want)
    return Finding("hca_port", key, PASS, f"{key}: ACTIVE/LinkUp, {_gbps(bits)} Gb/s ({shape})",
                   measured=got, threshold=want)


def gpu_commands(config: dict) -> dict[str, list[str]]:
    """The nvidia-smi reads the config asks for (the probe table's argv, its nvidia-smi command)."""
    health, smi = config["health"], config["nvidia_smi"]
    cmds = {}
    if health["gpus"] or health["nvlink_links"]:
        cmds["gpu_pci"] = [smi, *PROBES["gpu_pci"].argv_for()[1:]]
    if health["nvlink_links"]:
        cmds["nvlink_status"] = [smi, *PROBES["nvlink_status"].argv_for()[1:]]
    return cmds


def check_gpus(config: dict, outcomes: dict[str, Outcome]) -> list[Finding]:
    """``gpu_count`` and ``nvlink`` findings from the nvidia-smi reads (:func:`gpu_commands`)."""
    health = config["health"]
    if "gpu_pci" not in outcomes:
        return []
    check = "gpu_count" if health["gpus"] else "nvlink"
    res = outcomes["gpu_pci"]
    why = res.problem("nvidia-smi --query-gpu")
    try:
        if why:
            raise SourceError(why)
        gpus = parse_gpu_addresses(res.out)
    except SourceError as exc:
        return [Finding(check, "nvidia-smi", ERROR, str(exc))]
    found = []
    if health["gpus"]:
        n, want = len(gpus), health["gpus"]
        found.append(Finding("gpu_count", None, PASS if n == want else FAIL,
                             f"{n} GPUs" + ("" if n == want else f", expected {want}"),
                             measured=n, threshold=want))
    if health["nvlink_links"]:
        found.extend(_check_nvlink(sorted(gpus, key=lambda g: int(g[3:])), outcomes["nvlink_status"],
                                   health["nvlink_links"]))
    return found


def _check_nvlink(gpus: list[str], res: Outcome, want: int) -> list[Finding]:
    why = res.problem("nvidia-smi nvlink --status")
    try:
        if why:
            raise SourceError(why)
        links = parse_nvlink_status(res.out)
    except SourceError as exc:
        return [Finding("nvlink", "nvidia-smi", ERROR, str(exc))]
    by_gpu: dict[str, list[dict]] = {}
    for link in links:
        by_gpu.setdefault(f"GPU{link['gpu']}", []).append(link)
    found = []
    # every GPU nvidia-smi lists, and any the NVLink read names besides (a GPU whose links are all
    # inactive prints no Link lines at all: it shows only here, as 0 links)
    for gpu in gpus + sorted(set(by_gpu) - set(gpus), key=lambda g: int(g[3:])):
        mine = by_gpu.get(gpu, [])
        up = sum(1 for link in mine if link["up"])
        down = [str(link["link"]) for link in mine if not link["up"]]
        problems = []
        if down:
            problems.append(f"link(s) {', '.join(down)} inactive")
        if up != want:
            problems.append(f"{up} of {want} links active")
        found.append(Finding("nvlink", gpu, FAIL if problems else PASS,
                             f"{gpu}: " + ("; ".join(problems) if problems else f"{up} links active"),
                             measured=up, threshold=want))
    return found


def judge(config: dict, sysfs: str = "/sys") -> list[Finding]:
    """Every finding, in the order they are reported: ports, GPU count, NVLink."""
    found = check_ports(config, sysfs)
    cmds = gpu_commands(config)
    outcomes = run_commands(cmds, config["health"]["timeout_s"]) if cmds else {}
    found += check_gpus(config, outcomes)
    if not found:
        found.append(Finding("config", None, ERROR, "nothing to check: no expected_rate_gbps and no "
                             "health.gpus or health.nvlink_links in the config"))
    return found


def first_bad(found: list[Finding]) -> Finding | None:
    """The finding to report: the first failure, else the first error, else None (healthy)."""
    return next((f for f in found if f.status == FAIL), None) or next(
        (f for f in found if f.status == ERROR), None)


def exit_status(found: list[Finding]) -> int:
    if any(f.status == FAIL for f in found):
        return EXIT_FAILED
    if any(f.status == ERROR for f in found):
        return EXIT_NORUN
    return EXIT_OK


def line(bad: Finding, found: list[Finding]) -> str:
    """The one line naming the first failing check and its component (and how many more there are):
    ``fabricops-health: hca_port mlx5_1/1: state DOWN, ...``."""
    message = bad.message
    if bad.device and message.startswith(f"{bad.device}: "):
        message = message[len(bad.device) + 2:]
    text = f"{bad.check} {bad.device}: {message}" if bad.device else f"{bad.check}: {message}"
    if bad.status == ERROR:
        text = "could not check: " + text
    more = sum(1 for f in found if f.status in (FAIL, ERROR)) - 1
    return f"{PROG}: {text}" + (f" (+{more} more: -v lists them)" if more > 0 else "")


def reason(bad: Finding, node: str) -> str:
    """``fabricops: CHECK COMPONENT``, from values that pass :data:`REASON_RE` (else the check alone)."""
    component = bad.device or node
    text = f"{REASON_PREFIX} {bad.check} {component}"
    if _COMPONENT_RE.match(component) and REASON_RE.match(text):
        return text
    return f"{REASON_PREFIX} {bad.check}"


# --- Slurm -----------------------------------------------------------------------------------

_STATE_RE = re.compile(r"(?:^| )State=(\S+)")
_REASON_RE = re.compile(r"(?:^| )Reason=(.*?)(?: \[[^\]@]*@[^\]]*\])?(?= (?:Comment|Extra|InstanceId|"
                        r"InstanceType|ReservationName)=|$)")


def parse_node(text: str) -> tuple[list[str], str]:
    """``scontrol -o show node NODE`` -> (state words, reason without its ``[user@time]``).

    ``State=IDLE+DRAIN`` -> ["IDLE", "DRAIN"]; no ``Reason=`` -> "". Raises SourceError when the
    line has no ``NodeName=``/``State=``."""
    text = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    m = _STATE_RE.search(text)
    if not text.startswith("NodeName=") or not m:
        raise SourceError("not scontrol -o show node output (no NodeName=/State=)")
    r = _REASON_RE.search(text)
    states = [w.rstrip("*~#!%$@^-") for w in m.group(1).upper().split("+")]
    return states, (r.group(1).strip() if r else "")


def _drained(states: list[str]) -> bool:
    return bool({"DRAIN", "DRAINING", "DRAINED"} & set(states))


def _own(why: str) -> bool:
    return why.startswith(REASON_PREFIX + " ") or why == REASON_PREFIX


def decide(states: list[str], why: str, bad: Finding | None, want_reason: str | None,
           drain: bool, resume: bool) -> tuple[str, str]:
    """(``"drain"`` | ``"resume"`` | ``""``, why) for a node in ``states`` with reason ``why``."""
    if bad is not None:
        if not drain:
            return "", ""
        if want_reason is None:
            return "", "not drained: the config is unreadable (a rollout fault, not this node's)"
        if why and not _own(why):
            return "", f"left alone: its reason is someone else's ({why})"
        if {"DOWN", "FAIL", "FAILING", "MAINT", "REBOOT_ISSUED", "REBOOT_REQUESTED"} & set(states):
            return "", f"left alone: the node is {'+'.join(states)}"
        if _drained(states) and why == want_reason:
            return "", f"already drained: {why}"
        return "drain", want_reason
    if not resume:
        return "", ""
    if not _drained(states):
        return "", ""
    if not _own(why):
        return "", f"not resumed: drained by someone else ({why or 'no reason'})"
    check = why[len(REASON_PREFIX):].split()[:1]
    if not check or check[0] not in OWN_CHECKS:
        return "", f"not resumed: {why} is not a light-tier check (the intensive tier's run lifts it)"
    return "resume", why


def act(node: str, bad: Finding | None, want_reason: str | None, drain: bool, resume: bool,
        scontrol: str, timeout: float) -> list[str]:
    """Read the node's state, then drain or resume it when :func:`decide` says so. Returns the notes
    (for stderr); never raises."""
    shown = run_one([scontrol, "-o", "show", "node", node], timeout)
    problem = shown.problem("scontrol show node")
    try:
        if problem:
            raise SourceError(problem)
        states, why = parse_node(shown.out)
    except SourceError as exc:
        return [f"{PROG}: {node}: could not read the node's state, nothing done: {exc}"]
    what, note = decide(states, why, bad, want_reason, drain, resume)
    if what == "drain":
        argv = [scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={want_reason}"]
    elif what == "resume":
        argv = [scontrol, "update", f"NodeName={node}", "State=RESUME"]
    else:
        return [f"{PROG}: {node}: {note}"] if note else []
    done = run_one(argv, timeout)
    problem = done.problem("scontrol update")
    if problem:
        return [f"{PROG}: {node}: {what} failed: {problem}"]
    return [f"{PROG}: {node}: {'drained' if what == 'drain' else 'resumed'} ({note})"]


def node_name(given: str | None) -> str:
    """``--node`` as given (an empty one is refused later), else $SLURMD_NODENAME, else the short hostname."""
    if given is not None:
        return given
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


# --- main ------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=CONFIG,
                        help=f"the collector config with its health object (default {CONFIG})")
    parser.add_argument("--node", help="Slurm node name (default $SLURMD_NODENAME, else the short hostname)")
    parser.add_argument("--drain", action="store_true", help="drain this node in Slurm when not healthy")
    parser.add_argument("--resume-own", action="store_true",
                        help="resume this node when healthy and drained by the light tier (fabricops: ...)")
    parser.add_argument("--scontrol", default="scontrol", help="the scontrol command (default on PATH)")
    parser.add_argument("--sysfs", default="/sys", help="sysfs root (tests)")
    parser.add_argument("-v", "--verbose", action="store_true", help="every finding on stderr")
    parser.add_argument("--json", action="store_true", help="every finding as JSON on stdout")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    acting = args.drain or args.resume_own
    node = node_name(args.node)
    if acting and not NODE_RE.match(node):
        print(f"{PROG}: node name {node!r} is not a plain host name (letters, digits, '.', '_', '-'); "
              "give --node", file=sys.stderr)
        return EXIT_USAGE
    timeout = TIMEOUT_S
    try:
        config = load_config(args.config)
        timeout = config["health"]["timeout_s"]
        found = judge(config, args.sysfs)
        own_reason = True
    except ConfigError as exc:
        found = [Finding("config", args.config, ERROR, f"{args.config}: {exc}")]
        own_reason = False  # a rollout fault, not this node's: nothing is drained for it
    bad = first_bad(found)
    status = exit_status(found)
    if args.verbose:
        for f in found:
            print(f"{PROG}: {f.status} {f.check}: {f.message}", file=sys.stderr)
    if args.json:
        print(json.dumps([f.to_data(node) for f in found], indent=1))
    elif bad is not None:
        print(line(bad, found))
    if (args.drain and bad is not None) or (args.resume_own and bad is None):
        want = reason(bad, node) if bad is not None and own_reason else None
        for note in act(node, bad, want, args.drain, args.resume_own, args.scontrol, timeout):
            print(note, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
