"""The roce_host role's boot-time pieces: the apply/verify program (fabricops.hostside.roce_boot, which
the role ships from the installed package behind a launcher), its config and the unit.

The program runs against the emulated host (the lab's emulated mlnx_qos, cma_roce_* and sysfs knobs):
apply converges, verify passes; an openibd restart loses the state, verify says so, apply restores.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2
import pytest
from unit.hostqos.emulated import DEVICE, NETDEV, hardware, host  # noqa: F401  (fixture)

from fabricops.hostqos import mlnx_qos as q
from fabricops.hostqos.plan import host_plan
from fabricops.hostside import roce_boot

ROLE = Path(__file__).resolve().parents[3] / "roles" / "roce_host"
MANAGED = "Ansible managed: do not edit"
# the package module the role ships (no value is pasted into its code) and the role's launcher of it
SCRIPT = Path(roce_boot.__file__)
LAUNCHER = "fabricops-roce-qos-launcher.j2"
ROCE = {"lossless_priority": 3, "dscp": 26, "cable_length_m": 7}


def render(name: str, **extra) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ROLE / "templates")),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["to_nice_json"] = lambda v, indent=4, sort_keys=True: json.dumps(
        v, indent=indent, sort_keys=sort_keys
    )
    hcas = [{"name": h["name"], "ports": h["ports"]} for h in hardware()["hcas"]]
    ctx = {
        "ansible_managed": MANAGED,
        "roce_host_config_path": "/etc/fabricops/roce-qos.json",
        "roce_host_script_path": "/usr/local/sbin/fabricops-roce-qos",
        "roce_host_boot_wait_s": 0,
        "roce_host_unit_name": "fabricops-roce-qos.service",
        "__roce_host_has_openibd": True,
        "__roce_host_plan": host_plan(ROCE, hcas),
        "__roce_host_lib_dir": "/usr/local/lib/fabricops",
        **extra,
    }
    return env.get_template(name).render(**ctx)


@pytest.fixture
def script(tmp_path):
    config = tmp_path / "roce-qos.json"
    config.write_text(render("roce-qos.json.j2"))
    return lambda action, system: roce_boot.main([action], system=system, config=str(config), wait_s=0)


def qos(host):  # noqa: F811
    return q.have_from(q.parse(host.run(["mlnx_qos", "-i", NETDEV])[1]))


def test_templates_have_header_and_no_timestamp():
    for name in ("roce-qos.json.j2", "fabricops-roce-qos.service.j2", LAUNCHER):
        text = render(name)
        assert MANAGED in text.splitlines()[1 if text.startswith("#!") else 0]
        assert not re.search(r"\d{4}-\d{2}-\d{2}|\d{2}:\d{2}:\d{2}", text), name
        assert render(name) == text  # deterministic
    launcher = render(LAUNCHER)
    assert launcher.startswith("#!/usr/bin/python3 -I\n")
    assert 'sys.path.insert(0, "/usr/local/lib/fabricops")' in launcher
    assert "from fabricops.hostside.roce_boot import main" in launcher
    script = SCRIPT.read_text()
    assert "{{" not in script and "{%" not in script  # not a template: nothing is pasted into the code


def test_script_reads_the_config_path_from_the_unit_and_wait_from_the_config(tmp_path, host, capsys):  # noqa: F811
    mod = roce_boot
    config = tmp_path / "odd path's \"config\".json"
    config.write_text(render("roce-qos.json.j2", roce_host_boot_wait_s=0))
    assert mod.main(["apply", "--config", str(config)], system=host) == 0
    assert f"match {config}" in capsys.readouterr().out
    assert mod.main(["verify", "--config"], system=host) == 2  # --config without a path
    text = "".join(line for line in config.read_text().splitlines(True) if not line.startswith("#"))
    doc = json.loads(text)
    assert doc["boot_wait_s"] == 0


def test_config_is_the_plan():
    text = render("roce-qos.json.j2")
    doc = json.loads("".join(line for line in text.splitlines(True) if not line.startswith("#")))
    (port,) = doc["ports"]
    assert (port["netdev"], port["device"], port["port"]) == (NETDEV, DEVICE, 1)
    assert port["mlnx_qos"]["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert port["sysfs"]["traffic_class"] == 106


def test_unit_orders_after_openibd_and_before_network():
    unit = render("fabricops-roce-qos.service.j2")
    assert "Type=oneshot" in unit and "RemainAfterExit=yes" in unit
    assert re.search(r"^After=.*openibd\.service", unit, re.M)
    assert "PartOf=openibd.service" in unit and "Before=network-pre.target" in unit
    assert re.search(r"^WantedBy=multi-user\.target openibd\.service$", unit, re.M)
    assert "ExecStart=/usr/local/sbin/fabricops-roce-qos apply" in unit
    exec_start = (r"^ExecStart=/usr/local/sbin/fabricops-roce-qos apply "
                  r"--config /etc/fabricops/roce-qos\.json$")
    assert re.search(exec_start, unit, re.M)
    bare = render("fabricops-roce-qos.service.j2", __roce_host_has_openibd=False)
    assert "openibd" not in bare and re.search(r"^WantedBy=multi-user\.target$", bare, re.M)


def test_apply_then_verify_on_a_fresh_host(script, host, capsys):  # noqa: F811
    assert script("verify", host) == 1
    out = capsys.readouterr().out
    # the package's phrases (fabricops.hostqos.mlnx_qos.verify, fabricops.hostqos.knobs.verify)
    assert f"{NETDEV}: trust is pcp, want dscp" in out
    assert f"{NETDEV}: traffic_class is unset, want 106" in out
    assert script("apply", host) == 0
    have = qos(host)
    assert have.trust == "dscp" and have.pfc == (0, 0, 0, 1, 0, 0, 0, 0) and have.cable_len == 7
    assert have.dscp2prio[26] == 3 and have.dscp2prio[48] == 6
    assert host.read(f"/sys/class/infiniband/{DEVICE}/tc/1/traffic_class") == "106"
    assert host.run(["cma_roce_tos", "-d", DEVICE, "-p", "1"])[1].strip() == "106"
    assert [
        "mlnx_qos",
        "-i",
        NETDEV,
        "--trust",
        "dscp",
        "--pfc",
        "0,0,0,1,0,0,0,0",
        "--cable_len",
        "7",
    ] in host.ran
    assert script("verify", host) == 0


def test_openibd_restart_loses_state_and_apply_restores_it(script, host, capsys):  # noqa: F811
    assert script("apply", host) == 0
    host.openibd_restart()
    assert qos(host).trust == "pcp"  # what the driver restart does to mlnx_qos state
    assert script("verify", host) == 1
    assert (
        f"{NETDEV}: pfc is 0,0,0,0,0,0,0,0, want 0,0,0,1,0,0,0,0" in capsys.readouterr().out
    )
    assert script("apply", host) == 0
    assert qos(host).pfc == (0, 0, 0, 1, 0, 0, 0, 0)


def test_drift_in_a_sysfs_knob_is_reported(script, host, capsys):  # noqa: F811
    assert script("apply", host) == 0
    host.write(f"/sys/class/net/{NETDEV}/ecn/roce_np/enable/3", "0")
    capsys.readouterr()
    assert script("verify", host) == 1
    assert capsys.readouterr().out.strip() == f"{NETDEV}: ecn_np[3] is 0, want 1"


def test_unreadable_config_exits_2(tmp_path, script, host):  # noqa: F811
    mod = roce_boot
    assert mod.main(["apply"], system=host, config=str(tmp_path / "missing.json"), wait_s=0) == 2
    assert mod.main(["bogus"], system=host, config=str(tmp_path / "missing.json"), wait_s=0) == 2


def test_a_config_the_package_refuses_exits_2_and_changes_nothing(tmp_path, host, capsys):  # noqa: F811
    """The package's own checks (hostqos.mlnx_qos.want_from, hostqos.knobs.knobs_for) run on every
    port before anything is touched."""
    text = render("roce-qos.json.j2")
    good = json.loads("".join(line for line in text.splitlines(True) if not line.startswith("#")))
    for mutate, phrase in (
        (lambda p: p["mlnx_qos"].update(pfc=[0, 0, 0, 1]), "pfc must be 8 values of 0 or 1"),
        (lambda p: p["sysfs"].update(roce_mode=3), "roce_mode must be 1 or 2"),
        (lambda p: p["sysfs"].update(ecn_np=[True]), "ecn_np must list 8 priorities"),
    ):
        doc = json.loads(json.dumps(good))
        doc["ports"].append(json.loads(json.dumps(doc["ports"][0])))
        mutate(doc["ports"][1])  # the second port is bad: the first must not be applied either
        config = tmp_path / "bad.json"
        config.write_text(json.dumps(doc))
        assert roce_boot.main(["apply", "--config", str(config)], system=host, wait_s=0) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"fabricops-roce-qos: cannot read {config}:") and phrase in err, err
        assert host.ran == []
