"""The Ring busbw prediction and the floors (fabricops.model.busbw: profile thresholds, nccl_band.yml)."""

from __future__ import annotations

import pytest

from fabricops.model import _data
from fabricops.model import busbw as model


def test_nic_bound_prediction_is_rails_times_slowest_rail():
    p = model.predict({"a": [400, 400], "b": [400, 200]}, 4)
    assert (p.busbw_gbs, p.rails, p.rail_gbps, p.bound) == (50.0, 2, 200.0, "nics")
    assert model.predict({"a": [400] * 8, "b": [400] * 8}, 4).busbw_gbs == 400.0


def test_fewest_rails_of_any_host_bound_the_ring():
    assert model.predict({"a": [400] * 8, "b": [400] * 4}, 4).busbw_gbs == 200.0


def test_nvlink_caps_the_prediction():
    p = model.predict({"a": [400] * 8, "b": [400] * 8}, 3)  # A100: NVLink 3 = 300 GB/s per GPU
    assert (p.busbw_gbs, p.bound, p.nic_gbs) == (300.0, "nvlink", 400.0)


def test_one_host_is_nvlink_only():
    p = model.predict({"a": [400] * 8}, 4)
    assert (p.busbw_gbs, p.rail_gbps) == (450.0, None)


def test_no_rails_or_bad_generation_raise():
    with pytest.raises(ValueError):
        model.predict({"a": [], "b": [400]}, 4)
    with pytest.raises(ValueError):
        model.predict({"a": [400], "b": [400]}, 9)


def test_per_nic_floor_times_rails():
    f = model.floor(model.predict({"a": [400] * 8, "b": [400] * 8}, 4), "hgx-h100-ndr")
    assert f.value == pytest.approx(8 * 46 * 0.95) and "nccl-tests#290" in f.source  # 46 less 5 %
    assert f.basis == "8 rails x 46 GB/s per 400 Gb/s NIC less 5%"
    f = model.floor(model.predict({"a": [200] * 8, "b": [200] * 8}, 3), "hgx-a100-hdr")
    assert f.value == pytest.approx(8 * 24 * 0.95) and "nccl-tests#119" in f.source  # 24 less 5 %


def test_floor_capped_when_nvlink_bound():
    # 16 x 400G on H100 would need 736 GB/s, beyond NVLink's 450: the floor follows the band
    f = model.floor(model.predict({"a": [400] * 16, "b": [400] * 16}, 4), "hgx-h100-ndr")
    assert f.value == pytest.approx(0.85 * 450)


def test_single_node_floors():
    one = model.predict({"a": [400] * 8}, 4)
    assert model.floor(one, "hgx-h100-ndr").value == 460
    assert model.floor(one, "hgx-h200-ndr").value == 431
    assert model.floor(model.predict({"a": [200]}, 3), "hgx-a100-hdr").value == 228
    with pytest.raises(ValueError, match="no published single-node"):
        model.floor(one, "edr-100")


def test_unknown_nic_rate_has_no_floor():
    with pytest.raises(ValueError, match="no per-NIC NCCL busbw floor for 800 Gb/s"):
        model.floor(model.predict({"a": [800], "b": [800]}, 5), "hgx-h100-ndr")


def test_band():
    b = model.band()
    assert b.judge(94, 100) == "ok" and b.judge(84, 100) == "low"
    assert b.judge(105, 100) == "ok" and b.judge(106, 100) == "high"


def test_every_floor_row_has_a_source():
    data = _data.load("nccl_band.yml")
    rows = [data["band"], data["floor_tolerance"]]
    assert rows and all(str(r.get("source", "")).strip() for r in rows)
