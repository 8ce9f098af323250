"""NCCL bus bandwidth across hosts: the model's prediction and the published floors.

Ring all_reduce (and all_gather / reduce_scatter, whose busbw peak is the same link bound) moves,
per GPU, busbw bytes over the slowest edge of the ring. Across hosts the ring's inter-host edges are
the rails: NCCL spreads its channels over the R rails a host uses, so the inter-host edge carries
``R x r`` GB/s, ``r`` the slowest rail's rate in GB/s (Gb/s / 8). Inside a host the edge is NVLink,
``nvlink`` GB/s per GPU per direction (``data/nvlink.yml``). So::

    predicted busbw = min(R x r, NVLink per-GPU unidirectional rate)

(nccl-tests doc/PERFORMANCE.md: busbw reflects the speed of the slowest link; REFERENCE.md "NCCL per
NIC across nodes ~24 GB/s per 200G NIC, 46-48 GB/s per 400G" is that bound at 0.92-0.96 efficiency.)
Floors: the profile's per-NIC figure (thresholds.yml) x R less a run-to-run tolerance, or the
profile's single-node figure for one host; the band and the tolerance: ``data/nccl_band.yml``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricops.model import _data
from fabricops.model.nvlink import NVLINK

__all__ = ["Band", "Floor", "Prediction", "band", "floor", "predict"]


@dataclass(frozen=True)
class Prediction:
    busbw_gbs: float  #: the peak busbw the plan allows
    rails: int  #: rails per host NCCL uses (the fewest any host has)
    rail_gbps: float | None  #: the slowest rail's rate, Gb/s (None: one host, no NIC in the ring)
    nic_gbs: float | None  #: R x r in GB/s
    nvlink_gbs: float  #: NVLink per GPU, per direction
    bound: str  #: "nics" or "nvlink"
    basis: str  #: the formula with its numbers, in words


@dataclass(frozen=True)
class Floor:
    value: float
    basis: str
    source: str


@dataclass(frozen=True)
class Band:
    low: float
    high: float
    above_tolerance: float
    source: str

    def judge(self, measured: float, predicted: float) -> str:
        """``"low"``, ``"high"`` (more than the tolerance above the prediction) or ``"ok"``."""
        if measured < self.low * predicted:
            return "low"
        if measured > self.high * predicted * (1 + self.above_tolerance):
            return "high"
        return "ok"


def _g(x: float) -> str:
    return f"{x:g}"


def predict(rails_gbps: Mapping[str, Sequence[float]], nvlink: int) -> Prediction:
    """Peak Ring busbw for hosts whose NCCL rails run at ``rails_gbps`` (host -> the rate, Gb/s, of
    each rail NCCL uses there) with GPUs of NVLink generation ``nvlink``. One host: NVLink only."""
    if nvlink not in NVLINK:
        raise ValueError(f"unknown NVLink generation {nvlink!r}; known: {sorted(NVLINK)}")
    nv = float(NVLINK[nvlink].total_per_direction_gbs)
    if len(rails_gbps) < 2:
        return Prediction(nv, 0, None, None, nv, "nvlink", f"one host: NVLink {nvlink} per-GPU {_g(nv)} GB/s")
    counts = [len(v) for v in rails_gbps.values()]
    rates = [float(r) for v in rails_gbps.values() for r in v]
    if not rates or min(counts) == 0:
        raise ValueError("a host has no rail for NCCL: no prediction across hosts")
    if any(r <= 0 for r in rates):
        raise ValueError("rail rates must be positive Gb/s")
    n, r = min(counts), min(rates)
    nic = n * r / 8
    bound = "nics" if nic <= nv else "nvlink"
    basis = (
        f"min({n} rails x {_g(r)} Gb/s / 8 = {_g(nic)} GB/s, NVLink {nvlink} per-GPU {_g(nv)} GB/s)"
        f" = {_g(min(nic, nv))} GB/s"
    )
    return Prediction(min(nic, nv), n, r, nic, nv, bound, basis)


def band() -> Band:
    b = _data.load("nccl_band.yml")["band"]
    return Band(float(b["low"]), float(b["high"]), float(b["above_tolerance"]), b["source"])


def floor(pred: Prediction, profile: Any) -> Floor:
    """The published floor for a run the model predicted as ``pred`` on hardware ``profile`` (a
    name or a :class:`fabricops.model.profiles.Profile`): one host, the profile's single-node figure;
    across hosts, rails x the per-NIC figure for the rails' rate less the run-to-run tolerance
    (``data/nccl_band.yml``). The figures have one home, the profile thresholds
    (:func:`fabricops.model.profiles.threshold_for`). ValueError (one sentence) when none applies."""
    from fabricops.model import profiles

    try:
        if pred.rail_gbps is None:
            t = profiles.threshold_for(profile, "nccl_all_reduce_single_node")
            return Floor(float(t.value), t.basis, t.source)
        t = profiles.threshold_for(profile, "nccl_busbw_per_nic", port_rate=pred.rail_gbps)
    except profiles.ProfileError as exc:
        raise ValueError(str(exc)) from None
    tol = _data.load("nccl_band.yml")["floor_tolerance"]
    value = pred.rails * float(t.value) * (1 - float(tol["value"]))
    basis = (f"{pred.rails} rails x {_g(float(t.value))} GB/s per {_g(pred.rail_gbps)} Gb/s NIC"
             f" less {float(tol['value']):.0%}")
    if value > pred.busbw_gbs:  # NVLink-bound: the NICs' floor is out of reach by design
        value = band().low * pred.busbw_gbs
        basis += f", capped at {band().low:g} x the NVLink-bound prediction"
    return Floor(value, basis, f"{t.source}; {tol['source']}")
