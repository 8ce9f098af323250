"""NVLink generations: totals per direction vs both directions."""

import pytest

from fabricops.model.nvlink import NVLINK, nvlink_for_gpu


def test_nvlink3_total_per_direction_is_300_not_600():
    # Seed chapter: "NVLink 3.0: 25 GB/s x 12 = 600 GB/s". 25 x 12 = 300 per direction.
    gen = NVLINK[3]
    assert gen.per_link_gbs * gen.links == 300
    assert gen.total_per_direction_gbs == 300
    assert gen.total_bidirectional_gbs == 600


@pytest.mark.parametrize(
    ("version", "per_link", "links", "per_dir", "both", "smi"),
    [
        (1, 20, 4, 80, 160, None),
        (2, 25, 6, 150, 300, 25.781),
        (3, 25, 12, 300, 600, 25),
        (4, 25, 18, 450, 900, 26.562),
        (5, 50, 18, 900, 1800, 53.125),
    ],
)
def test_table(version, per_link, links, per_dir, both, smi):
    g = NVLINK[version]
    assert (g.per_link_gbs, g.links, g.total_per_direction_gbs, g.total_bidirectional_gbs) == (
        per_link,
        links,
        per_dir,
        both,
    )
    assert g.smi_link_gbs == smi
    assert g.source.strip()


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("NVIDIA H100 80GB HBM3", 4),
        ("NVIDIA H200", 4),
        ("NVIDIA A100-SXM4-80GB", 3),
        ("Tesla V100-SXM2-32GB", 2),
        ("NVIDIA B200", 5),
        ("Tesla P100-SXM2-16GB", 1),
    ],
)
def test_nvlink_for_gpu(name, version):
    assert nvlink_for_gpu(name).version == version


def test_nvlink_for_unknown_gpu():
    assert nvlink_for_gpu("NVIDIA GeForce RTX 4090") is None
