"""fabricops.evidence.tools: the host-side readings of tool output, on the real captures of
tests/fixtures/ (first line: the public source), agreeing with the controller's full parsers
(fabricops.parsers) wherever both read the same text."""

from __future__ import annotations

import re

import pytest
from captures import fixture_names, read_fixture

from fabricops.evidence import tools as t
from fabricops.evidence.errors import SourceError


def test_ethtool_capture_and_errors():
    stats = t.parse_ethtool_stats(read_fixture("ethtool-stats", "cx4_ubuntu1804_head_ethq8.txt"))
    assert stats["rx_bytes"] == 2195783498134 and stats["tx_queue_stopped"] == 0
    with pytest.raises(SourceError):
        t.parse_ethtool_stats("")
    with pytest.raises(SourceError):
        t.parse_ethtool_stats(read_fixture("nvidia-smi-nvlink", "v100_two_inactive_links.txt"))


def test_pfc_samples():
    one = read_fixture("ethtool-stats", "cx4_ubuntu1804_head_ethq8.txt")
    two = one.replace("rx_bytes: 2195783498134", "rx_bytes: 2195783499134")
    a, b = t.parse_pfc_samples(one + t.SAMPLE_SEPARATOR + two)
    assert b["rx_bytes"] - a["rx_bytes"] == 1000
    assert t.parse_pfc_samples(one) == (a, a)
    assert t.parse_pfc_samples(one + t.SAMPLE_SEPARATOR + "garbage") is None
    assert t.parse_pfc_samples("") is None


@pytest.mark.parametrize("name", fixture_names("nvidia-smi-nvlink"))
def test_nvlink_status_agrees_with_the_controller_parser(name):
    from fabricops.parsers.nvidia_smi import parse_nvlink

    text = read_fixture("nvidia-smi-nvlink", name)
    full = parse_nvlink(text)
    expected = [(g.index, ln.link, ln.active) for g in full.gpus for ln in g.links]
    assert [(x["gpu"], x["link"], x["up"]) for x in t.parse_nvlink_status(text)] == expected


def test_nvlink_status_inactive_links():
    mine = t.parse_nvlink_status(read_fixture("nvidia-smi-nvlink", "v100_two_inactive_links.txt"))
    assert [x for x in mine if not x["up"]] and all(x["speed_gbs"] is None for x in mine if not x["up"])
    assert {x["speed_gbs"] for x in mine if x["up"]} == {25.781}
    with pytest.raises(SourceError):
        t.parse_nvlink_status("NIC statistics:\n     rx_bytes: 1\n")


def test_nvlink_errors_capture():
    errs = t.parse_nvlink_errors(read_fixture("nvidia-smi-nvlink-errors", "h100_elided_stas00.txt"))
    assert {(e["link"], e["kind"]) for e in errs} == {
        (n, k) for n in (0, 1, 17) for k in t.NVLINK_ERROR_KINDS
    }
    assert all(e["gpu"] == 0 and e["value"] == 0 for e in errs)
    crc = t.parse_nvlink_errors(
        "GPU 1: x (UUID: GPU-1)\n\t Link 2: Data CRC Errors: 4\n\t Link 2: Flit CRC Errors: 3\n"
    )
    assert crc == [
        {"gpu": 1, "link": 2, "kind": "crc", "value": 4},
        {"gpu": 1, "link": 2, "kind": "crc", "value": 3},
    ]
    with pytest.raises(SourceError):
        t.parse_nvlink_errors("")


def test_the_collector_exports_every_nvlink_error_kind():
    from fabricops.monitor import collector

    assert set(collector.NVLINK_ERRORS) == set(t.NVLINK_ERROR_KINDS)


@pytest.mark.parametrize("name", fixture_names("nvidia-smi-q"))
def test_gpu_addresses_with_real_bus_ids(name):
    """nvidia-smi prints an 8-digit PCI domain (``Bus Id : 00000000:18:00.0`` in the -q captures);
    ``--query-gpu=index,pci.bus_id --format=csv,noheader`` prints the same id after the index."""
    ids = re.findall(r"^\s+Bus Id\s+:\s+(\S+)$", read_fixture("nvidia-smi-q", name), re.M)
    assert ids
    csv = "".join(f"{i}, {bus}\n" for i, bus in enumerate(ids))
    assert t.parse_gpu_addresses(csv) == {f"GPU{i}": f"0000:{bus[9:].lower()}" for i, bus in enumerate(ids)}
    assert t.parse_gpu_addresses("") == {}
    with pytest.raises(SourceError):
        t.parse_gpu_addresses(read_fixture("nvidia-smi-q", name))


def test_pci_address():
    assert t.pci_address("00000000:DB:00.0") == "0000:db:00.0"
    assert t.pci_address("0000:1a:00.0") == "0000:1a:00.0" and t.pci_address("1a:00.0") == "1a:00.0"


def _with_domain(text: str) -> str:
    """A plain ``lspci -vvv`` capture as ``lspci -D -vvv`` prints it (the domain before each device)."""
    return re.sub(r"^(?=[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] )", "0000:", text, flags=re.M)


@pytest.mark.parametrize("name", fixture_names("lspci"))
def test_lspci_acs_agrees_with_the_controller_parser(name):
    from fabricops.parsers import lspci

    text = _with_domain(read_fixture("lspci", name))
    devices = lspci.parse(text)["devices"]
    if any(d["access_denied"] for d in devices):
        with pytest.raises(SourceError, match="access denied"):
            t.parse_lspci_acs(text)
        return
    want = {
        d["bdf"]: {
            "secondary": d["bus"]["secondary"] if d["bus"] else None,
            "redirect": None
            if d["acs_ctl"] is None
            else d["acs_ctl"]["ReqRedir"] or d["acs_ctl"]["CmpltRedir"],
        }
        for d in devices
    }
    assert t.parse_lspci_acs(text) == want


@pytest.mark.parametrize(
    ("ctl", "redirect"),
    [
        (
            "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-",
            True,
        ),  # as captured
        ("SrcValid+ TransBlk- ReqRedir- CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-", True),
        ("SrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd+ EgressCtrl- DirectTrans+", False),
    ],
)
def test_lspci_acs_redirect_bits(ctl, redirect):
    """Only ReqRedir / CmpltRedir send peer-to-peer traffic up to the root complex."""
    text = _with_domain(read_fixture("lspci", "amd_matisse_downstream_acs_downgraded.txt"))
    captured = "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
    assert captured in text
    got = t.parse_lspci_acs(text.replace(captured, "ACSCtl:\t" + ctl))
    assert got == {"0000:03:02.0": {"secondary": 6, "redirect": redirect}}
    with pytest.raises(SourceError):
        t.parse_lspci_acs("")


def test_lspci_acs_refuses_other_text():
    with pytest.raises(SourceError):
        t.parse_lspci_acs("")
    with pytest.raises(SourceError):  # plain lspci -vvv: no domain, not what the collector runs
        t.parse_lspci_acs(read_fixture("lspci", "amd_matisse_downstream_acs_downgraded.txt"))


@pytest.mark.parametrize("name", fixture_names("mlxconfig"))
def test_mlxconfig_pending_agrees_with_the_controller_parser(name):
    from fabricops.errors import ParseError
    from fabricops.parsers import mlxconfig

    text = read_fixture("mlxconfig", name)
    try:
        q = mlxconfig.parse_query(text)
    except ParseError:
        q = {"columns": []}
    if "current" not in q["columns"] or "next" not in q["columns"]:
        with pytest.raises(SourceError):
            t.parse_mlxconfig_pending(text)
        return
    want = sorted(k for k, v in q["configs"].items() if not mlxconfig.same(v["current"], v["next"]))
    assert sorted(t.parse_mlxconfig_pending(text)) == want


def test_mlxconfig_pending_capture():
    assert t.parse_mlxconfig_pending(read_fixture("mlxconfig", "cx4_operator_test_extended_query.txt")) == [
        "MEMIC_SIZE_LIMIT"
    ]


@pytest.mark.parametrize("name", fixture_names("mlxfwmanager"))
def test_mlxfwmanager_agrees_with_the_controller_parser(name):
    from fabricops.errors import ParseError
    from fabricops.parsers import mlxfwmanager

    text = read_fixture("mlxfwmanager", name)
    try:
        records = mlxfwmanager.parse_query(text)
    except ParseError:
        with pytest.raises(SourceError):
            t.parse_mlxfwmanager(text)
        return
    want = [(r["psid"], mlxfwmanager.fw_burned(r), mlxfwmanager.fw_running(r)) for r in records]
    assert [(r["psid"], r["burned"], r["running"]) for r in t.parse_mlxfwmanager(text)] == want


def test_mlxfwmanager_burned_not_running():
    (rec,) = t.parse_mlxfwmanager(read_fixture("mlxfwmanager", "cx7_mlxup_burned_not_running.txt"))
    assert rec == {
        "pci": "0000:8e:00.0",
        "psid": "MT_0000000838",
        "burned": "28.47.1026",
        "running": "28.46.3048",
    }


@pytest.mark.parametrize("name", fixture_names("dkms-status"))
def test_dkms_status_agrees_with_the_controller_parser(name):
    from fabricops.parsers import dkms

    text = read_fixture("dkms-status", name)
    want = [(r["module"], r["kernel"], r["state"]) for r in dkms.parse_status(text)]
    assert [(r["module"], r["kernel"], r["state"]) for r in t.parse_dkms_status(text)] == want


def test_dkms_status_refuses_other_text():
    with pytest.raises(SourceError):
        t.parse_dkms_status(read_fixture("mokutil-sb-state", "enabled.txt"))


@pytest.mark.parametrize("name", fixture_names("mokutil-sb-state"))
def test_sb_state_agrees_with_the_controller_parser(name):
    from fabricops.parsers import mokutil

    text = read_fixture("mokutil-sb-state", name)
    assert t.parse_sb_state(text) is mokutil.parse_sb_state(text)
    with pytest.raises(SourceError):
        t.parse_sb_state("")
