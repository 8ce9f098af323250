"""procs.alive: a process reaped while it is being looked at is not alive (CI stop 31:
`lab down` raised FileNotFoundError on /proc/PID/stat between the check and the read)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from fabricops_lab import procs


def test_running_process_is_alive():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert procs.alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_zombie_and_reaped_processes_are_not_alive():
    proc = subprocess.Popen(["true"])
    pid = proc.pid
    # let it exit without reaping: a zombie
    for _ in range(200):
        if ") Z " in Path(f"/proc/{pid}/stat").read_text():
            break
        time.sleep(0.01)
    assert not procs.alive(pid)
    proc.wait()
    assert not procs.alive(pid)
    assert not procs.alive(None)


def test_process_gone_between_signal_and_stat_read(monkeypatch):
    """The race CI hit: kill(pid, 0) succeeds, then the process is reaped before /proc is read."""
    proc = subprocess.Popen(["sleep", "30"])
    real_read = Path.read_text

    def vanished(self, *a, **kw):
        if str(self) == f"/proc/{proc.pid}/stat":
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return real_read(self, *a, **kw)

    try:
        monkeypatch.setattr(Path, "read_text", vanished)
        assert procs.alive(proc.pid) is False
    finally:
        monkeypatch.undo()
        proc.kill()
        proc.wait()


def test_a_command_name_holding_a_parenthesis_does_not_fool_the_state_read(tmp_path):
    """comm is free text in parentheses; the state is the field after the last ') '."""
    exe = tmp_path / "x) Z y"
    exe.symlink_to("/bin/sleep")
    proc = subprocess.Popen([str(exe), "30"])
    try:
        assert ") Z " in Path(f"/proc/{proc.pid}/stat").read_text()
        assert procs.alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
