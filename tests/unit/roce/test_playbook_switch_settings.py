"""A switch-only setting set on the command line reads the same as a typed one, through a real playbook.

``-e roce_switch_pfc_watchdog=false`` gives the *string* "false"; ``-e '{"roce_switch_pfc_watchdog":
false}'`` the boolean. The role's preflight renders the commands (no switch contact: ``state:
rendered``) through the action plugin, whose options Ansible's argument-spec code converts; both must
render no watchdog line, where the default renders them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = """\
- hosts: sw1
  gather_facts: false
  tasks:
    - name: The role's preflight (validates and renders; contacts no switch)
      ansible.builtin.include_role:
        name: fabricops.fabric.roce_switch
        tasks_from: preflight
    - name: Print what it rendered
      ansible.builtin.debug:
        msg: "RENDERED {{ __roce_switch_rendered.commands | to_json }}"
"""


@pytest.fixture(scope="module")
def play(tmp_path_factory):
    bindir = Path(sys.executable).parent
    exe = shutil.which("ansible-playbook", path=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    if exe is None:
        pytest.fail("ansible-playbook is not installed next to this Python; run scripts/setup.sh")
    tmp = tmp_path_factory.mktemp("play")
    (tmp / "known_hosts").write_text("")
    (tmp / "inventory.yml").write_text(
        json.dumps(
            {
                "all": {
                    "hosts": {
                        "sw1": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "ansible_host": "127.0.0.1",
                            "ansible_user": "admin",
                            "ansible_password": "unused-in-rendered",
                            "fabricops_switch_os": "onyx",
                            "roce_switch_known_hosts": str(tmp / "known_hosts"),
                            "roce_switch_ports": ["Eth1/1"],
                        }
                    }
                }
            }
        )
    )
    (tmp / "play.yml").write_text(PLAYBOOK)
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }

    def run(*extra):
        proc = subprocess.run(
            [exe, "-i", str(tmp / "inventory.yml"), str(tmp / "play.yml"), *extra],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        found = re.search(r'"msg": "RENDERED (.*)"\n', proc.stdout)
        assert found, proc.stdout[-3000:]
        return json.loads(json.loads(f'"{found.group(1)}"'))

    return run


def watchdog(line):
    return "watchdog" in line or "pfc-wd" in line  # Onyx: "dcb priority-flow-control watchdog", "pfc-wd"


def test_watchdog_false_as_string_and_as_boolean_render_the_same(play):
    default = play()
    assert any(watchdog(line) for line in default), default  # so the check below can fail
    as_string = play("-e", "roce_switch_pfc_watchdog=false")
    as_json = play("-e", json.dumps({"roce_switch_pfc_watchdog": False}))
    assert as_string == as_json
    assert not any(watchdog(line) for line in as_string), as_string
    assert [line for line in default if not watchdog(line)] == as_string


def test_ets_share_as_string_is_converted(play):
    lines = play("-e", "roce_switch_ets_lossless_percent=60")
    assert "interface ethernet 1/1 traffic-class 3 dcb ets wrr 60" in lines
    assert "interface ethernet 1/1 traffic-class 0 dcb ets wrr 40" in lines
