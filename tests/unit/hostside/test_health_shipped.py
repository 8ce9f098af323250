"""fabricops-health is shipped as the package's own files and runs on the standard library alone.

Like tests/unit/hostqos/test_hostside_single_source.py proves for the collector and the boot-time
program: the fabric_monitor role copies exactly what fabricops.hostside.ship.files_for gives, keeps
no copy of its own, renders a launcher and a config the module reads; the shipped tree runs in
``python3 -I -S`` (no site-packages, no PYTHONPATH: what a host offers) and keeps to the host
Python floor.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import yaml
from roletasks import role_tasks
from unit.hostqos.test_host_python_floor import _problems

from fabricops.hostside import health, ship

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "fabric_monitor"
ENTRY = "fabricops.hostside.health"


def test_the_health_check_needs_the_collector_and_evidence_modules_only():
    paths = [f["path"] for f in ship.files_for(ENTRY)]
    assert paths == [
        "fabricops/__init__.py", "fabricops/errors.py", "fabricops/evidence/__init__.py",
        "fabricops/evidence/errors.py", "fabricops/evidence/hostfiles.py", "fabricops/evidence/probes.py",
        "fabricops/evidence/tools.py", "fabricops/hostside/__init__.py", "fabricops/hostside/health.py",
        "fabricops/monitor/__init__.py", "fabricops/monitor/collector.py"]
    problems = [p for f in ship.files_for(ENTRY) for p in _problems(f["path"], Path(f["src"]).read_text())]
    assert problems == []


def test_the_role_ships_the_health_files_with_the_collectors_and_writes_its_launcher():
    tasks = role_tasks("fabric_monitor", "configure.yml")
    facts = [t["ansible.builtin.set_fact"] for t in tasks if "ansible.builtin.set_fact" in t]
    (expr,) = [" ".join(v.split()) for f in facts for v in f.values()
               if isinstance(v, str) and "package_files" in v]
    assert f"('{ENTRY}' | fabricops.fabric.package_files) if fabric_monitor_health | bool" in expr
    launchers = [t for t in tasks
                 if any(f["src"] == "fabricops-health-launcher.j2"
                        for f in t.get("fabricops.fabric.templates", {}).get("files", []))]
    assert len(launchers) == 1 and launchers[0]["when"] == "fabric_monitor_health | bool"
    (entry,) = launchers[0]["fabricops.fabric.templates"]["files"]
    assert entry["dest"] == "{{ __fabric_monitor_health_path }}" and entry["mode"] == "0755"
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert role_vars["__fabric_monitor_health_path"] == "/usr/local/sbin/fabricops-health"
    # the role keeps no copy of the module
    module = Path(health.__file__).read_bytes()
    assert not any(p.is_file() and p.read_bytes() == module for p in ROLE.rglob("*"))


def test_preflight_refuses_what_the_module_refuses():
    text = (ROLE / "tasks" / "preflight.yml").read_text()
    assert "fabric_monitor_health_timeout_s | int <= 30" in text and health.MAX_TIMEOUT_S == 30
    assert text.count("<= 4096") == 3


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROLE / "templates")),
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["to_nice_json"] = lambda v, indent=4: json.dumps(v, indent=indent, sort_keys=True)
    env.filters["bool"] = bool
    env.filters["to_json"] = json.dumps  # ansible's to_json: json.dumps
    return env


def _role_config(path: Path, **health_vars) -> None:
    values = {"ansible_managed": "Ansible managed", "fabric_monitor_expected_rate_gbps": {"InfiniBand": 400},
              "fabric_monitor_nvlink": True, "fabric_monitor_ethtool": "ethtool",
              "fabric_monitor_nvidia_smi": "nvidia-smi", "fabric_monitor_nic_firmware_versions": {},
              "inventory_hostname_short": "gpu01", "fabric_monitor_health_ports": 2,
              "fabric_monitor_health_gpus": 0, "fabric_monitor_health_nvlink_links": 0,
              "fabric_monitor_health_timeout_s": 2, **health_vars}
    path.write_text(_env().get_template("collector.json.j2").render(**values))


def test_the_roles_config_is_what_the_module_reads(tmp_path):
    cfg = tmp_path / "collector.json"
    _role_config(cfg, fabric_monitor_health_gpus=8, fabric_monitor_health_nvlink_links=18)
    config = health.load_config(str(cfg))
    assert config["health"] == {"ports": 2, "gpus": 8, "nvlink_links": 18, "timeout_s": 2.0}
    assert config["expected_rate_gbps"] == {"InfiniBand": 400.0}


def _ship(tmp_path: Path, config: Path) -> Path:
    lib = tmp_path / "usr/local/lib/fabricops"
    for f in ship.files_for(ENTRY):
        (lib / f["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f["src"], lib / f["path"])
    launcher = tmp_path / "fabricops-health"
    launcher.write_text(_env().get_template("fabricops-health-launcher.j2").render(
        ansible_managed="Ansible managed", __fabric_monitor_lib_dir=str(lib),
        fabric_monitor_config_path=str(config)))
    return launcher


def _port(sysfs: Path, dev: str, state: str, phys: str) -> None:
    pdir = sysfs / "class/infiniband" / dev / "ports/1"
    pdir.mkdir(parents=True, exist_ok=True)
    for name, value in (("state", state), ("phys_state", phys), ("rate", "400 Gb/sec (4X NDR)"),
                        ("link_layer", "InfiniBand")):
        (pdir / name).write_text(value + "\n")


def _bare(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-S", *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=60, check=False)


def test_shipped_health_check_runs_on_the_standard_library_alone(tmp_path):
    cfg = tmp_path / "collector.json"
    launcher = _ship(tmp_path, cfg)
    sysfs = tmp_path / "sys"

    proc = _bare([str(launcher), "--sysfs", str(sysfs)], tmp_path)  # no config yet
    assert proc.returncode == 4, proc.stderr
    assert proc.stdout.startswith(f"fabricops-health: could not check: config {cfg}: no such file")

    _role_config(cfg)
    _port(sysfs, "mlx5_0", "4: ACTIVE", "5: LinkUp")
    _port(sysfs, "mlx5_1", "4: ACTIVE", "5: LinkUp")
    proc = _bare([str(launcher), "--sysfs", str(sysfs)], tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")

    _port(sysfs, "mlx5_1", "1: DOWN", "3: Disabled")
    proc = _bare([str(launcher), "--sysfs", str(sysfs)], tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ("fabricops-health: hca_port mlx5_1/1: state DOWN, physical state Disabled "
                           "(expected ACTIVE/LinkUp)\n")

    # it imported the shipped tree, not the checkout
    code = (f"import sys; sys.path.insert(0, {str(tmp_path / 'usr/local/lib/fabricops')!r}); "
            "import fabricops.hostside.health as m; print(m.__file__)")
    assert _bare(["-c", code], tmp_path).stdout.strip().startswith(str(tmp_path))
