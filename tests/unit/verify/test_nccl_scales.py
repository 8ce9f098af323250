"""The multi-scale NCCL phase for NVLink-domain profiles (fabricops.verify.nccl_scales) with a fake launcher.

The fake reads only the launcher line, as mpirun would, and answers in nccl-tests' real format
(``test_nccl_phase.nccl_text``): one host is the tray's own NVLink (``node`` GB/s); several hosts with
``NCCL_MNNVL_ENABLE=1`` are multi-node NVLink (``nvl`` GB/s for the hosts' domain); with
``NCCL_MNNVL_ENABLE=0`` the network, 0.94 x rails x the slowest rail's GB/s, like the fake of the
single-run phase.
"""

from __future__ import annotations

import json
import shlex

import pytest
from test_nccl_phase import nccl_text

from fabricops.model import busbw as model
from fabricops.verify import nccl_scales, report
from fabricops.verify.engine import Options, verify
from fabricops.verify.expect import host_expect, nccl_settings
from fabricops.verify.nccl_phase import phase
from fabricops.verify.result import FAIL, CheckResult

HCAS = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
A = ["tray01", "tray02", "tray03", "tray04"]
B = ["tray05", "tray06", "tray07", "tray08"]
HOSTS = A + B
DOMAIN = {**dict.fromkeys(A, "nvl72-a"), **dict.fromkeys(B, "nvl72-b")}
GBS = {"NDR": 50.0, "XDR": 100.0}
ADDR = {h: f"192.0.2.{i}" for i, h in enumerate(HOSTS, start=11)}  # each tray's IMEX address


def hostvars(hosts=HOSTS, profile="gb200-nvl72", speed="NDR", domains=DOMAIN, **extra):
    cabling = [
        {"host": h, "hca": hca, "port": 1, "switch": "leaf1", "switch_port": str(i * 4 + j + 1),
         "link_layer": "InfiniBand", "speed": speed}
        for i, h in enumerate(hosts)
        for j, hca in enumerate(HCAS)
    ]
    out = {}
    for h in hosts:
        hv = {"fabricops_hardware_profile": profile, "fabricops_cabling": cabling, "nccl_profile_name": "ib",
              "ansible_host": ADDR[h]}
        if domains.get(h):
            hv["fabricops_nvlink_domain"] = domains[h]
        hv.update(extra)
        out[h] = hv
    return out


class FakeNvl:
    """mpirun + nccl-tests on NVL72 trays, from the command line only."""

    def __init__(self, node=480.0, nvl=None, rates=None, speed="NDR", domains=DOMAIN, spine=1.0,
                 imex_down=()):
        self.node, self.spine = node, spine  # spine: the share of busbw left between domains
        self.imex_down = set(imex_down)  # trays whose nvidia-imex is stopped
        self.nvl = {"nvl72-a": 700.0, "nvl72-b": 700.0, **(nvl or {})}
        self.rates = {(h, c): GBS[speed] for h in HOSTS for c in HCAS}
        self.rates.update(rates or {})
        self.domains = domains
        self.calls: list[tuple[str, str]] = []

    def __call__(self, host, command, timeout=60):
        if command == "ibstat":
            return {"rc": 1, "stdout": "", "stderr": "not asked"}
        if command.startswith("nvidia-imex-ctl "):
            return self.imex(host)
        self.calls.append((host, command))
        argv = shlex.split(command)
        hostslots = argv[argv.index("-H") + 1].split(",")
        hosts = [hs.split(":")[0] for hs in hostslots]
        slots = int(hostslots[0].split(":")[1])
        env = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-x")
        if len(hosts) == 1:
            peak = self.node
        elif env.get("NCCL_MNNVL_ENABLE") == "1":
            peak = min(self.nvl[self.domains[h]] for h in hosts)
        else:
            hcas = [env["NCCL_IB_HCA"].lstrip("=")] if "NCCL_IB_HCA" in env else list(HCAS)
            peak = 0.94 * len(hcas) * min(self.rates[(h, c)] for h in hosts for c in hcas)
            if len({self.domains.get(h) for h in hosts}) > 1:
                peak *= self.spine
        binary = next(a for a in argv if a.endswith("_perf"))
        return {"rc": 0, "stdout": nccl_text(hosts, slots, peak, binary, 1 << 30, {}), "stderr": ""}

    def imex(self, host):
        """``nvidia-imex-ctl -N -j`` as HOST's IMEX sees its domain (the payload of
        tests/fixtures/nvidia-imex-ctl-json): a stopped IMEX does not answer, its peers see it
        UNAVAILABLE and not connected."""
        if host in self.imex_down:
            return {"rc": 1, "stdout": "", "stderr": "Connection refused"}
        members = [h for h in HOSTS if self.domains.get(h) == self.domains.get(host)]

        def up(h):
            return h not in self.imex_down

        nodes = {
            str(i): {
                "status": "READY" if up(h) else "UNAVAILABLE", "host": ADDR[h], "version": "570.172",
                "connections": {
                    str(j): {"host": ADDR[p], "status": "CONNECTED" if up(h) and up(p) else "INVALID"}
                    for j, p in enumerate(members)
                },
            }
            for i, h in enumerate(members)
        }
        status = "UP" if all(up(h) for h in members) else "DEGRADED"
        return {"rc": 0, "stdout": json.dumps({"nodes": nodes, "timestamp": "12/7/2026 18:20:00.000",
                                               "status": status}), "stderr": ""}

    def commands(self, mnnvl=None):
        return [(h, c) for h, c in self.calls if mnnvl is None or f"NCCL_MNNVL_ENABLE={mnnvl}" in c]


def run_nccl(fake, hosts=HOSTS, hv=None):
    return verify(fake, hosts, hv or hostvars(hosts), Options(only="nccl"))


def scale(vr, group, mnnvl="any"):
    rs = [
        r for r in vr.results
        if r.check == "nccl_busbw" and (r.details.get("scale") or {}).get("group") == group
        and (mnnvl == "any" or r.details["scale"]["mnnvl"] == mnnvl)
    ]
    assert len(rs) == 1, [r.message for r in rs]
    return rs[0]


# --- the plan --------------------------------------------------------------------------------------


def test_plan_groups_by_domain_with_mnnvl_on_and_off_then_across():
    p = nccl_scales.plan(HOSTS, DOMAIN, {})
    got = [(g.scale, g.domain, g.mnnvl, g.hosts) for g in p.groups]
    assert got == [
        *[("intra_node", None, None, (h,)) for h in HOSTS],
        ("intra_domain", "nvl72-a", 1, tuple(A)),
        ("intra_domain", "nvl72-a", 0, tuple(A)),
        ("intra_domain", "nvl72-b", 1, tuple(B)),
        ("intra_domain", "nvl72-b", 0, tuple(B)),
        ("across_domains", None, 0, tuple(HOSTS)),
    ]
    assert p.results == []


def test_plan_one_domain_has_no_across_run_and_a_host_without_domain_is_an_error():
    p = nccl_scales.plan(A, dict.fromkeys(A, "nvl72-a"), {})
    assert [g.scale for g in p.groups].count("across_domains") == 0
    assert [r.status for r in p.results] == ["skip"] and "full-scale network run" in p.results[0].message
    p = nccl_scales.plan(A, {**dict.fromkeys(A[:3], "nvl72-a"), "tray04": None}, {})
    [err] = p.results
    assert (err.status, err.host) == ("error", "tray04")
    assert "fabricops_nvlink_domain is not set" in err.message
    assert p.groups[-1].hosts == tuple(A)  # the tray still takes part in the network run across domains


def test_commands_carry_mnnvl_ranks_per_tray_and_launch_from_the_groups_first_host():
    fake = FakeNvl()
    run_nccl(fake)
    on = fake.commands(1)
    assert [h for h, _c in on] == ["tray01", "tray05"]
    assert "-np 16 -H tray01:4,tray02:4,tray03:4,tray04:4 " in on[0][1]
    assert all("NCCL_MNNVL_ENABLE=0" in c for _h, c in fake.commands(0)) and len(fake.commands(0)) == 3
    assert "-np 32 -H tray01:4," in fake.commands(0)[-1][1]
    single = [(h, c) for h, c in fake.calls if "MNNVL" not in c]
    assert [h for h, _c in single] == HOSTS and all(f"-np 4 -H {h}:4 " in c for h, c in single)


# --- judging ---------------------------------------------------------------------------------------


def test_all_groups_healthy_pass_with_their_floors():
    vr = run_nccl(FakeNvl())
    node = scale(vr, "intra-node tray01")
    assert node.status == "pass" and node.threshold == 432 and "nd128isr_ndr_gb200_v6" in node.source
    on = scale(vr, "intra-domain nvl72-a", 1)
    off = scale(vr, "intra-domain nvl72-a", 0)
    assert off.status == "pass" and off.measured == pytest.approx(188.0, rel=0.01)  # 0.94 x 4 x 50
    assert off.threshold == pytest.approx(174.8)  # 4 rails x 46 GB/s per 400G NIC less 5 %
    assert on.status == "pass" and on.threshold == pytest.approx(off.measured * 1.05, abs=0.01)
    assert "no published MNNVL floor" in on.details["floor_basis"]
    assert on.details["scale"]["cause"]["kind"] == "none"
    across = scale(vr, "across domains")
    assert across.status == "pass" and across.device == "all_reduce MNNVL=0"
    assert all(r.ok for r in vr.results), [r.message for r in vr.results if not r.ok]
    # under --only nccl the IMEX domain check runs first: both domains healthy, so both MNNVL runs started
    assert {r.check for r in vr.results} == {"nccl_busbw", "nccl_gdr", "imex_domain"}
    assert sorted(r.device for r in vr.results if r.check == "imex_domain") == ["nvl72-a", "nvl72-b"]
    assert report.exit_status(vr) == 0


def test_mnnvl_slow_with_the_network_fine_names_nvlink():
    vr = run_nccl(FakeNvl(nvl={"nvl72-b": 150.0}))
    on = scale(vr, "intra-domain nvl72-b", 1)
    assert on.status == "fail" and on.measured == pytest.approx(150.0, rel=0.01)
    assert on.cause == ("NVLink (the domain's NVLink switch trays or a tray's NVLink): MNNVL=1 is slow while "
                        "the same trays reach their floor over the network")
    assert on.details["scale"]["cause"]["kind"] == "nvlink"
    assert scale(vr, "intra-domain nvl72-b", 0).status == "pass"
    assert scale(vr, "intra-domain nvl72-a", 1).status == "pass"
    assert scale(vr, "across domains").status == "pass"
    assert not [r for r in vr.results if r.check == "nccl_rail"]  # no rail re-runs for an NVLink fault


def test_network_slow_with_mnnvl_fine_names_the_network_and_the_slow_rail():
    fake = FakeNvl(rates={("tray03", "mlx5_2"): 25.0})  # one tray's port trained at half rate
    vr = run_nccl(fake)
    off = scale(vr, "intra-domain nvl72-a", 0)
    assert off.status == "fail" and off.measured == pytest.approx(94.0, rel=0.01)
    assert off.details["scale"]["cause"]["kind"] == "network"
    assert off.cause.startswith("network (the rails between the trays")
    assert "slowest rail mlx5_2" in off.cause
    assert scale(vr, "intra-domain nvl72-a", 1).status == "pass"
    assert scale(vr, "intra-domain nvl72-b", 0).status == "pass"
    across = scale(vr, "across domains")
    assert across.status == "fail" and across.details["scale"]["cause"]["kind"] == "network"
    assert "slow within NVLink domain(s) nvl72-a too" in across.cause
    reruns = [c for _h, c in fake.calls if "NCCL_IB_HCA" in c]
    assert reruns and all("NCCL_MNNVL_ENABLE=0" in c for c in reruns)  # the rails, never NVLink
    assert all("-np 16 " in c for c in reruns)  # the domain's re-runs named it: none across all 8
    rail = [r for r in vr.results if r.check == "nccl_rail" and r.device == "mlx5_2"]
    assert rail and all(r.status == "fail" for r in rail)


def test_slow_only_between_domains_names_the_links_between_them():
    fake = FakeNvl(spine=0.6)  # every tray fine inside its domain, slow when a run spans both
    vr = run_nccl(fake)
    assert scale(vr, "intra-domain nvl72-a", 0).status == "pass"
    across = scale(vr, "across domains")
    assert across.status == "fail" and across.details["scale"]["cause"]["kind"] == "network"
    assert "links between the domains (spine switches and their cables)" in across.cause
    assert any("-np 32 " in c and "NCCL_IB_HCA" in c for _h, c in fake.calls)  # re-run across all 8


def test_both_slow_names_both():
    vr = run_nccl(FakeNvl(nvl={"nvl72-a": 100.0}, rates={("tray02", "mlx5_0"): 25.0}))
    on = scale(vr, "intra-domain nvl72-a", 1)
    assert on.status == "fail" and on.details["scale"]["cause"]["kind"] == "both"
    assert "NVLink" in on.cause and "network" in on.cause


@pytest.mark.parametrize(
    "on,off,kind",
    [
        ("pass", "pass", "none"),
        ("fail", "pass", "nvlink"),
        ("pass", "fail", "network"),
        ("fail", "fail", "both"),
        ("fail", "error", "nvlink"),  # suspected: the network is not ruled out
        ("error", "fail", "network"),
        ("skip", "pass", "unknown"),
        ("error", "error", "unknown"),
    ],
)
def test_cause_table(on, off, kind):
    got, text = nccl_scales.cause_verdict(on, off)
    assert got == kind
    assert ("suspected" in text) == (kind in ("nvlink", "network") and "pass" not in (on, off))


def test_unhealthy_domain_is_not_run_and_says_why():
    hv = hostvars()
    exps = {h: host_expect(h, hv[h]) for h in HOSTS}
    fake = FakeNvl()
    why = "NVLink domain nvl72-a (4 nodes): tray03 is down (nvidia-imex not READY)"
    rs = phase(fake, exps, {}, nccl_settings({}), domains=DOMAIN, unhealthy_domains={"nvl72-a": why})
    assert [h for h, _c in fake.commands(1)] == ["tray05"]  # domain b's MNNVL run only
    [on] = [r for r in rs if (r.details.get("scale") or {}).get("group") == "intra-domain nvl72-a"
            and r.details["scale"]["mnnvl"] == 1]
    assert on.status == "error" and "not run: NVLink domain nvl72-a is not healthy: " + why in on.message
    assert on.caused_by == "imex_domain nvl72-a" and on.measured is None
    assert on.details["scale"]["cause"]["kind"] == "domain"
    # the network runs need no IMEX: they still run and are judged
    off = [r for r in rs if (r.details.get("scale") or {}).get("group") == "intra-domain nvl72-a"
           and r.details["scale"]["mnnvl"] == 0]
    assert [r.status for r in off] == ["pass"]


def test_unhealthy_domains_from_the_imex_domain_results():
    results = [
        CheckResult("gpus", "imex_domain", "tray01,tray02", "nvl72-a", FAIL,
                    "NVLink domain nvl72-a: tray02 down", details={"domain": "nvl72-a", "down": ["tray02"]}),
        CheckResult("gpus", "imex_domain", "tray05,tray06", "nvl72-b", "pass", "NVLink domain nvl72-b: up",
                    details={"domain": "nvl72-b", "down": []}),
        CheckResult("gpus", "nvlink", "tray01", None, FAIL, "tray01: link down", details={"domain": "x"}),
    ]
    assert nccl_scales.unhealthy_domains(results) == {"nvl72-a": "NVLink domain nvl72-a: tray02 down"}


def test_a_run_that_fails_is_an_error_never_a_pass():
    class Broken(FakeNvl):
        def __call__(self, host, command, timeout=60):
            if "NCCL_MNNVL_ENABLE=1" in command and "tray05" in command:
                return {"rc": 1, "stdout": "tray06: Test NCCL failure common.cu:1 'unhandled cuda error'\n",
                        "stderr": ""}
            return super().__call__(host, command, timeout)

    vr = run_nccl(Broken())
    on = scale(vr, "intra-domain nvl72-b", 1)
    assert on.status == "error" and "could not run: exit 1" in on.message
    assert on.details["scale"]["cause"]["kind"] == "unknown"
    assert report.exit_status(vr) == 1


def test_gb300_without_published_floors_measures_and_derives_from_the_model():
    hv = hostvars(profile="gb300-nvl72", speed="XDR")
    vr = run_nccl(FakeNvl(node=500.0, speed="XDR"), hv=hv)
    node = scale(vr, "intra-node tray01")
    assert node.status == "skip" and node.threshold is None
    assert node.measured == pytest.approx(500.0, rel=0.01)
    assert "measured and reported without a floor" in node.message and "gb300-nvl72" in node.message
    off = scale(vr, "intra-domain nvl72-a", 0)
    pred = 4 * 800 / 8  # 4 rails x 800 Gb/s, below NVLink 5's 900 GB/s
    assert off.status == "pass" and off.threshold == pytest.approx(model.band().low * pred)
    assert "no published per-NIC floor" in off.details["floor_basis"]
    assert scale(vr, "intra-domain nvl72-a", 1).status == "pass"


def test_other_profiles_keep_the_single_run_even_with_a_domain_variable():
    from test_nccl_phase import FakeMpi, run_phase
    from test_nccl_phase import hostvars as hgx_hostvars

    fake = FakeMpi()
    vr = run_phase(fake, hv=hgx_hostvars(fabricops_nvlink_domain="nvl72-a"))
    [b] = [r for r in vr.results if r.check == "nccl_busbw"]
    assert b.status == "pass" and b.device == "all_reduce" and "scale" not in b.details
    assert len(fake.calls) == 1 and "MNNVL" not in fake.calls[0][1]


# --- the report ------------------------------------------------------------------------------------


def test_terminal_and_json_show_the_per_scale_table():
    vr = run_nccl(FakeNvl(nvl={"nvl72-b": 150.0}))
    text = report.terminal(vr)
    lines = text.splitlines()
    i = lines.index("NCCL SCALES (busbw GB/s at the largest size)")
    assert lines[i + 1].split() == ["group", "hosts", "MNNVL", "busbw", "floor", "verdict"]
    rows = [ln for ln in lines[i:] if ln.lstrip().startswith("intra-domain nvl72-b all_reduce")]
    row = next(ln for ln in rows if " 1 " in ln)
    assert "tray05..tray08 (4)" in row and "149.4" in row and row.rstrip().endswith("FAIL")
    assert any(ln.startswith("  cause, intra-domain nvl72-b: NVLink (") for ln in lines)
    data = json.loads(report.to_json(vr))
    rows = data["nccl_scales"]
    assert len(rows) == 8 + 4 + 1
    r = next(x for x in rows if x["group"] == "intra-domain nvl72-b" and x["mnnvl"] == 1)
    assert (r["verdict"], r["hosts"], r["busbw"]) == ("FAIL", B, pytest.approx(150.0, rel=0.01))
    assert r["cause"].startswith("NVLink")


def test_json_has_no_table_for_other_profiles():
    from test_nccl_phase import FakeMpi, run_phase

    vr = run_phase(FakeMpi())
    assert json.loads(report.to_json(vr))["nccl_scales"] is None
    assert "NCCL SCALES" not in report.terminal(vr)


def test_a_tray_whose_imex_is_down_keeps_its_domains_mnnvl_run_from_starting():
    """Through verify(): the IMEX domain check runs first (also under --only nccl) and a domain it did
    not pass gets no MNNVL=1 run; the other domain, its network runs and every tray's own run go on."""
    fake = FakeNvl(imex_down={"tray02"})
    vr = run_nccl(fake)
    [dom] = [r for r in vr.results if r.check == "imex_domain" and r.status != "pass"]
    assert dom.device == "nvl72-a" and "tray02" in dom.details["down"], dom.message
    started = {tuple(h.split(":")[0] for h in shlex.split(c)[shlex.split(c).index("-H") + 1].split(","))
               for _, c in fake.commands(mnnvl=1)}
    assert started == {tuple(B)}, started
    blocked = scale(vr, "intra-domain nvl72-a", 1)
    assert blocked.status == "error" and "imex_domain nvl72-a" in (blocked.caused_by or ""), blocked.message
    assert scale(vr, "intra-domain nvl72-a", 0).status == "pass"
