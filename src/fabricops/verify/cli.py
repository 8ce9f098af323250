"""``fabricops verify``: host, GPU and pairwise checks against an Ansible inventory.

Exit status (docs/cli.md): 0 every check passed on every host; 1 a check failed on a host that was
reached (a check that could not run there counts as failed: fails closed); 4 could not run: the
inventory is missing, broken or matches no host, the counters baseline is missing, every host was
unreachable, or some host was unreachable and nothing failed elsewhere (it is listed as not
checked), or no verdict could be reached: a switch could not be read, or a link of the fabric was
neither measured by the tests nor read healthy on its switch (``link_proof``; ``--accept-unproven``
makes those skips); 5 the counters baseline is not a verify JSON report or holds a value that is not a
counter reading (a non-negative integer of at most 64 bits); 2 usage error (bad flag, unknown
profile).
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabricops import cliopts
from fabricops.errors import EXIT_NORUN, BadInput, CouldNotRun, FabricopsError, UsageError
from fabricops.verify.engine import ONLY, SWITCHES, Options
from fabricops.verify.hostchecks import GPU_CHECKS, HOST_CHECKS
from fabricops.verify.slurm import LAUNCHERS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "verify",
        help="prove the fabric works: hosts, GPUs, and every cable of every rail",
        description="Run the host and GPU checks on every host of the inventory, then ib_write_bw and "
        "ib_write_lat in parallel rounds that cross every cable of the fabric (host links and ISLs, "
        "each direction; --all-pairs: every pair of hosts per rail), naming a bad cable. "
        "Exit 0 only when every "
        "check passed on every host and every link was proven; 1 a check failed; 4 could not run or no "
        "verdict (no hosts, unreachable, unreadable inventory or baseline, a switch not read, a link "
        "unproven); 5 the baseline is not a verify report; 2 usage error (docs/cli.md).",
    )
    cliopts.add_common(p, limit_default="gpu_hosts",
                       limit_help="host pattern or group to verify (default: gpu_hosts)")
    p.add_argument("--profile", help="hardware profile (default: the inventory's fabricops_hardware_profile)")
    p.add_argument("--only", choices=ONLY,
                   help="run only the host, GPU, pairwise, cabling or multi-node NCCL checks")
    p.add_argument(
        "--nccl",
        action="store_true",
        help="also run the multi-node NCCL phase (nccl-tests across the hosts; also "
        "fabricops_verify_nccl: true in the inventory)",
    )
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=[*HOST_CHECKS, *GPU_CHECKS, "cabling", "rail_consistency", SWITCHES],
        help="leave out a check (repeatable); also fabricops_verify_skip in the inventory",
    )
    p.add_argument("--ofed-version", help="pinned MLNX_OFED version (default: from the inventory)")
    p.add_argument(
        "--counters-baseline",
        type=Path,
        metavar="REPORT",
        help="judge error counters by their increase since this earlier --json report",
    )
    p.add_argument("--serial", action="store_true", help="pairwise tests one at a time (for comparison)")
    p.add_argument("--no-rerun", action="store_true", help="do not re-run failed pairs alone")
    p.add_argument(
        "--all-pairs",
        action="store_true",
        help="test every pair of hosts per rail (N-1 rounds) instead of the coverage schedule, which "
        "proves every cable of the fabric in the fewest rounds when the inventory describes it",
    )
    p.add_argument(
        "--accept-unproven",
        action="store_true",
        help="a link neither measured by the tests nor read healthy on its switch is a skip saying so "
        "(knowingly accepted), not an error (exit 4, no verdict)",
    )
    p.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        help="how the pair rounds and the NCCL phase run: ssh (from this machine to every host) or slurm "
        "(job steps of one allocation of the hosts, made on the inventory's slurm_controller host); the "
        "host and GPU checks stay on SSH (default: fabricops_verify_launcher in the inventory, else ssh)",
    )
    p.add_argument(
        "--slurm-local",
        action="store_true",
        help="with --launcher slurm: run salloc/srun/scancel on this machine (a Slurm login node) instead "
        "of on the slurm_controller host over SSH",
    )
    p.add_argument(
        "--valid-for",
        type=duration,
        metavar="DURATION",
        help="how long the report's verdicts may drive an action (fabricops act), from the start of the "
        "run: 90m, 2h, 3600s or seconds; 1 minute to 7 days (default 1h)",
    )
    p.set_defaults(func=cmd_verify)


_DURATION = re.compile(r"(\d{1,7})([smhd]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> int:
    """``--valid-for``: 90m, 2h, 3600s, 1d or plain seconds, from 60 s to 7 days."""
    import argparse

    m = _DURATION.fullmatch(text.strip())
    seconds = int(m.group(1)) * _UNIT_S[m.group(2)] if m else -1
    if not 60 <= seconds <= 7 * 86400:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration from 1 minute to 7 days (90m, 2h, 3600s)"
        )
    return seconds


def check_profile(name: str | None) -> None:
    """An unknown --profile is a usage error, before any host is contacted."""
    if not name:
        return
    from fabricops.model.profiles import ProfileError, load_profile

    try:
        load_profile(name)
    except ProfileError as exc:
        raise UsageError(f"--profile {name}: {exc}") from None


def load_baseline(path: Path) -> dict[str, Any]:
    import json

    from fabricops.verify.engine import baseline_from_report

    # a regular file of at most MAX_INPUT_BYTES: a FIFO would hang, /dev/zero would never end
    raw = cliopts.read_input(path, f"--counters-baseline {path}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"--counters-baseline {path}: not a verify --json report (not UTF-8)") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"--counters-baseline {path}: not a fabricops verify --json report ({exc})") from None
    except RecursionError:
        raise BadInput(f"--counters-baseline {path}: not a fabricops verify --json report "
                       "(nested too deeply to read)") from None
    from fabricops.verify.report import SCHEMA

    if not (isinstance(data, dict) and data.get("schema") == SCHEMA and isinstance(data.get("results"), list)):  # noqa: E501
        raise BadInput(f"--counters-baseline {path}: not a fabricops verify --json report "
                       f"(expected schema {SCHEMA} with results)")
    try:
        return baseline_from_report(data)
    except BadInput as exc:  # a value that is not a counter reading (NaN, 1e18, -1, "x", true)
        raise BadInput(f"--counters-baseline {path}: {exc}") from None
    except (AttributeError, TypeError, KeyError, RecursionError) as exc:
        raise BadInput(f"--counters-baseline {path}: malformed results ({type(exc).__name__})") from None


class Reach:
    """Wraps ``run``: which hosts answered over SSH at least once (rc 255 with no output is SSH's
    own failure, as the transport reports it)."""

    def __init__(self, run):
        self._run = run
        self._lock = threading.Lock()
        self.reached: set[str] = set()
        self.unreached: dict[str, str] = {}

    def __call__(self, host: str, command: str, timeout: float = 60) -> Mapping[str, Any]:
        res = self._run(host, command, timeout)
        if res.get("rc") == 255 and not (res.get("stdout") or "").strip():
            # testinfra's exception text is a repr of its CommandResult: keep ssh's own words
            m = re.search(r"_stderr=b'((?:[^'\\]|\\.)*)'", str(res.get("stderr") or ""))
            if m:
                why = m.group(1).replace("\\r", "").replace("\\n", " ").strip()
                res = {**res, "stderr": f"{host} unreachable over SSH: {why}"}
        with self._lock:
            if res.get("rc") == 255 and not (res.get("stdout") or "").strip():
                self.unreached.setdefault(host, " ".join(str(res.get("stderr") or "no answer").split())[:200])
            else:
                self.reached.add(host)
        return res

    def batch(self, host: str, commands: Mapping[str, str], timeout: float = 60) -> dict[str, dict]:
        """One session for ``commands`` (fabricops.evidence.collect); the host was reached when any
        key got an answer of its own, unreached when every key got the transport's failure."""
        from fabricops.evidence.collect import batch_of

        run_batch = batch_of(self._run)
        if run_batch is None:
            return {key: dict(self(host, cmd, timeout)) for key, cmd in commands.items()}
        results = {key: dict(res) for key, res in run_batch(host, commands, timeout).items()}
        failed = [r for r in results.values() if r.get("rc") == 255 and not (r.get("stdout") or "").strip()]
        with self._lock:
            if results and len(failed) == len(results):
                why = " ".join(str(failed[0].get("stderr") or "no answer").split())[:200]
                self.unreached.setdefault(host, why)
            elif results:
                self.reached.add(host)
        return results

    def not_checked(self, hosts) -> dict[str, str]:
        return {h: f"unreachable: {self.unreached[h]}" for h in hosts
                if h in self.unreached and h not in self.reached}


def slurm_steps(stack: contextlib.ExitStack, fabric, hostvars, args, say, warn):
    """The Slurm launcher: one allocation of the hosts under test, held until ``stack`` closes (then
    cancelled; also on Ctrl-C, SIGTERM, SIGHUP), over one shared SSH connection to the controller."""
    from fabricops.verify import slurm

    first = hostvars.get(fabric.hosts[0]) or {}
    settings = slurm.settings_of(first)
    nodes = slurm.node_names(fabric.hosts, hostvars)
    exec_, where, _ = slurm.controller_of(fabric, args.slurm_local)
    say(f"slurm: allocating {', '.join(nodes.values())} on {where}")
    alloc = stack.enter_context(slurm.held(slurm.allocate(exec_, where, nodes, settings), warn))
    say(f"slurm: job {alloc.job}: pair rounds and NCCL as its job steps (host and GPU checks over SSH)")
    return alloc


def cmd_verify(args) -> int:
    from fabricops.verify import report
    from fabricops.verify.engine import exit_status, verify
    from fabricops.verify.switchports import no_verdict
    from fabricops.verify.transport import Fabric

    cliopts.check_outputs(args)
    parsed = cliopts.read_inventory(args.inventory)
    check_profile(args.profile)
    extra = cliopts.extra_vars(args.extra_vars)
    out = cliopts.Progress(cliopts.progress_wanted(args))
    baseline = load_baseline(args.counters_baseline) if args.counters_baseline else None
    try:
        fabric = Fabric(args.inventory, args.limit, parsed=parsed)
    except FabricopsError as exc:
        raise CouldNotRun(str(exc)) from None
    hostvars = {h: {**fabric.hostvars(h), **extra} for h in fabric.hosts}
    reach = Reach(fabric.run)
    opts = Options(
        only=args.only,
        profile=args.profile,
        ofed_version=args.ofed_version,
        skip=args.skip,
        serial=args.serial,
        rerun=not args.no_rerun,
        all_pairs=args.all_pairs,
        nccl=args.nccl,
        progress=out.line,
        counter_baseline=baseline,
        accept_unproven=args.accept_unproven,
    )
    from fabricops.verify import slurm

    launcher = slurm.launcher_of(args.launcher, hostvars.get(fabric.hosts[0]) or {})
    if args.slurm_local and launcher != "slurm":
        raise UsageError("--slurm-local goes with --launcher slurm (or fabricops_verify_launcher: slurm)")
    out.line(f"verifying {len(fabric.hosts)} hosts: {', '.join(fabric.hosts)}")
    roce = next((hv.get("fabricops_roce") for hv in hostvars.values() if hv.get("fabricops_roce")), None)

    def warn(msg: str) -> None:
        if not args.quiet:
            print(f"fabricops verify: {msg}", file=sys.stderr)

    with contextlib.ExitStack() as stack:
        stack.callback(fabric.close)  # last: the Slurm allocation is cancelled over its connection
        alloc = None
        if launcher == "slurm" and args.only in (None, "pairs", "nccl"):
            alloc = slurm_steps(stack, fabric, hostvars, args, out.line, warn)
            opts.steps = alloc.run
            template = (hostvars.get(fabric.hosts[0]) or {}).get("fabricops_verify_nccl_launcher")
            if isinstance(template, str) and slurm.srun_template(template):
                opts.launch = alloc.on_controller
        run = verify(
            reach,
            fabric.hosts,
            hostvars,
            opts,
            fabric.switch_link_layers(),
            switch_reader=fabric.switch_reader(roce),
        )
        if alloc is not None:
            run.launcher = alloc.describe()
    out.done()
    run.valid_for_s = args.valid_for
    not_checked = {h: f"unreachable: {why}" for h, why in run.unreached.items()}
    not_checked.update(reach.not_checked(run.hosts))
    status = exit_status(run, not_checked)
    text = report.terminal(run, not_checked=not_checked, status=status)
    if status == EXIT_NORUN and not args.quiet:
        if not_checked:
            print(f"fabricops verify: could not check {', '.join(not_checked)}: unreachable over SSH",
                  file=sys.stderr)
        unproven = [r for r in run.results if no_verdict(r)]
        if unproven and run.hosts:
            print(f"fabricops verify: no verdict: {len(unproven)} result(s) could not be proven "
                  f"({', '.join(sorted({r.check for r in unproven}))}): "
                  f"{unproven[0].message} (read the switches, or --accept-unproven)", file=sys.stderr)
    cliopts.emit_report(args, text, lambda: report.to_json(run, not_checked=not_checked, status=status),
                        lambda: report.to_junit(run, not_checked=not_checked))
    return status
