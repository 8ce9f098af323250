"""scripts/demo.sh prints the verification summary once: the terminal copy of site.yml's output leaves
out the summary task (JSON-quoted lines), which the script prints readable at the end."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

LOG = """\
TASK [fabricops.fabric.nccl_profile : Write the profile] ***
ok: [gpu01]

TASK [Show the summary] ********************************************************
ok: [localhost] => {
    "msg": [
        "fabricops verify: PASS (4 hosts)",
        "  gpu01  pass"
    ]
}

TASK [Fail unless every check passed] ******************************************
ok: [localhost]

PLAY RECAP *********************************************************************
gpu01                      : ok=25   changed=0    unreachable=0    failed=0
"""


def _terminal_filter() -> str:
    text = (REPO / "scripts/demo.sh").read_text()
    m = re.search(r"\| tee \"\$log\" \\\n\s*\| awk '(.*?)' \\\n", text, re.S)
    assert m, "demo.sh no longer filters its terminal copy through awk"
    return m.group(1)


def test_the_terminal_copy_leaves_out_the_summary_task_only():
    out = subprocess.run(["awk", _terminal_filter()], input=LOG, capture_output=True, text=True,
                         check=True).stdout
    assert "Show the summary" not in out and "fabricops verify: PASS" not in out
    assert "TASK [Fail unless every check passed]" in out and "PLAY RECAP" in out
    assert "Write the profile" in out and "ok=25" in out


def test_the_end_of_the_demo_prints_the_summary_from_the_log():
    text = (REPO / "scripts/demo.sh").read_text()
    prog = re.search(r"awk '(/\^TASK \\\[Show the summary\\\]/ \{on=1; next\}.*?)'", text, re.S)
    assert prog, "demo.sh no longer prints the summary from its log"
    sed = re.search(r"\| sed -n '(.*?)'", text).group(1)
    shown = subprocess.run(["awk", prog.group(1)], input=LOG, capture_output=True, text=True, check=True)
    lines = subprocess.run(["sed", "-n", sed], input=shown.stdout, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert lines == ["fabricops verify: PASS (4 hosts)", "  gpu01  pass"]
