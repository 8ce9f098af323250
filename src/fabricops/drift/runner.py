"""Run a playbook through ansible-runner and hand its events to :mod:`fabricops.drift.report`.

ansible-runner runs ``ansible-playbook`` with the ansible.cfg Ansible would read from the current
directory (``ANSIBLE_CONFIG``, ``./ansible.cfg``, ``~/.ansible.cfg``; a checkout's own when there is
none), on a playbook of the installed ``fabricops.fabric`` collection found through Ansible's
collection search path (:mod:`fabricops.paths`), records every event under a private data directory
and returns them as dicts; the drift report is computed from those events, never by scraping stdout.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricops import paths
from fabricops.errors import FabricopsError

#: Phases a drift run leaves out of site.yml by default: verification measures, it declares nothing.
DEFAULT_SKIP_TAGS = ("verify",)


@dataclass
class Run:
    events: list[dict[str, Any]]
    status: str
    rc: int
    stdout: str = ""
    argv: list[str] = field(default_factory=list)


def ansible_config(root: Path) -> str | None:
    """The ansible.cfg for the run: the one Ansible itself would read from the current directory,
    else a checkout's own (an installed collection ships none)."""
    if os.environ.get("ANSIBLE_CONFIG"):
        return os.environ["ANSIBLE_CONFIG"]
    try:
        from ansible.config.manager import find_ini_config_file

        found = find_ini_config_file()
    except Exception:  # pragma: no cover - ansible-core is a dependency
        found = None
    if found:
        return str(Path(found).resolve())
    own = root / "ansible.cfg"
    return str(own) if own.is_file() else None


def run_playbook(
    playbook: str | Path,
    *,
    inventory: str | Path | None = None,
    limit: str | None = None,
    check: bool = True,
    extra_vars: list[str] | tuple[str, ...] = (),
    skip_tags: tuple[str, ...] = DEFAULT_SKIP_TAGS,
    tags: str | None = None,
    keep_artifacts: Path | None = None,
    quiet: bool = True,
) -> Run:
    """``ansible-playbook [--check] --diff PLAYBOOK`` through ansible-runner; returns its events."""
    try:
        import ansible_runner
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise FabricopsError(f"ansible-runner is not installed ({exc}); pip install ansible-runner") from exc

    playbook = paths.playbook(playbook)
    root = paths.collection_root()
    cmd: list[str] = ["--diff"]
    if check:
        cmd.insert(0, "--check")
    for ev in extra_vars:
        cmd += ["-e", ev]
    if skip_tags:
        cmd += ["--skip-tags", ",".join(skip_tags)]
    if tags:
        cmd += ["--tags", tags]
    env = {
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        # ansible-playbook from the same environment as this command (a venv need not be activated)
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    config = ansible_config(root)
    if config:
        env["ANSIBLE_CONFIG"] = config
    kwargs: dict[str, Any] = {
        "project_dir": str(Path(config).parent if config else Path.cwd()),
        "playbook": str(playbook),
        "cmdline": " ".join(shlex.quote(c) for c in cmd),
        "envvars": env,
        "quiet": quiet,
    }
    if inventory:
        inv = Path(inventory)
        kwargs["inventory"] = str(inv if inv.is_absolute() else (Path.cwd() / inv).resolve())
    if limit:
        kwargs["limit"] = limit
    with tempfile.TemporaryDirectory(prefix="fabricops-drift-") as tmp:
        pdd = keep_artifacts or Path(tmp)
        pdd.mkdir(parents=True, exist_ok=True)
        r = ansible_runner.run(private_data_dir=str(pdd), **kwargs)
        events = list(r.events)
        try:
            stdout = r.stdout.read()
        except Exception:  # stdout is a convenience; the events are the record
            stdout = ""
    return Run(events=events, status=r.status, rc=r.rc if r.rc is not None else 1, stdout=stdout,
               argv=["ansible-playbook", *cmd, str(playbook)])
