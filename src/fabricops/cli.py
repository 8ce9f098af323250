"""The ``fabricops`` command.

Each subcommand lives in its own module exposing ``register(subparsers)``; the module's handler
returns the exit status. Every command exits with the statuses of one table (docs/cli.md,
:mod:`fabricops.errors`): 0 good verdict, 1 checks failed, 2 usage error, 3 drift found, 4 could
not run, 5 invalid input data, 130 interrupted, 141 stdout closed by its reader.

A failure is one line on stderr, never a traceback: a :class:`FabricopsError` prints its sentence;
an unexpected exception prints ``fabricops CMD: internal error: Type: message; details in LOG``
with the traceback written to LOG (:func:`log_dir`, mode 0600, credentials masked) and exits 4.
Two exceptions are no bug: a JSON or YAML input nested deeper than Python's recursion limit is
invalid input (5), and stdout that cannot be written is 141 for a closed pipe (quietly), else 4
with one line (``/dev/full``, a closed file descriptor).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import sys
import tempfile
import traceback
from pathlib import Path

from fabricops import __version__
from fabricops.cliopts import redact_argv, redact_text, terminal_safe
from fabricops.errors import (
    EXIT_BADINPUT,
    EXIT_INTERRUPTED,
    EXIT_NORUN,
    EXIT_PIPE,
    EXIT_USAGE,
    CouldNotRun,
    FabricopsError,
)

# name -> module with register(subparsers); a module that is not there yet is skipped.
SUBCOMMANDS = [
    "fabricops.commands.parse_cmd",
    "fabricops.verify.cli",
    "fabricops.drift",
    "fabricops.diagnose",
    "fabricops.plan",
    "fabricops.sched.cli",
    "fabricops.act.cli",
]


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that says where the help is (exit status 2)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see '{self.prog} --help')\n")


#: the entry-point group through which another installed distribution adds a subcommand: the
#: emulated rack (``fabricops-lab``, lab/pyproject.toml) registers ``lab`` here, so ``fabricops lab``
#: exists only where the lab is installed and the product never imports it.
PLUGIN_GROUP = "fabricops.subcommands"


def _plugin_subcommands():
    """The ``register(subparsers)`` callables of the installed plugins, by name (a stable help)."""
    from importlib.metadata import entry_points

    return [ep.load() for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda ep: ep.name)]


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="fabricops",
        description="Take GPU servers and Spectrum/InfiniBand switches to a validated training fabric. "
        "Exit statuses (every command): 0 good verdict, 1 checks failed, 2 usage error, 3 drift found, "
        "4 could not run, 5 invalid input data, 130 interrupted (docs/cli.md).",
    )
    parser.add_argument("--version", action="version", version=f"fabricops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        if hasattr(module, "register"):  # a package whose CLI is still being written
            module.register(sub)
    for register in _plugin_subcommands():
        register(sub)
    for p in sub.choices.values():
        p.set_defaults(_subparser=p)  # an unknown flag is reported by the subcommand that got it
    return parser


def log_dir() -> Path:
    """Where internal-error tracebacks go: $FABRICOPS_LOG_DIR, else $XDG_STATE_HOME/fabricops/logs,
    else ~/.local/state/fabricops/logs (the XDG default for state such as logs)."""
    if os.environ.get("FABRICOPS_LOG_DIR"):
        return Path(os.environ["FABRICOPS_LOG_DIR"])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "fabricops" / "logs"


def _write_log(command: str, argv: list[str], exc: BaseException) -> Path | None:
    """The traceback, with credentials masked, in a new 0600 file of :func:`log_dir` (made 0700);
    failing that a new file of unpredictable name in the temporary directory (``mkstemp``); None
    when neither can be written."""
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    text = redact_text(
        f"fabricops {__version__} {command}: internal error\nargv: {redact_argv(argv)!r}\n"
        f"python: {sys.version}\n\n" + "".join(traceback.format_exception(exc))
    )
    data = text.encode("utf-8", "backslashreplace")
    name = f"fabricops-{command}-{stamp}-{os.getpid()}"
    try:
        directory = log_dir()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = directory / f"{name}.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        try:  # never a predictable name in a shared directory: another user could have put a link there
            fd, tmp = tempfile.mkstemp(prefix=f"{name}-", suffix=".log")
        except OSError:
            return None
        path = Path(tmp)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError:
        return None
    return path


def _one_line(exc: BaseException) -> str:
    msg = " ".join(str(exc).split())
    if len(msg) > 200:
        msg = msg[:197] + "..."
    return terminal_safe(redact_text(f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__))


def _quiet_broken_pipe() -> int:
    # Python would print "Exception ignored ... BrokenPipeError" when it flushes stdout at exit.
    _drop_stdout()
    return EXIT_PIPE


def _drop_stdout() -> None:
    """Point file descriptor 1 at /dev/null: what is still buffered for stdout goes nowhere at exit,
    instead of failing again there ("Exception ignored ...", exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ else 1)
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


class StdoutError(CouldNotRun):
    """stdout cannot be written (``/dev/full``, a closed file descriptor): no report reached it."""


class _Stdout:
    """``sys.stdout`` while a command runs: what is written has its control characters shown as
    ``\\xNN`` (:func:`fabricops.cliopts.terminal_safe`: a host's escape sequence never drives the
    terminal, nor a file that is later shown on one); a write that fails (other than a closed pipe,
    which is 141) is :class:`StdoutError`, one sentence and 4, not an internal error."""

    def __init__(self, stream):
        self._stream = stream

    def _call(self, name: str, *args):
        if self._stream is None:
            raise StdoutError("cannot write to stdout: it is closed; redirect it (> FILE, > /dev/null)")
        try:
            return getattr(self._stream, name)(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutError(f"cannot write to stdout ({exc.strerror or exc})") from None

    def write(self, text: str) -> int:
        self._call("write", terminal_safe(text))
        return len(text)

    def writelines(self, lines) -> None:
        self._call("writelines", [terminal_safe(line) for line in lines])

    def flush(self) -> None:
        if self._stream is not None:
            self._call("flush")

    def isatty(self) -> bool:
        return bool(self._stream is not None and self._stream.isatty())

    def __getattr__(self, name: str):
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def _hold_closed_fds() -> None:
    """Started with stdout or stderr closed (``>&-``): Python leaves sys.stdout None, and the next
    file opened would get descriptor 1 (a report, an ansible child's output, would land in it).
    /dev/null holds the descriptor; writes to stdout still fail, as :class:`_Stdout` says."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)
        except OSError:
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                if devnull != fd:
                    os.dup2(devnull, fd)
                    os.close(devnull)
            except OSError:
                pass
        if name == "stderr":
            sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the process


def _json_too_deep(exc: BaseException) -> bool:
    """A RecursionError raised while decoding JSON or YAML: the input is nested too deeply."""
    if not isinstance(exc, RecursionError):
        return False
    import json

    tb, last = exc.__traceback__, ""
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    roots = [os.path.dirname(json.__file__)]
    try:
        import yaml

        roots.append(os.path.dirname(yaml.__file__))
    except ImportError:  # pragma: no cover - a dependency
        pass
    return any(last.startswith(root + os.sep) for root in roots)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:
            sub = getattr(args, "_subparser", parser)
            sub.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # argparse: --help / --version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    command = getattr(args, "command", None) or "?"
    _hold_closed_fds()
    stdout = sys.stdout
    sys.stdout = _Stdout(stdout)
    try:
        return _run(args, command, argv)
    finally:
        sys.stdout = stdout


def _run(args: argparse.Namespace, command: str, argv: list[str]) -> int:
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, not at exit
        return status
    except StdoutError as exc:
        print(f"fabricops {command}: {exc}", file=sys.stderr)
        _drop_stdout()
        return int(exc.exit_status)
    except FabricopsError as exc:
        print(f"fabricops {command}: {terminal_safe(str(exc))}", file=sys.stderr)
        return int(getattr(exc, "exit_status", EXIT_NORUN))
    except KeyboardInterrupt:
        print(f"fabricops {command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except SystemExit:
        raise
    except Exception as exc:  # the one place a bug becomes one line, not a traceback
        if _json_too_deep(exc):
            print(
                f"fabricops {command}: invalid input: a JSON or YAML document is nested too deeply to "
                "read (no fabricops input nests that deep); check the files given to this command",
                file=sys.stderr,
            )
            return EXIT_BADINPUT
        log = _write_log(command, argv, exc)
        where = f"; details in {log}" if log else "; no log written (no log directory could be written)"
        print(f"fabricops {command}: internal error: {_one_line(exc)}{where}", file=sys.stderr)
        return EXIT_NORUN


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
