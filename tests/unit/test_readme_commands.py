"""The README's quickstart commands are the ones the proof runs (issue 39 point 1).

CI runs ``.ci/run`` on a fresh clone; its one command must be the README's whole-proof command, so a
reader who types what the README says runs exactly what CI ran. (The install blocks run verbatim in
tests/integration/test_install_like_a_user.py.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _blocks(section: str) -> list[str]:
    text = (REPO / "README.md").read_text()
    m = re.search(rf"^## {re.escape(section)}.*?$(.*?)(?=^## )", text, re.M | re.S)
    assert m, f"README has no section {section!r}"
    return re.findall(r"^```sh\n(.*?)^```$", m.group(1), re.M | re.S)


def _commands(block: str) -> list[list[str]]:
    argvs = (shlex.split(line, comments=True) for line in block.splitlines())
    return [argv for argv in argvs if argv]


def test_ci_runs_the_readmes_whole_proof_command():
    demo, tests = _blocks("Quickstart")
    ci = [ln for ln in (REPO / ".ci/run").read_text().splitlines()
          if ln.strip() and not ln.lstrip().startswith("#")]
    assert shlex.split(ci[-1]) == _commands(tests)[0] == ["bash", "scripts/test.sh"]
    assert _commands(tests)[1] == ["bash", "scripts/test.sh", "--quick"]
    assert _commands(demo) == [["bash", "scripts/demo.sh"]]


def test_every_quickstart_command_names_a_script_of_this_repository():
    for block in _blocks("Quickstart"):
        for argv in _commands(block):
            assert argv[0] == "bash" and (REPO / argv[1]).is_file(), argv
