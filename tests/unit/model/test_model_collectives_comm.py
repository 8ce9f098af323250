"""busbw factors (nccl-tests PERFORMANCE.md) and communication volume per step."""

import pytest

from fabricops.model.collectives import COLLECTIVES, algbw, busbw, busbw_factor, collective
from fabricops.model.comm import (
    all_gather_bytes_per_rank,
    allreduce_bytes_per_rank,
    allreduce_time_s,
    bytes_per_element,
    comm_time_s,
    gradient_bytes,
    reduce_scatter_bytes_per_rank,
    required_busbw_gbs,
    sharded_bytes_per_rank,
)


@pytest.mark.parametrize(
    ("name", "n", "factor"),
    [
        ("all_reduce", 8, 1.75),
        ("all_reduce", 2, 1.0),
        ("all_reduce", 16, 30 / 16),
        ("reduce_scatter", 8, 0.875),
        ("all_gather", 8, 0.875),
        ("alltoall", 4, 0.75),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("sendrecv", 8, 1.0),
        ("all_reduce", 1, 0.0),
    ],
)
def test_busbw_factor(name, n, factor):
    assert busbw_factor(name, n) == pytest.approx(factor)


def test_every_collective_has_a_source():
    assert set(COLLECTIVES) == {
        "all_reduce",
        "reduce_scatter",
        "all_gather",
        "alltoall",
        "broadcast",
        "reduce",
        "sendrecv",
    }
    assert all("nccl-tests" in c.source for c in COLLECTIVES.values())


@pytest.mark.parametrize(
    "alias", ["AllReduce", "allreduce", "all_reduce_perf", "all_reduce_perf_mpi", "./build/all_reduce_perf"]
)
def test_aliases(alias):
    assert collective(alias).name == "all_reduce"


def test_bad_input():
    with pytest.raises(ValueError, match="unknown collective"):
        busbw_factor("all_scatter", 8)
    with pytest.raises(ValueError, match="ranks"):
        busbw_factor("all_reduce", 0)
    with pytest.raises(ValueError):
        algbw(1, 0)


def test_algbw_busbw_match_a_real_nccl_tests_row():
    # h100-16rank fixture, last row: 8589934592 B in 47535 us -> algbw 180.71, busbw 338.82 (n=16)
    assert algbw(8589934592, 47535e-6) == pytest.approx(180.71, abs=0.01)
    assert busbw(8589934592, 47535e-6, "all_reduce", 16) == pytest.approx(338.82, abs=0.01)


def test_7b_fp32_gradients_and_ring_traffic():
    assert gradient_bytes(7e9, "fp32") == 28_000_000_000
    assert allreduce_bytes_per_rank(7e9, "fp32", 8) == 49_000_000_000  # 2*7/8*28e9


def test_precisions():
    assert [bytes_per_element(p) for p in ("fp32", "bf16", "fp16", "fp8")] == [4, 2, 2, 1]
    assert bytes_per_element("bfloat16") == 2 and bytes_per_element(8) == 8
    with pytest.raises(ValueError):
        bytes_per_element("int3")
    assert gradient_bytes(7e9, "bf16") == 14_000_000_000


def test_sharded_volumes():
    assert reduce_scatter_bytes_per_rank(8e9, "bf16", 8) == 14_000_000_000  # 7/8 * 16e9
    assert all_gather_bytes_per_rank(8e9, "bf16", 8) == 14_000_000_000
    assert sharded_bytes_per_rank(8e9, "bf16", 8) == 42_000_000_000  # 2 gathers + 1 scatter
    assert sharded_bytes_per_rank(8e9, "fp32", 8, param_precision="bf16") == 28e9 + 28e9


def test_times_and_required_bandwidth():
    assert comm_time_s(49e9, 49.0) == pytest.approx(1.0)
    assert allreduce_time_s(7e9, "fp32", 8, 98.0) == pytest.approx(0.5)
    assert required_busbw_gbs(49e9, 2.0, 0.5) == pytest.approx(49.0)
    assert required_busbw_gbs(49e9, 1.0) == pytest.approx(49.0)
    with pytest.raises(ValueError):
        required_busbw_gbs(1, 1, 0)
    with pytest.raises(ValueError):
        comm_time_s(1, 0)
