"""The roles' one-read check of the host-side modules (fabricops.hostside.ship.stale): the probe is
real ``find`` on a real tree, the comparison is what decides which files a run writes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from roletasks import role_tasks

from fabricops.hostside import ship

REPO = Path(__file__).resolve().parents[3]
ENTRY = "fabricops.hostside.roce_boot"
# role -> (task file of the copy, prefix, task file and register of the one host_read)
TASKS = {"roce_host": ("persist.yml", "__roce_host", "preflight.yml", "__roce_host_probe"),
         "fabric_monitor": ("configure.yml", "__fabric_monitor", "configure.yml", "__fabric_monitor_read")}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the shipped files are root:root: run as root")


def _install(lib: Path, files):
    for f in files:
        (lib / f["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f["src"], lib / f["path"])
        os.chmod(lib / f["path"], 0o644)
    for d in [lib, *(p for p in lib.rglob("*") if p.is_dir())]:
        os.chmod(d, 0o755)


def _probe(lib: Path) -> str:
    fmt = ship.PROBE_FORMAT.replace("\\n", "\n")
    argv = ["find", str(lib), "-printf", fmt, "-type", "f", "-exec", "sha256sum", "{}", "+"]
    return subprocess.run(argv, capture_output=True, text=True).stdout


@pytest.fixture
def tree(tmp_path):
    files = ship.files_for(ENTRY)
    lib = tmp_path / "usr/local/lib/fabricops"
    _install(lib, files)
    return lib, files


def test_an_installed_copy_that_matches_writes_nothing(tree):
    lib, files = tree
    assert ship.stale(files, _probe(lib), str(lib)) == {"files": [], "dirs": []}


def test_a_changed_byte_mode_or_type_is_written_and_only_that(tree):
    lib, files = tree
    a, b, c = files[1]["path"], files[2]["path"], files[3]["path"]
    with open(lib / a, "ab") as fh:
        fh.write(b"#")
    os.chmod(lib / b, 0o600)
    (lib / c).unlink()
    (lib / c).mkdir()
    got = ship.stale(files, _probe(lib), str(lib))
    assert [f["path"] for f in got["files"]] == sorted([a, b, c]) and got["dirs"] == []


def test_a_missing_directory_brings_its_files(tree):
    lib, files = tree
    shutil.rmtree(lib / "fabricops/parsers")
    os.chmod(lib / "fabricops/hostqos", 0o700)
    got = ship.stale(files, _probe(lib), str(lib))
    assert got["dirs"] == ["fabricops/hostqos", "fabricops/parsers"]
    parsers = {f["path"] for f in files if f["path"].startswith("fabricops/parsers/")}
    assert {f["path"] for f in got["files"]} == parsers


MISSING = "find: '/usr/local/lib/fabricops': No such file or directory\n"


@pytest.mark.parametrize("probe", ["", MISSING, "garbage"])
def test_a_read_that_shows_nothing_ships_everything(tree, probe):
    lib, files = tree
    got = ship.stale(files, probe, str(lib))
    assert got["files"] == files and got["dirs"] == sorted({str(Path(f["path"]).parent) for f in files})


def test_an_owner_other_than_root_is_a_difference(tree):
    lib, files = tree
    first = files[0]["path"]
    text = _probe(lib).replace(f"f 644 0 0 {first}\n", f"f 644 1000 0 {first}\n")
    assert [f["path"] for f in ship.stale(files, text, str(lib))["files"]] == [files[0]["path"]]


@pytest.mark.parametrize("role", sorted(TASKS))
def test_the_roles_read_with_the_format_the_comparison_parses(role):
    name, pre, probe_file, register = TASKS[role]
    tasks = role_tasks(role, name)
    probes = yaml.safe_load((REPO / "roles" / role / "tasks" / probe_file).read_text())
    # one host_read (it only reads, in check mode too, and never fails on find's exit status)
    (probe,) = [t for t in probes if t.get("register") == register]
    commands = probe["fabricops.fabric.host_read"]["commands"]
    if isinstance(commands, str):  # built in the task's vars (roce_host adds each port's mlnx_qos read)
        assert commands.startswith(f"{{{{ {pre}_reads ")
        commands = probe["vars"][f"{pre}_reads"]
    argv = commands["lib"]
    assert argv[:4] == ["find", f"{{{{ {pre}_lib_dir }}}}", "-printf", ship.PROBE_FORMAT]
    assert argv[4:] == ["-type", "f", "-exec", "sha256sum", "{}", "+"]
    facts = [t["ansible.builtin.set_fact"] for t in tasks if "ansible.builtin.set_fact" in t]
    (stale,) = [f[f"{pre}_lib_stale"] for f in facts if f"{pre}_lib_stale" in f]
    assert f"package_stale({register}.commands.lib.stdout," in " ".join(stale.split())
    # the one install writes what the comparison found, nothing else, and is skipped when it found nothing
    (install,) = [t for t in tasks if "fabricops.fabric.install_files" in t]
    args = install["fabricops.fabric.install_files"]
    assert args["files"] == f"{{{{ {pre}_lib_stale.files | fabricops.fabric.package_payload }}}}"
    assert args["dirs"] == f"{{{{ {pre}_lib_stale.dirs }}}}" and args["root"] == f"{{{{ {pre}_lib_dir }}}}"
    assert install["when"] == (f"{pre}_lib_stale.dirs | length > 0 or {pre}_lib_stale.files | length > 0")
