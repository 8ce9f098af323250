"""A GPU server's HCA ports: the knob table of ``fabricops.hostqos.knobs``, by delegation.

The host table (sysfs ECN enables, CNP DSCP/priority, traffic_class, ``cma_roce_tos``,
``cma_roce_mode``) stays where the roce_host role's modules and the boot script use it; this
platform is the registry's door to it, so a caller asks ``platform("host")`` as it asks
``platform("onyx")``. Ports are netdevs (``ens1f0np0``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["HOST", "HostPlatform"]

#: the fabricops metric (``monitor/collector.py``) that shows a host knob at work
METRICS = {
    "ecn_np": "fabricops_roce_ecn_marked_packets_total",
    "ecn_rp": "fabricops_roce_cnp_handled_total",
    "cnp_dscp": "fabricops_roce_cnp_sent_total",
    "cnp_priority": "fabricops_roce_cnp_sent_total",
    "pfc": "fabricops_pfc_receive_pause_frames_total",
}


class HostPlatform:
    name = "host"
    title = "host"

    @staticmethod
    def _knobs() -> Any:
        from fabricops.hostqos import knobs

        return knobs

    def normalize_port(self, port: str) -> str:
        """A Linux netdev name (1-15 characters, no slash or space)."""
        from fabricops.switch.errors import SwitchError

        text = str(port).strip()
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,15}", text, re.ASCII):
            raise SwitchError(f"{port!r} is not a network interface name.")
        return text

    def port_state(self, cfg: Any, netdev: str, device: str, port: int) -> dict[str, Any]:
        """The desired state of one HCA port (``fabricops.hostqos.plan.port_state``)."""
        from fabricops.hostqos.plan import port_state

        return port_state(cfg, netdev, device, port)

    def knobs(self, netdev: str, device: str, port: int, want: Mapping[str, Any]) -> list[Any]:
        return self._knobs().knobs_for(netdev, device, port, want)

    def read_spec(self, knobs: list[Any]) -> dict[str, list[Any]]:
        return self._knobs().read_spec(knobs)

    def values(self, netdev: str, knobs: list[Any], raw: Mapping[str, Any]) -> tuple[dict, list[str]]:
        return self._knobs().values_from(netdev, knobs, raw)

    def plan(self, knobs: list[Any], current: Mapping[str, str | None]) -> list[Any]:
        return self._knobs().plan(knobs, current)

    def verify(self, netdev: str, knobs: list[Any], current: Mapping[str, str | None]) -> list[str]:
        return self._knobs().verify(netdev, knobs, current)

    def render(self, knobs: list[Any], current: Mapping[str, str | None]) -> str:
        return self._knobs().render(knobs, current)

    def describe(self, netdev: str, knobs: list[Any], current: Mapping[str, str | None]) -> list[str]:
        return self.verify(netdev, knobs, current)

    def metric(self, knob_name: str) -> str | None:
        """The metric that shows ``knob_name`` (``ecn_np[3]`` -> its family) at work, if any."""
        return METRICS.get(knob_name.split("[", 1)[0])

    def __repr__(self) -> str:
        return "<platform host>"


HOST = HostPlatform()
