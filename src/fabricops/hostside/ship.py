"""Which files of the installed fabricops package a host needs to run one host-side module.

:func:`files_for` starts at the entry module (for example ``fabricops.hostside.roce_boot``) and
follows every ``fabricops`` import it finds in the source (``import fabricops.x``, ``from
fabricops.x import y``, relative imports), transitively, adding the ``__init__.py`` of each package
on the way. Imports of anything else must be the standard library: a host has only ``python3``
(tests/unit/hostqos/test_hostside_single_source.py runs the shipped files in an interpreter
without site-packages).

The files come from the package this Python imports, the one installed on the controller: the
collection carries no copy of them.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

import fabricops
from fabricops.errors import FabricopsError

__all__ = ["PROBE_FORMAT", "ShipError", "files_for", "package_root", "stale"]

_NAME = re.compile(r"fabricops(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


class ShipError(FabricopsError):
    """An entry that is not a module of the installed fabricops package; one sentence."""


def package_root() -> Path:
    """The directory of the installed ``fabricops`` package."""
    return Path(fabricops.__file__).resolve().parent


def _source(root: Path, module: str) -> Path | None:
    parts = module.split(".")[1:]
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(module: str, path: Path) -> set[str]:
    """The fabricops module names ``path`` (module ``module``) imports, submodules included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if a.name != "*")
    return {n for n in found if n == "fabricops" or n.startswith("fabricops.")}


def files_for(module: str) -> list[dict[str, str]]:
    """``[{"path": "fabricops/hostqos/knobs.py", "src": "/.../fabricops/hostqos/knobs.py"}, ...]``,
    sorted by path: the entry, every fabricops module it needs and their packages' ``__init__.py``."""
    if not isinstance(module, str) or not _NAME.fullmatch(module):
        raise ShipError(
            f"{module!r} is not a fabricops module name (for example fabricops.hostside.roce_boot)."
        )
    root = package_root()
    if _source(root, module) is None:
        raise ShipError(f"{module} is not a module of the fabricops package at {root}.")
    todo, seen, files = [module], set(), {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # the packages on the way
        path = _source(root, name)
        if path is None:  # ``from fabricops.x import name``: a name, not a submodule
            continue
        files[path.relative_to(root.parent).as_posix()] = str(path)
        todo.extend(_imports(name, path))
    return [{"path": rel, "src": files[rel]} for rel in sorted(files)]


# What the roles read of the installed copy in one host round trip (``find LIB -printf PROBE_FORMAT
# -type f -exec sha256sum {} +``): one ``TYPE MODE UID GID RELPATH`` line per entry (``%P`` is empty
# for LIB itself), then ``sha256sum``'s ``HEX  /abs/path`` lines for the files.
PROBE_FORMAT = "%y %m %U %G %P\\n"
_ENTRY = re.compile(r"(?P<type>[a-zA-Z]) (?P<mode>[0-7]{3,4}) (?P<uid>\d+) (?P<gid>\d+) (?P<path>.*)")
_SUM = re.compile(r"(?P<sha>[0-9a-f]{64})  (?P<path>/.*)")


def stale(files: list[dict[str, str]], probe: str, lib_dir: str, mode: str = "644",
          dir_mode: str = "755") -> dict[str, list]:
    """Which of ``files`` (:func:`files_for`) and of their directories under ``lib_dir`` differ on the
    host, judged from ``probe`` (the output of the read above): ``{"files": [entry, ...], "dirs":
    [relpath, ...]}``. A file is stale when it is absent, not a regular file, of another content,
    mode or owner (root:root); a directory when absent, not a directory, of another mode or owner.
    A line the read did not print (an unreadable or missing tree) counts as absent, so an
    unreadable probe ships everything: it never hides a difference."""
    lib = str(lib_dir).rstrip("/")
    entries: dict[str, tuple[str, str, str, str]] = {}
    sums: dict[str, str] = {}
    for line in str(probe).splitlines():
        m = _SUM.fullmatch(line)
        if m:
            if m["path"].startswith(lib + "/"):
                sums[m["path"][len(lib) + 1:]] = m["sha"]
            continue
        m = _ENTRY.fullmatch(line)
        if m:
            entries[m["path"]] = (m["type"], m["mode"].lstrip("0") or "0", m["uid"], m["gid"])
    want_dirs = sorted({str(Path(f["path"]).parent) for f in files})
    dirs = [d for d in want_dirs if entries.get(d) != ("d", dir_mode, "0", "0")]
    out = []
    for f in files:
        digest = hashlib.sha256(Path(f["src"]).read_bytes()).hexdigest()
        if entries.get(f["path"]) != ("f", mode, "0", "0") or sums.get(f["path"]) != digest:
            out.append(f)
    return {"files": out, "dirs": dirs}
