"""GPU checks: count and model per profile, NVLink, NVSwitch topology, NIC<->GPU affinity."""

import pytest
from conftest import assert_check


@pytest.mark.parametrize("check", ["gpu_count", "gpu_model", "nvlink", "gpu_topology", "nic_gpu_affinity"])
def test_gpus(fabric_results, check):
    assert_check(fabric_results, check)
