"""rail_consistency: every host on a rail has the same active MTU and the same NCCL settings."""

from __future__ import annotations

import pytest

from fabricops.verify import consistency, engine
from fabricops.verify.expect import host_expect
from fabricops.verify.result import ERROR, FAIL, PASS, SKIP

HOSTS = ("gpu01", "gpu02", "gpu03")
MTU_CODE = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}


def _cabling(hosts=HOSTS):
    out = []
    for i, h in enumerate(hosts):
        out += [
            {"host": h, "hca": "mlx5_0", "port": 1, "netdev": "ibp26s0", "switch": "ib-sw1",
             "switch_port": str(2 * i + 1), "link_layer": "InfiniBand"},
            {"host": h, "hca": "mlx5_1", "port": 1, "netdev": "ibp60s0", "switch": "ib-sw1",
             "switch_port": str(2 * i + 2), "link_layer": "InfiniBand"},
        ]
    return out


def _expects(hosts=HOSTS):
    hv = {"fabricops_hardware_profile": "hgx-h100-ndr", "fabricops_cabling": _cabling(hosts),
          "nccl_profile_name": "ib"}
    return {h: host_expect(h, hv) for h in hosts}


def devinfo(ports):
    """``ibv_devinfo`` text (the layout of rdma-core's, tests/fixtures/ibv_devinfo/mlx4_two_hcas_plain.txt)
    for {hca: (state_code, active_mtu)}, port 1 each."""
    lines = []
    for hca, (state, mtu) in ports.items():
        name = {4: "PORT_ACTIVE", 1: "PORT_DOWN", 2: "PORT_INIT"}[state]
        lines += [
            f"hca_id:\t{hca}",
            "\ttransport:\t\t\tInfiniBand (0)",
            "\tfw_ver:\t\t\t\t28.39.1002",
            "\tnode_guid:\t\t\tb83f:d203:00a1:b2c2",
            "\tsys_image_guid:\t\t\tb83f:d203:00a1:b2c2",
            "\tvendor_id:\t\t\t0x02c9",
            "\tvendor_part_id:\t\t\t4129",
            "\thw_ver:\t\t\t\t0x0",
            "\tboard_id:\t\t\tMT_0000000838",
            "\tphys_port_cnt:\t\t\t1",
            "\t\tport:\t1",
            f"\t\t\tstate:\t\t\t{name} ({state})",
            "\t\t\tmax_mtu:\t\t4096 (5)",
            f"\t\t\tactive_mtu:\t\t{mtu} ({MTU_CODE[mtu]})",
            "\t\t\tsm_lid:\t\t\t1",
            "\t\t\tport_lid:\t\t7",
            "\t\t\tport_lmc:\t\t0x00",
            "\t\t\tlink_layer:\t\tInfiniBand",
            "",
        ]
    return "\n".join(lines)


CONF = "NCCL_CROSS_NIC=0\nNCCL_IB_DISABLE=0\nNCCL_IB_HCA==mlx5_0:1,mlx5_1:1\nNCCL_NET_PLUGIN=none\n"


def _raws(mtus=None, confs=None, states=None):
    out = {}
    for h in HOSTS:
        mtu = (mtus or {}).get(h, 4096)
        st = (states or {}).get(h, {})
        out[h] = {
            "ibv_devinfo": {"rc": 0,
                            "stdout": devinfo({d: (st.get(d, 4), mtu) for d in ("mlx5_0", "mlx5_1")})},
            "nccl_conf": {"rc": 0, "stdout": (confs or {}).get(h, CONF)},
        }
    return out


def _by_rail(results):
    assert all(r.check == "rail_consistency" and r.category == "hosts" for r in results)
    return {r.device: r for r in results}


def test_healthy_rails_pass():
    res = _by_rail(consistency.judge(_expects(), _raws()))
    assert set(res) == {"mlx5_0/1", "mlx5_1/1"}
    assert all(r.status == PASS for r in res.values()), [r.message for r in res.values()]
    assert "3 hosts agree (active MTU 4096 and the NCCL settings" in res["mlx5_0/1"].message


def test_mtu_mismatch_fails_naming_the_odd_host_and_the_mtu():
    res = _by_rail(consistency.judge(_expects(), _raws(mtus={"gpu02": 1024})))
    r = res["mlx5_0/1"]
    assert r.status == FAIL and r.host == "gpu02"
    assert "active MTU differs: gpu02 1024 (the others 4096)" in r.message
    assert "gpu02 mlx5_0/1: active MTU 1024 where the rest of the rail has 4096" in r.cause
    assert "NVIDIA/nccl#1524" in r.cause
    assert r.measured["active_mtu"] == {"gpu01": 4096, "gpu02": 1024, "gpu03": 4096}


def test_nccl_setting_that_differs_fails_naming_host_and_setting():
    other = CONF.replace("NCCL_NET_PLUGIN=none\n", "")
    res = _by_rail(consistency.judge(_expects(), _raws(confs={"gpu03": other})))
    r = res["mlx5_1/1"]
    assert r.status == FAIL and r.host == "gpu03"
    assert "NCCL_NET_PLUGIN: gpu03 unset (the others none)" in r.message
    assert r.cause.startswith(
        "gpu03: /etc/nccl.conf differs from the rest of rail mlx5_1/1 (NCCL_NET_PLUGIN)"
    )


def test_a_host_that_leaves_the_rail_out_of_nccl_ib_hca_fails():
    other = CONF.replace("NCCL_IB_HCA==mlx5_0:1,mlx5_1:1", "NCCL_IB_HCA==mlx5_0:1")
    res = _by_rail(consistency.judge(_expects(), _raws(confs={"gpu01": other})))
    assert res["mlx5_0/1"].status == PASS
    assert res["mlx5_1/1"].status == FAIL
    assert "in NCCL_IB_HCA: gpu01 no (the others yes)" in res["mlx5_1/1"].message


@pytest.mark.parametrize(
    ("spec", "listed"),
    [("", True), ("mlx5", True), ("=mlx5_1:1", True), ("=mlx5_1:2", False), ("^mlx5_1", False),
     ("^=mlx5_0", True), ("=mlx5_10:1", False), ("mlx5_1", True)],
)
def test_nccl_ib_hca_syntax(spec, listed):
    assert consistency._listed({"NCCL_IB_HCA": spec} if spec else {}, "mlx5_1", 1) is listed


def test_two_hosts_that_disagree_have_no_majority_and_both_are_named():
    exp = _expects(HOSTS[:2])
    raws = _raws(mtus={"gpu02": 2048})
    res = _by_rail(consistency.judge(exp, {h: raws[h] for h in HOSTS[:2]}))
    r = res["mlx5_0/1"]
    assert r.status == FAIL and r.host == "gpu01,gpu02" and "(no majority)" in r.message


def test_fewer_than_two_hosts_with_evidence_is_a_skip_saying_so():
    states = {"gpu02": {"mlx5_0": 1}, "gpu03": {"mlx5_0": 2}}
    res = _by_rail(consistency.judge(_expects(), _raws(states=states)))
    r = res["mlx5_0/1"]
    assert r.status == SKIP and "1 host(s) with the port ACTIVE, nothing to compare" in r.message
    assert "not ACTIVE (left to hca_port): gpu02, gpu03" in r.message
    assert res["mlx5_1/1"].status == PASS


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (None, "ibv_devinfo was not run"),
        ({"rc": 127, "stdout": "", "stderr": "sh: ibv_devinfo: not found"},
         "ibv_devinfo failed (sh: ibv_devinfo"),
        ({"rc": 0, "stdout": "No IB devices found\n"}, "ibv_devinfo unreadable"),
    ],
)
def test_missing_evidence_is_an_error(raw, why):
    raws = _raws()
    if raw is None:
        del raws["gpu02"]["ibv_devinfo"]
    else:
        raws["gpu02"]["ibv_devinfo"] = raw
    res = _by_rail(consistency.judge(_expects(), raws))
    for r in res.values():
        assert r.status == ERROR and not r.ok
        assert f"no evidence from gpu02: {why}" in r.message and "failing closed" in r.message


def test_unreadable_nccl_conf_is_an_error_and_a_mismatch_still_fails():
    raws = _raws(mtus={"gpu03": 1024})
    raws["gpu02"]["nccl_conf"] = {"rc": 1, "stdout": "", "stderr": "cat: /etc/nccl.conf: Permission denied"}
    res = _by_rail(consistency.judge(_expects(), raws))
    r = res["mlx5_0/1"]
    assert r.status == FAIL and r.host == "gpu03"  # the mismatch is evidence enough
    assert "no evidence from gpu02: nccl.conf unreadable (cat: /etc/nccl.conf: Permission denied)" \
        in r.message
    raws = _raws()
    raws["gpu02"]["nccl_conf"] = {"rc": 1, "stdout": "", "stderr": "Permission denied"}
    assert {r.status for r in consistency.judge(_expects(), raws)} == {ERROR}


def test_hosts_without_a_planned_nccl_profile_are_compared_on_mtu_only():
    raws = _raws()
    for h in HOSTS:
        del raws[h]["nccl_conf"]
    res = _by_rail(consistency.judge(_expects(), raws))
    assert all(r.status == PASS for r in res.values())
    assert "NCCL settings" not in res["mlx5_0/1"].message


def test_phase_reads_ibv_devinfo_and_honours_skip():
    raws = _raws(mtus={"gpu01": 2048})
    asked = []

    def run(host, cmd, timeout):
        asked.append((host, cmd))
        return raws[host]["ibv_devinfo"]

    collected = {h: {"nccl_conf": raws[h]["nccl_conf"]} for h in HOSTS}
    res = consistency.phase(run, _expects(), collected, 5)
    assert sorted(asked) == [(h, "ibv_devinfo") for h in HOSTS]
    assert {r.status for r in res} == {FAIL}
    hv = {"fabricops_hardware_profile": "hgx-h100-ndr", "fabricops_cabling": _cabling(),
          "fabricops_verify_skip": ["rail_consistency"]}
    assert consistency.phase(run, {h: host_expect(h, hv) for h in HOSTS}, collected, 5) == []


def test_engine_runs_it_after_the_host_phase():
    """verify --only hosts: the rail check is among the results, judged on what the hosts answered."""
    raws = _raws(mtus={"gpu03": 1024})

    def run(host, cmd, timeout):
        if cmd == "ibv_devinfo":
            return raws[host]["ibv_devinfo"]
        if cmd.startswith("cat "):
            return raws[host]["nccl_conf"]
        return {"rc": 127, "stdout": "", "stderr": f"{cmd.split()[0]}: not found"}

    hv = {"fabricops_hardware_profile": "hgx-h100-ndr", "fabricops_cabling": _cabling(),
          "nccl_profile_name": "ib"}
    vr = engine.verify(run, list(HOSTS), {h: hv for h in HOSTS}, engine.Options(only="hosts"))
    rails = _by_rail([r for r in vr.results if r.check == "rail_consistency"])
    assert rails["mlx5_0/1"].status == FAIL and rails["mlx5_0/1"].host == "gpu03"
    gpus = engine.verify(run, list(HOSTS), {h: hv for h in HOSTS}, engine.Options(only="gpus"))
    assert not [r for r in gpus.results if r.check == "rail_consistency"]



def test_skip_flag_accepts_the_check():
    import argparse

    from fabricops.verify import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["verify", "--skip", "rail_consistency"])
    assert args.skip == ["rail_consistency"]
