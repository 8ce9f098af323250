"""What a controller installs: the package's runtime dependencies, the collection's requirements
for ansible-galaxy / ansible-builder, and how commands find the collection from any directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from fabricops import paths
from fabricops.errors import FabricopsError

REPO = Path(__file__).resolve().parents[2]


def _reqs(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            name, spec = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", line).groups()
            out[name.lower()] = spec.replace(" ", "")
    return out


def test_collection_requirements_are_the_package_runtime_dependencies():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = _reqs(project["dependencies"])
    assert _reqs((REPO / "requirements.txt").read_text().splitlines()) == runtime
    # the brief's required dependencies are runtime ones; the lab's SSH server is not
    required = {"ansible-core", "ansible-runner", "netmiko", "jinja2", "pyyaml", "pytest-testinfra"}
    assert required <= set(runtime)
    assert "asyncssh" not in runtime
    lab = tomllib.loads((REPO / "lab/pyproject.toml").read_text())["project"]
    assert "asyncssh" in _reqs(lab["dependencies"])
    assert _reqs(lab["dependencies"])["fabricops"] == f"=={project['version']}" == f"=={lab['version']}"


def test_the_lab_is_its_own_distribution_that_adds_its_subcommand():
    """The emulated rack is lab/pyproject.toml's fabricops-lab: the product's package finder and
    package data hold nothing of it, and `fabricops lab` comes through the entry point."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "lab" not in project["project"]["optional-dependencies"]
    assert not (REPO / "src/fabricops/lab").exists()
    data = project["tool"]["setuptools"]["package-data"]
    assert not [g for globs in data.values() for g in globs if "lab" in g]
    lab = tomllib.loads((REPO / "lab/pyproject.toml").read_text())
    assert lab["project"]["entry-points"]["fabricops.subcommands"] == {"lab": "fabricops_lab.cli:register"}
    from fabricops import cli

    assert cli.PLUGIN_GROUP == "fabricops.subcommands"
    assert "lab" in cli.build_parser()._subparsers._group_actions[0].choices  # installed here (setup.sh)


def test_meta_execution_environment_points_at_the_requirement_files():
    meta = yaml.safe_load((REPO / "meta/execution-environment.yml").read_text())
    assert meta["version"] == 1
    assert meta["dependencies"]["python"] == "requirements.txt"
    assert meta["dependencies"]["system"] == "bindep.txt"
    assert (REPO / "bindep.txt").is_file()


def test_the_collection_build_leaves_out_the_checkouts_settings():
    ignore = yaml.safe_load((REPO / "galaxy.yml").read_text())["build_ignore"]
    for entry in ("ansible.cfg", "inventories/lab", ".venv", "tests", ".collections", "src", "lab"):
        assert entry in ignore


def test_no_runtime_module_finds_files_from_its_own_location():
    """parents[N] of a source file is the checkout's layout, not an installed package's."""
    offenders = [
        str(f.relative_to(REPO))
        for f in (REPO / "src/fabricops").rglob("*.py")
        if re.search(r"__file__\)?\.resolve\(\)\.parents\[", f.read_text())
    ]
    assert offenders == []


def _collections_dir(tmp_path: Path) -> Path:
    coll = tmp_path / "colls"
    (coll / "ansible_collections/fabricops").mkdir(parents=True)
    (coll / "ansible_collections/fabricops/fabric").symlink_to(REPO)
    return coll


def _in(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run CODE in a fresh interpreter from an empty directory (Ansible reads its config at import)."""
    work = tmp_path / "empty"
    work.mkdir(exist_ok=True)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "FABRICOPS_"))}
    clean.update(HOME=str(tmp_path / "home"), **env)
    return subprocess.run([sys.executable, "-c", code], cwd=work, env=clean, capture_output=True,
                          text=True, timeout=60)


def test_the_collection_is_found_through_ansibles_collection_path_from_any_directory(tmp_path):
    coll = _collections_dir(tmp_path)
    code = ("from fabricops import paths; print(paths.collection_root()); "
            "print(paths.playbook('fabricops.fabric.site')); print(paths.playbook('ofed.yml'))")
    proc = _in(tmp_path, code, ANSIBLE_COLLECTIONS_PATH=str(coll))
    assert proc.returncode == 0, proc.stderr
    root, site, ofed = proc.stdout.split()
    assert Path(root) == REPO.resolve()
    assert Path(site) == REPO / "playbooks/site.yml" and Path(ofed) == REPO / "playbooks/ofed.yml"


def test_an_uninstalled_collection_is_one_sentence_naming_the_install_command(tmp_path):
    code = ("from fabricops import paths\n"
            "try:\n    paths.collection_root()\nexcept Exception as e:\n    print(type(e).__name__, e)")
    proc = _in(tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("FabricopsError the Ansible collection fabricops.fabric is not installed")
    assert "ansible-galaxy collection install" in proc.stdout and "\n" not in proc.stdout.strip()


def test_unknown_playbooks_are_refused_with_the_known_ones():
    with pytest.raises(FabricopsError, match=r"playbook nosuch does not exist; .*has: .*site"):
        paths.playbook("nosuch")
    with pytest.raises(FabricopsError, match="does not exist"):
        paths.playbook("../etc/passwd")


def test_ansible_commands_start_without_a_deprecation_warning():
    """The bound on cryptography (pyproject.toml): with 51, ansible-core 2.19's start-up import of DSA
    printed a CryptographyDeprecationWarning before every command's output (the demo, CI logs)."""
    import subprocess
    import sys
    from pathlib import Path

    playbook = Path(sys.executable).parent / "ansible-playbook"
    proc = subprocess.run([str(playbook), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
