"""`fabricops plan --profile gb200-nvl72|gb300-nvl72`: NVLink domains, the scale-out rails, the written
inventory's domains (as nvidia_imex and `fabricops topology --format block` read them) and usage errors."""

from __future__ import annotations

import json

import pytest
import yaml

from fabricops import cli, imex
from fabricops.plan import nvl, writers
from fabricops.plan.catalog import PlanInputError
from fabricops.plan.recommend import make_plan
from fabricops.sched import topology as sched_topology
from fabricops_lab import topology as lab_topology


def run(capsys, *argv):
    rc = cli.main(["plan", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def rows(out: str) -> dict[str, str]:
    return {line[:18].strip(): line[18:] for line in out.splitlines() if not line.startswith("note")}


# (profile, gpus, extra) -> trays, domains, trays per domain, racks, NVLink switch trays, switches, cables
SIZES = [
    ("gb200-nvl72", 72, {}, 18, {"nvl72-01": 18}, 1, 9, {"leaf": 4, "spine": 2},
     {"host_leaf": 72, "leaf_spine": 128}),
    ("gb200-nvl72", 144, {}, 36, {"nvl72-01": 18, "nvl72-02": 18}, 2, 18, {"leaf": 8, "spine": 4},
     {"host_leaf": 144, "leaf_spine": 256}),
    ("gb200-nvl72", 100, {}, 25, {"nvl72-01": 18, "nvl72-02": 7}, 2, 18, {"leaf": 4, "spine": 2},
     {"host_leaf": 100, "leaf_spine": 128}),
    ("gb200-nvl72", 72, {"domain_size": 9}, 18, {"nvl72-01": 9, "nvl72-02": 9}, 2, 18,
     {"leaf": 4, "spine": 2}, {"host_leaf": 72, "leaf_spine": 128}),
    # 36x2: two racks of 9 trays and 9 NVL36 switch trays each per domain
    ("gb200-nvl72", 144, {"nvl_config": "36x2"}, 36, {"nvl72-01": 18, "nvl72-02": 18}, 4, 36,
     {"leaf": 8, "spine": 4}, {"host_leaf": 144, "leaf_spine": 256}),
    ("gb200-nvl72", 100, {"nvl_config": "36x2"}, 25, {"nvl72-01": 18, "nvl72-02": 7}, 3, 27,
     {"leaf": 4, "spine": 2}, {"host_leaf": 100, "leaf_spine": 128}),
    # GB300: 4 x ConnectX-8 XDR 800 per tray on 144-port Quantum-X800: one switch up to 36 trays
    ("gb300-nvl72", 72, {}, 18, {"nvl72-01": 18}, 1, 9, {"leaf": 1}, {"host_leaf": 72}),
    ("gb300-nvl72", 144, {}, 36, {"nvl72-01": 18, "nvl72-02": 18}, 2, 18, {"leaf": 1}, {"host_leaf": 144}),
    ("gb300-nvl72", 148, {}, 37, {"nvl72-01": 18, "nvl72-02": 18, "nvl72-03": 1}, 3, 27,
     {"leaf": 4, "spine": 2}, {"host_leaf": 148, "leaf_spine": 288}),
]


IDS = [f"{s[0]}-{s[1]}-{'-'.join(map(str, s[2].values())) or 'max'}" for s in SIZES]


@pytest.mark.parametrize(("profile", "gpus", "kw", "trays", "domains", "racks", "nvsw", "switches", "cables"),
                         SIZES, ids=IDS)
def test_domains_and_scale_out(profile, gpus, kw, trays, domains, racks, nvsw, switches, cables):
    plan = make_plan(gpus, profile=profile, **kw)
    n, d = plan.nvlink, plan.design
    assert (n.gpus, n.trays, n.gpus_per_tray, n.hcas_per_tray) == (gpus, trays, 4, 4)
    assert n.domain_trays == domains and n.domains == len(domains)
    assert n.full_domains == sum(t == n.domain_size for t in domains.values())
    assert n.partial == (len(set(domains.values())) > 1) and n.last_domain_trays == list(domains.values())[-1]
    assert (n.racks, n.switch_trays) == (racks, nvsw)
    # the scale-out network: one rail per HCA, the existing fat-tree sizing per rail
    assert (d.nodes, d.rails, d.end_ports, d.gpus_per_node) == (trays, 4, trays * 4, 4)
    assert d.switches == switches and d.cables == cables
    assert plan.hardware_profile == profile and plan.recommendation.scenario == "nvlink_domains"


def test_gb200_uses_ndr_quantum2_and_gb300_xdr_quantum_x800():
    a, b = make_plan(72, profile="gb200-nvl72"), make_plan(72, profile="gb300-nvl72")
    assert (a.switch.model, a.design.port_rate_gbps, a.host_speed) == ("QM9700", 400, "NDR")
    assert (b.switch.model, b.design.port_rate_gbps, b.host_speed) == ("Q3400", 800, "XDR")
    assert a.design.leaves_per_rail == 1 and a.design.rail_optimised
    assert b.design.bisection_gbps == 72 / 2 * 800


def test_nvlink_switch_trays_per_rack_follow_nvidia():
    """9 NVLink switch trays per NVL72 rack (GB200 tuning guide; GB300 enterprise RA); 36x2: 9 per rack."""
    for platform, rows_ in nvl.CONFIGURATIONS.items():
        for cfg in rows_.values():
            assert cfg.switch_trays_per_rack == 9 and cfg.max_trays == 18, platform
            assert cfg.source.startswith(cfg.doc) and "docs.nvidia.com" in cfg.source
    assert make_plan(72, profile="gb200-nvl72").nvlink.switch_trays_per_domain == 9
    assert make_plan(144, profile="gb200-nvl72", nvl_config="36x2").nvlink.switch_trays_per_domain == 18


def test_domains_instead_of_gpus():
    plan = make_plan(None, profile="gb200-nvl72", domains=3)
    n = plan.nvlink
    assert (n.gpus, n.trays, n.domains, n.partial) == (216, 54, 3, False)
    small = make_plan(None, profile="gb300-nvl72", domains=2, domain_size=8)
    assert small.nvlink.domain_trays == {"nvl72-01": 8, "nvl72-02": 8} and small.nvlink.gpus == 64


def test_one_domain_is_bound_by_nvlink_many_by_the_nics():
    one, two = make_plan(72, profile="gb200-nvl72"), make_plan(144, profile="gb200-nvl72")
    assert one.comm.busbw_gbs == 900 and "NVLink 5" in one.comm.busbw_basis
    assert two.comm.busbw_gbs == 46 and "400 Gb/s NIC x 4/4" in two.comm.busbw_basis


def test_one_tray_has_no_scale_out():
    plan = make_plan(4, profile="gb200-nvl72")
    assert plan.design.topology == "none" and plan.switch is None
    assert plan.nvlink.domain_trays == {"nvl72-01": 1}


def test_domain_names_widen_past_99():
    assert nvl.domain_names(3) == ["nvl72-01", "nvl72-02", "nvl72-03"]
    assert nvl.domain_names(100)[-1] == "nvl72-100" and nvl.domain_names(100)[0] == "nvl72-001"


@pytest.mark.parametrize(
    ("kw", "fix"),
    [
        ({"gpus": 102, "profile": "gb200-nvl72"},
         "--gpus 102 is not a multiple of the 4 GPUs of a gb200-nvl72 compute tray: use 104 or 100 GPUs"),
        ({"gpus": 2, "profile": "gb200-nvl72"}, "use 4 GPUs"),
        ({"gpus": 72, "profile": "gb200-nvl72", "domain_size": 19},
         "--domain-size 19 is more than the 18 compute trays one NVLink domain of gb200-nvl72 holds"),
        ({"gpus": 64, "profile": "hgx-h100-ndr", "domain_size": 9},
         "--domain-size needs a hardware profile with a multi-node NVLink domain"),
        ({"gpus": 64, "profile": "hgx-h100-ndr"}, "hgx-h100-ndr's NVLink fabric ends at the server"),
        ({"gpus": 64, "domain_size": 9}, "--domain-size needs --profile"),
        ({"gpus": 72, "profile": "gb300-nvl72", "nvl_config": "36x2"},
         "--nvl-config 36x2 is not a documented configuration of gb300-nvl72 (use 72x1)"),
        ({"gpus": 72, "profile": "gb200-nvl72", "switch": "QM8700"},
         "--switch QM8700 has HDR InfiniBand ports and gb200-nvl72's HCAs run NDR InfiniBand: use QM9700"),
        ({"gpus": 72, "profile": "gb200-nvl72", "domains": 1}, "not both"),
        ({"gpus": None, "profile": "gb200-nvl72"}, "give --gpus or --domains"),
        ({"gpus": 72, "profile": "gb200-nvl72", "gpus_per_node": 8}, "4 GPUs per compute tray"),
        ({"gpus": 72, "profile": "gb200-nvl72", "rails": 8}, "4 HCAs per compute tray"),
        ({"gpus": 72, "profile": "nope"}, "unknown hardware profile 'nope'"),
    ],
)
def test_bad_input(kw, fix):
    gpus = kw.pop("gpus")
    with pytest.raises(PlanInputError) as exc:
        make_plan(gpus, **kw)
    assert fix in str(exc.value)


def test_table_100_gpus(capsys):
    rc, out, err = run(capsys, "--profile", "gb200-nvl72", "--gpus", "100")
    assert rc == 0 and err == ""
    r = rows(out)
    assert r["GPUs"] == "100 (25 compute tray(s) x 4)"
    assert r["NVLink domains"] == "2 of up to 18 trays (72 GPUs); the last has 7 tray(s)"
    assert r["domain trays"] == "nvl72-01 18, nvl72-02 7"
    assert r["NVLink switch"].startswith("9 switch trays per domain, 18 in all (NVIDIA GB200 NVL Multi-Node")
    assert r["switches"] == "leaf 4, spine 2 (total 6)"
    assert r["cables"] == "host_leaf 100, leaf_spine 128 (total 228)"
    assert "note              partial last NVLink domain: nvl72-02 has 7 of 18 compute trays (28 GPUs)" in out


def test_json(capsys):
    rc, out, _ = run(capsys, "--profile", "gb300-nvl72", "--domains", "2", "--json", "-")
    data = json.loads(out)
    assert rc == 0 and data["nvlink"]["gpus"] == 144 and data["nvlink"]["switch_trays"] == 18
    assert data["nvlink"]["partial"] is False and data["design"]["switches"] == {"leaf": 1}
    assert data["inputs"]["profile"] == "gb300-nvl72" and data["hardware_profile"] == "gb300-nvl72"
    rc, out, _ = run(capsys, "--gpus", "64", "--json", "-")
    assert json.loads(out)["nvlink"] is None


@pytest.mark.parametrize(
    ("argv", "fix"),
    [
        (["--profile", "gb200-nvl72", "--gpus", "72", "--domain-size", "19"],
         "is more than the 18 compute trays"),
        (["--profile", "hgx-h100-ndr", "--gpus", "64", "--domain-size", "9"],
         "NVLink fabric ends at the server"),
        (["--gpus", "64", "--domain-size", "9"], "--domain-size needs --profile"),
        (["--profile", "gb200-nvl72", "--gpus", "102"], "not a multiple of the 4 GPUs"),
        (["--profile", "gb200-nvl72", "--gpus", "72", "--domain-size", "0"],
         "0 is not a positive whole number"),
        (["--profile", "gb200-nvl72"], "required: --gpus (or --domains with --profile)"),
        (["--profile", "gb200-nvl72", "--domains", "x"], "'x' is not a whole number"),
        (["--profile", "./nope.yml", "--gpus", "72"], "cannot read profile file ./nope.yml"),
    ],
)
def test_cli_errors_exit_2_with_one_sentence(capsys, argv, fix):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "" and "Traceback" not in err
    assert err.startswith("fabricops plan: ") and fix in err
    assert len(err.strip().splitlines()) == 1


def test_help_names_the_options(capsys):
    try:
        rc = cli.main(["plan", "--help"])
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr().out
    assert rc == 0
    for flag in ("--profile", "--domain-size", "--domains", "--nvl-config"):
        assert flag in out


def test_written_inventory_puts_every_tray_in_its_domain(tmp_path, capsys):
    rc, out, _ = run(capsys, "--profile", "gb200-nvl72", "--gpus", "100", "--write-inventory", str(tmp_path))
    assert rc == 0 and f"wrote {tmp_path / 'hosts.yml'}" in out
    text = (tmp_path / "hosts.yml").read_text()
    assert "nodes_config.cfg by nvidia_imex_address or ansible_host" in text
    hosts = yaml.safe_load(text)["all"]["children"]["gpu_hosts"]["hosts"]
    assert len(hosts) == 25
    domains = {h: v["fabricops_nvlink_domain"] for h, v in hosts.items()}
    assert [h for h, dom in domains.items() if dom == "nvl72-01"] == [f"gpu{i:02d}" for i in range(1, 19)]
    assert [h for h, dom in domains.items() if dom == "nvl72-02"] == [f"gpu{i:02d}" for i in range(19, 26)]
    gv = yaml.safe_load((tmp_path / "group_vars" / "all.yml").read_text())
    assert gv["fabricops_hardware_profile"] == "gb200-nvl72"
    assert gv["fabricops_plan"]["nvlink"] == {
        "profile": "gb200-nvl72",
        "configuration": "72x1",
        "domain_size": 18,
        "domains": {"nvl72-01": 18, "nvl72-02": 7},
        "switch_trays_per_domain": 9,
    }
    assert len(gv["fabricops_cabling"]) == 100
    assert {c["hca"] for c in gv["fabricops_cabling"]} == {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}
    # what nvidia_imex reads: the profile runs IMEX; with addresses filled in, each tray lists its domain
    assert imex.refusal("gpu01", gv["fabricops_hardware_profile"]) == ""
    members = {h: {"domain": dom, "address": f"10.0.0.{i + 1}"} for i, (h, dom) in enumerate(domains.items())}
    first = imex.domain("gpu01", members, imex.profile_max_nodes("gb200-nvl72"), "gb200-nvl72")
    last = imex.domain("gpu25", members, imex.profile_max_nodes("gb200-nvl72"), "gb200-nvl72")
    assert first["errors"] == [] and len(first["nodes"]) == 18
    assert last["errors"] == [] and last["nodes"] == [f"10.0.0.{i}" for i in range(19, 26)]
    # ... and what `fabricops topology --format block` reads
    conf = sched_topology.block_conf(domains)
    assert "BlockName=nvl72-01 Nodes=gpu[01-18]" in conf and "BlockName=nvl72-02 Nodes=gpu[19-25]" in conf
    # the lab slice: the first trays of the first domain, shaped like a tray, as the lab loads it
    topo = lab_topology.load(tmp_path / "lab-topology.yml")
    assert [h["name"] for h in topo["hosts"]] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert topo["hosts"][0]["gpus"]["count"] == 4 and topo["hosts"][0]["gpus"]["nvlink_gen"] == 5
    assert len(topo["hosts"][0]["hcas"]) == 4 and topo["hardware_profile"] == "gb200-nvl72"
    assert "The lab has no NVLink domains" in (tmp_path / "lab-topology.yml").read_text()


@pytest.mark.parametrize(("gpus", "kw"), [(72, {}), (4, {}), (148, {"profile": "gb300-nvl72"}),
                                          (1440, {"domain_size": 16})])
def test_every_nvl_slice_validates_and_hosts_stay_in_the_lab_limit(gpus, kw):
    plan = make_plan(gpus, **{"profile": "gb200-nvl72", **kw})
    raw = yaml.safe_load(yaml.safe_dump(writers.lab_slice(plan)))
    topo = lab_topology.normalise(raw, source="test")
    assert 2 <= len(topo["hosts"]) <= writers.LAB_MAX_SLICE_HOSTS <= writers.LAB_MAX_HOSTS
    assert all(h["gpus"]["count"] == 4 for h in topo["hosts"])


def test_hgx_inventory_has_no_domains(tmp_path):
    writers.write(make_plan(64), tmp_path)
    hosts = yaml.safe_load((tmp_path / "hosts.yml").read_text())["all"]["children"]["gpu_hosts"]["hosts"]
    assert all(v in ({}, None) for v in hosts.values())
    gv = yaml.safe_load((tmp_path / "group_vars" / "all.yml").read_text())
    assert "nvlink" not in gv["fabricops_plan"]
    assert "NVLink domains" not in (tmp_path / "hosts.yml").read_text()
