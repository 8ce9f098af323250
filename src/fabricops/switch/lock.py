"""One change at a time per switch, on this controller: a lock file per device (``fcntl.flock``).

The lock is keyed by the device: its address and port as the connection resolves them
(``ansible_host`` / ssh_config ``HostName`` and ``ansible_port``), so two inventory names of one switch
share one lock; without them (a direct caller), by the switch's name.

Where the lock files live (:func:`lock_dir`), and nobody else can write there:

- ``$FABRICOPS_LOCK_DIR`` when set (honoured only if it passes the checks below, else refused);
- as root (euid 0): ``$XDG_RUNTIME_DIR/fabricops/locks`` only when that runtime directory is root's own
  (owned by root, mode 0700, not a symlink), else ``/run/fabricops/locks``. Under ``sudo -E`` the
  runtime directory is the invoking user's, who must not be able to plant a symlink there;
- otherwise ``$XDG_RUNTIME_DIR/fabricops/locks`` (else ``~/.cache/fabricops/locks``).

The lock directory is created with mode 0700 and must be a directory (not a symlink) owned by the
effective user with mode 0700; the lock file is opened inside it by its directory's descriptor with
``O_NOFOLLOW`` and must be a regular file owned by the effective user. Anything else is refused in
one sentence before the switch is contacted. The file is truncated and rewritten only once the flock
is held: it holds who took it (user, host, pid, start time, what, switch), so a second run names the
change it waits for. The kernel drops a flock when its holder dies, so a crashed run never leaves the
switch locked. Runs on other controllers are caught by the device-side check (see ``fabricops.roce.change``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import json
import os
import re
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import SwitchError

__all__ = ["LOCK_DIR_ENV", "ROOT_LOCK_DIR", "device_key", "lock_dir", "switch_lock"]

#: a lock directory of the caller's choosing (tests, a site's own layout); checked like any other
LOCK_DIR_ENV = "FABRICOPS_LOCK_DIR"
#: root's lock directory when its own runtime directory is not usable
ROOT_LOCK_DIR = Path("/run/fabricops/locks")


def _private(path: str | os.PathLike[str], uid: int) -> bool:
    """``path`` is a directory (not a symlink) owned by ``uid`` with mode 0700."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid and stat.S_IMODE(st.st_mode) == 0o700


def lock_dir() -> Path:
    """The directory the lock files live in (see the module doc); not created here."""
    chosen = os.environ.get(LOCK_DIR_ENV)
    if chosen:
        return Path(chosen)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if os.geteuid() == 0:
        if runtime and os.path.isabs(runtime) and _private(runtime, 0):
            return Path(runtime) / "fabricops" / "locks"
        return ROOT_LOCK_DIR
    base = Path(runtime) if runtime and Path(runtime).is_dir() else Path.home() / ".cache"
    return base / "fabricops" / "locks"


def device_key(host: str, port: int | str) -> str:
    """The lock key of a device: its address and port (``10.0.0.5:22``); case does not matter."""
    return f"{str(host).strip().strip('[]').lower()}:{int(port)}"


def _refuse(switch: str, what: str) -> SwitchError:
    return SwitchError(f"{switch}: step 'lock' failed: {what}; nothing was sent.")


def _open_dir(switch: str, directory: Path) -> int:
    """A descriptor of ``directory``, created 0700 when missing, checked: a directory (not a symlink)
    owned by the effective user with mode 0700."""
    uid = os.geteuid()
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    created = False
    try:
        fd = os.open(directory, flags)
    except FileNotFoundError:
        missing, p = [], directory
        while not os.path.lexists(p) and p != p.parent:
            missing.append(p)
            p = p.parent
        try:
            for p in reversed(missing):  # each directory this creates is private (0700)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(p, 0o700)
            created = directory in missing
            fd = os.open(directory, flags)
        except OSError as exc:
            raise _refuse(
                switch,
                f"cannot create the lock directory {directory} ({exc.strerror}); set {LOCK_DIR_ENV} to a "
                "directory of yours with mode 0700",
            ) from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # O_NOFOLLOW | O_DIRECTORY on a symlink: either
            why = "is a symlink" if os.path.islink(directory) else "is not a directory"
            why += ": remove it"
        else:
            why = f"cannot be opened ({exc.strerror})"
        raise _refuse(switch, f"the lock directory {directory} {why}") from None
    try:
        st = os.fstat(fd)
        if created and st.st_uid == uid and stat.S_IMODE(st.st_mode) != 0o700:  # a umask took owner bits
            os.fchmod(fd, 0o700)
            st = os.fstat(fd)
        if st.st_uid != uid:
            raise _refuse(
                switch,
                f"the lock directory {directory} is owned by uid {st.st_uid}, not by this user (uid {uid}): "
                f"remove it, or set {LOCK_DIR_ENV} to a directory of yours with mode 0700",
            )
        if stat.S_IMODE(st.st_mode) != 0o700:
            raise _refuse(
                switch,
                f"the lock directory {directory} has mode {stat.S_IMODE(st.st_mode):04o}, others may write "
                f"or read it: run chmod 0700 {directory}",
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_file(switch: str, dir_fd: int, path: Path) -> int:
    """The lock file, opened without following a symlink and without truncating it; a regular file
    owned by the effective user."""
    uid = os.geteuid()
    try:
        fd = os.open(path.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        why = "is a symlink: remove it" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror})"
        raise _refuse(switch, f"the lock file {path} {why}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
        os.close(fd)
        raise _refuse(
            switch,
            f"the lock file {path} is not a regular file owned by this user (uid {uid}): remove it",
        )
    return fd


def _holder_text(raw: str, switch: str) -> str:
    try:
        info = json.loads(raw)
        held = info.get("switch")
        also = f", held as {held}" if held and held != switch else ""
        return (
            f"{info.get('what', 'a change')} by {info.get('user', '?')}@{info.get('host', '?')}, "
            f"pid {info.get('pid', '?')}, started {info.get('started', '?')}{also}"
        )
    except (ValueError, AttributeError):
        return "a change whose lock file names no holder"


@contextlib.contextmanager
def switch_lock(switch: str, what: str, device: str | None = None) -> Iterator[Path]:
    """Hold the controller-side lock of a switch; :class:`SwitchError` naming the holder if taken.

    ``device``: the lock key (:func:`device_key` of the address and port the connection uses), so
    every inventory name of one device takes the same lock; None: the switch's name."""
    directory = lock_dir()
    key = device or switch
    path = directory / (re.sub(r"[^A-Za-z0-9._-]", "_", key) + ".lock")
    dir_fd = _open_dir(switch, directory)
    try:
        fd = _open_file(switch, dir_fd, path)
    finally:
        os.close(dir_fd)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raw = os.pread(fd, 4096, 0).decode("utf-8", "replace")
            holder = _holder_text(raw, switch)
            raise SwitchError(
                f"{switch}: step 'lock' failed: another change is running on this switch "
                f"({holder}; lock {path}); nothing was sent. Run again when it has finished."
            ) from None
        info = {
            "what": what,
            "switch": switch,
            "device": key,
            "user": getpass.getuser(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        os.ftruncate(fd, 0)  # only now: the flock is held and the file is verified
        os.pwrite(fd, json.dumps(info).encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
