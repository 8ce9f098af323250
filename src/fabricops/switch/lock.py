"""One change at a time per switch, on this controller: a lock file per switch (``fcntl.flock``).

The lock file lives in ``$XDG_RUNTIME_DIR/fabricops/locks`` (else ``~/.cache/fabricops/locks``) and
holds who took it (user, host, pid, start time, what), so a second run names the change it waits
for. The kernel drops a flock when its holder dies, so a crashed run never leaves the switch locked.
Runs on other controllers are caught by the device-side check (see ``change.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from .model import SwitchError

__all__ = ["lock_dir", "switch_lock"]


def lock_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and Path(runtime).is_dir() else Path.home() / ".cache"
    return base / "fabricops" / "locks"


def _holder_text(raw: str) -> str:
    try:
        info = json.loads(raw)
        return (
            f"{info.get('what', 'a change')} by {info.get('user', '?')}@{info.get('host', '?')}, "
            f"pid {info.get('pid', '?')}, started {info.get('started', '?')}"
        )
    except ValueError:
        return "a change whose lock file names no holder"


@contextlib.contextmanager
def switch_lock(switch: str, what: str) -> Iterator[Path]:
    """Hold the controller-side lock of ``switch``; :class:`SwitchError` naming the holder if taken."""
    directory = lock_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise SwitchError(
            f"{switch}: step 'lock' failed: cannot create the lock directory {directory} ({exc.strerror}); "
            "set XDG_RUNTIME_DIR to a writable directory."
        ) from None
    path = directory / (re.sub(r"[^A-Za-z0-9._-]", "_", switch) + ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raw = os.pread(fd, 4096, 0).decode("utf-8", "replace")
            raise SwitchError(
                f"{switch}: step 'lock' failed: another change is running on this switch "
                f"({_holder_text(raw)}; lock {path}); nothing was sent. Run again when it has finished."
            ) from None
        info = {
            "what": what,
            "user": getpass.getuser(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
