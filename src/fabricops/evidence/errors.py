"""The one error of the evidence parsers. Stdlib-only (shipped to hosts with the collector)."""

from __future__ import annotations

__all__ = ["SourceError"]


class SourceError(Exception):
    """A source printed something its parser cannot read; str() names what was expected."""
