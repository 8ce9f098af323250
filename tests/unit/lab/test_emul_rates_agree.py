"""The emulated tools (stdlib-only, inside lab hosts) carry a copy of the per-lane speeds; it must
agree with the one rate table in fabricops.model, or the lab would print rates the model calls wrong."""

import pytest

from fabricops.model import rates
from fabricops_lab.emul import hwctl


@pytest.mark.parametrize("speed", sorted(hwctl.SPEEDS))
@pytest.mark.parametrize("width", ["1X", "2X", "4X"])
def test_emulated_lane_speeds_match_the_model(speed, width):
    per_lane = hwctl.SPEEDS[speed][0]
    lanes = hwctl.WIDTHS[width][0]
    assert per_lane * lanes == rates.ib_port_rate(speed, width)


def test_ndr_port_is_400_not_the_per_lane_figure():
    assert hwctl.SPEEDS["NDR"][0] * 4 == 400 == rates.ib_port_rate("NDR", "4X")
