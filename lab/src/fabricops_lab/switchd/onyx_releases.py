"""The Onyx releases the emulator answers as, and what differs between them.

Each release's output forms follow real captures (docs/lab-fidelity.md lists them):

- ``3.6.5000`` (MLNX-OS 3.6.5000): ``show version`` as captured in NVIDIA's mellanox.onyx collection,
  tests/unit/modules/fixtures/onyx_command_show_version.txt and onyx_facts_show_version.cfg
  (Product name "MLNX-OS"); the JSON of ``show interfaces ethernet`` is a list of flat blocks with a
  ``header`` key (onyx_facts_show_interfaces_ethernet.cfg, onyx_interfaces_show.cfg); the JSON of
  ``show dcb priority-flow-control`` is a dict keyed by interface (onyx_pfc_interface_enabled.cfg).
- ``3.10.4504`` (the default, what the emulator always said it was): releases from 3.6.6000 on
  (mellanox.onyx BaseOnyxModule.ONYX_API_VERSION = "3.6.6000"; onyx_interface and onyx_pfc_interface
  branch on it) print ``show interfaces ethernet`` JSON as a list of one-key dicts
  ``[{"Eth1/1": [{...}]}]`` and the PFC JSON as a list of blocks whose third block holds the
  interfaces (onyx_pfc_interface reads ``pfc_config[2]``); Product name "Onyx".
- ``3.9.3202``: the same shapes as 3.10. It is here because mellanox.onyx compares releases as
  strings (``self._os_version >= self.ONYX_API_VERSION``): "3.9.3202" >= "3.6.6000" holds, but
  "3.10.4504" >= "3.6.6000" does not, so on 3.10 those modules take their pre-3.6.6000 branch and
  misread the real JSON (tests/conformance/onyx says which calls fail that way and why).
"""

from __future__ import annotations

__all__ = ["DEFAULT_RELEASE", "RELEASES", "release_info"]

DEFAULT_RELEASE = "3.10.4504"

RELEASES: dict[str, dict[str, object]] = {
    "3.6.5000": {
        "api": False,  # before 3.6.6000: the pre-API JSON shapes
        "product_name": "MLNX-OS",
        "build_date": "2017-11-10 18:14:32",
        "built_by": "jenkins@cc45f26cd083",
    },
    "3.9.3202": {
        "api": True,
        "product_name": "Onyx",
        "build_date": "2021-06-14 11:32:20",  # not from a capture
        "built_by": "sw-r2d2-bot@6c6a7e8d7c1b",
    },
    "3.10.4504": {
        "api": True,
        "product_name": "Onyx",
        "build_date": "2023-03-16 10:23:12",  # not from a capture: any date in the release's year
        "built_by": "sw-r2d2-bot@a3a9e1e5c1f0",
    },
}


def release_info(release: str | None) -> tuple[str, dict[str, object]]:
    """(release, its traits); None is the default; an unknown release is a ValueError naming the known."""
    rel = release or DEFAULT_RELEASE
    if rel not in RELEASES:
        raise ValueError(f"unknown Onyx release {rel!r} (the emulator knows {', '.join(sorted(RELEASES))})")
    return rel, RELEASES[rel]
