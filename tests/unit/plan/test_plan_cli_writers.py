"""`fabricops plan` output, JSON, exit status 2, and the inventory / lab topology writer."""

from __future__ import annotations

import collections
import json
import stat

import pytest
import yaml

from fabricops import cli
from fabricops.model import roce
from fabricops.plan import writers
from fabricops.plan.recommend import make_plan
from fabricops_lab import topology as lab_topology


def run(capsys, *argv):
    rc = cli.main(["plan", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_table_512(capsys):
    rc, out, err = run(capsys, "--gpus", "512")
    assert rc == 0 and err == ""
    rows = dict(
        line.split(None, 1) if "  " not in line else [s.strip() for s in line.split("  ", 1)]
        for line in out.splitlines()
    )
    assert rows["scenario"] == "small_cluster"
    assert rows["topology"].startswith("two-tier fat tree, 2 tier(s), up to 2,048 end ports with radix 64")
    assert rows["switches"] == "leaf 16, spine 8 (total 24)"
    assert rows["cables"] == "host_leaf 512, leaf_spine 512 (total 1,024)"
    assert rows["bisection"] == "102.4 Tb/s per direction"
    assert rows["gradients"] == "14.00 GB per rank per step"


def test_json_7b_fp32(capsys, tmp_path):
    f = tmp_path / "plan.json"
    rc, _out, _err = run(
        capsys, "--gpus", "64", "--precision", "fp32", "--model-params", "7e9", "--json", str(f)
    )
    assert rc == 0
    assert stat.S_IMODE(f.stat().st_mode) == 0o600  # a report is the user's until they share it
    data = json.loads(f.read_text())
    assert data["comm"]["gradient_bytes"] == 28_000_000_000
    assert data["comm"]["collective_bytes_per_rank"] == pytest.approx(2 * 63 / 64 * 28e9)
    assert data["design"]["topology"] == "single switch"
    assert data["design"]["switches"] == {"leaf": 1}
    assert data["switch"]["model"] == "QM9700" and data["switch"]["port_rate_gbps"] == 400
    assert data["recommendation"]["scenario"] == "small_cluster"
    assert data["rule_of_thumb"]["topology"] == "single switch"


def test_json_to_stdout(capsys):
    rc, out, _ = run(capsys, "--gpus", "16384", "--json", "-")
    assert rc == 0
    data = json.loads(out[out.index("{") :])
    assert data["design"]["switches"] == {"leaf": 512, "spine": 512, "core": 256}


@pytest.mark.parametrize(
    ("argv", "fix"),
    [
        (["--gpus", "-8"], "--gpus must be a positive whole number"),
        (["--gpus", "0"], "--gpus must be a positive whole number"),
        (["--gpus", "12"], "--gpus 12 is not a multiple of --gpus-per-node 8: use 16 or 8 GPUs"),
        (["--gpus", "64", "--switch", "XYZ"], "unknown switch 'XYZ'"),
        (["--gpus", "64", "--precision", "fp64"], "unknown precision 'fp64'"),
        (["--gpus", "64", "--gpus-per-node", "32"], "--gpus-per-node must be a whole number from 1 to 16"),
        (["--gpus", "64", "--oversubscription", "0.5"], "oversubscription must be 1"),
        (["--gpus", "64", "--model-params", "0"], "--model-params: 0 parameters would give no plan"),
        (["--gpus", "64", "--model-params", "1e20"], "give a number from 1 to 1e+15"),
        (["--gpus", "64", "--hidden", "0"], "--hidden: 0 is not a positive whole number"),
    ],
)
def test_bad_input_exits_2_with_one_sentence(capsys, argv, fix):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.startswith("fabricops plan: ") and fix in err
    assert len(err.strip().splitlines()) == 1


def _check_cabling(plan):
    host_cables, links, names = writers.cabling(plan)
    d = plan.design
    assert len(host_cables) == d.cables["host_leaf"]
    by_tier = collections.Counter(link["tier"] for link in links)
    for tier in ("leaf_spine", "spine_core", "global"):
        assert by_tier.get(tier, 0) == d.cables.get(tier, 0)
    for tier, n in d.switches.items():
        assert len(names[tier]) == n
    used = collections.Counter()
    for c in host_cables:
        used[(c["switch"], c["switch_port"])] += 1
    for link in links:
        used[(link["switch_a"], link["port_a"])] += 1
        used[(link["switch_b"], link["port_b"])] += 1
    assert max(used.values()) == 1, "a switch port is cabled twice"
    for _sw, port in used:
        n = int("".join(ch for ch in port if ch.isdigit()) if "/" not in port else port.split("/")[1])
        assert 1 <= n <= d.radix
    # rail-optimised: rail r of every host lands in rail r's leaf group
    if d.rail_optimised and d.tiers >= 2 and d.topology != "Dragonfly+":
        for c in host_cables:
            assert c["switch"].startswith(f"leaf-r{int(c['hca'].split('_')[1]) + 1}-")
    return host_cables, links


@pytest.mark.parametrize(
    ("gpus", "kw"),
    [
        (64, {}),
        (512, {}),
        (264, {}),
        (4096, {}),
        (8, {"gpus_per_node": 1, "rails": 1}),
        (3000, {"gpus_per_node": 1, "rails": 1}),
        (256, {"budget": "low"}),
        (800, {"budget": "medium", "gpus_per_node": 8}),
        (20000, {"switch": "SN4700", "gpus_per_node": 8}),
    ],
)
def test_cabling_plan_is_consistent(gpus, kw):
    _check_cabling(make_plan(gpus, **kw))


def test_write_inventory_and_lab_topology(tmp_path, capsys):
    rc, out, _ = run(capsys, "--gpus", "512", "--write-inventory", str(tmp_path))
    assert rc == 0 and f"wrote {tmp_path / 'lab-topology.yml'}" in out
    hosts = yaml.safe_load((tmp_path / "hosts.yml").read_text())
    children = hosts["all"]["children"]
    assert len(children["gpu_hosts"]["hosts"]) == 64
    assert "gpu01" in children["gpu_hosts"]["hosts"] and "gpu64" in children["gpu_hosts"]["hosts"]
    assert len(children["ib_switches"]["hosts"]) == 24
    assert children["ib_switches"]["hosts"]["spine-01"]["fabricops_switch_tier"] == "spine"
    gv = yaml.safe_load((tmp_path / "group_vars" / "all.yml").read_text())
    assert gv["fabricops_hardware_profile"] == "hgx-h100-ndr"
    assert "fabricops_roce" not in gv
    assert len(gv["fabricops_cabling"]) == 512
    assert gv["fabricops_cabling"][0] == {
        "host": "gpu01",
        "netdev": "ibp26s0",
        "hca": "mlx5_0",
        "port": 1,
        "switch": "leaf-r1-01",
        "switch_port": "1",
    }
    assert len(gv["fabricops_switch_links"]) == 512
    topo = lab_topology.load(tmp_path / "lab-topology.yml")
    assert [h["name"] for h in topo["hosts"]] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert topo["hardware_profile"] == "hgx-h100-ndr"
    assert len(topo["hosts"][0]["hcas"]) == 8
    assert topo["hosts"][0]["gpus"]["count"] == 8 and topo["hosts"][0]["gpus"]["nvlink_gen"] == 4
    # the leaves of a two-tier slice: the plan's first leaf of every rail, then two of its spines
    leaves = [s["name"] for s in topo["switches"] if s["tier"] == "leaf"]
    assert leaves == [f"leaf-r{r}-01" for r in range(1, 9)]
    assert [s["name"] for s in topo["switches"] if s["tier"] == "spine"] == ["spine-01", "spine-02"]
    assert all(s["os"] == "ib" for s in topo["switches"])
    assert len(topo["cabling"]) == 32
    # the slice cables each host like the plan does (same leaf, same port)
    plan_cables = {(c["host"], c["netdev"]): (c["switch"], c["switch_port"]) for c in gv["fabricops_cabling"]}
    for c in topo["cabling"]:
        assert plan_cables[(c["host"], c["netdev"])] == (c["switch"], c["switch_port"])
    # ... and links its leaves to its spines like the plan does (same ports), every leaf to both
    plan_links = {
        (ln["switch_a"], ln["port_a"]): (ln["switch_b"], ln["port_b"]) for ln in gv["fabricops_switch_links"]
    }
    assert topo["links"] and all(
        plan_links[(ln["switch_a"], ln["port_a"])] == (ln["switch_b"], ln["port_b"]) for ln in topo["links"]
    )
    assert {(ln["switch_a"], ln["switch_b"]) for ln in topo["links"]} == {
        (f"leaf-r{r}-01", s) for r in range(1, 9) for s in ("spine-01", "spine-02")
    }
    assert all(ln["gbps"] == 400 and ln["tier"] == "leaf_spine" for ln in topo["links"])
    assert "Two tiers of the plan: 8 leaves, 2 spines" in (tmp_path / "lab-topology.yml").read_text()


def test_write_roce_inventory(tmp_path):
    plan = make_plan(256, budget="low")
    writers.write(plan, tmp_path)
    gv = yaml.safe_load((tmp_path / "group_vars" / "all.yml").read_text())
    r = roce.validate(gv["fabricops_roce"])
    assert (r.lossless_priority, r.dscp, r.cnp_dscp, r.cnp_priority) == (3, 26, 48, 6)
    assert (r.ecn.min_kb, r.ecn.max_kb) == (150, 1500)
    assert r.tos == 106 and r.pfc_vector == [0, 0, 0, 1, 0, 0, 0, 0]
    hosts = yaml.safe_load((tmp_path / "hosts.yml").read_text())
    sw = hosts["all"]["children"]["switches"]["children"]["cumulus_switches"]["hosts"]
    assert len(sw) == plan.design.total_switches
    text = (tmp_path / "lab-topology.yml").read_text()
    assert "at most 4 RoCE rails" in text
    topo = lab_topology.load(tmp_path / "lab-topology.yml")
    assert topo["hardware_profile"] == "roce-400g"
    eth = [p for h in topo["hosts"][:1] for hca in h["hcas"] for p in hca["ports"]]
    assert [p["rail"] for p in eth] == [0, 1, 2, 3]
    assert all(p["rate_gbps"] == 400 and p["link_layer"] == "Ethernet" for p in eth)
    assert {s["os"] for s in topo["switches"]} == {"cumulus"}


@pytest.mark.parametrize(
    ("gpus", "kw"),
    [
        (16, {}),
        (64, {}),
        (4096, {}),
        (100_000, {}),
        (256, {"budget": "medium"}),
        (64, {"switch": "SN4700"}),
        (16, {"gpus_per_node": 4, "rails": 2}),
        (256, {"switch": "Q3400"}),
    ],
)
def test_every_written_topology_validates(gpus, kw):
    plan = make_plan(gpus, **kw)
    raw = yaml.safe_load(yaml.safe_dump(writers.lab_slice(plan)))
    topo = lab_topology.normalise(raw, source="test")
    assert 2 <= len(topo["hosts"]) <= 4
    assert all(h["gpus"]["count"] == plan.design.gpus_per_node for h in topo["hosts"])
    if plan.design.tiers >= 2:  # a multi-tier plan: a two-tier slice, every leaf linked to a spine
        tiers = {s["name"]: s["tier"] for s in topo["switches"]}
        assert sorted(set(tiers.values())) == ["leaf", "spine"]
        linked = {ln["switch_a"] for ln in topo["links"]}
        assert linked == {n for n, t in tiers.items() if t == "leaf"}
        assert {ln["switch_b"] for ln in topo["links"]} == {n for n, t in tiers.items() if t == "spine"}
    else:
        assert topo["links"] == [] and {s["tier"] for s in topo["switches"]} == {"leaf"}


def test_single_node_writes_hosts_only(tmp_path):
    writers.write(make_plan(8), tmp_path)
    hosts = yaml.safe_load((tmp_path / "hosts.yml").read_text())
    assert list(hosts["all"]["children"]) == ["gpu_hosts"]
    gv = yaml.safe_load((tmp_path / "group_vars" / "all.yml").read_text())
    assert gv["fabricops_cabling"] == []


def test_the_plan_caps_a_slice_at_the_labs_own_host_limit():
    """The writer keeps the lab's limit as a number (the product does not import the lab)."""
    assert writers.LAB_MAX_HOSTS == lab_topology.MAX_HOSTS
