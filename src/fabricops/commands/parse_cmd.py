"""``fabricops parse TOOL [FILE|-]``: print a tool's output as JSON.

Input is read as bytes, at most the tool's size cap plus one byte (so 60 MB on a pipe is refused
after reading ~4 MB, not loaded whole), and decoded strictly as UTF-8: too large or not UTF-8 is
a ParseError of one line, like input that is not the tool's output. Output goes out in one write;
a reader that goes away (``| head``) ends the command quietly, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from fabricops.errors import FabricopsError
from fabricops.parsers import PARSERS, max_bytes, parse, to_data
from fabricops.parsers._text import decode, too_large


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "parse",
        help="parse a tool's output into JSON",
        description="Parse the output of TOOL (read from FILE, or stdin when FILE is - or absent) "
        "and print the record as JSON. Input that is not that tool's output, is larger than the "
        "tool's cap (docs/parsers.md) or is not UTF-8 is refused with one line on stderr.",
    )
    p.add_argument("tool", choices=sorted(PARSERS), metavar="TOOL", help=", ".join(sorted(PARSERS)))
    p.add_argument("file", nargs="?", default="-", help="file to read; - or absent for stdin")
    p.set_defaults(func=run)


def _read_capped(stream, limit: int, tool: str) -> bytes:
    """Read at most ``limit`` bytes; one byte more is refused without reading the rest."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise too_large(tool, limit, None)
    return data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape")


def _read(path: str, tool: str) -> str:
    limit = max_bytes(tool)
    if path == "-":
        # sys.stdin may be a text stream without .buffer (replaced by a test or an embedding caller)
        data = _read_capped(getattr(sys.stdin, "buffer", sys.stdin), limit, tool)
    else:
        try:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > limit:
                    raise too_large(tool, limit, size)
                data = _read_capped(fh, limit, tool)
        except OSError as exc:
            raise FabricopsError(f"cannot read {path}: {exc.strerror}") from None
    return decode(data, tool)


def _write(text: str) -> None:
    """Write to stdout at once; a closed pipe (``| head``) raises BrokenPipeError, which
    ``fabricops.cli.main`` turns into the quiet status 141 (docs/cli.md), as for every command."""
    sys.stdout.write(text)
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    text = _read(args.file, args.tool)
    record = parse(args.tool, text)
    _write(json.dumps(to_data(record), indent=2, sort_keys=False, allow_nan=False) + "\n")
    return 0
