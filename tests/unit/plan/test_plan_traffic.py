"""Communication per step: the 7B example, sharded and pipeline traffic, required bandwidth."""

from __future__ import annotations

import pytest

from fabricops.model import comm
from fabricops.plan import traffic
from fabricops.plan.catalog import PlanInputError


@pytest.mark.parametrize("n", [2, 8, 64, 512, 4096])
def test_7b_data_parallel_fp32(n):
    s = traffic.step_comm(7e9, "fp32", n, busbw_gbs=46.0)
    assert s.gradient_bytes == 28_000_000_000
    assert s.collective_bytes_per_rank == pytest.approx(2 * (n - 1) / n * 28e9)
    assert s.bytes_per_rank == s.collective_bytes_per_rank
    assert s.comm_time_s == pytest.approx(2 * (n - 1) / n * 28e9 / 46e9)


def test_7b_over_8_ranks_is_49_gb():
    s = traffic.step_comm(7e9, "fp32", 8, busbw_gbs=49.0, step_time_s=2.0, comm_share=0.5)
    assert s.bytes_per_rank == 49_000_000_000
    assert s.comm_time_s == pytest.approx(1.0)
    assert s.required_busbw_gbs == pytest.approx(49.0)
    assert s.fits


def test_bf16_halves_the_bytes():
    s = traffic.step_comm(7e9, "bf16", 8, busbw_gbs=46.0)
    assert s.gradient_bytes == 14_000_000_000
    assert s.bytes_per_rank == 24_500_000_000


def test_sharded_is_three_ring_passes():
    n = 64
    s = traffic.step_comm(7e9, "bf16", n, busbw_gbs=46.0, strategy="sharded")
    assert s.bytes_per_rank == pytest.approx(3 * (n - 1) / n * 14e9)
    assert s.bytes_per_rank == pytest.approx(comm.sharded_bytes_per_rank(7e9, "bf16", n))


def test_pipeline_activations():
    # micro-batch 1 x 4096 tokens x hidden 8192 x bf16 = 64 MiB... 67,108,864 bytes per boundary
    assert traffic.activation_bytes(1, 4096, 8192, "bf16") == 67_108_864
    assert traffic.pipeline_bytes_per_rank(1, 4096, 8192, "bf16", 8) == 2 * 8 * 67_108_864
    s = traffic.step_comm(
        70e9, "bf16", 64, 46.0, pipeline_stages=4, micro_batch=1, seq_len=4096, hidden=8192, micro_batches=8
    )
    assert s.ranks == 16
    assert s.gradient_bytes == pytest.approx(70e9 / 4 * 2)
    assert s.collective_bytes_per_rank == pytest.approx(2 * 15 / 16 * 70e9 / 4 * 2)
    assert s.pipeline_bytes_per_rank == 2 * 8 * 67_108_864
    assert s.bytes_per_rank == pytest.approx(s.collective_bytes_per_rank + s.pipeline_bytes_per_rank)


def test_required_busbw_and_fit():
    s = traffic.step_comm(7e9, "bf16", 64, busbw_gbs=46.0, step_time_s=1.0, comm_share=0.5)
    need = 2 * 63 / 64 * 14e9 / 0.5 / 1e9
    assert s.required_busbw_gbs == pytest.approx(need)
    assert not s.fits
    assert traffic.step_comm(7e9, "bf16", 64, busbw_gbs=46.0, step_time_s=2.0).fits


def test_busbw_estimates_from_data():
    assert traffic.per_nic_busbw_gbs(400)[0] == 46
    assert traffic.per_nic_busbw_gbs(200)[0] == 24
    v, src = traffic.per_nic_busbw_gbs(800)
    assert v == 92 and src.startswith("scaled from 400")
    # 8 GPUs sharing 4 NICs: half a NIC each
    assert traffic.estimate_busbw_gbs(4, 8, 4, 400)[0] == 23
    # one node: NVLink 4 gives 450 GB/s per direction (not 900, not 600)
    assert traffic.estimate_busbw_gbs(1, 8, 8, 0, "NVIDIA H100 80GB HBM3")[0] == 450
    assert traffic.estimate_busbw_gbs(1, 8, 8, 0, "NVIDIA A100-SXM4-80GB")[0] == 300


@pytest.mark.parametrize(
    ("kwargs", "fix"),
    [
        ({"params": -1}, "--model-params"),
        ({"precision": "fp64"}, "unknown precision 'fp64'"),
        ({"step_time_s": 0}, "--step-time"),
        ({"comm_share": 1.5}, "--comm-share"),
        ({"pipeline_stages": 3}, "must divide --gpus 8"),
        ({"pipeline_stages": 2}, "need --micro-batch, --seq-len, --hidden"),
        ({"strategy": "zero"}, "unknown strategy"),
    ],
)
def test_bad_input(kwargs, fix):
    args = {"params": 7e9, "precision": "bf16", "gpus": 8, "busbw_gbs": 46.0} | kwargs
    with pytest.raises(PlanInputError, match=fix):
        traffic.step_comm(**args)
