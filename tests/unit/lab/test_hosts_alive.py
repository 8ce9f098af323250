"""hosts.alive: a process reaped while it is being looked at is not alive (CI stop 31:
`lab down` raised FileNotFoundError on /proc/PID/stat between the check and the read)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from fabricops.lab import hosts


def test_running_process_is_alive():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert hosts.alive(proc.pid)
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
    assert not hosts.alive(pid)
    proc.wait()
    assert not hosts.alive(pid)
    assert not hosts.alive(None)


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
        assert hosts.alive(proc.pid) is False
    finally:
        monkeypatch.undo()
        proc.kill()
        proc.wait()
