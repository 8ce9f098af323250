"""The ``fabricops`` command.

Each subcommand lives in its own module exposing ``register(subparsers)``; the module's handler
returns the exit status. Every command exits with the statuses of one table (docs/cli.md,
:mod:`fabricops.errors`): 0 good verdict, 1 checks failed, 2 usage error, 3 drift found, 4 could
not run, 5 invalid input data, 130 interrupted, 141 stdout closed by its reader.

A failure is one line on stderr, never a traceback: a :class:`FabricopsError` prints its sentence;
an unexpected exception prints ``fabricops CMD: internal error: Type: message; details in LOG``
with the traceback written to LOG (:func:`log_dir`) and exits 4.
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
from fabricops.errors import (
    EXIT_INTERRUPTED,
    EXIT_NORUN,
    EXIT_PIPE,
    EXIT_USAGE,
    FabricopsError,
)

# name -> module with register(subparsers); a module that is not there yet is skipped.
SUBCOMMANDS = [
    "fabricops.commands.parse_cmd",
    "fabricops.lab.cli",
    "fabricops.verify.cli",
    "fabricops.drift",
    "fabricops.diagnose",
    "fabricops.plan",
]


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that says where the help is (exit status 2)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see '{self.prog} --help')\n")


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
    from fabricops.drift.report import redact

    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    text = redact(
        f"fabricops {__version__} {command}: internal error\nargv: {argv!r}\npython: {sys.version}\n\n"
        + "".join(traceback.format_exception(exc))
    )
    for directory in (log_dir(), Path(tempfile.gettempdir())):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"fabricops-{command}-{stamp}-{os.getpid()}.log"
            path.write_text(text, encoding="utf-8")
            return path
        except OSError:
            continue
    return None


def _one_line(exc: BaseException) -> str:
    from fabricops.drift.report import redact

    msg = " ".join(str(exc).split())
    if len(msg) > 200:
        msg = msg[:197] + "..."
    return redact(f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__)


def _quiet_broken_pipe() -> int:
    # Python would print "Exception ignored ... BrokenPipeError" when it flushes stdout at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_PIPE


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
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, not at exit
        return status
    except FabricopsError as exc:
        print(f"fabricops {command}: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_status", EXIT_NORUN))
    except KeyboardInterrupt:
        print(f"fabricops {command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except SystemExit:
        raise
    except Exception as exc:  # the one place a bug becomes one line, not a traceback
        log = _write_log(command, argv, exc)
        where = f"; details in {log}" if log else ""
        print(f"fabricops {command}: internal error: {_one_line(exc)}{where}", file=sys.stderr)
        return EXIT_NORUN


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
