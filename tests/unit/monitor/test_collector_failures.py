"""The collector never leaves frozen metrics behind: numbers in its configuration are checked at load
(one line, exit 2, the .prom file replaced by one that says so), a failing source costs only that
source, and every collecting run writes the last-success gauge a staleness alert watches."""

from __future__ import annotations

import json
import math
import re

import pytest
from test_collector import fake_run, get, make_sysfs, parse_exposition

from fabricops.monitor import collector as c

#: JSON text of an expected rate -> refused
BAD_RATES = [
    "NaN",
    "Infinity",
    "-Infinity",
    "-400",
    "0",
    "1e300",
    "400000000000",
    "3201",
    "true",
    '"fast"',
    '"nan"',
    '"1e3"',
    "null",
    "[400]",
    "1" + "0" * 400,
]


@pytest.mark.parametrize("text", BAD_RATES)
def test_check_config_refuses_a_rate_that_is_not_finite_and_in_range(text):
    with pytest.raises(c.ConfigError) as exc:
        c.check_config(json.loads(f'{{"expected_rate_gbps": {{"InfiniBand": {text}}}}}'))
    msg = str(exc.value)
    assert msg.startswith("expected_rate_gbps.InfiniBand: "), msg
    assert "is not a port rate in Gb/s (a finite number above 0, at most 3200)" in msg
    assert "\n" not in msg and len(msg) < 200


def test_check_config_accepts_real_rates_and_refuses_bad_shapes():
    got = c.check_config(
        {
            "expected_rate_gbps": {"InfiniBand": 400, "Ethernet": 800.0, "mlx5_0/1": "200", "mlx5_1/1": 3200},
            "nvlink": False,
        }
    )
    assert got["expected_rate_gbps"] == {
        "InfiniBand": 400.0,
        "Ethernet": 800.0,
        "mlx5_0/1": 200.0,
        "mlx5_1/1": 3200.0,
    }
    assert c.check_config({})["expected_rate_gbps"] == {}
    with pytest.raises(c.ConfigError, match="expected a JSON object"):
        c.check_config([1])
    with pytest.raises(c.ConfigError, match="expected an object"):
        c.check_config({"expected_rate_gbps": [400]})
    with pytest.raises(c.ConfigError, match="is not InfiniBand, Ethernet or DEV/PORT"):
        c.check_config({"expected_rate_gbps": {"mlx5_0/1\nx": 400}})


def test_collect_refuses_nan_instead_of_crashing(tmp_path):
    root = make_sysfs(tmp_path)
    with pytest.raises(c.ConfigError, match=r"expected_rate_gbps\.InfiniBand: NaN"):
        c.collect(
            {"expected_rate_gbps": {"InfiniBand": math.nan}}, sysfs=str(root), run=fake_run({}), host="h"
        )


@pytest.mark.parametrize("text", ["NaN", "-1", "1e300", "{"])
def test_a_refused_config_replaces_the_frozen_file_and_keeps_the_last_success(tmp_path, capsys, text):
    """The audit's case: the collector raised on every run, node_exporter served the last good file
    ("port up") for ever. Now: exit 2, one line, and the file says the configuration was refused."""
    root = make_sysfs(tmp_path / "sys")
    out = tmp_path / "textfile" / "fabricops.prom"
    out.parent.mkdir()
    good = tmp_path / "good.json"
    good.write_text(
        json.dumps(
            {"expected_rate_gbps": {"InfiniBand": 400}, "nvlink": False, "host": "gpu04", "pcie": False}
        )
    )
    assert c.main(["--config", str(good), "--sysfs", str(root), "--output", str(out)]) == 0
    before = parse_exposition(out.read_text())
    assert get(before, "fabricops_ib_port_up", device="mlx5_0") == 1
    last_success = get(before, "fabricops_collector_last_success_timestamp_seconds")
    capsys.readouterr()

    bad = tmp_path / "bad.json"
    bad.write_text('{"expected_rate_gbps": {"InfiniBand": ' + text + '}, "nvlink": false, "host": "gpu04"}')
    assert c.main(["--config", str(bad), "--sysfs", str(root), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"fabricops-collector: --config {bad}: "), (
        err
    )
    after = parse_exposition(out.read_text())
    assert not any(name.startswith("fabricops_ib_") for name, _ in after)  # nothing frozen
    assert get(after, "fabricops_collector_source_up", host="gpu04", source="config") == 0
    assert get(after, "fabricops_collector_last_success_timestamp_seconds", host="gpu04") == last_success
    assert get(after, "fabricops_collector_last_run_timestamp_seconds", host="gpu04") >= last_success
    assert [p.name for p in out.parent.iterdir()] == ["fabricops.prom"]  # written atomically, no leftovers


def test_one_unreadable_port_costs_only_that_port(tmp_path):
    root = make_sysfs(tmp_path)
    (root / "class/infiniband/mlx5_0/ports/1/rate").write_text("garbage\n")
    m = parse_exposition(c.collect({}, sysfs=str(root), run=fake_run({}), host="h"))
    assert get(m, "fabricops_collector_source_up", source="sysfs") == 0
    assert not any(("device", "mlx5_0") in labels for _n, labels in m)  # no half-written port
    assert get(m, "fabricops_ib_port_up", device="mlx5_2") == 0  # the other port is still there
    assert get(m, "fabricops_roce_ecn_marked_packets_total", device="mlx5_2") == 77
    assert get(m, "fabricops_collector_last_success_timestamp_seconds") > 0


def test_a_source_that_breaks_unexpectedly_costs_only_that_source(tmp_path, capsys):
    root = make_sysfs(tmp_path)
    status = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: 1.2.3 GB/s\n"  # float() raises

    def run(argv):
        if argv[-1] == "-vvv":
            raise RuntimeError("lspci wrapper crashed")
        return fake_run({"nvlink --status": (0, status), "-S enp170s0f0np0": (0, "NIC statistics:\n")})(argv)

    text = c.collect({"gpus": False}, sysfs=str(root), run=run, host="h", now=7.0)
    m = parse_exposition(text)
    assert get(m, "fabricops_collector_source_up", source="nvlink_status") == 0
    assert get(m, "fabricops_collector_source_up", source="sysfs") == 1
    assert get(m, "fabricops_ib_port_up", device="mlx5_0") == 1
    assert get(m, "fabricops_collector_last_success_timestamp_seconds") == 7.0
    assert get(m, "fabricops_collector_last_run_timestamp_seconds") == 7.0


def test_a_crashing_source_is_marked_down_and_leaves_no_half_samples(tmp_path, monkeypatch):
    root = make_sysfs(tmp_path)

    def broken(reg, *_a):
        reg.add("nvlink_active_links", {"host": "h", "gpu": 0}, 3)
        raise RuntimeError("boom")

    monkeypatch.setattr(c, "nvlink_metrics", broken)
    m = parse_exposition(c.collect({}, sysfs=str(root), run=fake_run({}), host="h", now=3.0))
    assert get(m, "fabricops_collector_source_up", source="nvlink") == 0
    assert not any(n == "fabricops_nvlink_active_links" for n, _ in m)
    assert get(m, "fabricops_ib_port_up", device="mlx5_0") == 1
    assert get(m, "fabricops_collector_last_success_timestamp_seconds") == 3.0


def test_every_collecting_run_writes_the_last_success_gauge(tmp_path):
    text = c.collect({"nvlink": False}, sysfs=str(tmp_path), run=fake_run({}), host="h", now=5.0)
    assert re.search(r'^fabricops_collector_last_success_timestamp_seconds\{host="h"\} 5$', text, re.M)
    assert "# TYPE fabricops_collector_last_success_timestamp_seconds gauge" in text


def test_non_finite_values_render_in_the_exposition_format():
    reg = c.Registry()
    reg.add("collector_duration_seconds", {"host": "a"}, math.nan)
    reg.add("collector_duration_seconds", {"host": "b"}, math.inf)
    assert 'fabricops_collector_duration_seconds{host="a"} NaN' in reg.render()
    assert 'fabricops_collector_duration_seconds{host="b"} +Inf' in reg.render()
