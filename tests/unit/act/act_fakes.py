"""An in-memory Slurm that answers scontrol's argv as scontrol would, and verify reports to act on.

``FakeSlurm`` is a runner (argv -> rc, stdout, stderr): ``scontrol [-o] show node`` prints the
nodes in scontrol's key=value form (one line per node with ``-o``); ``scontrol update
nodename=N state=drain reason=R`` / ``state=resume`` change them with scontrol's refusals (an
unknown node, a drain without a reason, a resume of a node that is not drained or down). It takes
only argv lists of strings: a shell string would fail the test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fabricops.result import Result

NOW = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FakeNode:
    state: str = "IDLE"
    flags: set[str] = field(default_factory=set)
    partitions: list[str] = field(default_factory=lambda: ["gpu"])
    reason: str = ""
    reason_by: str = "root@2026-12-06T11:00:00"


class FakeSlurm:
    def __init__(self, nodes: dict[str, FakeNode] | None = None, *, down: bool = False):
        self.nodes = nodes or {}
        self.calls: list[list[str]] = []
        self.down = down  # slurmctld not answering

    @classmethod
    def cluster(cls, n: int = 16, partition: str = "gpu", **states: FakeNode) -> FakeSlurm:
        nodes = {f"gpu{i:02d}": FakeNode(partitions=[partition]) for i in range(1, n + 1)}
        nodes.update(states)
        return cls(nodes)

    @property
    def updates(self) -> list[list[str]]:
        return [c for c in self.calls if c[1:2] == ["update"]]

    def drained(self) -> dict[str, str]:
        return {name: n.reason for name, n in self.nodes.items() if "DRAIN" in n.flags}

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv), argv
        self.calls.append(list(argv))
        if argv[0] != "scontrol":
            return 127, "", f"{argv[0]}: command not found"
        if self.down:
            return 1, "", "slurm_load_node error: Unable to contact slurm controller (connect failure)"
        args, oneliner = argv[1:], False
        while args and args[0].startswith("-"):
            if args[0] not in ("-o", "--oneliner"):
                return 1, "", f"scontrol: unrecognized option '{args[0]}'"
            oneliner, args = True, args[1:]
        if args[:2] in (["show", "node"], ["show", "nodes"]):
            return 0, self.show(oneliner), ""
        if args[:1] == ["update"]:
            return self.update(args[1:])
        return 1, "", f"invalid keyword: {' '.join(args)}"

    def show(self, oneliner: bool) -> str:
        recs = []
        for name, n in self.nodes.items():
            state = "+".join([n.state, *sorted(n.flags)])
            fields = [
                f"NodeName={name} Arch=x86_64 CoresPerSocket=8",
                "CPUAlloc=0 CPUTot=16 CPULoad=0.01",
                f"NodeAddr={name} NodeHostName={name} Version=23.11.4",
                "OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)",
                f"State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
                f"Partitions={','.join(n.partitions)}",
                "CfgTRES=cpu=16,mem=64000M,billing=16,gres/gpu=8",
                "AllocTRES=",
            ]
            if n.reason:
                fields.append(f"Reason={n.reason} [{n.reason_by}]")
            recs.append(" ".join(fields) if oneliner else "\n   ".join(fields) + "\n")
        return "\n".join(recs) + "\n"

    def update(self, words: list[str]) -> tuple[int, str, str]:
        kv = {}
        for w in words:
            key, sep, value = w.partition("=")
            if not sep:
                return 1, "", f"scontrol: error: Invalid input: {w}"
            kv[key.lower()] = value
        name = kv.get("nodename", "")
        node = self.nodes.get(name)
        if node is None:
            return 1, "", f"slurm_update error: Invalid node name specified ({name})"
        state = kv.get("state", "").lower()
        if state == "drain":
            if not kv.get("reason"):
                return 1, "", "You must specify a reason when DOWNING or DRAINING a node. Request denied"
            node.flags.add("DRAIN")
            node.reason, node.reason_by = kv["reason"], "slurm@2026-12-06T12:00:00"
            return 0, "", ""
        if state == "resume":
            if "DRAIN" not in node.flags and node.state != "DOWN":
                return 1, "", "slurm_update error: Invalid node state specified"
            node.flags.discard("DRAIN")
            node.state = "IDLE"
            node.reason = ""
            return 0, "", ""
        return 1, "", f"slurm_update error: Invalid node state specified ({state})"


# --- verify reports --------------------------------------------------------------------------------

HOSTS = [f"gpu{i:02d}" for i in range(1, 17)]
RAILS = [
    {"index": 0, "name": "mlx5_0/1", "link_layer": "InfiniBand", "switch": "ib-leaf1", "hosts": HOSTS},
    {"index": 1, "name": "mlx5_1/1", "link_layer": "InfiniBand", "switch": "ib-leaf2", "hosts": HOSTS},
]


def res(
    category: str,
    check: str,
    host: str,
    device: str | None = None,
    status: str = "fail",
    message: str | None = None,
    **kw: Any,
) -> dict[str, Any]:
    msg = message or f"{host} {device or ''}: {check} {status}".replace("  ", " ")
    return Result(category, check, host, device, status, msg, observed_at=iso(NOW), **kw).to_data()


def port_down(host: str, device: str = "mlx5_0/1") -> dict[str, Any]:
    return res(
        "hosts",
        "hca_port",
        host,
        device,
        message=f"{host} {device}: state Down, physical state Polling (want Active/LinkUp)",
        cause="link down",
        threshold="Active/LinkUp",
    )


def _failing_hosts(results: list[dict[str, Any]], blamed: list[dict[str, Any]]) -> set[str]:
    bad = set()
    for r in results:
        if r["status"] in ("pass", "skip"):
            continue
        part = (r.get("details") or {}).get("explained_by")
        if isinstance(part, dict):
            if part.get("kind") == "hca_port":
                bad.add(part["host"])
            continue
        if "<->" in r["host"]:
            ends = r["host"].split("<->")
            bad.update(b["host"] for b in blamed if b["host"] in ends)
            continue
        if r["check"] == "switch_port":
            continue
        bad.add(r["host"])
    return bad


def report(
    failing: list[dict[str, Any]],
    hosts: list[str] | None = None,
    *,
    rails=None,
    blamed=(),
    generated: datetime | None = NOW - timedelta(minutes=2),
    valid_for: timedelta | None = timedelta(hours=1),
    **extra: Any,
) -> dict[str, Any]:
    hosts = list(HOSTS if hosts is None else hosts)
    blamed = list(blamed)
    passes = [res("hosts", "ofed_version", h, status="pass") for h in hosts]
    allres = passes + failing
    bad = _failing_hosts(failing, blamed)
    ok = not any(r["status"] in ("fail", "error") for r in failing)
    doc: dict[str, Any] = {
        "schema": "fabricops.verify/1",
        "ok": ok,
        "exit_status": 0 if ok else 1,
        "profile": "hgx-h100-ndr",
        "only": None,
        "hosts": hosts,
        "not_checked": {},
        "wall_s": 1.0,
        "pairs": {"rails": RAILS if rails is None else rails},
        "blamed": blamed,
        "host_verdicts": {h: {"verdict": "fail" if h in bad else "pass", "why": ""} for h in hosts},
        "bad_parts": [],
        "results": allres,
    }
    if generated is not None:
        doc["generated_at"] = iso(generated)
        if valid_for is not None:
            doc["valid_until"] = iso(generated + valid_for)
    doc.update(extra)
    return doc


# --- one run of act --------------------------------------------------------------------------------


@dataclass
class Run:
    status: int
    out: str
    doc: dict[str, Any]

    def actions(self, kind: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        return [
            a
            for a in self.doc["actions"]
            if (kind is None or a["action"] == kind) and (status is None or a["status"] == status)
        ]

    def targets(self, kind: str, status: str | None = None) -> list[str]:
        return [a["target"] for a in self.actions(kind, status)]


def run_act(
    doc: dict[str, Any],
    slurm: FakeSlurm,
    state: Any,
    *,
    now: datetime = NOW,
    execute: bool = False,
    rails: Any = None,
    table_text: str | None = None,
    node_of=None,
    path: str = "verify.json",
    switches: Any = None,
) -> Run:
    import io
    import json

    from fabricops.act import cli
    from fabricops.act.plan import Rails
    from fabricops.act.slurm import Slurm
    from fabricops.act.state import ActionLog
    from fabricops.act.table import load_table
    from fabricops.act.verdict import check_report

    verdict = check_report(doc, path, now)
    out = io.StringIO()
    plans = state.with_name(state.name + "-plans")
    plans.mkdir(parents=True, exist_ok=True)
    dest = plans / f"plan-{len(list(plans.glob('plan-*')))}.json"
    status = cli.act(
        verdict,
        load_table(table_text),
        Slurm(slurm, "the fake controller"),
        node_of or (lambda h: h),
        ActionLog(state),
        now,
        rails or Rails(),
        execute=execute,
        out=out,
        json_dest=str(dest),
        switches=switches,
    )
    return Run(status, out.getvalue(), json.loads(dest.read_text()))
