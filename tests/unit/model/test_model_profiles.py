"""Hardware profiles: loading, validation, thresholds from REFERENCE.md."""

import pytest

from fabricops.errors import FabricopsError
from fabricops.model.profiles import ProfileError, list_profiles, load_profile, threshold_for

REQUIRED = {"hgx-h100-ndr", "hgx-h200-ndr", "hgx-a100-hdr", "roce-400g", "edr-100"}


def test_shipped_profiles_load():
    assert set(list_profiles()) >= REQUIRED
    for name in list_profiles():
        p = load_profile(name)
        assert p.name == name and p.source and p.description
        assert p.gpu.count > 0 and p.hca.count > 0


def test_h100_profile_content():
    p = load_profile("hgx-h100-ndr")
    assert (p.gpu.count, p.gpu.nvlink, p.gpu.topology) == (8, 4, "nvswitch")
    assert p.gpu.nvlink_gen.total_per_direction_gbs == 450
    assert (p.hca.count, p.hca.link_layer, p.hca.speed, p.hca.width, p.hca.rate_gbps) == (
        8,
        "InfiniBand",
        "NDR",
        "4X",
        400,
    )


def test_roce_and_edr_profiles():
    roce = load_profile("roce-400g")
    assert (roce.hca.link_layer, roce.hca.rate_gbps, roce.hca.width) == ("Ethernet", 400, None)
    edr = load_profile("edr-100")
    assert (edr.hca.rate_gbps, edr.gpu.topology, edr.gpu.nvlink) == (100, "direct", 2)


@pytest.mark.parametrize(
    ("profile", "gpudirect", "expected"),
    [
        ("hgx-h100-ndr", False, 390),
        ("hgx-h100-ndr", True, 380),
        ("hgx-h200-ndr", True, 360),
        ("hgx-a100-hdr", True, 180),
        ("edr-100", False, 95),
        ("roce-400g", False, 360),
        ("roce-400g", True, 360),
    ],
)
def test_ib_write_bw_floors(profile, gpudirect, expected):
    t = threshold_for(profile, "ib_write_bw", load_profile(profile).hca.rate_gbps, gpudirect=gpudirect)
    assert (t.value, t.unit, t.op) == (expected, "Gb/s", ">=")
    assert t.source


def test_default_is_90_percent_and_floor_only_applies_to_its_port_rate():
    t = threshold_for("hgx-h100-ndr", "ib_read_bw", 400)
    assert t.value == 360 and "ngc_multinode_perf" in t.source
    # a 200 Gb/s port on an NDR profile: the 400-port floor does not apply
    assert threshold_for("hgx-h100-ndr", "ib_write_bw", 200).value == 180


def test_bidirectional_doubles():
    assert threshold_for("hgx-h100-ndr", "ib_write_bw", 400, bidirectional=True).value == 780
    assert threshold_for("roce-400g", "ib_send_bw", 400, bidirectional=True).value == 720


def test_latency_caps():
    p = load_profile("hgx-h100-ndr")
    assert threshold_for(p, "ib_write_lat").value == 2.5
    assert threshold_for(p, "ib_send_lat").value == 2.5
    t = threshold_for(p, "ib_read_lat")
    assert (t.value, t.unit, t.op) == (4.5, "us", "<=")
    assert t.passes(4.4) and not t.passes(4.6)


def test_nccl_floors():
    assert threshold_for("hgx-h100-ndr", "nccl_all_reduce_single_node").value == 460
    assert threshold_for("hgx-a100-hdr", "nccl_all_reduce_single_node").value == 228
    assert threshold_for("hgx-h200-ndr", "nccl_all_reduce_single_node").value == 431  # Azure nd96isr_h200_v5
    assert threshold_for("hgx-a100-hdr", "nccl_busbw_per_nic", 200).value == 24
    assert threshold_for("hgx-h100-ndr", "nccl_busbw_per_nic").value == 46
    with pytest.raises(ProfileError, match="no published single-node"):
        threshold_for("edr-100", "nccl_all_reduce_single_node")
    with pytest.raises(ProfileError, match="per-NIC"):
        threshold_for("edr-100", "nccl_busbw_per_nic", 56)


def test_error_counters():
    flaps = threshold_for("hgx-h100-ndr", "link_flaps_24h")
    assert flaps.passes(4) and not flaps.passes(5)
    sym = threshold_for("hgx-h100-ndr", "symbol_error")
    assert sym.passes(0) and not sym.passes(1)
    assert threshold_for("hgx-h100-ndr", "link_downed").value == 0


def test_unknown_profile_and_test():
    with pytest.raises(ProfileError, match=r"unknown hardware profile .dgx-z.*hgx-h100-ndr"):
        load_profile("dgx-z")
    with pytest.raises(ProfileError, match="unknown test"):
        threshold_for("hgx-h100-ndr", "ib_write_latency")
    with pytest.raises(ValueError):
        threshold_for("hgx-h100-ndr", "ib_write_bw", -1)
    assert issubclass(ProfileError, FabricopsError)


GOOD = """\
name: custom
description: test
source: test
gpu: {model: NVIDIA H100 80GB HBM3, count: 8, nvlink: 4, topology: nvswitch}
hca: {count: 8, link_layer: InfiniBand, speed: NDR, width: 4X}
"""


def test_load_from_path(tmp_path):
    f = tmp_path / "custom.yml"
    f.write_text(GOOD)
    p = load_profile(f)
    assert p.hca.rate_gbps == 400 and p.path == str(f)
    assert threshold_for(p, "ib_write_bw", 400).value == 360  # defaults only


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("count: 8, nvlink", "count: 0, nvlink"), "gpu.count must be a positive integer"),
        (("nvlink: 4", "nvlink: 9"), "not a known NVLink generation"),
        (("topology: nvswitch", "topology: ring"), "gpu.topology"),
        (("speed: NDR", "speed: ZDR"), "not an InfiniBand generation"),
        (("link_layer: InfiniBand", "link_layer: Myrinet"), "link_layer"),
        (("width: 4X", "width: 3X"), "hca.width"),
        (("source: test\n", ""), "missing source"),
    ],
)
def test_validation_errors(tmp_path, change, message):
    f = tmp_path / "bad.yml"
    f.write_text(GOOD.replace(*change))
    with pytest.raises(ProfileError, match=message):
        load_profile(f)


def test_threshold_without_source_and_unknown_section(tmp_path):
    f = tmp_path / "bad.yml"
    f.write_text(GOOD + "thresholds:\n  latency_us:\n    ib_write_lat: {value: 3}\n")
    with pytest.raises(ProfileError, match="has no source"):
        load_profile(f)
    f.write_text(GOOD + "thresholds:\n  latency: {}\n")
    with pytest.raises(ProfileError, match="unknown threshold sections latency"):
        load_profile(f)


def test_bad_yaml_and_missing_file(tmp_path):
    f = tmp_path / "bad.yml"
    f.write_text("name: [unclosed\n")
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_profile(f)
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "none.yml")
    f.write_text("- a list\n")
    with pytest.raises(ProfileError, match="mapping"):
        load_profile(f)


def test_override_in_profile_wins(tmp_path):
    f = tmp_path / "x.yml"
    f.write_text(GOOD + "thresholds:\n  latency_us:\n    ib_write_lat: {value: 3.0, source: lab}\n")
    p = load_profile(f)
    assert threshold_for(p, "ib_write_lat").value == 3.0
    assert threshold_for(p, "ib_read_lat").value == 4.5  # untouched default


# --- the GPU platforms being racked now (issue 38) ------------------------------------------------


def test_blackwell_profiles_content():
    b200 = load_profile("hgx-b200-ndr")
    assert (b200.platform, b200.gpu.count, b200.gpu.nvlink, b200.gpu.topology) == (
        "hgx-b200", 8, 5, "nvswitch")
    assert (b200.hca.count, b200.hca.speed, b200.hca.rate_gbps, b200.nvlink_domain) == (8, "NDR", 400, None)
    b300 = load_profile("hgx-b300-xdr")
    assert (b300.platform, b300.gpu.count, b300.hca.count, b300.hca.speed, b300.hca.rate_gbps) == (
        "hgx-b300", 8, 8, "XDR", 800)
    for name, speed, rate in (("gb200-nvl72", "NDR", 400), ("gb300-nvl72", "XDR", 800)):
        p = load_profile(name)
        assert p.platform == name and p.gpu.nvlink == 5
        assert (p.gpu.count, p.cpu.model, p.cpu.count, p.hca.count) == (4, "NVIDIA Grace", 2, 4)
        assert (p.hca.speed, p.hca.rate_gbps) == (speed, rate)
        assert (p.nvlink_domain.max_nodes, p.nvlink_domain.max_gpus) == (18, 72) and p.nvlink_domain.source


def test_every_shipped_profile_names_a_platform():
    for name in list_profiles():
        assert load_profile(name).platform, name


@pytest.mark.parametrize(
    ("profile", "gpudirect", "expected", "source"),
    [
        ("gb200-nvl72", True, 360, "ngc_multinode_perf"),  # Azure's GB200 GDR floor is 360 too (below)
        ("gb200-nvl72", False, 390, "hb176rs_v4.conf"),
        ("hgx-b200-ndr", False, 390, "hb176rs_v4.conf"),
        ("hgx-b200-ndr", True, 360, "ngc_multinode_perf"),  # no B200 GPUDirect floor: the 90 % default
        ("hgx-b300-xdr", True, 720, "ngc_multinode_perf"),
        ("gb300-nvl72", False, 720, "ngc_multinode_perf"),
    ],
)
def test_blackwell_perftest_floors(profile, gpudirect, expected, source):
    t = threshold_for(profile, "ib_write_bw", gpudirect=gpudirect)
    assert t.value == expected and source in t.source


def test_gb200_carries_azures_gpudirect_floor():
    (gdr,) = [f for f in load_profile("gb200-nvl72").floors if f.memory == "gpudirect"]
    assert (gdr.port_rate, gdr.value) == (400, 360) and "check_ib_bw_gdr 360" in gdr.source


def test_nccl_floors_per_scale_group():
    from fabricops.model.profiles import NCCL_SCALE_GROUPS

    assert NCCL_SCALE_GROUPS == {"intra_node": "nccl_all_reduce_single_node",
                                 "intra_domain": "nccl_all_reduce_intra_domain",
                                 "across_domains": "nccl_busbw_per_nic"}
    intra = threshold_for("gb200-nvl72", "nccl_all_reduce_single_node")
    assert (intra.value, intra.unit) == (432, "GB/s") and "nd128isr_ndr_gb200_v6.conf" in intra.source
    assert "4x NVIDIA GB200" in intra.basis
    assert threshold_for("gb200-nvl72", "nccl_busbw_per_nic").value == 46
    # no published MNNVL floor: named, not invented
    with pytest.raises(ProfileError, match="no published NCCL all_reduce floor across its NVLink domain"):
        threshold_for("gb200-nvl72", "nccl_all_reduce_intra_domain")
    with pytest.raises(ProfileError, match="NVLink fabric ends at the server"):
        threshold_for("hgx-b200-ndr", "nccl_all_reduce_intra_domain")
    with pytest.raises(ProfileError, match="no per-NIC NCCL busbw floor for 800 Gb/s"):
        threshold_for("gb300-nvl72", "nccl_busbw_per_nic")
    with pytest.raises(ProfileError, match="no published single-node NCCL all_reduce floor"):
        threshold_for("hgx-b200-ndr", "nccl_all_reduce_single_node")


def test_intra_domain_floor_from_a_profile_file(tmp_path):
    f = tmp_path / "tray.yml"
    floor = "    all_reduce_busbw_intra_domain_gbs: {value: 700, source: site run}\n"
    f.write_text(DOMAIN + "thresholds:\n  nccl:\n" + floor)
    t = threshold_for(load_profile(f), "nccl_all_reduce_intra_domain")
    assert (t.value, t.source) == (700, "site run") and "up to 72x" in t.basis


DOMAIN = """\
name: tray
description: test
source: test
platform: gb200-nvl72
gpu: {model: NVIDIA GB200, count: 4, nvlink: 5, topology: nvswitch}
cpu: {model: NVIDIA Grace, count: 2}
nvlink_domain: {max_nodes: 18, max_gpus: 72, source: test}
hca: {count: 4, link_layer: InfiniBand, speed: NDR, width: 4X}
"""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("platform: gb200-nvl72", "platform: gb900"), "platform 'gb900' is not one of"),
        (("max_gpus: 72", "max_gpus: 64"), "max_gpus 64 is not max_nodes 18 x gpu.count 4 = 72"),
        (("max_nodes: 18", "max_nodes: 0"), "nvlink_domain.max_nodes must be a positive integer"),
        (("max_gpus: 72, source: test", "max_gpus: 72"), "missing nvlink_domain.source"),
        (("count: 2}", "count: two}"), "cpu.count must be int"),
    ],
)
def test_platform_and_domain_validation(tmp_path, change, message):
    f = tmp_path / "bad.yml"
    f.write_text(DOMAIN.replace(*change))
    with pytest.raises(ProfileError, match=message):
        load_profile(f)


def test_smaller_domain_and_profile_file_without_platform(tmp_path):
    f = tmp_path / "small.yml"
    f.write_text(DOMAIN.replace("max_nodes: 18, max_gpus: 72", "max_nodes: 9"))
    assert load_profile(f).nvlink_domain.max_gpus == 36
    g = tmp_path / "custom.yml"
    g.write_text(GOOD)
    assert load_profile(g).platform is None
