"""Talking to the hosts: Ansible's inventory and connection settings through testinfra's backend.

Why testinfra's Ansible backend (and not ansible-runner or ``ansible`` ad hoc): it reads the same
inventory (``ansible-inventory --list``: group_vars, host_vars, ``ansible_host``, ``ansible_user``,
``ansible_port``, the private key, ``ansible_ssh_common_args``, ``become``) and ansible.cfg's
``ssh_args`` (ControlPersist), then runs each command over plain SSH: a command costs one SSH
round trip instead of a module upload and Python start per task, commands run concurrently from
threads (pairwise rounds need a server and a client at once), and the suite in tests/infra uses
the very same backend, so the CLI and the testinfra suite cannot disagree about how a host is
reached.

``Fabric.batch`` runs a host's whole evidence list in one remote shell session (one SSH round trip
instead of one per command): :func:`batch_script` builds the script, :func:`parse_batch` reads its
answer; both are pure, so tests run the script with a local ``sh`` (docs/verify.md, "Transport").
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fabricops.errors import FabricopsError


class TransportError(FabricopsError):
    exit_status = 2


TRANSPORT_FAILED = 255
KILL_AFTER_S = 5  # ``timeout -k 5``: a command ignoring SIGTERM is killed this long after its timeout
BATCH_MARGIN_S = 10  # the batch session's own timeout: the commands' worst case plus this
BATCH_SCRIPT_MAX = 100_000  # one ``sh -c`` argument stays well below Linux's 128 KiB per argument

# One line per command, after it ended: MARK INDEX RC OUT_BYTES OUT_B64 ERR_BYTES ERR_B64 "."
# MARK carries a random nonce; the streams are base64 (no space, no newline), so no command output
# can forge or break a frame. Begin and end lines say how many commands the answer holds. The
# command runs in an ``exec``'d subshell: the batch shell's own words on a killed job ("Killed") go to
# the session's stderr, not into the command's.
_BATCH_FN = (
    "s() { if [ -s \"$1\" ]; then printf ' %s ' $(($(wc -c <\"$1\"))); base64 -w 0 <\"$1\"; "
    "else printf ' 0 '; fi; }\n"
    f'f() {{ (exec timeout -k {KILL_AFTER_S} "$2" sh -c "$3") </dev/null >"$d/o" 2>"$d/e"; r=$?; '
    'printf \'%s %s %s\' "$m" "$1" "$r"; s "$d/o"; s "$d/e"; printf \' .\\n\'; }'
)


def batch_script(commands: Sequence[str], timeout: float, nonce: str) -> str:
    """The ``sh`` script that runs ``commands`` in order, each as ``Fabric.run`` runs one
    (``timeout -k 5 T sh -c CMD``, stdin ``/dev/null``), its stdout and stderr kept in files of a
    ``mktemp -d`` directory (removed on exit, also on HUP/INT/TERM/PIPE), and prints one
    frame per command as soon as it ended (a cut answer keeps what was done before the cut)."""
    mark = f"FABRICOPS-BATCH-{nonce}"
    lines = [
        f"m={mark}",
        'd=$(mktemp -d) || exit 97',
        "trap 'rm -rf \"$d\"' EXIT",
        "trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 141' PIPE; trap 'exit 143' TERM",
        _BATCH_FN,
        f'printf \'%s begin %s\\n\' "$m" {len(commands)}',
    ]
    t = int(timeout)
    lines += [f"f {i} {t} {shlex.quote(c)}" for i, c in enumerate(commands)]
    lines.append(f'printf \'%s end %s\\n\' "$m" {len(commands)}')
    return "\n".join(lines) + "\n"


def batch_timeout(n: int, timeout: float) -> int:
    """The session's own limit: every command at its worst (timeout + kill grace), plus a margin."""
    return n * (int(timeout) + KILL_AFTER_S) + BATCH_MARGIN_S


def text(data: bytes, encoding: str | Callable[[], str] = "utf-8") -> str:
    """Bytes as testinfra's ``CommandResult.stdout`` decodes them: ASCII, else the host's encoding
    (a callable is asked only then). Where testinfra would raise ``UnicodeDecodeError`` (bytes that
    are not valid in that encoding), the bad bytes come back as U+FFFD instead of losing the answer."""
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        pass
    enc = encoding() if callable(encoding) else encoding
    return data.decode(enc, errors="replace")


def unreachable(host: str, why: str) -> dict[str, Any]:
    return {"rc": TRANSPORT_FAILED, "stdout": "", "stderr": f"{host} unreachable over SSH: {why}"}


def _session_words(rc: int | None, stderr: str) -> str:
    words = " ".join(stderr.split())[:200]
    return f"session rc {rc}" + (f": {words}" if words else "")


def parse_batch(
    host: str,
    keys: Sequence[str],
    nonce: str,
    rc: int | None,
    stdout: bytes,
    stderr: str = "",
    decode: Callable[[bytes], str] = text,
) -> dict[str, dict[str, Any]]:
    """The result per key from the batch session's answer (``rc``, ``stdout`` bytes, ``stderr``).

    No begin frame (no output, rc 255, a shell that never ran the script) or a frame that does not
    parse: every key gets the transport failure. A cut answer (no end frame): the keys with a whole
    frame get their result, every later key an rc 255 entry saying the answer was cut, never
    evidence of its own."""
    mark = f"FABRICOPS-BATCH-{nonce}".encode()
    n = len(keys)
    whole = stdout.split(b"\n")[:-1]  # a last line without its newline is where the answer was cut
    frames = [ln.split(b" ") for ln in whole if ln.startswith(mark + b" ")]
    if not frames or frames[0][1:] != [b"begin", str(n).encode()]:
        why = "no output" if not stdout.strip() else "no batch answer in the output"
        return {k: unreachable(host, f"{why} ({_session_words(rc, stderr)})") for k in keys}
    out: dict[str, dict[str, Any]] = {}
    ended = False
    for f in frames[1:]:
        if ended:
            return _malformed(host, keys, "a frame after the end")
        if f[1:] == [b"end", str(n).encode()] and len(out) == n:
            ended = True
            continue
        item = _frame(f, len(out), decode) if len(out) < n else None
        if item is None:
            return _malformed(host, keys, f"frame {len(out)} does not parse")
        out[keys[len(out)]] = item
    if not ended:
        cut = f"{host}: the batch answer was cut before this command's result ({_session_words(rc, stderr)})"
        for k in keys[len(out):]:
            out[k] = {"rc": TRANSPORT_FAILED, "stdout": "", "stderr": cut}
    return out


def _malformed(host: str, keys: Sequence[str], why: str) -> dict[str, dict[str, Any]]:
    return {k: unreachable(host, f"unreadable batch answer ({why})") for k in keys}


def _frame(f: list[bytes], index: int, decode: Callable[[bytes], str]) -> dict[str, Any] | None:
    """One command's frame, or None when it is not exactly the frame of command ``index``."""
    if len(f) != 8 or f[1] != str(index).encode() or f[7] != b".":
        return None
    if not all(re.fullmatch(rb"[0-9]+", x) for x in (f[2], f[3], f[5])):
        return None
    try:
        streams = [base64.b64decode(f[4], validate=True), base64.b64decode(f[6], validate=True)]
    except (binascii.Error, ValueError):
        return None
    if [len(streams[0]), len(streams[1])] != [int(f[3]), int(f[5])]:
        return None
    return {"rc": int(f[2]), "stdout": decode(streams[0]), "stderr": decode(streams[1])}


def _chunks(commands: Mapping[str, str]) -> list[dict[str, str]]:
    """The mapping in order, cut where one script would outgrow one ``sh -c`` argument."""
    out: list[dict[str, str]] = [{}]
    size = 0
    for k, c in commands.items():
        n = len(shlex.quote(c)) + 16
        if out[-1] and size + n > BATCH_SCRIPT_MAX - 2000:
            out.append({})
            size = 0
        out[-1][k] = c
        size += n
    return out


def _path_with_venv() -> None:
    """ansible-inventory is looked up on PATH: make the one next to this Python findable."""
    bindir = os.path.dirname(sys.executable)
    parts = os.environ.get("PATH", "").split(os.pathsep)
    if bindir not in parts:
        os.environ["PATH"] = os.pathsep.join([bindir, *parts])


def select_hosts(get_hosts: Callable[[str], list[str]], limit: str) -> list[str]:
    """The hosts ``limit`` names, as ansible-playbook ``--limit`` reads it: patterns separated by
    ``,`` or ``:`` (``gpu01,gpu02``, ``gpu_hosts:!gpu03``), ``!P`` removes P's hosts, ``&P`` keeps
    only hosts also in P; each pattern a host, a group or a glob (testinfra's ``get_hosts`` reads one
    pattern). In the inventory's order."""
    include: list[str] = []
    exclude: set[str] = set()
    narrow: list[set[str]] = []
    for part in (p.strip() for p in re.split(r"[,:]", limit)):
        if not part:
            continue
        if part.startswith("!"):
            exclude.update(get_hosts(part[1:]))
        elif part.startswith("&"):
            narrow.append(set(get_hosts(part[1:])))
        else:
            include.extend(h for h in get_hosts(part) if h not in include)
    return [h for h in include if h not in exclude and all(h in n for n in narrow)]


#: A Unix socket's path holds 107 bytes, and OpenSSH first binds the master's socket under the path
#: plus a 17-character random suffix (mux.c, muxserver_listen): longer paths are not shared.
CONTROL_PATH_MAX = 90


def stop_masters(directory: str) -> None:
    """``ssh -O exit`` for every ControlMaster socket in ``directory``, then remove it."""
    try:
        names = os.listdir(directory)
    except OSError:
        names = []
    for name in names:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["ssh", "-o", f"ControlPath={os.path.join(directory, name)}", "-O", "exit",
                            "fabricops-host"], capture_output=True, stdin=subprocess.DEVNULL, timeout=10)
    shutil.rmtree(directory, ignore_errors=True)


class Fabric:
    """The hosts of an inventory, their variables, and ``run(host, command, timeout)``."""

    def __init__(self, inventory: str | None = None, limit: str = "gpu_hosts", parsed: dict | None = None):
        """``parsed``: the inventory as ``ansible-inventory --list`` printed it (cliopts.read_inventory
        read it strictly already; testinfra would run ansible-inventory again, 0.7 s of CPU)."""
        _path_with_venv()
        try:
            from testinfra.utils.ansible_runner import AnsibleRunner
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            raise TransportError(f"pytest-testinfra is required for verify: {exc}") from None
        self.inventory = inventory
        self.runner = AnsibleRunner(inventory)
        if parsed is not None:
            self.runner.__dict__["inventory"] = parsed  # testinfra's cached_property, filled
        try:
            self.hosts = select_hosts(self.runner.get_hosts, limit)
        except Exception as exc:
            raise TransportError(
                f"cannot read the inventory {inventory or '(ansible.cfg default)'}: {exc}"
            ) from None
        if not self.hosts:
            raise TransportError(f"no host matches {limit!r} in the inventory {inventory or '(default)'}")
        self._lock = threading.Lock()
        self._hosts: dict[str, Any] = {}
        self._ctl_dir: str | None = None
        self._masters: Callable[[], Any] = lambda: None

    def hostvars(self, host: str) -> dict[str, Any]:
        return dict(self.runner.get_variables(host))

    def inventory_vars(self, name: str) -> dict[str, Any]:
        """Variables of any inventory host (a switch too); {} when it is not in the inventory."""
        try:
            return dict(self.runner.get_variables(name))
        except Exception:
            return {}

    def switch_reader(self, roce: Any) -> Any:
        """Read-only switch port reader for the likely cause of degraded RoCE pairs."""
        from fabricops.verify.switchstate import SwitchReader

        return SwitchReader(self.inventory_vars, roce)

    def switch_link_layers(self) -> dict[str, str]:
        """Switch name -> the link layer its cables carry (from the inventory groups)."""
        out: dict[str, str] = {}
        for group, layer in (("switches", "Ethernet"), ("ib_switches", "InfiniBand")):
            try:
                for name in self.runner.get_hosts(group):
                    out[name] = layer
            except Exception:
                continue
        return out

    def _host(self, host: str) -> Any:
        with self._lock:
            if host not in self._hosts:
                self._hosts[host] = self._shared(self.runner.get_host(host))
            return self._hosts[host]

    def _shared(self, h: Any) -> Any:
        """Every command to this host through one SSH connection: an OpenSSH ControlMaster on a socket
        in a private directory (mkdtemp, 0700) that :meth:`close` (or the exit) ends.

        testinfra's SSH backend asks for ControlMaster=auto and ControlPersist (or passes ansible.cfg's
        ssh_args, which do) but names no ControlPath, and without one OpenSSH does not multiplex: each
        command paid a key exchange and a login (205 connections, 40 % of a 4-host verify's CPU).
        Left alone: a host not reached over SSH, a ControlPath that the inventory or ansible.cfg
        names, ControlMaster=no, and a master without ControlPersist (it would hold its first command).
        """
        backend = getattr(h, "backend", None)
        if backend is None or not hasattr(backend, "controlpath") or backend.controlpath:
            return h
        extra = " ".join(str(getattr(backend, "ssh_extra_args", "") or "").lower().split())
        if "controlmaster" in extra:  # ansible.cfg's ssh_args (Ansible's default has both) or the inventory's
            if "controlpersist" not in extra or re.search(r"controlmaster[ =]+no\b", extra):
                return h
        elif not getattr(backend, "controlpersist", 0):
            return h
        if "controlpath" in extra:
            return h
        if self._ctl_dir is None:
            self._ctl_dir = tempfile.mkdtemp(prefix="fo-ssh-")
            self._masters = weakref.finalize(self, stop_masters, self._ctl_dir)
        path = os.path.join(self._ctl_dir, str(len(self._hosts)))
        if len(path) > CONTROL_PATH_MAX:
            return h
        # testinfra caches one Host per spec for the whole process: a copy, so that another Fabric
        # (act reads several inventories) never inherits this one's socket after close()
        mine = copy.copy(backend)
        mine.controlpath = path
        shared = type(h)(mine)
        mine.set_host(shared)
        return shared

    def close(self) -> None:
        """End the SSH connections this object opened (also done when it is collected or the
        program exits)."""
        self._masters()

    def run(self, host: str, command: str, timeout: float = 60) -> Mapping[str, Any]:
        """Run ``command`` (a shell line) on ``host``; rc 124 when it exceeded ``timeout``."""
        wrapped = f"timeout -k 5 {int(timeout)} sh -c {shlex.quote(command)}"
        try:
            res = self._host(host).run(wrapped)
        except Exception as exc:  # SSH failures surface as exceptions in some backends
            return {"rc": 255, "stdout": "", "stderr": f"{host}: {exc}"}
        stderr = res.stderr
        if res.rc == 255 and not res.stdout:
            stderr = f"{host} unreachable over SSH: {stderr.strip()}"
        return {"rc": res.rc, "stdout": res.stdout, "stderr": stderr}

    def batch(self, host: str, commands: Mapping[str, str], timeout: float = 60) -> dict[str, dict[str, Any]]:
        """Every command of ``commands`` (key -> shell line) in one remote shell session, in order:
        per key what :meth:`run` gives (rc 124 on the command's own ``timeout``), or the transport
        failure (rc 255, no stdout) for every key the session did not answer. A command's own exit
        status 255 or death by signal N (128 + N) comes back as such: the frames tell it apart from
        SSH's failure, which ``run`` cannot."""
        try:
            h = self._host(host)
        except Exception as exc:
            return {k: unreachable(host, " ".join(str(exc).split())[:200]) for k in commands}
        return batch_on(h, host, commands, timeout)


def batch_on(
    h: Any, host: str, commands: Mapping[str, str], timeout: float = 60
) -> dict[str, dict[str, Any]]:
    """:meth:`Fabric.batch` on a testinfra host ``h`` (named ``host`` in the answers): the testinfra
    suite (tests/infra) collects a host's evidence through it, as ``fabricops verify`` does."""
    out: dict[str, dict[str, Any]] = {}
    for part in _chunks(commands) if commands else []:
        out.update(_batch(h, host, part, timeout))
    return out


def _batch(h: Any, host: str, commands: Mapping[str, str], timeout: float) -> dict[str, dict[str, Any]]:
    keys = list(commands)
    nonce = secrets.token_hex(8)
    script = batch_script(list(commands.values()), timeout, nonce)
    wrapped = f"timeout -k {KILL_AFTER_S} {batch_timeout(len(keys), timeout)} sh -c {shlex.quote(script)}"
    try:
        res = h.run(wrapped)
    except Exception as exc:
        # testinfra's SSH backend raises on rc 255 with the CommandResult: a session cut mid-way
        # (the connection dropped) still carries the frames that came before the cut
        res = exc.args[0] if exc.args and hasattr(exc.args[0], "stdout_bytes") else None
        if res is None:
            return {k: unreachable(host, " ".join(str(exc).split())[:200]) for k in keys}
    return parse_batch(host, keys, nonce, res.rc, _bytes(res, "stdout"), _stderr_text(res),
                       decode=lambda data: text(data, lambda: _encoding(h)))


def _bytes(res: Any, stream: str) -> bytes:
    try:
        return bytes(getattr(res, f"{stream}_bytes"))
    except Exception:
        value = getattr(res, stream, "") or ""
        return value if isinstance(value, bytes) else str(value).encode("utf-8", "replace")


def _stderr_text(res: Any) -> str:
    return _bytes(res, "stderr").decode("utf-8", "replace")


def _encoding(host: Any) -> str:
    """The host's encoding as testinfra decodes with it (asked of the host once, cached there)."""
    try:
        return str(host.backend.encoding)
    except Exception:
        return "utf-8"
