"""Which ports carry RoCE on a host, and the desired state of each (from the fabric-wide definition).

:func:`host_plan` is what the ``fabricops.fabric.roce_plan`` action returns to the ``roce_host``
role: the validated definition with its derived values, and per port the arguments of
``fabricops.fabric.mlnx_qos`` and ``fabricops.fabric.roce_sysfs``. The boot-time apply script reads
the same per-port document (``/etc/fabricops/roce-qos.json``), so the role, the modules and the
script cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fabricops.errors import FabricopsError
from fabricops.model.roce import RoceConfig, validate

__all__ = ["PlanError", "host_plan", "port_state", "select_ports"]


class PlanError(FabricopsError):
    """No usable RoCE port, or an override that names no RoCE port; one sentence."""


def select_ports(
    hcas: Sequence[Mapping[str, Any]], interfaces: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Ethernet-link-layer HCA ports with a netdev (from ``ansible_facts.fabric.hcas``).

    ``interfaces`` (netdev names) narrows the list; naming a netdev that is not a RoCE port of an HCA
    is an error, not a silent skip.
    """
    found = []
    for hca in hcas or []:
        for port in hca.get("ports") or []:
            if port.get("link_layer") == "Ethernet" and port.get("netdev"):
                found.append(
                    {
                        "netdev": port["netdev"],
                        "device": hca["name"],
                        "port": int(port["port"]),
                        "state": port.get("state"),
                    }
                )
    if interfaces:
        by_name = {p["netdev"]: p for p in found}
        missing = [i for i in interfaces if i not in by_name]
        if missing:
            known = ", ".join(sorted(by_name)) or "none"
            raise PlanError(
                f"roce_host_interfaces names {', '.join(missing)}, which is not an Ethernet (RoCE) HCA port "
                f"on this host; RoCE ports found: {known}."
            )
        found = [by_name[i] for i in interfaces]
    if not found:
        raise PlanError(
            "no Ethernet (RoCE) HCA port with a netdev was found in ansible_facts.fabric; gather "
            "fabricops.fabric.fabric_facts first and check that the HCAs run in Ethernet mode."
        )
    return found


def port_state(cfg: RoceConfig, netdev: str, device: str, port: int) -> dict[str, Any]:
    """Desired state of one port: arguments for mlnx_qos and roce_sysfs."""
    ecn = [cfg.ecn_enabled(p) for p in range(8)]
    qos: dict[str, Any] = {
        "trust": cfg.trust,
        "pfc": cfg.pfc_vector,
        "dscp2prio": {str(d): p for d, p in cfg.dscp2prio.items()} if cfg.trust == "dscp" else {},
    }
    if cfg.cable_length_m is not None:
        qos["cable_len"] = cfg.cable_length_m
    return {
        "netdev": netdev,
        "device": device,
        "port": port,
        "mlnx_qos": qos,
        "sysfs": {
            "ecn_np": ecn,
            "ecn_rp": ecn,
            "cnp_dscp": cfg.cnp_dscp,
            "cnp_priority": cfg.cnp_priority,
            "traffic_class": cfg.tos,
            "rdma_cm_tos": cfg.tos,
            "roce_mode": cfg.roce_mode,
        },
    }


def host_plan(
    roce: Mapping[str, Any] | None, hcas: Sequence[Mapping[str, Any]], interfaces: Sequence[str] | None = None
) -> dict[str, Any]:
    cfg = validate(roce)
    ports = select_ports(hcas, interfaces)
    return {
        "roce": cfg.to_data(),
        "ports": [port_state(cfg, p["netdev"], p["device"], p["port"]) for p in ports],
    }
