"""Credentials out of what we print: the one place that knows what a secret looks like.

Every report, log and error message that may hold a tool's output or a command line passes through
here (the drift report, ``cliopts.redact_text`` / ``redact_argv``, the CLI's internal-error log). It
sits below every room: it imports nothing of fabricops.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["REDACTED", "SECRET_KEY", "redact"]

REDACTED = "********"
#: Keys whose values are secrets, wherever they appear (diff lines, messages).
SECRET_KEY = re.compile(
    r"(pass(word|wd|phrase)?|secret|token|api[_-]?key|private[_-]?key|community|psk|credential|auth[_-]?key)",
    re.IGNORECASE,
)
#: ``key: value`` / ``key=value`` / ``key value`` inside free text; the value is masked to the end of
#: the line (``password 7 <hash>`` leaks nothing). :func:`redact` finds what this pattern would find,
#: in one pass: as a regex, ``[\w.-]*KEYWORD[\w.-]*`` retried every start and every keyword inside a
#: long word, each rescanned to the word's end (cubic: 40 KB of one line took 166 s).
_SECRET_PAIR = re.compile(
    r"(?P<key>[\w.-]*" + SECRET_KEY.pattern + r"[\w.-]*)"
    r"(?P<sep>\s*[:=]\s*|\s+)(?P<value>\"[^\"]*\"|'[^']*'|\S.*)",
    re.IGNORECASE,
)
_WORD = re.compile(r"[\w.-]+")
_BLANKS = re.compile(r"\s*")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every credential-looking ``key: value`` and every known secret value masked."""
    if not text:
        return text
    for value in secrets:
        if value and len(value) >= 4:
            text = text.replace(value, REDACTED)
    return _mask_pairs(text)


def _mask_pairs(text: str) -> str:
    """``_SECRET_PAIR.sub(key + sep + REDACTED, text)``, in time linear in ``len(text)``.

    The pattern's leftmost match always starts at the start of a word (a run of ``[\\w.-]``) and
    its key is that whole word: a key ending inside the word would be followed by a word character,
    which no separator starts with. So: take each word once; when it holds a keyword, read the
    separator and value after it exactly as the pattern does (``\\s*[:=]\\s*`` when a value follows
    it, else ``\\s+``; a quoted value up to its closing quote, else to the end of the line) and go
    on after the value. The next quote is found once per quote, not once per word, so many
    unclosed quotes stay linear too.
    """
    out: list[str] = []
    done = pos = 0
    n = len(text)
    next_quote: dict[str, tuple[int, int]] = {}  # quote -> (searched from, found at or -1)
    while True:
        word = _WORD.search(text, pos)
        if word is None:
            break
        pos = end = word.end()
        if not SECRET_KEY.search(word.group()):
            continue
        blank = _BLANKS.match(text, end).end()
        start = -1  # where the value starts
        if blank < n and text[blank] in ":=":
            after = _BLANKS.match(text, blank + 1).end()
            if after < n:
                start = after
        if start < 0 and blank > end and blank < n:
            start = blank  # `\s+` then the value (which may be the ':' or '=' itself)
        if start < 0:
            continue
        stop = -1
        quote = text[start]
        if quote in "\"'":
            searched, found = next_quote.get(quote, (-1, -1))
            if not (searched >= 0 and searched <= start + 1 and (found < 0 or found >= start + 1)):
                found = text.find(quote, start + 1)
                next_quote[quote] = (start + 1, found)
            if found >= 0:
                stop = found + 1
        if stop < 0:
            stop = text.find("\n", start)
            stop = n if stop < 0 else stop
        out += [text[done:end], text[end:start], REDACTED]
        done = pos = stop
    out.append(text[done:])
    return "".join(out)
