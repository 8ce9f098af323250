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

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from fabricops.errors import CouldNotRun, UsageError

STDOUT = "-"


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
        print(f"{self.prefix}{self.elapsed()} {msg}", file=self.stream, flush=True)

    def status(self, msg: str) -> None:
        if not (self.enabled and self.tty):
            return
        width = 119
        text = f"{self.prefix}{self.elapsed()} {msg}"
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


def read_inventory(inventory: str | None) -> None:
    """Parse the inventory with ``ansible-inventory --list`` (strictly): a missing, broken or empty
    inventory is "could not run" with ansible's own reason, before any host is contacted."""
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
    path = Path(dest)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise CouldNotRun(f"{flag} {path}: is a directory; give a file name")
    if not parent.is_dir():
        raise CouldNotRun(f"{flag} {path}: the directory {parent} does not exist")
    target = path if path.exists() else parent
    if not os.access(target, os.W_OK):
        raise CouldNotRun(f"{flag} {path}: not writable (permission denied)")


def emit_report(args: Any, text: str, json_doc: Callable[[], str], junit_doc: Callable[[], str]) -> None:
    """The report where the convention puts it: the terminal text on stdout (on stderr with
    ``--json - -v``, never beside JSON on stdout), then ``--json`` / ``--junit`` when asked."""
    if not json_to_stdout(args):
        sys.stdout.write(text)
    elif args.verbose and not args.quiet:
        sys.stderr.write(text)
    if args.json:
        write_output(args.json, json_doc(), "--json")
    if getattr(args, "junit", None):
        write_output(args.junit, junit_doc(), "--junit")


def write_output(dest: str | os.PathLike, text: str, flag: str) -> None:
    """Write ``text`` to the file ``dest``, or to stdout for ``-``; one sentence when it cannot."""
    if str(dest) == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        Path(dest).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CouldNotRun(f"{flag} {dest}: cannot write ({exc.strerror or exc})") from None


def extra_vars(values: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``-e`` values as ansible-playbook reads them: ``k=v k2=v2``, a YAML/JSON mapping, ``@FILE``."""
    import shlex

    out: dict[str, Any] = {}
    for value in values or ():
        text = value.strip()
        if text.startswith("@"):
            path = Path(text[1:])
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise CouldNotRun(f"-e @{path}: cannot read ({exc.strerror or exc})") from None
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
                    raise UsageError(f"-e {value!r}: expected key=value, a YAML/JSON mapping or @FILE")
                data[key] = val
        out.update(data)
    return out


def _mapping(text: str, what: str) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"{what}: not a YAML or JSON mapping ({first})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{what}: not a mapping of variables")
    return data
