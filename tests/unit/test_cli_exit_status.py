"""The exit-status table (docs/cli.md) for every command, on real inputs.

Each row runs one command through ``fabricops.cli.main`` (or a real subprocess where the process
matters: a closed stdout, the lab's state directory) and checks the status and that stderr is at
most one line with no traceback. Drift rows run the real ansible-playbook / ansible-runner on a
localhost-only inventory (and an unreachable 127.0.0.1:1 host); nothing touches the lab.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from captures import fixture_names, read_fixture
from test_diagnose import evidence, ok, sysfs

from fabricops import cli
from fabricops.errors import (
    EXIT_BADINPUT,
    EXIT_DRIFT,
    EXIT_FAILED,
    EXIT_NORUN,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_USAGE,
)

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
COMMANDS = ["parse", "lab", "verify", "drift", "diagnose", "plan", "topology", "act"]


@pytest.fixture(scope="module")
def w(tmp_path_factory) -> Path:
    """Inventories, a playbook, evidence and report files for the rows below."""
    d = tmp_path_factory.mktemp("cli")
    local = f"ansible_connection: local, ansible_python_interpreter: {PY}"
    (d / "ok.yml").write_text(f"gpu_hosts:\n  hosts:\n    h1: {{{local}}}\n    h2: {{{local}}}\n")
    (d / "broken.yml").write_text("all:\n  hosts:\n    h1: {ansible_connection: local\n")
    (d / "empty.yml").write_text("")
    (d / "unreachable.yml").write_text(
        f"gpu_hosts:\n  hosts:\n    h1: {{{local}}}\n"
        "    h3: {ansible_host: 127.0.0.1, ansible_port: 1, ansible_ssh_common_args: '-o ConnectTimeout=3'}\n"
    )
    (d / "state.txt").write_text("mtu=4200\n")
    (d / "clean.yml").write_text(
        "- hosts: gpu_hosts\n  gather_facts: false\n  tasks:\n"
        "    - name: Declared state\n"
        f"      ansible.builtin.copy: {{content: \"mtu=4200\\n\", dest: {d}/state.txt}}\n"
    )
    (d / "drift.yml").write_text(
        "- hosts: gpu_hosts\n  gather_facts: false\n  tasks:\n"
        "    - name: Declared state\n"
        f"      ansible.builtin.copy: {{content: \"mtu=9000\\n\", dest: {d}/state.txt}}\n"
    )
    (d / "ibstat-empty.txt").write_text("")
    (d / "ibstat-ok.txt").write_text(read_fixture("ibstat", sorted(fixture_names("ibstat"))[0]))
    (d / "baseline-foreign.json").write_text(json.dumps({"schema": "something/else"}))
    (d / "baseline-notjson.json").write_text("{not json")
    ctx = {"fabricops_hardware_profile": "hgx-h100-ndr", "fabricops_roce": {"lossless_priority": 3}}

    def evdir(name: str, hosts: dict, context=ctx) -> None:
        e = d / name
        e.mkdir()
        for host, raw in hosts.items():
            (e / f"{host}.json").write_text(raw if isinstance(raw, str) else json.dumps(raw))
        if context is not None:
            (e / "context.json").write_text(context if isinstance(context, str) else json.dumps(context))

    failed = {k: {"rc": 127, "stdout": "", "stderr": "not found"} for k in evidence()}
    unreachable = {k: {"rc": 255, "stdout": "", "stderr": "ssh: connect"} for k in evidence()}
    down = evidence(sysfs=ok(sysfs(**{"mlx5_0/1/state": "1: DOWN"})))
    evdir("ev-healthy", {"gpu01": evidence()})
    evdir("ev-fault", {"gpu01": down, "gpu02": failed})
    evdir("ev-allfailed", {"gpu01": failed, "gpu02": unreachable})
    evdir("ev-emptyhost", {"gpu01": {}})
    evdir("ev-partial", {"gpu01": evidence(), "gpu02": unreachable})
    evdir("ev-none", {})
    evdir("ev-ctx-notjson", {"gpu01": evidence()}, context="{oops")
    evdir("ev-ctx-types", {"gpu01": evidence()}, context={"fabricops_roce": {"lossless_priority": "three"}})
    evdir("ev-ctx-list", {"gpu01": evidence()}, context=[1, 2])
    evdir("ev-ctx-switches", {"gpu01": evidence()}, context={"switch_states": ["leaf-a"]})
    evdir("ev-bad-evidence", {"gpu01": {"sysfs": "not a result"}})
    evdir("ev-bad-json", {"gpu01": "[[["})
    deep = "[" * 100_000 + "]" * 100_000  # deeper than Python's recursion limit, 200 KB
    (d / "baseline-deep.json").write_text(deep)
    evdir("ev-deep", {"gpu01": deep})
    os.mkfifo(d / "fifo")  # no writer: reading it would wait forever
    (d / "ev-fifo").mkdir()
    os.mkfifo(d / "ev-fifo" / "gpu01.json")  # evidence that is a FIFO: diagnose hung on it
    (d / "link.json").symlink_to(d / "link-target.json")  # a report must not be written through it
    return d


def one_line(err: str) -> None:
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) <= 1, err


# (id, argv with {w} for the work directory, expected status, what stderr says)
ROWS = [
    # 2: usage, for every command: an unknown flag, the same status argparse uses, never "drift found"
    *[(f"{c}-bogus-flag", [*argv, "--bogus"], EXIT_USAGE, "unrecognized arguments: --bogus")
      for c, argv in (("parse", ["parse", "ibstat"]), ("lab", ["lab", "status"]), ("verify", ["verify"]),
                      ("drift", ["drift"]), ("diagnose", ["diagnose"]), ("plan", ["plan", "--gpus", "8"]),
                      ("topology", ["topology"]), ("act", ["act", "r.json"]))],
    ("act-no-report", ["act", "{w}/nope.json"], EXIT_NORUN, "nope.json"),
    ("topology-no-inventory", ["topology", "-i", "{w}/nope.yml", "--from", "plan"], EXIT_NORUN, "nope.yml"),
    ("topology-unreachable", ["topology", "-i", "{w}/unreachable.yml", "-l", "h3"], EXIT_NORUN, ""),
    ("plan-missing-required", ["plan"], EXIT_USAGE, "required: --gpus"),
    ("lab-no-subcommand", ["lab"], EXIT_USAGE, "required"),
    ("lab-up-bogus", ["lab", "up", "--hosts", "x"], EXIT_USAGE, "invalid int value"),
    ("parse-unknown-tool", ["parse", "nosuchtool"], EXIT_USAGE, "invalid choice"),
    ("plan-nan", ["plan", "--gpus", "64", "--model-params", "nan"], EXIT_USAGE, "not a finite number"),
    ("plan-inf", ["plan", "--gpus", "64", "--step-time", "inf"], EXIT_USAGE, "not a finite number"),
    ("plan-1e308", ["plan", "--gpus", "64", "--model-params", "1e308"], EXIT_USAGE, "give no plan"),
    ("plan-tiny-step", ["plan", "--gpus", "64", "--step-time", "1e-308"], EXIT_USAGE, "not a finite number"),
    ("plan-bad-value", ["plan", "--gpus", "12"], EXIT_USAGE, "not a multiple"),
    ("verify-unknown-profile", ["verify", "-i", "{w}/ok.yml", "--profile", "nope"], EXIT_USAGE,
     "unknown hardware profile"),
    ("verify-bad-extra-vars", ["verify", "-i", "{w}/ok.yml", "-e", "novalue"], EXIT_USAGE, "key=value"),
    ("diagnose-two-stdouts", ["diagnose", "--from-evidence", "{w}/ev-healthy", "--json", "-", "--junit", "-"],
     EXIT_USAGE, "both want stdout"),
    ("diagnose-hosts-and-limit", ["diagnose", "-l", "gpu01", "gpu02"], EXIT_USAGE, "not both"),
    ("drift-two-stdouts", ["drift", "-i", "{w}/ok.yml", "--json", "-", "--junit", "-"], EXIT_USAGE,
     "both want stdout"),
    ("plan-empty-json", ["plan", "--gpus", "64", "--json", ""], EXIT_USAGE, "empty file name"),
    ("verify-empty-json", ["verify", "-i", "{w}/ok.yml", "--json", ""], EXIT_USAGE, "empty file name"),
    ("plan-zero-params", ["plan", "--gpus", "64", "--model-params", "0"], EXIT_USAGE, "give no plan"),
    ("plan-tiny-params", ["plan", "--gpus", "64", "--model-params", "1e-308"], EXIT_USAGE, "give no plan"),
    ("plan-zero-micro-batches", ["plan", "--gpus", "64", "--pipeline-stages", "2", "--micro-batch", "1",
                                 "--seq-len", "4096", "--hidden", "8192", "--micro-batches", "0"], EXIT_USAGE,
     "--micro-batches: 0 is not a positive whole number"),
    # 4: could not run
    ("parse-missing-file", ["parse", "ibstat", "{w}/nope.txt"], EXIT_NORUN, "cannot read"),
    ("verify-no-inventory", ["verify", "-i", "{w}/nope.yml"], EXIT_NORUN, "does not exist"),
    ("verify-broken-inventory", ["verify", "-i", "{w}/broken.yml"], EXIT_NORUN, "YAML parsing failed"),
    ("verify-empty-inventory", ["verify", "-i", "{w}/empty.yml"], EXIT_NORUN, "has no hosts"),
    ("verify-limit-matches-nothing", ["verify", "-i", "{w}/ok.yml", "-l", "nosuchgroup"], EXIT_NORUN,
     "no host matches"),
    ("verify-baseline-missing", ["verify", "-i", "{w}/ok.yml", "--counters-baseline", "{w}/nope.json"],
     EXIT_NORUN, "cannot read"),
    ("verify-json-is-a-dir", ["verify", "-i", "{w}/ok.yml", "--json", "{w}"], EXIT_NORUN, "is a directory"),
    ("verify-unreachable-only",
     ["verify", "-i", "{w}/unreachable.yml", "-l", "h3", "--profile", "hgx-h100-ndr"],
     EXIT_NORUN, "could not check h3"),
    ("drift-no-inventory", ["drift", "-i", "{w}/nope.yml"], EXIT_NORUN, "does not exist"),
    ("drift-broken-inventory", ["drift", "-i", "{w}/broken.yml", "--playbook", "{w}/clean.yml"], EXIT_NORUN,
     "YAML parsing failed"),
    ("drift-empty-inventory", ["drift", "-i", "{w}/empty.yml", "--playbook", "{w}/clean.yml"], EXIT_NORUN,
     "targets no host"),
    ("drift-limit-matches-nothing", ["drift", "-i", "{w}/ok.yml", "-l", "nosuch", "--playbook",
                                     "{w}/clean.yml"], EXIT_NORUN, "targets no host"),
    ("drift-missing-playbook", ["drift", "-i", "{w}/ok.yml", "--playbook", "{w}/nope.yml"], EXIT_NORUN,
     "does not exist"),
    ("drift-json-dir-missing", ["drift", "-i", "{w}/ok.yml", "--json", "{w}/nodir/x.json"], EXIT_NORUN,
     "does not exist"),
    ("drift-unreachable-host", ["drift", "-i", "{w}/unreachable.yml", "--playbook", "{w}/clean.yml"],
     EXIT_NORUN, "could not check every host (h3: unreachable"),
    ("diagnose-no-dir", ["diagnose", "--from-evidence", "{w}/nope"], EXIT_NORUN, "no such directory"),
    ("diagnose-no-files", ["diagnose", "--from-evidence", "{w}/ev-none"], EXIT_NORUN, "no HOST.json"),
    ("diagnose-all-failed", ["diagnose", "--from-evidence", "{w}/ev-allfailed"], EXIT_NORUN, "no verdict"),
    ("diagnose-empty-evidence", ["diagnose", "--from-evidence", "{w}/ev-emptyhost"], EXIT_NORUN,
     "no verdict"),
    ("diagnose-partial", ["diagnose", "--from-evidence", "{w}/ev-partial"], EXIT_NORUN, "gpu02"),
    ("diagnose-no-inventory", ["diagnose", "-i", "{w}/nope.yml"], EXIT_NORUN, "does not exist"),
    ("plan-json-unwritable", ["plan", "--gpus", "64", "--json", "{w}/nodir/p.json"], EXIT_NORUN,
     "does not exist"),
    ("plan-inventory-unwritable", ["plan", "--gpus", "64", "--write-inventory", "/proc/fabricops"],
     EXIT_NORUN, "cannot write"),
    ("plan-json-symlink", ["plan", "--gpus", "64", "--json", "{w}/link.json"], EXIT_NORUN, "symbolic link"),
    ("verify-junit-symlink", ["verify", "-i", "{w}/ok.yml", "--junit", "{w}/link.json"], EXIT_NORUN,
     "symbolic link"),
    # 5: invalid input data
    ("parse-empty-input", ["parse", "ibstat", "{w}/ibstat-empty.txt"], EXIT_BADINPUT, "input is not ibstat"),
    ("verify-baseline-foreign", ["verify", "-i", "{w}/ok.yml", "--counters-baseline",
                                 "{w}/baseline-foreign.json"], EXIT_BADINPUT, "not a fabricops verify"),
    ("verify-baseline-notjson", ["verify", "-i", "{w}/ok.yml", "--counters-baseline",
                                 "{w}/baseline-notjson.json"], EXIT_BADINPUT, "not a fabricops verify"),
    ("diagnose-context-notjson", ["diagnose", "--from-evidence", "{w}/ev-ctx-notjson"], EXIT_BADINPUT,
     "context.json: not JSON"),
    ("diagnose-context-types", ["diagnose", "--from-evidence", "{w}/ev-ctx-types"], EXIT_BADINPUT,
     "malformed context"),
    ("diagnose-context-list", ["diagnose", "--from-evidence", "{w}/ev-ctx-list"], EXIT_BADINPUT,
     "not a context object"),
    ("diagnose-context-switches", ["diagnose", "--from-evidence", "{w}/ev-ctx-switches"], EXIT_BADINPUT,
     "switch_states"),
    ("diagnose-evidence-shape", ["diagnose", "--from-evidence", "{w}/ev-bad-evidence"], EXIT_BADINPUT,
     "not evidence JSON"),
    ("diagnose-evidence-notjson", ["diagnose", "--from-evidence", "{w}/ev-bad-json"], EXIT_BADINPUT,
     "not JSON"),
    ("verify-baseline-deep", ["verify", "-i", "{w}/ok.yml", "--counters-baseline", "{w}/baseline-deep.json"],
     EXIT_BADINPUT, "nested too deeply"),
    ("diagnose-evidence-deep", ["diagnose", "--from-evidence", "{w}/ev-deep"], EXIT_BADINPUT,
     "nested too deeply"),
    ("verify-baseline-fifo", ["verify", "-i", "{w}/ok.yml", "--counters-baseline", "{w}/fifo"], EXIT_BADINPUT,
     "not a regular file (a FIFO)"),
    ("verify-baseline-dev-zero", ["verify", "-i", "{w}/ok.yml", "--counters-baseline", "/dev/zero"],
     EXIT_BADINPUT, "not a regular file (a character device)"),
    ("verify-extra-vars-fifo", ["verify", "-i", "{w}/ok.yml", "-e", "@{w}/fifo"], EXIT_BADINPUT,
     "not a regular file (a FIFO)"),
    ("parse-fifo", ["parse", "ibstat", "{w}/fifo"], EXIT_BADINPUT, "not a regular file (a FIFO)"),
    ("diagnose-evidence-fifo", ["diagnose", "--from-evidence", "{w}/ev-fifo"], EXIT_BADINPUT,
     "not a regular file (a FIFO)"),
    # 1: ran, checks failed / a fault found
    ("verify-check-fails", ["verify", "-i", "{w}/ok.yml", "-l", "h1", "--profile", "hgx-h100-ndr", "-q"],
     EXIT_FAILED, ""),
    ("diagnose-fault", ["diagnose", "--from-evidence", "{w}/ev-fault", "-q"], EXIT_FAILED, ""),
    # 3: drift found
    ("drift-found", ["drift", "-i", "{w}/ok.yml", "--playbook", "{w}/drift.yml"], EXIT_DRIFT, ""),
    # 0: ran, good verdict
    ("parse-ok", ["parse", "ibstat", "{w}/ibstat-ok.txt"], EXIT_OK, ""),
    ("plan-ok", ["plan", "--gpus", "64"], EXIT_OK, ""),
    ("drift-clean", ["drift", "-i", "{w}/ok.yml", "--playbook", "{w}/clean.yml"], EXIT_OK, ""),
    ("diagnose-healthy", ["diagnose", "--from-evidence", "{w}/ev-healthy"], EXIT_OK, ""),
]


@contextmanager
def bounded(seconds: int, more_memory: int = 2 << 30):
    """A row that would hang (a FIFO opened for reading) or eat the machine's memory (/dev/zero read
    whole) fails instead of stopping the suite: SIGALRM after ``seconds``, MemoryError past
    ``more_memory`` bytes of address space more than now."""
    import resource

    def expired(*_):
        raise TimeoutError(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    limits = resource.getrlimit(resource.RLIMIT_AS)
    now = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    cap = now + more_memory
    if limits[1] == resource.RLIM_INFINITY or cap < limits[1]:
        resource.setrlimit(resource.RLIMIT_AS, (cap, limits[1]))
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        resource.setrlimit(resource.RLIMIT_AS, limits)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize(("argv", "status", "says"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_exit_status_table(w, argv, status, says, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("{w}", str(w)) for a in argv]
    with bounded(300):
        rc = cli.main(argv)
    out, err = capsys.readouterr()
    assert rc == status, f"{argv}: exit {rc}, expected {status}\nstdout: {out[-800:]}\nstderr: {err[-800:]}"
    one_line(err)
    if says:
        assert says in err, err
    if status in (EXIT_USAGE,):
        assert err.startswith("fabricops")


def test_every_command_is_in_the_table():
    """A new subcommand must get its rows: usage (2) and its could-not-run (4) case at least."""
    names = set(cli.build_parser()._subparsers._group_actions[0].choices)
    assert names == set(COMMANDS)
    for c in COMMANDS:
        statuses = {s for i, a, s, _ in ROWS if a[0] == c} | ({EXIT_NORUN} if c == "lab" else set())
        assert {EXIT_USAGE, EXIT_NORUN} <= statuses, c


def test_usage_differs_from_drift_found_in_a_real_process():
    """The audit's case: `fabricops drift --bogus` must not pass a gate that lets 'drift found' through."""
    proc = subprocess.run([PY, "-m", "fabricops.cli", "drift", "--bogus"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert proc.returncode == EXIT_USAGE != EXIT_DRIFT
    assert proc.stdout == "" and proc.stderr.strip().splitlines() == [
        "fabricops drift: unrecognized arguments: --bogus (see 'fabricops drift --help')"
    ]


#: run in a subprocess: the lab's state directory is read when fabricops_lab.paths is imported
LAB_NORUN = [["lab", "status"], ["lab", "ssh", "gpu01"], ["lab", "status", "--json"]]


def test_lab_without_a_lab_could_not_run(tmp_path):
    """`lab status` with no lab up: one line, 4 (FABRICOPS_LAB_DIR: an empty state directory)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "FABRICOPS_LAB_DIR": str(tmp_path)}
    for argv in LAB_NORUN:
        proc = subprocess.run([PY, "-m", "fabricops.cli", *argv], capture_output=True, text=True, timeout=120,
                              env=env)
        assert proc.returncode == EXIT_NORUN, proc.stderr
        assert proc.stderr.strip().splitlines() == ["fabricops lab: no lab is up; run fabricops lab up"]


def test_help_and_version_exit_0(capsys):
    assert cli.main(["--version"]) == EXIT_OK
    assert cli.main(["drift", "--help"]) == EXIT_OK
    assert "--limit" in capsys.readouterr().out


#: (id, argv, the function that raises, where the log goes, what must not be in the log or on stderr)
INTERNAL_ERRORS = [
    ("plan", ["plan", "--gpus", "8"], "fabricops.plan.cli:make_plan", "log-dir", "hunter2"),
    # -e in its JSON form: the password must be masked in the argv the log records, like k=v
    ("verify-extra-vars-json", ["verify", "-e", '{"ansible_become_password": "s3cret-json"}',
                                "--extra-vars={\"vault\": {\"api_key\": \"k3y-nested\"}}"],
     "fabricops.verify.cli:cmd_verify", "log-dir", "s3cret-json k3y-nested hunter2"),
    # the log directory cannot be written: a new file of unpredictable name (mkstemp), never
    # /tmp/fabricops-plan-<time>-<pid>.log, which another user could have made a link
    ("log-dir-unwritable", ["plan", "--gpus", "8"], "fabricops.plan.cli:make_plan", "temp", "hunter2"),
]


@pytest.mark.parametrize(("argv", "target", "where", "secrets"), [r[1:] for r in INTERNAL_ERRORS],
                         ids=[r[0] for r in INTERNAL_ERRORS])
def test_internal_error_is_one_line_and_a_log(argv, target, where, secrets, monkeypatch, tmp_path, capsys):
    import importlib

    def boom(*a, **k):
        raise RuntimeError("unexpected state\nsecond line password: hunter2")

    module, attr = target.split(":")
    monkeypatch.setattr(importlib.import_module(module), attr, boom)
    logs, temp = tmp_path / "logs", tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("FABRICOPS_LOG_DIR", str(logs) if where == "log-dir" else "/proc/fabricops/logs")
    assert cli.main(argv) == EXIT_NORUN
    out, err = capsys.readouterr()
    assert out == ""
    one_line(err)
    assert err.startswith(f"fabricops {argv[0]}: internal error: RuntimeError: unexpected state second line")
    log = Path(err.strip().rsplit("details in ", 1)[1])
    assert log.parent == (logs if where == "log-dir" else temp)
    if where == "log-dir":
        assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    else:
        assert not re.fullmatch(r"fabricops-plan-\d{8}T\d{6}-\d+\.log", log.name), log.name
    assert stat.S_IMODE(log.stat().st_mode) == 0o600  # argv and a traceback: the user's eyes only
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "boom" in text
    for secret in secrets.split():
        assert secret not in text and secret not in err, secret


def test_log_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("FABRICOPS_LOG_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert cli.log_dir() == tmp_path / "fabricops" / "logs"


def _stdout_gone(how: str):
    """stdout for the child: a pipe whose reader is gone, /dev/full, or no descriptor 1 at all (>&-)."""
    if how == "pipe":
        r, wfd = os.pipe()
        os.close(r)  # the reader is gone before the first write
        return wfd, None
    if how == "full":
        return os.open("/dev/full", os.O_WRONLY), None
    return None, lambda: os.close(1)


#: (id, argv, what stdout is, status, stderr): a closed pipe is the quiet 141; any other stdout that
#: cannot be written is "could not run" (4) in one line, never an internal error
STDOUT_ROWS = [
    ("pipe-plan-json", ["plan", "--gpus", "512", "--json", "-"], "pipe", EXIT_PIPE, ""),
    ("pipe-parse", ["parse", "ibstat", "{w}/ibstat-ok.txt"], "pipe", EXIT_PIPE, ""),
    ("dev-full-plan", ["plan", "--gpus", "512"], "full", EXIT_NORUN,
     "fabricops plan: cannot write to stdout (No space left on device)\n"),
    ("closed-fd-parse", ["parse", "ibstat", "{w}/ibstat-ok.txt"], "closed", EXIT_NORUN,
     "fabricops parse: cannot write to stdout: it is closed; redirect it (> FILE, > /dev/null)\n"),
]


@pytest.mark.parametrize(("argv", "how", "status", "stderr"), [r[1:] for r in STDOUT_ROWS],
                         ids=[r[0] for r in STDOUT_ROWS])
def test_unwritable_stdout(w, argv, how, status, stderr):
    """`fabricops ... | head`: the reader went away: no traceback, no 'Exception ignored', 141.
    `> /dev/full` or `>&-`: one line, 4."""
    if how == "full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    argv = [a.replace("{w}", str(w)) for a in argv]
    fd, preexec = _stdout_gone(how)
    try:
        proc = subprocess.run([PY, "-m", "fabricops.cli", *argv], stdout=fd, stderr=subprocess.PIPE,
                              preexec_fn=preexec, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    finally:
        if fd is not None:
            os.close(fd)
    assert proc.returncode == status, proc.stderr
    assert proc.stderr == stderr


def _run(argv, capsys):
    rc = cli.main(argv)
    return rc, *capsys.readouterr()


def test_json_dash_is_only_json_on_stdout(w, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for argv in (
        ["plan", "--gpus", "64", "--json", "-"],
        ["diagnose", "--from-evidence", str(w / "ev-healthy"), "--json", "-"],
        ["diagnose", "--from-evidence", str(w / "ev-partial"), "--json", "-"],
        ["drift", "-i", str(w / "ok.yml"), "--playbook", str(w / "drift.yml"), "--json", "-"],
        ["verify", "-i", str(w / "unreachable.yml"), "-l", "h3", "--profile", "hgx-h100-ndr", "--json", "-"],
    ):
        rc, out, _ = _run(argv, capsys)
        data = json.loads(out)  # the whole of stdout is one JSON document
        assert isinstance(data, dict), argv
        if argv[0] != "plan":
            assert data["exit_status"] == rc, argv
    assert data["ok"] is False and list(data["not_checked"]) == ["h3"]


def test_diagnose_partial_evidence_is_never_healthy(w, capsys):
    rc, out, _ = _run(["diagnose", "--from-evidence", str(w / "ev-partial"), "--json", "-"], capsys)
    data = json.loads(out)
    assert rc == EXIT_NORUN and data["healthy"] is False
    assert data["not_checked"] == {"gpu02": "unreachable over SSH, no evidence"}
    rc, out, _ = _run(["diagnose", "--from-evidence", str(w / "ev-partial")], capsys)
    assert "healthy" not in out and "NOT CHECKED: gpu02" in out
    rc, out, _ = _run(["diagnose", "--from-evidence", str(w / "ev-fault"), "--junit", "-"], capsys)
    assert rc == EXIT_FAILED
    assert 'name="gpu02"><error message="not checked"' in out and 'type="port_down"' in out


def test_diagnose_positional_hosts_still_work_but_warn(w, capsys):
    # the deprecated form goes through the same inventory check as -l (no lab is touched: it fails first)
    rc, _, err = _run(["diagnose", "-i", str(w / "empty.yml"), "gpu01"], capsys)
    assert rc == EXIT_NORUN
    lines = err.strip().splitlines()
    assert "deprecated; use -l/--limit gpu01" in lines[0] and "has no hosts" in lines[1]


def test_drift_not_checked_and_progress(w, capsys, monkeypatch, tmp_path):
    """An unreachable host is 'not checked', never 'no drift'; -v shows progress per host and phase."""
    monkeypatch.chdir(tmp_path)
    rc, out, err = _run(["drift", "-i", str(w / "unreachable.yml"), "--playbook", str(w / "drift.yml"), "-v"],
                        capsys)
    assert rc == EXIT_DRIFT  # drift on h1 wins, and h3 is still listed
    assert "not checked: h3" in out and "no drift: h3" not in out and "DRIFT FOUND (and 1 not checked)" in out
    assert "check: play 1: gpu_hosts" in err and "h3: UNREACHABLE" in err
    assert "h1: play tasks checked (1 tasks, 1 would change)" in err
    # without -v, off a terminal: no progress at all, only the report on stdout
    rc, out, err = _run(["drift", "-i", str(w / "ok.yml"), "--playbook", str(w / "clean.yml")], capsys)
    assert rc == EXIT_OK and err == "" and "NO DRIFT (exit 0)" in out and "no drift: h1, h2" in out


def _rolling(w) -> Path:
    """A rolling play like site.yml's host play whose first host fails before the declared state."""
    book = w / "rolling.yml"
    book.write_text(
        "- hosts: gpu_hosts\n  gather_facts: false\n"
        "  serial: \"{{ fabricops_serial | default(1) }}\"\n"
        "  max_fail_percentage: \"{{ fabricops_max_fail_percentage | default(0) }}\"\n  tasks:\n"
        "    - name: Preflight fails on h1\n"
        "      ansible.builtin.fail: {msg: bad input}\n"
        "      when: inventory_hostname == 'h1'\n"
        "    - name: Declared state\n"
        f"      ansible.builtin.copy: {{content: \"mtu=4200\\n\", dest: {w}/state.txt}}\n"
    )
    return book


def test_drift_checks_every_host_in_one_batch(w, capsys, monkeypatch, tmp_path):
    """Check mode changes nothing: batches and the failure budget would only hide h2 behind h1."""
    monkeypatch.chdir(tmp_path)
    book = _rolling(w)
    rc, out, _ = _run(["drift", "-i", str(w / "ok.yml"), "--playbook", str(book), "--json", "-"], capsys)
    data = json.loads(out)
    assert rc == EXIT_NORUN and list(data["not_checked"]) == ["h1"], data  # h1 failed: no verdict for it
    assert data["hosts"] == ["h1", "h2"] and data["items"] == [], data  # h2 was checked: no drift
    # the inventory's (or the user's) own batches still win when given
    rc, out, _ = _run(["drift", "-i", str(w / "ok.yml"), "--playbook", str(book), "--json", "-",
                       "-e", "fabricops_serial=1"], capsys)
    data = json.loads(out)
    assert rc == EXIT_NORUN and sorted(data["not_checked"]) == ["h1", "h2"], data


@pytest.fixture(scope="module")
def all_down(tmp_path_factory) -> Path:
    """The example InfiniBand inventory with every GPU host at a port nothing listens on."""
    import shutil

    d = tmp_path_factory.mktemp("down") / "inv"
    shutil.copytree(REPO / "inventories" / "example" / "ib", d)
    hosts = d / "hosts.yml"
    hosts.write_text(re.sub(r"ansible_host: 10\.10\.0\.1\d", "ansible_host: 127.0.0.1, ansible_port: 1",
                            hosts.read_text()))
    assert hosts.read_text().count("ansible_port: 1") == 4
    return hosts


def test_every_host_unreachable_is_could_not_run_with_no_finding(all_down, capsys):
    """Issue 35: verify with every host unreachable exited 1 and reported findings it had no evidence
    for ("/etc/nccl.conf is missing", 48 perftest failures, cables blamed)."""
    rc, out, err = _run(["verify", "-i", str(all_down), "--json", "-"], capsys)
    data = json.loads(out)
    assert rc == EXIT_NORUN and data["exit_status"] == EXIT_NORUN, err
    assert sorted(data["not_checked"]) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert data["results"] == [] and data["summary"]["total"] == 0
    assert data["blamed"] == [] and data["bad_parts"] == [] and data["pairs"] is None
    rc, out, err = _run(["verify", "-i", str(all_down)], capsys)
    assert rc == EXIT_NORUN and "FAILURES" not in out and "could not check gpu01" in err
    rc, out, err = _run(["drift", "-i", str(all_down), "--playbook", str(REPO / "site.yml"), "--json", "-"],
                        capsys)
    data = json.loads(out)
    assert rc == EXIT_NORUN and data["items"] == [] and data["clean_hosts"] == [], err
    assert sorted(data["not_checked"]) == ["gpu01", "gpu02", "gpu03", "gpu04"]


def test_verify_report_says_until_when_its_verdicts_may_drive_an_action(w, capsys, monkeypatch, tmp_path):
    """Issue 36: `fabricops act` refuses a stale report; the report says when its evidence was gathered
    and until when it is valid (--valid-for, default one hour from the start of the run)."""
    from fabricops import result

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(result, "clock", lambda: "2026-12-06T10:00:00Z")
    base = ["verify", "-i", str(w / "unreachable.yml"), "-l", "h3", "--profile", "hgx-h100-ndr",
            "--json", "-"]
    _rc, out, _ = _run(base, capsys)
    data = json.loads(out)
    assert (data["observed_from"], data["generated_at"]) == ("2026-12-06T10:00:00Z", "2026-12-06T10:00:00Z")
    assert data["valid_until"] == "2026-12-06T11:00:00Z"
    _rc, out, _ = _run([*base, "--valid-for", "90m"], capsys)
    assert json.loads(out)["valid_until"] == "2026-12-06T11:30:00Z"
    _rc, out, _ = _run([*base, "--valid-for", "2d"], capsys)
    assert json.loads(out)["valid_until"] == "2026-12-08T10:00:00Z"
    for bad in ("10s", "8d", "1h30m", "0m", "soon"):
        assert cli.main([*base, "--valid-for", bad]) == 2, bad
        assert "is not a duration from 1 minute to 7 days" in capsys.readouterr().err, bad
