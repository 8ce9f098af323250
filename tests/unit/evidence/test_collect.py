"""fabricops.evidence.collect: one batch per host where the transport has one, else one call per command."""

from __future__ import annotations

import json
from typing import Any

from fabricops.diagnose import collect as dcollect
from fabricops.evidence.collect import batch_of, collect

CMDS = {"a": "echo a", "b": "exit 3", "c": "echo c"}


def answer(host: str, cmd: str) -> dict[str, Any]:
    return {"rc": 3 if cmd.startswith("exit") else 0, "stdout": f"{host}:{cmd}\n", "stderr": ""}


class Transport:
    """A transport with ``run`` and ``batch``, counting the sessions each host gets."""

    def __init__(self, answers=answer):
        self.answers = answers
        self.runs: list[tuple[str, str]] = []
        self.batches: list[tuple[str, list[str], float]] = []

    def run(self, host: str, cmd: str, timeout: float = 60) -> dict[str, Any]:
        self.runs.append((host, cmd))
        return self.answers(host, cmd)

    __call__ = run

    def batch(self, host: str, commands, timeout: float = 60) -> dict[str, dict]:
        self.batches.append((host, list(commands), timeout))
        return {k: self.answers(host, c) for k, c in commands.items()}


def test_a_plain_function_runs_each_command_in_order():
    calls = []

    def run(host, cmd, timeout):
        calls.append((host, cmd, timeout))
        return answer(host, cmd)

    got = collect(run, "h1", CMDS, 9)
    assert calls == [("h1", c, 9) for c in CMDS.values()]
    assert list(got) == list(CMDS) and got["b"]["rc"] == 3 and got["a"]["stdout"] == "h1:echo a\n"
    assert batch_of(run) is None


def test_a_transport_with_batch_gets_one_session_per_host():
    t = Transport()
    per_command = collect(lambda h, c, to: answer(h, c), "h1", CMDS, 9)
    for run in (t, t.run):  # the object itself, or its bound run (diagnose passes fabric.run)
        t.batches.clear()
        assert collect(run, "h1", CMDS, 9) == per_command
        assert t.batches == [("h1", list(CMDS), 9)] and t.runs == []
    assert collect(t, "h1", {}, 9) == {} and len(t.batches) == 1  # nothing to run: no session


def test_a_key_the_batch_left_out_is_no_evidence():
    t = Transport()
    t.batch = lambda host, commands, timeout: {"a": answer(host, "echo a")}
    got = collect(t, "h1", CMDS, 9)
    assert list(got) == list(CMDS)
    assert got["a"]["rc"] == 0
    none = {"rc": 255, "stdout": "", "stderr": "h1: no answer for this command in the batch"}
    assert got["b"] == got["c"] == none


SYSFS = (
    "mlx5_0/ports/1/link_layer:Ethernet\nmlx5_0/ports/1/state:4: ACTIVE\n"
    "mlx5_1/ports/1/link_layer:InfiniBand\nmlx5_1/ports/1/state:4: ACTIVE\n"
    "netdev:mlx5_0/device/net/eth2\nnetdev:mlx5_1/device/net/ib0\n"
)


def lab(host: str, cmd: str) -> dict[str, Any]:
    if cmd == dcollect.SYSFS_CMD:
        return {"rc": 0, "stdout": SYSFS, "stderr": ""}
    if cmd == "ip -j addr show":
        n = host[-1]
        inet = {"family": "inet", "local": f"10.0.0.{n}", "prefixlen": 24}
        addrs = [{"ifname": "ib0", "addr_info": [inet]}]
        return {"rc": 0, "stdout": json.dumps(addrs), "stderr": ""}
    return {"rc": 0, "stdout": f"{host}:{cmd}\n", "stderr": ""}


def test_diagnose_collects_per_round_one_batch_per_host_with_the_same_evidence():
    hosts = ["gpu1", "gpu2"]
    t = Transport(lab)
    lines: list[str] = []
    batched = dcollect.collect(t.run, hosts, lines.append)
    assert lines == ["evidence from 2 hosts"] and t.runs == []
    plain = dcollect.collect(lambda h, c, to: lab(h, c), hosts)
    assert batched == plain
    for h in hosts:
        rounds = [(keys, to) for host, keys, to in t.batches if host == h]
        assert [len(k) for k, _ in rounds] == [len(dcollect.BASE_COMMANDS), 2, 1]
        assert rounds[1][0] == ["mlnx_qos:eth2", "ethtool:eth2"] and rounds[2][1] == 15
    assert "sleep 2" in dcollect.host_commands(plain["gpu1"])["ethtool:eth2"]  # the gap stays in the command
    assert list(plain["gpu1"])[-1] == "ping:gpu2:10.0.0.2"
