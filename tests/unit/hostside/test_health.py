"""The light tier, fabricops-health (fabricops.hostside.health), on a fake node.

Below the emulated line only: a sysfs tree built in tmp_path, and fake ``nvidia-smi`` and ``scontrol``
executables on PATH that print real captured output (tests/fixtures/nvidia-smi-nvlink; the GPU
list in ``--query-gpu=index,pci.bus_id`` CSV, the format fabricops.evidence.tools reads) and record
their argv. The ``scontrol -o show node`` lines follow Slurm's own printing (src/api/node_info.c:
``State=IDLE+DRAIN``, ``Reason=TEXT [user@time]``, then the optional ``Comment=`` fields).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from fabricops import result
from fabricops.errors import EXIT_FAILED, EXIT_NORUN, EXIT_OK, EXIT_USAGE
from fabricops.hostside import health

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NODE = "gpu01"
PORTS = ("mlx5_0/1", "mlx5_1/1", "mlx5_2/1", "mlx5_3/1")
UP = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
      "link_layer": "InfiniBand"}

FAKE_SMI = """#!{python}
import json, os, sys, time
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps(["nvidia-smi"] + sys.argv[1:]) + "\\n")
time.sleep(float(os.environ.get("FAKE_SMI_SLEEP", "0")))
key = "FAKE_SMI_NVLINK" if sys.argv[1:2] == ["nvlink"] else "FAKE_SMI_QUERY"
text = open(os.environ[key]).read()
sys.stdout.write("".join(l for l in text.splitlines(True) if not l.startswith("# source")))
"""

FAKE_SCONTROL = """#!{python}
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps(["scontrol"] + sys.argv[1:]) + "\\n")
if sys.argv[1:4] == ["-o", "show", "node"]:
    line = os.environ.get("FAKE_NODE_LINE")
    if not line:
        print("Node %s not found" % sys.argv[4], file=sys.stderr)
        sys.exit(1)
    print(line)
"""


def node_line(state: str, reason: str | None = None) -> str:
    """``scontrol -o show node gpu01`` as Slurm prints it (src/api/node_info.c, one_liner)."""
    line = (f"NodeName={NODE} Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.01 "
            f"AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:8 NodeAddr={NODE} NodeHostName={NODE} "
            "Version=22.05.8 OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) "
            f"RealMemory=1000 AllocMem=0 FreeMem=812 Sockets=2 Boards=1 State={state} ThreadsPerCore=1 "
            "TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu BootTime=2024-05-01T09:00:00 "
            "SlurmdStartTime=2024-05-01T09:01:00 LastBusyTime=2024-05-01T09:01:00 "
            "CfgTRES=cpu=2,mem=1000M,billing=2,gres/gpu=8 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
            "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s")
    if reason is not None:
        line += f" Reason={reason} [root@2024-05-01T10:00:00]"
    return line


def h800_8_gpus() -> str:
    """The real H800 capture with the author's elision ('...', GPUs 2-6) filled in from GPU 0's lines."""
    text = (FIXTURES / "nvidia-smi-nvlink" / "h800_8_links_elided_spaces.txt").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("# source")]
    gpu0 = lines[:9]
    filled = []
    for ln in lines:
        if ln.strip() == "...":
            for i in range(2, 7):
                filled.append(gpu0[0].replace("GPU 0:", f"GPU {i}:"))
                filled.extend(gpu0[1:])
        else:
            filled.append(ln)
    return "\n".join(filled) + "\n"


def gpu_csv(indices) -> str:
    """``nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader``: GPU0's bus id is the H800
    capture's (tests/fixtures/nvidia-smi-q/h800_q_i0_525.txt), the others follow the HGX layout."""
    buses = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    return "".join(f"{i}, 00000000:{buses[i % 8]}:00.0\n" for i in indices)


class Node:
    """A fake node: sysfs under tmp_path, a config, fake tools on PATH; ``run(...)`` calls main()."""

    def __init__(self, tmp_path: Path, monkeypatch, capsys) -> None:
        self.tmp, self.capsys = tmp_path, capsys
        self.sysfs = tmp_path / "sys"
        self.config = tmp_path / "collector.json"
        self.log = tmp_path / "calls.jsonl"
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for name, body in (("nvidia-smi", FAKE_SMI), ("scontrol", FAKE_SCONTROL)):
            (bin_dir / name).write_text(body.format(python=sys.executable))
            (bin_dir / name).chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_LOG", str(self.log))
        monkeypatch.delenv("SLURMD_NODENAME", raising=False)
        self.env = monkeypatch
        for key in PORTS:
            self.port(key, **UP)
        self.smi(gpu_csv(range(8)), h800_8_gpus())
        self.write_config()

    def port(self, key: str, **attrs: str) -> None:
        dev, port = key.split("/")
        pdir = self.sysfs / "class" / "infiniband" / dev / "ports" / port
        pdir.mkdir(parents=True, exist_ok=True)
        for name, value in attrs.items():
            (pdir / name).write_text(value + "\n")

    def smi(self, query: str, nvlink: str) -> None:
        for env, text in (("FAKE_SMI_QUERY", query), ("FAKE_SMI_NVLINK", nvlink)):
            path = self.tmp / env.lower()
            path.write_text(text)
            self.env.setenv(env, str(path))

    def write_config(self, **health) -> None:
        doc = {"expected_rate_gbps": {"InfiniBand": 400}, "nvidia_smi": "nvidia-smi", "host": "ignored",
               "health": {"ports": 4, "gpus": 8, "nvlink_links": 8, "timeout_s": 5, **health}}
        self.config.write_text(json.dumps(doc))

    def slurm(self, state: str, reason: str | None = None) -> None:
        self.env.setenv("FAKE_NODE_LINE", node_line(state, reason))

    def run(self, *flags: str) -> tuple[int, str, str]:
        if self.log.exists():
            self.log.unlink()
        rc = health.main(["--config", str(self.config), "--sysfs", str(self.sysfs), "--node", NODE, *flags])
        out, err = self.capsys.readouterr()
        return rc, out, err

    def calls(self, tool: str | None = None) -> list[list[str]]:
        if not self.log.exists():
            return []
        calls = [json.loads(ln) for ln in self.log.read_text().splitlines()]
        return [c for c in calls if tool is None or c[0] == tool]

    def updates(self) -> list[list[str]]:
        return [c[1:] for c in self.calls("scontrol") if c[1:2] == ["update"]]


@pytest.fixture
def node(tmp_path, monkeypatch, capsys):
    return Node(tmp_path, monkeypatch, capsys)


DRAIN_MLX5_1 = ["update", f"NodeName={NODE}", "State=DRAIN", "Reason=fabricops: hca_port mlx5_1/1"]


# --- the verdict -------------------------------------------------------------------------------

def test_healthy_node_exits_0_silently_and_nothing_is_drained(node):
    node.slurm("IDLE")
    assert node.run("--drain", "--resume-own") == (EXIT_OK, "", "")
    assert node.updates() == []
    # the probe table's nvidia-smi reads, and the node's state read once
    assert ["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"] in node.calls()
    assert ["nvidia-smi", "nvlink", "--status"] in node.calls()
    assert node.calls("scontrol") == [["scontrol", "-o", "show", "node", NODE]]


def test_healthy_without_slurm_flags_runs_no_scontrol(node):
    assert node.run()[0] == EXIT_OK
    assert node.calls("scontrol") == []


def test_a_port_down_fails_naming_the_port(node):
    node.port("mlx5_1/1", state="1: DOWN", phys_state="3: Disabled")
    rc, out, _ = node.run()
    assert rc == EXIT_FAILED
    assert out == ("fabricops-health: hca_port mlx5_1/1: state DOWN, physical state Disabled "
                   "(expected ACTIVE/LinkUp)\n")
    assert node.calls("scontrol") == []  # no --drain: Slurm is not touched


def test_a_port_down_with_drain_drains_once_with_the_fabricops_reason(node):
    node.port("mlx5_1/1", state="1: DOWN", phys_state="2: Polling")
    node.slurm("IDLE")
    rc, out, err = node.run("--drain")
    assert rc == EXIT_FAILED and out.startswith("fabricops-health: hca_port mlx5_1/1:")
    assert node.updates() == [DRAIN_MLX5_1]
    assert f"{NODE}: drained (fabricops: hca_port mlx5_1/1)" in err
    # already drained with that very reason: not written again
    node.slurm("IDLE+DRAIN", "fabricops: hca_port mlx5_1/1")
    assert node.run("--drain")[0] == EXIT_FAILED
    assert node.updates() == []


def test_the_first_failure_is_named_and_the_others_counted(node):
    node.port("mlx5_1/1", state="1: DOWN", phys_state="3: Disabled")
    node.port("mlx5_3/1", rate="200 Gb/sec (2X NDR)")
    rc, out, err = node.run("-v")
    assert rc == EXIT_FAILED
    assert out.startswith("fabricops-health: hca_port mlx5_1/1: state DOWN") and "(+1 more" in out
    assert "fail hca_port: mlx5_3/1: rate 200 Gb/s" in err


def test_a_rate_below_the_expected_fails_naming_measured_and_expected(node):
    node.port("mlx5_2/1", rate="200 Gb/sec (2X NDR)")
    rc, out, _ = node.run()
    assert rc == EXIT_FAILED
    assert out == "fabricops-health: hca_port mlx5_2/1: rate 200 Gb/s (2X NDR), expected 400 Gb/s\n"


def test_a_named_port_overrides_its_link_layer_and_a_missing_one_fails(node):
    node.config.write_text(json.dumps({"expected_rate_gbps": {"InfiniBand": 400, "mlx5_2/1": 200,
                                                              "mlx5_9/1": 400}}))
    node.port("mlx5_2/1", rate="200 Gb/sec (2X NDR)")
    rc, out, _ = node.run()
    assert rc == EXIT_FAILED
    assert out.startswith("fabricops-health: hca_port mlx5_9/1: not found in ")


def test_ports_of_another_link_layer_are_not_judged_but_too_few_fabric_ports_fail(node):
    node.port("mlx5_3/1", state="1: DOWN", phys_state="3: Disabled", link_layer="Ethernet")
    rc, out, _ = node.run()  # the Ethernet port is not the compute fabric ...
    assert rc == EXIT_FAILED  # ... but health.ports says 4 InfiniBand ports
    assert out == "fabricops-health: hca_port: 3 fabric ports found, expected 4\n"


def test_gpu_count_and_nvlink_from_real_captures(node):
    node.smi(gpu_csv(range(7)), h800_8_gpus())
    rc, out, _ = node.run()
    assert (rc, out) == (EXIT_FAILED, "fabricops-health: gpu_count: 7 GPUs, expected 8\n")

    # V100 with links 3 and 5 inactive (Azure/azhpc-diagnostics#73)
    node.smi(gpu_csv([3]), (FIXTURES / "nvidia-smi-nvlink" / "v100_two_inactive_links.txt").read_text())
    node.write_config(gpus=1, nvlink_links=6)
    rc, out, _ = node.run()
    assert (rc, out) == (EXIT_FAILED, "fabricops-health: nvlink GPU3: link(s) 3, 5 inactive; 4 of 6 links "
                                      "active\n")

    # RTX A6000: GPU 2 prints no Link line at all ("all links are inActive")
    rtx = (FIXTURES / "nvidia-smi-nvlink" / "rtx_a6000_all_links_inactive.txt").read_text()
    node.smi(gpu_csv(range(3)), rtx)
    node.write_config(gpus=3, nvlink_links=4)
    rc, out, _ = node.run()
    assert (rc, out) == (EXIT_FAILED, "fabricops-health: nvlink GPU2: 0 of 4 links active\n")


def test_gpus_not_asked_for_are_not_read(node):
    node.write_config(gpus=0, nvlink_links=0)
    assert node.run()[0] == EXIT_OK
    assert node.calls("nvidia-smi") == []


# --- could not check ---------------------------------------------------------------------------

def test_a_missing_config_could_not_check_and_drains_nothing(node):
    node.config.unlink()
    node.slurm("IDLE")
    rc, out, err = node.run("--drain")
    assert rc == EXIT_NORUN
    assert out.startswith(f"fabricops-health: could not check: config {node.config}: no such file")
    assert node.updates() == []
    assert "not drained: the config is unreadable" in err


@pytest.mark.parametrize(("health", "says"), [
    ({"gpus": -1}, "health.gpus: -1 is not a count"),
    ({"ports": True}, "health.ports: True is not a count"),
    ({"timeout_s": 0}, "health.timeout_s: 0 is not a number of seconds"),
])
def test_a_config_with_bad_counts_could_not_check(node, health, says):
    node.write_config(**health)
    rc, out, _ = node.run()
    assert rc == EXIT_NORUN and says in out


def test_an_absent_sysfs_could_not_check_and_drains(node):
    node.slurm("IDLE")
    rc, out, _ = node.run("--drain", "--sysfs", str(node.tmp / "nothing"))
    assert rc == EXIT_NORUN
    assert out.startswith("fabricops-health: could not check: hca_port sysfs: ")
    drain = ["update", f"NodeName={NODE}", "State=DRAIN", "Reason=fabricops: hca_port sysfs"]
    assert node.updates() == [drain]


def test_a_command_that_times_out_could_not_check(node, monkeypatch):
    monkeypatch.setenv("FAKE_SMI_SLEEP", "30")
    node.write_config(timeout_s=0.3)
    rc, out, _ = node.run()
    assert rc == EXIT_NORUN
    assert out.startswith("fabricops-health: could not check: gpu_count nvidia-smi: nvidia-smi --query-gpu "
                          "timed out after 0.3 s")


def test_a_command_that_fails_or_prints_something_else_could_not_check(node):
    node.smi("No devices were found\n", "")
    rc, out, _ = node.run()
    assert rc == EXIT_NORUN and "could not check: gpu_count nvidia-smi: " in out
    node.config.write_text(json.dumps({**json.loads(node.config.read_text()),
                                       "nvidia_smi": str(node.tmp / "no-such-smi")}))
    rc, out, _ = node.run()
    assert rc == EXIT_NORUN and "could not start" in out


def test_a_failure_outranks_an_error(node):
    node.port("mlx5_0/1", rate="garbage")
    node.port("mlx5_1/1", state="1: DOWN", phys_state="3: Disabled")
    rc, out, _ = node.run()
    assert rc == EXIT_FAILED and "mlx5_1/1" in out


# --- whose drain is it -------------------------------------------------------------------------

def test_a_node_drained_by_someone_else_is_never_redrained_or_resumed(node):
    node.slurm("IDLE+DRAIN", "maintenance")
    node.port("mlx5_1/1", state="1: DOWN", phys_state="3: Disabled")
    rc, _, err = node.run("--drain", "--resume-own")
    assert rc == EXIT_FAILED and node.updates() == []
    assert "left alone: its reason is someone else's (maintenance)" in err
    node.port("mlx5_1/1", **UP)
    rc, _, err = node.run("--drain", "--resume-own")
    assert rc == EXIT_OK and node.updates() == []
    assert "not resumed: drained by someone else (maintenance)" in err
    # not drained, but with someone's reason on it: that reason is not written over either
    node.slurm("IDLE", "checking cables, do not touch")
    node.port("mlx5_1/1", state="1: DOWN", phys_state="3: Disabled")
    assert node.run("--drain")[0] == EXIT_FAILED and node.updates() == []


def test_resume_own_resumes_a_fabricops_drain_only_when_healthy(node):
    node.slurm("IDLE+DRAIN", "fabricops: hca_port mlx5_1/1")
    node.port("mlx5_1/1", state="1: DOWN", phys_state="3: Disabled")
    assert node.run("--resume-own")[0] == EXIT_FAILED
    assert node.updates() == []  # still bad: stays drained (and without --drain nothing is written)
    node.port("mlx5_1/1", **UP)
    rc, _, err = node.run("--drain", "--resume-own")
    assert rc == EXIT_OK
    assert node.updates() == [["update", f"NodeName={NODE}", "State=RESUME"]]
    assert f"{NODE}: resumed (fabricops: hca_port mlx5_1/1)" in err


def test_resume_own_leaves_the_intensive_tiers_drains_and_undrained_nodes(node):
    node.slurm("MIXED+DRAIN", "fabricops: ib_write_bw gpu01<->gpu02")
    rc, _, err = node.run("--resume-own")
    assert rc == EXIT_OK and node.updates() == []
    assert "is not a light-tier check" in err
    node.slurm("IDLE", None)
    assert node.run("--resume-own") == (EXIT_OK, "", "")
    assert node.updates() == []


def test_down_nodes_are_left_to_slurm(node):
    node.slurm("DOWN*+NOT_RESPONDING")
    node.port("mlx5_1/1", state="1: DOWN", phys_state="3: Disabled")
    rc, _, err = node.run("--drain")
    assert rc == EXIT_FAILED and node.updates() == []
    assert "left alone: the node is DOWN+NOT_RESPONDING" in err


def test_an_unknown_node_is_reported_and_nothing_is_done(node):
    node.port("mlx5_1/1", state="1: DOWN", phys_state="3: Disabled")
    rc, _, err = node.run("--drain")  # FAKE_NODE_LINE unset: "Node gpu01 not found"
    assert rc == EXIT_FAILED and node.updates() == []
    assert ("could not read the node's state, nothing done: scontrol show node exited 1: Node gpu01 not "
            "found") in err


@pytest.mark.parametrize("name", ["gpu01;reboot", "gpu01 State=RESUME", "-o", "gpu01\nx", "../x", ""])
def test_node_names_that_are_not_plain_host_names_are_refused(node, name):
    node.slurm("IDLE")
    rc = health.main(["--config", str(node.config), "--sysfs", str(node.sysfs), "--node", name, "--drain"])
    assert rc == EXIT_USAGE
    assert node.calls() == []


def test_the_node_name_defaults_to_slurmd_nodename_then_the_short_hostname(monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "gpu07")
    assert health.node_name(None) == "gpu07" and health.node_name("gpu02") == "gpu02"
    monkeypatch.delenv("SLURMD_NODENAME")
    monkeypatch.setattr(health.socket, "gethostname", lambda: "gpu03.cluster.example")
    assert health.node_name(None) == "gpu03"


def test_reasons_are_built_only_from_safe_components():
    bad = health.Finding("hca_port", 'mlx5_1/1" State=RESUME', health.FAIL, "x")
    assert health.reason(bad, NODE) == "fabricops: hca_port"
    count = health.Finding("gpu_count", None, health.FAIL, "x")
    assert health.reason(count, NODE) == "fabricops: gpu_count gpu01"


def test_parse_node_reads_state_flags_and_the_reason_without_its_stamp():
    line = node_line("DOWN*+DRAIN", "fabricops: nvlink GPU3") + " Comment=rack 4"
    assert health.parse_node(line) == (["DOWN", "DRAIN"], "fabricops: nvlink GPU3")
    assert health.parse_node(node_line("IDLE")) == (["IDLE"], "")
    with pytest.raises(health.SourceError):
        health.parse_node("slurm_load_node error: Unable to contact slurm controller")


# --- one result type ---------------------------------------------------------------------------

def test_findings_are_results_of_the_one_result_type(node):
    node.port("mlx5_1/1", state="1: DOWN", phys_state="3: Disabled")
    rc, out, _ = node.run("--json")
    rows = json.loads(out)
    assert rc == EXIT_FAILED and len(rows) == 4 + 1 + 8
    assert (health.PASS, health.FAIL, health.ERROR) == (result.PASS, result.FAIL, result.ERROR)
    results = [result.Result(**row) for row in rows]
    bad = [r for r in results if not r.ok]
    assert [(r.check, r.component.kind, r.component.name) for r in bad] == [
        ("hca_port", "hca_port", "mlx5_1/1")]
    assert {r.component.kind for r in results} == {"hca_port", "host", "gpu"}
