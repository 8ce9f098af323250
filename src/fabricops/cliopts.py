"""The flags every fabric command shares, and where its output goes (docs/cli.md).

``verify``, ``drift`` and ``diagnose`` take the same flags for the same things::

    -i/--inventory INV   -l/--limit PATTERN   -e/--extra-vars VARS (repeatable)
    --json FILE|-        --junit FILE         -v/--verbose        -q/--quiet

Output: the report (data) goes to stdout; progress, warnings and errors go to stderr. With
``--json -`` stdout carries the JSON document and nothing else. Progress lines appear when stderr
is a terminal (or with ``-v``), never with ``-q`` and never in a ``--json -`` pipeline unless
``-v`` asks for them.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from fabricops.errors import BadInput, CouldNotRun, UsageError
from fabricops.redact import REDACTED, SECRET_KEY, redact

STDOUT = "-"

#: the most an input file of a fabricops command may hold (a --counters-baseline report)
MAX_INPUT_BYTES = 256 * 2**20
#: the most an ``-e @FILE`` of variables may hold
MAX_VARS_BYTES = 16 * 2**20
#: the mode of a report file fabricops creates (an existing file of the user's keeps its own)
REPORT_MODE = 0o600

# --- text that came from a host, on its way to a terminal or an XML report -------------------------

#: C0 controls but tab and newline, DEL, C1 (ESC starts every terminal escape sequence), the bidi
#: overrides that reorder what a terminal shows, and lone surrogates (not UTF-8 encodable)
_TERMINAL_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: what XML 1.0 forbids even as a character reference (C0 but tab, newline, CR; surrogates;
#: U+FFFE/U+FFFF), and DEL and C1, which no CI viewer shows
_XML_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every control character shown as ``\\xNN`` (tab and newline kept): an escape
    sequence in a host's output reaches the terminal as inert text, never as a command to it."""
    return _TERMINAL_UNSAFE.sub(_escape, text) if text else text


def xml_safe(text: str) -> str:
    """``text`` (an XML document or a value for one) with the characters XML 1.0 forbids shown as
    ``\\xNN``: ElementTree writes them raw, and a JUnit reader then refuses the whole report."""
    return _XML_UNSAFE.sub(_escape, text) if text else text


# --- credentials in a command line -----------------------------------------------------------------

#: an -e/--extra-vars value given as a mapping, with the flag in the same word or not
_MAPPING_ARG = re.compile(r"^(?P<flag>-e|--[\w-]+=)?(?P<text>\s*(?:\{|---).*)$", re.DOTALL)


#: ``"key": value`` inside JSON or a Python repr of it; the key is checked against SECRET_KEY
#: afterwards (a keyword inside the pattern would backtrack over long words)
_QUOTED_PAIR = re.compile(
    r"""(?P<q>["'])(?P<key>[\w.-]+)(?P=q)(?P<sep>\s*:\s*)"""
    r"""(?P<value>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^,}\]\s]+)"""
)


def _mask_quoted(m: re.Match[str]) -> str:
    if not SECRET_KEY.search(m["key"]):
        return m.group()
    q = m["q"]
    return f'{q}{m["key"]}{q}{m["sep"]}"{REDACTED}"'


def redact_text(text: str) -> str:
    """``text`` with credential-looking values masked: ``key=value`` and ``key: value`` (as the drift
    report masks them) and ``"key": "value"``, the JSON form of ``-e``."""
    if not text:
        return text
    return redact(_QUOTED_PAIR.sub(_mask_quoted, text))


def _mask(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: REDACTED if SECRET_KEY.search(str(k)) else _mask(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_mask(v) for v in data]
    return data


def redact_argv(argv: list[str] | tuple[str, ...]) -> list[str]:
    """A command line fit for a log: every ``-e`` mapping (JSON or YAML) has the values of its
    credential-looking keys masked, at any depth; ``k=v`` words are masked by :func:`redact_text`."""
    import json

    import yaml

    out = []
    for arg in argv:
        m = _MAPPING_ARG.match(arg)
        if m:
            try:
                data = yaml.safe_load(m["text"])
            except Exception:  # not a mapping we can read: the text rules below still apply
                data = None
            if isinstance(data, dict):
                arg = (m["flag"] or "") + json.dumps(_mask(data), default=str)
        out.append(redact_text(arg))
    return out


def add_common(p: Any, *, limit_default: str | None, limit_help: str, junit: bool = True) -> None:
    p.add_argument("-i", "--inventory", help="Ansible inventory (default: ansible.cfg's)")
    p.add_argument("-l", "--limit", default=limit_default, metavar="PATTERN", help=limit_help)
    p.add_argument(
        "-e", "--extra-vars", action="append", default=[], metavar="VARS",
        help="extra variables as for ansible-playbook -e: key=value ..., a YAML/JSON mapping or @FILE "
        "(repeatable; they win over the inventory)",
    )
    p.add_argument("--json", metavar="FILE", help="write the JSON report to FILE ('-': stdout, nothing else)")
    if junit:
        p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report to FILE ('-': stdout)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="progress even when stderr is not a terminal, and more detail (on stderr)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress and no summary on stderr")


def json_to_stdout(args: Any) -> bool:
    return getattr(args, "json", None) == STDOUT or getattr(args, "junit", None) == STDOUT


def progress_wanted(args: Any, stream: TextIO | None = None) -> bool:
    """Progress on stderr: on a terminal or with -v; never with -q; not in a --json - pipeline."""
    if getattr(args, "quiet", False):
        return False
    if getattr(args, "verbose", False):
        return True
    if json_to_stdout(args):
        return False
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    """Progress on stderr: ``line`` prints a line that stays; ``status`` rewrites one status line
    in place on a terminal (and is dropped elsewhere, so a CI log gets only the lines that stay)."""

    def __init__(self, enabled: bool, stream: TextIO | None = None, prefix: str = "  .. "):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.prefix = prefix
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.monotonic()
        self._status = False

    def elapsed(self) -> str:
        return f"[{time.monotonic() - self.t0:5.0f} s]"

    def line(self, msg: str) -> None:
        if not self.enabled:
            return
        self._clear()
        print(f"{self.prefix}{self.elapsed()} {terminal_safe(msg)}", file=self.stream, flush=True)

    def status(self, msg: str) -> None:
        if not (self.enabled and self.tty):
            return
        width = 119
        text = f"{self.prefix}{self.elapsed()} {terminal_safe(msg)}"
        self.stream.write("\r\033[K" + (text if len(text) <= width else text[: width - 3] + "..."))
        self.stream.flush()
        self._status = True

    def _clear(self) -> None:
        if self._status:
            self.stream.write("\r\033[K")
            self._status = False

    def done(self) -> None:
        if self.enabled:
            self._clear()
            self.stream.flush()

    __call__ = line


def check_outputs(args: Any) -> None:
    """Before the run: report files can be written, and at most one report goes to stdout."""
    json_dest, junit_dest = getattr(args, "json", None), getattr(args, "junit", None)
    for flag, dest in (("--json", json_dest), ("--junit", junit_dest)):
        if dest is not None and not str(dest).strip():
            raise UsageError(f"{flag} was given an empty file name; give a file, or - for stdout")
    if json_dest == STDOUT and junit_dest == STDOUT:
        raise UsageError("--json - and --junit - both want stdout; send one of them to a file")
    check_writable(json_dest, "--json")
    check_writable(junit_dest, "--junit")


#: fail closed: an inventory source that does not parse is an error, not "no hosts"
STRICT_INVENTORY = {
    "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
    "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
}


def ansible_error(stderr: str) -> str:
    """The one line of ansible's stderr that says why (the [ERROR] line and the parse cause)."""
    import re

    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    error = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith(("[ERROR]", "ERROR!"))), "")
    cause = ""
    for ln in lines:
        m = re.match(r"\[WARNING\]: (?:Failed to parse|Unable to parse) .*?: (.*)", ln)
        if m:
            cause = m.group(1)
            break
    text = "; ".join(x for x in (error, cause) if x) or (lines[-1] if lines else "no message")
    return text if len(text) <= 300 else text[:297] + "..."


def read_inventory(inventory: str | None) -> dict:
    """Parse the inventory with ``ansible-inventory --list`` (strictly): a missing, broken or empty
    inventory is "could not run" with ansible's own reason, before any host is contacted. Returns the
    parsed inventory, which verify's transport takes instead of parsing it a second time."""
    import subprocess

    check_inventory(inventory)
    argv = [str(Path(sys.executable).parent / "ansible-inventory"), "--list"]
    if not Path(argv[0]).exists():
        argv[0] = "ansible-inventory"
    if inventory:
        argv += ["-i", inventory]
    env = {**os.environ, **STRICT_INVENTORY, "ANSIBLE_NOCOLOR": "1"}
    where = inventory or "(the ansible.cfg default)"
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CouldNotRun(f"cannot read the inventory {where}: ansible-inventory failed ({exc})") from None
    if proc.returncode != 0:
        raise CouldNotRun(f"cannot read the inventory {where}: {ansible_error(proc.stderr)}")
    import json

    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise CouldNotRun(f"cannot read the inventory {where}: ansible-inventory printed no JSON") from None
    hosts = set((data.get("_meta") or {}).get("hostvars") or {})
    for group, body in data.items():
        if group != "_meta" and isinstance(body, dict):
            hosts.update(body.get("hosts") or [])
    if not hosts:
        raise CouldNotRun(f"the inventory {where} has no hosts: nothing to check")
    return data


def check_inventory(inventory: str | None) -> None:
    """An inventory given as a path must exist (``host1,host2,`` lists are taken as they are)."""
    if not inventory or "," in inventory:
        return
    if not Path(inventory).exists():
        raise CouldNotRun(f"the inventory {inventory} does not exist; give -i an inventory file or directory")


def check_writable(dest: str | os.PathLike | None, flag: str) -> None:
    """Fail before the run, not after it, when a report file cannot be written."""
    if dest is None or str(dest) == STDOUT:
        return
    if not str(dest).strip():
        raise UsageError(f"{flag} was given an empty file name; give a file, or - for stdout")
    path = Path(dest)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_symlink():
        raise CouldNotRun(
            f"{flag} {path}: is a symbolic link; give the real path (reports are not written through links)"
        )
    if path.is_dir():
        raise CouldNotRun(f"{flag} {path}: is a directory; give a file name")
    if not parent.is_dir():
        raise CouldNotRun(f"{flag} {path}: the directory {parent} does not exist")
    target = path if path.exists() else parent
    if not os.access(target, os.W_OK):
        raise CouldNotRun(f"{flag} {path}: not writable (permission denied)")


def emit_report(args: Any, text: str, json_doc: Callable[[], str], junit_doc: Callable[[], str]) -> None:
    """The report where the convention puts it: the terminal text on stdout (on stderr with
    ``--json - -v``, never beside JSON on stdout), then ``--json`` / ``--junit`` when asked. Control
    characters in the text (a host's output) are shown escaped, never sent to the terminal."""
    text = terminal_safe(text)
    if not json_to_stdout(args):
        sys.stdout.write(text)
    elif args.verbose and not args.quiet:
        sys.stderr.write(text)
    if args.json:
        write_output(args.json, json_doc(), "--json")
    if getattr(args, "junit", None):
        write_output(args.junit, junit_doc(), "--junit")


def write_output(dest: str | os.PathLike, text: str, flag: str) -> None:
    """Write ``text`` to the file ``dest``, or to stdout for ``-``; one sentence when it cannot.

    A ``--junit`` document is made valid XML first (:func:`xml_safe`). A file is written whole to a
    new file in the same directory (mode 0600) and renamed over ``dest``: never through a symbolic
    link, never half-written. An existing file of the user's keeps its mode; a character device or
    FIFO (``/dev/null``, a named pipe with a reader) is written in place, never replaced."""
    if flag == "--junit":
        text = xml_safe(text)
    if str(dest) == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    if not str(dest).strip():
        raise UsageError(f"{flag} was given an empty file name; give a file, or - for stdout")
    try:
        _write_file(Path(dest), text.encode("utf-8", "surrogateescape"), flag)
    except OSError as exc:
        raise CouldNotRun(f"{flag} {dest}: cannot write ({exc.strerror or exc})") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_file(path: Path, data: bytes, flag: str) -> None:
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise CouldNotRun(
            f"{flag} {path}: is a symbolic link; give the real path (reports are not written through links)"
        )
    if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            os.set_blocking(fd, True)
            _write_all(fd, data)
        finally:
            os.close(fd)
        return
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise CouldNotRun(f"{flag} {path}: not a regular file; give a file name")
    mode = stat.S_IMODE(st.st_mode) if st is not None and st.st_uid == os.geteuid() else REPORT_MODE
    parent = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except PermissionError:
        if st is None:
            raise
        # a file the user may write in a directory they may not: rewrite it in place, not through a link
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        return
    try:
        os.fchmod(fd, mode)
        _write_all(fd, data)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_input(path: str | os.PathLike, label: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of an input file, at most ``limit``: a regular file only. A FIFO (which would
    hang), a device (``/dev/zero`` never ends) or a socket is refused with one sentence (invalid
    input, 5), as is a file over the limit; a missing or unreadable one cannot be read (4).
    ``label`` starts every message (``--counters-baseline report.json``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise CouldNotRun(f"{label}: cannot read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise CouldNotRun(f"{label}: is a directory; give a file")
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{label}: not a regular file ({file_kind(st.st_mode)}); give a file")
        if st.st_size > limit:
            raise BadInput(f"{label}: too large ({st.st_size:,} bytes; at most {limit:,})")
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise CouldNotRun(f"{label}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise BadInput(f"{label}: too large (more than {limit:,} bytes)")
    return b"".join(chunks)


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for a message ("a FIFO")."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def extra_vars(values: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``-e`` values as ansible-playbook reads them: ``k=v k2=v2``, a YAML/JSON mapping, ``@FILE``."""
    import shlex

    out: dict[str, Any] = {}
    for value in values or ():
        text = value.strip()
        if text.startswith("@"):
            path = Path(text[1:])
            try:
                text = read_input(path, f"-e @{path}", MAX_VARS_BYTES).decode("utf-8")
            except UnicodeDecodeError:
                raise UsageError(f"-e @{path}: not a UTF-8 YAML or JSON file") from None
            data = _mapping(text, f"-e @{path}")
        elif text.startswith("{") or text.startswith("---"):
            data = _mapping(text, "-e")
        else:
            data = {}
            for word in shlex.split(text):
                key, sep, val = word.partition("=")
                if not sep or not key:
                    shown = redact_text(repr(value))
                    raise UsageError(f"-e {shown}: expected key=value, a YAML/JSON mapping or @FILE")
                data[key] = val
        out.update(data)
    return out


def _mapping(text: str, what: str) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(text)  # JSON is YAML too
    except RecursionError:
        raise UsageError(f"{what}: nested too deeply to be a mapping of variables") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"{what}: not a YAML or JSON mapping ({first})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{what}: not a mapping of variables")
    return data
