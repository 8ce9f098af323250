"""fabricops.result: the one verdict type (issue 35), a drop-in for verify's CheckResult."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fabricops import result
from fabricops.result import ERROR, FAIL, PASS, SKIP, Component, Result, component_of, passed

REAL_CLOCK = result.clock  # before the fixture pins it


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch):
    monkeypatch.setattr(result, "clock", lambda: "2025-01-31T12:00:00Z")


@pytest.mark.parametrize(
    ("host", "device", "want"),
    [
        ("gpu01", None, ("host", "gpu01", "gpu01")),
        ("gpu01", "", ("host", "gpu01", "gpu01")),
        ("gpu01", "mlx5_0/1", ("hca_port", "mlx5_0/1", "gpu01")),
        ("gpu01", "mlx5_0", ("hca_port", "mlx5_0", "gpu01")),
        ("gpu01", "mlx4_1/2", ("hca_port", "mlx4_1/2", "gpu01")),
        ("gpu01", "bnxt_re0/1", ("hca_port", "bnxt_re0/1", "gpu01")),
        ("gpu01", "enp170s0f0np0", ("hca_port", "enp170s0f0np0", "gpu01")),  # a RoCE port's netdev
        ("gpu01", "ib0", ("hca_port", "ib0", "gpu01")),  # an IPoIB netdev
        ("gpu01", "ibp26s0", ("hca_port", "ibp26s0", "gpu01")),
        ("gpu01", "GPU3", ("gpu", "GPU3", "gpu01")),
        ("gpu01", "gpu3", ("gpu", "GPU3", "gpu01")),  # one GPU, one name whichever check spelled it
        ("leaf01", "Eth1/4", ("switch_port", "Eth1/4", "leaf01")),
        ("leaf01", "swp12s1", ("switch_port", "swp12s1", "leaf01")),
        ("leaf01", "Ethernet8", ("switch_port", "Ethernet8", "leaf01")),
        ("gpu01<->gpu02", "mlx5_0/1", ("pair", "gpu01<->gpu02", None)),  # a pair wins over its device
        ("gpu01<->gpu02", None, ("pair", "gpu01<->gpu02", None)),
        ("gpu01,gpu02,gpu03", None, ("fabric", "gpu01,gpu02,gpu03", None)),
        ("gpu01,gpu02", "mlx5_0/1", ("fabric", "gpu01,gpu02", None)),
        ("-", None, ("fabric", "-", None)),  # verify's "no hosts" result
        # a device that is none of the parts above: the verdict is about the host it was found on
        ("gpu01", "6.1.0-21-amd64", ("host", "gpu01", "gpu01")),  # a kernel release (dkms_modules)
        ("gpu01", "0000:17:02.0", ("host", "gpu01", "gpu01")),  # a PCIe bridge (acs_redirect)
        ("gpu01", "next", ("host", "gpu01", "gpu01")),
        ("gpu01", "eth0", ("host", "gpu01", "gpu01")),  # a management NIC is no HCA port
    ],
)
def test_component_is_derived_from_host_and_device(host, device, want):
    assert component_of(host, device) == Component(*want)
    assert Result("hosts", "x", host, device, PASS, "m").component == Component(*want)


def test_component_kind_is_one_of_the_list():
    assert result.COMPONENT_KINDS == (
        "host", "hca_port", "gpu", "cable", "switch_port", "switch", "pair", "fabric"
    )
    with pytest.raises(ValueError, match="component kind 'nic'"):
        Component("nic", "mlx5_0")
    c = Component("cable", "gpu01:mlx5_0/1<->leaf01:Eth1/4")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.name = "other"  # type: ignore[misc]
    # given, the component is kept, not derived
    r = Result("hosts", "cabling", "gpu01", "mlx5_0/1", FAIL, "m", component=c)
    assert r.component is c


def test_positional_fields_and_order_are_checkresults():
    r = Result("hosts", "hca_port", "gpu01", "mlx5_0/1", FAIL, "gpu01 mlx5_0/1: down", 100, 400, ">=", "Gb/s",
               "cable", "profile", {"k": 1})
    assert (r.category, r.check, r.host, r.device, r.status, r.message) == (
        "hosts", "hca_port", "gpu01", "mlx5_0/1", "fail", "gpu01 mlx5_0/1: down")
    assert (r.measured, r.threshold, r.op, r.unit, r.cause, r.source, r.details) == (
        100, 400, ">=", "Gb/s", "cable", "profile", {"k": 1})
    names = [f.name for f in dataclasses.fields(Result)]
    assert names[:13] == ["category", "check", "host", "device", "status", "message", "measured", "threshold",
                          "op", "unit", "cause", "source", "details"]
    assert r.name == "hosts/hca_port/gpu01/mlx5_0/1"
    assert Result("hosts", "ofed_version", "gpu01", None, PASS, "m").name == "hosts/ofed_version/gpu01"


@pytest.mark.parametrize(("status", "ok", "severity"),
                         [(PASS, True, "info"), (SKIP, True, "info"), (FAIL, False, "critical"),
                          (ERROR, False, "critical")])
def test_ok_and_default_severity_follow_the_status(status, ok, severity):
    r = Result("hosts", "x", "h", None, status, "m")
    assert r.ok is ok and r.severity == severity
    assert Result("hosts", "x", "h", None, status, "m", severity="warning").severity == "warning"


@pytest.mark.parametrize("status", ["warn", "ok", "PASS", "failed", ""])
def test_status_is_strictly_pass_fail_error_skip(status):
    with pytest.raises(ValueError, match="result status"):
        Result("hosts", "x", "h", None, status, "m")


def test_severity_outside_the_three_is_refused():
    with pytest.raises(ValueError, match="result severity 'major'"):
        Result("hosts", "x", "h", None, FAIL, "m", severity="major")


def test_observed_at_is_set_at_creation_from_the_module_clock(monkeypatch):
    assert Result("hosts", "x", "h", None, PASS, "m").observed_at == "2025-01-31T12:00:00Z"
    monkeypatch.setattr(result, "clock", lambda: "2025-02-01T00:00:00Z")
    assert Result("hosts", "x", "h", None, PASS, "m").observed_at == "2025-02-01T00:00:00Z"
    assert Result("hosts", "x", "h", None, PASS, "m", observed_at="2024-12-24T18:00:00Z").observed_at == (
        "2024-12-24T18:00:00Z")


def test_the_real_clock_is_iso8601_utc():
    import datetime

    stamp = datetime.datetime.strptime(REAL_CLOCK(), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    assert abs((datetime.datetime.now(datetime.UTC) - stamp).total_seconds()) < 60


def test_to_data_carries_every_field_with_the_component_as_a_mapping():
    r = Result("diagnose", "port_down", "gpu01", "mlx5_0/1", FAIL, "NCCL timeout / hang", cause="down",
               evidence=["sysfs mlx5_0/1: state 1: DOWN"], action="replace or reseat the cable",
               caused_by="hca_port:gpu01/mlx5_0/1", details={"likelihood": 100})
    data = r.to_data()
    assert data["component"] == {"kind": "hca_port", "name": "mlx5_0/1", "host": "gpu01"}
    assert data["severity"] == "critical" and data["action"] == "replace or reseat the cable"
    assert data["evidence"] == ["sysfs mlx5_0/1: state 1: DOWN"]
    assert data["observed_at"] == "2025-01-31T12:00:00Z" and data["caused_by"] == "hca_port:gpu01/mlx5_0/1"
    assert data["name"] == "diagnose/port_down/gpu01/mlx5_0/1"
    assert set(data) == {f.name for f in dataclasses.fields(Result)} | {"name"}
    assert json.loads(json.dumps(data)) == data  # JSON-able as it is
    # the defaults of a plain result
    plain = Result("hosts", "x", "h", None, PASS, "m").to_data()
    assert (plain["action"], plain["evidence"], plain["caused_by"]) == (None, [], None)


def test_evidence_and_details_are_not_shared_between_results():
    a, b = Result("hosts", "x", "h", None, PASS, "m"), Result("hosts", "x", "h", None, PASS, "m")
    a.evidence.append("e")
    a.details["k"] = 1
    assert b.evidence == [] and b.details == {}


def test_passed_needs_one_result_and_no_failure():
    assert passed([]) is False
    ok, skip, err = (Result("hosts", "x", "h", None, s, "m") for s in (PASS, SKIP, ERROR))
    assert passed([ok, skip]) is True
    assert passed([ok, err]) is False


def test_verify_result_is_a_thin_re_export():
    from fabricops.verify import result as vr

    assert vr.CheckResult is Result and vr.passed is passed
    assert (vr.PASS, vr.FAIL, vr.ERROR, vr.SKIP) == ("pass", "fail", "error", "skip")
    assert vr.CATEGORIES == ("hosts", "gpus", "pairs", "nccl")


def test_no_other_verdict_class_in_the_product():
    """Finding (diagnose) and Item (verify.firmware) are gone: every verdict is a Result."""
    import fabricops.diagnose as d
    from fabricops.verify import firmware

    assert not hasattr(d, "Finding") and not hasattr(firmware, "Item")
