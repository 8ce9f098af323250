"""The interconnect choice per scenario, and the whole plan (docs/plan.md).

Scenario rows are data (``switches.yml`` ``scenarios``): the first row whose ``when`` matches wins.
:func:`make_plan` puts the recommendation, the sized fabric (:mod:`.sizing`) and the step's
communication (:mod:`.traffic`) together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fabricops.plan import catalog, sizing, traffic
from fabricops.plan.catalog import PlanInputError

__all__ = ["BUDGETS", "Plan", "Recommendation", "make_plan", "recommend"]

BUDGETS = ("low", "medium", "high")


@dataclass(frozen=True)
class Recommendation:
    scenario: str  #: single_node | cloud | tight_budget | small_cluster | large_cluster
    interconnect: str  #: e.g. "InfiniBand NDR (400 Gb/s per 4X port)"
    link_layer: str | None  #: InfiniBand | Ethernet | None (NVLink only, cloud)
    speed: str | None  #: NDR, HDR, 400GbE, ... (port speed of the hosts' NICs)
    switch: str | None  #: recommended switch model
    reason: str


def _matches(when: dict[str, Any], gpus: int, nodes: int, budget: str, cloud: bool) -> bool:
    if "nodes_max" in when and nodes > when["nodes_max"]:
        return False
    if "cloud" in when and bool(when["cloud"]) != cloud:
        return False
    if "budget" in when and budget not in when["budget"]:
        return False
    return not ("gpus_max" in when and gpus > when["gpus_max"])


def recommend(gpus: int, gpus_per_node: int = 8, budget: str = "high", cloud: bool = False) -> Recommendation:
    """The interconnect for a cluster of ``gpus`` GPUs (first matching scenario row)."""
    if budget not in BUDGETS:
        raise PlanInputError(f"unknown budget {budget!r}: use one of {', '.join(BUDGETS)}")
    nodes = -(-gpus // gpus_per_node)
    for row in catalog.scenario_rows():
        if _matches(row.get("when") or {}, gpus, nodes, budget, cloud):
            return Recommendation(
                scenario=row["scenario"],
                interconnect=row["interconnect"],
                link_layer=row.get("link_layer"),
                speed=row.get("speed"),
                switch=row.get("switch"),
                reason=" ".join(str(row["reason"]).split()),
            )
    raise AssertionError("the scenario table must end with a catch-all row")  # pragma: no cover


@dataclass
class Plan:
    """A fabric plan: inputs, recommendation, sized design, step communication."""

    inputs: dict[str, Any]
    recommendation: Recommendation
    switch: catalog.Switch | None
    design: sizing.Design
    comm: traffic.StepComm
    rule_of_thumb: dict[str, Any]
    hardware_profile: str | None  #: shipped profile matching the hosts' NICs, if any
    gpu_model: str  #: as nvidia-smi prints it (lab slice, profile)
    link_layer: str | None
    host_speed: str | None
    notes: list[str] = field(default_factory=list)

    @property
    def roce(self) -> bool:
        return self.link_layer == "Ethernet"

    def to_dict(self) -> dict[str, Any]:
        sw = self.switch
        return {
            "inputs": dict(self.inputs),
            "recommendation": dict(self.recommendation.__dict__),
            "switch": None
            if sw is None
            else {
                "model": sw.model,
                "name": sw.name,
                "asic": sw.asic,
                "link_layer": sw.link_layer,
                "ports": sw.ports,
                "speed": sw.speed,
                "port_rate_gbps": sw.port_rate_gbps,
                "source": sw.source,
            },
            "design": self.design.to_dict(),
            "comm": self.comm.to_dict(),
            "rule_of_thumb": dict(self.rule_of_thumb),
            "hardware_profile": self.hardware_profile,
            "gpu_model": self.gpu_model,
            "link_layer": self.link_layer,
            "host_speed": self.host_speed,
            "notes": list(self.notes),
        }


def make_plan(
    gpus: int,
    gpus_per_node: int = 8,
    model_params: float = 7e9,
    precision: str = "bf16",
    step_time: float = 1.0,
    switch: str | None = None,
    budget: str = "high",
    cloud: bool = False,
    rails: int | None = None,
    oversubscription: float = 1.0,
    comm_share: float = 0.5,
    strategy: str = "dp",
    pipeline_stages: int = 1,
    micro_batch: int | None = None,
    seq_len: int | None = None,
    hidden: int | None = None,
    micro_batches: int | None = None,
) -> Plan:
    """Recommend, size and check a fabric for a training job on ``gpus`` GPUs."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise PlanInputError(f"--gpus must be a positive whole number, not {gpus!r}")
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or not 1 <= gpus_per_node <= 16:
        raise PlanInputError(f"--gpus-per-node must be a whole number from 1 to 16, not {gpus_per_node!r}")
    rec = recommend(gpus, gpus_per_node, budget, cloud)
    notes: list[str] = []
    sw: catalog.Switch | None = None
    if switch:
        sw = catalog.switch(switch)
        if rec.switch and sw.model != rec.switch:
            notes.append(f"--switch {sw.model} replaces the recommended {rec.switch}")
    elif rec.switch:
        sw = catalog.switch(rec.switch)
    elif gpus > gpus_per_node:
        # cloud: size with the default large-cluster switch for information
        sw = catalog.switch(catalog.scenario_rows()[-1]["switch"])
        notes.append(f"sized with {sw.model} for reference; the provider chooses the switches")
    design = sizing.size(gpus, gpus_per_node, sw, rails=rails, oversubscription=oversubscription)
    link_layer = sw.link_layer if (sw and design.nodes > 1) else None
    host_speed = sw.speed if link_layer else None
    prof = catalog.host_profile(link_layer, host_speed) if link_layer else None
    if link_layer and prof is None:
        notes.append(
            f"no shipped hardware profile for {host_speed} {link_layer} hosts: add one under "
            "src/fabricops/model/data/profiles/ before deploying"
        )
    gpu_model = (prof or {}).get("gpu") or "NVIDIA H100 80GB HBM3"
    busbw, basis = traffic.estimate_busbw_gbs(
        design.nodes, gpus_per_node, design.rails, design.port_rate_gbps, gpu_model
    )
    step = traffic.step_comm(
        model_params,
        precision,
        gpus,
        busbw,
        basis,
        step_time_s=step_time,
        comm_share=comm_share,
        strategy=strategy,
        pipeline_stages=pipeline_stages,
        micro_batch=micro_batch,
        seq_len=seq_len,
        hidden=hidden,
        micro_batches=micro_batches,
    )
    if design.nodes > 1 and not step.fits:
        notes.append(
            f"the step needs {step.required_busbw_gbs:.1f} GB/s busbw per GPU to keep communication "
            f"within {step.comm_share:.0%} of {step.step_time_s:g} s, more than the "
            f"{step.busbw_gbs:.1f} GB/s this fabric gives: add rails, use faster ports, or overlap/shard"
        )
    notes.extend(design.notes)
    return Plan(
        inputs={
            "gpus": gpus,
            "gpus_per_node": gpus_per_node,
            "model_params": model_params,
            "precision": precision,
            "step_time_s": step_time,
            "switch": switch,
            "budget": budget,
            "cloud": cloud,
            "rails": design.rails,
            "oversubscription": oversubscription,
            "comm_share": comm_share,
            "strategy": strategy,
            "pipeline_stages": pipeline_stages,
        },
        recommendation=rec,
        switch=sw if design.nodes > 1 else None,
        design=design,
        comm=step,
        rule_of_thumb=catalog.rule_of_thumb(gpus),
        hardware_profile=(prof or {}).get("profile"),
        gpu_model=gpu_model,
        link_layer=link_layer,
        host_speed=host_speed,
        notes=notes,
    )
