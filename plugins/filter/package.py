# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""The filter that finds host-side code in the installed fabricops package: fabricops.fabric.package_files.

Roles ship the programs that run on hosts (the roce_host boot-time apply/verify program, the
fabric_monitor collector) as files of the fabricops package installed on the controller, never as
copies inside the collection (which carries no ``src/``). The logic is fabricops.hostside.ship.
"""

from __future__ import annotations

import base64

from ansible.errors import AnsibleFilterError
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import LazyModule, missing_package

try:
    from fabricops.errors import FabricopsError
except ImportError as exc:  # pragma: no cover - only without the Python package
    FabricopsError = Exception
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None
# imported on first use (plugin_utils/package.py, LazyModule: a worker per task loads this file)
_ship = LazyModule("fabricops.hostside.ship")


def package_files(module):
    """A host-side module of the fabricops package -> [{path, src}] of every file it needs."""
    if IMPORT_ERROR is not None:
        raise AnsibleFilterError(missing_package("the fabricops.fabric.package_files filter", IMPORT_ERROR))
    try:
        return _ship.files_for(str(module))
    except FabricopsError as exc:
        raise AnsibleFilterError(f"package_files: {exc}") from None


def package_stale(files, probe, lib_dir):
    """package_files' entries and their directories that differ on the host, judged from one read
    of the installed copy (``find LIB -printf '%y %m %U %G %P\\n' -type f -exec sha256sum {} +``):
    ``{files: [...], dirs: [...]}``; only these are written, so a no-change run makes no per-file
    round trip and check mode still reports each file that would change."""
    if IMPORT_ERROR is not None:
        raise AnsibleFilterError(missing_package("the fabricops.fabric.package_stale filter", IMPORT_ERROR))
    if not isinstance(files, list):
        raise AnsibleFilterError("package_stale: the input must be the list package_files gives.")
    return _ship.stale(files, probe or "", str(lib_dir))


def package_payload(files):
    """package_files' (or package_stale's) entries -> ``[{path, content}]`` for
    fabricops.fabric.install_files: each file's bytes read here, on the controller, base64-encoded."""
    entries = files if isinstance(files, list) else [None]
    if not all(isinstance(f, dict) and {"path", "src"} <= set(f) for f in entries):
        raise AnsibleFilterError(
            "package_payload: the input must be the list package_files or package_stale gives."
        )
    out = []
    for f in files:
        try:
            with open(f["src"], "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise AnsibleFilterError(f"package_payload: cannot read {f['src']}: {exc.strerror}") from None
        out.append({"path": f["path"], "content": base64.b64encode(data).decode("ascii")})
    return out


class FilterModule:
    def filters(self):
        return {
            "package_files": package_files,
            "package_stale": package_stale,
            "package_payload": package_payload,
        }
