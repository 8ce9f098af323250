"""``fabricops lab down`` leaves nothing behind (runs last: it takes the shared lab down)."""

from __future__ import annotations

import re
import subprocess

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.lab_teardown]


def test_down_leaves_no_trace(lab):
    from fabricops_lab import paths, rack

    rack.down()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert not re.findall(r"^\d+: (fo-[^:@]+)", links, re.M)
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [ln for ln in netns.splitlines() if ln.startswith("fo-")]
    with open("/proc/self/mountinfo") as f:
        mounts = [ln.split()[4] for ln in f]
    assert not [m for m in mounts if m.startswith(str(paths.STATE_DIR))]
    procs = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout
    alive = [
        ln
        for ln in procs.splitlines()
        if "systemd-nspawn" in ln and "--machine fo-" in ln and not ln.startswith("Z")
    ]
    assert not alive
    for rel in ("hosts", "fabric", "ssh", "lab.json"):
        assert not (paths.STATE_DIR / rel).exists(), rel
    assert not (paths.default_inventory_dir() / "hosts.yml").exists()
