"""The registry of RoCE platforms: an OS name in, the one object that knows that OS out.

As netmiko's dispatcher maps a device type to its class, :func:`platform` maps every spelling of
``fabricops_switch_os`` / ``ansible_network_os`` (``onyx``, ``mellanox.onyx.onyx``, ``cumulus``,
``nvidia.nvue.nvue``, ...) and ``host`` to one platform:

- ``onyx``: NVIDIA Onyx (``onyx.py``), ``nvue``/``cumulus``: Cumulus Linux NVUE (``nvue.py``) — the
  knob table (read, render, remove), port naming, desired facts, reads, apply flow, describe,
  and the user-shaped inverse of the desired facts;
- ``host``: a server's HCA ports (``host.py``, delegating to ``fabricops.hostqos.knobs``).

No code outside this package branches on the OS name.

>>> platform("mellanox.onyx.onyx").name, platform("nvue").name, platform("host").name
('onyx', 'cumulus', 'host')
"""

from __future__ import annotations

from typing import Any

from fabricops.switch import transport
from fabricops.switch.oses import OS_NAMES, SWITCH_OS, normalize_os

__all__ = ["OS_NAMES", "SWITCH_OS", "connect", "platform", "switch_platform"]



def _registry() -> dict[str, Any]:
    from .host import HOST
    from .nvue import NVUE
    from .onyx import ONYX

    return {"onyx": ONYX, "cumulus": NVUE, "host": HOST}


def platform(name: str | None) -> Any:
    """The platform for ``name`` (any :data:`OS_NAMES` spelling, or ``host``); a clear error else."""
    key = str(name or "").strip().lower()
    return _registry()["host" if key == "host" else normalize_os(name)]


def switch_platform(name: str | None) -> Any:
    """The platform of a switch OS (``host`` refused): what ``roce_switch`` drives."""
    if str(name or "").strip().lower() == "host":
        return platform(None)  # raises the same sentence
    return platform(name)


def connect(access: Any, *args: Any, **kwargs: Any) -> Any:
    """:func:`fabricops.switch.transport.connect` with the platforms' REST client for
    ``roce_switch_transport: rest`` (the NVUE API): what every caller that may meet a REST switch uses."""
    from .nvue_rest import from_access

    return transport.connect(access, *args, rest=from_access, **kwargs)
