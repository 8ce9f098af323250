"""Link rates: per-lane names vs port rates (the seed chapter's error must not come back)."""

import pytest

from fabricops.model import rates
from fabricops.model.rates import (
    ETHERNET,
    IB,
    eth_port_rate,
    ethernet_from_mbps,
    format_sysfs_rate,
    ib_lane_rate,
    ib_port_rate,
    ibstat_rate,
    parse_sysfs_rate,
    port_rate,
)


def test_hdr_port_is_200_not_the_per_lane_50():
    # Seed chapter: "HDR = 50 Gb/s per port". Wrong: 50 is per lane, a 4X HDR port is 200.
    assert ib_port_rate("HDR", "4X") == 200
    assert ib_lane_rate("HDR") == 50
    assert ib_port_rate("HDR", "4X") != ib_lane_rate("HDR")


def test_ndr_port_is_400():
    assert ib_port_rate("NDR", "4X") == 400
    assert ib_port_rate("NDR") == 400
    assert ibstat_rate("NDR", "4X") == 400


@pytest.mark.parametrize(
    ("gen", "port_4x"),
    [
        ("SDR", 10),
        ("DDR", 20),
        ("QDR", 40),
        ("FDR10", 40),
        ("FDR", 56),
        ("EDR", 100),
        ("HDR", 200),
        ("NDR", 400),
        ("XDR", 800),
    ],
)
def test_4x_port_rates_match_reference(gen, port_4x):
    assert ib_port_rate(gen, "4X") == port_4x
    assert IB[gen].ibstat_rate == port_4x
    assert IB[gen].ports["4X"] == port_4x
    assert IB[gen].ports["1X"] * 4 == port_4x
    assert IB[gen].ports["1X"] != port_4x  # per-lane never equals the port rate


def test_every_generation_has_a_source_and_encoding():
    for gen in IB.values():
        assert gen.source.strip()
        assert gen.encoding.strip()
        assert gen.lane_data_gbps <= gen.lane_gbps or gen.name == "FDR10"


def test_signalling_rates_from_reference():
    assert IB["EDR"].lane_signal_gbps == 25.78125
    assert IB["HDR"].lane_signal_gbps == 53.125
    assert IB["NDR"].lane_signal_gbps == 106.25
    assert IB["FDR"].lane_signal_gbps == 14.0625
    assert IB["FDR10"].encoding == "64b/66b" and IB["QDR"].encoding == "8b/10b"


def test_narrow_variants():
    assert ib_port_rate("HDR100") == 100
    assert ib_port_rate("NDR200") == 200
    assert ib_port_rate("HDR", "2X") == 100
    assert ib_port_rate("NDR", 1) == 100
    with pytest.raises(ValueError, match="2X"):
        ib_port_rate("HDR100", "1X")


def test_unknown_names_raise():
    with pytest.raises(ValueError, match="unknown InfiniBand speed"):
        ib_port_rate("ZDR")
    with pytest.raises(ValueError, match="width"):
        ib_port_rate("NDR", "3X")


@pytest.mark.parametrize(
    ("text", "rate", "width", "speed"),
    [
        ("400 Gb/sec (4X NDR)", 400, "4X", "NDR"),
        ("400 Gb/sec (4X NDR)\n", 400, "4X", "NDR"),
        ("200 Gb/sec (4X HDR)", 200, "4X", "HDR"),
        ("100 Gb/sec (2X HDR)", 100, "2X", "HDR"),
        ("56 Gb/sec (4X FDR)", 56, "4X", "FDR"),
        ("40 Gb/sec (4X FDR10)", 40, "4X", "FDR10"),
        ("2.5 Gb/sec (1X SDR)", 2.5, "1X", "SDR"),
        ("10 Gb/sec (4X)", 10, "4X", "SDR"),
    ],
)
def test_parse_sysfs_rate(text, rate, width, speed):
    r = parse_sysfs_rate(text)
    assert (r.rate_gbps, r.width, r.speed) == (rate, width, speed)


@pytest.mark.parametrize("text", ["", "400", "400 Gb/sec", "400 Gb/sec (4X EDR)", "fast (4X NDR)"])
def test_parse_sysfs_rate_rejects(text):
    with pytest.raises(ValueError):
        parse_sysfs_rate(text)


def test_format_sysfs_rate_round_trips():
    assert format_sysfs_rate("NDR", "4X") == "400 Gb/sec (4X NDR)"
    assert format_sysfs_rate("SDR", "1X") == "2.5 Gb/sec (1X SDR)"
    for gen in IB:
        for width in ("1X", "2X", "4X", "12X"):
            r = parse_sysfs_rate(format_sysfs_rate(gen, width))
            assert r.speed == gen and r.width == width
            assert r.rate_gbps == ib_port_rate(gen, width)


def test_ethernet_speeds():
    assert [e.gbps for e in ETHERNET.values()] == [10, 25, 40, 50, 100, 200, 400, 800]
    assert eth_port_rate("400GbE") == 400
    assert eth_port_rate("100G") == 100
    assert ethernet_from_mbps("400000").name == "400GbE"
    assert all(e.source for e in ETHERNET.values())
    with pytest.raises(ValueError):
        eth_port_rate("300GbE")
    with pytest.raises(ValueError):
        ethernet_from_mbps(12345)


def test_port_rate_for_both_link_layers():
    assert port_rate("InfiniBand", "NDR", "4X") == 400
    assert port_rate("Ethernet", "400GbE") == 400
    with pytest.raises(ValueError, match="link layer"):
        port_rate("FibreChannel", "32G")


def test_module_exports():
    assert set(rates.__all__) >= {"ib_port_rate", "parse_sysfs_rate", "IB", "ETHERNET"}


def test_docs_table_lists_every_rate():
    from pathlib import Path

    doc = (Path(__file__).parents[3] / "docs" / "model.md").read_text(encoding="utf-8")
    for gen in IB.values():
        assert f"| {gen.name} | {rates._num(gen.lane_gbps)} |" in doc
        assert f"| {gen.ports['4X']} | {gen.ibstat_rate} |" in doc
    for eth in ETHERNET.values():
        assert f"| {eth.name} | {eth.gbps} |" in doc
