"""The host runbooks (docs/runbooks/add-host.md, upgrade-driver-firmware.md) run as written, on gpu02.

The marked blocks of each page run verbatim in one bash session (test_runbooks.py's helpers: the
params block is the only substitution). The inventory is a copy of the lab's (inventories/lab, which
``lab up`` writes and nobody edits) with a ``group_vars/gpu_hosts.yml`` holding the rack's pins, as
the upgrade page's example has them: the "old" pins are MLNX_OFED 23.10-1.1.9.0 and the lab's NIC
firmware 28.39.1002, the "new" ones the page's own example, MLNX_OFED 24.10-1.1.4.0 and 28.43.1014.
Changing the pins between the pages is the operator's inventory edit, the one step that is no
``sh`` block.

In order, on one host:

1. add a host: gpu02 with its driver stack purged and its NIC flash at the lab's factory state (a
   freshly racked server), drained in Slurm; the page converges it on the old pins, verifies it
   and resumes it;
2. upgrade: the new pins; the page drains gpu02 (a poller proves the drain came before the host
   changed), upgrades, verifies and resumes it;
3. the upgrade page's back-out: the old driver pin again, downgrade consented (the NIC firmware
   keeps the new pin, as the page says: the role burns only newer images).

gpu01-gpu02 stream (tests/integration/streams.py), first in it: test_doca_firmware.py, next, purges
the driver stack and resets the NIC flash anyway, so what this file leaves on gpu02 is the old pins,
fully converged, the NIC flash reset to the lab's factory state, gpu02 idle in Slurm.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading

import pytest
import yaml
from integration.conftest import INVENTORY, REPO
from integration.test_doca_firmware import PURGE
from integration.test_lab_slurm import ctl, nodes, wait_state
from integration.test_runbooks import _ok, _run_blocks, page_blocks, run_page

pytestmark = pytest.mark.lab

HOST = "gpu02"
PSID = "MT_0000000838"
OLD_OFED, NEW_OFED = "23.10-1.1.9.0", "24.10-1.1.4.0"
OLD_FW, NEW_FW = "28.39.1002", "28.43.1014"
# what the pages write into the directory they run from (the top of the checkout): removed after
REPORTS = ("verify-gpu02-hosts.json", "verify-gpu02.json", "drift-before-upgrade.json")
SIGNATURE = "ofed_info -s 2>/dev/null; cat /sys/class/infiniband/mlx5_0/fw_ver"


def _pins(lab: dict, ofed: str, fw: str) -> dict:
    v = lab["ofed"]["versions"][ofed]
    image = next(i for i in lab_catalog() if i["version"] == fw)
    return {"mlnx_ofed_version": ofed, "mlnx_ofed_install_method": "tarball",
            "mlnx_ofed_tarball_url": v["tgz_url"], "mlnx_ofed_tarball_sha256": v["tgz_sha256"],
            "nic_firmware_versions": {PSID: fw},
            "nic_firmware_images": {PSID: {"url": image["url"], "sha256": image["sha256"]}}}


def lab_catalog() -> list[dict]:
    gv = yaml.safe_load((INVENTORY.parent / "group_vars" / "all.yml").read_text())
    return gv["fabricops_nic_firmware_catalog"][PSID]


def _factory_firmware() -> None:
    from fabricops_lab import hosts

    hosts.host_exec(HOST, ["sh", "-c", "rm -f /var/lib/emulated-hw/firmware/*.json"])
    hosts.resync_hardware(HOST)


def _report(name: str) -> dict[str, list[dict]]:
    by: dict[str, list[dict]] = {}
    for r in json.loads((REPO / name).read_text())["results"]:
        by.setdefault(r["check"], []).append(r)
    return by


def _failed(by: dict[str, list[dict]]) -> list[str]:
    return [r["message"] for rs in by.values() for r in rs if r["status"] not in ("pass", "skip")]


class Poller:
    """Samples (Slurm state of gpu02, its ofed_info and NIC firmware) every second while a page runs."""

    def __init__(self):
        self.samples: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sh(self, ip: str, command: str) -> str:
        from fabricops_lab import hosts

        # stdin from /dev/null: an ssh on the test's stdin makes it non-blocking, and the Ansible
        # of the page running meanwhile (which inherits it) then refuses to start
        proc = subprocess.run(["ssh", *hosts.ssh_base_args(), f"root@{ip}", command],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        return proc.stdout.strip()

    def _run(self):
        from fabricops_lab import paths

        lab = paths.load_lab()
        ctl_ip, host_ip = lab["slurm"]["controller"]["mgmt_ip"], lab["hosts"][HOST]["mgmt_ip"]
        while not self._stop.is_set():
            state = self._sh(ctl_ip, f"sinfo -h -n {HOST} -o %t")
            self.samples.append((state, self._sh(host_ip, SIGNATURE)))
            self._stop.wait(1)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)


@pytest.fixture(scope="module")
def inv(lab, tmp_path_factory):
    """A copy of the lab's inventory; ``inv.pins(ofed, fw)`` writes group_vars/gpu_hosts.yml."""
    path = tmp_path_factory.mktemp("runbook-inv") / "rack"
    shutil.copytree(INVENTORY.parent, path)

    class Inv:
        dir = path

        def pins(self, ofed: str, fw: str) -> None:
            (path / "group_vars" / "gpu_hosts.yml").write_text(yaml.safe_dump(_pins(lab, ofed, fw)))

    return Inv()


@pytest.fixture(scope="module", autouse=True)
def new_gpu02(lab, ssh):
    """gpu02 as a newly racked host: no driver stack, the NIC flash as the lab made it, drained.
    After: the NIC flash reset, the RoCE QoS unit gone (test_mlnx_ofed.py says why), gpu02 idle."""
    from integration.test_doca_firmware import _fault

    assert nodes()[HOST][0] == "idle", nodes()
    _fault("clear", HOST)
    ssh(HOST, PURGE, timeout=300)
    _factory_firmware()
    assert ctl(f"scontrol update nodename={HOST} state=drain reason='new host'").returncode == 0
    yield
    for name in REPORTS:
        (REPO / name).unlink(missing_ok=True)
    ssh(HOST, "systemctl disable --now fabricops-roce-qos.service >/dev/null 2>&1; "
              "rm -f /etc/systemd/system/fabricops-roce-qos.service; systemctl daemon-reload")
    _factory_firmware()
    if nodes()[HOST][0] != "idle":
        ctl(f"scontrol update nodename={HOST} state=resume")
    assert wait_state(HOST, "idle") == ("idle", "none")


def _versions(ssh) -> tuple[str, str]:
    ofed, fw = ssh(HOST, SIGNATURE, check=False).stdout.strip().splitlines()[-2:]
    return ofed.rstrip(":"), fw


def test_add_host(inv, ssh):
    inv.pins(OLD_OFED, OLD_FW)
    assert ssh(HOST, "command -v ofed_info", check=False).returncode != 0  # a new host: no stack
    proc = _ok(run_page("add-host.md", "test", {"HOST": HOST, "PEER": "gpu01", "INV": str(inv.dir)}))
    out = proc.stdout + proc.stderr
    assert f"ROLLOUT DONE: {HOST}; failed: none" in out, proc.stdout[-3000:]
    assert f"no drift: {HOST}" in out, proc.stdout[-3000:]
    assert _versions(ssh) == (f"MLNX_OFED_LINUX-{OLD_OFED}", OLD_FW)
    by = _report(f"verify-{HOST}-hosts.json")
    assert not _failed(by), _failed(by)
    for check in ("ofed_version", "nic_fw_version", "ipoib", "roce_qos", "nccl_profile"):
        assert {r["status"] for r in by[check]} == {"pass"}, by[check]
    assert wait_state(HOST, "idle") == ("idle", "none")  # in service


def test_upgrade_then_back_out(inv, ssh):
    assert _versions(ssh) == (f"MLNX_OFED_LINUX-{OLD_OFED}", OLD_FW)  # test_add_host's host
    assert nodes()[HOST][0] == "idle"
    params = {"HOSTS": HOST, "INV": str(inv.dir)}
    inv.pins(NEW_OFED, NEW_FW)  # the operator's commit of the new pins
    with Poller() as poll:
        proc = _ok(run_page("upgrade-driver-firmware.md", "test", params))
    out = proc.stdout + proc.stderr
    assert _versions(ssh) == (f"MLNX_OFED_LINUX-{NEW_OFED}", NEW_FW)
    by = _report(f"verify-{HOST}.json")
    assert not _failed(by), _failed(by)
    assert "would upgrade MLNX_OFED" in out and "FIRMWARE UPDATE PENDING" in out, proc.stdout[-3000:]
    # drained before the host changed, resumed after
    before = poll.samples[0][1]
    changed = [s for s, sig in poll.samples if sig != before]
    assert changed and all(s.startswith("drain") for s in changed[:1]), poll.samples
    assert wait_state(HOST, "idle") == ("idle", "none")
    # the back-out: the old pins back in the inventory, the page's back-out block (its procedure's
    # second block defines upgrade_host)
    # (the driver pin only: the page keeps the firmware pin, which the role cannot take back)
    inv.pins(OLD_OFED, NEW_FW)
    blocks = page_blocks("upgrade-driver-firmware.md")
    _ok(_run_blocks(params, [blocks["test"][1], *blocks["test backout"]]))
    assert _versions(ssh) == (f"MLNX_OFED_LINUX-{OLD_OFED}", NEW_FW)
    by = _report(f"verify-{HOST}.json")
    assert not _failed(by), _failed(by)
    assert wait_state(HOST, "idle") == ("idle", "none")
