"""fabric_monitor refuses an expected port rate that is NaN, infinite, not above 0 or absurd in its
preflight, before anything is installed or written (the collector would refuse it at load on every
run, and the last metrics would stay frozen)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fabricops.model import rates
from fabricops.monitor import collector

ROOT = Path(__file__).resolve().parents[3]
#: the failed task's name and messages (an assert with a loop fails item by item)
FAILED = (
    "{'task': ansible_failed_task.name, 'msg': (ansible_failed_result.results"
    " | default([ansible_failed_result]) | map(attribute='msg') | join(' | '))}"
)
CHECK = "Check fabric_monitor_expected_rate_gbps (finite rates in Gb/s, above 0, at most the maximum)"

#: case -> the value given for InfiniBand (YAML .nan / .inf reach Ansible as floats)
BAD = {
    "nan": math.nan,
    "inf": math.inf,
    "minus-inf": -math.inf,
    "negative": -400,
    "zero": 0,
    "absurd": 1e300,
    "bits-per-second": 400e9,
    "above-maximum": 3201,
    "exponent-string": "1e3",
}
GOOD = {"InfiniBand": 400, "Ethernet": 800.0, "mlx5_0/1": "200", "mlx5_1/1": 3200}
_VENV_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
PLAYBOOK = str(_VENV_PLAYBOOK) if _VENV_PLAYBOOK.exists() else shutil.which("ansible-playbook")


def test_the_role_and_the_collector_share_the_maximum():
    role_vars = yaml.safe_load((ROOT / "roles/fabric_monitor/vars/main.yml").read_text())
    assert role_vars["__fabric_monitor_max_rate_gbps"] == collector.MAX_RATE_GBPS
    fastest = max(
        [r for g in rates.IB.values() for r in g.ports.values()] + [e.gbps for e in rates.ETHERNET.values()]
    )
    assert fastest * 3 <= collector.MAX_RATE_GBPS  # a 12X port of the fastest generation fits


@pytest.mark.skipif(PLAYBOOK is None, reason="needs ansible-playbook")
def test_preflight_refuses_bad_rates_before_anything_changes(tmp_path):
    tasks = []
    for case, value in BAD.items():
        tasks.append(
            {
                "name": f"try {case}",
                "block": [
                    {
                        "ansible.builtin.include_role": {"name": "fabricops.fabric.fabric_monitor"},
                        "vars": {"fabric_monitor_expected_rate_gbps": {"InfiniBand": value}},
                    },
                    {"ansible.builtin.set_fact": {"accepted": f"{{{{ accepted + ['{case}'] }}}}"}},
                ],
                "rescue": [
                    {
                        "ansible.builtin.set_fact": {
                            "refused": "{{ refused | combine({'" + case + "': " + FAILED + "}) }}"
                        }
                    }
                ],
            }
        )
    tasks.append(
        {
            "name": "try the good rates",
            "ansible.builtin.include_role": {
                "name": "fabricops.fabric.fabric_monitor",
                "tasks_from": "preflight.yml",
            },
            "vars": {"fabric_monitor_expected_rate_gbps": GOOD},
        }
    )
    out = str(tmp_path / "out.json")
    tasks.append(
        {
            "ansible.builtin.copy": {
                "content": "{{ {'refused': refused, 'accepted': accepted} | to_json }}",
                "dest": out,
            },
            "check_mode": False,
        }
    )
    play = [
        {"hosts": "localhost", "gather_facts": False, "vars": {"refused": {}, "accepted": []}, "tasks": tasks}
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_CACHE_PLUGIN="memory",
        PYTHONPATH=str(ROOT / "src"),
    )
    proc = subprocess.run(
        [
            PLAYBOOK,
            "-i",
            "localhost,",
            "-c",
            "local",
            "--check",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(tmp_path / "play.yml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and (tmp_path / "out.json").exists(), (
        proc.stdout[-3000:] + proc.stderr[-2000:]
    )
    got = json.loads((tmp_path / "out.json").read_text())
    assert got["accepted"] == []
    assert set(got["refused"]) == set(BAD)
    for case, value in BAD.items():
        refusal = got["refused"][case]
        if case == "exponent-string":  # a string that is no plain decimal: the first check refuses it
            assert refusal["msg"].startswith("fabric_monitor_expected_rate_gbps.InfiniBand"), refusal
            continue
        assert refusal["task"] == CHECK, (case, refusal)
        assert refusal["msg"].startswith(f"fabric_monitor_expected_rate_gbps.InfiniBand: {value} is not a"), (
            refusal
        )
        assert "at most 3200" in refusal["msg"]
