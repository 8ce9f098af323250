"""Injection vectors against every rendered role variable and module option (issue 15).

Table-driven: every role variable that reaches a command, a script, a unit or a config file
(``fabricops.validate.ROLE_VARS``) has one or more *sites* here (where in the value an attacker's
text goes: the string itself, a list element, a mapping key or value, a nested field) and every
site is fed every vector (newline, trailing newline, ``;``, ``$()``, backticks, quotes, ``..``,
NUL, non-ASCII). Each case asserts a refusal naming the variable -- or, for the one site whose
value is deliberately free text (an NCCL override value), that the rendered files keep it inert.
The test ids carry the counts. A string-like option added to an argument spec without a
validator (or an explicit not-rendered reason) fails ``test_every_string_option_is_in_the_table``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import quote

from fabricops import ipoib, nccl, validate
from fabricops.verify.expect import NcclSettings, NcclSettingsError, nccl_settings
from fabricops.verify.nccl_phase import build_command

ROOT = Path(__file__).resolve().parents[2]
# roce_switch is another helper's (its own validation lands with it)
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if p.name != "roce_switch")

VECTORS = {
    "newline": "\nExecStartPre=/bin/sh -c id",
    "trailing-newline": "\n",
    "semicolon": ";id",
    "dollar-paren": "$(id)",
    "backtick": "`id`",
    "single-quote": "'",
    "double-quote": '"',
    "dotdot": "/../../etc/shadow",
    "nul": "\x00",
    "non-ascii": "\u00e9",
}


def _s(base: str):
    return lambda v: base + v


def _list(base: str):
    return lambda v: [base + v]


def _key(base_key: str, base_val: Any):
    return lambda v: {base_key + v: base_val}


def _val(base_key: str, base_val: str):
    return lambda v: {base_key: base_val + v}


def _nested(make):
    return make


#: variable -> {site: value-with-vector}. A site is "str" when the vector is appended to a valid value.
SITES: dict[str, dict[str, Any]] = {
    "fabric_monitor_install_method": {"str": _s("apt")},
    "fabric_monitor_node_exporter_package": {"str": _s("prometheus-node-exporter")},
    "fabric_monitor_node_exporter_deb_url": {"str": _s("http://mirror/ne.deb")},
    "fabric_monitor_node_exporter_deb_sha256": {"str": _s("a" * 64)},
    "fabric_monitor_listen_address": {"str": _s(":9100")},
    "fabric_monitor_textfile_dir": {"str": _s("/var/lib/prometheus/node-exporter")},
    "fabric_monitor_node_exporter_extra_args": {"element": _list("--collector.systemd")},
    "fabric_monitor_interval": {"str": _s("30s")},
    "fabric_monitor_collector_path": {"str": _s("/usr/local/bin/fabricops-collector")},
    "fabric_monitor_config_path": {"str": _s("/etc/fabricops/collector.json")},
    "fabric_monitor_expected_rate_gbps": {"key": _key("InfiniBand", 400), "value": _val("InfiniBand", "400")},
    "fabric_monitor_ethtool": {"str": _s("ethtool")},
    "fabric_monitor_nvidia_smi": {"str": _s("nvidia-smi")},
    "fabric_monitor_nic_firmware_versions": {"key": _key("MT_0000000838", "28.43.1014"),
                                             "value": _val("MT_0000000838", "28.43.1014")},
    "gpudirect_module": {"str": _s("nvidia_peermem")},
    "gpudirect_unit_name": {"str": _s("nvidia-peermem.service")},
    "gpudirect_unit_path": {"str": _s("/etc/systemd/system/nvidia-peermem.service")},
    "gpudirect_after_unit": {"str": _s("openibd.service")},
    "ipoib_plan": {
        "network-name": lambda v: {"networks": {"ib0" + v: "198.18.0.0/16"}},
        "cidr": lambda v: {"networks": {"ib0": "198.18.0.0/16" + v}},
        "prefix": lambda v: {"networks": {"data": {"prefix": "198.18.0.0/16" + v, "device": "ib0"}}},
        "device": lambda v: {"networks": {"data": {"prefix": "198.18.0.0/16", "device": "mlx5_0" + v}}},
        "mode": lambda v: {"networks": {"data": {"prefix": "198.18.0.0/16", "mode": "datagram" + v}}},
        "pkey": lambda v: {"networks": {"data": {"prefix": "198.18.0.0/16", "pkey": "0x10" + v}}},
    },
    "ipoib_addresses": {"key": _key("ib0", "198.18.0.7"), "value": _val("ib0", "198.18.0.7")},
    "ipoib_interfaces": {
        "device": lambda v: [{"device": "ibp26s0" + v}],
        "name": lambda v: [{"device": "ibp26s0", "name": "data" + v}],
        "address": lambda v: [{"device": "ibp26s0", "address": "198.18.0.7/16" + v}],
        "mode": lambda v: [{"device": "ibp26s0", "mode": "connected" + v}],
        "pkey": lambda v: [{"device": "ibp26s0", "pkey": "0x0010" + v}],
    },
    "ipoib_mode": {"str": _s("datagram")},
    "ipoib_nm_connection_dir": {"str": _s("/etc/NetworkManager/system-connections")},
    "ipoib_ifupdown_dir": {"str": _s("/etc/network/interfaces.d")},
    "ipoib_netplan_file": {"str": _s("/etc/netplan/60-fabricops-ipoib.yaml")},
    "mlnx_ofed_version": {"str": _s("24.10-1.1.4.0")},
    "mlnx_ofed_install_method": {"str": _s("repo")},
    "mlnx_ofed_tarball_url": {"str": _s("http://mirror/MLNX_OFED_LINUX-24.10-1.1.4.0-debian12.1-x86_64.tgz")},
    "mlnx_ofed_tarball_sha256": {"str": _s("b" * 64)},
    "mlnx_ofed_iso_url": {"str": _s("http://mirror/MLNX_OFED_LINUX-24.10-1.1.4.0-debian12.1-x86_64.iso")},
    "mlnx_ofed_iso_sha256": {"str": _s("c" * 64)},
    "mlnx_ofed_iso_extractor": {"str": _s("xorriso")},
    "mlnx_ofed_repo_url": {"str": _s("http://mirror/repo/24.10-1.1.4.0")},
    "mlnx_ofed_repo_key_url": {"str": _s("http://mirror/key.gpg")},
    "mlnx_ofed_repo_key_sha256": {"str": _s("d" * 64)},
    "mlnx_ofed_repo_signed_by": {"str": _s("/etc/apt/keyrings/mlnx_ofed.gpg")},
    "mlnx_ofed_work_dir": {"str": _s("/var/cache/mlnx_ofed")},
    "mlnx_ofed_distro": {"str": _s("debian12.1")},
    "mlnx_ofed_installer_extra_args": {"element": _list("--with-nvmf")},
    "mlnx_ofed_openib_conf": {"key": _key("RUN_SYSCTL", True), "value": _val("NODE_DESC", "gpu01")},
    "mlnx_ofed_openib_conf_path": {"str": _s("/etc/infiniband/openib.conf")},
    "mlnx_ofed_restart_method": {"str": _s("openibd")},
    "mlnx_ofed_modules_file": {"str": _s("/proc/modules")},
    "mlnx_ofed_state_dir": {"str": _s("/var/lib/fabricops/mlnx_ofed")},
    "mlnx_ofed_doca_version": {"str": _s("2.9.1")},
    "mlnx_ofed_doca_profile": {"str": _s("doca-ofed")},
    "mlnx_ofed_doca_repo_url": {"str": _s("http://mirror/doca/2.9.1/debian12/x86_64/")},
    "mlnx_ofed_doca_repo_key_url": {"str": _s("http://mirror/doca/GPG-KEY-Mellanox.pub")},
    "mlnx_ofed_doca_repo_key_sha256": {"str": _s("e" * 64)},
    "mlnx_ofed_doca_repo_signed_by": {"str": _s("/etc/apt/keyrings/doca.gpg")},
    "mlnx_ofed_dkms_kernels": {"element": _list("6.1.0-18-amd64")},
    "nic_firmware_presets": {"element": _list("gpudirect")},
    "nic_firmware_config": {"key": _key("ATS_ENABLED", 0), "value": _val("ATS_ENABLED", "1")},
    "nic_firmware_device_config": {"key": _key("mlx5_0", {}),
                                   "value": lambda v: {"mlx5_0": {"ATS_ENABLED": "1" + v}}},
    "nic_firmware_devices": {"element": _list("mlx5_0")},
    "nic_firmware_versions": {"key": _key("MT_0000000838", "28.43.1014"),
                              "value": _val("MT_0000000838", "28.43.1014")},
    "nic_firmware_images": {
        "url": lambda v: {"MT_0000000838": {"url": "http://m/fw.bin" + v, "sha256": "f" * 64}},
        "sha256": lambda v: {"MT_0000000838": {"url": "http://m/fw.bin", "sha256": "f" * 64 + v}},
    },
    "nic_firmware_reset_method": {"str": _s("mlxfwreset")},
    "nic_firmware_work_dir": {"str": _s("/var/cache/fabricops/firmware")},
    "nccl_profile_name": {"str": _s("ib")},
    "nccl_profile_socket_ifname": {"str": _s("=eth0")},
    "nccl_profile_overrides": {"key": _key("NCCL_DEBUG", "INFO"), "value": _val("NCCL_DEBUG", "INFO")},
    "nccl_profile_roce": {"trust": lambda v: {"trust": "dscp" + v},
                          "ecn": lambda v: {"ecn": {"other_priorities": "enabled" + v}}},
    "nccl_profile_gpudirect_modules": {"element": _list("nvidia_peermem")},
    "nccl_profile_conf_path": {"str": _s("/etc/nccl.conf")},
    "nccl_profile_shell_path": {"str": _s("/etc/profile.d/nccl.sh")},
    "nccl_profile_nccl_version": {"str": _s("2.23.4")},
    "nccl_profile_nccl_lib_dirs": {"element": _list("/usr/lib64")},
    "nccl_profile_cross_nic": {"str": _s("auto")},
    "nccl_profile_net_plugin": {"str": _s("none")},
    "nvidia_fabric_manager_repo_url": {"str": _s("http://mirror/nvidia-fabricmanager")},
    "nvidia_fabric_manager_repo_file": {"str": _s("/etc/apt/sources.list.d/nvidia-fabricmanager.list")},
    "nvidia_fabric_manager_repo_key_url": {"str": _s("http://mirror/key.gpg")},
    "nvidia_fabric_manager_repo_key_sha256": {"str": _s("e" * 64)},
    "nvidia_fabric_manager_repo_keyring": {"str": _s("/etc/apt/keyrings/nvidia-fabricmanager.gpg")},
    "nvidia_fabric_manager_package_pattern": {"str": _s("nvidia-fabricmanager-{branch}")},
    "nvidia_fabric_manager_service": {"str": _s("nvidia-fabricmanager")},
    "nvidia_imex_address": {"str": _s("10.0.0.11")},
    "nvidia_imex_managed_by": {"str": _s("host")},
    "nvidia_imex_service": {"str": _s("nvidia-imex")},
    "nvidia_imex_config_path": {"str": _s("/etc/nvidia-imex/config.cfg")},
    "nvidia_imex_nodes_config_path": {"str": _s("/etc/nvidia-imex/nodes_config.cfg")},
    "nvidia_imex_bind_interface_ip": {"str": _s("10.0.0.11")},
    "nvidia_imex_wait_for_quorum": {"str": _s("RECOVERY")},
    "nvidia_imex_modprobe_path": {"str": _s("/etc/modprobe.d/nvidia-imex-channel.conf")},
    "nvidia_imex_channel_dir": {"str": _s("/dev/nvidia-caps-imex-channels")},
    "roce_host_roce": {"trust": lambda v: {"trust": "dscp" + v},
                       "ecn": lambda v: {"ecn": {"other_priorities": "enabled" + v}}},
    "roce_host_interfaces": {"element": _list("enp1s0f0")},
    "roce_host_unit_name": {"str": _s("fabricops-roce-qos.service")},
    "roce_host_script_path": {"str": _s("/usr/local/sbin/fabricops-roce-qos")},
    "roce_host_config_path": {"str": _s("/etc/fabricops/roce-qos.json")},
    "subnet_manager_mode": {"str": _s("hosts")},
    "subnet_manager_hosts": {"key": _key("gpu01", 15), "value": _val("gpu01", "15")},
    "subnet_manager_topology": {"str": _s("fat_tree")},
    "subnet_manager_routing_engine": {"str": _s("ftree")},
    "subnet_manager_port_guid": {"str": _s("0x0002c90300a1b2c3")},
    "subnet_manager_hca": {"str": _s("mlx5_0")},
    "subnet_manager_conf_path": {"str": _s("/etc/opensm/opensm.conf")},
    "subnet_manager_log_file": {"str": _s("/var/log/opensm.log")},
    "subnet_manager_partition_config_file": {"str": _s("/etc/opensm/partitions.conf")},
    "subnet_manager_service": {"str": _s("opensmd")},
    "subnet_manager_package": {"str": _s("opensm")},
}

#: Sites whose value is free text on purpose, with the vectors that are kept (and proved inert below).
INERT = {("nccl_profile_overrides", "value"): {"semicolon", "dollar-paren", "backtick", "single-quote",
                                               "double-quote", "dotdot"}}

CASES = [(var, site, vec) for var, sites in SITES.items() for site in sites for vec in VECTORS]
N_SITES = sum(len(s) for s in SITES.values())


def _string_options(spec: dict[str, Any]) -> list[str]:
    return [name for name, opt in (spec.get("options") or {}).items()
            if (opt or {}).get("type", "str") in ("str", "path", "raw", "list", "dict")]


def _specs() -> dict[str, list[str]]:
    out = {}
    for role in ROLES:
        doc = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
        out[role] = _string_options(doc["argument_specs"]["main"])
    return out


def test_every_string_option_is_in_the_table():
    specs = _specs()
    options = {name for names in specs.values() for name in names}
    missing = sorted(options - set(validate.ROLE_VARS) - set(validate.NOT_RENDERED))
    assert not missing, f"string options with no validator and no not-rendered reason: {missing}"
    stale = sorted(set(validate.ROLE_VARS) - options)
    assert not stale, f"validators for options no argument spec has: {stale}"
    assert set(SITES) == set(validate.ROLE_VARS), "every validated variable has injection sites here"
    assert all(validate.NOT_RENDERED.values()), "every not-rendered variable says why"


@pytest.mark.parametrize("role", ROLES)
def test_each_role_checks_its_variables_first(role):
    tasks = yaml.safe_load((ROOT / "roles" / role / "tasks" / "main.yml").read_text())
    first = tasks[0]
    that = first["ansible.builtin.assert"]["that"]
    # the injection check comes first; a role may check the rest of its input in the same task
    # (one task fewer per host), after it
    assert (that if isinstance(that, str) else that[0]) == f"__{role}_unsafe | length == 0"
    assert first["name"].startswith("Refuse values that could inject into what the role")
    assert f"'^{role}_'" in first["vars"][f"__{role}_names"]
    assert "fabricops.fabric.unsafe_role_vars" in first["vars"][f"__{role}_unsafe"]
    assert first["tags"] == ["always"]


def test_the_valid_values_pass():
    """The base of every site is accepted: each refusal below is the vector's doing."""
    for var, sites in SITES.items():
        for site, make in sites.items():
            assert validate.role_errors({var: make("")}) == [], (var, site)


@pytest.mark.parametrize(
    ("var", "site", "vector"),
    CASES,
    ids=[f"{v}.{s}-{k}" for v, s, k in CASES],
)
def test_vector(var, site, vector):
    value = SITES[var][site](VECTORS[vector])
    errors = validate.role_errors({var: value})
    if vector in INERT.get((var, site), ()):
        assert errors == []
        return
    assert len(errors) == 1, (var, site, vector, value)
    assert errors[0].startswith(var) and "\n" not in errors[0] and "\x00" not in errors[0]


def test_counts_in_the_ids(request):
    """variables x sites x vectors, as the report quotes them."""
    n_vars, n_vec = len(SITES), len(VECTORS)
    assert len(CASES) == N_SITES * n_vec
    print(f"\ninjection table: {n_vars} variables, {N_SITES} sites, {n_vec} vectors = {len(CASES)} cases")
    assert n_vars >= 70 and n_vec == 10


# --- renderers and modules: the same allow-lists below the role's check --------------------------

FACTS = {"hcas": [{"name": "mlx5_0",
                   "ports": [{"port": 1, "link_layer": "InfiniBand", "netdev": "ibp26s0"}]}]}


@pytest.mark.parametrize("vector", list(VECTORS))
def test_ipoib_renderer_refuses_names_and_devices(vector):
    v = VECTORS[vector]
    for plan in ({"networks": {"ib0" + v: {"prefix": "198.18.0.0/16", "device": "mlx5_0"}}},
                 {"networks": {"data": {"prefix": "198.18.0.0/16", "device": "ibp26s0" + v}}}):
        errors = ipoib.plan_errors("gpu01", plan=plan, host_index=7, facts=FACTS, check_devices=False)
        assert errors and errors[0].startswith("gpu01 "), (plan, errors)
    errors = ipoib.plan_errors("gpu01", interfaces=[{"device": "ibp26s0", "name": "x" + v}], facts=FACTS)
    assert errors, errors


@pytest.mark.parametrize("vector", ["newline", "trailing-newline", "nul", "non-ascii"])
def test_nccl_renderer_refuses_lines_in_names_and_values(vector):
    v = VECTORS[vector]
    ok = {"socket_ifname": "=eth0"}
    assert nccl.nccl_errors("socket", {}, overrides={"NCCL_DEBUG": "INFO"}, **ok) == []
    (err,) = nccl.nccl_errors("socket", {}, overrides={"NCCL_DEBUG" + v: "INFO"}, **ok)
    assert "is not an NCCL variable name" in err
    (err,) = nccl.nccl_errors("socket", {}, overrides={"NCCL_DEBUG": "INFO" + v}, **ok)
    assert "one line of printable ASCII" in err
    (err,) = nccl.nccl_errors("socket", {}, socket_ifname="=eth0" + v)
    assert "is not an NCCL interface list" in err


@pytest.mark.parametrize("vector", list(VECTORS))
def test_nccl_launcher_refuses_host_names_tests_dir_and_hcas(vector):
    """``fabricops verify``'s NCCL launcher line (fabricops.verify.nccl_phase.build_command, run as root
    on the first GPU host): host names, the tests dir and a re-run's HCA pass the inventory's own
    patterns (validate.hostname, .path, .hca) before any line is built; the template's own escapes
    (quoted placeholders, sh -c) are tests/unit/verify/test_nccl_phase.py's table."""
    v = VECTORS[vector]
    ok = nccl_settings({})
    assert build_command(ok, ["gpu01", "gpu02"], 8, "all_reduce", hca="mlx5_0").startswith("mpirun ")
    with pytest.raises(NcclSettingsError, match=r"^host name: "):
        build_command(ok, ["gpu01" + v, "gpu02"], 8, "all_reduce")
    with pytest.raises(NcclSettingsError, match=r"^fabricops_verify_nccl_tests_dir"):
        nccl_settings({"fabricops_verify_nccl_tests_dir": "/opt/nccl-tests" + v})
    with pytest.raises(NcclSettingsError, match=r"^fabricops_verify_nccl_tests_dir"):
        build_command(NcclSettings(tests_dir="/opt/nccl-tests" + v), ["gpu01"], 8, "all_reduce")
    with pytest.raises(NcclSettingsError, match=r"^HCA: "):
        build_command(ok, ["gpu01", "gpu02"], 8, "all_reduce", hca="mlx5_0" + v)


def _render(role: str, name: str, **ctx) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROOT / "roles" / role / "templates")),
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["ansible.builtin.quote"] = quote
    env.filters["comment"] = lambda text: f"# {text}"
    return env.get_template(name).render(ansible_managed="Ansible managed", **ctx)


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")
@pytest.mark.parametrize("vector", sorted(INERT[("nccl_profile_overrides", "value")]))
def test_nccl_override_values_stay_inert_in_the_rendered_files(vector, tmp_path):
    """nccl.conf keeps one NAME=value line per setting; nccl.sh, sourced by a real sh, exports the
    exact text and runs nothing."""
    marker = tmp_path / "ran"
    value = {"dollar-paren": f"$(touch {marker})", "backtick": f"`touch {marker}`"}.get(
        vector, "INFO" + VECTORS[vector])
    env = nccl.nccl_env("socket", {}, socket_ifname="=eth0", overrides={"NCCL_DEBUG": value})
    conf = _render("nccl_profile", "nccl.conf.j2", nccl_profile_name="socket", __nccl_profile_env=env)
    lines = [line for line in conf.splitlines() if line and not line.startswith("#")]
    assert sorted(line.split("=", 1)[0] for line in lines) == sorted(env)
    assert f"NCCL_DEBUG={value}" in lines
    script = tmp_path / "nccl.sh"
    script.write_text(_render("nccl_profile", "nccl.sh.j2", nccl_profile_name="socket",
                              nccl_profile_conf_path="/etc/nccl.conf", __nccl_profile_env=env))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    out = subprocess.run(["sh", "-c", '. "$1" && printf %s "$NCCL_DEBUG"', "sh", str(script)],
                         capture_output=True, text=True, env=clean, check=True)
    assert out.stdout == value
    assert not marker.exists()


def test_unit_templates_keep_their_keys_with_valid_values():
    """With the values the checks accept, the units hold exactly the keys the templates write (a
    refused newline is what would have added ExecStartPre=)."""
    unit = _render("gpudirect", "nvidia-peermem.service.j2", gpudirect_module="nvidia_peermem",
                   gpudirect_after_unit="openibd.service")
    keys = [line.split("=", 1)[0] for line in unit.splitlines() if "=" in line and not line.startswith("#")]
    assert keys == ["Description", "After", "Requires", "PartOf", "Type", "RemainAfterExit", "ExecStart",
                    "ExecStop", "WantedBy"]
    validate.check("gpudirect_module", "nvidia_peermem")
    with pytest.raises(validate.UnsafeValue, match="gpudirect_module"):
        validate.check("gpudirect_module", "nvidia_peermem\nExecStartPre=/bin/sh -c id")


def test_roce_boot_script_carries_no_inventory_value():
    # the program is the package module (shipped from the installed package); the launcher the role
    # renders carries only the role's own library directory
    script = (ROOT / "src" / "fabricops" / "hostside" / "roce_boot.py").read_text()
    assert "{{" not in script and "{%" not in script
    launcher = (ROOT / "roles" / "roce_host" / "templates" / "fabricops-roce-qos-launcher.j2").read_text()
    assert set(re.findall(r"\{\{\s*(\w+)", launcher)) == {"ansible_managed", "__roce_host_lib_dir"}
    assert not (ROOT / "roles" / "roce_host" / "templates" / "fabricops-roce-qos.j2").exists()
    unit = (ROOT / "roles" / "roce_host" / "templates" / "fabricops-roce-qos.service.j2").read_text()
    assert "ExecStart={{ roce_host_script_path }} apply --config {{ roce_host_config_path }}" in unit


@pytest.mark.parametrize(("module", "const", "key", "validator"), [
    ("mlnx_qos", "NETDEV", None, validate.netdev),
    ("roce_sysfs", "NAMES", "netdev", validate.netdev),
    ("roce_sysfs", "NAMES", "device", validate.MODULE_OPTIONS["roce_sysfs.device"]),
])
def test_module_options_use_the_same_allow_lists(module, const, key, validator):
    sys.path.insert(0, str(ROOT / "plugins" / "modules"))
    try:
        mod = __import__(module)
    finally:
        sys.path.pop(0)
    regex = getattr(mod, const) if key is None else getattr(mod, const)[key]
    for vector, text in VECTORS.items():
        bad = "mlx5_0" + text
        assert not regex.fullmatch(bad), (module, vector)
        with pytest.raises(validate.UnsafeValue):
            validator(f"{module}.{key or 'interface'}", bad)
    for good in ("mlx5_0", "ens1f0np0"[: 15]):
        assert regex.fullmatch(good)
    assert not regex.fullmatch("..") and not regex.fullmatch(".")


def test_fullmatch_not_dollar():
    """The bug class of issue 15: re '$' matches before a trailing newline."""
    assert re.match(r"^NCCL_[A-Z]+$", "NCCL_DEBUG\n")  # what the old check let through
    assert validate.role_errors({"nccl_profile_overrides": {"NCCL_DEBUG\n": "INFO"}})
    (err,) = nccl.nccl_errors("socket", {}, socket_ifname="=eth0", overrides={"NCCL_DEBUG\n": "INFO"})
    assert "is not an NCCL variable name" in err


# --- the role's first task, run by Ansible -------------------------------------------------------

BAD = {
    "gpudirect": {"gpudirect_module": "nvidia_peermem\nExecStartPre=/bin/sh -c id"},
    "roce_host": {"roce_host_config_path": "/etc/fabricops/x.json\"; import os; os.system('id') #"},
    "ipoib": {"ipoib_plan": {"networks": {"ib0\npre-up id": "198.18.0.0/16"}}},
    "mlnx_ofed": {"mlnx_ofed_version": "24.10-1.1.4.0", "mlnx_ofed_openib_conf": {"NODE_DESC": "$(id)"}},
    "nccl_profile": {"nccl_profile_name": "socket", "nccl_profile_overrides": {"NCCL_DEBUG\n": "INFO"}},
    "nvidia_fabric_manager": {"nvidia_fabric_manager_repo_url": "http://m/ ./\ndeb [trusted=yes] http://evil"},
    "fabric_monitor": {"fabric_monitor_node_exporter_extra_args": ["--x;id"]},
    "subnet_manager": {"subnet_manager_mode": "switch", "subnet_manager_service": "opensmd`id`"},
}
REFUSED = {"gpudirect": "gpudirect_module", "roce_host": "roce_host_config_path", "ipoib": "ipoib_plan",
           "mlnx_ofed": "mlnx_ofed_openib_conf.NODE_DESC", "nccl_profile": "nccl_profile_overrides",
           "nvidia_fabric_manager": "nvidia_fabric_manager_repo_url",
           "fabric_monitor": "fabric_monitor_node_exporter_extra_args[0]",
           "subnet_manager": "subnet_manager_service"}


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-playbook")
def test_roles_refuse_before_anything_runs(tmp_path):
    """One play includes every role with one bad value (check mode, local connection): each fails at
    its first task with the variable named, and no other task of the role runs (its platform check
    comes after it, tests/unit/test_host_platforms.py)."""
    tasks = []
    for role, bad in BAD.items():
        tasks.append({
            "name": f"try {role}",
            "block": [{"ansible.builtin.include_role": {"name": f"fabricops.fabric.{role}"}, "vars": bad}],
            "rescue": [{"ansible.builtin.set_fact": {
                "refused": f"{{{{ refused | combine({{'{role}': {{'task': ansible_failed_task.name, "
                           "'msg': ansible_failed_result.msg}}) }}"}}],
        })
    out = str(tmp_path / "out.json")
    tasks.append({"ansible.builtin.copy": {"content": "{{ refused | to_json }}", "dest": out},
                  "check_mode": False})
    play = [{"hosts": "localhost", "gather_facts": False, "vars": {"refused": {}}, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CACHE_PLUGIN="memory", PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "--check",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert (tmp_path / "out.json").exists(), proc.stdout[-3000:] + proc.stderr[-2000:]
    refused = json.loads((tmp_path / "out.json").read_text())
    assert set(refused) == set(BAD), proc.stdout[-3000:]
    for role, got in refused.items():
        refuse = "Refuse values that could inject into what the role writes"
        assert got["task"].startswith(refuse), (role, got)
        assert got["msg"].startswith(REFUSED[role]), (role, got)


# --- signed repositories --------------------------------------------------------------------------

def _apt_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_apt_sources_name_a_keyring_unless_trusted_is_opted_in():
    from ansible.plugins.filter.core import to_bool

    sys.path.insert(0, str(ROOT / "plugins" / "filter"))
    try:
        import mlnx_ofed as ofed_filters
    finally:
        sys.path.pop(0)

    def render(role, name, **ctx):
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROOT / "roles" / role / "templates")),
                                 undefined=jinja2.StrictUndefined)
        env.filters.update({"regex_replace": lambda s, pat, rep: re.sub(pat, rep, s), "bool": to_bool,
                            "comment": lambda t: f"# {t}",
                            "fabricops.fabric.mlnx_ofed_repo_keyring": ofed_filters.mlnx_ofed_repo_keyring})
        return _apt_lines(env.get_template(name).render(ansible_managed="Ansible managed", **ctx))

    fm = {"nvidia_fabric_manager_repo_url": "http://m/fm/",
          "nvidia_fabric_manager_repo_keyring": "/etc/apt/keyrings/nvidia-fabricmanager.gpg"}
    fm_list = ("nvidia_fabric_manager", "nvidia-fabricmanager.list.j2")
    assert render(*fm_list, nvidia_fabric_manager_repo_trusted=False, **fm) == [
        "deb [signed-by=/etc/apt/keyrings/nvidia-fabricmanager.gpg] http://m/fm ./"]
    assert render(*fm_list, nvidia_fabric_manager_repo_trusted=True, **fm) == [
        "deb [trusted=yes] http://m/fm ./"]
    url = "http://m/repo/24.10-1.1.4.0"
    ofed_list = ("mlnx_ofed", "mlnx_ofed.list.j2")
    ofed = {"mlnx_ofed_version": "24.10-1.1.4.0", "mlnx_ofed_repo_url": url}
    key = {"mlnx_ofed_repo_trusted": False, "mlnx_ofed_repo_signed_by": "",
           "mlnx_ofed_repo_key_url": "http://m/key.gpg"}
    assert render(*ofed_list, **key, **ofed) == [f"deb [signed-by=/etc/apt/keyrings/mlnx_ofed.gpg] {url} ./"]
    key.update(mlnx_ofed_repo_signed_by="/usr/share/keyrings/m.gpg", mlnx_ofed_repo_key_url="")
    assert render(*ofed_list, **key, **ofed) == [f"deb [signed-by=/usr/share/keyrings/m.gpg] {url} ./"]
    key.update(mlnx_ofed_repo_trusted=True, mlnx_ofed_repo_signed_by="")
    assert render(*ofed_list, **key, **ofed) == [f"deb [trusted=yes] {url} ./"]
    for role in ("nvidia_fabric_manager", "mlnx_ofed"):
        defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
        assert defaults[f"{role}_repo_trusted"] is False
