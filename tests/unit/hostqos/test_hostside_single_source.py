"""The host-side programs are the package's code: one knob table, shipped from the installed package.

- the boot-time program (fabricops.hostside.roce_boot) follows the package's knob table: mutate one
  path in fabricops.hostqos.knobs.PATHS and apply writes / verify reads the mutated path, so the
  script cannot drift from the package (it used to carry its own copy of the paths);
- what the roles ship is the list fabricops.fabric.package_files gives, and every file on it is
  byte-for-byte the installed package's file; the roles keep no copy;
- the shipped files run with nothing but the standard library (a host has only python3).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
from roletasks import role_tasks
from unit.hostqos.emulated import DEVICE, NETDEV, EmulatedSystem, hardware, host  # noqa: F401  (fixture)

from fabricops.hostqos import knobs
from fabricops.hostqos.plan import host_plan
from fabricops.hostside import roce_boot, ship
from fabricops.monitor import collector

REPO = Path(__file__).resolve().parents[3]
ROLES = {
    # role -> (task file, the prefix of its variables, entry module, launcher template)
    "roce_host": ("persist.yml", "__roce_host", "fabricops.hostside.roce_boot",
                  "fabricops-roce-qos-launcher.j2"),
    "fabric_monitor": ("configure.yml", "__fabric_monitor", "fabricops.monitor.collector",
                       "fabricops-collector-launcher.j2"),
}
CNP = f"/sys/class/net/{NETDEV}/ecn/roce_np/cnp_802p_prio"
CNP_DSCP = f"/sys/class/net/{NETDEV}/ecn/roce_np/cnp_dscp"
TCLASS = f"/sys/class/infiniband/{DEVICE}/tc/1/traffic_class"


class Recording(EmulatedSystem):
    """The emulated host, noting every sysfs path the program reads, writes or looks for."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: dict[str, list[str]] = {"read": [], "write": [], "exists": []}

    def read(self, path):
        self.paths["read"].append(path)
        return super().read(path)

    def write(self, path, value):
        self.paths["write"].append(path)
        return super().write(path, value)

    def exists(self, path):
        self.paths["exists"].append(path)
        return super().exists(path)


@pytest.fixture
def config(tmp_path):
    """The per-port document the role renders, with a CNP priority that is not the driver's default."""
    hcas = [{"name": h["name"], "ports": h["ports"]} for h in hardware()["hcas"]]
    plan = host_plan({"lossless_priority": 3, "dscp": 26, "cnp_priority": 5}, hcas)
    path = tmp_path / "roce-qos.json"
    doc = {"roce": plan["roce"], "ports": plan["ports"], "boot_wait_s": 0}
    path.write_text("# header\n" + json.dumps(doc))
    return str(path)


def run(action, system, config):
    return roce_boot.main([action, "--config", config], system=system, wait_s=0)


def test_apply_and_verify_follow_the_packages_table(config, host, capsys, monkeypatch):  # noqa: F811
    system = Recording()
    assert run("apply", system, config) == 0
    assert host.read(CNP) == "5" and CNP in system.paths["write"] and CNP in system.paths["read"]
    capsys.readouterr()

    # A typo in the package's table (the bug this replaces: the boot script had its own copy of the
    # paths, and a typo there left every test green while the knob was skipped after each reboot).
    typo = "/sys/class/net/{netdev}/ecn/roce_np/cnp_802_prio"
    monkeypatch.setitem(knobs.PATHS, "cnp_priority", typo)
    host.write(CNP, "6")  # what a reboot leaves: the driver default
    system = Recording()
    assert run("apply", system, config) == 0  # an optional knob: absent on this "driver", skipped ...
    mutated = typo.format(netdev=NETDEV)
    assert mutated in system.paths["exists"] and mutated in system.paths["read"]
    assert CNP not in system.paths["write"] + system.paths["read"] + system.paths["exists"]
    assert host.read(CNP) == "6"
    # ... and said so, naming the path the package's table gives
    assert f"cnp_priority ({mutated}) is absent on this driver; skipped" in capsys.readouterr().err

    # Point the knob at another real file: apply writes the priority there and verify reads it back.
    monkeypatch.setitem(knobs.PATHS, "cnp_priority", "/sys/class/net/{netdev}/ecn/roce_np/cnp_dscp")
    assert run("apply", Recording(), config) == 1
    assert host.read(CNP_DSCP) == "5" and host.read(CNP) == "6"
    assert f"{NETDEV}: cnp_dscp is 5, want 48" in capsys.readouterr().out.splitlines()


def test_a_required_knob_follows_the_table_too(config, host, capsys, monkeypatch):  # noqa: F811
    typo = "/sys/class/infiniband/{device}/tc/{port}/traffic_clas"
    monkeypatch.setitem(knobs.PATHS, "traffic_class", typo)
    mutated = typo.format(device=DEVICE, port=1)
    system = Recording()
    assert run("apply", system, config) == 1
    out = capsys.readouterr().out
    assert f"{NETDEV}: traffic_class: writing 106 to {mutated} failed" in out
    assert f"{NETDEV}: traffic_class cannot be read: {mutated} is absent" in out
    assert TCLASS not in system.paths["write"] + system.paths["read"]


def test_no_host_side_file_or_role_spells_a_knob_path():
    """Each knob path is declared once, in fabricops.hostqos.knobs.PATHS."""
    # the last literal piece of each path: '/ecn/roce_np/enable/', '/ecn/roce_np/cnp_802p_prio', ...
    tails = {key: [p for p in re.split(r"\{\w+\}", t) if p][-1] for key, t in knobs.PATHS.items()}
    assert all(len(t) > 4 for t in tails.values()), tails
    others = [Path(f["src"]) for f in ship.files_for("fabricops.hostside.roce_boot")]
    others = [p for p in others if p != Path(knobs.__file__).resolve()]
    others += [p for p in (REPO / "roles" / "roce_host").rglob("*") if p.is_file() and p.suffix != ".md"]
    for path in others:
        text = path.read_text()
        for key, tail in tails.items():
            assert tail not in text, f"{path} spells the {key} knob path ({tail}); use knobs.PATHS"


def test_boot_program_needs_the_host_qos_modules_and_not_the_controller_ones():
    paths = [f["path"] for f in ship.files_for("fabricops.hostside.roce_boot")]
    assert paths == sorted(paths)
    for needed in ("fabricops/__init__.py", "fabricops/errors.py", "fabricops/hostside/__init__.py",
                   "fabricops/hostside/roce_boot.py", "fabricops/hostqos/__init__.py",
                   "fabricops/hostqos/knobs.py", "fabricops/hostqos/mlnx_qos.py",
                   "fabricops/parsers/__init__.py", "fabricops/parsers/mlnx_qos.py"):
        assert needed in paths
    assert not any(p.startswith(("fabricops/model/", "fabricops_lab/")) for p in paths), paths
    assert "fabricops/hostqos/plan.py" not in paths  # the controller's side: the config is its output
    assert [f["path"] for f in ship.files_for("fabricops.monitor.collector")] == [
        "fabricops/__init__.py", "fabricops/evidence/__init__.py", "fabricops/evidence/errors.py",
        "fabricops/evidence/hostfiles.py", "fabricops/evidence/tools.py", "fabricops/monitor/__init__.py",
        "fabricops/monitor/collector.py"]


def _filter():
    path = REPO / "plugins" / "filter" / "package.py"
    spec = importlib.util.spec_from_file_location("fabricops_filter_package_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FilterModule().filters()["package_files"]


def _tasks(role):
    return role_tasks(role, ROLES[role][0])


@pytest.mark.parametrize("role", sorted(ROLES))
def test_the_role_ships_the_package_files_byte_for_byte(role):
    _, pre, entry, launcher = ROLES[role]
    tasks = _tasks(role)
    facts = [t["ansible.builtin.set_fact"] for t in tasks if "ansible.builtin.set_fact" in t]
    exprs = [" ".join(v.split()) for f in facts for v in f.values()
             if isinstance(v, str) and "package_files" in v]
    assert len(exprs) == 1 and exprs[0].startswith(f"{{{{ '{entry}' | fabricops.fabric.package_files")
    # only what the one read of the installed copy found stale (package_stale) is installed, the
    # bytes read on the controller (package_payload), in one module run
    (install,) = [t["fabricops.fabric.install_files"] for t in tasks if "fabricops.fabric.install_files" in t]
    assert install["files"] == f"{{{{ {pre}_lib_stale.files | fabricops.fabric.package_payload }}}}"
    assert install["root"] == f"{{{{ {pre}_lib_dir }}}}"
    # the launcher is written once (by one fabricops.fabric.templates entry)
    srcs = [f["src"] for t in tasks for f in t.get("fabricops.fabric.templates", {}).get("files", [])]
    assert srcs.count(launcher) == 1

    shipped = _filter()(entry)
    root = Path(sys.modules["fabricops"].__file__).resolve().parent
    entry_file = Path(sys.modules[entry].__file__).resolve()
    assert str(entry_file) in [f["src"] for f in shipped]
    for f in shipped:
        assert Path(f["src"]) == root.parent / f["path"]
        assert Path(f["src"]).read_bytes() == (root.parent / f["path"]).read_bytes()
    # and the role keeps no copy of any package module
    modules = {p.read_bytes() for p in root.rglob("*.py")}
    for path in (REPO / "roles" / role).rglob("*"):
        assert not (path.is_file() and path.read_bytes() in modules), f"{path} is a copy of a package module"
    assert not (REPO / "roles" / role / "files").exists()


def test_package_files_refuses_what_is_not_a_package_module():
    from ansible.errors import AnsibleFilterError

    package_files = _filter()
    with pytest.raises(AnsibleFilterError, match=r"fabricops\.nope is not a module of the fabricops package"):
        package_files("fabricops.nope")
    with pytest.raises(AnsibleFilterError, match="is not a fabricops module name"):
        package_files("os.path")


def _render(role, lib):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(REPO / "roles" / role / "templates")),
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    prefix = "__roce_host" if role == "roce_host" else "__fabric_monitor"
    return env.get_template(ROLES[role][3]).render(
        ansible_managed="Ansible managed: do not edit", **{f"{prefix}_lib_dir": str(lib)})


def _ship(role, tmp_path):
    lib = tmp_path / "usr/local/lib/fabricops"
    for f in ship.files_for(ROLES[role][2]):
        (lib / f["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f["src"], lib / f["path"])
    launcher = tmp_path / "launcher"
    launcher.write_text(_render(role, lib))
    return launcher


def _bare(argv, tmp_path):
    """python3 without site-packages, user site or PYTHONPATH: what a host offers."""
    return subprocess.run([sys.executable, "-I", "-S", *argv], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60, check=False)


def test_bare_python_has_no_site_packages(tmp_path):
    proc = _bare(["-c", "import jinja2"], tmp_path)
    assert proc.returncode != 0 and "No module named 'jinja2'" in proc.stderr
    proc = _bare(["-c", "import fabricops"], tmp_path)
    assert proc.returncode != 0 and "No module named 'fabricops'" in proc.stderr


def test_shipped_boot_program_runs_on_the_standard_library_alone(tmp_path):
    launcher = _ship("roce_host", tmp_path)
    missing = tmp_path / "missing.json"
    proc = _bare([str(launcher), "verify", "--config", str(missing)], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"fabricops-roce-qos: cannot read {missing}:"), proc.stderr
    proc = _bare([str(launcher), "bogus"], tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (2, roce_boot.USAGE)
    # it imported the shipped tree, not the checkout
    code = (f"import sys; sys.path.insert(0, {str(launcher.parent / 'usr/local/lib/fabricops')!r}); "
            "import fabricops.hostside.roce_boot as m; print(m.__file__)")
    proc = _bare(["-c", code], tmp_path)
    assert proc.stdout.strip().startswith(str(tmp_path)), proc.stderr


def test_shipped_collector_runs_on_the_standard_library_alone(tmp_path):
    launcher = _ship("fabric_monitor", tmp_path)
    cfg = tmp_path / "collector.json"
    cfg.write_text(json.dumps({"nvlink": False, "host": "gpu04"}))
    (tmp_path / "sys").mkdir()
    out = tmp_path / "fabricops.prom"
    argv = [str(launcher), "--config", str(cfg), "--sysfs", str(tmp_path / "sys"), "--output", str(out)]
    proc = _bare(argv, tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert re.search(r'^fabricops_collector_last_run_timestamp_seconds\{host="gpu04"\} \d', text, re.M)
    assert set(re.findall(r"^# TYPE (\w+)", text, re.M)) <= {f"fabricops_{n}" for n in collector.METRICS}
