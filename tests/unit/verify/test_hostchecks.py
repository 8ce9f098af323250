"""Host and GPU checks on emulated outputs (the lab's tools in-process) and real captures."""
# ruff: noqa: F811  -- the fixtures are imported from verify_emu and used as arguments

from __future__ import annotations

import json

import pytest
from captures import read_fixture
from verify_emu import SWITCH_LAYERS, collect, emu, hostvars  # noqa: F401

from fabricops.verify import firmware, hostchecks
from fabricops.verify.expect import PortExpect, host_expect, ofed_version
from fabricops.verify.result import ERROR, FAIL, PASS, SKIP

# The in-process emulated host has no lspci, PCIe sysfs, IOMMU groups or modinfo until the lab's
# The PCIe checks (issue 19) run on the emulated host here too; their own tests are in test_pcie.py.
PCIE_CHECKS = ("pcie_link", "pcie_acs", "iommu", "gpudirect_mechanism")


def _expect(hostvars, **kw):
    return host_expect("gpu03", hostvars, switch_link_layers=SWITCH_LAYERS, **kw)


def _by(results, check):
    return [r for r in results if r.check == check]


def _failed(results):
    return [r for r in results if not r.ok]


def test_healthy_host_passes_every_hardware_check(emu, hostvars, collect):
    exp = _expect(hostvars, skip=["roce_qos"])
    res = hostchecks.evaluate(exp, collect(exp))
    assert _failed(res) == []
    assert {r.check for r in res if r.status == PASS} == {
        "ofed_version",
        "hca_port",
        "error_counters",
        "gpu_count",
        "gpu_model",
        "nvlink",
        "gpu_topology",
        "nic_gpu_affinity",
        "subnet_manager",
        "fabric_manager",
        "gpudirect",
        *(set(PCIE_CHECKS) - exp.skip),  # the four PCIe / GPUDirect checks
    }
    ports = {r.device: r for r in _by(res, "hca_port")}
    assert set(ports) == {"mlx5_0/1", "mlx5_1/1", "mlx5_2/1", "mlx5_3/1"}
    assert ports["mlx5_0/1"].measured == 400 and ports["mlx5_0/1"].details["width"] == "4X"
    assert len(_by(res, "nvlink")) == 8
    assert [r.device for r in _by(res, "nic_gpu_affinity")] == ["mlx5_0", "mlx5_1"]  # compute rails only


def test_port_down_fails_hca_port_naming_host_device_cause(emu, hostvars, collect):
    p = emu.port("mlx5_0")
    p.update(state="DOWN", phys_state="Disabled", rate_gbps=10, speed="SDR", lid=0, sm_lid=0)
    emu.sync()
    exp = _expect(hostvars, skip=["roce_qos"])
    bad = _failed(hostchecks.evaluate(exp, collect(exp)))
    assert [(r.check, r.device) for r in bad] == [("hca_port", "mlx5_0/1")]
    assert bad[0].status == FAIL
    assert "gpu03 mlx5_0/1 (ibp26s0): state Down, physical state Disabled" in bad[0].message
    assert bad[0].cause.startswith("link down")


def test_port_width_2x_fails_with_width_cause(emu, hostvars, collect):
    emu.port("mlx5_1").update(width="2X", rate_gbps=200)
    emu.sync()
    exp = _expect(hostvars, skip=["roce_qos"])
    bad = _failed(hostchecks.evaluate(exp, collect(exp)))
    assert [(r.check, r.device) for r in bad] == [("hca_port", "mlx5_1/1")]
    assert bad[0].measured == 200 and bad[0].threshold == 400
    assert "width 2X, expected 4X" in bad[0].message
    assert "trained at 2X instead of 4X" in bad[0].cause


def test_lower_speed_is_named(emu, hostvars, collect):
    emu.port("mlx5_0").update(speed="HDR", rate_gbps=200)
    emu.sync()
    exp = _expect(hostvars, skip=["roce_qos"])
    bad = _failed(hostchecks.evaluate(exp, collect(exp)))
    assert [r.device for r in bad] == ["mlx5_0/1"]
    assert "negotiated HDR instead of NDR" in bad[0].cause


def test_flapping_counters_fail_and_baseline_counts_increase(emu, hostvars, collect):
    emu.port("mlx5_0").update(link_flaps=8, symbol_errors=500)
    emu.sync()
    exp = _expect(hostvars, skip=["roce_qos"])
    bad = _failed(hostchecks.evaluate(exp, collect(exp)))
    assert [(r.check, r.device) for r in bad] == [("error_counters", "mlx5_0/1")]
    assert bad[0].measured == {"SymbolErrorCounter": 500, "LinkDownedCounter": 8}
    assert bad[0].details["flapping"] is True
    assert "flapping" in bad[0].cause
    # the same counters as a baseline: no increase, pass
    base = {"mlx5_0/1": {"SymbolErrorCounter": 500, "LinkDownedCounter": 8}}
    exp2 = _expect(hostvars, skip=["roce_qos"], counter_baseline=base)
    res = _by(hostchecks.evaluate(exp2, collect(exp2)), "error_counters")
    assert all(r.status == PASS for r in res)
    assert res[0].measured == {"SymbolErrorCounter": 0, "LinkDownedCounter": 0}


def test_nvlink_inactive_fails_nvlink_and_topology(emu, hostvars, collect):
    emu.hw["gpus"][2]["inactive_nvlinks"] = [5]
    emu.sync()
    exp = _expect(hostvars, skip=["roce_qos"])
    bad = _failed(hostchecks.evaluate(exp, collect(exp)))
    assert {(r.check, r.device) for r in bad} == {("nvlink", "GPU2"), ("gpu_topology", None)}
    nv = _by(bad, "nvlink")[0]
    assert "link(s) 5 inactive" in nv.message and nv.measured == 17 and nv.threshold == 18
    topo = _by(bad, "gpu_topology")[0]
    assert "GPU0-GPU2 NV17" in topo.message


def test_gpu_missing_fails_count(emu, hostvars, collect):
    del emu.hw["gpus"][5]
    emu.sync()
    exp = _expect(hostvars, skip=["roce_qos"])
    bad = _failed(hostchecks.evaluate(exp, collect(exp)))
    assert [(r.check, r.measured, r.threshold) for r in bad] == [("gpu_count", 7, 8)]
    assert bad[0].message == "gpu03: 7 GPUs, expected 8"
    assert "Xid 79" in bad[0].cause


def test_wrong_ofed_fails_version(emu, hostvars, collect):
    (emu.root / "usr/share/emulated-ofed/release").write_text("MLNX_OFED_LINUX-23.10-1.1.9.0\n")
    exp = _expect(hostvars, skip=["roce_qos"])
    bad = _failed(hostchecks.evaluate(exp, collect(exp)))
    assert [(r.check, r.measured, r.threshold) for r in bad] == [
        ("ofed_version", "23.10-1.1.9.0", "24.10-1.1.4.0")
    ]
    assert "pinned 24.10-1.1.4.0 (mlnx_ofed_version)" in bad[0].message


def test_ofed_missing_fails_closed(tmp_path, monkeypatch, hostvars):
    from verify_emu import EmuHost

    monkeypatch.setenv("EMUL_ROOT", str(tmp_path))
    emu = EmuHost(tmp_path, ofed=None)
    exp = _expect(
        hostvars,
        skip=["roce_qos"],
    )
    raw = {k: emu.run("gpu03", c) for k, c in hostchecks.commands(exp).items()}
    res = hostchecks.evaluate(exp, raw)
    ofed = _by(res, "ofed_version")[0]
    assert ofed.status == FAIL and "not installed" in ofed.message
    counters = _by(res, "error_counters")
    assert counters and all(r.status == ERROR for r in counters)


def test_no_data_is_an_error_never_a_pass(hostvars):
    exp = _expect(hostvars)
    res = hostchecks.evaluate(exp, {})
    assert res and not any(r.status == PASS for r in res)
    assert {r.status for r in res} <= {ERROR, SKIP}
    assert any(r.check == "gpu_count" and r.status == ERROR and "not run" in r.message for r in res)


def test_no_pinned_ofed_version_is_an_error(emu, collect, hostvars):
    hv = dict(hostvars)
    del hv["mlnx_ofed_version"]
    exp = _expect(hv, skip=["roce_qos"])
    r = _by(hostchecks.evaluate(exp, collect(exp)), "ofed_version")[0]
    assert r.status == ERROR and "no pinned MLNX_OFED version" in r.message


def test_ofed_version_variable_order():
    # the lab's mirror description is not a pin: only the role's variable (or verify's own) counts
    assert ofed_version({"fabricops_ofed": {"default_version": "23.10-1.1.9.0"}}) == (None, None)
    assert ofed_version(
        {"mlnx_ofed_version": "24.10-1.1.4.0", "fabricops_ofed": {"default_version": "23.10-1.1.9.0"}}
    ) == ("24.10-1.1.4.0", "mlnx_ofed_version")
    assert ofed_version(
        {
            "fabricops_verify_ofed_version_var": "site.ofed",
            "site": {"ofed": "MLNX_OFED_LINUX-5.8"},
            "mlnx_ofed_version": "x",
        }
    ) == ("5.8", "site.ofed")
    assert ofed_version({}, "24.10-1.1.4.0") == ("24.10-1.1.4.0", "--ofed-version")
    assert ofed_version({}) == (None, None)


def test_roce_qos_unconfigured_fails_per_knob(emu, hostvars, collect):
    exp = _expect(hostvars)
    res = _by(hostchecks.evaluate(exp, collect(exp)), "roce_qos")
    assert [r.device for r in res] == ["enp170s0f0np0", "enp170s0f1np1"]
    r = res[0]
    assert r.status == FAIL
    assert (
        "trust is pcp, want dscp" in r.message and "pfc is 0,0,0,0,0,0,0,0, want 0,0,0,1,0,0,0,0" in r.message
    )
    assert "traffic_class is unset, want 106" in r.message


def test_roce_qos_configured_passes(emu, hostvars, collect):
    nd = "enp170s0f0np0"
    for argv in (
        ["mlnx_qos", "-i", nd, "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0"],
        ["mlnx_qos", "-i", nd, "--dscp2prio", "set,26,3"],
        ["mlnx_qos", "-i", nd, "--dscp2prio", "set,48,6"],
        ["cma_roce_tos", "-d", "mlx5_2", "-p", "1", "-t", "106"],
        ["cma_roce_mode", "-d", "mlx5_2", "-p", "1", "-m", "2"],
    ):
        assert emu.run("gpu03", " ".join(argv))["rc"] == 0
    for prio in range(8):
        for point in ("np", "rp"):
            (emu.root / f"sys/class/net/{nd}/ecn/roce_{point}/enable/{prio}").write_text("1\n")
    (emu.root / "sys/class/infiniband/mlx5_2/tc/1/traffic_class").write_text("106\n")
    (emu.root / f"sys/class/net/{nd}/ecn/roce_np/cnp_dscp").write_text("48\n")
    (emu.root / f"sys/class/net/{nd}/ecn/roce_np/cnp_802p_prio").write_text("6\n")
    exp = _expect(hostvars)
    res = {r.device: r for r in _by(hostchecks.evaluate(exp, collect(exp)), "roce_qos")}
    assert res[nd].status == PASS, res[nd].message
    assert res["enp170s0f1np1"].status == FAIL


def _configure_roce(emu, nd="enp170s0f0np0"):
    """What the roce_host role applies for the default definition (priority 3, DSCP 26)."""
    for argv in (
        ["mlnx_qos", "-i", nd, "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0"],
        ["mlnx_qos", "-i", nd, "--dscp2prio", "set,26,3"],
        ["mlnx_qos", "-i", nd, "--dscp2prio", "set,48,6"],
        ["cma_roce_tos", "-d", "mlx5_2", "-p", "1", "-t", "106"],
        ["cma_roce_mode", "-d", "mlx5_2", "-p", "1", "-m", "2"],
    ):
        assert emu.run("gpu03", " ".join(argv))["rc"] == 0
    for prio in range(8):
        for point in ("np", "rp"):
            (emu.root / f"sys/class/net/{nd}/ecn/roce_{point}/enable/{prio}").write_text("1\n")
    (emu.root / "sys/class/infiniband/mlx5_2/tc/1/traffic_class").write_text("106\n")
    (emu.root / f"sys/class/net/{nd}/ecn/roce_np/cnp_dscp").write_text("48\n")
    (emu.root / f"sys/class/net/{nd}/ecn/roce_np/cnp_802p_prio").write_text("6\n")
    return nd


def test_roce_qos_checks_the_roce_host_roce_override(emu, hostvars, collect):
    """What is verified is what the roce_host role applied: roce_host_roce over fabricops_roce."""
    nd = _configure_roce(emu)  # the host holds priority 3 / DSCP 26
    exp = _expect(dict(hostvars, roce_host_roce={"lossless_priority": 4, "dscp": 34}))
    assert exp.roce == {"lossless_priority": 4, "dscp": 34} and exp.roce_source == "roce_host_roce"
    r = {r.device: r for r in _by(hostchecks.evaluate(exp, collect(exp)), "roce_qos")}[nd]
    assert r.status == FAIL and "pfc is 0,0,0,1,0,0,0,0, want 0,0,0,0,1,0,0,0" in r.message
    assert "traffic_class is 106, want 138" in r.message
    # the role's own default is no override: fabricops_roce is what it applied
    exp = _expect(dict(hostvars, roce_host_roce="{{ fabricops_roce | default({}) }}"))
    assert exp.roce_source == "fabricops_roce"
    r = {r.device: r for r in _by(hostchecks.evaluate(exp, collect(exp)), "roce_qos")}[nd]
    assert r.status == PASS, r.message
    # an override that is a template of the fabric-wide one is rendered as Ansible would
    template = "{{ fabricops_roce | combine({'dscp': 34, 'lossless_priority': 4}) }}"
    exp = _expect(dict(hostvars, roce_host_roce=template))
    assert exp.roce["lossless_priority"] == 4 and exp.roce["dscp"] == 34


def test_roce_host_roce_override_that_does_not_validate_is_an_error(emu, hostvars, collect):
    exp = _expect(dict(hostvars, roce_host_roce={"lossless_priority": 9}))
    r = _by(hostchecks.evaluate(exp, collect(exp)), "roce_qos")[0]
    assert r.status == ERROR and "roce_host_roce does not validate" in r.message
    assert "roce_host_roce.lossless_priority is 9" in r.message and r.cause.startswith("fix roce_host_roce")


def test_roce_definition_that_does_not_validate_is_an_error(emu, hostvars, collect):
    hv = dict(hostvars, fabricops_roce={"dscp": 26, "tos": 106})  # "tos" is not a key of the definition
    exp = _expect(hv)
    r = _by(hostchecks.evaluate(exp, collect(exp)), "roce_qos")[0]
    assert r.status == ERROR and "fabricops_roce does not validate" in r.message


def test_nccl_profile_consistency(emu, hostvars, collect):
    hv = dict(hostvars, nccl_profile_name="ib")
    exp = _expect(hv, skip=["roce_qos"])
    r = _by(hostchecks.evaluate(exp, collect(exp)), "nccl_profile")[0]
    assert r.status == FAIL and "is missing" in r.message
    (emu.root / "etc").mkdir()
    (emu.root / "etc/nccl.conf").write_text("NCCL_IB_DISABLE=0\nNCCL_IB_HCA==mlx5_0:1,mlx5_1:1\n")
    r = _by(hostchecks.evaluate(exp, collect(exp)), "nccl_profile")[0]
    assert r.status == PASS
    emu.port("mlx5_1").update(state="DOWN", phys_state="Disabled")
    emu.sync()
    r = _by(hostchecks.evaluate(exp, collect(exp)), "nccl_profile")[0]
    assert r.status == FAIL and "not up: mlx5_1:1" in r.message


def test_not_planned_checks_are_skipped_not_passed(emu, hostvars, collect):
    hv = dict(hostvars, fabricops_site_gpudirect="false")
    del hv["fabricops_roce"]
    del hv["subnet_manager_mode"]
    exp = _expect(hv)
    assert not {"sminfo", "lsmod"} & set(hostchecks.commands(exp))
    res = hostchecks.evaluate(exp, collect(exp))
    assert {r.check for r in res if r.status == SKIP} == {
        "roce_qos", "nccl_profile", "ipoib", "subnet_manager", "gpudirect",
        *({"gpudirect_mechanism"} - exp.skip), *firmware.FW_CHECKS}  # no nic_firmware_*, not DKMS
    assert "no subnet_manager_mode in the inventory" in _by(res, "subnet_manager")[0].message


def test_real_ibstat_capture_down_port_is_flagged():
    text = read_fixture("ibstat", "h100_cx7_ib_cx6dx_eth_down.txt")
    from fabricops.parsers import parse

    rec = parse("ibstat", text)
    cas = [(ca.name, p.port, p.state, p.link_layer) for ca in rec.cas for p in ca.ports]
    ports = [PortExpect(name, port, None, layer) for name, port, _s, layer in cas]
    hv = {"fabricops_hardware_profile": "hgx-h100-ndr"}
    exp = host_expect("h1", hv)
    exp.ports = ports
    res = hostchecks.evaluate(exp, {"ibstat": {"rc": 0, "stdout": text}}, only="hosts")
    port_res = {r.device: r for r in _by(res, "hca_port")}
    for name, port, state, _layer in cas:
        r = port_res[f"{name}/{port}"]
        if state != "Active":
            assert r.status == FAIL and f"state {state}" in r.message
    assert any(r.status == FAIL for r in port_res.values())


def test_missing_profile_is_refused():
    from fabricops.model.profiles import ProfileError

    with pytest.raises(ProfileError, match="fabricops_hardware_profile"):
        host_expect("h1", {})


# --- fabric services: subnet manager, fabric manager, GPUDirect RDMA ---------------------------


def test_switch_run_sm_passes_as_master(emu, hostvars, collect):
    exp = _expect(hostvars, skip=["roce_qos"])
    assert hostchecks.commands(exp)["sminfo"] == "sminfo"
    r = _by(hostchecks.evaluate(exp, collect(exp)), "subnet_manager")[0]
    assert r.status == PASS and r.measured["state"] == "SMINFO_MASTER" and r.measured["lid"] == 1
    assert r.measured["priority"] == 15 and "(SM on the switch)" in r.message


def test_no_sm_fails_subnet_manager_and_ports_stay_init(emu, hostvars, collect):
    emu.hw["subnet_manager"] = "hosts"  # OpenSM planned on hosts, none running
    emu.sync()
    hv = dict(hostvars, subnet_manager_mode="hosts", subnet_manager_hosts={"gpu01": 15, "gpu02": 14})
    exp = _expect(hv, skip=["roce_qos"])
    res = hostchecks.evaluate(exp, collect(exp))
    sm = _by(res, "subnet_manager")[0]
    assert sm.status == FAIL and "no subnet manager answers" in sm.message
    assert sm.cause.startswith("no subnet manager answers on the subnet")
    ports = {r.device: r for r in _by(res, "hca_port")}
    assert ports["mlx5_0/1"].status == FAIL and "state Initializing" in ports["mlx5_0/1"].message
    assert ports["mlx5_0/1"].cause.startswith("port is up but not activated")
    assert ports["mlx5_2/1"].status == PASS  # RoCE ports have no SM


def test_sm_of_another_priority_than_the_plan_fails(hostvars):
    hv = dict(hostvars, subnet_manager_mode="hosts", subnet_manager_hosts={"gpu01": 15, "gpu02": 14})
    exp = _expect(hv)
    # a real capture: the master SM of an Oracle BDA rack, priority 14
    raw = {"sminfo": {"rc": 0, "stdout": read_fixture("sminfo", "oracle-bda-switch-sm.txt")}}
    r = _by(hostchecks.evaluate(exp, raw, only="hosts"), "subnet_manager")[0]
    assert r.status == FAIL and "master priority 14, the plan's master has 15" in r.message
    assert r.measured == {"state": "SMINFO_MASTER", "priority": 14, "lid": 15, "guid": "0x0010e0406d5aa0a0"}
    assert "another SM than the planned master" in r.cause
    # switch mode takes any master; a standby answering is not enough
    exp = _expect(hostvars)
    assert _by(hostchecks.evaluate(exp, raw, only="hosts"), "subnet_manager")[0].status == PASS
    standby = ("sminfo: sm lid 3 sm guid 0xb83fd20300a00100, activity count 12 priority 14 state 2 "
               "SMINFO_STANDBY\n")
    raw = {"sminfo": {"rc": 0, "stdout": standby}}
    r = _by(hostchecks.evaluate(exp, raw, only="hosts"), "subnet_manager")[0]
    assert r.status == FAIL and "state 2 SMINFO_STANDBY, not SMINFO_MASTER" in r.message
    # sminfo not installed: an error, never a pass
    missing = {"sminfo": {"rc": 127, "stdout": "", "stderr": "sh: 1: sminfo: not found"}}
    r = _by(hostchecks.evaluate(exp, missing, only="hosts"), "subnet_manager")[0]
    assert r.status == ERROR and "sminfo: not found" in r.message


def test_fabric_manager_state_from_nvidia_smi_q(emu, hostvars, collect):
    exp = _expect(hostvars, skip=["roce_qos"])
    assert hostchecks.commands(exp)["nvidia_q"] == "nvidia-smi -q"
    r = _by(hostchecks.evaluate(exp, collect(exp)), "fabric_manager")[0]
    assert r.status == PASS
    assert "8 GPUs Fabric State Completed, Status Success (driver 550.54.15)" in r.message
    # the host requires a fabric manager and none runs: every GPU Not Started
    emu.hw["fabric_manager"] = {"required": True}
    emu.sync()
    r = _by(hostchecks.evaluate(exp, collect(exp)), "fabric_manager")[0]
    assert r.status == FAIL and r.measured == 8
    assert "GPU 00000000:18:00.0: Fabric State Not Started, Status N/A" in r.message
    assert r.message.endswith("(+4 more)")
    assert "nvidia-fabricmanager is not running" in r.cause
    # a fabric manager at the driver's version runs: Completed again
    state = emu.root / "run/emulated-hw/fabricmanager.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text('{"pid": 0, "version": "550.54.15"}')
    assert _by(hostchecks.evaluate(exp, collect(exp)), "fabric_manager")[0].status == PASS
    # the driver moved on (fault driver-version): the running fabric manager no longer matches
    emu.hw["driver_version"] = "550.90.07"
    emu.sync()
    assert _by(hostchecks.evaluate(exp, collect(exp)), "fabric_manager")[0].status == FAIL


def test_fabric_manager_skipped_without_nvswitch(hostvars):
    exp = host_expect("h1", dict(hostvars, fabricops_hardware_profile="edr-100"))
    assert "nvidia_q" not in hostchecks.commands(exp)
    r = _by(hostchecks.evaluate(exp, {}, only="gpus"), "fabric_manager")[0]
    assert r.status == SKIP and "not an NVSwitch system (profile GPU topology direct)" in r.message
    # real captures on an NVSwitch profile: an A100 (driver 525) prints no fabric state -> skipped with
    # the reason; an H100 SXM (driver 560) reports Completed / Success -> pass
    exp = _expect(hostvars)
    a100 = {"nvidia_q": {"rc": 0, "stdout": read_fixture("nvidia-smi-q", "a100_sxm4_80gb_q_i0_525.txt")}}
    r = _by(hostchecks.evaluate(exp, a100, only="gpus"), "fabric_manager")[0]
    assert r.status == SKIP and "reports no GPU fabric state (1 GPUs; only Hopper" in r.message
    h100 = {"nvidia_q": {"rc": 0, "stdout": read_fixture("nvidia-smi-q", "h100_80gb_hbm3_a_560.txt")}}
    r = _by(hostchecks.evaluate(exp, h100, only="gpus"), "fabric_manager")[0]
    assert r.status == PASS and "Completed, Status Success (driver 560.35.03)" in r.message


def test_gpudirect_needs_nvidia_peermem_loaded(emu, hostvars, collect):
    exp = _expect(hostvars, skip=["roce_qos"])
    r = _by(hostchecks.evaluate(exp, collect(exp)), "gpudirect")[0]
    assert r.status == PASS and r.device == "nvidia_peermem" and "loaded (GPUDirect RDMA usable)" in r.message
    # openibd stop unloads the RDMA stack and nvidia_peermem with it; start does not bring it back
    assert emu.run("gpu03", "openibd stop")["rc"] == 0
    assert emu.run("gpu03", "openibd start")["rc"] == 0
    r = _by(hostchecks.evaluate(exp, collect(exp)), "gpudirect")[0]
    assert r.status == FAIL and r.measured is False and "nvidia_peermem is not loaded" in r.message
    assert "run the gpudirect role" in r.cause
    assert emu.run("gpu03", "modprobe nvidia_peermem")["rc"] == 0
    assert _by(hostchecks.evaluate(exp, collect(exp)), "gpudirect")[0].status == PASS


def test_gpudirect_fails_closed_and_skips_where_not_applicable(hostvars):
    exp = _expect(hostvars)
    headless = {"lsmod": {"rc": 0, "stdout": "nvidia_peermem 16384 0\n"}}
    for raw, text in (({}, "`lsmod` failed: not run"), (headless, "lsmod output unreadable")):
        r = _by(hostchecks.evaluate(exp, raw, only="hosts"), "gpudirect")[0]
        assert r.status == ERROR and text in r.message
    no_ports = host_expect("h1", dict(hostvars, fabricops_cabling=[]))
    assert "lsmod" not in hostchecks.commands(no_ports)
    r = _by(hostchecks.evaluate(no_ports, {}, only="hosts"), "gpudirect")[0]
    assert r.status == SKIP and "needs GPUs and RDMA HCAs on one host" in r.message


# --- issue 19: the nccl_profile check follows the rules of fabricops.nccl ------------------------

ROCE_CONF = ("NCCL_CROSS_NIC=0\nNCCL_IB_DISABLE=0\nNCCL_IB_HCA==mlx5_2:1,mlx5_3:1\nNCCL_IB_TC=106\n"
             "NCCL_NET_PLUGIN=none\n")
LIBS = "/usr/lib/x86_64-linux-gnu/libnccl.so.2.23.4\n"


def _roce_nccl(emu, hostvars, collect, conf, libs=LIBS):
    hv = dict(hostvars, nccl_profile_name="roce")
    exp = _expect(hv, skip=["roce_qos"])
    (emu.root / "etc").mkdir(exist_ok=True)
    (emu.root / "etc/nccl.conf").write_text(conf)
    raw = collect(exp)
    assert "nccl_libs" in raw and "gids:mlx5_3/1" in raw  # read for the GID rule
    raw["nccl_libs"] = {"rc": 0, "stdout": libs, "stderr": ""}
    return _by(hostchecks.evaluate(exp, raw), "nccl_profile")[0], raw


def test_nccl_profile_roce_without_gid_index_passes_where_nccl_selects_it(emu, hostvars, collect):
    conf = ROCE_CONF + "NCCL_IB_ADDR_FAMILY=AF_INET\nNCCL_IB_ROCE_VERSION_NUM=2\n"
    r, _raw = _roce_nccl(emu, hostvars, collect, conf)
    assert r.status == PASS, r.message
    r, _raw = _roce_nccl(emu, hostvars, collect, conf, libs="/usr/lib64/libnccl.so.2.20.5\n")
    assert r.status == FAIL
    assert "NCCL_IB_GID_INDEX is not set but NCCL 2.20.5: NCCL selects the GID per HCA only from 2.21.5" \
        in r.message
    r, _raw = _roce_nccl(emu, hostvars, collect, conf, libs="")
    assert r.status == FAIL and "no libnccl.so.2.X.Y in /usr/lib/x86_64-linux-gnu" in r.message
    r, _raw = _roce_nccl(emu, hostvars, collect, conf.replace("AF_INET\n", "AF_INET6\n"))
    assert r.status == FAIL and "NCCL_IB_ADDR_FAMILY=AF_INET6 (want AF_INET)" in r.message


def _gid_table(hca, v2_index, ip_hex="cb00:7101"):
    """``grep -H`` of a port's GID table as sysfs shows it: link-local v1/v2 at 0/1, the IPv4 address
    as RoCE v1 at ``v2_index - 1`` and RoCE v2 at ``v2_index``."""
    base = f"/sys/class/infiniband/{hca}/ports/1"
    ll, v4 = "fe80:0000:0000:0000:b83f:d2ff:fea1:b2c2", f"0000:0000:0000:0000:0000:ffff:{ip_hex}"
    rows = [(0, ll, "IB/RoCE v1"), (1, ll, "RoCE v2"), (v2_index - 1, v4, "IB/RoCE v1"),
            (v2_index, v4, "RoCE v2")]
    lines = [f"{base}/gids/{i}:{g}" for i, g, _t in rows]
    lines += [f"{base}/gid_attrs/types/{i}:{t}" for i, _g, t in rows]
    return {"rc": 0, "stdout": "\n".join(lines) + "\n", "stderr": ""}


def test_nccl_profile_roce_gid_index_must_be_each_ports_index(emu, hostvars, collect):
    old = "/usr/lib64/libnccl.so.2.18.6\n"
    hv = dict(hostvars, nccl_profile_name="roce")
    exp = _expect(hv, skip=["roce_qos"])
    (emu.root / "etc").mkdir()

    def check(index, indexes=(3, 3)):
        (emu.root / "etc/nccl.conf").write_text(ROCE_CONF + f"NCCL_IB_GID_INDEX={index}\n")
        raw = collect(exp)
        raw["nccl_libs"] = {"rc": 0, "stdout": old, "stderr": ""}
        raw["gids:mlx5_2/1"] = _gid_table("mlx5_2", indexes[0])
        raw["gids:mlx5_3/1"] = _gid_table("mlx5_3", indexes[1], "cb00:7141")
        return _by(hostchecks.evaluate(exp, raw), "nccl_profile")[0]

    assert check(3).status == PASS, check(3).message
    r = check(3, (3, 7))
    assert r.status == FAIL and "NCCL_IB_GID_INDEX=3 but mlx5_3:1's IPv4 RoCE v2 GID is index 7" in r.message
    r = check(2)
    assert r.status == FAIL and "NCCL_IB_GID_INDEX=2 but mlx5_2:1's IPv4 RoCE v2 GID is index 3" in r.message


def test_nccl_profile_wants_cross_nic_on_a_rail_optimised_host(emu, hostvars, collect):
    conf = ROCE_CONF.replace("NCCL_CROSS_NIC=0\n", "") + "NCCL_IB_ADDR_FAMILY=AF_INET\n"
    r, _raw = _roce_nccl(emu, hostvars, collect, conf)
    assert r.status == FAIL
    assert ("NCCL_CROSS_NIC is not set on a rail-optimised (mlx5_2:1 on leaf-onyx, mlx5_3:1 on leaf-cumulus) "
            "host (want 0)") in r.message


def test_nccl_profile_ib_hca_follows_the_planned_rails(emu, hostvars, collect):
    """A port that is up but on no planned rail need not be listed; a planned one must."""
    cabling = [c for c in hostvars["fabricops_cabling"] if c["hca"] != "mlx5_1"]
    hv = dict(hostvars, nccl_profile_name="ib", fabricops_cabling=cabling)
    exp = _expect(hv, skip=["roce_qos"])
    (emu.root / "etc").mkdir()
    (emu.root / "etc/nccl.conf").write_text("NCCL_IB_DISABLE=0\nNCCL_IB_HCA==mlx5_0:1\n")
    r = _by(hostchecks.evaluate(exp, collect(exp)), "nccl_profile")[0]
    assert r.status == PASS, r.message
    exp = _expect(dict(hostvars, nccl_profile_name="ib"), skip=["roce_qos"])
    r = _by(hostchecks.evaluate(exp, collect(exp)), "nccl_profile")[0]
    assert r.status == FAIL and "ports of the planned rails up but not in NCCL_IB_HCA: mlx5_1:1" in r.message


DOCA_VARS = {"mlnx_ofed_install_method": "doca", "mlnx_ofed_doca_version": "3.1.0",
             "mlnx_ofed_doca_profile": "doca-ofed"}


def _doca_result(hostvars, collect, ofed_info: str, dpkg: str, dpkg_rc: int = 0):
    exp = _expect({**hostvars, **DOCA_VARS}, skip=["roce_qos"])
    cmds = hostchecks.commands(exp)
    assert "${db:Status-Abbrev}${Version}" in cmds["doca_profile"]
    assert cmds["doca_profile"].endswith("doca-ofed")
    raw = collect(exp)
    raw["ofed_info"] = {"rc": 0, "stdout": ofed_info, "stderr": ""}
    raw["doca_profile"] = {"rc": dpkg_rc, "stdout": dpkg, "stderr": ""}
    return _by(hostchecks.evaluate(exp, raw), "ofed_version")[0]


def test_doca_host_is_pinned_by_its_release_not_mlnx_ofed_version(emu, collect, hostvars):
    """mlnx_ofed_install_method doca: the pin is mlnx_ofed_doca_version on the profile package
    (the role does not read mlnx_ofed_version, which the inventory may still carry)."""
    assert hostvars.get("mlnx_ofed_version")
    r = _doca_result(hostvars, collect, "OFED-internal-25.07-0.9.7.0:\n", "hi 3.1.0-1\n")
    assert r.status == PASS and r.threshold == "3.1.0" and r.source == "mlnx_ofed_doca_version"
    assert "DOCA-Host 3.1.0 (doca-ofed 3.1.0-1, DOCA-OFED 25.07-0.9.7.0)" in r.message


@pytest.mark.parametrize(("ofed_info", "dpkg", "rc", "says"), [
    ("MLNX_OFED_LINUX-24.10-1.1.4.0:\n", "", 1,
     "standalone MLNX_OFED 24.10-1.1.4.0, declared DOCA-Host 3.1.0"),
    ("OFED-internal-24.10-1.1.4.0:\n", "hi 2.9.1-1\n", 0, "doca-ofed 2.9.1-1, declared 3.1.0"),
    ("OFED-internal-25.07-0.9.7.0:\n", "", 1, "doca-ofed is not installed"),
    # removed, its configuration files left
    ("OFED-internal-25.07-0.9.7.0:\n", "rc 3.1.0-1\n", 0, "doca-ofed is not installed"),
])
def test_doca_host_mismatch_fails_with_what_is_there(emu, collect, hostvars, ofed_info, dpkg, rc, says):
    r = _doca_result(hostvars, collect, ofed_info, dpkg, rc)
    assert r.status == FAIL and says in r.message, r.message
    assert "mlnx_ofed role" in r.cause


def test_doca_profile_release_match():
    from fabricops import doca

    assert doca.profile_is_release("3.1.0-1", "3.1.0")
    assert doca.profile_is_release("2.9.1-018000-24.10-ubuntu2204", "2.9.1")
    assert not doca.profile_is_release("2.9.10-1", "2.9.1")
    assert not doca.profile_is_release(None, "3.1.0") and not doca.profile_is_release("3.1.0-1", "")


def test_a_pulled_cable_is_one_fault_its_consequences_name_it(emu, hostvars, collect):
    """Issue 35: one cable pulled read as three failures with three remedies (hca_port, ipoib "run the
    ipoib role", nccl_profile "run the nccl_profile role"); the last two follow from the link."""
    hv = dict(hostvars, nccl_profile_name="ib", ipoib_plan={"networks": {"ibp26s0": "198.18.0.0/16"}},
              ipoib_host_index=3)
    exp = _expect(hv, skip=["roce_qos"])
    (emu.root / "etc").mkdir()
    (emu.root / "etc/nccl.conf").write_text("NCCL_IB_DISABLE=0\nNCCL_IB_HCA==mlx5_0:1,mlx5_1:1\n")
    emu.port("mlx5_0").update(state="DOWN", phys_state="Disabled")
    emu.sync()
    raw = collect(exp)
    # the IPoIB interface over the dead port: `ip -j addr` as the kernel shows it then (a real capture
    # with only its state changed), planned address and mode in place
    ib0 = json.loads(read_fixture("ip-addr", "factrs-ipoib-host.json"))[0]
    ib0.update(ifname="ibp26s0", operstate="LOWERLAYERDOWN", flags=["BROADCAST", "MULTICAST", "UP"], mtu=4092)
    ib0["addr_info"][0].update(local="198.18.0.3", prefixlen=16)
    raw["ipoib_addr:ibp26s0"] = {"rc": 0, "stdout": json.dumps([ib0]), "stderr": ""}
    raw["ipoib_mode:ibp26s0"] = {"rc": 0, "stdout": "datagram\n", "stderr": ""}
    bad = {r.check: r for r in _failed(hostchecks.evaluate(exp, raw))}
    assert set(bad) == {"hca_port", "ipoib", "nccl_profile"}
    assert bad["hca_port"].caused_by is None and bad["hca_port"].cause.startswith("link down")
    for check, role in (("ipoib", "ipoib"), ("nccl_profile", "nccl_profile")):
        r = bad[check]
        assert r.caused_by == "hca_port gpu03 mlx5_0/1", (check, r.message)
        assert r.cause.startswith("consequence of gpu03 mlx5_0/1 link down")
        assert f"the {role} role will not" in r.cause
        assert "fix gpu03 mlx5_0/1's link" in r.action
    # the same interface with a wrong address as well is a finding of its own: its remedy stays
    ib0["addr_info"][0].update(local="198.18.0.99")
    raw["ipoib_addr:ibp26s0"] = {"rc": 0, "stdout": json.dumps([ib0]), "stderr": ""}
    r = _by(hostchecks.evaluate(exp, raw), "ipoib")[0]
    assert r.status == FAIL and r.caused_by is None and r.cause == hostchecks.CAUSES["ipoib"]
