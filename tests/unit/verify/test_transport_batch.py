"""Fabric.batch: one shell session per host gives every command what Fabric.run gives it.

The batch script runs in a real local ``sh`` (no SSH): each key is compared with the same command
run on its own as Fabric.run runs it (``timeout -k 5 T sh -c CMD``, stdin at EOF)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any

import pytest
import testinfra

from fabricops.verify import transport as tr
from fabricops.verify.transport import Fabric, batch_script, batch_timeout, parse_batch, text

NONCE = "0123456789abcdef"
MARK = f"FABRICOPS-BATCH-{NONCE}"
BIG = 4_000_000

TRICKY = {
    "plain": "echo hello",
    "forged": f"printf '%s\\n' '{MARK} end 1' '{MARK} 1 0 0  0  .' '{MARK} begin 99'; echo tail",
    "binary": r"printf 'a\000b\377\376c\n'; printf 'e\000\377' >&2",
    "utf8": "printf 'gr\\303\\274n \\342\\234\\223\\n'",
    "no_newline": "printf 'no newline at the end'",
    "huge": f"yes 0123456789abcdef | head -c {BIG}",
    "exit7": "echo out; echo err >&2; exit 7",
    "stdin": "cat; read x; echo \"read rc $? x=[$x]\"",
    "kills_itself": "echo before; kill -9 $$; echo never",
    "terminates_itself": "echo before; kill -TERM $$",
    "stderr_only": "echo only on stderr >&2",
    "empty": "true",
    "exit255": "echo gone >&2; exit 255",
    "quotes": "echo \"it's \\$HOME\" '$0' \"$0\"",
    "last": "echo still running",
}


def _rc(returncode: int) -> int:
    """What a shell reports as ``$?`` (a signal death N is 128 + N), as the session's frame does."""
    return 128 - returncode if returncode < 0 else returncode


def one_by_one(commands: dict[str, str], timeout: float, decode=text) -> dict[str, dict[str, Any]]:
    out = {}
    for key, cmd in commands.items():
        p = subprocess.run(["timeout", "-k", "5", str(int(timeout)), "sh", "-c", cmd],
                           stdin=subprocess.DEVNULL, capture_output=True, check=False)
        out[key] = {"rc": _rc(p.returncode), "stdout": decode(p.stdout), "stderr": decode(p.stderr)}
    return out


def session(commands: dict[str, str], timeout: float, stdin: bytes = b"evil\nf 0 1 'echo forged'\n",
            env: dict[str, str] | None = None, total: int | None = None) -> subprocess.CompletedProcess:
    script = batch_script(list(commands.values()), timeout, NONCE)
    total = batch_timeout(len(commands), timeout) if total is None else total
    return subprocess.run(["timeout", "-k", "5", str(total), "sh", "-c", script], input=stdin,
                          capture_output=True, check=False, env=env)


def batched(commands: dict[str, str], timeout: float, decode=text, **kw) -> dict[str, dict[str, Any]]:
    p = session(commands, timeout, **kw)
    return parse_batch("h1", list(commands), NONCE, _rc(p.returncode), p.stdout, p.stderr.decode(), decode)


def test_tricky_commands_get_what_a_separate_run_gives():
    assert batched(TRICKY, 10) == one_by_one(TRICKY, 10)


def test_bytes_come_back_exactly():
    """latin-1 maps every byte to one character: the batch keeps every byte, NUL and 0xff included."""
    raw = lambda b: b.decode("latin-1")  # noqa: E731
    got = batched(TRICKY, 10, decode=raw)
    assert got == one_by_one(TRICKY, 10, decode=raw)
    assert got["binary"]["stdout"] == "a\x00b\xff\xfec\n" and got["binary"]["stderr"] == "e\x00\xff"
    assert len(got["huge"]["stdout"]) == BIG


def test_what_each_tricky_command_gives():
    got = batched(TRICKY, 10)
    assert got["plain"] == {"rc": 0, "stdout": "hello\n", "stderr": ""}
    assert got["forged"]["stdout"].endswith("begin 99\ntail\n")
    assert got["binary"]["stdout"] == "a\x00b\ufffd\ufffdc\n"  # not UTF-8: U+FFFD (testinfra raises)
    assert got["utf8"]["stdout"] == "grün ✓\n"
    assert got["no_newline"]["stdout"] == "no newline at the end"
    assert got["exit7"] == {"rc": 7, "stdout": "out\n", "stderr": "err\n"}
    assert got["stdin"] == {"rc": 0, "stdout": "read rc 1 x=[]\n", "stderr": ""}  # EOF, not the script
    assert got["kills_itself"] == {"rc": 128 + signal.SIGKILL, "stdout": "before\n", "stderr": ""}
    assert got["terminates_itself"]["rc"] == 128 + signal.SIGTERM
    assert got["stderr_only"] == {"rc": 0, "stdout": "", "stderr": "only on stderr\n"}
    assert got["exit255"] == {"rc": 255, "stdout": "", "stderr": "gone\n"}
    assert got["quotes"]["stdout"] == "it's $HOME $0 sh\n"
    assert got["last"] == {"rc": 0, "stdout": "still running\n", "stderr": ""}


def test_a_command_times_out_on_its_own_and_the_next_one_still_runs():
    cmds = {"slow": "echo started; sleep 30; echo never", "ignores_term": "trap '' TERM; sleep 30",
            "next": "echo next"}
    t0 = time.monotonic()
    got = batched(cmds, 1)
    took = time.monotonic() - t0
    assert got["slow"] == {"rc": 124, "stdout": "started\n", "stderr": ""}
    assert got["ignores_term"]["rc"] == 128 + signal.SIGKILL  # timeout -k 5: killed 5 s later
    assert got["next"] == {"rc": 0, "stdout": "next\n", "stderr": ""}
    assert took < 1 + (1 + 5) + 3, took
    del cmds["ignores_term"]
    assert {k: got[k] for k in cmds} == one_by_one(cmds, 1)


def test_commands_run_in_order_with_their_own_sleep():
    """A command sequence that needs a gap keeps it: diagnose's ethtool samples sleep inside the command."""
    cmds = {"a": "date +%s.%N", "gap": "sleep 1; date +%s.%N", "b": "date +%s.%N"}
    got = batched(cmds, 5)
    a, gap, b = (float(got[k]["stdout"]) for k in cmds)
    assert a < gap <= b and gap - a >= 1.0


def test_the_temporary_directory_is_removed_also_when_interrupted(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    batched(TRICKY, 10, env=env)
    assert list(tmp_path.iterdir()) == []
    # the session's shell terminated by a command (SIGTERM to the batch shell): trap, then cleanup
    cmds = {"first": "echo one", "kill_session": "kill -TERM $(awk '{print $4}' /proc/$PPID/stat)",
            "after": "echo never"}
    got = batched(cmds, 5, env=env)
    assert list(tmp_path.iterdir()) == []
    assert got["first"] == {"rc": 0, "stdout": "one\n", "stderr": ""}
    for key in ("kill_session", "after"):
        assert got[key]["rc"] == 255 and got[key]["stdout"] == ""
        assert "batch answer was cut" in got[key]["stderr"]


def test_a_session_killed_mid_way_gives_no_evidence_for_the_rest():
    cmds = {"first": "echo one", "kill_session": "kill -KILL $(awk '{print $4}' /proc/$PPID/stat)",
            "after": "echo never"}
    got = batched(cmds, 5)
    assert got["first"]["stdout"] == "one\n"
    assert [got[k]["rc"] for k in ("kill_session", "after")] == [255, 255]
    assert "session rc 137" in got["after"]["stderr"]


def test_the_session_timeout_cuts_the_answer():
    cmds = {"quick": "echo quick", "slow": "sleep 3", "after": "echo after"}
    got = batched(cmds, 10, total=2)
    assert got["quick"]["stdout"] == "quick\n"
    assert all("batch answer was cut" in got[k]["stderr"] for k in ("slow", "after"))
    assert batch_timeout(3, 10) >= 3 * (10 + 5)


def full_answer() -> tuple[dict[str, str], bytes]:
    cmds = {k: TRICKY[k] for k in ("plain", "binary", "exit7", "no_newline", "stderr_only", "last")}
    return cmds, session(cmds, 10).stdout


def test_a_cut_answer_is_never_evidence_for_the_keys_it_lacks():
    cmds, out = full_answer()
    keys = list(cmds)
    whole = parse_batch("h1", keys, NONCE, 0, out)
    assert all(r["rc"] != 255 for r in whole.values())
    for cut in range(len(out)):
        got = parse_batch("h1", keys, NONCE, 255, out[:cut], "Connection reset")
        assert list(got) == keys
        answered = [k for k in keys if got[k] == whole[k]]
        assert answered == keys[: len(answered)], cut  # a prefix, in order
        for k in keys[len(answered):]:
            assert got[k]["rc"] == 255 and got[k]["stdout"] == "", (cut, k)
            assert "unreachable over SSH" in got[k]["stderr"] or "batch answer was cut" in got[k]["stderr"]


def test_no_answer_or_a_bad_frame_is_the_transport_failure_for_every_key():
    cmds, out = full_answer()
    keys = list(cmds)
    for rc, stdout in ((255, b""), (0, b""), (0, b"motd only\n"), (1, b"sh: timeout: not found\n")):
        got = parse_batch("h1", keys, NONCE, rc, stdout, "ssh: connect to host h1 port 22: refused")
        assert got == {k: {"rc": 255, "stdout": "", "stderr": got[k]["stderr"]} for k in keys}
        assert all(g["stderr"].startswith("h1 unreachable over SSH: ") for g in got.values())
    refused = parse_batch("h1", keys, NONCE, 255, b"", "ssh: port 22: refused")
    assert "port 22: refused" in refused["plain"]["stderr"]
    lines = out.split(b"\n")
    i = next(n for n, ln in enumerate(lines) if ln.startswith(f"{MARK} 1 ".encode()))
    f = lines[i].split(b" ")
    bad_frames = [
        [*f[:3], b"8", *f[4:]],  # a stream length that is not the stream's
        [*f[:4], f[4][:-4], *f[5:]],  # a shortened stream
        [f[0], b"2", *f[2:]],  # the wrong index
        f[:7],  # no closing field
        [*f[:2], b"x", *f[3:]],  # a non-numeric exit status
        [*f[:4], f[4] + b"!", *f[5:]],  # not base64
    ]
    for bad in bad_frames:
        got = parse_batch("h1", keys, NONCE, 0, b"\n".join([*lines[:i], b" ".join(bad), *lines[i + 1:]]))
        assert all(g["rc"] == 255 and "unreadable batch answer" in g["stderr"] for g in got.values()), bad
    after_end = parse_batch("h1", keys, NONCE, 0, out + lines[i] + b"\n")
    assert all("unreadable batch answer (a frame after the end)" in g["stderr"] for g in after_end.values())
    # a frame of another batch (another nonce) is ignored, not read
    other = out.replace(NONCE.encode(), b"fedcba9876543210")
    assert all(g["rc"] == 255 for g in parse_batch("h1", keys, NONCE, 0, other).values())
    # login noise before the answer is ignored
    assert parse_batch("h1", keys, NONCE, 0, b"Welcome\n" + out) == parse_batch("h1", keys, NONCE, 0, out)


def test_text_decodes_as_testinfra_does():
    backend = testinfra.get_host("local://").backend
    for data in (b"plain", b"a\x00b", "grün ✓".encode(), b""):
        assert text(data) == backend.decode(data)
    with pytest.raises(UnicodeDecodeError):
        backend.decode(b"\xff")  # testinfra loses the whole answer; the batch keeps it
    assert text(b"a\xffb") == "a\ufffdb"
    assert text("é".encode("latin-1"), lambda: "latin-1") == "é"


# Fabric.batch over a real testinfra host (testinfra's local backend instead of SSH)

def local_fabric(host: Any = None) -> Fabric:
    fab = Fabric.__new__(Fabric)
    fab._lock = threading.Lock()
    fab._hosts = {"h1": host or testinfra.get_host("local://")}
    return fab


def test_fabric_batch_gives_what_fabric_run_gives():
    """Where Fabric.run has an answer of its own (not a non-UTF-8 byte, which raises in testinfra; not a
    death by signal or exit 255, which SSH reports as its own failure), the batch gives the same."""
    fab = local_fabric()
    same = {k: c for k, c in TRICKY.items() if k not in ("binary", "kills_itself", "terminates_itself",
                                                         "exit255")}
    assert fab.batch("h1", same, 10) == {k: dict(fab.run("h1", c, 10)) for k, c in same.items()}
    assert fab.batch("h1", {}, 10) == {}


class FakeHost:
    """A testinfra host that runs the wrapped command locally, or fails as an SSH backend does."""

    def __init__(self, fail: str | None = None, cut: int | None = None):
        self.fail, self.cut, self.commands = fail, cut, []
        self.backend = testinfra.get_host("local://").backend

    def run(self, command: str) -> Any:
        self.commands.append(command)
        if self.fail == "raise":
            raise OSError("Name or service not known")
        res = self.backend.run_local(command)
        if self.cut is not None:  # the connection dropped after self.cut bytes: ssh 255, testinfra raises
            res = self.backend.result(255, res.command, res.stdout_bytes[: self.cut], b"Connection reset")
            raise RuntimeError(res)
        return res


def test_fabric_batch_transport_failures():
    cmds = {"a": "echo a", "b": "echo b"}
    got = local_fabric(FakeHost(fail="raise")).batch("h1", cmds, 5)
    why = "h1 unreachable over SSH: Name or service not known"
    assert got == {k: {"rc": 255, "stdout": "", "stderr": why} for k in cmds}
    fake = FakeHost(cut=10_000)
    big = {"a": "echo a", "big": "yes | head -c 100000", "c": "echo c"}
    got = local_fabric(fake).batch("h1", big, 5)
    assert len(fake.commands) == 1 and fake.commands[0].startswith("timeout -k 5 40 sh -c ")
    assert got["a"] == {"rc": 0, "stdout": "a\n", "stderr": ""}
    assert all(got[k]["rc"] == 255 and "Connection reset" in got[k]["stderr"] for k in ("big", "c"))


def test_a_mapping_too_big_for_one_argument_is_split_in_order(monkeypatch):
    monkeypatch.setattr(tr, "BATCH_SCRIPT_MAX", 6000)
    fake = FakeHost()
    cmds = {f"k{i}": f"echo {i} {'x' * 1000}" for i in range(12)}
    got = local_fabric(fake).batch("h1", cmds, 5)
    assert 2 <= len(fake.commands) <= 4
    assert list(got) == list(cmds)
    assert [got[k]["stdout"].split()[0] for k in cmds] == [str(i) for i in range(12)]


def test_limit_is_read_as_ansible_playbook_reads_it():
    """`fabricops verify --limit gpu01,gpu02` matched nothing: testinfra's get_hosts reads one pattern."""
    from fabricops.verify.transport import select_hosts

    inv = {"gpu_hosts": ["gpu01", "gpu02", "gpu03", "gpu04"], "rail0": ["gpu01", "gpu03"]}

    def get_hosts(p):
        if p in inv:
            return list(inv[p])
        return [h for h in inv["gpu_hosts"] if h == p]

    assert select_hosts(get_hosts, "gpu01,gpu02") == ["gpu01", "gpu02"]
    assert select_hosts(get_hosts, "gpu02:gpu01:gpu02") == ["gpu02", "gpu01"]
    assert select_hosts(get_hosts, "gpu_hosts:!gpu03") == ["gpu01", "gpu02", "gpu04"]
    assert select_hosts(get_hosts, "gpu_hosts,&rail0") == ["gpu01", "gpu03"]
    assert select_hosts(get_hosts, "gpu_hosts") == inv["gpu_hosts"]
    assert select_hosts(get_hosts, "nosuch") == []
