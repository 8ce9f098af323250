"""fabricops.evidence.hostfiles: sysfs, /etc/nccl.conf and ``ip -j addr``, read once for verify,
diagnose and the collector.

sysfs values come from real ``ibstatus`` captures (tests/fixtures/ibstatus; infiniband-diags'
ibstatus script prints each port's sysfs ``state``, ``phys_state``, ``rate`` and ``link_layer``
files verbatim), turned into the ``grep -H ''`` lines the probes print. nccl.conf follows NCCL's
own reader, ``setEnvFile`` in NVIDIA/nccl src/misc/param.cc.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
from captures import fixture_names, read_fixture

from fabricops.evidence import hostfiles as h
from fabricops.evidence.errors import SourceError
from fabricops.parsers import ibstatus, ip_addr

REPO = Path(__file__).resolve().parents[3]
#: ibstatus label -> sysfs file
_SYSFS_FILE = {"state": "state", "phys state": "phys_state", "rate": "rate", "link_layer": "link_layer"}


def _grep_lines(capture: str, prefix: str = "") -> tuple[str, list[tuple[str, int, dict[str, str]]]]:
    """An ibstatus capture as ``grep -H '' DEV/ports/N/FILE`` lines, and what each port holds."""
    lines, ports = [], []
    for block in capture.split("Infiniband device ")[1:]:
        head, _, body = block.partition("\n")
        dev, port = head.split("'")[1], int(head.split("port ")[1].split()[0])
        files = {}
        for row in body.splitlines():
            label, sep, value = row.strip().partition(":")
            if sep and label in _SYSFS_FILE:
                files[_SYSFS_FILE[label]] = value.strip()
                lines.append(f"{prefix}{dev}/ports/{port}/{_SYSFS_FILE[label]}:{value.strip()}")
        ports.append((dev, port, files))
    return "\n".join(lines) + "\n", ports


@pytest.mark.parametrize("name", fixture_names("ibstatus"))
@pytest.mark.parametrize("prefix", ["", "/sys/class/infiniband/"])
def test_sysfs_ports_from_real_captures(name, prefix):
    capture = read_fixture("ibstatus", name)
    text, ports = _grep_lines(capture, prefix)
    got = h.parse_sysfs(text)
    assert sorted(got["ports"]) == sorted(f"{d}/{p}" for d, p, _ in ports)
    full = {(p.device, p.port): p for p in ibstatus.parse(capture).ports}
    for dev, port, files in ports:
        entry = got["ports"][f"{dev}/{port}"]
        assert entry["device"] == dev and entry["port"] == port
        assert {k: entry[k] for k in files} == files
        # the attribute readings agree with the controller's ibstatus parser
        ref = full[(dev, port)]
        assert h.parse_state(entry["state"]) == (ref.state_num, ref.state)
        assert h.parse_state(entry["phys_state"]) == (ref.phys_state_num, ref.phys_state)
        rate, lanes, speed = h.parse_rate(entry["rate"])
        assert rate == ref.rate * 1e9 and f"{lanes}X" == ref.width and speed == (ref.speed or "")


def test_sysfs_counters_gid_types_numa_and_netdevs():
    text = (
        "mlx5_0/ports/1/state:4: ACTIVE\n"
        "mlx5_0/ports/1/counters/symbol_error:12\n"
        "mlx5_0/ports/1/hw_counters/np_cnp_sent:7\n"
        "mlx5_0/ports/1/counters/port_rcv_errors:N/A\n"  # not a number: left out
        "mlx5_0/ports/1/gid_attrs/types/3:RoCE v2\n"
        "mlx5_0/device/numa_node:1\n"
        "mlx5_1/device/numa_node:-1\n"
        "netdev:mlx5_0/device/net/ens1f0np0\n"
        "netdev:mlx5_0/device/net/ens1f1np1\n"
        "mlx5_0/ports/x/state:4: ACTIVE\n"  # not a port number: skipped, not a crash
        "mlx5_0/ports/1/gid_attrs/types/x:RoCE v2\n"
        "no colon here\n"
    )
    got = h.parse_sysfs(text)
    assert got["ports"] == {
        "mlx5_0/1": {
            "device": "mlx5_0",
            "port": 1,
            "state": "4: ACTIVE",
            "counters": {"symbol_error": 12, "np_cnp_sent": 7},
            "gid_types": {3: "RoCE v2"},
        }
    }
    assert got["numa"] == {"mlx5_0": 1, "mlx5_1": -1}
    assert got["netdevs"] == {"mlx5_0": ["ens1f0np0", "ens1f1np1"]}
    assert h.parse_sysfs("") == {"ports": {}, "netdevs": {}, "numa": {}}


def test_verify_reads_port_rates_with_the_evidence_parser():
    from fabricops.verify import hostchecks

    text, _ = _grep_lines(
        read_fixture("ibstatus", "cx3_fdr10_polling_libvma.txt"), "/sys/class/infiniband/"
    )
    rates = hostchecks._sysfs_rates({"ib_rates": {"rc": 0, "stdout": text}})
    assert {k: (r.rate_gbps, r.width, r.speed) for k, r in rates.items()} == {
        "mlx4_0/1": (40, "4X", "FDR10"),
        "mlx4_0/2": (10, "4X", "SDR"),
    }


@pytest.mark.parametrize("text", ["fast", "", "Gb/sec"])
def test_unreadable_rate_and_state(text):
    with pytest.raises(SourceError):
        h.parse_rate(text)
    with pytest.raises(SourceError):
        h.parse_state(text)


def test_pcie_link_speed():
    # the kernel's current_link_speed: "32.0 GT/s PCIe" (5.x+), "8 GT/s" (older), "Unknown" (no link)
    assert h.parse_gts("32.0 GT/s PCIe") == 32.0 and h.parse_gts("8 GT/s") == 8.0
    assert h.parse_gts("Unknown") == 0.0 and h.parse_gts("garbage") is None and h.parse_gts(None) is None


def test_ecn_points():
    # the mlx5 DCQCN switches (fabricops.hostqos.knobs PATHS ecn_np / ecn_rp), as grep -H prints them
    text = (
        "/sys/class/net/ens1f0np0/ecn/roce_np/enable/3:1\n"
        "/sys/class/net/ens1f0np0/ecn/roce_rp/enable/3:0\n"
        "/sys/class/net/ens1f0np0/ecn/roce_np/cnp_dscp:48\n"
    )
    assert h.parse_ecn_points(text) == {("ens1f0np0", "roce_np", 3): True, ("ens1f0np0", "roce_rp", 3): False}
    assert h.parse_ecn_points("") == {}


@pytest.mark.parametrize("name", fixture_names("ip-addr"))
def test_ip_addr_agrees_with_the_controller_parser(name):
    text = read_fixture("ip-addr", name)
    full = ip_addr.parse(text)
    assert h.parse_ipv4(text) == {
        ln.ifname: [a.local for a in ln.addresses if a.family == "inet"] for ln in full.links
    }
    assert h.parse_mtus(text) == {ln.ifname: ln.mtu or 0 for ln in full.links}


@pytest.mark.parametrize("text", ["", "not json", "null", "{}", '[1, "x"]', '[{"ifname": "a", "mtu": "x"}]'])
def test_ip_addr_unreadable_is_empty_not_a_crash(text):
    assert isinstance(h.parse_ipv4(text), dict) and isinstance(h.parse_mtus(text), dict)


# --- /etc/nccl.conf, as NCCL's setEnvFile (src/misc/param.cc) reads it ---------------------------

NCCL_CASES = [
    # a plain file, as the nccl_profile role writes it
    (
        "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1\nNCCL_IB_GID_INDEX=3\n",
        {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_GID_INDEX": "3"},
    ),
    # quotes are not removed: NCCL sets the value with its quotes
    ('NCCL_SOCKET_IFNAME="eth0"\n', {"NCCL_SOCKET_IFNAME": '"eth0"'}),
    ("NCCL_SOCKET_IFNAME='eth0'\n", {"NCCL_SOCKET_IFNAME": "'eth0'"}),
    # only a '#' in the first column makes a comment
    ("# NCCL_DEBUG=INFO\nNCCL_DEBUG=WARN\n", {"NCCL_DEBUG": "WARN"}),
    ("  # NCCL_DEBUG=INFO\n", {"  # NCCL_DEBUG": "INFO"}),
    ("NCCL_DEBUG=WARN # quiet\n", {"NCCL_DEBUG": "WARN # quiet"}),
    # no whitespace is stripped, around the name or the value
    ("NCCL_IB_TC = 106\n", {"NCCL_IB_TC ": " 106"}),
    (" NCCL_IB_TC=106 \n", {" NCCL_IB_TC": "106 "}),
    # only the '\n' goes: a CRLF file keeps '\r' in each value
    ("NCCL_IB_TC=106\r\nNCCL_IB_SL=0\r\n", {"NCCL_IB_TC": "106\r", "NCCL_IB_SL": "0\r"}),
    # the first '=' splits; the value may hold more
    ("NCCL_IB_HCA==mlx5_0\n", {"NCCL_IB_HCA": "=mlx5_0"}),
    ("NCCL_X=a=b\n", {"NCCL_X": "a=b"}),
    # setenv(name, value, 0): the first line of a name wins
    ("NCCL_IB_TC=106\nNCCL_IB_TC=41\n", {"NCCL_IB_TC": "106"}),
    # no '=' or an empty name: nothing set; an empty value is set
    ("NCCL_DEBUG\n\n=x\nNCCL_ALGO=\n", {"NCCL_ALGO": ""}),
    # the last line needs no newline
    ("NCCL_PROTO=Simple", {"NCCL_PROTO": "Simple"}),
    ("", {}),
]


@pytest.mark.parametrize(("text", "env"), NCCL_CASES)
def test_nccl_conf_reads_as_nccl_does(text, env):
    assert h.parse_nccl_conf(text) == env


def test_nccl_conf_cuts_name_and_value_at_1023():
    got = h.parse_nccl_conf("N" * 1100 + "=" + "v" * 1100)
    assert list(got) == ["N" * 1023] and got["N" * 1023] == "v" * 1023


@pytest.mark.parametrize(("text", "env"), NCCL_CASES)
def test_nccl_conf_agrees_with_the_emulated_nccl(text, env):
    """The lab's NCCL (an independent reading of setEnvFile) sees the same NCCL_* variables."""
    from fabricops_lab.emul.nccl import set_env_file

    lab = set_env_file(text)
    assert lab == {k: v for k, v in h.parse_nccl_conf(text).items() if k.isidentifier()}


def test_the_nccl_profile_roles_file_reads_back_as_its_variables():
    env = {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_GID_INDEX": "3", "NCCL_SOCKET_IFNAME": "=ens1f0"}
    tmpl = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(REPO / "roles/nccl_profile/templates")),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    text = tmpl.get_template("nccl.conf.j2").render(
        ansible_managed="Ansible managed", nccl_profile_name="roce", __nccl_profile_env=env
    )
    assert h.parse_nccl_conf(text) == env


def test_verify_and_consistency_read_nccl_conf_with_the_evidence_parser():
    from fabricops.verify import consistency, hostchecks

    assert hostchecks.parse_nccl_conf is h.parse_nccl_conf
    assert consistency._nccl_conf({"nccl_conf": {"rc": 0, "stdout": 'NCCL_IB_HCA="mlx5_0"\n'}}) == {
        "NCCL_IB_HCA": '"mlx5_0"'
    }
