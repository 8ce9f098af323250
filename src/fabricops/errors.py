"""Exceptions that carry one sentence a user can act on."""


class FabricopsError(Exception):
    """Base class: str(exc) is one sentence that says what to fix."""


class ParseError(FabricopsError):
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
