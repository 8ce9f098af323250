"""Where the ``fabricops.fabric`` collection is, found the way Ansible finds it.

Commands that run the collection's playbooks (``fabricops drift``) or read its data files find it
through Ansible's own collection search path: ``ANSIBLE_COLLECTIONS_PATH`` and ``collections_path``
of the ansible.cfg Ansible would read from the current directory (``ANSIBLE_CONFIG``,
``./ansible.cfg``, ``~/.ansible.cfg``, ``/etc/ansible/ansible.cfg``), then the defaults
(``~/.ansible/collections``, ``/usr/share/ansible/collections``) and collections installed into the
Python environment. A checkout is found the same way: its ansible.cfg points ``collections_path`` at
``.collections/``, whose ``fabricops/fabric`` link is the checkout itself (``scripts/setup.sh``).

Nothing here resolves a path from this source file's location, so the installed package works
from any directory, with or without a checkout.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fabricops.errors import FabricopsError

NAMESPACE, NAME = "fabricops", "fabric"
FQCN = f"{NAMESPACE}.{NAME}"


def collection_search_paths(include_python: bool = True) -> list[Path]:
    """Directories that may hold ``ansible_collections/fabricops/fabric``, in Ansible's order."""
    found: list[Path] = []
    try:
        from ansible import constants as C  # reads the ansible.cfg Ansible would read from here

        found += [Path(p).expanduser() for p in (C.COLLECTIONS_PATHS or [])]
    except Exception:  # pragma: no cover - ansible-core is a dependency; fall back to its defaults
        env = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.environ.get("ANSIBLE_COLLECTIONS_PATHS")
        found += [Path(p).expanduser() for p in (env or "").split(os.pathsep) if p]
        found += [Path("~/.ansible/collections").expanduser(), Path("/usr/share/ansible/collections")]
    # ansible-core also finds collections installed as Python packages (site-packages/ansible_collections)
    if include_python:
        found += [Path(p) for p in sys.path if p]
    out: list[Path] = []
    for p in found:
        if p not in out:
            out.append(p)
    return out


def _is_collection(d: Path) -> bool:
    return (d / "galaxy.yml").is_file() or (d / "MANIFEST.json").is_file()


def collection_root() -> Path:
    """The root of the ``fabricops.fabric`` collection Ansible would load.

    ``$FABRICOPS_COLLECTION_DIR`` (a collection root) wins when set."""
    override = os.environ.get("FABRICOPS_COLLECTION_DIR")
    if override:
        root = Path(override).expanduser()
        if not _is_collection(root):
            raise FabricopsError(
                f"FABRICOPS_COLLECTION_DIR={override} is not a collection root (no galaxy.yml or "
                "MANIFEST.json); point it at the installed fabricops.fabric collection or unset it"
            )
        return root.resolve()
    searched = collection_search_paths()
    for base in searched:
        candidate = base / "ansible_collections" / NAMESPACE / NAME
        if _is_collection(candidate):
            return candidate.resolve()
    shown = ", ".join(str(p) for p in collection_search_paths(include_python=False))[:400]
    raise FabricopsError(
        f"the Ansible collection {FQCN} is not installed where Ansible looks ({shown}); install it with "
        f"`ansible-galaxy collection install fabricops-fabric-<version>.tar.gz`, or set "
        "ANSIBLE_COLLECTIONS_PATH to where it is"
    )


def playbook(name: str | os.PathLike[str]) -> Path:
    """A playbook to run: a file that exists as given, else the collection's own playbook NAME.

    NAME may be a path (``my/site.yml``), a collection playbook's short name (``site``,
    ``site.yml``, ``playbooks/ofed.yml``) or its FQCN (``fabricops.fabric.site``)."""
    given = Path(name)
    if given.is_file():
        return given.resolve()
    text = str(name)
    if text.startswith(FQCN + "."):
        text = text[len(FQCN) + 1 :]
    stem = Path(text)
    if stem.parts and stem.parts[0] == "playbooks":
        stem = Path(*stem.parts[1:])
    if len(stem.parts) != 1 or stem.name.startswith("."):
        raise FabricopsError(f"playbook {name} does not exist (a file, or one of {FQCN}'s playbooks)")
    root = collection_root()
    base = stem.name.removesuffix(".yml").removesuffix(".yaml")
    for suffix in (".yml", ".yaml"):
        candidate = root / "playbooks" / (base + suffix)
        if candidate.is_file():
            return candidate
    known = sorted(p.stem for p in (root / "playbooks").glob("*.yml"))
    raise FabricopsError(f"playbook {name} does not exist; {FQCN} has: {', '.join(known)}")


def collection_file(rel: str) -> Path:
    """A data file shipped in the collection (``monitoring/alerts.yml``)."""
    path = collection_root() / rel
    if not path.exists():
        raise FabricopsError(f"{rel} is missing from the {FQCN} collection at {collection_root()}")
    return path
