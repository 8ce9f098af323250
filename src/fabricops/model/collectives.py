"""NCCL bus bandwidth (data: ``data/collectives.yml``; nccl-tests ``doc/PERFORMANCE.md``).

``algbw = bytes / time``; ``busbw = algbw x factor`` where, for n ranks, AllReduce's factor is
2(n-1)/n, ReduceScatter / AllGather / AlltoAll (n-1)/n, Broadcast / Reduce / SendRecv 1.
Bandwidths are GB/s with GB = 10^9 bytes, as nccl-tests prints them.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricops.model import _data

__all__ = ["COLLECTIVES", "Collective", "algbw", "busbw", "busbw_factor", "collective"]


@dataclass(frozen=True)
class Collective:
    name: str  #: canonical name, as in the nccl-tests binary (``all_reduce`` for all_reduce_perf)
    scale: int
    ring: bool  #: factor is scale x (n-1)/n when true, scale otherwise
    aliases: tuple[str, ...]
    source: str

    def factor(self, n: int) -> float:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"number of ranks must be a positive integer, got {n!r}")
        return self.scale * (n - 1) / n if self.ring else float(self.scale)


#: Collectives by canonical name: all_reduce, reduce_scatter, all_gather, alltoall, broadcast, reduce,
#: sendrecv.
COLLECTIVES: dict[str, Collective] = {
    row["name"]: Collective(row["name"], row["scale"], row["ring"], tuple(row["aliases"]), row["source"])
    for row in _data.load("collectives.yml")["collectives"]
}

_LOOKUP: dict[str, str] = {}
for _c in COLLECTIVES.values():
    for _alias in (_c.name, *_c.aliases):
        _LOOKUP[_alias.lower().replace("-", "_")] = _c.name


def collective(name: str) -> Collective:
    """Look up a collective by name, alias or nccl-tests binary (``all_reduce_perf``, ``..._perf_mpi``)."""
    key = str(name).strip().rsplit("/", 1)[-1].lower().replace("-", "_")
    for suffix in ("_perf_mpi", "_perf"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
            break
    if key not in _LOOKUP:
        raise ValueError(f"unknown collective {name!r}; expected one of {', '.join(COLLECTIVES)}")
    return COLLECTIVES[_LOOKUP[key]]


def busbw_factor(name: str, n: int) -> float:
    """busbw / algbw for a collective over n ranks: ``busbw_factor("all_reduce", 8) == 1.75``."""
    return collective(name).factor(n)


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (10^9 B/s): bytes / time."""
    if seconds <= 0:
        raise ValueError("time must be positive")
    return nbytes / seconds / 1e9


def busbw(nbytes: float, seconds: float, name: str, n: int) -> float:
    """Bus bandwidth in GB/s: algbw x factor(collective, n)."""
    return algbw(nbytes, seconds) * busbw_factor(name, n)
