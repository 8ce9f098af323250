"""The one error of switch work below the platforms (access, transports, the lock)."""

from __future__ import annotations

from fabricops.errors import FabricopsError

__all__ = ["SwitchError"]


class SwitchError(FabricopsError):
    """A switch task that cannot go on; the message names the switch and the step."""
