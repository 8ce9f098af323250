"""Communication per training step, and whether the fabric carries it (docs/plan.md).

Reuses ``fabricops.model.comm`` (ring volumes) and the NCCL per-NIC bus bandwidth of
``model/data/thresholds.yml``. Bytes are bytes; bandwidths GB/s (10^9 B/s); times seconds.

* data parallel: all-reduce of the gradients, 2(n-1)/n x P x b per rank (ring);
* sharded (ZeRO-3 / FSDP): two all-gathers of the parameters + one reduce-scatter of the gradients,
  each (n-1)/n x P x b per rank;
* pipeline stages: point-to-point activations, micro_batch x seq_len x hidden x b per micro-batch
  per stage boundary, sent forward and (as gradients) backward.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from fabricops.model import _data, comm, nvlink
from fabricops.plan.catalog import PlanInputError

__all__ = [
    "StepComm",
    "activation_bytes",
    "estimate_busbw_gbs",
    "per_nic_busbw_gbs",
    "pipeline_bytes_per_rank",
    "step_comm",
]

STRATEGIES = ("dp", "sharded")


def activation_bytes(micro_batch: int, seq_len: int, hidden: int, precision: str | int = "bf16") -> int:
    """Bytes of one micro-batch's activations at a pipeline stage boundary: mb x seq x hidden x b."""
    for name, v in (("micro-batch", micro_batch), ("sequence length", seq_len), ("hidden size", hidden)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PlanInputError(f"{name} must be a positive whole number, not {v!r}")
    return micro_batch * seq_len * hidden * comm.bytes_per_element(precision)


def pipeline_bytes_per_rank(
    micro_batch: int, seq_len: int, hidden: int, precision: str | int, micro_batches: int
) -> int:
    """Bytes an interior pipeline stage sends per step: activations forward and their gradients
    backward for every micro-batch, 2 x m x mb x seq x hidden x b."""
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise PlanInputError(f"micro-batches per step must be a positive whole number, not {micro_batches!r}")
    return 2 * micro_batches * activation_bytes(micro_batch, seq_len, hidden, precision)


def per_nic_busbw_gbs(rate_gbps: float) -> tuple[float, str]:
    """NCCL all_reduce busbw one NIC of this rate sustains across nodes (GB/s) and its source.

    Rates in thresholds.yml are used as published; another rate scales the highest published one
    linearly (said so in the source string)."""
    table = _data.load("thresholds.yml")["nccl"]["busbw_per_nic_gbs"]
    for key, row in table.items():
        if float(key) == float(rate_gbps):
            return float(row["value"]), row["source"]
    top = max(table, key=float)
    row = table[top]
    return float(row["value"]) * rate_gbps / float(top), f"scaled from {top} Gb/s: {row['source']}"


def estimate_busbw_gbs(
    nodes: int, gpus_per_node: int, rails: int, rate_gbps: float, gpu_model: str | None = None
) -> tuple[float, str]:
    """Bus bandwidth per rank a ring all-reduce can reach (GB/s) and where the figure comes from.

    Across nodes the NICs bound it: per-NIC busbw x rails / GPUs per node. Within one node NVLink
    bounds it (total per direction of the GPU's NVLink generation; NVLink 4 when unknown)."""
    if nodes <= 1:
        gen = nvlink.nvlink_for_gpu(gpu_model) if gpu_model else None
        gen = gen or nvlink.NVLINK[4]
        return float(gen.total_per_direction_gbs), f"NVLink {gen.version} total per direction ({gen.source})"
    per_nic, src = per_nic_busbw_gbs(rate_gbps)
    return (
        per_nic * rails / gpus_per_node,
        f"{per_nic:g} GB/s per {rate_gbps:g} Gb/s NIC x {rails}/{gpus_per_node} ({src})",
    )


@dataclass
class StepComm:
    """Communication of one training step for one rank."""

    strategy: str  #: "dp" (all-reduce) or "sharded" (ZeRO-3/FSDP)
    params: float  #: model parameters
    precision: str
    ranks: int  #: data-parallel ranks the collective spans
    pipeline_stages: int
    gradient_bytes: float  #: P/stages x b: the gradients of one rank's stage
    collective_bytes_per_rank: float  #: ring traffic of the data-parallel collective(s)
    pipeline_bytes_per_rank: float  #: point-to-point activations (0 without pipeline stages)
    bytes_per_rank: float  #: total sent per rank per step
    busbw_gbs: float  #: bus bandwidth assumed per rank
    busbw_basis: str
    comm_time_s: float  #: bytes_per_rank / busbw
    step_time_s: float
    comm_share: float  #: the share of the step communication may take
    required_busbw_gbs: float  #: busbw that keeps communication within comm_share of the step
    fits: bool  #: busbw_gbs >= required_busbw_gbs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def step_comm(
    params: float,
    precision: str,
    gpus: int,
    busbw_gbs: float,
    busbw_basis: str = "",
    step_time_s: float = 1.0,
    comm_share: float = 0.5,
    strategy: str = "dp",
    pipeline_stages: int = 1,
    micro_batch: int | None = None,
    seq_len: int | None = None,
    hidden: int | None = None,
    micro_batches: int | None = None,
) -> StepComm:
    """Bytes per rank per step, their time at ``busbw_gbs``, and the busbw a step time needs."""
    if params is None or params < 0:
        raise PlanInputError(f"--model-params must be a number of parameters >= 0, not {params!r}")
    try:
        comm.bytes_per_element(precision)
    except ValueError:
        raise PlanInputError(
            f"unknown precision {precision!r}: use one of {', '.join(comm.BYTES_PER_ELEMENT)}"
        ) from None
    if strategy not in STRATEGIES:
        raise PlanInputError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    if step_time_s is None or step_time_s <= 0:
        raise PlanInputError(f"--step-time must be a positive number of seconds, not {step_time_s!r}")
    if not 0 < comm_share <= 1:
        raise PlanInputError(f"--comm-share must be in (0, 1], not {comm_share!r}")
    if isinstance(pipeline_stages, bool) or pipeline_stages < 1 or gpus % pipeline_stages:
        raise PlanInputError(f"--pipeline-stages {pipeline_stages} must divide --gpus {gpus}")
    ranks = gpus // pipeline_stages
    p_stage = params / pipeline_stages
    if strategy == "dp":
        coll = comm.allreduce_bytes_per_rank(p_stage, precision, ranks)
    else:
        coll = comm.sharded_bytes_per_rank(p_stage, precision, ranks)
    pp = 0
    if pipeline_stages > 1:
        missing = [
            n
            for n, v in (
                ("--micro-batch", micro_batch),
                ("--seq-len", seq_len),
                ("--hidden", hidden),
            )
            if v is None
        ]
        if missing:
            raise PlanInputError(f"pipeline stages need {', '.join(missing)} to size the activations")
        pp = pipeline_bytes_per_rank(
            micro_batch, seq_len, hidden, precision, micro_batches or pipeline_stages
        )
    total = coll + pp
    t = comm.comm_time_s(total, busbw_gbs) if busbw_gbs > 0 else float("inf")
    need = comm.required_busbw_gbs(total, step_time_s, comm_share)
    return StepComm(
        strategy=strategy,
        params=params,
        precision=precision,
        ranks=ranks,
        pipeline_stages=pipeline_stages,
        gradient_bytes=comm.gradient_bytes(p_stage, precision),
        collective_bytes_per_rank=coll,
        pipeline_bytes_per_rank=pp,
        bytes_per_rank=total,
        busbw_gbs=busbw_gbs,
        busbw_basis=busbw_basis,
        comm_time_s=t,
        step_time_s=step_time_s,
        comm_share=comm_share,
        required_busbw_gbs=need,
        fits=busbw_gbs >= need - 1e-9,
    )
