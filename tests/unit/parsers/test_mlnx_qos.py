import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers.mlnx_qos import parse


def test_old_version_without_buffers():
    rec = parse(read_fixture("mlnx_qos", "trust_dscp_no_buffers_netarbiter.txt"))
    assert (rec.dcbx_mode, rec.trust, rec.cable_len) == ("OS controlled", "dscp", 7)
    assert rec.pfc_enabled == [0, 0, 0, 1, 0, 0, 0, 0] and rec.pfc_priorities == [3]
    assert rec.pfc_buffer is None and rec.receive_buffer_sizes is None
    assert rec.dscp2prio[3] == [31, 30, 29, 28, 27, 26, 25, 24]
    assert rec.prio_for_dscp(26) == 3 and rec.prio_for_dscp(48) == 6
    assert rec.prio_tc == [1, 0, 2, 3, 4, 5, 6, 7]
    assert [(t.tc, t.tsa, t.bw) for t in rec.tcs][:2] == [(0, "vendor", None), (1, "vendor", None)]


def test_wrapped_prio_line_and_buffers():
    rec = parse(read_fixture("mlnx_qos", "dscp_split_prio_line_buffers.txt"))
    assert rec.dscp2prio[6] == [30, 55, 54, 53, 52, 51, 50, 49, 48]
    assert rec.prio_for_dscp(30) == 6 and 30 not in rec.dscp2prio[3]
    assert rec.receive_buffer_sizes == [80256, 80256, 896, 80256, 896, 896, 896, 896]
    assert rec.pfc_buffer == [0, 2, 5, 7, 1, 2, 3, 6]


def test_trust_pcp_has_no_dscp_map():
    rec = parse(read_fixture("mlnx_qos", "trust_pcp_buffers.txt"))
    assert rec.trust == "pcp" and rec.dscp2prio is None and rec.prio_for_dscp(26) is None


def test_firmware_dcbx_ets_grouped_priorities():
    rec = parse(read_fixture("mlnx_qos", "firmware_dcbx_ets.txt"))
    assert rec.dcbx_mode == "Firmware controlled" and rec.max_buffer_size == 262016
    assert [(t.tc, t.tsa, t.bw, t.priorities) for t in rec.tcs] == [
        (0, "ets", 50, [0, 1, 2, 4, 5, 7]), (3, "ets", 50, [3]), (6, "vendor", None, [6])]
    assert rec.prio_tc == [0, 0, 0, 3, 0, 0, 6, 0]


def test_default_priority_line_and_strict():
    rec = parse(read_fixture("mlnx_qos", "default_priority_strict.txt"))
    assert rec.default_priority is None and rec.cable_len == 30
    assert rec.pfc_priorities == [5] and rec.max_buffer_size == 4151520
    assert rec.prio_for_dscp(40) == 5 and rec.prio_for_dscp(48) == 6
    assert [t.tsa for t in rec.tcs] == ["ets"] * 4 + ["strict"] * 4 and rec.tcs[2].bw == 80


def test_warning_lines_are_collected():
    text = ("****** WARNING: lldpad service is running and may overwrite your settings ******\n\n"
            + read_fixture("mlnx_qos", "trust_pcp_buffers.txt"))
    rec = parse(text)
    assert rec.trust == "pcp" and rec.warnings[0].startswith("****** WARNING")


def test_trust_not_supported_but_pfc_present():
    text = ("Priority trust state is not supported on your system\nDCBX mode: OS controlled\n"
            "PFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n"
            "\tenabled     0   0   0   1   0   0   0   0\n")
    rec = parse(text)
    assert rec.trust is None and rec.pfc_enabled[3] == 1


@pytest.mark.parametrize("text,match", [
    ("", "empty"),
    ("Priority trust state is not supported on your system\n"
     "Buffers commands are not supported on your system\n"
     "Rate limit is not supported on your system!\nETS features are not supported on your system\n", "ETS"),
    ("DCBX mode: OS controlled\nPriority trust state: dscp\n", "PFC"),
    ("CA 'mlx5_0'\n", "PFC"),
    ("Priority trust state: dscp\nPFC configuration:\n\tpriority    0   1   2\n"
     "\tenabled     0   0   1\n", "8"),
])
def test_errors(text, match):
    with pytest.raises(ParseError, match=match):
        parse(text)


def test_digits_split_by_spaces_are_refused_not_joined():
    """Found by the fuzz test: "dscp:0 0 0 ..." was joined into one 20,000-digit number, and int()
    raised ValueError (past Python's 4,300-digit limit) instead of a ParseError."""
    text = read_fixture("mlnx_qos", "dscp_split_prio_line_buffers.txt")
    damaged = text.replace("prio:0 dscp:", "prio:0 dscp:" + "0 " * 10001, 1)
    assert damaged != text
    with pytest.raises(ParseError, match="is not a DSCP number"):
        parse(damaged)
