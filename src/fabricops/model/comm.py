"""Communication volume of a training step (data: ``data/precisions.yml``).

Data-parallel training all-reduces the gradients every step. With P parameters at b bytes each the
gradients are ``P x b`` bytes, and a ring all-reduce over n ranks makes each rank send (and receive)
``2(n-1)/n x P x b`` bytes (REFERENCE.md, nccl-tests ``doc/PERFORMANCE.md``). Sharded training
(ZeRO-3 / FSDP) replaces it with reduce-scatter of gradients plus all-gather of parameters, each
``(n-1)/n x P x b`` per rank.

Because busbw is defined so that ``time = per-rank ring traffic / busbw``, the time of a collective
is its per-rank bytes divided by the bus bandwidth nccl-tests reports. Bytes are bytes; bandwidths
GB/s with GB = 10^9 bytes.

>>> gradient_bytes(7e9, "fp32")
28000000000
>>> allreduce_bytes_per_rank(7e9, "fp32", 8)
49000000000
"""

from __future__ import annotations

from fabricops.model import _data
from fabricops.model.collectives import busbw_factor

__all__ = [
    "BYTES_PER_ELEMENT",
    "all_gather_bytes_per_rank",
    "allreduce_bytes_per_rank",
    "allreduce_time_s",
    "bytes_per_element",
    "comm_time_s",
    "gradient_bytes",
    "reduce_scatter_bytes_per_rank",
    "required_busbw_gbs",
    "sharded_bytes_per_rank",
]

#: Bytes per element by precision name: fp32 4, bf16 2, fp16 2, fp8 1.
BYTES_PER_ELEMENT: dict[str, int] = {
    row["name"]: row["bytes"] for row in _data.load("precisions.yml")["precisions"]
}
_ALIASES: dict[str, str] = {
    alias.lower(): row["name"]
    for row in _data.load("precisions.yml")["precisions"]
    for alias in (row["name"], *row["aliases"])
}


def bytes_per_element(precision: str | int) -> int:
    """4 for ``"fp32"``, 2 for ``"bf16"``/``"fp16"``, 1 for ``"fp8"``; an int is taken as bytes."""
    if isinstance(precision, int) and not isinstance(precision, bool):
        if precision < 1:
            raise ValueError("bytes per element must be >= 1")
        return precision
    key = str(precision).strip().lower()
    if key not in _ALIASES:
        raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(BYTES_PER_ELEMENT)}")
    return BYTES_PER_ELEMENT[_ALIASES[key]]


def _whole(x: float) -> int | float:
    return round(x) if abs(x - round(x)) < 1e-6 * max(1.0, abs(x)) else x


def _check(params: float, n: int | None = None) -> None:
    if params < 0:
        raise ValueError("parameter count must be >= 0")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"number of ranks must be a positive integer, got {n!r}")


def gradient_bytes(params: float, precision: str | int = "fp32") -> int | float:
    """Bytes of gradients (or parameters) for P parameters: P x bytes per element."""
    _check(params)
    return _whole(params * bytes_per_element(precision))


def allreduce_bytes_per_rank(params: float, precision: str | int, n: int) -> int | float:
    """Bytes each rank sends (and receives) in a ring all-reduce of the gradients: 2(n-1)/n x P x b."""
    _check(params, n)
    return _whole(busbw_factor("all_reduce", n) * params * bytes_per_element(precision))


def reduce_scatter_bytes_per_rank(params: float, precision: str | int, n: int) -> int | float:
    """Bytes per rank of a ring reduce-scatter of P elements: (n-1)/n x P x b."""
    _check(params, n)
    return _whole(busbw_factor("reduce_scatter", n) * params * bytes_per_element(precision))


def all_gather_bytes_per_rank(params: float, precision: str | int, n: int) -> int | float:
    """Bytes per rank of a ring all-gather of P elements: (n-1)/n x P x b."""
    _check(params, n)
    return _whole(busbw_factor("all_gather", n) * params * bytes_per_element(precision))


def sharded_bytes_per_rank(
    params: float,
    grad_precision: str | int,
    n: int,
    param_precision: str | int | None = None,
    gathers: int = 2,
) -> int | float:
    """Bytes per rank per step for fully sharded training (ZeRO-3 / FSDP).

    ``gathers`` all-gathers of the parameters (2: forward and backward, as in the ZeRO paper's 3x
    volume accounting) plus one reduce-scatter of the gradients. ``param_precision`` defaults to the
    gradient precision.
    """
    if gathers < 0:
        raise ValueError("gathers must be >= 0")
    pp = grad_precision if param_precision is None else param_precision
    total = gathers * all_gather_bytes_per_rank(params, pp, n) + reduce_scatter_bytes_per_rank(
        params, grad_precision, n
    )
    return _whole(total)


def comm_time_s(bytes_per_rank: float, busbw_gbs: float) -> float:
    """Seconds to move ``bytes_per_rank`` of ring traffic at a bus bandwidth in GB/s."""
    if busbw_gbs <= 0:
        raise ValueError("bus bandwidth must be positive")
    return bytes_per_rank / (busbw_gbs * 1e9)


def allreduce_time_s(params: float, precision: str | int, n: int, busbw_gbs: float) -> float:
    """Seconds for the gradient all-reduce of one step at a given busbw (GB/s)."""
    return comm_time_s(allreduce_bytes_per_rank(params, precision, n), busbw_gbs)


def required_busbw_gbs(bytes_per_rank: float, step_time_s: float, share: float = 1.0) -> float:
    """Bus bandwidth (GB/s) that keeps the communication within ``share`` of a step of ``step_time_s``.

    ``required_busbw_gbs(49e9, 2.0, 0.5) == 49.0``: 49 GB per rank in 1 s.
    """
    if step_time_s <= 0:
        raise ValueError("step time must be positive")
    if not 0 < share <= 1:
        raise ValueError("share must be in (0, 1]")
    return bytes_per_rank / (step_time_s * share) / 1e9
