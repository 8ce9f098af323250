"""The intensive tier through the scheduler: ``fabricops verify --launcher slurm`` (docs/verify.md,
"Launchers: SSH or Slurm job steps").

Beyond a rack, one controller opening SSH to every host for every pair round does not scale. With the
Slurm launcher the pair rounds (every perftest server, client, stop and port-counter read) and the NCCL
phase run as job steps of **one allocation of the nodes under test**, made on the Slurm controller
(the inventory's ``slurm_controller`` host, reached over SSH as ``fabricops act`` reaches it; or this
machine with ``--slurm-local``, a login node). fabricops schedules the rounds and judges them; the
hosts' perftest runs are started by slurmd. The host and GPU evidence (the light tier: one batched
SSH session per host), the cabling and rail-consistency reads stay on SSH.

Every Slurm command is an argv built here from validated parts (node names: act's rule,
:func:`fabricops.act.slurm.check_node`; the job id: digits; the partition: the same rule) and goes
over SSH as :func:`shlex.join` of it, so the controller's shell splits it back into exactly these
words; the host's command is one word (``sh -c CMD``) inside the same ``timeout -k 5 T`` wrapper
``Fabric.run`` puts around it on SSH, so rc 124 on a timeout and the command's own status and output
come back unchanged -- the engine, and so the verdicts, cannot tell the launchers apart.

1. ``scontrol -o show node`` (act's parser): every node under test must be a Slurm node in service;
   a drained, down or unknown node is one sentence and exit 4 ("could not run"), nothing allocated.
2. ``salloc --no-shell --exclusive -N n -w NODES -J fabricops-verify-TOKEN --time=M --immediate=S``
   (``-p P``): refused (busy, not in the partition, ...) -> exit 4 with Slurm's own words.
3. each command: ``srun --jobid=J --overlap -N1 -n1 -w NODE --quiet --input=none --mpi=none
   timeout -k 5 T sh -c CMD``.
4. ``scancel J`` (by the run's unique job name when salloc died before printing the id) in a
   ``finally``, also on Ctrl-C, SIGTERM and SIGHUP.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shlex
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricops.errors import BadInput, CouldNotRun
from fabricops.parsers.slurm import NODE_NAME, SHOW_NODES, check_node, parse_nodes

#: (argv, timeout_s) -> (rc, stdout, stderr): where Slurm's commands run
Exec = Callable[[list[str], float], tuple[int, str, str]]

LAUNCHERS = ("ssh", "slurm")
LAUNCHER_VAR = "fabricops_verify_launcher"
PARTITION_VAR = "fabricops_verify_slurm_partition"
TIME_VAR = "fabricops_verify_slurm_time_min"
NODE_VAR = "slurm_node_name"  #: the inventory host's Slurm node name (default: the host), as act reads it
CONTROLLER_GROUP = "slurm_controller"
JOB_NAME = "fabricops-verify"
TIME_DEFAULT_MIN = 120  #: the allocation's own limit: it ends even when fabricops dies before scancel
WAIT_S = 60  #: salloc --immediate: nodes not free within this are "busy", never waited on for ever
CONTROL_TIMEOUT_S = 60  #: scontrol, squeue, scancel
STEP_MARGIN_S = 30  #: srun's own limit beyond the command's: the command's rc 124 comes first
KILL_AFTER_S = 5  #: ``timeout -k 5``, as Fabric.run
TRANSPORT_FAILED = 255
_JOB_ID = re.compile(r"^[0-9]{1,12}$")
_GRANTED = re.compile(r"Granted job allocation ([0-9]{1,12})")
_QUEUED = re.compile(r"[Jj]ob ([0-9]{1,12}) queued")
#: srun's own report of a task's end (the status itself comes back as srun's exit status)
_TASK_END = re.compile(r"^srun: error: \S+: task \d+: (?:Exited with exit code \d+|Killed|Terminated)\s*$")


def launcher_of(cli_value: str | None, hostvars: Mapping[str, Any]) -> str:
    """``--launcher``, else the inventory's ``fabricops_verify_launcher``, else ``ssh``."""
    value = cli_value if cli_value is not None else hostvars.get(LAUNCHER_VAR, "ssh")
    if value not in LAUNCHERS:
        raise BadInput(f"{LAUNCHER_VAR} {value!r} is not one of {', '.join(LAUNCHERS)}")
    return str(value)


@dataclass(frozen=True)
class Settings:
    partition: str | None = None
    time_min: int = TIME_DEFAULT_MIN
    wait_s: int = WAIT_S


def settings_of(hostvars: Mapping[str, Any]) -> Settings:
    """The allocation's partition and time limit from the inventory, checked before anything runs."""
    part = hostvars.get(PARTITION_VAR)
    if part is not None and (not isinstance(part, str) or not NODE_NAME.fullmatch(part)):
        raise BadInput(f"{PARTITION_VAR} {part!r} refused: a partition name is letters, digits, '.', '_' "
                       "and '-' (at most 64)")
    t = hostvars.get(TIME_VAR, TIME_DEFAULT_MIN)
    if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= 10080:
        raise BadInput(f"{TIME_VAR} {t!r} is not a whole number of minutes from 1 to 10080")
    return Settings(part, t)


def node_names(hosts: Sequence[str], hostvars: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Host -> its Slurm node name (``slurm_node_name``, default the host), each checked (BadInput)."""
    out = {}
    for h in hosts:
        name = (hostvars.get(h) or {}).get(NODE_VAR)
        out[h] = check_node(str(name) if name is not None else h, f"{h}: ")
    return out


# --- where Slurm's commands run ------------------------------------------------------------------


def ssh_exec(run: Callable[..., Mapping[str, Any]], host: str) -> Exec:
    """Slurm's commands on ``host`` through verify's transport (``run(host, command, timeout)``, which
    wraps the line in ``timeout -k 5 T sh -c`` there): the argv quoted word by word."""

    def exec_(argv: list[str], timeout: float) -> tuple[int, str, str]:
        res = run(host, shlex.join(argv), timeout)
        rc = int(res.get("rc", TRANSPORT_FAILED))
        return rc, str(res.get("stdout") or ""), str(res.get("stderr") or "")

    return exec_


def local_exec(argv: list[str], timeout: float) -> tuple[int, str, str]:
    """``--slurm-local``: the argv here, no shell, under the same ``timeout -k 5 T`` (so srun, told
    to stop, cancels its step instead of being killed past it)."""
    wrapped = ["timeout", "-k", str(KILL_AFTER_S), str(int(timeout)), *argv]
    try:
        proc = subprocess.run(wrapped, capture_output=True, text=True, errors="replace", shell=False,
                              stdin=subprocess.DEVNULL, timeout=timeout + KILL_AFTER_S + 5)
    except FileNotFoundError:
        return 127, "", "timeout: command not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: no answer in {int(timeout)} s"
    except OSError as exc:
        return 126, "", f"{argv[0]}: {exc.strerror or exc}"
    return proc.returncode, proc.stdout, proc.stderr


def _words(text: str, limit: int = 200) -> str:
    w = " ".join(text.split())
    return w if len(w) <= limit else w[: limit - 3] + "..."


# --- the allocation --------------------------------------------------------------------------------


def salloc_argv(nodes: Sequence[str], name: str, s: Settings) -> list[str]:
    for n in nodes:
        check_node(n)
    return [
        "salloc", "--no-shell", "--exclusive", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}",
        f"--job-name={name}", f"--time={int(s.time_min)}", f"--immediate={int(s.wait_s)}",
        *([f"--partition={s.partition}"] if s.partition else []),
    ]


def step_argv(job: str, node: str, command: str, timeout: float) -> list[str]:
    """One command as one job step on ``node``: the host sees ``timeout -k 5 T sh -c CMD``."""
    if not _JOB_ID.fullmatch(job):
        raise BadInput(f"Slurm job id {job!r} refused: digits only")
    check_node(node)
    return [
        "srun", f"--jobid={job}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node}",
        "--quiet", "--input=none", "--mpi=none",
        "timeout", "-k", str(KILL_AFTER_S), str(int(timeout)), "sh", "-c", command,
    ]


class Allocation:
    """One allocation of the nodes under test; :meth:`run` is the pair and NCCL phases' transport."""

    def __init__(self, exec_: Exec, where: str, nodes: Mapping[str, str], job: str | None, name: str,
                 settings: Settings):
        self.exec = exec_
        self.where = where
        self.nodes = dict(nodes)  #: host -> Slurm node
        self.job = job
        self.name = name
        self.settings = settings
        self.steps = 0
        self.released = False
        self.release_error: str | None = None
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        """What the JSON report says about the launcher."""
        return {"kind": "slurm", "job": self.job, "job_name": self.name, "where": self.where,
                "nodes": dict(self.nodes), "steps": self.steps}

    def run(self, host: str, command: str, timeout: float = 60) -> dict[str, Any]:
        """``command`` on ``host`` as a job step: what ``Fabric.run`` gives on SSH (rc 124 when it
        exceeded ``timeout``); rc 255 with no output when the step could not be started."""
        node = self.nodes.get(host)
        with self._lock:
            if self.released or node is None or self.job is None:
                why = "the allocation was released" if self.released else f"{host} is not in the allocation"
                return {"rc": TRANSPORT_FAILED, "stdout": "", "stderr": f"{host}: no Slurm step: {why}"}
            self.steps += 1
        rc, out, err = self.exec(step_argv(self.job, node, command, timeout), timeout + STEP_MARGIN_S)
        return step_result(host, node, self.job, rc, out, err)

    def on_controller(self, host: str, command: str, timeout: float = 60) -> dict[str, Any]:
        """The NCCL phase's launcher line when it is an ``srun`` form (:func:`srun_template`): on the
        Slurm controller, inside the allocation (srun there attaches to it through ``SLURM_JOB_ID``, so
        the ranks are a job step of the same allocation); ``host`` is where the line runs on SSH. A
        step cannot hold it: srun inside a step sees only that step's one node."""
        with self._lock:
            if self.released or self.job is None:
                return {"rc": TRANSPORT_FAILED, "stdout": "",
                        "stderr": f"{host}: no Slurm step: the allocation was released"}
            self.steps += 1
        rc, out, err = self.exec(["env", f"SLURM_JOB_ID={self.job}", "sh", "-c", command], timeout)
        return {"rc": rc, "stdout": out, "stderr": err}

    def release(self) -> None:
        """``scancel`` the job (once; any thread, a signal handler too). A failure is kept in
        :attr:`release_error` (the job then ends at its own time limit)."""
        with self._lock:
            if self.released:
                return
            self.released = True
        argv = ["scancel", self.job] if self.job else ["scancel", f"--name={self.name}"]
        try:
            rc, out, err = self.exec(argv, CONTROL_TIMEOUT_S)
        except Exception as exc:  # the verdicts stand; say what is left behind
            rc, out, err = TRANSPORT_FAILED, "", str(exc)
        if rc != 0:
            self.release_error = (f"scancel {self.job or '--name=' + self.name} failed on {self.where} "
                                  f"({_words(err or out) or f'exit {rc}'}); the job ends at its time limit "
                                  f"({self.settings.time_min} min)")


def step_result(host: str, node: str, job: str, rc: int, out: str, err: str) -> dict[str, Any]:
    """srun's answer as the transport's: srun's own lines about the task's end are dropped (the status
    is srun's exit status); a step that never started (only srun's own errors, no output) is the
    transport's failure, rc 255, in Slurm's words -- never a result of the command."""
    lines = err.splitlines()
    ended = any(_TASK_END.match(ln) for ln in lines)
    kept = "\n".join(ln for ln in lines if not _TASK_END.match(ln))
    if err and err.endswith("\n") and kept:
        kept += "\n"
    own = [ln for ln in lines if ln.strip()]
    if rc != 0 and not out.strip() and not ended and own and all(ln.startswith("srun: ") for ln in own):
        return {"rc": TRANSPORT_FAILED, "stdout": "",
                "stderr": f"{host}: Slurm step of job {job} on {node} not started: {_words(err)}"}
    if rc == TRANSPORT_FAILED and not out.strip() and not ended:
        return {"rc": TRANSPORT_FAILED, "stdout": "", "stderr": f"{host}: Slurm step via the controller: "
                f"{_words(err) or 'no answer'}"}
    return {"rc": rc, "stdout": out, "stderr": kept}


def check_nodes(exec_: Exec, where: str, nodes: Mapping[str, str]) -> None:
    """Every node under test is a Slurm node in service, else CouldNotRun (one sentence)."""
    rc, out, err = exec_(list(SHOW_NODES), CONTROL_TIMEOUT_S)
    if rc != 0:
        raise CouldNotRun(f"Slurm not reachable on {where}: {' '.join(SHOW_NODES)} failed "
                          f"({_words(err or out) or f'exit {rc}'}); nothing verified")
    try:
        known = parse_nodes(out)
    except BadInput as exc:
        raise CouldNotRun(f"Slurm on {where}: {exc}; nothing verified") from None
    problems = []
    for host, node in nodes.items():
        n = known.get(node)
        who = node if node == host else f"{host} (Slurm node {node})"
        if n is None:
            problems.append(f"{who} is not a Slurm node (set {NODE_VAR})")
        elif n.out_of_service:
            problems.append(f"{who} is {n.state_text}" + (f" ({n.reason})" if n.reason else ""))
    if problems:
        raise CouldNotRun(
            f"the Slurm launcher cannot allocate the nodes under test: {'; '.join(problems)}; resume them, "
            "leave them out (--limit) or use --launcher ssh; nothing verified"
        )


def allocate(exec_: Exec, where: str, nodes: Mapping[str, str], settings: Settings | None = None,
             token: str | None = None) -> Allocation:
    """One allocation of ``nodes`` (host -> node), or CouldNotRun in one sentence (nothing left held:
    a job salloc made before failing is cancelled)."""
    s = settings or Settings()
    check_nodes(exec_, where, nodes)
    name = f"{JOB_NAME}-{token or secrets.token_hex(6)}"
    alloc = Allocation(exec_, where, nodes, None, name, s)
    argv = salloc_argv(list(nodes.values()), name, s)
    try:
        rc, out, err = exec_(argv, s.wait_s + CONTROL_TIMEOUT_S)
    except BaseException:
        alloc.release()
        raise
    text = f"{out}\n{err}"
    m = _GRANTED.search(text) or _QUEUED.search(text)
    alloc.job = m.group(1) if m else None
    if rc != 0 or not _GRANTED.search(text):
        alloc.release()
        said = [ln.strip() for ln in text.splitlines() if "error" in ln.lower()] or text.splitlines()
        raise CouldNotRun(
            f"Slurm did not allocate {','.join(nodes.values())} on {where} within {s.wait_s} s "
            f"({_words(' '.join(said)) or f'salloc exit {rc}'}); nothing verified"
        )
    return alloc


@contextlib.contextmanager
def held(alloc: Allocation, warn: Callable[[str], None] = lambda _m: None) -> Iterator[Allocation]:
    """The allocation for a ``with`` block: cancelled when the block ends, raises, or the process gets
    SIGINT (Ctrl-C), SIGTERM or SIGHUP -- the handler cancels first, so the steps in flight end and the
    threads waiting on them return, then the block unwinds."""
    old: dict[int, Any] = {}

    def stop(signum: int, _frame: Any) -> None:
        alloc.release()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, stop)
    try:
        yield alloc
    finally:
        try:
            alloc.release()
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
        if alloc.release_error:
            warn(alloc.release_error)


def srun_template(template: str) -> bool:
    """Whether an NCCL launcher template is an ``srun`` form (its command word, after ``env`` and its
    ``NAME=VALUE`` / ``{env}`` words, is srun): under the Slurm launcher it runs on the controller in
    the allocation (:meth:`Allocation.on_controller`); any other (mpirun) runs as a step on the first
    host and starts its remote ranks itself, as it does over SSH."""
    try:
        words = shlex.split(template)
    except ValueError:
        return False
    while words and (words[0] in ("env", "{env}") or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0])):
        words = words[1:]
    return bool(words) and words[0].rsplit("/", 1)[-1] == "srun"


# --- the controller -------------------------------------------------------------------------------


def controller_of(fabric: Any, local: bool) -> tuple[Exec, str, str | None]:
    """(exec, where, controller host) as ``fabricops act`` finds Slurm: ``--slurm-local`` this machine,
    else the first host of the inventory group ``slurm_controller`` over verify's SSH transport."""
    if local:
        return local_exec, "this machine (--slurm-local)", None
    try:
        controllers = list(fabric.runner.get_hosts(CONTROLLER_GROUP))
    except Exception:
        controllers = []
    if not controllers:
        raise CouldNotRun(
            "--launcher slurm needs a Slurm controller: the inventory has no host in group "
            f"{CONTROLLER_GROUP}; add it, or run verify on a Slurm login node with --slurm-local; "
            "nothing verified"
        )
    return ssh_exec(fabric.run, controllers[0]), f"the controller {controllers[0]}", controllers[0]
