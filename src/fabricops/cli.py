"""The ``fabricops`` command.

Each subcommand lives in its own module exposing ``register(subparsers)``; the module's handler
returns the exit status. Errors that a user can fix (:class:`FabricopsError`) print one line on
stderr and exit with the status the subcommand documents (2 for bad input), never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from fabricops import __version__
from fabricops.errors import FabricopsError, ParseError

# name -> module with register(subparsers); a module that is not there yet is skipped.
SUBCOMMANDS = [
    "fabricops.commands.parse_cmd",
    "fabricops.lab.cli",
    "fabricops.verify.cli",
    "fabricops.drift",
    "fabricops.diagnose",
    "fabricops.plan",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fabricops",
        description="Take GPU servers and Spectrum/InfiniBand switches to a validated training fabric.",
    )
    parser.add_argument("--version", action="version", version=f"fabricops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ParseError as exc:
        print(f"fabricops {args.command}: {exc}", file=sys.stderr)
        return 2
    except FabricopsError as exc:
        print(f"fabricops {args.command}: {exc}", file=sys.stderr)
        return getattr(exc, "exit_status", 1)
    except KeyboardInterrupt:
        print(f"fabricops {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
