"""Host checks: OFED, HCA ports, error counters, IPoIB, RoCE QoS, NCCL profile."""

import pytest
from conftest import assert_check


@pytest.mark.parametrize(
    "check", ["ofed_version", "hca_port", "error_counters", "ipoib", "roce_qos", "nccl_profile"]
)
def test_host(fabric_results, check):
    assert_check(fabric_results, check)
