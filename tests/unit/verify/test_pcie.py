"""PCIe link, ACS, IOMMU and GPUDirect-mechanism checks (fabricops.verify.pcie) on host outputs.

The ``lspci -D -vvv`` texts below follow pciutils' own printf formats (lspci.c ``show_htype1`` for
``Bus: primary=..``, ls-caps.c ``cap_express_link`` for LnkCap/LnkSta with ``(downgraded)``,
``cap_acs`` for ``ACSCap:``/``ACSCtl:`` and ``Capabilities: <access denied>`` without root), laid
out as an HGX board is: per socket a root port, a PCIe switch (upstream + downstream ports), a GPU
and a ConnectX-7 under the same switch.
"""

from __future__ import annotations

import re

import pytest

from fabricops.verify import hostchecks, pcie
from fabricops.verify.expect import host_expect
from fabricops.verify.result import ERROR, FAIL, PASS, SKIP

# --- host outputs -------------------------------------------------------------------------------

_ACS_OFF = "SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
_ACS_ON = "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
_ACS_CAP = "SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+"


def _bridge(bdf, desc, ptype, prim, sec, sub, acs=None, sta=(32, 16)):
    text = (
        f"{bdf} PCI bridge: {desc} (prog-if 00 [Normal decode])\n"
        "\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR+ FastB2B- "
        "DisINTx+\n"
        "\tLatency: 0, Cache Line Size: 64 bytes\n"
        f"\tBus: primary={prim}, secondary={sec}, subordinate={sub}, sec-latency=0\n"
        f"\tCapabilities: [68] Express (v2) {ptype}{' (Slot+)' if ptype != 'Upstream Port' else ''}, MSI 00\n"
        "\t\tDevCap:\tMaxPayload 512 bytes, PhantFunc 0\n"
        "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported\n"
        "\t\t\tClockPM- Surprise+ LLActRep+ BwNot+ ASPMOptComp+\n"
        f"\t\tLnkSta:\tSpeed {sta[0]}GT/s{' (downgraded)' if sta[0] < 32 else ''}, "
        f"Width x{sta[1]}{' (downgraded)' if sta[1] < 16 else ''}\n"
        "\t\t\tTrErr- Train- SlotClk+ DLActive+ BWMgmt- ABWMgmt-\n"
    )
    if acs is not None:
        text += (
            f"\tCapabilities: [f24 v1] Access Control Services\n\t\tACSCap:\t{_ACS_CAP}\n\t\tACSCtl:\t{acs}\n"
        )
    return text + "\tKernel driver in use: pcieport\n\n"


def _endpoint(bdf, cls, desc, driver, sta=(32, 16)):
    return (
        f"{bdf} {cls}: {desc}\n"
        "\tSubsystem: NVIDIA Corporation Device 16c1\n"
        "\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- FastB2B- "
        "DisINTx+\n"
        "\tCapabilities: [60] Express (v2) Endpoint, MSI 00\n"
        "\t\tDevCap:\tMaxPayload 256 bytes, PhantFunc 0, Latency L0s unlimited, L1 <64us\n"
        "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported\n"
        f"\t\tLnkSta:\tSpeed {sta[0]}GT/s{' (downgraded)' if sta[0] < 32 else ''}, "
        f"Width x{sta[1]}{' (downgraded)' if sta[1] < 16 else ''}\n"
        f"\tKernel driver in use: {driver}\n\n"
    )


SWITCH = "Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)"
ROOT = "Intel Corporation Device 352a (rev 04)"
GPU = "NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)"
HCA = "Mellanox Technologies MT2910 Family [ConnectX-7]"


def lspci_text(acs=None, gpu0=(32, 16), hca0=(32, 16), denied=False):
    """Two sockets: 15:01.0 root -> 16:00.0 switch up -> 17:00.0 (GPU0 18:00.0), 17:02.0 (mlx5_0
    1a:00.0); and the same at 95/96/97 for GPU1 (98:00.0) and mlx5_1."""
    acs = acs or {}
    out = ""
    for base, gpu, hca, g, h in ((0x15, "18", "1a", gpu0, hca0), (0x95, "98", "9a", (32, 16), (32, 16))):
        r, u, d = f"{base:02x}", f"{base + 1:02x}", f"{base + 2:02x}"
        out += _bridge(f"0000:{r}:01.0", ROOT, "Root Port", r, u, hca)
        out += _bridge(f"0000:{u}:00.0", SWITCH, "Upstream Port", u, d, hca)
        for dev, child in (("00", gpu), ("02", hca)):
            bdf = f"0000:{d}:{dev}.0"
            out += _bridge(bdf, SWITCH, "Downstream Port", d, child, child, acs=acs.get(bdf, _ACS_OFF))
        out += _endpoint(f"0000:{gpu}:00.0", "3D controller", GPU, "nvidia", g)
        out += _endpoint(f"0000:{hca}:00.0", "Infiniband controller", HCA, "mlx5_core", h)
    if denied:
        out = re.sub(
            r"\tCapabilities: \[f24 v1\] Access Control Services\n\t\tACSCap:.*\n\t\tACSCtl:.*\n",
            "\tCapabilities: <access denied>\n",
            out,
        )
    return out


def sysfs_links(over=None):
    lines = []
    for b in ("0000:18:00.0", "0000:1a:00.0", "0000:98:00.0", "0000:9a:00.0"):
        cur = (over or {}).get(b, ("32.0 GT/s PCIe", "16"))
        lines += [
            f"/sys/bus/pci/devices/{b}/current_link_speed:{cur[0]}",
            f"/sys/bus/pci/devices/{b}/current_link_width:{cur[1]}",
            f"/sys/bus/pci/devices/{b}/max_link_speed:32.0 GT/s PCIe",
            f"/sys/bus/pci/devices/{b}/max_link_width:16",
        ]
    return "\n".join(lines) + "\n"


TOPO = """\
\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tPXB\tSYS\t0-55,112-167\t0\t\tN/A
GPU1\tNV18\t X \tSYS\tPXB\t56-111,168-223\t1\t\tN/A
NIC0\tPXB\tSYS\t X \tSYS\t\t\t\t
NIC1\tSYS\tPXB\tSYS\t X \t\t\t\t

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1

"""
QUERY = "index, name, uuid, pci.bus_id\n" + "".join(
    f"{i}, NVIDIA H100 80GB HBM3, GPU-{i:08x}-1111-2222-3333-444455556666, 00000000:{b}:00.0\n"
    for i, b in ((0, "18"), (1, "98"))
)
UEVENT = "".join(
    f"/sys/class/infiniband/{n}/device/uevent:{line}\n"
    for n, b in (("mlx5_0", "1a"), ("mlx5_1", "9a"))
    for line in (
        "DRIVER=mlx5_core",
        "PCI_CLASS=20700",
        "PCI_ID=15B3:1021",
        f"PCI_SLOT_NAME=0000:{b}:00.0",
        "MODALIAS=pci:v000015B3d00001021sv000015B3sd00000041bc02sc07i00",
    )
)


def iommu_text(kind="identity", off=False):
    if off:
        return ""
    groups = {
        "27": "0000:18:00.0",
        "29": "0000:1a:00.0",
        "80": "0000:98:00.0",
        "82": "0000:9a:00.0",
        "26": "0000:17:00.0",
    }
    out = [f"/sys/kernel/iommu_groups/{g}/type:{kind}" for g in groups]
    vendor = {"18": "0x10de", "98": "0x10de"}
    out += [
        f"/sys/kernel/iommu_groups/{g}/devices/{b}/vendor:{vendor.get(b[5:7], '0x15b3')}"
        for g, b in groups.items()
    ]
    return "\n".join(out) + "\n"


LSMOD = (
    "Module                  Size  Used by\n"
    "nvidia_peermem         16384  0\n"
    "nvidia              56840192  9 nvidia_peermem\n"
)
LSMOD_NO_PEERMEM = "Module                  Size  Used by\nnvidia              56840192  9\n"
CMDLINE = "BOOT_IMAGE=/vmlinuz-6.5.0-35-generic root=UUID=0c1e ro intel_iommu=on iommu=pt\n"


def ok(stdout):
    return {"rc": 0, "stdout": stdout, "stderr": ""}


def raw(**over):
    base = {
        "nvidia_query": ok(QUERY),
        "topo": ok(TOPO),
        "hca_pci": ok(UEVENT),
        "lspci": ok(lspci_text()),
        "pcie_sysfs": ok(sysfs_links()),
        "iommu": ok(iommu_text()),
        "cmdline": ok(CMDLINE),
        "lsmod": ok(LSMOD),
        "uname": ok("6.5.0-35-generic\n"),
        "modinfo_nvidia": ok("NVIDIA\n"),
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


OTHER_GPU_CHECKS = ["gpu_count", "gpu_model", "nvlink", "gpu_topology", "nic_gpu_affinity", "fabric_manager"]


@pytest.fixture
def expect():
    hv = {
        "fabricops_hardware_profile": "hgx-h100-ndr",
        "mlnx_ofed_version": "24.10-1.1.4.0",
        "fabricops_verify_ports": [
            {"hca": "mlx5_0", "port": 1, "link_layer": "InfiniBand"},
            {"hca": "mlx5_1", "port": 1, "link_layer": "InfiniBand"},
        ],
    }
    return host_expect("gpu01", hv, skip=OTHER_GPU_CHECKS)


def run(expect, r):
    return hostchecks.evaluate(expect, r, only="gpus")


def by(results, check):
    return [x for x in results if x.check == check]


# --- commands -----------------------------------------------------------------------------------


def test_commands_read_lspci_sysfs_iommu_and_modules(expect):
    cmds = hostchecks.commands(expect, only="gpus")
    assert cmds["lspci"] == "lspci -D -vvv"
    assert "/sys/bus/pci/devices/*/current_link_width" in cmds["pcie_sysfs"]
    assert "/sys/bus/pci/devices/*/max_link_speed" in cmds["pcie_sysfs"]
    assert "/sys/class/infiniband/*/device/uevent" in cmds["hca_pci"]
    assert "/sys/kernel/iommu_groups/*/type" in cmds["iommu"]
    assert cmds["cmdline"] == "cat /proc/cmdline"
    assert cmds["modinfo_nvidia"] == "modinfo -F license nvidia" and cmds["uname"] == "uname -r"
    assert {"nvidia_query", "topo", "lsmod"} <= set(cmds)
    skipped = host_expect(
        expect.host,
        {"fabricops_hardware_profile": "hgx-h100-ndr"},
        skip=[*OTHER_GPU_CHECKS, *pcie.PCIE_CHECKS],
    )
    assert not {"lspci", "pcie_sysfs", "iommu", "modinfo_nvidia"} & set(hostchecks.commands(skipped, "gpus"))


def test_healthy_host_passes_every_pcie_check(expect):
    res = run(expect, raw())
    assert [x for x in res if not x.ok] == []
    links = {x.device: x for x in by(res, "pcie_link")}
    assert set(links) == {"GPU0", "GPU1", "mlx5_0", "mlx5_1"}
    assert links["mlx5_0"].measured == {"speed_gts": 32.0, "width": 16}
    assert links["mlx5_0"].threshold == {"speed_gts": 32.0, "width": 16}
    acs = {x.device: x for x in by(res, "pcie_acs")}
    # GPU0 <-> mlx5_0: both downstream ports and the switch's upstream port (the common ancestor)
    assert set(acs) == {
        "0000:17:00.0",
        "0000:16:00.0",
        "0000:17:02.0",
        "0000:97:00.0",
        "0000:96:00.0",
        "0000:97:02.0",
    }
    assert "GPU0 (0000:18:00.0) and mlx5_0 (0000:1a:00.0)" in acs["0000:17:02.0"].message
    assert by(res, "iommu")[0].status == PASS and "identity" in by(res, "iommu")[0].message
    mech = by(res, "gpudirect_mechanism")[0]
    assert mech.status == PASS and mech.measured == ["peermem"]


def test_downtrained_hca_fails_pcie_link_naming_device_width_and_cause(expect):
    r = raw(
        pcie_sysfs=ok(sysfs_links({"0000:1a:00.0": ("16.0 GT/s PCIe", "8")})),
        lspci=ok(lspci_text(hca0=(16, 8))),
    )
    bad = [x for x in run(expect, r) if not x.ok]
    assert [(x.check, x.device, x.status) for x in bad] == [("pcie_link", "mlx5_0", FAIL)]
    f = bad[0]
    assert f.host == "gpu01"
    assert "gpu01 mlx5_0 (0000:1a:00.0): PCIe width x8 of x16; speed 16 of 32 GT/s" in f.message
    assert "lspci LnkSta 16 GT/s x8 of LnkCap 32 GT/s x16" in f.message
    assert f.measured == {"speed_gts": 16.0, "width": 8} and f.threshold == {"speed_gts": 32.0, "width": 16}
    assert f.op == "==" and "trained at PCIe x8 instead of x16" in f.cause


def test_speed_only_downgrade_and_older_kernel_format(expect):
    """An HCA's speed is judged (a NIC keeps its trained speed); a GPU's is not, because NVIDIA GPUs
    lower it while idle (nvidia-smi pcie.link.gen.current) - only its width counts."""
    slow = {"0000:18:00.0": ("16 GT/s", "16"), "0000:1a:00.0": ("16 GT/s", "16")}
    r = raw(pcie_sysfs=ok(sysfs_links(slow)))
    res = run(expect, r)
    bad = [x for x in res if not x.ok]
    assert [(x.check, x.device) for x in bad] == [("pcie_link", "mlx5_0")]
    assert "speed 16 of 32 GT/s" in bad[0].message and "16 GT/s instead of 32 GT/s" in bad[0].cause
    gpu0 = next(x for x in by(res, "pcie_link") if x.device == "GPU0")
    assert gpu0.status == PASS and "speed 16 of 32 GT/s not judged (GPUs lower it while idle)" in gpu0.message
    # the same GPU at half width fails: width does not change with load
    r = raw(pcie_sysfs=ok(sysfs_links({"0000:18:00.0": ("16 GT/s", "8")})))
    bad = [x for x in run(expect, r) if not x.ok]
    assert [(x.check, x.device) for x in bad] == [("pcie_link", "GPU0")]
    assert "width x8 of x16" in bad[0].message


def test_no_link_and_missing_sysfs_entry(expect):
    text = sysfs_links({"0000:98:00.0": ("Unknown", "0")})
    text = "\n".join(x for x in text.splitlines() if "0000:9a:00.0" not in x) + "\n"
    res = {x.device: x for x in by(run(expect, raw(pcie_sysfs=ok(text))), "pcie_link")}
    assert res["GPU1"].status == FAIL and "no link" in res["GPU1"].message
    assert res["mlx5_1"].status == ERROR and "no sysfs current_link_*/max_link_*" in res["mlx5_1"].message
    assert res["GPU0"].status == PASS


def test_lspci_downgraded_confirms_when_sysfs_looks_full(expect):
    bad = [x for x in run(expect, raw(lspci=ok(lspci_text(gpu0=(32, 8))))) if not x.ok]
    assert [(x.check, x.device) for x in bad] == [("pcie_link", "GPU0")]
    assert "lspci LnkSta below LnkCap" in bad[0].message


def test_hca_without_pci_address_is_an_error(expect):
    text = "".join(x + "\n" for x in UEVENT.splitlines() if "mlx5_1" not in x)
    res = [x for x in run(expect, raw(hca_pci=ok(text))) if not x.ok]
    assert {(x.check, x.device, x.status) for x in res} == {
        ("pcie_link", "mlx5_1", ERROR),
        ("pcie_acs", "mlx5_1", ERROR),
        ("iommu", "mlx5_1", ERROR),
        ("pcie_acs", None, ERROR),
    }


def test_acs_redirect_fails_on_the_bridge_between_gpu_and_nic(expect):
    r = raw(lspci=ok(lspci_text(acs={"0000:17:02.0": _ACS_ON})))
    bad = [x for x in run(expect, r) if not x.ok]
    assert [(x.check, x.device, x.status) for x in bad] == [("pcie_acs", "0000:17:02.0", FAIL)]
    f = bad[0]
    assert "gpu01 bridge 0000:17:02.0 between GPU0 (0000:18:00.0) and mlx5_0 (0000:1a:00.0)" in f.message
    assert "ReqRedir+ CmpltRedir+" in f.message and f.measured == ["ReqRedir", "CmpltRedir"]
    assert "root complex" in f.cause and "nccl#1737" in f.source and "Access Control Services" in f.source


def test_srcvalid_and_directtrans_alone_do_not_redirect(expect):
    harmless = "SrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans+"
    res = run(expect, raw(lspci=ok(lspci_text(acs={"0000:17:00.0": harmless}))))
    assert [x for x in res if not x.ok] == []


def test_acs_on_a_port_off_the_gpu_nic_path_is_not_judged(expect):
    text = lspci_text() + _bridge("0000:17:04.0", SWITCH, "Downstream Port", "17", "1c", "1c", acs=_ACS_ON)
    res = run(expect, raw(lspci=ok(text)))
    assert "0000:17:04.0" not in {x.device for x in by(res, "pcie_acs")}
    assert [x for x in res if not x.ok] == []


def test_acs_without_root_is_an_error_naming_become(expect):
    res = by(run(expect, raw(lspci=ok(lspci_text(denied=True)))), "pcie_acs")
    assert [(x.device, x.status) for x in res] == [(None, ERROR)]
    assert "access denied" in res[0].message and "become (root)" in res[0].message
    assert "run verify with become" in res[0].cause


def test_lspci_missing_or_not_lspci_fails_closed(expect):
    for lsp, text in (
        ({"rc": 127, "stdout": "", "stderr": "sh: 1: lspci: not found"}, "lspci: not found"),
        (ok("hello\n"), "input is not lspci output"),
    ):
        res = by(run(expect, raw(lspci=lsp)), "pcie_acs")
        assert [x.status for x in res] == [ERROR] and text in res[0].message
    res = by(run(expect, raw(lspci=None)), "pcie_acs")
    assert res[0].status == ERROR and "not run" in res[0].message


def test_iommu_translated_fails_with_iommu_pt_remedy_and_cmdline_context(expect):
    r = raw(iommu=ok(iommu_text("DMA-FQ")), cmdline=ok("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro\n"))
    bad = [x for x in run(expect, r) if not x.ok]
    assert [(x.check, x.status) for x in bad] == [("iommu", FAIL)]
    f = bad[0]
    assert "gpu01: IOMMU groups DMA-FQ (not identity) for GPU0, GPU1, mlx5_0, mlx5_1" in f.message
    assert "/proc/cmdline: BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro" in f.message
    assert "iommu=pt" in f.cause and "nic-configuration-operator#102" in f.source
    assert f.measured["GPU0"] == "DMA-FQ" and f.threshold == "identity"


def test_iommu_judged_on_groups_not_on_the_cmdline(expect):
    # iommu=pt on the command line but the groups translate: the groups win
    assert by(run(expect, raw(iommu=ok(iommu_text("DMA")))), "iommu")[0].status == FAIL
    # no iommu=pt on the command line and no IOMMU groups at all: IOMMU off, pass
    r = by(run(expect, raw(iommu=ok(""), cmdline=ok("ro quiet\n"))), "iommu")[0]
    assert r.status == PASS and "IOMMU off" in r.message and "ro quiet" in r.message


def test_iommu_device_in_no_group_or_not_run_is_an_error(expect):
    text = "\n".join(x for x in iommu_text().splitlines() if "0000:98:00.0" not in x)
    r = by(run(expect, raw(iommu=ok(text))), "iommu")[0]
    assert r.status == ERROR and "GPU1 (0000:98:00.0) is in no IOMMU group" in r.message
    assert by(run(expect, raw(iommu=None)), "iommu")[0].status == ERROR


@pytest.mark.parametrize(
    "lsmod, kernel, lic, status, want",
    [
        (LSMOD, "6.5.0-35-generic", "NVIDIA", PASS, ["peermem"]),
        (LSMOD_NO_PEERMEM, "6.5.0-35-generic", "Dual MIT/GPL", PASS, ["dmabuf"]),
        (LSMOD, "5.15.0-91-generic", "Dual MIT/GPL", PASS, ["peermem", "dmabuf"]),
        (LSMOD_NO_PEERMEM, "6.5.0-35-generic", "NVIDIA", FAIL, []),
        (LSMOD_NO_PEERMEM, "5.4.0-150-generic", "Dual MIT/GPL", FAIL, []),
    ],
)
def test_gpudirect_mechanism(expect, lsmod, kernel, lic, status, want):
    r = by(
        run(expect, raw(lsmod=ok(lsmod), uname=ok(kernel + "\n"), modinfo_nvidia=ok(lic + "\n"))),
        "gpudirect_mechanism",
    )[0]
    assert (r.status, r.measured) == (status, want)
    if status == FAIL:
        assert "no GPUDirect RDMA mechanism" in r.message and "nvidia_peermem" in r.cause
    if "dmabuf" in want:
        assert "DMA-BUF (kernel " in r.message


def test_gpudirect_mechanism_reasons_and_fail_closed(expect):
    r = by(
        run(expect, raw(lsmod=ok(LSMOD_NO_PEERMEM), uname=ok("5.4.0-150-generic\n"))), "gpudirect_mechanism"
    )[0]
    assert r.status == FAIL and "kernel 5.4.0-150-generic < 5.12" in r.message and "'NVIDIA'" in r.message
    missing = {"rc": 1, "stdout": "", "stderr": "modinfo: ERROR: Module nvidia not found.\n"}
    r = by(run(expect, raw(lsmod=ok(LSMOD_NO_PEERMEM), modinfo_nvidia=missing)), "gpudirect_mechanism")[0]
    assert r.status == FAIL and "no nvidia kernel module" in r.message
    # no lsmod and modinfo not installed: no evidence either way
    r = by(
        run(
            expect, raw(lsmod=None, modinfo_nvidia={"rc": 127, "stdout": "", "stderr": "modinfo: not found"})
        ),
        "gpudirect_mechanism",
    )[0]
    assert r.status == ERROR and "failing closed" in r.message
    # DMA-BUF proven: a missing lsmod does not matter
    r = by(run(expect, raw(lsmod=None, modinfo_nvidia=ok("Dual MIT/GPL\n"))), "gpudirect_mechanism")[0]
    assert r.status == PASS and r.measured == ["dmabuf"]


def test_gpudirect_mechanism_skipped_when_not_planned():
    hv = {
        "fabricops_hardware_profile": "hgx-h100-ndr",
        "fabricops_site_gpudirect": False,
        "fabricops_verify_ports": [{"hca": "mlx5_0", "port": 1}],
    }
    exp = host_expect("gpu01", hv, skip=OTHER_GPU_CHECKS)
    assert "modinfo_nvidia" not in hostchecks.commands(exp, "gpus")
    assert by(run(exp, raw()), "gpudirect_mechanism")[0].status == SKIP


def test_helpers():
    assert pcie.bdf("00000000:1A:00.0") == "0000:1a:00.0"
    assert pcie.parse_speed("32.0 GT/s PCIe") == 32.0 and pcie.parse_speed("2.5 GT/s") == 2.5
    assert pcie.parse_speed("Unknown") is None
    assert pcie.kernel_version("4.18.0-513.el8.x86_64") == (4, 18)
    assert pcie.acs_redirect_bits({"SrcValid": True, "DirectTrans": True, "ReqRedir": False}) == []
    assert pcie.acs_redirect_bits({"CmpltRedir": True}) == ["CmpltRedir"]


def test_hca_link_from_its_rdma_sysfs_when_uevent_has_no_slot_name(expect):
    """/sys/class/infiniband/DEV/device/*_link_* is the HCA's PCIe link too (no PCI address needed)."""
    uevent = "".join(x + "\n" for x in UEVENT.splitlines() if "mlx5_1" not in x)
    text = sysfs_links() + "".join(
        f"/sys/class/infiniband/mlx5_1/device/{k}:{v}\n"
        for k, v in (
            ("current_link_speed", "16.0 GT/s PCIe"),
            ("current_link_width", "8"),
            ("max_link_speed", "32.0 GT/s PCIe"),
            ("max_link_width", "16"),
        )
    )
    res = {x.device: x for x in by(run(expect, raw(hca_pci=ok(uevent), pcie_sysfs=ok(text))), "pcie_link")}
    assert res["mlx5_1"].status == FAIL and "width x8 of x16" in res["mlx5_1"].message
    assert res["mlx5_0"].status == PASS


def test_iommu_members_read_from_numa_node_too(expect):
    text = (
        iommu_text("DMA").replace("/vendor:0x10de", "/numa_node:0").replace("/vendor:0x15b3", "/numa_node:1")
    )
    r = by(run(expect, raw(iommu=ok(text))), "iommu")[0]
    assert r.status == FAIL and r.measured == {"GPU0": "DMA", "GPU1": "DMA", "mlx5_0": "DMA", "mlx5_1": "DMA"}


def test_hca_address_from_a_path_based_netdev_name_without_uevent():
    """systemd.net-naming-scheme(7): ibp26s0 = bus 0x1a slot 0; enp170s0f1np1 = aa:00.1."""
    assert pcie.netdev_bdf("ibp26s0") == "0000:1a:00.0"
    assert pcie.netdev_bdf("enp170s0f1np1") == "0000:aa:00.1"
    assert pcie.netdev_bdf("enP2p3s0") == "0002:03:00.0"
    assert pcie.netdev_bdf("ens1f0") is None and pcie.netdev_bdf("ib0") is None
    hv = {
        "fabricops_hardware_profile": "hgx-h100-ndr",
        "fabricops_verify_ports": [
            {"hca": "mlx5_0", "port": 1, "netdev": "ibp26s0"},
            {"hca": "mlx5_1", "port": 1, "netdev": "ibp154s0"},
        ],
    }
    exp = host_expect("gpu01", hv, skip=OTHER_GPU_CHECKS)
    res = run(exp, raw(hca_pci=ok("")))
    assert [x for x in res if not x.ok] == []
    assert {x.device for x in by(res, "pcie_link")} == {"GPU0", "GPU1", "mlx5_0", "mlx5_1"}
