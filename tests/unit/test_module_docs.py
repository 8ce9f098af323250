# SPDX-License-Identifier: Apache-2.0
"""Every module's DOCUMENTATION, EXAMPLES and RETURN is valid YAML (ansible-doc and Galaxy read them),
and says how the module behaves in check mode and diff mode and where it runs (attributes)."""

import ast
import re
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).parents[2] / "plugins" / "modules").glob("*.py"))
SUPPORT = {"full", "partial", "none", "N/A"}


def docs_of(path):
    tree = ast.parse(path.read_text())
    return {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN")
    }


def test_there_are_modules():
    assert len(MODULES) >= 5


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_documentation_is_yaml(path):
    docs = docs_of(path)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, path.name
    doc = yaml.safe_load(docs["DOCUMENTATION"])
    assert doc["module"] == path.stem and doc["short_description"]
    assert yaml.safe_load(docs["EXAMPLES"]) is not None
    yaml.safe_load(docs["RETURN"])


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_documents_check_diff_and_platform(path):
    doc = yaml.safe_load(docs_of(path)["DOCUMENTATION"])
    attrs = doc.get("attributes") or {}
    for name in ("check_mode", "diff_mode", "platform"):
        assert name in attrs, f"{path.name}: attributes.{name} is not documented"
    for name in ("check_mode", "diff_mode"):
        assert attrs[name].get("support") in SUPPORT, f"{path.name}: attributes.{name}.support"
    assert attrs["platform"].get("platforms"), f"{path.name}: attributes.platform.platforms"
    # The descriptions come from ansible-core's fragment (ansible-test requires them).
    assert "ansible.builtin.action_common_attributes" in doc.get("extends_documentation_fragment", [])
    # ansible-test's author format: "Name (@github)".
    authors = doc["author"] if isinstance(doc["author"], list) else [doc["author"]]
    assert all(re.search(r"\(@[\w-]+\)$", a) for a in authors), authors


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_hidden_parameters_are_documented(path):
    """Every argument_spec key (the ``_`` internals the action plugin passes, too) is an option."""
    doc = yaml.safe_load(docs_of(path)["DOCUMENTATION"])
    tree = ast.parse(path.read_text())
    spec = None
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "argument_spec" and isinstance(node.value, ast.Dict):
            spec = {k.value for k in node.value.keys}
    if spec is None:  # documentation-only module: the action plugin is the implementation
        return
    assert spec <= set(doc.get("options") or {}), sorted(spec - set(doc.get("options") or {}))


def _nested_keys(options, where):
    for name, spec in (options or {}).items():
        assert "options" not in spec, f"{where}.{name}: module docs nest with 'suboptions', not 'options'"
        _nested_keys(spec.get("suboptions"), f"{where}.{name}")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_nested_options_are_suboptions(path):
    """Module DOCUMENTATION nests with ``suboptions`` (role argument specs use ``options``)."""
    _nested_keys(yaml.safe_load(docs_of(path)["DOCUMENTATION"]).get("options"), path.stem)
