"""Imports run one way between the rooms (ARCHITECTURE.md): act acts on verify's and diagnose's
results, so nothing under fabricops.verify imports fabricops.act; what both need of Slurm (the node
records) lives in fabricops.parsers.slurm, below both."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "fabricops"


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level:
            pkg = ".".join(path.relative_to(SRC.parent).with_suffix("").parts[: -node.level])
            out.add(f"{pkg}.{node.module}" if node.module else pkg)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _of(module: str, rooms: tuple[str, ...]) -> bool:
    return any(module == f"fabricops.{r}" or module.startswith(f"fabricops.{r}.") for r in rooms)


def test_verify_never_imports_act():
    bad = {}
    for p in sorted((SRC / "verify").rglob("*.py")):
        hits = sorted(m for m in _imports(p) if _of(m, ("act",)))
        if hits:
            bad[str(p.relative_to(SRC))] = hits
    assert bad == {}


def test_parsers_import_no_room_above_them():
    rooms = ("act", "verify", "diagnose", "drift", "sched", "lab", "switch", "roce", "monitor")
    bad = {}
    for p in sorted((SRC / "parsers").rglob("*.py")):
        hits = sorted(m for m in _imports(p) if _of(m, rooms))
        if hits:
            bad[str(p.relative_to(SRC))] = hits
    assert bad == {}


def test_the_check_sees_an_import_of_act(tmp_path):
    """The walker finds both import forms (a check that never fires proves nothing)."""
    f = tmp_path / "m.py"
    f.write_text("import fabricops.act.slurm\nfrom fabricops.act import plan\n")
    assert {"fabricops.act.slurm", "fabricops.act"} <= _imports(f)


# The product never imports the emulated rack (issue 39 point 2). One import is debt, not design: the
# plan writer validates the lab slice it writes with the lab's own topology loader. (The CLI names the
# lab's subcommand module as a string and skips it when it is absent.) A new import of the lab
# anywhere else fails here; the list only shrinks.
LAB_IMPORTS_ALLOWED = {"plan/writers.py"}


def test_the_product_does_not_import_the_lab():
    bad = {}
    for p in sorted(SRC.rglob("*.py")):
        rel = str(p.relative_to(SRC))
        if rel.startswith("lab/") or rel in LAB_IMPORTS_ALLOWED:
            continue
        hits = sorted(m for m in _imports(p) if _of(m, ("lab",)))
        if hits:
            bad[rel] = hits
    assert bad == {}
    # the CLI names the lab's subcommand module as a string, imported only when it is installed
    cli = (SRC / "cli.py").read_text()
    assert '"fabricops.lab.cli",' in cli and not any(_of(m, ("lab",)) for m in _imports(SRC / "cli.py"))


def test_the_lab_check_sees_a_new_lab_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from fabricops.lab import topology\nimport fabricops.lab.hosts\n")
    assert {m for m in _imports(f) if _of(m, ("lab",))} == {"fabricops.lab", "fabricops.lab.hosts"}
