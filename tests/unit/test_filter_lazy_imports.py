"""The collection's filter files import the fabricops modules they shim only when a filter runs.

Ansible loads every filter file of the collection in each forked worker (one per task and host)
the first time a template uses any of them; a top-level import of every fabricops module made
each such task pay for all of them (plugin_utils/package.py, LazyModule). Checked in a fresh
interpreter through Ansible's own plugin loader, as a worker would load them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, sys
from ansible.plugins.loader import filter_loader, init_plugin_loader
init_plugin_loader([sys.argv[1]])
before = set(sys.modules)
f = filter_loader.get("fabricops.fabric.mlnx_ofed_stack_kind")
loaded = sorted(m for m in set(sys.modules) - before if m.startswith("fabricops"))
kind = f.j2_function({"rc": 0, "stdout": "MLNX_OFED_LINUX-24.10-1.1.4.0:\n"})
used = sorted(m for m in set(sys.modules) - before if m.startswith("fabricops"))
print(json.dumps({"loaded": loaded, "used": used, "kind": kind}))
"""


def test_a_filter_lookup_imports_no_heavy_fabricops_module():
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(REPO / ".collections")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    # every filter file is loaded, but of the package only its error classes
    assert set(got["loaded"]) <= {"fabricops", "fabricops.errors"}, got["loaded"]
    # the filter still works, and brings in the one module it shims
    assert got["kind"] == "mlnx_ofed" and "fabricops.doca" in got["used"], got
    assert "fabricops.firmware" not in got["used"] and "fabricops.nccl" not in got["used"], got["used"]
