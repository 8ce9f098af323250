"""Run a playbook through ansible-runner and hand its events to :mod:`fabricops.drift.report`.

ansible-runner runs ``ansible-playbook`` with the ansible.cfg Ansible would read from the current
directory (``ANSIBLE_CONFIG``, ``./ansible.cfg``, ``~/.ansible.cfg``; a checkout's own when there is
none), on a playbook of the installed ``fabricops.fabric`` collection found through Ansible's
collection search path (:mod:`fabricops.paths`), records every event under a private data directory
and returns them as dicts; the drift report is computed from those events, never by scraping stdout.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricops import paths
from fabricops.cliopts import STRICT_INVENTORY, ansible_error, redact_argv
from fabricops.errors import CouldNotRun, FabricopsError

#: Phases a drift run leaves out of site.yml by default: verification measures, it declares nothing.
DEFAULT_SKIP_TAGS = ("verify",)


@dataclass
class Run:
    events: list[dict[str, Any]]
    status: str
    rc: int
    stdout: str = ""
    #: the command line, fit to log or show: -e values with credential-looking keys masked
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


def _locate(playbook: str | Path) -> tuple[Path, Path, str | None]:
    """(playbook path, directory to run in, ansible.cfg): the playbook as given or the installed
    collection's own (fabricops.paths); the run starts where its ansible.cfg is, else here."""
    path = paths.playbook(playbook)
    config = ansible_config(paths.collection_root())
    return path, (Path(config).parent if config else Path.cwd()), config


def _env(config: str | None) -> dict[str, str]:
    env = {
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        **STRICT_INVENTORY,  # fail closed: an inventory that does not parse is an error, not "no hosts"
        # ansible-playbook from the same environment as this command (a venv need not be activated)
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    if config:
        env["ANSIBLE_CONFIG"] = config
    return env


def _inventory(inventory: str | Path | None) -> str | None:
    if not inventory:
        return None
    text = str(inventory)
    if "," in text:  # an inline host list (host1,host2,)
        return text
    inv = Path(text)
    return str(inv if inv.is_absolute() else (Path.cwd() / inv).resolve())


def _options(check: bool, extra_vars, skip_tags, tags) -> list[str]:
    cmd: list[str] = ["--diff"]
    if check:
        cmd.insert(0, "--check")
    for ev in extra_vars:
        cmd += ["-e", ev]
    if skip_tags:
        cmd += ["--skip-tags", ",".join(skip_tags)]
    if tags:
        cmd += ["--tags", tags]
    return cmd


_PLAY_HEADER = re.compile(r"^\s*play #\d+ ")
_HOSTS_HEADER = re.compile(r"^(?P<indent>\s*)hosts \((?P<n>\d+)\):\s*$")
_TASKS_HEADER = re.compile(r"^(?P<indent>\s*)tasks:\s*$")


def parse_list_hosts(text: str) -> list[str]:
    """Host names of ``ansible-playbook --list-hosts --list-tasks`` output, every play together,
    counting only the plays that have a task left after ``--tags`` / ``--skip-tags``.

    A play whose every task is filtered out by tags never runs on its hosts (site.yml's verification
    play on ``localhost`` in a drift run, which skips ``verify``): counting its hosts as targets would
    report them "not checked" and fail every clean drift run. Output without a ``tasks:`` section
    (``--list-hosts`` alone) counts every play's hosts."""
    hosts: set[str] = set()
    plays: list[tuple[list[str], int | None]] = []  # (hosts, tasks listed; None: no tasks section)
    section, indent = None, 0
    for line in text.splitlines():
        if _PLAY_HEADER.match(line):
            plays.append(([], None))
            section = None
            continue
        m = _HOSTS_HEADER.match(line) or _TASKS_HEADER.match(line)
        if m:
            if not plays:  # output of an older format: no play header seen
                plays.append(([], None))
            section, indent = ("hosts" if "hosts (" in line else "tasks"), len(m.group("indent"))
            if section == "tasks":
                plays[-1] = (plays[-1][0], 0)
            continue
        if section is None:
            continue
        stripped = line.strip()
        if not stripped or len(line) - len(line.lstrip()) <= indent:
            section = None
            continue
        names, ntasks = plays[-1]
        if section == "hosts":
            names.append(stripped)
        else:
            plays[-1] = (names, (ntasks or 0) + 1)
    for names, ntasks in plays:
        if ntasks is None or ntasks > 0:
            hosts.update(names)
    return sorted(hosts)


def list_hosts(
    playbook: str | Path,
    *,
    inventory: str | Path | None = None,
    limit: str | None = None,
    extra_vars: list[str] | tuple[str, ...] = (),
    skip_tags: tuple[str, ...] = DEFAULT_SKIP_TAGS,
    tags: str | None = None,
) -> list[str]:
    """The hosts the playbook targets (``ansible-playbook --list-hosts``): nothing runs on them.

    Raises :class:`CouldNotRun` with ansible's reason when the inventory or playbook cannot be read.
    """
    path, cwd, config = _locate(playbook)
    argv = ["ansible-playbook", "--list-hosts", "--list-tasks", *_options(False, extra_vars, skip_tags, tags)]
    inv = _inventory(inventory)
    if inv:
        argv += ["-i", inv]
    if limit:
        argv += ["--limit", limit]
    argv.append(str(path))
    env = {**os.environ, **_env(config)}
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        raise CouldNotRun("ansible-playbook is not installed (pip install ansible-core)") from None
    except subprocess.TimeoutExpired:
        raise CouldNotRun("ansible-playbook --list-hosts did not answer within 300 s") from None
    if proc.returncode != 0 and "leaves us with no hosts" in proc.stderr:
        return []  # the limit matches nothing: the caller says so
    if proc.returncode != 0:
        where = inventory or "(ansible.cfg default)"
        raise CouldNotRun(f"cannot read the inventory {where} or the playbook {path.name}: "
                          f"{ansible_error(proc.stderr)}")
    return parse_list_hosts(proc.stdout)


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
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> Run:
    """``ansible-playbook [--check] --diff PLAYBOOK`` through ansible-runner; returns its events.

    ``on_event`` sees every event as it arrives (live progress); with ``quiet=False`` the
    playbook's own output is copied to stderr (stdout is the report's).
    """
    try:
        import ansible_runner
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise FabricopsError(f"ansible-runner is not installed ({exc}); pip install ansible-runner") from exc

    playbook, cwd, config = _locate(playbook)
    cmd = _options(check, extra_vars, skip_tags, tags)

    def handler(event: dict[str, Any]) -> bool:
        if not quiet and event.get("stdout"):
            print(event["stdout"], file=sys.stderr, flush=True)
        if on_event is not None:
            on_event(event)
        return True

    kwargs: dict[str, Any] = {
        "project_dir": str(cwd),
        "playbook": str(playbook),
        "cmdline": " ".join(shlex.quote(c) for c in cmd),
        "envvars": _env(config),
        "quiet": True,  # ansible-runner would print the playbook's output on stdout
        "event_handler": handler,
    }
    inv = _inventory(inventory)
    if inv and "," in inv:  # ansible-runner would take a string that is no path for INI text
        kwargs["cmdline"] += f" -i {shlex.quote(inv)}"
    elif inv:
        kwargs["inventory"] = inv
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
               argv=redact_argv(["ansible-playbook", *cmd, str(playbook)]))
