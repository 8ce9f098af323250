"""Every module's DOCUMENTATION, EXAMPLES and RETURN is valid YAML (ansible-doc and Galaxy read them)."""

import ast
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).parents[2] / "plugins" / "modules").glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_documentation_is_yaml(path):
    tree = ast.parse(path.read_text())
    docs = {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN")
    }
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, path.name
    doc = yaml.safe_load(docs["DOCUMENTATION"])
    assert doc["module"] == path.stem and doc["short_description"]
    assert yaml.safe_load(docs["EXAMPLES"]) is not None
    yaml.safe_load(docs["RETURN"])
