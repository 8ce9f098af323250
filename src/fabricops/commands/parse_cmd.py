"""``fabricops parse TOOL [FILE|-]``: print a tool's output as JSON.

Input is read as bytes, at most the tool's size cap plus one byte (so 60 MB on a pipe is refused
after reading ~4 MB, not loaded whole), and decoded strictly as UTF-8: too large or not UTF-8 is
a ParseError of one line, like input that is not the tool's output. FILE must be a regular file:
a FIFO (which would wait for a writer forever) or a device (``/dev/zero``) is refused with one
line, invalid input (5); a pipe is read as stdin, ``-``. Output goes out in one write;
a reader that goes away (``| head``) ends the command quietly, without a traceback.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import stat
import sys

from fabricops.cliopts import file_kind
from fabricops.errors import BadInput, FabricopsError
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
            # O_NONBLOCK: opening a FIFO does not wait for a writer; fstat then says what it is
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            with open(fd, "rb") as fh:
                st = os.fstat(fd)
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
                if not stat.S_ISREG(st.st_mode):
                    raise BadInput(
                        f"{path}: not a regular file ({file_kind(st.st_mode)}); give a file, "
                        f"or - to read {tool} output from stdin"
                    )
                if st.st_size > limit:
                    raise too_large(tool, limit, st.st_size)
                os.set_blocking(fd, True)
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
