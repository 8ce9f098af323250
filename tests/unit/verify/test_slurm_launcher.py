"""The intensive tier as Slurm job steps (fabricops.verify.slurm, issue 36 point 5), against an in-memory
Slurm controller: every command it is given is recorded; salloc, srun and scancel behave as Slurm 22.05's
do for the parts verify reads (the job id line, the exit status, srun's own lines on stderr).

The same fake hosts answer both launchers, so the verdicts must be the same; the allocation is refused
for a drained node and when Slurm refuses it; the job is cancelled whatever happens."""

from __future__ import annotations

import json
import os
import shlex
import signal
from typing import ClassVar

import pytest
from test_nccl_phase import FakeMpi
from test_nccl_phase import hostvars as nccl_hostvars
from test_pairs import HV, FakeFabric

from fabricops import cli
from fabricops.act.slurm import SHOW_NODES
from fabricops.errors import EXIT_FAILED, EXIT_NORUN, EXIT_OK, BadInput, CouldNotRun
from fabricops.verify import report, slurm
from fabricops.verify.engine import Options, verify

HOSTS = ["gpu01", "gpu02", "gpu03", "gpu04"]


class FakeSlurm:
    """The controller: ``exec(argv, timeout)``. ``hosts(host, command, timeout)`` runs a step's command
    on its node (node = host here, unless ``node_of`` maps them)."""

    def __init__(self, hosts, states=None, refuse=None, granted_but_failed=False, node_of=None):
        self.hosts = hosts
        self.states = {h: "IDLE" for h in HOSTS} | dict(states or {})
        self.refuse = refuse
        self.granted_but_failed = granted_but_failed
        self.host_of = {v: k for k, v in (node_of or {}).items()}
        self.calls: list[list[str]] = []
        self.alive: dict[str, str] = {}  # job id -> name
        self.next_id = 41

    def show(self) -> str:
        out = []
        for n, st in self.states.items():
            reason = " Reason=maintenance [root@2026-12-06T12:00:00]" if "DRAIN" in st else ""
            out.append(f"NodeName={n} Arch=x86_64 CoresPerSocket=2 State={st} Partitions=gpu{reason}")
        return "\n".join(out) + "\n"

    def __call__(self, argv, timeout):
        self.calls.append(list(argv))
        if argv == SHOW_NODES:
            return 0, self.show(), ""
        if argv[0] == "salloc":
            assert "--no-shell" in argv and "--exclusive" in argv
            assert any(a.startswith("--time=") for a in argv)
            if self.refuse:
                return 1, "", f"salloc: error: Unable to allocate resources: {self.refuse}\n"
            self.next_id += 1
            job = str(self.next_id)
            self.alive[job] = next(a.split("=", 1)[1] for a in argv if a.startswith("--job-name="))
            if self.granted_but_failed:
                return 1, "", f"salloc: Granted job allocation {job}\nsalloc: error: Nodes are not ready\n"
            return 0, "", f"salloc: Granted job allocation {job}\nsalloc: Nodes are ready for job\n"
        if argv[0] == "srun":
            job = next(a.split("=", 1)[1] for a in argv if a.startswith("--jobid="))
            if job not in self.alive:
                return 1, "", f"srun: error: Unable to create step for job {job}: Invalid job id specified\n"
            assert "--overlap" in argv and "--nodes=1" in argv and "--ntasks=1" in argv
            node = next(a.split("=", 1)[1] for a in argv if a.startswith("--nodelist="))
            i = argv.index("timeout")
            assert argv[i : i + 3] == ["timeout", "-k", "5"] and argv[i + 4 : i + 6] == ["sh", "-c"]
            assert len(argv) == i + 7  # the host's command is one word
            res = self.hosts(self.host_of.get(node, node), argv[i + 6], float(argv[i + 3]))
            err = res.get("stderr") or ""
            if res["rc"] != 0:
                err += f"srun: error: {node}: task 0: Exited with exit code {res['rc']}\n"
            return res["rc"], res.get("stdout") or "", err
        if argv[:2] == ["env", f"SLURM_JOB_ID={next(iter(self.alive), '')}"] and argv[2:4] == ["sh", "-c"]:
            res = self.hosts("ctl", argv[4], timeout)  # a line run on the controller, in the allocation
            return res["rc"], res.get("stdout") or "", res.get("stderr") or ""
        if argv[0] == "scancel":
            target = argv[1]
            if target.startswith("--name="):
                for j, n in list(self.alive.items()):
                    if n == target.split("=", 1)[1]:
                        del self.alive[j]
            else:
                self.alive.pop(target, None)
            return 0, "", ""
        return 127, "", f"sh: 1: {argv[0]}: not found"

    def srun(self):
        return [c for c in self.calls if c[0] == "srun"]

    def scancel(self):
        return [c for c in self.calls if c[0] == "scancel"]


def _hv(bad_hosts=()):
    return {h: dict(HV, ansible_host=f"addr-{h}") for h in HOSTS}


def _verdicts(vr):
    results = sorted((r.name, r.status, r.cause) for r in vr.results)
    return results, report.host_verdicts(vr, {}), report.exit_status(vr, {})


def _by_slurm(fake_hosts, hv, opts, **kw):
    ctl = FakeSlurm(fake_hosts.run, **kw)
    alloc = slurm.allocate(ctl, "the controller ctl", {h: h for h in HOSTS})
    with slurm.held(alloc):
        vr = verify(fake_hosts.run, HOSTS, hv, Options(**opts, steps=alloc.run))
    return vr, ctl, alloc


@pytest.mark.parametrize("bad", [None, "gpu03"])
def test_job_steps_give_the_verdicts_ssh_gives_on_the_same_hosts(bad):
    by_ssh = verify(FakeFabric(bad=bad).run, HOSTS, _hv(), Options(only="pairs"))
    fake = FakeFabric(bad=bad)
    by_steps, ctl, alloc = _by_slurm(fake, _hv(), {"only": "pairs"})
    assert _verdicts(by_steps) == _verdicts(by_ssh)
    assert _verdicts(by_ssh)[2] == (EXIT_OK if bad is None else EXIT_FAILED)
    if bad:
        failed = [r for r in by_steps.results if not r.ok]
        assert failed and all(r.details["blamed"] == ["gpu03"] for r in failed)
    # every host command of the pair phase went through a job step of the one allocation, no other way
    steps = [c for c in ctl.srun() if not c[-1].startswith("ibstat")]
    assert steps and all(c[1] == "--jobid=42" for c in ctl.srun())
    assert len(fake.calls) - len(ctl.srun()) == len([c for c in fake.calls if c[1] == "ibstat"]) == 4
    assert alloc.steps == len(ctl.srun())
    assert ctl.scancel() == [["scancel", "42"]] and ctl.alive == {}


def test_the_nccl_phase_runs_as_a_step_on_the_first_host_with_the_same_verdicts():
    hv = nccl_hostvars(HOSTS)
    fake = FakeMpi(rates={("gpu03", "mlx5_1"): 25.0})

    class Hosts:
        def __init__(self):
            self.calls = []

        def run(self, host, command, timeout=60):
            self.calls.append((host, command))
            if command == "ibstat":
                return {"rc": 1, "stdout": "", "stderr": "not asked"}
            return fake(host, command, timeout)

    by_ssh = verify(Hosts().run, HOSTS, hv, Options(only="nccl"))
    hosts = Hosts()
    ctl = FakeSlurm(hosts.run)
    alloc = slurm.allocate(ctl, "ctl", {h: h for h in HOSTS})
    with slurm.held(alloc):
        by_steps = verify(hosts.run, HOSTS, hv, Options(only="nccl", steps=alloc.run))
    assert _verdicts(by_steps) == _verdicts(by_ssh)
    assert {r.check for r in by_steps.results} >= {"nccl_busbw", "nccl_rail"}
    launches = [c for c in ctl.srun() if "all_reduce_perf" in c[-1]]
    assert launches and all(c[5] == "--nodelist=gpu01" for c in launches)
    assert ctl.scancel() == [["scancel", "42"]]


def test_an_srun_nccl_template_runs_on_the_controller_inside_the_allocation():
    srun = "env {env} srun -N {nodes} --ntasks-per-node {ppn} -w {hosts} {binary} -e {max_bytes}"
    assert slurm.srun_template(srun) and slurm.srun_template("/usr/bin/srun --mpi=pmix {binary} {env}")
    assert not slurm.srun_template("mpirun -np {np} -H {hostslots} {mpi_env} {binary}")
    assert not slurm.srun_template("env A=1 mpirun srun {binary} {mpi_env}")
    hv = nccl_hostvars(HOSTS, fabricops_verify_nccl_launcher=srun)
    seen = []

    def hosts(host, command, timeout=60):
        seen.append((host, command))
        if command == "ibstat":
            return {"rc": 1, "stdout": "", "stderr": "not asked"}
        return {"rc": 124, "stdout": "", "stderr": ""}  # a hang: judged as on SSH

    by_ssh = verify(hosts, HOSTS, hv, Options(only="nccl"))
    ctl = FakeSlurm(hosts)
    alloc = slurm.allocate(ctl, "ctl", {h: h for h in HOSTS})
    with slurm.held(alloc):
        by_steps = verify(hosts, HOSTS, hv, Options(only="nccl", steps=alloc.run, launch=alloc.on_controller))
    assert _verdicts(by_steps) == _verdicts(by_ssh)
    [b] = [r for r in by_steps.results if r.check == "nccl_busbw"]
    assert b.status == "error" and "no result within" in b.message
    launched = [c for c in ctl.calls if c[0] == "env"]
    assert len(launched) == 1 and launched[0][:4] == ["env", "SLURM_JOB_ID=42", "sh", "-c"]
    line = launched[0][4]
    assert line.startswith("env NCCL_DEBUG=INFO") and " srun -N 4 --ntasks-per-node 8 " in line
    assert seen[-1][0] == "ctl" and not [c for c in ctl.srun() if "srun -N" in c[-1]]


def test_a_drained_or_unknown_node_is_one_sentence_and_nothing_is_allocated():
    ctl = FakeSlurm(FakeFabric().run, states={"gpu02": "IDLE+DRAIN", "gpu04": "DOWN+NOT_RESPONDING"})
    with pytest.raises(CouldNotRun) as exc:
        slurm.allocate(ctl, "the controller ctl", {h: h for h in HOSTS} | {"gpu05": "n05"})
    msg = str(exc.value)
    assert "gpu02 is IDLE+DRAIN (maintenance)" in msg and "gpu04 is DOWN+NOT_RESPONDING" in msg
    assert "gpu05 (Slurm node n05) is not a Slurm node" in msg and msg.endswith("nothing verified")
    assert exc.value.exit_status == EXIT_NORUN and "\n" not in msg
    assert [c[0] for c in ctl.calls] == ["scontrol"]  # no salloc, nothing to cancel


@pytest.mark.parametrize("kw", [{"refuse": "Requested nodes are busy"}, {"granted_but_failed": True}])
def test_a_refused_allocation_is_could_not_run_and_whatever_salloc_made_is_cancelled(kw):
    ctl = FakeSlurm(FakeFabric().run, **kw)
    with pytest.raises(CouldNotRun, match=r"did not allocate gpu01,gpu02,gpu03,gpu04 on ctl within 60 s"):
        slurm.allocate(ctl, "ctl", {h: h for h in HOSTS}, token="t0k")
    assert ctl.alive == {}
    by_name = [["scancel", "--name=fabricops-verify-t0k"]]  # salloc printed no id: the run's own job name
    assert ctl.scancel() == (by_name if "refuse" in kw else [["scancel", "42"]])
    assert not ctl.srun()


def test_the_job_is_cancelled_when_the_run_raises_or_is_interrupted():
    for boom in (RuntimeError("bug"), KeyboardInterrupt()):
        ctl = FakeSlurm(FakeFabric().run)
        alloc = slurm.allocate(ctl, "ctl", {h: h for h in HOSTS})
        with pytest.raises(type(boom)), slurm.held(alloc):
            raise boom
        assert ctl.scancel() == [["scancel", alloc.job]] and ctl.alive == {}
        # after the release a step is refused here, never sent to a job that is gone
        assert alloc.run("gpu01", "true")["rc"] == 255 and len(ctl.srun()) == 0


def test_sigterm_cancels_the_job_before_the_block_unwinds():
    ctl = FakeSlurm(FakeFabric().run)
    alloc = slurm.allocate(ctl, "ctl", {h: h for h in HOSTS})
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exc, slurm.held(alloc):
        os.kill(os.getpid(), signal.SIGTERM)
    assert exc.value.code == 128 + signal.SIGTERM
    assert ctl.scancel() == [["scancel", alloc.job]] and ctl.alive == {}
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_failed_scancel_is_said_with_the_time_limit():
    ctl = FakeSlurm(FakeFabric().run)
    alloc = slurm.allocate(ctl, "ctl", {h: h for h in HOSTS})
    said = []
    ctl_exec = alloc.exec
    alloc.exec = lambda argv, t: (
        (1, "", "scancel: error: Kill job error") if argv[0] == "scancel" else ctl_exec(argv, t))
    with slurm.held(alloc, said.append):
        pass
    assert said == ["scancel 42 failed on ctl (scancel: error: Kill job error); the job ends at its time "
                    "limit (120 min)"]


def test_step_results_are_the_commands_own():
    # the command's status and streams, less srun's own line about the task's end
    end = "srun: error: {}: task 0: Exited with exit code {}\n"
    r = slurm.step_result("gpu01", "gpu01", "42", 124, "", end.format("gpu01", 124))
    assert r == {"rc": 124, "stdout": "", "stderr": ""}
    r = slurm.step_result("gpu01", "n1", "42", 3, "out\n", "oops\n" + end.format("n1", 3))
    assert r == {"rc": 3, "stdout": "out\n", "stderr": "oops\n"}
    # a step that never started is the transport's failure, in Slurm's words
    gone = "srun: error: Unable to create step for job 42: Job/step already completing or completed\n"
    r = slurm.step_result("gpu01", "n1", "42", 1, "", gone)
    assert r["rc"] == 255 and r["stdout"] == ""
    assert "job 42 on n1 not started: srun: error: Unable to create step" in r["stderr"]
    # the controller unreachable: the transport's failure too
    r = slurm.step_result("gpu01", "n1", "42", 255, "", "ctl unreachable over SSH: Connection refused")
    assert r["rc"] == 255 and "Connection refused" in r["stderr"]


def test_every_value_reaching_the_controller_is_checked_and_quoted():
    with pytest.raises(BadInput, match="Slurm node name"):
        slurm.step_argv("42", "gpu$(touch x)", "true", 10)
    with pytest.raises(BadInput, match="job id"):
        slurm.step_argv("42;rm", "gpu01", "true", 10)
    with pytest.raises(BadInput, match="gpu01: Slurm node name 'a b' refused"):
        slurm.node_names(["gpu01"], {"gpu01": {"slurm_node_name": "a b"}})
    sent = []
    ex = slurm.ssh_exec(
        lambda host, line, t: sent.append((host, line, t)) or {"rc": 0, "stdout": "", "stderr": ""}, "ctl")
    cmd = "d='/tmp/x y'; echo \"$d\" `id` $(id); exit 3"
    argv = slurm.step_argv("42", "gpu01", cmd, 10)
    ex(argv, 40)
    assert sent[0][0] == "ctl" and sent[0][2] == 40 and shlex.split(sent[0][1]) == argv  # word for word
    assert argv[-3:] == ["sh", "-c", cmd]


def test_launcher_and_settings_come_from_the_inventory_and_are_checked():
    assert slurm.launcher_of(None, {}) == "ssh"
    assert slurm.launcher_of(None, {"fabricops_verify_launcher": "slurm"}) == "slurm"
    assert slurm.launcher_of("ssh", {"fabricops_verify_launcher": "slurm"}) == "ssh"
    with pytest.raises(BadInput, match="fabricops_verify_launcher 'pbs'"):
        slurm.launcher_of(None, {"fabricops_verify_launcher": "pbs"})
    s = slurm.settings_of({"fabricops_verify_slurm_partition": "gpu", "fabricops_verify_slurm_time_min": 30})
    assert slurm.salloc_argv(["gpu01", "gpu02"], "fabricops-verify-ab", s) == [
        "salloc", "--no-shell", "--exclusive", "--nodes=2", "--nodelist=gpu01,gpu02",
        "--job-name=fabricops-verify-ab", "--time=30", "--immediate=60", "--partition=gpu",
    ]
    for bad in ({"fabricops_verify_slurm_partition": "gpu --uid=0"}, {"fabricops_verify_slurm_time_min": 0},
                {"fabricops_verify_slurm_time_min": "1; id"}):
        with pytest.raises(BadInput):
            slurm.settings_of(bad)


class CliFabric:
    """verify's transport for the CLI: FakeFabric's hosts, and ``ctl`` (group slurm_controller) whose
    command line is split as its shell would and given to the fake controller."""

    instances: ClassVar[list] = []
    bad: ClassVar[str | None] = None
    launcher: ClassVar[str] = "ssh"

    def __init__(self, inventory=None, limit="gpu_hosts", parsed=None):
        self.hosts = list(HOSTS)
        self.fake = FakeFabric(bad=CliFabric.bad)
        self.ctl = FakeSlurm(self.fake.run)
        self.closed = False
        self.runner = type("R", (), {"get_hosts": lambda _s, g: ["ctl"] if g == "slurm_controller" else []})()
        CliFabric.instances.append(self)

    def hostvars(self, host):
        return dict(_hv()[host], fabricops_verify_launcher=CliFabric.launcher)

    def run(self, host, command, timeout=60):
        if host == "ctl":
            rc, out, err = self.ctl(shlex.split(command), timeout)
            return {"rc": rc, "stdout": out, "stderr": err}
        return self.fake.run(host, command, timeout)

    def switch_link_layers(self):
        return {}

    def switch_reader(self, _roce):
        return None

    def close(self):
        self.closed = True


@pytest.mark.parametrize("bad", [None, "gpu03"])
def test_the_cli_gives_the_same_report_through_both_launchers(bad, tmp_path, monkeypatch, capsys):
    inv = tmp_path / "inv.yml"
    inv.write_text("gpu_hosts:\n  hosts:\n    gpu01: {}\n")
    monkeypatch.setattr("fabricops.verify.transport.Fabric", CliFabric)
    CliFabric.bad = bad
    out = {}
    for launcher in ("ssh", "slurm"):
        CliFabric.launcher = "ssh"
        CliFabric.instances = []
        path = tmp_path / f"{launcher}.json"
        rc = cli.main(["verify", "-q", "-i", str(inv), "--only", "pairs", "--launcher", launcher,
                       "--json", str(path)])
        out[launcher] = (rc, json.loads(path.read_text()), CliFabric.instances[0])
    (rc_ssh, ssh, f_ssh), (rc_slurm, by_slurm, f_slurm) = out["ssh"], out["slurm"]
    assert rc_ssh == rc_slurm == (EXIT_OK if bad is None else EXIT_FAILED)
    key = [(r["name"], r["status"], r["cause"]) for r in ssh["results"]]
    assert key == [(r["name"], r["status"], r["cause"]) for r in by_slurm["results"]]
    assert ssh["host_verdicts"] == by_slurm["host_verdicts"]
    assert ssh["launcher"] == {"kind": "ssh"} and not f_ssh.ctl.calls
    assert by_slurm["launcher"]["kind"] == "slurm" and by_slurm["launcher"]["job"] == "42"
    assert by_slurm["launcher"]["steps"] == len(f_slurm.ctl.srun()) > 0
    assert f_slurm.ctl.scancel() == [["scancel", "42"]] and f_ssh.closed and f_slurm.closed


def test_the_cli_refuses_a_drained_node_with_exit_4_and_no_verdict(tmp_path, monkeypatch, capsys):
    inv = tmp_path / "inv.yml"
    inv.write_text("gpu_hosts:\n  hosts:\n    gpu01: {}\n")

    class Drained(CliFabric):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.ctl.states["gpu02"] = "IDLE+DRAIN"

    monkeypatch.setattr("fabricops.verify.transport.Fabric", Drained)
    CliFabric.bad, CliFabric.launcher, CliFabric.instances = None, "slurm", []
    rc = cli.main(["verify", "-i", str(inv)])  # the launcher from the inventory
    err = capsys.readouterr().err
    assert rc == EXIT_NORUN, err
    assert "gpu02 is IDLE+DRAIN (maintenance)" in err and len(err.strip().splitlines()) == 1
    f = CliFabric.instances[0]
    assert not f.fake.calls and [c[0] for c in f.ctl.calls] == ["scontrol"]


def test_slurm_local_runs_here_under_the_same_timeout_and_no_controller_is_one_sentence():
    assert slurm.local_exec(["sh", "-c", "echo hi; echo no >&2; exit 3"], 10) == (3, "hi\n", "no\n")
    assert slurm.local_exec(["sleep", "5"], 1)[0] == 124
    assert slurm.local_exec(["no-such-slurm-tool"], 5)[0] == 127

    class NoController:
        runner = type("R", (), {"get_hosts": lambda _s, g: []})()

    with pytest.raises(CouldNotRun, match="no host in group slurm_controller"):
        slurm.controller_of(NoController(), local=False)
    exec_, where, host = slurm.controller_of(NoController(), local=True)
    assert exec_ is slurm.local_exec and "--slurm-local" in where and host is None
