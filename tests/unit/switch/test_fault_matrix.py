"""The switch fault matrix: every fault at every step, over real SSH with netmiko, on both OSes.

Each case starts an emulated switch on 127.0.0.1 (tests/unit/lab/test_switchd.py's ``Lab``),
converges it, arms one fault in the emulator's faults file (emulator-only rules: drop / drop after /
reject / freeze / a foreign change from another session), runs the real apply path
(:func:`fabricops.roce.runner.run` with netmiko sessions) to move the lossless class, then reads
the emulated device and checks the tool's outcome against it:

- ``restored``: the whole configuration (Onyx running config, NVUE applied revision) and the saved
  one equal what they were before; no confirm pending, no pending revision;
- ``not_restored``: the configuration is not the one before;
- ``refused``: the RoCE configuration is the one before (another change may be there);
- ``live``: the RoCE configuration is the wanted one, and "saved: yes/no" is what the startup holds.

A case whose outcome and device disagree is a mismatch, and fails.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest
from unit.lab.test_switchd import PASSWORD, Lab

from fabricops.errors import FabricopsError
from fabricops.roce import change
from fabricops.roce.platforms.nvue import nvue_facts
from fabricops.roce.resource import compute, facts_from_onyx_config
from fabricops.roce.runner import run
from fabricops.roce.switchspec import SwitchError, switch_spec, want_facts
from fabricops.switch import lock
from fabricops.switch.lock import device_key, switch_lock
from fabricops.switch.transport import netmiko_connect

ROCE = {"lossless_priority": 3, "dscp": 26}
ROCE4 = {"lossless_priority": 4, "dscp": 34}
PORTS = {"onyx": ["Eth1/1", "Eth1/2"], "cumulus": ["swp1", "swp2"]}
DEVICE = {"onyx": "mellanox_mlnxos", "cumulus": "cumulus_linux"}


def _planned(os_name):
    """The commands the change sends (the same planning the run does, against the converged facts)."""
    ports = PORTS[os_name]
    spec = switch_spec(os_name, ROCE, ports)
    have = want_facts(spec)
    want = want_facts(switch_spec(os_name, ROCE4, ports))
    return compute("overridden", want, have, os_name, ports)


def _cases():
    out = []
    for os_name in ("onyx", "cumulus"):
        cmds = _planned(os_name)
        picks = sorted({0, len(cmds) // 2, len(cmds) - 1})  # first, middle and last command
        for n, cmd in ((i, cmds[i]) for i in picks):
            exact = "^" + re.escape(cmd) + "$"
            out.append((os_name, f"drop-before-cmd{n + 1}", [{"match": exact, "action": "drop"}]))
            out.append((os_name, f"drop-after-cmd{n + 1}", [{"match": exact, "action": "drop_after"}]))
        mid = "^" + re.escape(cmds[len(cmds) // 2]) + "$"
        last = "^" + re.escape(cmds[-1]) + "$"
        out += [
            (os_name, "reject-first", [{"match": "^" + re.escape(cmds[0]) + "$", "action": "reject"}]),
            (os_name, "reject-last", [{"match": last, "action": "reject"}]),
            (os_name, "freeze-mid", [{"match": mid, "action": "freeze"}]),
            (os_name, "freeze-after-last", [{"match": last, "action": "freeze_after"}]),
        ]
    # Onyx: the save, a restore that cannot read the switch, a concurrent change
    out += [
        ("onyx", "drop-at-save", [{"match": "^configuration write$", "action": "drop"}]),
        (
            "onyx",
            "restore-session-drops",
            [
                {"match": "^" + re.escape(_planned("onyx")[1]) + "$", "action": "drop_after"},
                {"match": "^show running-config$", "nth": 3, "action": "drop"},
            ],
        ),
        (
            "onyx",
            "concurrent-change",
            [
                {
                    "match": "^show running-config$",
                    "action": "foreign",
                    "commands": ["interface ethernet 1/4 qos trust L2"],
                }
            ],
        ),
    ]
    apply_re = r"^nv config apply --confirm \S+ -y$"
    out += [
        ("cumulus", "drop-before-apply", [{"match": apply_re, "action": "drop"}]),
        ("cumulus", "drop-after-apply", [{"match": apply_re, "action": "drop_after"}]),
        ("cumulus", "reject-apply", [{"match": apply_re, "action": "reject"}]),
        ("cumulus", "freeze-after-apply", [{"match": apply_re, "action": "freeze_after"}]),
        ("cumulus", "drop-before-confirm", [{"match": "--confirm-yes$", "action": "drop"}]),
        ("cumulus", "drop-after-confirm", [{"match": "--confirm-yes$", "action": "drop_after"}]),
        ("cumulus", "drop-before-save", [{"match": "^nv config save$", "action": "drop"}]),
        ("cumulus", "drop-after-save", [{"match": "^nv config save$", "action": "drop_after"}]),
        (
            "cumulus",
            "concurrent-apply-before-read-ends",
            [
                {
                    "match": "^nv show qos roce",
                    "action": "foreign",
                    "commands": ["nv set qos mapping default-global trust l2", "nv config apply -y"],
                }
            ],
        ),
        (
            "cumulus",
            "concurrent-apply-while-staging",
            [
                {
                    "match": "^nv set ",
                    "action": "foreign",
                    "commands": ["nv set system hostname other", "nv config apply -y"],
                }
            ],
        ),
        (
            "cumulus",
            "concurrent-pending-while-staging",
            [{"match": "^nv set ", "action": "foreign", "commands": ["nv set system hostname other"]}],
        ),
    ]
    return out


CASES = _cases()


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(change, "READ_TIMEOUT", 3.0)
    monkeypatch.setattr(change, "APPLY_TIMEOUT", 3.0)


def _connector(lab):
    user = "admin" if lab.os_name == "onyx" else "cumulus"

    def connect():
        return netmiko_connect(  # the product's sessions (netmiko's drivers, the prompt waited for)
            device_type=DEVICE[lab.os_name],
            host="127.0.0.1",
            port=lab.port,
            username=user,
            password=PASSWORD,
            fast_cli=True,
            conn_timeout=5,
        )

    return connect


def _run(lab, roce, **kw):
    return run(
        switch=lab.switch.name,
        os_name=lab.os_name,
        state="overridden",
        roce=roce,
        ports=PORTS[lab.os_name],
        connector=_connector(lab),
        confirm_timeout="30s",
        **kw,
    )


def _snapshot(lab):
    sw = lab.switch
    if lab.os_name == "onyx":
        running = [ln for ln in sw.running_config().splitlines() if "Generated at" not in ln]
        saved = sw.saved_path.read_text() if sw.saved_path.exists() else ""
        saved = [ln for ln in saved.splitlines() if "Generated at" not in ln]
        return {"config": running, "saved": saved, "facts": facts_from_onyx_config("\n".join(running))}
    startup = sw.startup_path.read_text() if sw.startup_path.exists() else ""
    return {
        "config": json.dumps(sw.applied, sort_keys=True),
        "saved": startup,
        "facts": nvue_facts(sw.applied.get("qos"), sw.applied.get("interface")),
        "pending_clean": sw.pending == sw.applied,
        "confirm_pending": sw.confirm_deadline is not None,
        "saved_is_applied": startup
        == __import__("yaml").safe_dump(sw.applied, default_flow_style=False, sort_keys=True),
    }


def _consistent(lab, outcome, msg, before, after):
    """Does the device hold what the tool said? (a reason string when not)."""
    want = want_facts(switch_spec(lab.os_name, ROCE4, PORTS[lab.os_name]))
    nvue = lab.os_name == "cumulus"
    if outcome == "restored":
        if after["config"] != before["config"] or after["saved"] != before["saved"]:
            return "said restored, the configuration differs"
        if nvue and (after["confirm_pending"] or not after["pending_clean"]):
            return "said restored, a confirm or a pending revision is left"
        return None
    if outcome == "not_restored":
        return (
            "said NOT restored, yet the configuration is the one before"
            if after["config"] == before["config"]
            else None
        )
    if outcome == "refused":  # none of this change's settings landed (the other change may have)
        ours = {k: v for k, v in want.items() if before["facts"].get(k) != v}
        landed = [k for k, v in ours.items() if after["facts"].get(k) == v]
        return f"said refused, yet {landed[:3]} landed" if landed else None
    if outcome == "live":
        if compute("overridden", want, after["facts"], lab.os_name, PORTS[lab.os_name]):
            return "said live, the change is not in effect"
        if nvue:
            said_saved = "saved: yes" in msg
            if said_saved != after["saved_is_applied"] or after["confirm_pending"]:
                return f"said {'saved' if said_saved else 'not saved'}; startup holds the applied: " + str(
                    after["saved_is_applied"]
                )
        return None
    return f"unknown outcome {outcome!r}"


@pytest.mark.parametrize(("os_name", "name", "rules"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_fault(tmp_path, fast, os_name, name, rules):
    lab = Lab(tmp_path, os_name, PORTS[os_name] + (["Eth1/3", "Eth1/4"] if os_name == "onyx" else ["swp3"]))
    try:
        _run(lab, ROCE)
        before = _snapshot(lab)
        faults = lab.state / "faults.json"
        faults.write_text(json.dumps({"rules": rules, "t": time.time()}))
        with pytest.raises(FabricopsError) as err:
            _run(lab, ROCE4)
        faults.write_text("{}")
        outcome = getattr(err.value, "outcome", "refused")
        msg = str(err.value)
        after = _snapshot(lab)
        problem = _consistent(lab, outcome, msg, before, after)
        assert problem is None, f"{problem}: {msg}"
        assert outcome == EXPECTED.get(f"{os_name}-{name}", "restored"), msg
        assert msg.startswith(f"{lab.switch.name}: step '")
        if outcome == "not_restored":
            assert "NOT restored" in msg
        if outcome == "restored":
            assert "restored" in msg.lower() and "NOT restored" not in msg
    finally:
        lab.close()


EXPECTED = {  # the outcome each case must have (a regression here is a behaviour change)
    "onyx-drop-at-save": "live",
    "onyx-restore-session-drops": "not_restored",
    "onyx-concurrent-change": "refused",
    "cumulus-drop-after-confirm": "live",
    "cumulus-drop-before-save": "live",
    "cumulus-drop-after-save": "live",
    "cumulus-concurrent-apply-before-read-ends": "refused",
    # the other operator's apply took the pending revision this run had staged into: not restored
    "cumulus-concurrent-apply-while-staging": "not_restored",
    "cumulus-concurrent-pending-while-staging": "refused",
}


def test_lock_refuses_a_second_change_before_it_connects(tmp_path):
    lab = Lab(tmp_path, "cumulus", PORTS["cumulus"])
    try:
        _run(lab, ROCE)
        before = _snapshot(lab)
        sessions = []

        def counting():
            sessions.append(1)
            return _connector(lab)()

        with switch_lock(lab.switch.name, "pipeline run"), pytest.raises(FabricopsError) as err:
            run(
                switch=lab.switch.name,
                os_name="cumulus",
                state="overridden",
                roce=ROCE4,
                ports=PORTS["cumulus"],
                connector=counting,
            )
        assert "another change is running on this switch (pipeline run by" in str(err.value)
        assert "nothing was sent" in str(err.value)
        assert sessions == [] and _snapshot(lab)["config"] == before["config"]
    finally:
        lab.close()


def test_two_aliases_of_one_switch_contend_for_one_lock():
    """The lock is the device's (address and port), not the inventory name's: a second inventory name
    of the same switch stops before it connects; another port of that address is another device."""
    sessions = []

    def counting():
        sessions.append(1)
        raise SwitchError("leaf-b: step 'connect' failed: no switch here (test).")

    kw = {
        "os_name": "cumulus",
        "state": "overridden",
        "roce": ROCE4,
        "ports": PORTS["cumulus"],
        "connector": counting,
    }
    with switch_lock("leaf-a", "pipeline run", device_key("10.0.0.5", 22)):
        with pytest.raises(FabricopsError) as err:
            run(switch="leaf-b", device=("10.0.0.5", 22), **kw)
        assert "another change is running on this switch (pipeline run by" in str(err.value)
        assert "held as leaf-a" in str(err.value) and "nothing was sent" in str(err.value)
        with pytest.raises(FabricopsError) as err:
            run(switch="leaf-b", device=lambda: ("10.0.0.5", 22), **kw)  # resolved when locking
        assert "another change is running" in str(err.value) and sessions == []
        with pytest.raises(FabricopsError, match="step 'connect'"):
            run(switch="leaf-a", device=("10.0.0.5", 830), **kw)
    assert sessions == [1]


def test_roce_switch_task_keys_the_lock_by_ansible_host_and_port(tmp_path, monkeypatch):
    """Through the action plugin: inventory host leaf-b is another name (ansible_host, ansible_port)
    of leaf-a, whose change holds the lock; leaf-b's task fails before it connects."""
    from unittest import mock

    from unit.plugins.actionrun import load

    kh = tmp_path / "known_hosts"
    kh.write_text("")
    monkeypatch.setenv("FABRICOPS_SWITCH_PASSWORD", "secret")
    task_vars = {
        "inventory_hostname": "leaf-b",
        "ansible_host": "10.0.0.5",
        "ansible_port": 2222,
        "ansible_user": "admin",
        "ansible_network_os": "cumulus",
        "roce_switch_known_hosts": str(kh),
    }
    task = mock.MagicMock(
        args={"state": "overridden", "roce": ROCE4, "ports": PORTS["cumulus"]},
        check_mode=False,
        async_val=0,
        diff=True,
    )
    action = load("roce_switch")(task, mock.MagicMock(), mock.MagicMock(), None, None, None)
    action._templar = mock.MagicMock(template=lambda value, **_: value)
    connects = []
    with (
        mock.patch("fabricops.switch.transport.connect", side_effect=lambda a: connects.append(a)),
        switch_lock("leaf-a", "roce_switch state=merged", device_key("10.0.0.5", 2222)),
    ):
        result = action.run(task_vars=task_vars)
    assert result["failed"] is True and connects == [], result
    assert result["msg"].startswith("leaf-b: step 'lock' failed: another change is running on this switch")
    assert "held as leaf-a" in result["msg"]


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")


def _give(path, uid=65534):
    os.lchown(path, uid, uid)
    if not path.is_symlink():
        path.chmod(0o700)


@needs_root
@pytest.mark.parametrize("how", ["sudo -E", "FABRICOPS_LOCK_DIR", "symlink in a private dir"])
def test_symlink_planted_in_a_lock_dir_leaves_its_target_untouched(tmp_path, monkeypatch, how):
    """The audit's escape: under sudo -E the lock directory was the invoking user's; the user planted
    leaf-a.lock -> a root file, and root's roce_switch run emptied it. Now root never uses a runtime
    directory that is not root's own (it takes /run/fabricops/locks), a chosen lock directory must be
    this user's 0700 one, and the lock file is opened with O_NOFOLLOW: refused in one line."""
    target = tmp_path / "precious"
    target.write_text("root's data\n")
    user = tmp_path / "user"  # the invoking user's runtime directory (uid 65534, 0700)
    locks = user / "fabricops" / "locks" if how == "sudo -E" else user
    locks.mkdir(parents=True, mode=0o700)
    (locks / "leaf-a.lock").symlink_to(target)
    run_dir = tmp_path / "run" / "fabricops" / "locks"  # stands in for /run/fabricops/locks
    monkeypatch.setattr(lock, "ROOT_LOCK_DIR", run_dir)
    if how == "sudo -E":
        for d in (user, user / "fabricops", locks, locks / "leaf-a.lock"):
            _give(d)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(user))
        with switch_lock("leaf-a", "pipeline run") as path:
            assert target.read_text() == "root's data\n", "root's run emptied the symlink's target"
        assert path == run_dir / "leaf-a.lock"
        assert oct(run_dir.stat().st_mode & 0o777) == "0o700" and run_dir.stat().st_uid == 0
    else:
        if how == "FABRICOPS_LOCK_DIR":
            _give(user)
            _give(user / "leaf-a.lock")
            words = f"the lock directory {user} is owned by uid 65534, not by this user (uid 0)"
        else:  # root's own 0700 directory, a symlink in it all the same
            words = f"the lock file {user / 'leaf-a.lock'} is a symlink: remove it"
        monkeypatch.setenv("FABRICOPS_LOCK_DIR", str(user))
        with pytest.raises(SwitchError) as err, switch_lock("leaf-a", "pipeline run"):
            pass
        msg = str(err.value)
        assert msg.startswith("leaf-a: step 'lock' failed: ") and words in msg, msg
        assert msg.endswith("; nothing was sent.") and "\n" not in msg
    assert target.read_text() == "root's data\n"


@pytest.mark.parametrize("case", ["mode 0755", "another owner", "a symlink", "a file"])
def test_lock_dir_that_is_not_private_is_refused(tmp_path, monkeypatch, case):
    """The lock directory must be a directory (not a symlink) owned by this user with mode 0700;
    anything else is refused in one line naming the path and the fix, and no lock file is made."""
    if case == "another owner" and os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    runtime = tmp_path / "rt"  # a private runtime directory (honoured as root too)
    runtime.mkdir(mode=0o700)
    locks = runtime / "fabricops" / "locks"
    (runtime / "fabricops").mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if case == "a symlink":
        locks.symlink_to(elsewhere)
        words = f"the lock directory {locks} is a symlink: remove it"
    elif case == "a file":
        locks.write_text("")
        words = f"the lock directory {locks} is not a directory: remove it"
    else:
        locks.mkdir(mode=0o700)
        if case == "mode 0755":
            locks.chmod(0o755)
            words = f"the lock directory {locks} has mode 0755, others may write or read it: run chmod 0700"
        else:
            _give(locks)
            words = f"the lock directory {locks} is owned by uid 65534, not by this user (uid 0): remove it"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("FABRICOPS_LOCK_DIR", raising=False)
    with pytest.raises(SwitchError) as err, switch_lock("leaf-a", "pipeline run"):
        pass
    msg = str(err.value)
    assert words in msg and msg.endswith("; nothing was sent.") and "\n" not in msg, msg
    assert list(elsewhere.iterdir()) == [] and not (locks.is_dir() and any(locks.iterdir()))


def test_lock_dir_is_created_private_and_honoured_by_fabricops_lock_dir(tmp_path, monkeypatch):
    chosen = tmp_path / "a" / "locks"
    monkeypatch.setenv("FABRICOPS_LOCK_DIR", str(chosen))
    with switch_lock("leaf-a", "pipeline run", device_key("LEAF-A.example", 22)) as path:
        assert path == chosen / "leaf-a.example_22.lock"
        st = path.stat()
        assert st.st_mode & 0o777 == 0o600 and json.loads(path.read_text())["switch"] == "leaf-a"
    for d in (chosen, chosen.parent):
        assert d.stat().st_mode & 0o777 == 0o700


def test_outcomes_of_the_named_cases():
    """The expected-outcome table itself: every entry names a case of the matrix, and the outcomes it
    demands cover each kind. Each case asserts its own outcome against this table and that the device
    agrees with it (no mismatch), so the matrix passing in full means the tally below held; this
    test needs no other test to have run in its process (under xdist the cases run on several)."""
    ids = {f"{os_name}-{name}" for os_name, name, _ in CASES}
    assert set(EXPECTED) <= ids, f"EXPECTED names cases the matrix lacks: {sorted(set(EXPECTED) - ids)}"
    outcomes = [EXPECTED.get(case, "restored") for case in sorted(ids)]
    outcomes.append("refused")  # test_lock_refuses_a_second_change_before_it_connects
    tally = {kind: outcomes.count(kind) for kind in ("restored", "refused", "live", "not_restored")}
    print("\nswitch fault matrix (expected):", json.dumps({"cases": len(outcomes), **tally}))
    assert len(CASES) >= 30
    assert tally["restored"] > 0 and tally["refused"] >= 4
    assert tally["live"] >= 4 and tally["not_restored"] >= 1
