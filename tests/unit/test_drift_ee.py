"""execution-environment.yml (ansible-builder v3) produces a build context with the collection,
the fabricops package and the dependency files. Skipped where ansible-builder is not installed
(``pip install ansible-builder``; it is not a dependency of fabricops)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EE = REPO / "execution-environment.yml"


def test_execution_environment_is_v3_and_installs_fabricops():
    spec = yaml.safe_load(EE.read_text())
    assert spec["version"] == 3
    deps = spec["dependencies"]
    assert deps["ansible_core"]["package_pip"].startswith("ansible-core")
    assert deps["ansible_runner"]["package_pip"].startswith("ansible-runner")
    for key in ("python", "system", "galaxy"):
        assert (REPO / deps[key]).is_file(), deps[key]
    final = " ".join(spec["additional_build_steps"]["append_final"])
    assert "fabricops-*.whl" in final and "fabricops-fabric-*.tar.gz" in final
    assert (REPO / spec["additional_build_files"][0]["src"]).is_dir()


def _builder() -> list[str] | None:
    if importlib.util.find_spec("ansible_builder") is not None:
        return [sys.executable, "-m", "ansible_builder"]
    exe = shutil.which("ansible-builder")
    return [exe] if exe else None


def test_ansible_builder_create_makes_a_build_context(tmp_path):
    builder = _builder()
    if builder is None:
        pytest.skip("ansible-builder is not installed")
    ctx = tmp_path / "context"
    proc = subprocess.run([*builder, "create", "-f", str(EE), "-c", str(ctx)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = {p.name for p in ctx.iterdir()}
    containerfile = ctx / ("Containerfile" if "Containerfile" in files else "Dockerfile")
    text = containerfile.read_text()
    assert "COPY _build/fabricops /tmp/fabricops" in text
    assert "ansible-galaxy collection install --offline" in text
    assert (ctx / "_build" / "requirements.txt").read_text().count("netmiko") == 1
    assert (ctx / "_build" / "bindep.txt").is_file()
    assert (ctx / "_build" / "fabricops").is_dir()
