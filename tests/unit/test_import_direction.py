"""Imports run one way between the rooms (ARCHITECTURE.md): act acts on verify's and diagnose's
results, so nothing under fabricops.verify imports fabricops.act; what both need of Slurm (the node
records) lives in fabricops.parsers.slurm, below both."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "fabricops"


def _imports(path: Path, src: Path = SRC) -> set[str]:
    """Every module ``path`` imports (relative imports resolved against the package tree ``src``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level:
            pkg = ".".join(path.relative_to(src.parent).with_suffix("").parts[: -node.level])
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


# The product never imports the emulated rack (issue 39 point 2): the lab is its own distribution
# (lab/pyproject.toml, package fabricops_lab) that a production controller does not have. It adds
# `fabricops lab` through the `fabricops.subcommands` entry point, so not even the CLI names it.


def _lab_names(path: Path) -> list[str]:
    """The lab modules ``path`` imports, or names in a string (``importlib.import_module("...")``)."""
    tree = ast.parse(path.read_text(), str(path))
    names = {m for m in _imports(path) if m == "fabricops_lab" or m.startswith("fabricops_lab.")}
    names.update(
        n.value for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("fabricops_lab")
    )
    return sorted(names)


def test_the_product_does_not_import_the_lab():
    bad = {str(p.relative_to(SRC)): _lab_names(p) for p in sorted(SRC.rglob("*.py")) if _lab_names(p)}
    assert bad == {}


def test_the_lab_check_sees_a_new_lab_import(tmp_path):
    """The plan writer importing the lab's topology loader again, or the CLI naming its module."""
    f = tmp_path / "writers.py"
    f.write_text("from fabricops_lab import topology\nimport fabricops_lab.hosts\n"
                 "SUBCOMMANDS = ['fabricops_lab.cli']\n")
    assert _lab_names(f) == ["fabricops_lab", "fabricops_lab.cli", "fabricops_lab.hosts"]


# Rooms import one way: switch/ (inventory access, transports, the lock, the knob machinery) sits
# below roce/ (each switch platform's knob tables and its apply flow); nothing under switch/ imports
# roce/, deferred into a function or not. Room = the first package below fabricops (a top-level
# module is its own room).


def _room(module: str) -> str | None:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "fabricops" and len(parts) > 1 else None


def _room_graph(src: Path) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for p in sorted(src.rglob("*.py")):
        rel = p.relative_to(src.parent).with_suffix("").parts
        here = _room(".".join(rel))
        for m in _imports(p, src):
            there = _room(m)
            if here and there and there != here:
                graph.setdefault(here, set()).add(there)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one room (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_between_the_products_rooms():
    assert _circles(_room_graph(SRC)) == []


def test_switch_does_not_import_roce():
    bad = {}
    for p in sorted((SRC / "switch").rglob("*.py")):
        hits = sorted(m for m in _imports(p) if _of(m, ("roce",)))
        if hits:
            bad[str(p.relative_to(SRC))] = hits
    assert bad == {}


def test_the_circle_check_sees_switch_importing_roce_platforms_again(tmp_path):
    """A copy of the product with one deferred import of roce.platforms added to switch/: a circle."""
    src = tmp_path / "fabricops"
    (src / "switch").mkdir(parents=True)
    (src / "roce" / "platforms").mkdir(parents=True)
    (src / "roce" / "platforms" / "onyx.py").write_text("from fabricops.switch.knobs import OnyxKnob\n")
    (src / "switch" / "knobs.py").write_text("def f():\n    from fabricops.roce.platforms import onyx\n")
    assert _circles(_room_graph(src)) == [["fabricops.roce", "fabricops.switch"]]
    (src / "switch" / "knobs.py").write_text("X = 1\n")
    assert _circles(_room_graph(src)) == []
