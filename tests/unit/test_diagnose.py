"""fabricops diagnose: evidence -> findings (symptom, evidence, cause, remedy), most likely first."""

from __future__ import annotations

import json

import pytest
from captures import read_fixture

from fabricops import diagnose as d
from fabricops.cli import main
from fabricops.errors import EXIT_BADINPUT, EXIT_NORUN

CTX = d.Context(expected_rate_gbps={"InfiniBand": 400.0}, lossless_priority=3)


def ok(text: str) -> dict:
    return {"rc": 0, "stdout": text, "stderr": ""}


def sysfs(**over) -> str:
    """Two NDR IB ports and one RoCE port, healthy unless overridden ({"mlx5_0/1/state": ...})."""
    ports = {
        "mlx5_0/1": {
            "state": "4: ACTIVE",
            "phys_state": "5: LinkUp",
            "rate": "400 Gb/sec (4X NDR)",
            "link_layer": "InfiniBand",
            "counters/symbol_error": "0",
            "counters/link_downed": "0",
            "gid_attrs/types/0": "IB/RoCE v1",
        },
        "mlx5_1/1": {
            "state": "4: ACTIVE",
            "phys_state": "5: LinkUp",
            "rate": "400 Gb/sec (4X NDR)",
            "link_layer": "InfiniBand",
            "counters/symbol_error": "0",
            "counters/link_downed": "0",
        },
        "mlx5_2/1": {
            "state": "4: ACTIVE",
            "phys_state": "5: LinkUp",
            "rate": "400 Gb/sec (4X NDR)",
            "link_layer": "Ethernet",
            "hw_counters/np_cnp_sent": "50",
            "hw_counters/np_ecn_marked_roce_packets": "100",
            "gid_attrs/types/0": "RoCE v1",
            "gid_attrs/types/1": "RoCE v2",
            "gid_attrs/types/2": "RoCE v1",
            "gid_attrs/types/3": "RoCE v2",
        },
    }
    for key, val in over.items():
        dev, port, attr = key.split("/", 2)
        ports[f"{dev}/{port}"][attr] = val
    lines = []
    for dp, attrs in ports.items():
        dev, port = dp.split("/")
        for attr, val in attrs.items():
            lines.append(f"{dev}/ports/{port}/{attr}:{val}")
    lines += [
        "netdev:mlx5_0/device/net/ibp26s0",
        "netdev:mlx5_1/device/net/ibp60s0",
        "netdev:mlx5_2/device/net/enp170s0f0np0",
    ]
    return "\n".join(lines) + "\n"


NVLINK_OK = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n" + "".join(
    f"\t Link {i}: 26.562 GB/s\n" for i in range(18)
)
ETH = (
    "NIC statistics:\n     rx_prio3_pause: {p}\n     rx_prio3_pause_duration: {d}\n"
    "     tx_pause_storm_error_events: {e}\n"
)


def evidence(**over) -> dict:
    raw = {
        "sysfs": ok(sysfs()),
        "ecn": ok(
            "".join(
                f"/sys/class/net/enp170s0f0np0/ecn/{pt}/enable/{p}:1\n"
                for pt in ("roce_np", "roce_rp")
                for p in range(8)
            )
        ),
        "nvlink": ok(NVLINK_OK),
        "nccl": ok("NCCL_IB_GID_INDEX=3\n"),
        "mlnx_qos:enp170s0f0np0": ok(read_fixture("mlnx_qos", "trust_dscp_no_buffers_netarbiter.txt")),
        "ethtool:enp170s0f0np0": ok(ETH.format(p=0, d=0, e=0) + "===\n" + ETH.format(p=0, d=0, e=0)),
    }
    raw.update(over)
    return raw


def kinds(findings):
    return [(f.check, f.device) for f in findings]


def test_healthy_gives_no_finding():
    assert d.analyse({"gpu04": evidence()}, CTX) == []


def test_port_down_first_with_symptom_evidence_cause_remedy():
    raw = evidence(
        sysfs=ok(
            sysfs(
                **{
                    "mlx5_0/1/state": "1: DOWN",
                    "mlx5_0/1/phys_state": "3: Disabled",
                    "mlx5_0/1/rate": "10 Gb/sec (4X SDR)",
                }
            )
        ),
        nccl=ok("NCCL_IB_GID_INDEX=1\n"),
    )
    found = d.analyse({"gpu04": raw}, CTX)
    assert kinds(found)[0] == ("port_down", "mlx5_0/1")
    assert ("gid_index", "mlx5_2/1") in kinds(found)  # a lesser finding still listed, after
    f = found[0]
    assert "NCCL timeout" in f.message and "ibp26s0" in f.cause and "Disabled" in f.evidence[0] and f.action


def test_reduced_width_and_lower_speed():
    found = d.analyse({"h": evidence(sysfs=ok(sysfs(**{"mlx5_1/1/rate": "200 Gb/sec (2X NDR)"})))}, CTX)
    assert kinds(found) == [("port_degraded", "mlx5_1/1")]
    assert "2X instead of 4X" in found[0].cause and found[0].message == d.SYMPTOM_SLOW
    found = d.analyse({"h": evidence(sysfs=ok(sysfs(**{"mlx5_1/1/rate": "200 Gb/sec (4X HDR)"})))}, CTX)
    assert "negotiated HDR" in found[0].cause
    # no profile rate, no judgement
    assert (
        d.analyse({"h": evidence(sysfs=ok(sysfs(**{"mlx5_1/1/rate": "200 Gb/sec (2X NDR)"})))}, d.Context())
        == []
    )


def test_flapping_at_the_profile_threshold_and_symbol_errors():
    raw = evidence(
        sysfs=ok(
            sysfs(
                **{
                    "mlx5_0/1/counters/link_downed": "8",
                    "mlx5_0/1/counters/symbol_error": "500",
                    "mlx5_1/1/counters/symbol_error": "3",
                }
            )
        )
    )
    found = d.analyse({"h": raw}, CTX)
    assert kinds(found) == [("link_flapping", "mlx5_0/1"), ("symbol_errors", "mlx5_1/1")]
    four = evidence(sysfs=ok(sysfs(**{"mlx5_0/1/counters/link_downed": "4"})))
    assert d.analyse({"h": four}, CTX) == []


def test_nvlink_inactive_from_a_real_capture():
    raw = evidence(nvlink=ok(read_fixture("nvidia-smi-nvlink", "v100_two_inactive_links.txt")))
    found = d.analyse({"h": raw}, CTX)
    assert found and all(f.check == "nvlink_inactive" for f in found)
    assert "<inactive>" in found[0].evidence[0] and found[0].device.startswith("GPU")


def test_pfc_storm_from_two_ethtool_samples():
    storm = ETH.format(p=10, d=0, e=0) + "===\n" + ETH.format(p=500, d=1_800_000, e=0)
    found = d.analyse({"h": evidence(**{"ethtool:enp170s0f0np0": ok(storm)})}, CTX)
    assert kinds(found) == [("pfc_storm", "mlx5_2/1")]
    assert "90% of the time" in found[0].evidence[0]
    events = ETH.format(p=0, d=0, e=2) + "===\n" + ETH.format(p=0, d=0, e=2)
    assert kinds(d.analyse({"h": evidence(**{"ethtool:enp170s0f0np0": ok(events)})}, CTX)) == [
        ("pfc_storm", "mlx5_2/1")
    ]


def test_ecn_on_one_side_only():
    raw = evidence(
        sysfs=ok(sysfs(**{"mlx5_2/1/hw_counters/np_cnp_sent": "0"})),
        ecn=ok("/sys/class/net/enp170s0f0np0/ecn/roce_np/enable/3:0\n"),
    )
    found = d.analyse({"h": raw}, CTX)
    assert kinds(found) == [("ecn_one_side", "mlx5_2/1")]
    assert any("np_cnp_sent 0" in e for e in found[0].evidence)


def test_pfc_mismatch_with_the_definition_and_the_switch():
    ctx = d.Context(
        lossless_priority=3,
        cabling=[{"host": "h", "netdev": "enp170s0f0np0", "switch": "leaf", "switch_port": "Eth1/4"}],
        switches={"leaf": {"pfc_priorities": [3], "ports": {"Eth1/4": {"pfc_priorities": [], "ecn": True}}}},
    )
    found = d.analyse({"h": evidence()}, ctx)
    assert kinds(found) == [("pfc_mismatch", "mlx5_2/1")]
    assert "switch leaf Eth1/4: PFC on []" in found[0].evidence[0]
    default_qos = read_fixture("mlnx_qos", "default_priority_strict.txt")
    found = d.analyse({"h": evidence(**{"mlnx_qos:enp170s0f0np0": ok(default_qos)})}, CTX)
    assert kinds(found) == [("pfc_mismatch", "mlx5_2/1")]


def test_gid_index_must_select_roce_v2_ipv4():
    found = d.analyse({"h": evidence(nccl=ok("# tuned\nNCCL_IB_GID_INDEX=1\n"))}, CTX)
    assert kinds(found) == [("gid_index", "mlx5_2/1")] and "NCCL_IB_GID_INDEX=1" in found[0].cause
    # /etc/nccl.conf is read as NCCL reads it (fabricops.evidence.hostfiles.parse_nccl_conf): "NAME = 1"
    # sets the variable "NAME " that NCCL never reads, so no GID index is chosen there and none is judged
    assert d.analyse({"h": evidence(nccl=ok("# tuned\nNCCL_IB_GID_INDEX = 1\n"))}, CTX) == []


def test_mtu_mismatch_between_hosts_from_real_ibv_devinfo():
    text = read_fixture("ibv_devinfo", "cx6_roce_verbose.txt")
    other = text.replace("active_mtu:             4096 (5)", "active_mtu:             1024 (3)")
    assert other != text
    ev = {
        "a": evidence(ibv_devinfo=ok(text)),
        "b": evidence(ibv_devinfo=ok(text)),
        "c": evidence(ibv_devinfo=ok(other)),
    }
    found = d.analyse(ev, CTX)
    assert [(f.check, f.host) for f in found] == [("mtu_mismatch", "c")]
    assert "1024" in found[0].evidence[0] and "4096" in found[0].cause


def test_ipoib_unreachable():
    raw = evidence(**{"ping:gpu02:10.0.0.2": {"rc": 1, "stdout": "100% packet loss", "stderr": ""}})
    found = d.analyse({"gpu01": raw}, CTX)
    assert kinds(found) == [("connectivity", None)] and "gpu02" in found[0].cause


def test_order_by_likelihood_across_hosts():
    ev = {
        "a": evidence(nccl=ok("NCCL_IB_GID_INDEX=0\n")),
        "b": evidence(
            nvlink=ok(read_fixture("nvidia-smi-nvlink", "v100_two_inactive_links.txt")),
            sysfs=ok(sysfs(**{"mlx5_1/1/state": "1: DOWN"})),
        ),
    }
    found = d.analyse(ev, CTX)
    assert [f.check for f in found][:2] == ["port_down", "nvlink_inactive"] and found[-1].check == "gid_index"
    assert [d.likelihood(f) for f in found] == sorted((d.likelihood(f) for f in found), reverse=True)


def test_a_finding_is_a_failed_result_of_category_diagnose(monkeypatch):
    """Finding(host, kind, symptom, cause, evidence, remedy, device, likelihood) became the one result
    type: check is the kind, message the symptom, action the remedy, likelihood in details."""
    from fabricops import result

    monkeypatch.setattr(result, "clock", lambda: "2025-01-31T12:00:00Z")
    raw = evidence(
        sysfs=ok(sysfs(**{"mlx5_0/1/state": "1: DOWN"})),
        nvlink=ok(read_fixture("nvidia-smi-nvlink", "v100_two_inactive_links.txt")),
        **{"ping:gpu02:10.0.0.2": {"rc": 1, "stdout": "100% packet loss", "stderr": ""}},
    )
    found = d.analyse({"gpu01": raw}, CTX)
    assert all(isinstance(f, result.Result) for f in found)
    assert {(f.category, f.status, f.severity) for f in found} == {("diagnose", result.FAIL, "critical")}
    assert all(f.details["likelihood"] == d.LIKELIHOOD[f.check] for f in found)
    assert all(f.observed_at == "2025-01-31T12:00:00Z" for f in found)
    by_kind = {f.check: f for f in found}
    down = by_kind["port_down"]
    assert down.host == "gpu01" and down.device == "mlx5_0/1"
    assert down.message == f"{d.SYMPTOM_HANG}; {d.SYMPTOM_SLOW}"
    assert down.cause.startswith("mlx5_0/1 (ibp26s0) is down") and down.action.startswith("Check the cable")
    assert down.evidence == ["sysfs mlx5_0/1: state 1: DOWN, phys_state 5: LinkUp, rate 400 Gb/sec (4X NDR)"]
    assert down.component == result.Component("hca_port", "mlx5_0/1", "gpu01")
    assert by_kind["nvlink_inactive"].component.kind == "gpu"
    assert by_kind["connectivity"].component == result.Component("host", "gpu01", "gpu01")


def _one_finding():
    from fabricops.result import FAIL, Result

    return Result("diagnose", "port_down", "gpu01", "mlx5_0/1", FAIL, "NCCL timeout / hang",
                  cause="it is down", evidence=["sysfs mlx5_0/1: state 1: DOWN", "ibstat: Disabled"],
                  action="Reseat the cable.", details={"likelihood": 100})


def test_reports_are_derived_from_the_result():
    f = _one_finding()
    data = json.loads(d.to_json([f], ["gpu01", "gpu02"]))
    assert data["exit_status"] == 1 and data["healthy"] is False
    (rec,) = data["findings"]
    assert {k: rec[k] for k in ("host", "kind", "symptom", "cause", "evidence", "remedy", "device",
                                "likelihood")} == {
        "host": "gpu01", "kind": "port_down", "symptom": "NCCL timeout / hang", "cause": "it is down",
        "evidence": ["sysfs mlx5_0/1: state 1: DOWN", "ibstat: Disabled"], "remedy": "Reseat the cable.",
        "device": "mlx5_0/1", "likelihood": 100}
    assert rec["component"] == {"kind": "hca_port", "name": "mlx5_0/1", "host": "gpu01"}
    junit = d.to_junit([f], ["gpu01", "gpu02"])
    assert '<failure message="it is down" type="port_down">' in junit and 'failures="1"' in junit
    assert ("symptom: NCCL timeout / hang\nevidence: sysfs mlx5_0/1: state 1: DOWN\n"
            "evidence: ibstat: Disabled\nremedy: Reseat the cable.") in junit
    text = d.terminal([f], ["gpu01"])
    assert text.splitlines() == [
        "1. [gpu01 mlx5_0/1] it is down", "   symptom:  NCCL timeout / hang",
        "   evidence: sysfs mlx5_0/1: state 1: DOWN", "   evidence: ibstat: Disabled",
        "   remedy:   Reseat the cable.",
    ]
    assert d.exit_status([f], ["gpu01"], {}) == 1
    assert d.exit_status([], ["gpu01"], {}) == 0
    assert d.exit_status([], ["gpu01"], {"gpu02": "unreachable"}) == EXIT_NORUN
    assert d.exit_status([], [], {}) == EXIT_NORUN


def test_from_ansible_and_cli_from_evidence(tmp_path, capsys):
    base = [
        {"diagnose_cmd": {"key": k}, "rc": v["rc"], "stdout": v["stdout"], "stderr": ""}
        for k, v in evidence(sysfs=ok(sysfs(**{"mlx5_0/1/state": "1: DOWN"}))).items()
        if ":" not in k
    ]
    roce = [
        {
            "diagnose_netdev": "enp170s0f0np0",
            "stdout": "qos_rc=0\n"
            + read_fixture("mlnx_qos", "trust_dscp_no_buffers_netarbiter.txt")
            + "#####\n"
            + ETH.format(p=0, d=0, e=0)
            + "===\n"
            + ETH.format(p=0, d=0, e=0),
        }
    ]
    (tmp_path / "gpu04.json").write_text(json.dumps({"ansible": {"base": base, "roce": roce}}))
    (tmp_path / "context.json").write_text(
        json.dumps({"fabricops_hardware_profile": "hgx-h100-ndr", "fabricops_roce": {"lossless_priority": 3}})
    )
    raw = d.from_ansible(json.loads((tmp_path / "gpu04.json").read_text()))
    assert raw["mlnx_qos:enp170s0f0np0"]["rc"] == 0 and raw["ethtool:enp170s0f0np0"]["stdout"].startswith(
        "NIC"
    )
    out = tmp_path / "f.json"
    assert main(["diagnose", "--from-evidence", str(tmp_path), "--json", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["healthy"] is False and report["findings"][0]["kind"] == "port_down"
    assert {"symptom", "evidence", "cause", "remedy"} <= set(report["findings"][0])
    first = report["findings"][0]
    # the finding record's keys of before stay, the result's fields join them (docs/diagnose.md)
    assert first["host"] == "gpu04" and first["device"] == "mlx5_0/1" and first["likelihood"] == 100
    assert first["check"] == first["kind"] and first["category"] == "diagnose" and first["status"] == "fail"
    assert first["message"] == first["symptom"] and first["action"] == first["remedy"]
    assert first["component"] == {"kind": "hca_port", "name": "mlx5_0/1", "host": "gpu04"}
    assert first["severity"] == "critical" and first["observed_at"].endswith("Z")
    assert "1. [gpu04 mlx5_0/1]" in capsys.readouterr().out


def test_cli_bad_input(tmp_path, capsys):
    # a missing directory: could not run; a context naming no profile: invalid input data (docs/cli.md)
    assert main(["diagnose", "--from-evidence", str(tmp_path / "nope")]) == EXIT_NORUN
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "context.json").write_text(json.dumps({"fabricops_hardware_profile": "no-such-profile"}))
    (tmp_path / "h.json").write_text(json.dumps(evidence()))
    assert main(["diagnose", "--from-evidence", str(tmp_path)]) == EXIT_BADINPUT


@pytest.mark.parametrize("text", ["", "garbage:line\n"])
def test_unreadable_sysfs_gives_no_port_finding(text):
    assert d.analyse({"h": evidence(sysfs=ok(text))}, CTX) == []


# --- the lossless priority is the validated, effective definition (fabricops.roce.desired) -----


@pytest.mark.parametrize(
    ("hostvars", "want"),
    [
        ({"fabricops_roce": {"dscp": 26}}, 3),  # the model's default priority, not None
        ({"fabricops_roce": {}}, 3),
        ({"fabricops_roce": {"lossless_priority": "5", "dscp": 40}}, 5),
        ({"fabricops_roce": {"dscp": 26}, "roce_host_roce": {"lossless_priority": 4, "dscp": 34}}, 4),
        ({"roce_host_roce": {"lossless_priority": 2, "dscp": 18}}, 2),
        ({"fabricops_roce": {"lossless_priority": 4, "dscp": 34},
          "roce_host_roce": "{{ fabricops_roce | default({}) }}"}, 4),  # the role default: no override
        ({}, None),  # no RoCE planned
        ({"fabricops_roce": None}, None),
    ],
)
def test_context_lossless_priority_is_the_effective_definition(hostvars, want):
    assert d.context_from_hostvars(hostvars).lossless_priority == want


@pytest.mark.parametrize(
    ("hostvars", "sentence"),
    [
        ({"fabricops_roce": {"lossless_priority": 9}}, "fabricops_roce.lossless_priority is 9"),
        ({"fabricops_roce": {"dscp": 26, "tos": 106}}, "fabricops_roce has unknown key(s) tos"),
        ({"fabricops_roce": {}, "roce_host_roce": {"cnp_priority": 3}},
         "roce_host_roce does not validate: roce_host_roce.cnp_priority (3) equals lossless_priority"),
        ({"fabricops_roce": "lossless"}, "fabricops_roce must be a mapping"),
    ],
)
def test_context_refuses_a_bad_definition_in_one_sentence(hostvars, sentence):
    with pytest.raises(d.DiagnoseError) as err:
        d.context_from_hostvars(hostvars)
    assert sentence in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_status == EXIT_BADINPUT


def test_cli_context_with_a_bad_definition_is_invalid_input(tmp_path, capsys):
    (tmp_path / "context.json").write_text(
        json.dumps({"fabricops_hardware_profile": "hgx-h100-ndr", "fabricops_roce": {"lossless_priority": 3},
                    "roce_host_roce": {"lossless_priority": 8}})
    )
    (tmp_path / "h.json").write_text(json.dumps(evidence()))
    assert main(["diagnose", "--from-evidence", str(tmp_path)]) == EXIT_BADINPUT
    err = capsys.readouterr().err
    assert "roce_host_roce.lossless_priority is 8" in err and "Traceback" not in err


def _mtu_on(text: str, hca: str, mtu: int) -> str:
    """The capture with ``hca``'s port 1 at ``mtu`` (the other HCA untouched)."""
    code = {1024: 3, 2048: 4, 4096: 5}[mtu]
    head, _, rest = text.partition(f"hca_id:\t{hca}\n")
    assert rest, hca
    rest = rest.replace("active_mtu:\t\t4096 (5)", f"active_mtu:\t\t{mtu} ({code})", 1)
    return head + f"hca_id:\t{hca}\n" + rest


def test_mtu_mismatch_is_judged_per_rail():
    """Two real HCAs (rails mlx4_0/1, mlx4_1/1): a host whose rails differ from each other but match the
    other hosts rail by rail is fine; a host off on one rail is named with that rail."""
    text = read_fixture("ibv_devinfo", "mlx4_two_hcas_plain.txt")
    mixed = _mtu_on(text, "mlx4_0", 2048)
    assert mixed != text
    ev = {h: evidence(ibv_devinfo=ok(mixed)) for h in ("a", "b", "c")}
    assert [f for f in d.analyse(ev, CTX) if f.check == "mtu_mismatch"] == []
    ev["c"] = evidence(ibv_devinfo=ok(text))
    found = [f for f in d.analyse(ev, CTX) if f.check == "mtu_mismatch"]
    assert [(f.host, f.device) for f in found] == [("c", "mlx4_0/1")]
    assert "rail mlx4_0/1: active MTU 4096 on c where the other hosts of the rail have 2048" in found[0].cause
    assert "NVIDIA/nccl#1524" in found[0].cause and "rail mlx4_0/1" in found[0].action


# --- the GPU path: PCIe link, ACS, IOMMU, GPUDirect mechanism (issue 19) ---------------------------

_LINKS = {"0000:18:00.0": ("32.0 GT/s PCIe", "16"), "0000:1a:00.0": ("32.0 GT/s PCIe", "16")}
_ACS_OFF = "SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
_ACS_ON = "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"


def _pcie_sysfs(**cur):
    lines = []
    for addr, (speed, width) in {**_LINKS, **cur}.items():
        lines += [f"/sys/bus/pci/devices/{addr}/current_link_speed:{speed}",
                  f"/sys/bus/pci/devices/{addr}/current_link_width:{width}",
                  f"/sys/bus/pci/devices/{addr}/max_link_speed:32.0 GT/s PCIe",
                  f"/sys/bus/pci/devices/{addr}/max_link_width:16"]
    return "\n".join(lines) + "\n"


def _lspci(acs=_ACS_OFF):
    """pciutils' format (lspci.c "Bus: primary=..", ls-caps.c "ACSCtl:"): 16:00.0 switch upstream ->
    17:00.0 (GPU0 18:00.0) and 17:02.0 (mlx5_0 1a:00.0)."""
    def bridge(bdf, prim, sec, ctl=None):
        t = (f"{bdf} PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 [Normal "
             f"decode])\n\tBus: primary={prim}, secondary={sec}, subordinate={sec if ctl else '1a'}, "
             "sec-latency=0\n")
        if ctl:
            t += f"\tCapabilities: [f24 v1] Access Control Services\n\t\tACSCtl:\t{ctl}\n"
        return t + "\n"

    return (bridge("0000:16:00.0", "16", "17") + bridge("0000:17:00.0", "17", "18", _ACS_OFF)
            + bridge("0000:17:02.0", "17", "1a", acs)
            + "0000:18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n\n"
            + "0000:1a:00.0 Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n\n")


def _iommu(kind="identity"):
    return (f"/sys/kernel/iommu_groups/27/type:{kind}\n/sys/kernel/iommu_groups/29/type:{kind}\n"
            "/sys/kernel/iommu_groups/27/devices/0000:18:00.0/vendor:0x10de\n"
            "/sys/kernel/iommu_groups/29/devices/0000:1a:00.0/vendor:0x15b3\n")


def gpu_path(**over) -> dict:
    raw = evidence(
        pcie_sysfs=ok(_pcie_sysfs()),
        hca_pci=ok("/sys/class/infiniband/mlx5_0/device/uevent:PCI_SLOT_NAME=0000:1a:00.0\n"),
        gpu_pci=ok("0, 00000000:18:00.0\n"),
        lspci=ok(_lspci()),
        iommu=ok(_iommu()),
        cmdline=ok("BOOT_IMAGE=/vmlinuz ro quiet\n"),
        lsmod=ok("Module                  Size  Used by\nnvidia_peermem         16384  0\n"),
        uname=ok("6.5.0-35-generic\n"),
        modinfo_nvidia=ok("NVIDIA\n"),
    )
    raw.update(over)
    return raw


def test_gpu_path_healthy_gives_no_finding():
    assert d.analyse({"gpu04": gpu_path()}, CTX) == []


def test_gpu_path_commands_are_collected():
    for key in ("pcie_sysfs", "hca_pci", "gpu_pci", "lspci", "iommu", "cmdline", "lsmod", "uname",
                "modinfo_nvidia"):
        assert key in d.BASE_COMMANDS
    assert d.BASE_COMMANDS["lspci"] == "lspci -D -vvv"


def test_downtrained_hca_link_is_named_with_cause_and_remedy():
    slow = _pcie_sysfs(**{"0000:1a:00.0": ("16.0 GT/s PCIe", "8")})
    found = d.analyse({"gpu04": gpu_path(pcie_sysfs=ok(slow))}, CTX)
    assert kinds(found) == [("pcie_downtrained", "mlx5_0")]
    f = found[0]
    assert f.message == d.SYMPTOM_SLOW
    assert "mlx5_0 (0000:1a:00.0) PCIe link trained at x8 16 GT/s of x16 32 GT/s" in f.cause
    assert "lanes lost" in f.cause and "current_link_width 8" in f.evidence[0]
    assert "Reseat mlx5_0" in f.action and "lspci -s 0000:1a:00.0 -vvv" in f.action


def test_hca_at_full_width_lower_speed_names_speed_cause_a_gpu_does_not():
    """An HCA keeps its trained speed: lower is a finding. A GPU at full width and lower speed is an
    idle GPU (NVIDIA GPUs lower the link speed while idle), not a finding."""
    slow = _pcie_sysfs(**{"0000:18:00.0": ("16 GT/s", "16"), "0000:1a:00.0": ("16 GT/s", "16")})
    found = d.analyse({"gpu04": gpu_path(pcie_sysfs=ok(slow))}, CTX)
    assert kinds(found) == [("pcie_downtrained", "mlx5_0")]
    assert "lower generation" in found[0].cause


def test_acs_redirect_between_gpu_and_nic():
    found = d.analyse({"gpu04": gpu_path(lspci=ok(_lspci(_ACS_ON)))}, CTX)
    assert kinds(found) == [("acs_redirect", "0000:17:02.0")]
    f = found[0]
    assert "NCCL timeout" in f.message and "bandwidth too low" in f.message
    assert "between GPU0-mlx5_0" in f.cause and "nccl#1737" in f.cause
    assert "Disable ACS" in f.action and "setpci -s 0000:17:02.0" in f.action


def test_translated_iommu_with_cmdline_as_evidence():
    found = d.analyse({"gpu04": gpu_path(iommu=ok(_iommu("DMA-FQ")))}, CTX)
    assert kinds(found) == [("iommu_translated", None)]
    f = found[0]
    assert "DMA-FQ" in f.cause and "GPU0, mlx5_0" in f.cause
    assert "/proc/cmdline: BOOT_IMAGE=/vmlinuz ro quiet" in f.evidence
    assert "iommu=pt" in f.action


def test_no_gpudirect_mechanism_and_dmabuf_is_enough():
    no_peermem = ok("Module                  Size  Used by\nnvidia              56840192  0\n")
    found = d.analyse({"gpu04": gpu_path(lsmod=no_peermem)}, CTX)
    assert kinds(found) == [("no_gpudirect", None)]
    assert "nvidia_peermem is not loaded" in found[0].cause and "gpudirect role" in found[0].action
    assert d.analyse({"gpu04": gpu_path(lsmod=no_peermem, modinfo_nvidia=ok("Dual MIT/GPL\n"))}, CTX) == []
    old = gpu_path(lsmod=no_peermem, modinfo_nvidia=ok("Dual MIT/GPL\n"), uname=ok("5.4.0-150-generic\n"))
    assert kinds(d.analyse({"gpu04": old}, CTX)) == [("no_gpudirect", None)]


def test_gpu_path_order_by_likelihood():
    raw = gpu_path(pcie_sysfs=ok(_pcie_sysfs(**{"0000:1a:00.0": ("16.0 GT/s PCIe", "8")})),
                   lspci=ok(_lspci(_ACS_ON)), iommu=ok(_iommu("DMA")),
                   lsmod=ok("Module                  Size  Used by\n"))
    assert [k for k, _ in kinds(d.analyse({"gpu04": raw}, CTX))] == [
        "pcie_downtrained", "acs_redirect", "iommu_translated", "no_gpudirect"]


def test_hca_address_from_the_sysfs_netdev_without_uevent():
    """No PCI_SLOT_NAME: mlx5_0's netdev ibp26s0 (sysfs evidence) names bus 0x1a."""
    raw = gpu_path(hca_pci=ok(""), lspci=ok(_lspci(_ACS_ON)))
    assert kinds(d.analyse({"gpu04": raw}, CTX)) == [("acs_redirect", "0000:17:02.0")]


def test_diagnose_playbook_collects_what_the_cli_collects():
    """playbooks/diagnose.yml takes its evidence commands from BASE_COMMANDS (its own copy lacked the
    PCIe and firmware probes) and writes the firmware/DKMS context the analysis reads."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    from fabricops import diagnose as diag

    book = yaml.safe_load((Path(__file__).resolve().parents[2] / "playbooks/diagnose.yml").read_text())
    play_vars = book[0]["vars"]
    out = subprocess.run([sys.executable, "-c", play_vars["diagnose_commands_py"]],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == diag.BASE_COMMANDS
    assert "fw_probe" in diag.BASE_COMMANDS and "lspci" in diag.BASE_COMMANDS
    context = book[1]["tasks"][0]["ansible.builtin.copy"]["content"]
    for key in ("nic_firmware_presets", "nic_firmware_config", "nic_firmware_device_config",
                "nic_firmware_versions", "mlnx_ofed_install_method", "mlnx_ofed_dkms_kernels"):
        assert f"'{key}'" in context, key
