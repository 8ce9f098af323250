"""fabricops verify on the shared lab: healthy hardware/GPU/port/counter/pairwise-IB checks pass; each
host fault on gpu03 fails the right check, naming host, device and cause, and nothing else fails.

Touches only gpu03 (faults, cleared afterwards) and installs the emulated MLNX_OFED on a host that
has none (tarball from the lab repo). Error counters are judged against a baseline report taken
first, so counters left by earlier faults do not count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
FABRICOPS = str(Path(sys.executable).with_name("fabricops"))
HW_SKIP = ["--skip", "roce_qos", "--skip", "nccl_profile", "--skip", "ipoib"]


def _env():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def verify(tmp_path, *args, baseline=None) -> tuple[int, dict, str]:
    out = tmp_path / f"v{len(list(tmp_path.glob('v*.json')))}.json"
    argv = [FABRICOPS, "verify", "-q", "--json", str(out), *HW_SKIP, *args]
    if baseline:
        argv += ["--counters-baseline", str(baseline)]
    p = subprocess.run(argv, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    return p.returncode, json.loads(out.read_text()), p.stdout + p.stderr


def fault(*args):
    subprocess.run([FABRICOPS, "lab", "fault", *args], cwd=ROOT, check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def ofed(lab, ssh):
    info = json.loads(Path("/var/lib/fabricops-lab/lab.json").read_text())["ofed"]
    ver = info["default_version"]
    v = info["versions"][ver]
    for h in ("gpu01", "gpu02", "gpu03", "gpu04"):
        if ssh(h, "ofed_info -s", check=False).returncode == 0:
            continue
        ssh(
            h,
            f"cd /tmp && python3 -c \"import urllib.request as u; u.urlretrieve('{v['tgz_url']}', 'o.tgz')\" "
            f"&& tar xzf o.tgz && {v['dir']}/mlnxofedinstall --force --skip-distro-check --without-fw-update",
            timeout=300,
        )
    return ver


@pytest.fixture(scope="module")
def baseline(ofed, tmp_path_factory):
    d = tmp_path_factory.mktemp("baseline")
    _rc, data, _text = verify(d, "--only", "hosts")
    path = d / "baseline.json"
    path.write_text(json.dumps(data))
    return path


def test_healthy_lab_passes(tmp_path, baseline):
    rc, data, text = verify(tmp_path, baseline=baseline)
    assert rc == 0, text
    checks = {r["check"] for r in data["results"] if r["status"] == "pass"}
    assert {
        "ofed_version",
        "hca_port",
        "error_counters",
        "gpu_count",
        "nvlink",
        "gpu_topology",
        "nic_gpu_affinity",
        "ib_write_bw",
        "ib_write_lat",
    } <= checks
    assert data["pairs"]["rounds"] == 3


FAULTS = [
    (["port-down", "mlx5_0"], "hca_port", "mlx5_0/1", "state Down"),
    (["port-width", "mlx5_0", "2X"], "hca_port", "mlx5_0/1", "width 2X, expected 4X"),
    (["flapping", "mlx5_1"], "error_counters", "mlx5_1/1", "LinkDownedCounter +8"),
    (["nvlink-inactive", "2", "5"], "nvlink", "GPU2", "link(s) 5 inactive"),
    (["gpu-missing", "5"], "gpu_count", None, "7 GPUs, expected 8"),
    (["wrong-ofed", "23.10-1.1.9.0"], "ofed_version", None, "pinned"),
]


@pytest.mark.parametrize("spec", FAULTS, ids=[f[0][0] for f in FAULTS])
def test_fault_fails_the_right_check(tmp_path, baseline, spec):
    args, check, device, text_in = spec
    pair_fault = args[0] in ("port-down", "port-width")
    only = [] if pair_fault else ["--only", "gpus" if check in ("nvlink", "gpu_count") else "hosts"]
    fault("gpu03", *args)
    try:
        rc, data, text = verify(tmp_path, *only, baseline=baseline)
    finally:
        fault("clear", "gpu03")
    assert rc == 1, text
    bad = [r for r in data["results"] if r["status"] != "pass" and r["status"] != "skip"]
    own = [r for r in bad if r["check"] == check and r["host"] == "gpu03" and r["device"] == device]
    assert own and text_in in own[0]["message"] and "gpu03" in own[0]["message"], text
    assert own[0]["cause"]
    for r in bad:  # nothing else fails: only consequences of the same fault on gpu03
        if r is own[0]:
            continue
        if r["category"] == "gpus":  # an inactive NVLink also shows in the NVSwitch matrix (NV17)
            assert r["host"] == "gpu03" and device and device in r["message"], text
            continue
        assert r["category"] == "pairs" and "gpu03" in r["host"], text
        assert r["details"]["blamed"] == ["gpu03"] and "gpu03 mlx5_0/1" in r["cause"], text


@pytest.mark.skip(
    reason="RoCE QoS and the switch-port PFC-mismatch fault need the lab converged by the "
    "roce_host and roce_switch roles (other helpers); the checks are unit-tested in "
    "tests/unit/verify/test_hostchecks.py"
)
def test_roce_qos_and_pfc_mismatch(lab):
    raise AssertionError("not reached")
