"""roce_switch on the lab's emulated switches (leaf-onyx, leaf-cumulus) over real SSH with netmiko.

Touches only the two Ethernet leaves. Converges, re-runs (nothing sent: a session-drop fault armed
for the first configuration command must not fire), dry-runs a drifted switch (config identical
before/after), drops a session mid-change (previous configuration kept, failure names switch and
step) and greps a -vvv run for the switch password.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

PLAYBOOK = "playbooks/switches.yml"
SWITCHES = ("leaf-onyx", "leaf-cumulus")
VENV_BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"
MOVE_CLASS = '{"fabricops_roce": {"lossless_priority": 4, "dscp": 34}}'


def _fabricops(*args):
    return subprocess.run([str(VENV_BIN / "fabricops"), *args], capture_output=True, text=True, check=True)


def _switch_dir(name):
    from fabricops_lab import paths

    return paths.switch_dir(name)


def _password(name):
    return (_switch_dir(name) / "password").read_text().strip()


def _netmiko(name):
    from fabricops.switch import transport
    from fabricops_lab import paths

    info = paths.load_lab()["switches"][name]
    os_name = "onyx" if name == "leaf-onyx" else "cumulus"
    conn = transport.connect(
        os_name,
        info["mgmt_ip"],
        info.get("user", "admin" if os_name == "onyx" else "cumulus"),
        _password(name),
        port=int(info.get("port") or 22),
        known_hosts=str(paths.ssh_dir() / "known_hosts"),
    )
    if os_name == "onyx":
        conn.enable()  # show running-config is an enable-mode command (Onyx standard mode is restricted)
    return conn


def _config(name):
    """What the switch runs and what it saved (Onyx: running-config without its timestamp)."""
    conn = _netmiko(name)
    try:
        if name == "leaf-onyx":
            running = conn.send_command("show running-config")
            running = "\n".join(ln for ln in running.splitlines() if "Generated at" not in ln)
            saved = (_switch_dir(name) / "onyx-saved-config.txt").read_text()
        else:
            running = conn.send_command("nv config show -o commands")
            saved = (_switch_dir(name) / "startup.yaml").read_text()
        return running, saved
    finally:
        conn.disconnect()


def _facts(name):
    from fabricops.roce.resource import facts_from_onyx_config

    running, _ = _config(name)
    return facts_from_onyx_config(running) if name == "leaf-onyx" else running


@pytest.fixture(scope="module")
def converged(lab, ansible_playbook):
    run = ansible_playbook(PLAYBOOK)
    assert run.rc == 0, run.stdout[-4000:] + run.stderr[-2000:]
    yield run
    _fabricops("lab", "fault", "clear", "leaf-onyx")
    _fabricops("lab", "fault", "clear", "leaf-cumulus")
    ansible_playbook(PLAYBOOK)  # leave both switches converged


def test_first_run_configures_both(converged):
    for name in SWITCHES:
        assert converged.hosts[name]["failures"] == 0
    from fabricops_lab import paths

    for name in SWITCHES:
        fabric = json.loads((paths.fabric_dir() / "switches" / f"{name}.json").read_text())
        port = "Eth1/1" if name == "leaf-onyx" else "swp1"
        assert fabric["ports"][port]["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]
        assert fabric["ports"][port]["trust"] == "l3"
        assert fabric["ports"][port]["ecn"]["3"]["min_kb"] == 150


def test_second_run_sends_no_configuration_command(converged, ansible_playbook):
    before = {n: _config(n) for n in SWITCHES}
    for name in SWITCHES:  # any configuration command would now drop the session and fail the run
        _fabricops("lab", "fault", name, "session-drop", "1")
    try:
        run = ansible_playbook(PLAYBOOK)
    finally:
        for name in SWITCHES:
            _fabricops("lab", "fault", "clear", name)
    assert run.rc == 0, run.stdout[-3000:]
    for name in SWITCHES:
        assert run.hosts[name]["changed"] == 0 and run.hosts[name]["failures"] == 0
        assert _config(name) == before[name]


def test_check_diff_on_drifted_switch_lists_commands_and_changes_nothing(converged, ansible_playbook):
    conn = _netmiko("leaf-onyx")
    conn.enable()
    conn.send_config_set(["interface ethernet 1/2 no qos trust"], error_pattern=r"^% ")
    conn.disconnect()
    before = _config("leaf-onyx")
    run = ansible_playbook(PLAYBOOK, "--check", "--diff", "--limit", "leaf-onyx")
    assert run.rc == 0, run.stdout[-3000:]
    assert '"interface ethernet 1/2 qos trust L3"' in run.stdout
    assert "+interface ethernet 1/2 qos trust L3" in run.stdout
    assert run.hosts["leaf-onyx"]["changed"] == 1
    assert _config("leaf-onyx") == before  # running and saved, byte for byte


def test_session_drop_keeps_previous_configuration(converged, ansible_playbook):
    before_onyx = _facts("leaf-onyx")
    _, saved = _config("leaf-onyx")
    _fabricops("lab", "fault", "leaf-onyx", "session-drop", "2")
    try:
        run = ansible_playbook(PLAYBOOK, "--limit", "leaf-onyx", "-e", MOVE_CLASS)
    finally:
        _fabricops("lab", "fault", "clear", "leaf-onyx")
    assert run.rc != 0
    assert "leaf-onyx: step 'send' failed" in run.stdout
    assert "previous configuration was restored" in run.stdout
    after = _facts("leaf-onyx")
    assert {k: v for k, v in after.items() if k[0] != "port_ets"} == {
        k: v for k, v in before_onyx.items() if k[0] != "port_ets"
    }
    assert _config("leaf-onyx")[1] == saved

    before_nv = _config("leaf-cumulus")
    _fabricops("lab", "fault", "leaf-cumulus", "session-drop", "2")
    try:
        run = ansible_playbook(PLAYBOOK, "--limit", "leaf-cumulus", "-e", MOVE_CLASS)
    finally:
        _fabricops("lab", "fault", "clear", "leaf-cumulus")
    assert run.rc != 0 and "leaf-cumulus: step 'stage' failed" in run.stdout
    assert _config("leaf-cumulus") == before_nv


def test_password_never_in_output(converged, ansible_playbook):
    run = ansible_playbook(PLAYBOOK, "-vvv", "--check", "--diff")
    assert run.rc == 0
    for name in SWITCHES:
        pw = _password(name)
        assert pw and pw not in run.stdout and pw not in run.stderr


def _rest_vars(name):
    """The NVUE leaf over its REST API: the API logs in with the password (basic auth); the lab's
    Cumulus SSH login is key-only, so the password comes from the switch's password file."""
    pw_file = _switch_dir(name) / "password"
    lookup = "{{ lookup('ansible.builtin.file', '" + str(pw_file) + "') }}"
    return json.dumps({"roce_switch_transport": "rest", "roce_switch_password": lookup})


def test_rest_and_cli_converge_the_nvue_leaf_identically(converged, ansible_playbook):
    """issue 17: roce_switch over the NVUE REST API and over the CLI give the same switch, the same
    commands and the same idempotent second run (state overridden: each run sets exactly the
    definition, so each move changes the switch)."""
    name = "leaf-cumulus"
    opts = ("--limit", name, "-e", "roce_switch_state=overridden")
    try:
        rest = ansible_playbook(PLAYBOOK, *opts, "--diff", "-e", MOVE_CLASS, "-e", _rest_vars(name))
        assert rest.rc == 0, rest.stdout[-3000:]
        assert rest.hosts[name]["changed"] == 1
        over_rest = _config(name)
        again = ansible_playbook(PLAYBOOK, *opts, "-e", MOVE_CLASS, "-e", _rest_vars(name))
        assert again.rc == 0 and again.hosts[name]["changed"] == 0, again.stdout[-3000:]
        check = ansible_playbook(PLAYBOOK, *opts, "--check", "-e", MOVE_CLASS, "-e", _rest_vars(name))
        assert check.rc == 0 and check.hosts[name]["changed"] == 0, check.stdout[-3000:]

        back = ansible_playbook(PLAYBOOK, *opts)  # the lab's definition again, over the CLI
        assert back.rc == 0 and back.hosts[name]["changed"] == 1, back.stdout[-3000:]
        cli = ansible_playbook(PLAYBOOK, *opts, "--diff", "-e", MOVE_CLASS)
        assert cli.rc == 0 and cli.hosts[name]["changed"] == 1, cli.stdout[-3000:]
        assert _config(name) == over_rest  # running and saved, byte for byte

        def diff_lines(run):
            return sorted(ln for ln in run.stdout.splitlines() if ln.startswith(("+", "-")))

        assert diff_lines(cli) == diff_lines(rest) != []
    finally:
        ansible_playbook(PLAYBOOK, "--limit", name, "-e", "roce_switch_state=overridden")
