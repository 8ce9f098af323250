"""A role's tasks as the tests read them: one task file, with the files it includes in their place."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def role_tasks(role: str, name: str) -> list[dict]:
    """The tasks of roles/ROLE/tasks/NAME, each include_tasks followed by the included file's tasks."""
    out = []
    for task in yaml.safe_load((REPO / "roles" / role / "tasks" / name).read_text()):
        out.append(task)
        include = task.get("ansible.builtin.include_tasks")
        if include:
            out += role_tasks(role, include["file"] if isinstance(include, dict) else include)
    return out
