"""The host-side modules run on the hosts' Python, not the controller's: fabricops.hostside.HOST_PYTHON.

The controller runs Python 3.11+, a managed host may have 3.8 (Ubuntu 20.04) or 3.10 (Ubuntu 22.04).
Three guards:

- a static check of every shipped file (syntax at the floor, regex syntax older ``re`` refuses,
  ``X | Y`` in isinstance, subscripted generics evaluated at import time);
- a record/replay run: apply then verify on the emulated host in this process, every call the
  program makes to the host recorded; then each older interpreter found on this machine runs the
  *shipped tree* against the recording and must print and return exactly the same (a call the
  recording does not hold fails the replay);
- the floor the launchers and the role's preflight check is the package's constant.
"""

from __future__ import annotations

import ast
import glob
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from unit.hostqos.emulated import EmulatedSystem, hardware, host  # noqa: F401  (fixture)

from fabricops.hostqos.plan import host_plan
from fabricops.hostside import HOST_PYTHON, roce_boot, ship

REPO = Path(__file__).resolve().parents[3]
ENTRIES = ("fabricops.hostside.roce_boot", "fabricops.monitor.collector")
#: possessive quantifiers and atomic groups: Python 3.11's re only
_NEW_REGEX = re.compile(r"(?<!\\)(?:[*+?}]\+|\(\?>)")
_GENERICS = {"tuple", "list", "dict", "set", "frozenset", "type", "Callable", "Mapping", "Sequence",
             "Iterable", "Iterator", "MutableMapping"}


def _shipped() -> dict[str, Path]:
    files = {}
    for entry in ENTRIES:
        for f in ship.files_for(entry):
            files[f["path"]] = Path(f["src"])
    return files


def _problems(path: str, text: str) -> list[str]:
    out = []
    try:
        tree = ast.parse(text, feature_version=HOST_PYTHON)
    except SyntaxError as exc:
        return [f"{path}:{exc.lineno}: syntax newer than Python {HOST_PYTHON}: {exc.msg}"]
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                 and any(a.name == "annotations" for a in n.names) for n in tree.body)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2 \
                and isinstance(node.args[1], ast.BinOp):
            out.append(f"{path}:{node.lineno}: {node.func.id}(x, A | B) needs Python 3.10")
        if isinstance(node, ast.Call) and any(k.arg == "strict" for k in node.keywords) \
                and isinstance(node.func, ast.Name) and node.func.id == "zip":
            out.append(f"{path}:{node.lineno}: zip(strict=) needs Python 3.10")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _NEW_REGEX.search(node.value):
            # any string literal: a pattern may be built before it reaches re.compile
            out.append(f"{path}:{node.lineno}: possessive quantifier / atomic group needs Python 3.11")
        if (isinstance(node, ast.AnnAssign | ast.FunctionDef) and not future
                and (node.annotation if isinstance(node, ast.AnnAssign) else node.returns) is not None):
            out.append(f"{path}:{node.lineno}: annotations without 'from __future__ import annotations'")
    for node in tree.body:  # module level: evaluated at import
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name)
                and value.value.id in _GENERICS):
            out.append(f"{path}:{node.lineno}: {value.value.id}[...] at import time needs Python 3.9")
    return out


def test_shipped_files_keep_to_the_host_python_floor():
    files = _shipped()
    assert "fabricops/hostside/roce_boot.py" in files and "fabricops/monitor/collector.py" in files
    problems = [p for rel, src in sorted(files.items()) for p in _problems(rel, src.read_text())]
    assert problems == []


@pytest.mark.parametrize(
    ("code", "finding"),
    [
        ("import re\nX = re.compile(r'a*+b')\n", "possessive"),
        ("def f(x):\n    return isinstance(x, int | str)\n", "isinstance"),
        ("from collections.abc import Callable\nR = Callable[[int], int]\n", "import time"),
        ("def f():\n    match 1:\n        case 1:\n            pass\n", "syntax newer"),
        ("def f(x: list[int]) -> int:\n    return 1\n", "__future__"),
    ],
)
def test_the_floor_check_catches_newer_python(code, finding):
    assert any(finding in p for p in _problems("x.py", code))


def _old_pythons() -> list[str]:
    """Interpreters older than the controller's on this machine (PATH, pyenv), at or above the floor."""
    found: dict[tuple[int, int], str] = {}
    candidates = [shutil.which(f"python3.{m}") for m in range(HOST_PYTHON[1], 11)]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")))
    for exe in filter(None, candidates):
        try:
            out = subprocess.run([exe, "-I", "-S", "-c", "import sys; print(sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=20, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        version = tuple(int(t) for t in re.findall(r"\d+", out)[:2])
        if HOST_PYTHON <= version < (3, 11):
            found.setdefault(version, exe)
    return [found[v] for v in sorted(found)]


class Recorder(EmulatedSystem):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list] = []

    def run(self, argv):
        out = super().run(argv)
        self.calls.append(["run", list(argv), list(out)])
        return out

    def read(self, path):
        out = super().read(path)
        self.calls.append(["read", path, out])
        return out

    def write(self, path, value):
        try:
            super().write(path, value)
        except OSError as exc:
            self.calls.append(["write", [path, str(value)], str(exc)])
            raise
        self.calls.append(["write", [path, str(value)], None])

    def exists(self, path):
        out = super().exists(path)
        self.calls.append(["exists", path, out])
        return out


REPLAY = r"""
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])
from fabricops.hostside import roce_boot
calls = json.load(open(sys.argv[2]))
class Replay:
    def _next(self, kind, arg):
        want = calls.pop(0)
        if want[0] != kind or want[1] != arg:
            raise SystemExit("replay: got %s %r, recorded %s %r" % (kind, arg, want[0], want[1]))
        return want[2]
    def run(self, argv):
        return tuple(self._next("run", list(argv)))
    def read(self, path):
        return self._next("read", path)
    def write(self, path, value):
        err = self._next("write", [path, str(value)])
        if err is not None:
            raise OSError(err)
    def exists(self, path):
        return self._next("exists", path)
results = []
for action in ("apply", "verify"):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = roce_boot.main([action, "--config", sys.argv[3]], system=Replay(), wait_s=0)
    results.append([rc, out.getvalue(), err.getvalue()])
print(json.dumps({"results": results, "left": len(calls)}))
"""


def test_recorded_apply_and_verify_replay_identically_on_older_pythons(tmp_path, host, capsys):  # noqa: F811
    pythons = _old_pythons()
    if not pythons:
        pytest.skip(f"no Python from {HOST_PYTHON} to 3.10 on this machine; the static check still runs")
    hcas = [{"name": h["name"], "ports": h["ports"]} for h in hardware()["hcas"]]
    plan = host_plan({"lossless_priority": 3, "dscp": 26, "cnp_priority": 5}, hcas)
    config = tmp_path / "roce-qos.json"
    doc = {"roce": plan["roce"], "ports": plan["ports"], "boot_wait_s": 0}
    config.write_text("# header\n" + json.dumps(doc))
    system = Recorder()
    expected = []
    for action in ("apply", "verify"):
        rc = roce_boot.main([action, "--config", str(config)], system=system, wait_s=0)
        cap = capsys.readouterr()
        expected.append([rc, cap.out, cap.err])
    assert [e[0] for e in expected] == [0, 0], expected
    assert any(c[0] == "write" for c in system.calls) and any(c[0] == "run" for c in system.calls)
    lib = tmp_path / "lib"
    for rel, src in _shipped().items():
        (lib / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, lib / rel)
    (tmp_path / "calls.json").write_text(json.dumps(system.calls))
    (tmp_path / "replay.py").write_text(REPLAY)
    for exe in pythons:
        argv = [exe, "-I", "-S", str(tmp_path / "replay.py"), str(lib), str(tmp_path / "calls.json"),
                str(config)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, f"{exe}: {proc.stderr[-2000:]}"
        got = json.loads(proc.stdout)
        assert got == {"results": expected, "left": 0}, exe


def test_launchers_and_preflight_check_the_packages_floor():
    floor = "{}.{}".format(*HOST_PYTHON)
    for launcher in ("roles/roce_host/templates/fabricops-roce-qos-launcher.j2",
                     "roles/fabric_monitor/templates/fabricops-collector-launcher.j2"):
        text = (REPO / launcher).read_text()
        assert f"sys.version_info < {HOST_PYTHON}" in text and f"Python {floor} or newer" in text, launcher
    preflight = (REPO / "roles/roce_host/tasks/preflight.yml").read_text()
    assert f"version('{floor}', '>=')" in preflight
    assert not re.search(r"3\.(9|1[0-9])\b", preflight)
    assert roce_boot.__name__ == "fabricops.hostside.roce_boot"
