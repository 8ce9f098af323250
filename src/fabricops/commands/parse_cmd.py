"""``fabricops parse TOOL [FILE|-]``: print a tool's output as JSON."""

from __future__ import annotations

import argparse
import json
import sys

from fabricops.errors import FabricopsError
from fabricops.parsers import PARSERS, parse, to_data


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "parse",
        help="parse a tool's output into JSON",
        description="Parse the output of TOOL (read from FILE, or stdin when FILE is - or absent) "
        "and print the record as JSON. Exit 2 when the input is not that tool's output.",
    )
    p.add_argument("tool", choices=sorted(PARSERS), metavar="TOOL", help=", ".join(sorted(PARSERS)))
    p.add_argument("file", nargs="?", default="-", help="file to read; - or absent for stdin")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(args.file, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError as exc:
            raise FabricopsError(f"cannot read {args.file}: {exc.strerror}") from None
    record = parse(args.tool, text)
    json.dump(to_data(record), sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
    return 0
