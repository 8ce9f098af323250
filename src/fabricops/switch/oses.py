"""Which switch operating systems fabricops reaches, by every name an inventory spells them.

Access and transports need the OS (netmiko's device type, the REST API) before any platform code
runs; the platforms (``fabricops.roce.platforms``) key their registry on the same names. Nothing
here knows a knob.
"""

from __future__ import annotations

from .errors import SwitchError

__all__ = ["OS_NAMES", "REST_API_OS", "SWITCH_OS", "normalize_os"]

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
#: the OSes with a REST API fabricops can apply through (NVUE API, HTTPS on 8765)
REST_API_OS = frozenset({"cumulus"})


def normalize_os(name: str | None) -> str:
    """Our switch OS name for any :data:`OS_NAMES` spelling; else one sentence."""
    os_name = OS_NAMES.get(str(name or "").strip().lower())
    if os_name is None:
        raise SwitchError(
            f"switch OS {name!r} is not supported; set fabricops_switch_os to onyx or cumulus "
            "(or ansible_network_os to onyx / cumulus)."
        )
    return os_name
