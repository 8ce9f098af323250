"""NVLink generations (data: ``data/nvlink.yml``).

``NVLINK[3].total_per_direction_gbs == 300`` (25 GB/s x 12 links; 600 counts both directions).
GB/s here are 10^9 bytes per second.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricops.model import _data

__all__ = ["NVLINK", "NVLinkGen", "nvlink_for_gpu"]


@dataclass(frozen=True)
class NVLinkGen:
    version: int
    gpus: tuple[str, ...]  #: GPU families with this generation, e.g. ("H100", "H200")
    per_link_gbs: float  #: per link, per direction, GB/s
    links: int  #: links per GPU
    total_per_direction_gbs: float
    total_bidirectional_gbs: float
    smi_link_gbs: float | None  #: per-link speed ``nvidia-smi nvlink --status`` prints
    source: str


def _load() -> dict[int, NVLinkGen]:
    out: dict[int, NVLinkGen] = {}
    for row in _data.load("nvlink.yml")["nvlink"]:
        gen = NVLinkGen(
            version=row["version"],
            gpus=tuple(row["gpus"]),
            per_link_gbs=row["per_link_gbs"],
            links=row["links"],
            total_per_direction_gbs=row["total_per_direction_gbs"],
            total_bidirectional_gbs=row["total_bidirectional_gbs"],
            smi_link_gbs=row["smi_link_gbs"],
            source=row["source"],
        )
        if gen.per_link_gbs * gen.links != gen.total_per_direction_gbs:
            raise ValueError(f"nvlink.yml: NVLink {gen.version} per link x links != total per direction")
        if 2 * gen.total_per_direction_gbs != gen.total_bidirectional_gbs:
            raise ValueError(f"nvlink.yml: NVLink {gen.version} bidirectional total is not 2 x per direction")
        out[gen.version] = gen
    return out


#: NVLink generations by version number 1..5.
NVLINK: dict[int, NVLinkGen] = _load()


def nvlink_for_gpu(gpu_name: str) -> NVLinkGen | None:
    """The NVLink generation of a GPU named as nvidia-smi prints it (``"NVIDIA H100 80GB HBM3"`` -> 4).

    Matches the family token (P100, V100, A100, H100, H200, B200) as a word; returns None for GPUs
    without a listed generation (PCIe consumer cards, unknown names).
    """
    words = {w.upper() for w in gpu_name.replace("-", " ").replace("_", " ").split()}
    for gen in NVLINK.values():
        if any(family.upper() in words for family in gen.gpus):
            return gen
    return None
