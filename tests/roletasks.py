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


def render_role_var(role_vars: dict, name: str, **ctx):
    """A role variable's ``{{ ... }}`` expression (``role_vars[name]``, from its vars/main.yml) evaluated
    by Jinja2 with the collection's fabric_services filters (as ``fabricops.fabric.<name>``) and
    ``b64decode``, in context ``ctx``."""
    import base64
    import sys

    import jinja2

    sys.path.insert(0, str(REPO / "plugins" / "filter"))
    try:
        import fabric_services as shim
    finally:
        sys.path.pop(0)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update({f"fabricops.fabric.{n}": f for n, f in shim.FilterModule().filters().items()})
    env.filters["b64decode"] = lambda s: base64.b64decode(s).decode()
    expr = role_vars[name].strip().removeprefix("{{").removesuffix("}}")
    return env.compile_expression(expr)(**ctx)
