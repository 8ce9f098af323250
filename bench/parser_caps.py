#!/usr/bin/env python3
"""CPU seconds each parser takes on worst-case-ish input at its own size cap (docs/parsers.md).

    .venv/bin/python bench/parser_caps.py [TOOL ...] [--top 3] [--screen 16] [--rows 40]

For every tool registered in ``fabricops parse`` it builds inputs just under the tool's cap:

- ``capture:NAME``     a real capture (tests/fixtures/<tool>/) repeated to the cap;
- ``row:NAME:N``       a capture whose line N is repeated to the cap (a table of one row, a block
                       of one key, ...), the lines before and after it kept; ``half:NAME:N`` and
                       ``word:NAME:N`` the same with the first half or the first word of line N;
- ``line:CHUNK``       one line of a chunk repeated (the CHUNKS of tests/unit/parsers/test_fuzz.py);
- ``lines:CHUNK``      lines that each hold one chunk, repeated to the cap;
- ``head+line:CHUNK``, ``head+lines:CHUNK``  the first capture, then the same filler (past the
                       header checks, into the body loop).

Each input is first timed at 1/``--screen`` of the cap (and, when that takes over 10 ms, at half
that, to project super-linear growth to the cap); the ``--top`` slowest projections per tool are
then timed at the cap itself (not when projected over ``--skip`` seconds). Times are CPU time of
this thread (time.thread_time), not wall time: the machine may be loaded. The closing table has
one line per tool, slowest first: cap, CPU seconds of its worst input, that input's peak memory
(tracemalloc, in a run of its own) and its label. A ParseError is a valid answer (the refusal);
any other exception is printed as a failure.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from captures import FIXTURES, fixture_names, read_fixture  # noqa: E402

from fabricops.errors import ParseError  # noqa: E402
from fabricops.parsers import PARSERS, get_parser, max_bytes  # noqa: E402

CHUNKS = [
    " ",
    "\t",
    "a",
    "0",
    "a ",
    "0 ",
    ": ",
    " :",
    "x:",
    "-",
    "= ",
    "(",
    " (UUID: ",
    "[",
    "#",
    "GPU0 ",
    "NV12 ",
    ".",
    ",",
    "1/",
    '"',
    "{",
    "Port 1: ",
    "0x1f ",
]


def fill(unit: str, size: int) -> str:
    """``unit`` repeated to at most ``size`` characters (at least once)."""
    return unit * max(size // max(len(unit), 1), 1)


def inputs(tool: str, size: int, rows: int) -> Iterator[tuple[str, str]]:
    """(label, text) pairs of about ``size`` characters for ``tool``."""
    names = fixture_names(tool) if (FIXTURES / tool).is_dir() else []
    captures = {name: read_fixture(tool, name) for name in names}
    for name, text in captures.items():
        yield f"capture:{name}", fill(text if text.endswith("\n") else text + "\n", size)
    for name, text in captures.items():
        lines = text.split("\n")
        distinct = sorted({i for i, ln in enumerate(lines) if ln.strip()}, key=lambda i: i)
        step = max(len(distinct) // rows, 1)
        for i in distinct[::step]:
            before, after = "\n".join(lines[:i]), "\n".join(lines[i + 1 :])
            room = size - len(before) - len(after) - 2
            line = lines[i]
            yield f"row:{name}:{i + 1}", f"{before}\n{fill(line + chr(10), room)}{after}"
            # the line cut in half (a branch entered, then refused or read as a note) and its first
            # word alone (the prefix that picks the branch)
            half = line[: max(len(line) // 2, 1)]
            yield f"half:{name}:{i + 1}", f"{before}\n{fill(half + chr(10), room)}{after}"
            word = line.split()[0] if line.split() else line
            yield f"word:{name}:{i + 1}", f"{before}\n{fill(word + chr(10), room)}{after}"
    head = next(iter(captures.values()), "")
    for chunk in CHUNKS:
        yield f"line:{chunk!r}", fill(chunk, size)
        yield f"lines:{chunk!r}", fill(chunk + "\n", size)
        if head:
            yield f"head+line:{chunk!r}", head + "\n" + fill(chunk, size - len(head) - 1)
            yield f"head+lines:{chunk!r}", head + "\n" + fill(chunk + "\n", size - len(head) - 1)


def peak_mb(tool: str, text: str) -> float:
    """Peak memory (MB traced by tracemalloc) of one parse, in a run of its own (tracing slows it)."""
    tracemalloc.start()
    with contextlib.suppress(Exception):
        get_parser(tool)(text)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def cpu(tool: str, text: str) -> tuple[float, str]:
    """(CPU seconds, outcome) of one parse."""
    func = get_parser(tool)
    start = time.thread_time()
    try:
        func(text)
        outcome = "record"
    except ParseError:
        outcome = "refused"
    except Exception as exc:  # a bug: printed, never hidden
        outcome = f"FAILED {type(exc).__name__}: {str(exc)[:80]}"
    return time.thread_time() - start, outcome


def bench(tool: str, top: int, screen: int, rows: int, skip_s: float) -> tuple[float, str, str, float]:
    cap = max_bytes(tool)
    small = cap // screen
    screened = []
    for label, text in inputs(tool, small, rows):
        text = text[:small]
        elapsed, outcome = cpu(tool, text)
        if outcome.startswith("FAILED"):
            print(f"  {tool} {label}: {outcome}", flush=True)
        projected = elapsed * screen
        if elapsed > 0.01:  # growth from half the size: super-linear inputs rank by their projection
            half, _ = cpu(tool, text[: small // 2])
            growth = min(max(math.log2(elapsed / max(half, 1e-6)), 1.0), 2.0)
            projected = elapsed * screen**growth
        screened.append((projected, label))
    screened.sort(reverse=True)
    chosen = {label: projected for projected, label in screened[:top]}
    worst = (0.0, "", "", 0.0)
    for label, text in inputs(tool, cap, rows):
        if label not in chosen:
            continue
        if chosen[label] > skip_s:  # projected from the screen: too long to run
            print(f"  {tool:20} {label:40.40} SKIPPED: projected {chosen[label]:.0f} s", flush=True)
            worst = max(worst, (chosen[label], label, "projected from the screen, not run", 0.0))
            continue
        elapsed, outcome = cpu(tool, text[:cap])
        print(
            f"  {tool:20} {label:40.40} {len(text[:cap]) / 2**20:5.2f} MB {elapsed:7.2f} s  {outcome}",
            flush=True,
        )
        if elapsed > worst[0]:
            worst = (elapsed, label, outcome, peak_mb(tool, text[:cap]))
    return worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tools", nargs="*", help="tools to time (default: every registered parser)")
    ap.add_argument("--top", type=int, default=3, help="inputs per tool timed at the full cap")
    ap.add_argument("--screen", type=int, default=16, help="screen inputs at cap / SCREEN")
    ap.add_argument("--rows", type=int, default=40, help="lines per capture tried as a repeated row")
    ap.add_argument(
        "--skip",
        type=float,
        default=120.0,
        help="do not run at the cap what the screen projects over SKIP seconds",
    )
    args = ap.parse_args()
    tools = args.tools or sorted(PARSERS)
    table = []
    for tool in tools:
        table.append((*bench(tool, args.top, args.screen, args.rows, args.skip), tool))
    print(f"\n{'tool':22} {'cap':>6} {'CPU s':>7} {'peak MB':>8}  worst input")
    for elapsed, label, outcome, peak, tool in sorted(table, reverse=True):
        print(f"{tool:22} {max_bytes(tool) // 2**20:4} MB {elapsed:7.2f} {peak:8.0f}  {label} ({outcome})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
