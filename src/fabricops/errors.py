"""Exceptions that carry one sentence a user can act on, and the exit statuses of every command.

The exit-status table (docs/cli.md) is the same for every ``fabricops`` command: each status means
one thing, so a pipeline can gate on it.
"""

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_DRIFT = 3
EXIT_NORUN = 4
EXIT_BADINPUT = 5
#: Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
#: The reader of stdout went away (``fabricops ... | head``): 128 + SIGPIPE, what ``cat`` exits with.
EXIT_PIPE = 141

#: status -> what it means, for every command (docs/cli.md prints the same table).
EXIT_MEANING = {
    EXIT_OK: "ran, and the verdict is good (pass / no drift / healthy / parsed)",
    EXIT_FAILED: "ran, and checks failed (verify: a check failed; diagnose: a fault was found)",
    EXIT_USAGE: "usage error (bad flags or arguments)",
    EXIT_DRIFT: "drift found (after --fix: drift still there)",
    EXIT_NORUN: "could not run (no verdict: nothing read, nothing checked, an output or stdout that cannot "
    "be written, or an internal error)",
    EXIT_BADINPUT: "invalid input data (not that tool's output, malformed evidence, too large, not UTF-8, "
    "nested too deeply, not a regular file)",
    EXIT_INTERRUPTED: "interrupted",
    EXIT_PIPE: "stdout was closed by its reader before the output was written",
}


class FabricopsError(Exception):
    """Base class: str(exc) is one sentence that says what to fix.

    ``exit_status`` is the status the command exits with; by default "could not run" (a missing
    file, an unreadable inventory, a tool that failed): no verdict was reached.
    """

    exit_status = EXIT_NORUN


class UsageError(FabricopsError):
    """Bad flags or arguments (the same status as argparse's own errors)."""

    exit_status = EXIT_USAGE


class CouldNotRun(FabricopsError):
    """Nothing to give a verdict on: no hosts, no evidence, an unreadable or unwritable file."""

    exit_status = EXIT_NORUN


class BadInput(FabricopsError):
    """Input data that is not what the command reads (malformed evidence, a foreign report)."""

    exit_status = EXIT_BADINPUT


class ParseError(BadInput):
    """Text that is not the output of the tool a parser reads.

    ``expected`` names what the parser looked for, so the message tells the user which tool's
    output to feed it.
    """

    def __init__(self, tool: str, expected: str, detail: str = ""):
        self.tool = tool
        self.expected = expected
        self.detail = detail
        msg = f"input is not {tool} output: expected {expected}"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)
