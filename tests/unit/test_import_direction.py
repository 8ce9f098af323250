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
