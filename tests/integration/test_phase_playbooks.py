"""Every phase playbook runs alone on the lab exactly as its header documents it.

The lab inventory is an inventory like any other: it sets the roles' own variables (the OFED pin,
URLs and checksums, the fabric manager repository), so ``ansible-playbook playbooks/ofed.yml`` works
without site.yml (which used to fill ``mlnx_ofed_version`` from a lab-only description; run alone,
the phase failed with "missing required arguments: mlnx_ofed_version").
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from integration.conftest import REPO
from labtools import ensure_ofed

pytestmark = pytest.mark.lab

HOST = "gpu04"
PLAYBOOKS = sorted(p.name for p in (REPO / "playbooks").glob("*.yml") if p.name != "site.yml")
# What each header's first command line says beyond the playbook; --check keeps the lab as it is
# where the header offers it ([--check ...]); the limit is the header's own example or one host.
HEADER = re.compile(r"^#\s+ansible-playbook (playbooks/\S+\.yml)(.*)$", re.M)


def _documented(playbook: str) -> list[str]:
    text = (REPO / "playbooks" / playbook).read_text()
    m = HEADER.search(text)
    assert m, f"playbooks/{playbook} has no '# ansible-playbook playbooks/{playbook} ...' usage line"
    assert m.group(1) == f"playbooks/{playbook}"
    rest = m.group(2).split("#", 1)[0]
    args: list[str] = []
    for opt in re.findall(r"\[([^]]+)\]|(-e \S+)", rest):
        bracket, plain = opt
        if plain:
            args += plain.split(" ", 1)
        elif bracket.startswith("--check"):
            args += bracket.split()
    return args


def test_every_phase_playbook_documents_how_to_run_it():
    assert len(PLAYBOOKS) >= 11
    for playbook in PLAYBOOKS:
        _documented(playbook)


@pytest.fixture(scope="module")
def ofed_on_host(ssh, lab):
    return ensure_ofed(ssh, lab, HOST)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_phase_playbook_runs_alone_as_documented(playbook, ofed_on_host, ansible_playbook, request):
    args = _documented(playbook)
    limit = ["--limit", "leaf-onyx" if playbook == "switches.yml" else HOST]
    if playbook == "verify.yml":
        # verification runs on the controller (hosts: localhost) and measures the hosts it is given
        args, limit = ["-e", f"fabricops_verify_limit={HOST}", "-e", "fabricops_verify_only=gpus"], []
    if playbook == "monitor.yml":
        # The lab hosts have no package network, so node_exporter comes the way an air-gapped rack's
        # inventory gives it: a .deb URL and its sha256 (the apt method needs a configured source).
        deb = request.getfixturevalue("deb_mirror")
        args += ["-e", "fabric_monitor_install_method=deb_url",
                 "-e", f"fabric_monitor_node_exporter_deb_url={deb['url']}",
                 "-e", f"fabric_monitor_node_exporter_deb_sha256={deb['sha256']}"]
    run = ansible_playbook(Path("playbooks") / playbook, *args, *limit, timeout=900)
    tail = (run.stdout + run.stderr)[-3000:]
    assert "missing required arguments" not in run.stdout, tail
    assert run.rc == 0, f"playbooks/{playbook} {' '.join(args)}: rc {run.rc}\n{tail}"
    assert run.hosts, tail
    assert all(s["failures"] == 0 and s.get("unreachable", 0) == 0 for s in run.hosts.values()), tail
