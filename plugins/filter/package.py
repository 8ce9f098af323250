# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""The filter that finds host-side code in the installed fabricops package: fabricops.fabric.package_files.

Roles ship the programs that run on hosts (the roce_host boot-time apply/verify program, the
fabric_monitor collector) as files of the fabricops package installed on the controller, never as
copies inside the collection (which carries no ``src/``). The logic is fabricops.hostside.ship.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.fabricops.fabric.plugins.plugin_utils.package import missing_package

try:
    from fabricops.errors import FabricopsError
    from fabricops.hostside import ship as _ship
except ImportError as exc:  # pragma: no cover - only without the Python package
    _ship = None
    FabricopsError = Exception
    IMPORT_ERROR = exc
else:
    IMPORT_ERROR = None


def package_files(module):
    """A host-side module of the fabricops package -> [{path, src}] of every file it needs."""
    if IMPORT_ERROR is not None:
        raise AnsibleFilterError(missing_package("the fabricops.fabric.package_files filter", IMPORT_ERROR))
    try:
        return _ship.files_for(str(module))
    except FabricopsError as exc:
        raise AnsibleFilterError(f"package_files: {exc}") from None


class FilterModule:
    def filters(self):
        return {"package_files": package_files}
