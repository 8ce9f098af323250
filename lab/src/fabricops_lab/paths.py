"""Where the lab keeps its state (docs/lab.md, "Layout").

``STATE_DIR`` is ``$FABRICOPS_LAB_DIR`` or ``/var/lib/fabricops-lab``; the image cache lives outside
it (``/var/cache/fabricops/images``, ``$FABRICOPS_IMAGE_CACHE``) so ``lab down`` keeps it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fabricops.errors import FabricopsError

STATE_DIR = Path(os.environ.get("FABRICOPS_LAB_DIR", "/var/lib/fabricops-lab"))
IMAGE_CACHE = Path(os.environ.get("FABRICOPS_IMAGE_CACHE", "/var/cache/fabricops/images"))

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"
EMUL_DIR = PACKAGE_DIR / "emul"


def default_inventory_dir() -> Path:
    """Where `lab up` writes the lab's inventory: ``$FABRICOPS_LAB_INVENTORY``; in a checkout (the
    collection Ansible loads from here has its ansible.cfg, whose default inventory this is)
    ``inventories/lab``; else ``STATE_DIR/inventory`` (pass it with ``-i``)."""
    override = os.environ.get("FABRICOPS_LAB_INVENTORY")
    if override:
        return Path(override)
    from fabricops import paths as collection_paths

    try:
        root = collection_paths.collection_root()
    except FabricopsError:
        root = None
    if root is not None and (root / "ansible.cfg").is_file() and os.access(root, os.W_OK):
        return root / "inventories" / "lab"
    return STATE_DIR / "inventory"


def host_dir(name: str) -> Path:
    return STATE_DIR / "hosts" / name


def fabric_dir() -> Path:
    return STATE_DIR / "fabric"


def switch_dir(name: str) -> Path:
    return STATE_DIR / "switches" / name


def ssh_dir() -> Path:
    return STATE_DIR / "ssh"


def repo_dir() -> Path:
    return STATE_DIR / "repo"


def lab_json() -> Path:
    return STATE_DIR / "lab.json"


def load_lab() -> dict[str, Any]:
    """The running lab's description (written by ``fabricops lab up``)."""
    try:
        return json.loads(lab_json().read_text())
    except FileNotFoundError:
        raise FabricopsError("no lab is up; run fabricops lab up") from None
    except ValueError as exc:
        raise FabricopsError(f"{lab_json()} is not valid JSON ({exc}); run fabricops lab down") from None


def save_lab(lab: dict[str, Any]) -> None:
    target = lab_json()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(lab, indent=2, sort_keys=True) + "\n")
    tmp.replace(target)
