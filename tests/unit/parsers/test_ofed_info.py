import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers.ofed_info import parse


@pytest.mark.parametrize("name,version,number,major", [
    ("s_4.0_connectx3.txt", "MLNX_OFED_LINUX-4.0-2.0.0.1", "4.0-2.0.0.1", 4),
    ("s_5.1_connectx6.txt", "MLNX_OFED_LINUX-5.1-0.6.6.0", "5.1-0.6.6.0", 5),
    ("s_23.10_azure.txt", "MLNX_OFED_LINUX-23.10-1.1.9.0", "23.10-1.1.9.0", 23),
    ("s_24.10_no_colon.txt", "MLNX_OFED_LINUX-24.10-1.1.4.0", "24.10-1.1.4.0", 24),
    ("full_4.5_head.txt", "MLNX_OFED_LINUX-4.5-1.0.1.0", "4.5-1.0.1.0", 4),
])
def test_real_versions(name, version, number, major):
    rec = parse(read_fixture("ofed_info", name))
    assert rec.installed and rec.version == version and rec.version_number == number and rec.major == major
    assert not rec.version.endswith(":")


def test_full_output_base():
    assert parse(read_fixture("ofed_info", "full_4.5_head.txt")).base == "OFED-4.5-1.0.1"


def test_number_only():
    rec = parse(read_fixture("ofed_info", "n_5.4.txt"))
    assert rec.installed and rec.version is None and rec.version_number == "5.4-3.1.0.0" and rec.minor == 4


def test_doca_internal_form():
    rec = parse("OFED-internal-24.10-1.1.4:\n")
    assert rec.version == "OFED-internal-24.10-1.1.4" and rec.major == 24


@pytest.mark.parametrize("text", ["bash: ofed_info: command not found\n", "sh: 1: ofed_info: not found\n",
                                  "/bin/sh: ofed_info: No such file or directory\r\n"])
def test_missing_command_is_not_installed(text):
    assert parse(text).installed is False


@pytest.mark.parametrize("text", ["", "hca_id:\tmlx5_0\n", "Permission denied\n", "5.8\n"])
def test_not_ofed_info(text):
    with pytest.raises(ParseError):
        parse(text)


def test_doca_ofed_internal_form():
    """DOCA-Host's ofed_info -s (DOCA 2.9.1 doca-ofed profile): OFED-internal-<DOCA-OFED version>:."""
    from captures import read_fixture

    from fabricops.parsers import ofed_info

    rec = ofed_info.parse(read_fixture("ofed_info", "s_doca_2.9.1_internal.txt"))
    assert rec.installed and rec.version == "OFED-internal-24.10-1.1.4.0.200"
    assert rec.version_number == "24.10-1.1.4.0.200" and (rec.major, rec.minor) == (24, 10)
    lab = ofed_info.parse("OFED-internal-24.10-1.1.4.0:\n")  # what the lab's DOCA 2.9.1 prints
    assert lab.version_number == "24.10-1.1.4.0"
