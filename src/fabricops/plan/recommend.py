"""The interconnect choice per scenario, and the whole plan (docs/plan.md).

Scenario rows are data (``switches.yml`` ``scenarios``): the first row whose ``when`` matches wins.
:func:`make_plan` puts the recommendation, the sized fabric (:mod:`.sizing`) and the step's
communication (:mod:`.traffic`) together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fabricops.plan import catalog, nvl, sizing, traffic
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
    nvlink: nvl.NVLinkPlan | None = None  #: NVLink domains (multi-node NVLink compute trays), else None

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
            "nvlink": None if self.nvlink is None else self.nvlink.to_dict(),
        }


def make_plan(
    gpus: int | None,
    gpus_per_node: int | None = None,
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
    profile: str | None = None,
    domain_size: int | None = None,
    domains: int | None = None,
    nvl_config: str | None = None,
) -> Plan:
    """Recommend, size and check a fabric for a training job on ``gpus`` GPUs.

    With ``profile`` (a hardware profile with a multi-node NVLink domain: gb200-nvl72, gb300-nvl72) the
    nodes are its compute trays: the plan sizes NVLink domains of ``domain_size`` trays (default the
    profile's most) and a scale-out network of one rail per HCA (:mod:`.nvl`); ``domains`` full
    domains may replace ``gpus``."""
    job = dict(
        model_params=model_params, precision=precision, step_time=step_time, comm_share=comm_share,
        strategy=strategy, pipeline_stages=pipeline_stages, micro_batch=micro_batch, seq_len=seq_len,
        hidden=hidden, micro_batches=micro_batches,
    )
    if profile is not None:
        return _make_nvl_plan(
            gpus, profile, domain_size=domain_size, domains=domains, nvl_config=nvl_config,
            gpus_per_node=gpus_per_node, rails=rails, switch=switch, budget=budget, cloud=cloud,
            oversubscription=oversubscription, **job,
        )
    for flag, value in (("--domain-size", domain_size), ("--domains", domains), ("--nvl-config", nvl_config)):
        if value is not None:
            raise PlanInputError(
                f"{flag} needs --profile with a multi-node NVLink domain (gb200-nvl72 or gb300-nvl72)"
            )
    if gpus is None:
        raise PlanInputError("the following arguments are required: --gpus")
    gpus_per_node = 8 if gpus_per_node is None else gpus_per_node
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


def _make_nvl_plan(
    gpus: int | None,
    profile: str,
    *,
    domain_size: int | None,
    domains: int | None,
    nvl_config: str | None,
    gpus_per_node: int | None,
    rails: int | None,
    switch: str | None,
    budget: str,
    cloud: bool,
    oversubscription: float,
    model_params: float,
    precision: str,
    step_time: float,
    comm_share: float,
    strategy: str,
    pipeline_stages: int,
    micro_batch: int | None,
    seq_len: int | None,
    hidden: int | None,
    micro_batches: int | None,
) -> Plan:
    """A plan on multi-node NVLink compute trays: NVLink domains, then one scale-out rail per HCA."""
    asked = "--profile"
    if domain_size is not None:
        asked = "--domain-size"
    elif domains is not None:
        asked = "--domains"
    prof = nvl.load(profile, asked)
    per_tray, hcas = prof.gpu.count, prof.hca.count
    if gpus_per_node is not None and gpus_per_node != per_tray:
        raise PlanInputError(
            f"--gpus-per-node {gpus_per_node} disagrees with {prof.name}'s {per_tray} GPUs per compute tray: "
            "leave it out"
        )
    if rails is not None and rails != hcas:
        raise PlanInputError(
            f"--rails {rails} disagrees with {prof.name}'s {hcas} HCAs per compute tray (one rail each): "
            "leave it out"
        )
    if budget not in BUDGETS:
        raise PlanInputError(f"unknown budget {budget!r}: use one of {', '.join(BUDGETS)}")
    dom = nvl.size_domains(prof, gpus, domains, domain_size, nvl_config, profile_name=profile)
    sw = nvl.scale_out_switch(prof, switch)
    # the existing fat-tree sizing, rail-optimised: rail r of every tray to a rail-r leaf group
    design = sizing.size(dom.gpus, per_tray, sw, rails=hcas, oversubscription=oversubscription)
    multi = design.nodes > 1
    notes: list[str] = []
    if budget != "high" or cloud:
        notes.append(f"--budget/--cloud do not change the plan: {prof.name} fixes the HCAs ({prof.hca.speed} "
                     f"{prof.hca.link_layer})")
    if dom.partial:
        last = list(dom.domain_trays)[-1]
        notes.append(
            f"partial last NVLink domain: {last} has {dom.last_domain_trays} of {dom.domain_size} compute "
            f"trays ({dom.last_domain_trays * per_tray} GPUs)"
        )
    interconnect = (
        f"multi-node NVLink {prof.gpu.nvlink} inside {dom.domains} NVLink domain(s) of up to "
        f"{dom.domain_size * per_tray} GPUs; "
        + (f"{prof.hca.speed} {prof.hca.link_layer} scale-out, one rail per HCA ({hcas} per tray)" if multi
           else "no scale-out fabric (one compute tray)")
    )
    rec = Recommendation(
        scenario="nvlink_domains",
        interconnect=interconnect,
        link_layer=prof.hca.link_layer if multi else None,
        speed=prof.hca.speed if multi else None,
        switch=sw.model if multi else None,
        reason=(
            f"{prof.name} compute trays share NVLink within a domain ({dom.configuration}, {dom.doc}); the "
            f"compute network joins the domains, {hcas} {prof.hca.speed} HCAs per tray as {hcas} rails"
        ),
    )
    gen = prof.gpu.nvlink_gen
    if dom.domains == 1:  # the whole job inside one NVLink domain: NVLink bounds the collective
        busbw = float(gen.total_per_direction_gbs)
        basis = f"NVLink {gen.version} total per direction inside one NVLink domain ({gen.source})"
    else:
        busbw, basis = traffic.estimate_busbw_gbs(
            dom.domains, per_tray, hcas, prof.hca.rate_gbps, prof.gpu.model
        )
    step = traffic.step_comm(
        model_params, precision, dom.gpus, busbw, basis, step_time_s=step_time, comm_share=comm_share,
        strategy=strategy, pipeline_stages=pipeline_stages, micro_batch=micro_batch, seq_len=seq_len,
        hidden=hidden, micro_batches=micro_batches,
    )
    if dom.domains > 1 and not step.fits:
        notes.append(
            f"the step needs {step.required_busbw_gbs:.1f} GB/s busbw per GPU to keep communication "
            f"within {step.comm_share:.0%} of {step.step_time_s:g} s, more than the "
            f"{step.busbw_gbs:.1f} GB/s the scale-out network gives between domains: keep the data-parallel "
            "collective inside a domain, overlap or shard"
        )
    notes.extend(design.notes)
    return Plan(
        inputs={
            "gpus": dom.gpus,
            "gpus_per_node": per_tray,
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
            "profile": profile,
            "domain_size": dom.domain_size,
            "domains": domains,
            "nvl_config": dom.configuration,
        },
        recommendation=rec,
        switch=sw if multi else None,
        design=design,
        comm=step,
        rule_of_thumb=catalog.rule_of_thumb(dom.gpus),
        hardware_profile=profile,
        gpu_model=prof.gpu.model,
        link_layer=prof.hca.link_layer if multi else None,
        host_speed=prof.hca.speed if multi else None,
        notes=notes,
        nvlink=dom,
    )
