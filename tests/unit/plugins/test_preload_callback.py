# SPDX-License-Identifier: Apache-2.0
"""fabricops.fabric.preload: the collection's plugins are imported in the controller process.

A worker forked after the callback loaded finds each plugin module already in sys.modules, which
is where the plugin loaders look first; so the test runs a real ansible-playbook with the
repository's ansible.cfg (which enables the callback) and asks a task's worker whether the modules
were there before the task itself loaded anything.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_repository_config_enables_it():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    enabled = [c.strip() for c in cfg.get("defaults", "callbacks_enabled").split(",")]
    assert "fabricops.fabric.preload" in enabled


def test_preload_imports_the_plugins_and_the_modules_their_proxies_load():
    code = (
        "import sys; from ansible.plugins.loader import init_plugin_loader; "
        f"init_plugin_loader([{str(ROOT / '.collections')!r}]); "
        "from ansible_collections.fabricops.fabric.plugins.callback.preload import preload; "
        "done = preload(); import json; print(json.dumps(done))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    done = set(json.loads(out.stdout))
    base = "ansible_collections.fabricops.fabric.plugins"
    plugins = [*(ROOT / "plugins" / "filter").glob("*.py"), *(ROOT / "plugins" / "action").glob("*.py")]
    for path in plugins:
        assert f"{base}.{path.parent.name}.{path.stem}" in done, path
    # what the filters' LazyModule proxies import on first use, and a function-level import
    for name in ("fabricops.ipoib", "fabricops.nccl", "fabricops.firmware", "fabricops.parsers.ip_addr",
                 "ansible.plugins.action.set_fact"):
        assert name in done


PROBE_ACTION = """
import sys
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result["loaded"] = {n: n in sys.modules for n in self._task.args["names"]}
        return result
"""


def _worker_sees(tmp_path, preload):
    """Which of the modules a task's worker finds in sys.modules before it loads anything itself."""
    search = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    exe = shutil.which("ansible-playbook", path=search)
    (tmp_path / "action").mkdir(exist_ok=True)
    (tmp_path / "action" / "modules_loaded.py").write_text(PROBE_ACTION)
    names = ["ansible_collections.fabricops.fabric.plugins.filter.fabricops",
             "ansible_collections.fabricops.fabric.plugins.action.templates", "fabricops.ipoib"]
    (tmp_path / "play.yml").write_text(json.dumps([{
        "hosts": "local", "gather_facts": False,
        "tasks": [{"name": "probe", "modules_loaded": {"names": names}, "register": "out"},
                  {"name": "show", "ansible.builtin.debug": {"msg": "RESULT {{ out.loaded | to_json }}"}}],
    }]))
    (tmp_path / "inventory.json").write_text(json.dumps({"all": {"hosts": {"local": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    cfg = ROOT / "ansible.cfg"
    if not preload:  # the repository's settings without the callback
        text = cfg.read_text().replace("callbacks_enabled = fabricops.fabric.preload", "")
        cfg = tmp_path / "ansible.cfg"
        cfg.write_text(text.replace("= inventories/", f"= {ROOT}/inventories/").replace(
            "= .collections", f"= {ROOT}/.collections").replace("= roles", f"= {ROOT}/roles"))
    env = {**os.environ, "ANSIBLE_CONFIG": str(cfg), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_ACTION_PLUGINS": str(tmp_path / "action"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([exe, "-i", str(tmp_path / "inventory.json"), str(tmp_path / "play.yml")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if '"msg": "RESULT ' in ln)
    return json.loads(json.loads(line.split('"msg": ', 1)[1]).removeprefix("RESULT "))


def test_a_worker_finds_the_plugins_loaded_only_with_the_callback(tmp_path):
    assert set(_worker_sees(tmp_path, True).values()) == {True}
    assert set(_worker_sees(tmp_path, False).values()) == {False}
