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

__all__ = ["OS_NAMES", "SWITCH_OS", "platform", "switch_platform"]

#: ansible_network_os / fabricops_switch_os spellings -> our OS name
OS_NAMES = {
    "onyx": "onyx",
    "mellanox.onyx.onyx": "onyx",
    "mellanox_mlnxos": "onyx",
    "mlnxos": "onyx",
    "cumulus": "cumulus",
    "nvue": "cumulus",
    "cumulus_linux": "cumulus",
    "nvidia.nvue.nvue": "cumulus",
}
#: our switch OS names, in the order messages list them
SWITCH_OS = ("onyx", "cumulus")


def _registry() -> dict[str, Any]:
    from .host import HOST
    from .nvue import NVUE
    from .onyx import ONYX

    return {"onyx": ONYX, "cumulus": NVUE, "host": HOST}


def platform(name: str | None) -> Any:
    """The platform for ``name`` (any :data:`OS_NAMES` spelling, or ``host``); a clear error else."""
    key = str(name or "").strip().lower()
    os_name = "host" if key == "host" else OS_NAMES.get(key)
    if os_name is None:
        from fabricops.switch.model import SwitchError

        raise SwitchError(
            f"switch OS {name!r} is not supported; set fabricops_switch_os to onyx or cumulus "
            "(or ansible_network_os to onyx / cumulus)."
        )
    return _registry()[os_name]


def switch_platform(name: str | None) -> Any:
    """The platform of a switch OS (``host`` refused): what ``roce_switch`` drives."""
    if str(name or "").strip().lower() == "host":
        return platform(None)  # raises the same sentence
    return platform(name)
