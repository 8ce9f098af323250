"""The operator runbooks (docs/runbooks/*.md) run as written, against the lab's two Ethernet leaves.

Each page marks the blocks a test runs: ``<!-- runbook-params -->`` before the block that sets the
page's placeholders, ``<!-- runbook-test -->`` before each procedure block and
``<!-- runbook-test backout -->`` before each back-out block. A page's marked blocks run verbatim,
in order, in ONE bash session (``set -euo pipefail``, as an operator's terminal keeps variables and
functions from block to block); the only substitution is the params block, replaced by the lab's
values for exactly the same names. Each test then checks the outcome on its own.

Touches only leaf-onyx and leaf-cumulus (the ``leaves`` stream, tests/integration/streams.py):
rotate-switch-credentials on leaf-onyx (the password rotated, the old one refused, then the page's
own back-out puts the old password back: the lab's password file and the switch are as before);
replace-switch on leaf-cumulus with its RoCE configuration cleared (the closest the lab comes to a
factory-fresh unit; its host key stays), put back by the page itself. Both leaves end converged.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from integration.conftest import INVENTORY, REPO, ansible_env

pytestmark = pytest.mark.lab

RUNBOOKS = REPO / "docs" / "runbooks"
PLAYBOOK = "playbooks/switches.yml"
BLOCK = re.compile(r"<!-- runbook-(params|test(?: backout)?) -->\n```sh\n(.*?)^```$", re.M | re.S)
PARAM = re.compile(r"^([A-Z][A-Z0-9_]*)=")


def page_blocks(page: str) -> dict[str, list[str]]:
    """{"params": [block], "test": [blocks], "test backout": [blocks]} of a runbook page, as written."""
    out: dict[str, list[str]] = {"params": [], "test": [], "test backout": []}
    for kind, body in BLOCK.findall((RUNBOOKS / page).read_text()):
        out[kind].append(body)
    return out


def run_page(page: str, kind: str, params: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the page's ``kind`` blocks in one bash session, its params block replaced by ``params``
    (which must name exactly the page's placeholders). Each block is announced on stderr
    (``::runbook block N``), so a failure names the block it stopped in."""
    blocks = page_blocks(page)
    (params_block,) = blocks["params"]
    names = [m.group(1) for m in map(PARAM.match, params_block.splitlines()) if m]
    assert sorted(names) == sorted(params), f"{page}: placeholders {names}, the test gives {sorted(params)}"
    assert blocks[kind], f"{page}: no block marked runbook-{kind}"
    return _run_blocks(params, blocks[kind], timeout)


def _run_blocks(params: dict[str, str], blocks: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    script = ["set -euo pipefail"] + [f"{k}={_q(v)}" for k, v in params.items()]
    for i, body in enumerate(blocks, 1):
        script += [f"echo '::runbook block {i}' >&2", body]
    return subprocess.run(["bash", "-c", "\n".join(script)], cwd=REPO, env=ansible_env(), capture_output=True,
                          text=True, timeout=timeout)


def _q(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    if proc.returncode != 0:
        started = re.findall(r"::runbook block (\d+)", proc.stderr)
        where = f"block {started[-1]}" if started else "before the first block"
        raise AssertionError(f"runbook stopped in {where} with exit {proc.returncode}:\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _lab_switch(name: str) -> dict:
    from fabricops_lab import paths  # the lab's own layout: where its password file and keys live

    info = paths.load_lab()["switches"][name]
    return {"ip": info["mgmt_ip"], "port": str(info.get("port") or 22),
            "password_file": paths.switch_dir(name) / "password", "ssh_dir": paths.ssh_dir()}


def _ssh_switch(name: str, user: str, commands: list[str], *, password_file: Path | None = None,
                check: bool = True) -> subprocess.CompletedProcess:
    """Send commands to a lab switch's CLI over plain OpenSSH: by password (SSH_ASKPASS reading a
    file) or, without one, with the lab's controller key."""
    sw = _lab_switch(name)
    args = ["ssh", "-T", "-p", sw["port"], "-o", f"UserKnownHostsFile={sw['ssh_dir'] / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-o", "NumberOfPasswordPrompts=1"]
    env = dict(os.environ)
    askpass = None
    if password_file is not None:
        askpass = sw["ssh_dir"].parent / f".askpass-{os.getpid()}"
        askpass.write_text(f"#!/bin/sh\nexec cat '{password_file}'\n")
        askpass.chmod(0o700)
        env |= {"SSH_ASKPASS": str(askpass), "SSH_ASKPASS_REQUIRE": "force"}
        args += ["-o", "PreferredAuthentications=password"]
    else:
        args += ["-o", "BatchMode=yes", "-i", str(sw["ssh_dir"] / "switch_ed25519")]
    try:
        proc = subprocess.run([*args, f"{user}@{sw['ip']}"], input="\n".join(commands) + "\n", env=env,
                              capture_output=True, text=True, timeout=60)
    finally:
        if askpass is not None:
            askpass.unlink(missing_ok=True)
    if check:
        assert proc.returncode == 0, f"ssh {user}@{name}: exit {proc.returncode}: {proc.stderr[-2000:]}"
        assert not re.search(r"(^|[#>$] )(% |Error)", proc.stdout, re.M), proc.stdout[-2000:]
    return proc


def _check_run(ansible_playbook, name: str):
    run = ansible_playbook(PLAYBOOK, "--check", "--limit", name)
    return run.rc, run.hosts.get(name, {})


@pytest.fixture(scope="module")
def converged(lab, ansible_playbook):
    """Both leaves converged (what the pages start from); left converged."""
    run = ansible_playbook(PLAYBOOK)
    assert run.rc == 0, run.stdout[-4000:] + run.stderr[-2000:]
    yield
    run = ansible_playbook(PLAYBOOK)
    assert run.rc == 0, run.stdout[-4000:]


def test_every_runbook_page_is_listed_and_its_marked_blocks_are_sh(converged):
    pages = sorted(p.name for p in RUNBOOKS.glob("*.md"))
    index = (RUNBOOKS / "index.md").read_text()
    for page in pages:
        if page != "index.md":
            assert f"({page})" in index, f"docs/runbooks/index.md does not link {page}"
            assert len(page_blocks(page)["params"]) == 1, f"{page}: one runbook-params block"
    for page in ("rotate-switch-credentials.md", "replace-switch.md"):  # the pages this file runs
        assert page_blocks(page)["test"], page
    # a marker must sit right above an sh block, or the block would silently go untested
    for page in pages:
        text = (RUNBOOKS / page).read_text()
        markers = re.findall(r"^<!-- runbook-", text, re.M)
        assert len(markers) == sum(len(v) for v in page_blocks(page).values()), page


def test_rotate_switch_credentials_onyx(converged, ansible_playbook):
    name = "leaf-onyx"
    sw = _lab_switch(name)
    pw_file = sw["password_file"]
    old = pw_file.read_text().strip()
    params = {"SWITCH": name, "INV": str(INVENTORY.parent), "PW_FILE": str(pw_file)}
    try:
        _ok(run_page("rotate-switch-credentials.md", "test", params))
        new = pw_file.read_text().strip()
        assert new != old and len(new) >= 24
        assert not Path(f"{pw_file}.new").exists()
        # the switch: the new password logs in, the old one is refused
        assert "Product name" in _ssh_switch(name, "admin", ["show version"], password_file=pw_file).stdout
        old_file = Path(f"{pw_file}.old")
        refused = _ssh_switch(name, "admin", ["show version"], password_file=old_file, check=False)
        assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused.stderr
        # the project's own access (the role, from the inventory) logs in and finds nothing to change
        rc, stats = _check_run(ansible_playbook, name)
        assert rc == 0 and stats.get("failures") == 0 and stats.get("changed") == 0, stats
    finally:
        # the page's own back-out (its procedure's first block defines the helpers it uses), whenever
        # the procedure got as far as keeping the old password
        if Path(f"{pw_file}.old").exists():
            blocks = page_blocks("rotate-switch-credentials.md")
            _ok(_run_blocks(params, [blocks["test"][0], *blocks["test backout"]]))
    assert pw_file.read_text().strip() == old
    assert not Path(f"{pw_file}.old").exists()
    assert "Product name" in _ssh_switch(name, "admin", ["show version"], password_file=pw_file).stdout


def test_replace_switch_cumulus(converged, ansible_playbook):
    name = "leaf-cumulus"
    # "the replacement": the leaf's RoCE configuration cleared and saved, as a factory-fresh unit has
    # none (nv unset / nv config apply / nv config save: Cumulus Linux user guide, "NVUE CLI")
    _ssh_switch(name, "cumulus", ["nv unset qos", "nv unset interface swp1-2 qos", "nv config apply -y",
                                  "nv config save"])
    rc, stats = _check_run(ansible_playbook, name)
    assert rc == 0 and stats.get("changed") == 1, stats  # drifted: the play would configure it
    proc = _ok(run_page("replace-switch.md", "test", {"SWITCH": name, "INV": str(INVENTORY.parent)}))
    assert re.search(rf"^{name} +: .*changed=1 .*failed=0", proc.stdout, re.M), proc.stdout[-3000:]
    assert f"no drift: {name}" in proc.stdout + proc.stderr, proc.stdout[-2000:]
    rc, stats = _check_run(ansible_playbook, name)
    assert rc == 0 and stats.get("changed") == 0 and stats.get("failures") == 0, stats
