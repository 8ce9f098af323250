"""The nvidia_imex role and its logic (issue 38, point 2): fabricops.imex on real-shaped input, and the
role run by a real ansible-playbook on localhost - the refusals in its first task (nothing changed),
and its whole task list with the host's reads answered by stand-ins (nvidia-smi -q from a captured
output, dpkg-query, systemctl, stat, apt-cache) and every path it writes inside a temporary directory:
the rendered files, --check --diff, a second run and --check with changed=0. Not proven here: apt, the
hold, mknod, systemd and a real GB200 (issue 38 point 4, the lab)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fabricops import imex

ROOT = Path(__file__).resolve().parents[2]
SMI_Q = ROOT / "tests" / "fixtures" / "nvidia-smi-q" / "h100_80gb_hbm3_a_560.txt"  # driver 560.35.03
FIRST = "Refuse values that could inject into what the role writes, a platform without IMEX"
PROC_DEVICES = (
    "Character devices:\n  1 mem\n195 nvidia\n234 nvidia-caps-imex-channels\n507 nvidia-caps\n"
    "\nBlock devices:\n  8 sd\n"
)


def _members(n: int, domain: str = "nvl72-a", base: int = 11) -> dict:
    return {f"tray{i:02d}": {"domain": domain, "address": f"10.0.0.{base + i}"} for i in range(n)}


# --- fabricops.imex ----------------------------------------------------------------------------


def test_refusal_names_host_profile_and_what_the_platform_uses():
    assert imex.refusal("t1", "gb200-nvl72") == "" and imex.refusal("t1", "gb300-nvl72") == ""
    msg = imex.refusal("t1", "hgx-b200-ndr")
    assert msg.startswith("t1: hardware profile hgx-b200-ndr is a HGX B200 platform")
    assert "fabric manager and the NVLink subnet manager" in msg and "fabricops_site_imex: false" in msg
    assert "no host NVLink service" in imex.refusal("t1", "edr-100")
    assert "no hardware profile" in imex.refusal("t1", "")
    assert imex.refusal("t1", "no-such-profile").startswith("t1: ")


def test_domain_lists_every_node_of_the_hosts_domain_only_sorted_as_addresses():
    members = {
        **_members(3),
        "other": {"domain": "nvl72-b", "address": "10.0.1.5"},
        "tray09": {"domain": "nvl72-a", "address": "10.0.0.9"},
    }
    got = imex.domain("tray00", members, 18, "gb200-nvl72")
    assert got["errors"] == [] and got["domain"] == "nvl72-a"
    assert got["nodes"] == ["10.0.0.9", "10.0.0.11", "10.0.0.12", "10.0.0.13"]
    # every member computes the same list (IMEX numbers nodes by their line)
    assert all(imex.domain(h, members, 18)["nodes"] == got["nodes"] for h in ("tray01", "tray09"))


@pytest.mark.parametrize(
    ("members", "host", "words"),
    [
        ({"t": {"domain": "", "address": "10.0.0.1"}}, "t", "fabricops_nvlink_domain is not set"),
        (
            {**_members(2), "x": {"domain": "nvl72-a", "address": "tray-x.example"}},
            "tray00",
            "is not an IP address",
        ),
        (
            {**_members(2), "x": {"domain": "nvl72-a", "address": "10.0.0.11"}},
            "tray00",
            "both have the IMEX address 10.0.0.11",
        ),
        (_members(19), "tray00", "has 19 nodes"),
    ],
)
def test_domain_refuses_with_one_sentence(members, host, words):
    got = imex.domain(host, members, 18, "gb200-nvl72")
    assert len(got["errors"]) == 1 and words in got["errors"][0] and got["nodes"] == []
    assert got["errors"][0].startswith(f"{host}: ")


def test_config_owns_its_keys_and_checks_them():
    v = imex.config_values(
        node_config_file="/etc/nvidia-imex/nodes_config.cfg",
        server_port=50000,
        cmd_enabled=True,
        cmd_port=50005,
        wait_for_quorum="RECOVERY",
    )
    parsed = imex.parse_config(imex.render_config(v))
    assert parsed == {
        "IMEX_NODE_CONFIG_FILE": "/etc/nvidia-imex/nodes_config.cfg",
        "SERVER_PORT": "50000",
        "BIND_INTERFACE_IP": "",
        "IMEX_CMD_ENABLED": "1",
        "IMEX_CMD_PORT": "50005",
        "IMEX_WAIT_FOR_QUORUM": "RECOVERY",
    }
    assert imex.render_config(v) == imex.render_config(dict(v))  # no timestamps: idempotent
    for bad in (
        {"server_port": 70000},
        {"cmd_port": 50000},
        {"wait_for_quorum": "ALL"},
        {"bind_interface_ip": "eth0"},
        {"node_config_file": "rel/nodes"},
    ):
        kw = (
            dict(
                node_config_file="/n",
                server_port=50000,
                cmd_enabled=True,
                cmd_port=50005,
                wait_for_quorum="NONE",
            )
            | bad
        )
        with pytest.raises(ValueError):
            imex.config_values(**kw)


def test_nodes_file_and_channel_plan():
    assert imex.render_nodes(["10.0.0.11", "10.0.0.12"]) == "10.0.0.11\n10.0.0.12\n"
    with pytest.raises(ValueError):
        imex.render_nodes(["10.0.0.11", "tray2"])
    assert imex.proc_devices_major(PROC_DEVICES) == 234
    assert imex.proc_devices_major("Character devices:\n195 nvidia\n") is None
    ok = {"rc": 0, "stdout": "character special file|ea|0|666\n"}
    assert imex.channel_plan(PROC_DEVICES, ok)["action"] == "none"
    assert imex.channel_plan(PROC_DEVICES, {"rc": 1, "stdout": ""})["action"] == "create"
    wrong = {"rc": 0, "stdout": "character special file|eb|0|666\n"}  # major 235
    assert imex.channel_plan(PROC_DEVICES, wrong)["action"] == "replace"
    assert (
        imex.channel_plan(PROC_DEVICES, {"rc": 0, "stdout": "regular empty file|0|0|644"})["action"]
        == "replace"
    )
    none = imex.channel_plan("Character devices:\n195 nvidia\n", ok)
    assert none["major"] is None and "open GPU kernel module" in none["msg"]


def test_package_is_the_drivers_exact_version():
    assert imex.package_name("570.124.06") == "nvidia-imex-570"
    got = imex.package_choice("570.124.06", ["570.124.04-1", "570.124.06-1"])
    assert got == {
        "ok": True,
        "version": "570.124.06-1",
        "change": True,
        "msg": "install nvidia-imex 570.124.06 for driver 570.124.06",
    }
    assert imex.package_choice("570.124.06", [], "570.124.06-1")["change"] is False
    bad = imex.package_choice("570.124.06", ["570.124.04-1"])
    assert not bad["ok"] and "IMEX 570.124.04 does not match driver 570.124.06" in bad["msg"]


# --- the role, run by ansible-playbook on localhost ------------------------------------------------


def _fakes(bin_dir: Path, *, installed: bool, active: bool) -> None:
    bin_dir.mkdir(exist_ok=True)
    scripts = {
        "nvidia-smi": f"cat {SMI_Q}",
        "dpkg-query": ("echo 'nvidia-imex-560|560.35.03-1|hold ok installed'" if installed else "exit 1"),
        "systemctl": (
            "printf 'UnitFileState=enabled\\nActiveState=active\\n'"
            if active
            else "printf 'UnitFileState=disabled\\nActiveState=inactive\\n'"
        ),
        "stat": "echo 'character special file|ea|0|666'",
        "apt-cache": "echo ' nvidia-imex-560 | 560.35.03-1 | http://repo ./ Packages'",
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)


def _run(tmp: Path, inventory: dict, play_vars: dict, *args: str, fakes: dict | None = None):
    (tmp / "inv.yml").write_text(yaml.safe_dump(inventory))
    tasks = [{"ansible.builtin.include_role": {"name": "fabricops.fabric.nvidia_imex"}}]
    play = [{"hosts": "localhost", "gather_facts": False, "vars": play_vars, "tasks": tasks}]
    (tmp / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_CACHE_PLUGIN="memory",
        PYTHONPATH=str(ROOT / "src"),
        ANSIBLE_NOCOLOR="1",
    )
    if fakes is not None:
        _fakes(tmp / "bin", **fakes)
        env["PATH"] = f"{tmp / 'bin'}:{env['PATH']}"
    return subprocess.run(
        ["ansible-playbook", "-i", str(tmp / "inv.yml"), *args, str(tmp / "play.yml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _inventory(local: dict, others: dict) -> dict:
    hosts = {
        "localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **local}
    }
    hosts.update(others)
    return {"all": {"hosts": hosts}}


def _recap(out: str) -> dict:
    m = re.search(r"localhost\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", out)
    assert m, out[-3000:]
    return {"ok": int(m[1]), "changed": int(m[2]), "failed": int(m[3])}


needs_ansible = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-playbook")
TRAYS = {
    f"tray{i:02d}": {"fabricops_nvlink_domain": "nvl72-a", "ansible_host": f"10.0.0.{12 + i}"}
    for i in range(3)
}


@needs_ansible
@pytest.mark.parametrize(
    ("local", "others", "profile", "words"),
    [
        (
            {"fabricops_nvlink_domain": "nvl72-a", "nvidia_imex_address": "10.0.0.11"},
            TRAYS,
            "hgx-b200-ndr",
            "hardware profile hgx-b200-ndr is a HGX B200 platform, which uses the NVIDIA fabric manager",
        ),
        ({"nvidia_imex_address": "10.0.0.11"}, TRAYS, "gb200-nvl72", "fabricops_nvlink_domain is not set"),
        (
            {"fabricops_nvlink_domain": "nvl72-a", "nvidia_imex_address": "10.0.0.12"},
            TRAYS,
            "gb200-nvl72",
            "localhost and tray00 both have the IMEX address 10.0.0.12",
        ),
        (
            {"fabricops_nvlink_domain": "nvl72-a", "nvidia_imex_address": "10.0.0.11"},
            {**TRAYS, "bad": {"fabricops_nvlink_domain": "nvl72-a", "ansible_host": "bad.example"}},
            "gb200-nvl72",
            "'bad.example') is not an IP address",
        ),
        (
            {"fabricops_nvlink_domain": "nvl72-a", "nvidia_imex_address": "10.0.0.11"},
            {
                f"t{i}": {"fabricops_nvlink_domain": "nvl72-a", "ansible_host": f"10.0.2.{i}"}
                for i in range(18)
            },
            "gb200-nvl72",
            "NVLink domain nvl72-a has 19 nodes",
        ),
    ],
)
def test_the_first_task_refuses_before_anything_else(tmp_path, local, others, profile, words):
    proc = _run(tmp_path, _inventory(local, others), {"fabricops_hardware_profile": profile})
    out = proc.stdout
    assert _recap(out) | {"ok": 0} == {"ok": 0, "changed": 0, "failed": 1}, out[-3000:]
    assert words in out, out[-3000:]
    ran = [ln for ln in out.splitlines() if ln.startswith("TASK [fabricops.fabric.nvidia_imex")]
    assert len(ran) == 2 and FIRST in ran[1], ran  # argument validation, then the first task fails


@needs_ansible
def test_the_role_renders_its_files_and_a_second_run_changes_nothing(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (tmp_path / "devices").write_text(PROC_DEVICES)
    local = {"fabricops_nvlink_domain": "nvl72-a", "nvidia_imex_address": "10.0.0.11"}
    inv = _inventory(
        local, {**TRAYS, "elsewhere": {"fabricops_nvlink_domain": "nvl72-b", "ansible_host": "10.9.0.1"}}
    )
    pv = {
        "fabricops_hardware_profile": "gb200-nvl72",
        "fabricops_allow_untested_platform": True,
        "ansible_distribution": "Debian",
        "ansible_distribution_major_version": "12",
        "ansible_os_family": "Debian",
        "ansible_architecture": "x86_64",
        "nvidia_imex_config_path": str(etc / "config.cfg"),
        "nvidia_imex_nodes_config_path": str(etc / "nodes_config.cfg"),
        "nvidia_imex_modprobe_path": str(etc / "nvidia-imex-channel.conf"),
        "nvidia_imex_channel_dir": str(tmp_path / "dev"),
        "__nvidia_imex_proc_devices": str(tmp_path / "devices"),
    }
    fakes = {"installed": True, "active": True}
    # extra vars: __nvidia_imex_proc_devices is a role var (vars/main.yml), above play vars
    (tmp_path / "ev.json").write_text(json.dumps(pv))
    ev = ("-e", f"@{tmp_path / 'ev.json'}")
    check = _run(tmp_path, inv, {}, *ev, "--check", "--diff", fakes=fakes)
    assert _recap(check.stdout)["failed"] == 0, check.stdout[-4000:]
    assert _recap(check.stdout)["changed"] == 1 and not (etc / "config.cfg").exists()
    assert "+10.0.0.11\n+10.0.0.12" in check.stdout and "+IMEX_CMD_PORT=50005" in check.stdout
    first = _run(tmp_path, inv, {}, *ev, fakes=fakes)
    assert _recap(first.stdout) | {"ok": 0} == {"ok": 0, "changed": 1, "failed": 0}, first.stdout[-4000:]
    assert "waits for consent to restart nvidia-imex" in first.stdout  # running service: not restarted
    nodes = (etc / "nodes_config.cfg").read_text()
    assert nodes == "10.0.0.11\n10.0.0.12\n10.0.0.13\n10.0.0.14\n"
    cfg = (etc / "config.cfg").read_text()
    assert cfg.startswith("#") and "imex-guide/config.html" in cfg
    assert imex.parse_config(cfg)["IMEX_NODE_CONFIG_FILE"] == str(etc / "nodes_config.cfg")
    assert "options nvidia NVreg_CreateImexChannel0=1\n" in (etc / "nvidia-imex-channel.conf").read_text()
    for args in ((), ("--check", "--diff")):
        again = _run(tmp_path, inv, {}, *ev, *args, fakes=fakes)
        assert _recap(again.stdout)["changed"] == 0 and _recap(again.stdout)["failed"] == 0, again.stdout[
            -4000:
        ]
