# SPDX-License-Identifier: Apache-2.0
"""Every filter of fabricops.fabric is documented (plugins/filter/<name>.yml), the docs match the
Python signature (positional order, required, defaults), and ansible-doc -t filter reads them."""

import importlib.util
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FILTER_DIR = REPO / "plugins" / "filter"


def _filters():
    found = {}
    for path in sorted(FILTER_DIR.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"fabricops_filter_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for name, func in mod.FilterModule().filters().items():
            assert name not in found, f"filter {name} is defined twice"
            found[name] = func
    return found


FILTERS = _filters()


def _doc(name):
    path = FILTER_DIR / f"{name}.yml"
    assert path.is_file(), f"filter {name} has no documentation file plugins/filter/{name}.yml"
    return yaml.safe_load(path.read_text())


def test_there_are_filters():
    assert len(FILTERS) >= 30


def test_no_documentation_without_a_filter():
    assert {p.stem for p in FILTER_DIR.glob("*.yml")} == set(FILTERS)


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_filter_documentation_matches_the_signature(name):
    data = _doc(name)
    assert set(data) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    doc = data["DOCUMENTATION"]
    assert doc["name"] == name and doc["short_description"] and doc["description"]
    assert f"fabricops.fabric.{name}" in data["EXAMPLES"]
    assert "_value" in data["RETURN"]
    params = list(inspect.signature(FILTERS[name]).parameters.values())
    positional = [p.strip() for p in doc["positional"].split(",")]
    assert positional == ["_input"] + [p.name for p in params[1:]]
    options = doc["options"]
    assert set(options) == set(positional)
    assert options["_input"].get("required") is True
    for p in params[1:]:
        opt = options[p.name]
        assert opt.get("description") and opt.get("type"), f"{name}: option {p.name}"
        has_default = p.default is not inspect.Parameter.empty
        assert bool(opt.get("required")) is not has_default, f"{name}: {p.name} required"
        if has_default:
            assert opt.get("default") == p.default, f"{name}: {p.name} default"


def test_ansible_doc_reads_every_filter(tmp_path):
    """The real ansible-doc, on the collection as Ansible finds it (ansible_collections/fabricops/fabric)."""
    ns = tmp_path / "ansible_collections" / "fabricops"
    ns.mkdir(parents=True)
    (ns / "fabric").symlink_to(REPO, target_is_directory=True)
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\n")
    exe = Path(sys.executable).with_name("ansible-doc")
    assert exe.exists(), f"ansible-doc not found next to {sys.executable}"
    env = {**os.environ, "ANSIBLE_CONFIG": str(cfg), "ANSIBLE_COLLECTIONS_PATH": str(tmp_path),
           "ANSIBLE_HOME": str(tmp_path / "home"), "ANSIBLE_NOCOLOR": "1"}
    names = [f"fabricops.fabric.{n}" for n in sorted(FILTERS)]
    proc = subprocess.run([str(exe), "-t", "filter", "--json", *names], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-2000:]
    docs = json.loads(proc.stdout)
    assert sorted(docs) == names
    for fqcn, entry in docs.items():
        assert entry["doc"]["name"] == fqcn.rsplit(".", 1)[1], fqcn
        assert entry["doc"]["options"]["_input"], fqcn
        assert entry["examples"] and entry["return"]["_value"], fqcn
