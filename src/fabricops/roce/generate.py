"""Write (or check) every file region generated from :mod:`fabricops.model.roce_schema`.

    python -m fabricops.roce.generate           # rewrite the generated regions in place
    python -m fabricops.roce.generate --check   # exit 1 naming each stale file, change nothing

A region sits between two marker comments, ``# BEGIN fabricops.roce.generate NAME`` and
``# END fabricops.roce.generate NAME`` (``<!-- ... -->`` in Markdown); it is rendered at the
indentation of its BEGIN line and everything around it is hand-written and kept. Regions: the role
``meta/argument_specs.yml`` entries and switch defaults, the module DOCUMENTATION options and argument
specs that take RoCE values, and the field tables of docs/roce.md. Exit status: 0 current (or written),
1 stale (``--check``), 4 a target file or marker is missing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from fabricops.model import roce_schema as schema
from fabricops.model.roce_schema import FIELDS, PORT_QOS, PORT_SYSFS, SWITCH_SETTINGS, Field

__all__ = ["TARGETS", "check", "main", "render_file", "write"]

TAG = "fabricops.roce.generate"
WRAP = 96  #: generated text lines stay short (yamllint: 140 with the indentation)
MARK = re.compile(
    rf"^(?P<indent>\s*)(?:#|<!--) (?P<kind>BEGIN|END) {re.escape(TAG)} (?P<name>[\w-]+)(?: -->)?\s*$"
)


class GenerateError(Exception):
    """A target file or one of its markers is missing; one sentence."""


# --- renderers: each returns the region's lines, unindented ---


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {_scalar(v)}" for k, v in value.items()) + "}"
    text = str(value)
    try:
        plain = yaml.safe_load(f"k: {text}") == {"k": text}
    except yaml.YAMLError:
        plain = False
    return text if plain else json.dumps(text)


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(text, WRAP, break_on_hyphens=False, break_long_words=False)


def yaml_options(options: dict[str, Any], nested: str = "options") -> list[str]:
    """Ansible ``options`` entries as YAML lines (keys in a fixed order). ``nested``: the key of
    sub-options, ``options`` in role argument specs, ``suboptions`` in module DOCUMENTATION."""
    lines: list[str] = []
    for name, spec in options.items():
        lines.append(f"{name}:")
        for key in ("description", "type", "elements", "choices", "default"):
            if key == "description" and len(spec[key]) > WRAP:  # a folded block scalar holds any text
                lines.append("  description: >-")
                lines.extend("    " + part for part in _wrap(spec[key]))
            elif key in spec:
                lines.append(f"  {key}: {_scalar(spec[key])}")
        if "options" in spec:
            lines.append(f"  {nested}:")
            lines.extend("    " + line for line in yaml_options(spec["options"], nested))
    return lines


def _py(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_py(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_py(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def py_spec(variable: str, spec: dict[str, Any]) -> list[str]:
    """``VARIABLE = {...}`` as Python lines, one option a line (the module runs without the package)."""
    return [f"{variable} = {{", *(f"    {json.dumps(n)}: {_py(s)}," for n, s in spec.items()), "}"]


def role_switch_settings() -> list[str]:
    """The ``roce_switch_*`` role variables of the switch-only settings, with their defaults."""
    return yaml_options(
        {f.role_var: schema.ansible_options((f,), with_default=True)[f.name] for f in SWITCH_SETTINGS}
    )


def defaults_switch_settings() -> list[str]:
    lines: list[str] = []
    for f in SWITCH_SETTINGS:
        text = f.description + (f" Allowed: {f.range_text()}." if f.range_text() else "")
        lines.extend("# " + part for part in _wrap(text))
        lines.append(f"{f.role_var}: {_scalar(f.default)}")
    return lines


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _md_default(f: Field) -> str:
    if f.default is None:
        return "null"
    if f.type == "map" and not f.default:
        return "{}"
    return f"`{_scalar(f.default)}`"


def _md_type(f: Field) -> str:
    if f.type == "map":
        klo, khi = f.key_range or (0, 63)
        text = f"{{DSCP {klo}..{khi}: priority {f.lo}..{f.hi}}}"
    else:
        text = f"{f.type} {f.range_text()}".strip()
    if f.unit:
        text += f" ({f.unit})"
    if f.nullable and f.type != "map":
        text += " or null"
    return _md(text)


def md_fields() -> list[str]:
    lines = ["| key | type | default | scope | meaning |", "|---|---|---|---|---|"]
    for f in FIELDS:
        lines.append(f"| `{f.path}` | {_md_type(f)} | {_md_default(f)} | {f.scope} | {_md(f.description)} |")
    return lines


def md_switch_settings() -> list[str]:
    lines = ["| role variable | task option | type | default | meaning |", "|---|---|---|---|---|"]
    for f in SWITCH_SETTINGS:
        lines.append(
            f"| `{f.role_var}` | `{f.name}` | {_md_type(f)} | {_md_default(f)} | {_md(f.description)} |"
        )
    return lines


def md_rules() -> list[str]:
    return [f"- {_md(text)}" for text, _rule in schema.RULES]


DEFINITION = lambda: yaml_options(schema.ansible_options(FIELDS))  # noqa: E731
DEFINITION_DOC = lambda: yaml_options(schema.ansible_options(FIELDS), "suboptions")  # noqa: E731
SWITCH_DOC = lambda: yaml_options(schema.ansible_options(SWITCH_SETTINGS, with_default=True))  # noqa: E731

#: file (relative to the repository root) -> region name -> renderer
TARGETS: dict[str, dict[str, Callable[[], list[str]]]] = {
    "roles/roce_host/meta/argument_specs.yml": {"roce_host_roce": DEFINITION},
    "roles/roce_switch/meta/argument_specs.yml": {
        "roce_switch_roce": DEFINITION,
        "switch_settings": role_switch_settings,
    },
    "roles/roce_switch/defaults/main.yml": {"switch_settings": defaults_switch_settings},
    "plugins/modules/roce_plan.py": {"roce": DEFINITION_DOC},
    "plugins/modules/roce_switch.py": {"roce": DEFINITION_DOC, "switch_settings": SWITCH_DOC},
    "plugins/modules/mlnx_qos.py": {
        "config": lambda: yaml_options(schema.ansible_options(PORT_QOS)),
        "config_spec": lambda: py_spec("CONFIG_OPTIONS", schema.argument_spec(PORT_QOS)),
    },
    "plugins/modules/roce_sysfs.py": {
        "config": lambda: yaml_options(schema.ansible_options(PORT_SYSFS)),
        "config_spec": lambda: py_spec("CONFIG_OPTIONS", schema.argument_spec(PORT_SYSFS)),
    },
    "docs/roce.md": {"fields": md_fields, "switch_settings": md_switch_settings, "rules": md_rules},
}


def render_file(text: str, regions: dict[str, Callable[[], list[str]]], where: str) -> str:
    """``text`` with every region in ``regions`` re-rendered; GenerateError when a marker is missing."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        m = MARK.match(line.rstrip("\n"))
        i += 1
        if not m or m["kind"] != "BEGIN":
            continue
        name, indent = m["name"], m["indent"]
        if name not in regions:
            raise GenerateError(f"{where}: region {name!r} is not one {TAG} renders; remove its markers.")
        end = i
        while end < len(lines):
            e = MARK.match(lines[end].rstrip("\n"))
            if e and e["kind"] == "END" and e["name"] == name:
                break
            end += 1
        else:
            raise GenerateError(f"{where}: region {name!r} has a BEGIN marker but no END marker.")
        out.extend(f"{indent}{body}\n" if body else "\n" for body in regions[name]())
        out.append(lines[end])
        seen.add(name)
        i = end + 1
    missing = sorted(set(regions) - seen)
    if missing:
        raise GenerateError(
            f"{where}: no marker for region(s) {', '.join(missing)}; add BEGIN/END {TAG} lines."
        )
    return "".join(out)


def _plan(root: Path) -> list[tuple[Path, str, str]]:
    """(path, current text, generated text) for every target."""
    plan = []
    for rel, regions in TARGETS.items():
        path = root / rel
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise GenerateError(
                f"{rel} cannot be read ({exc.strerror}); run from the repository root."
            ) from None
        plan.append((path, text, render_file(text, regions, rel)))
    return plan


def check(root: Path) -> list[str]:
    """Relative paths of the targets whose generated regions are stale (nothing is written)."""
    return [str(p.relative_to(root)) for p, old, new in _plan(root) if old != new]


def write(root: Path) -> list[str]:
    """Rewrite the stale targets; the relative paths written."""
    changed = []
    for path, old, new in _plan(root):
        if old != new:
            path.write_text(new, encoding="utf-8")
            changed.append(str(path.relative_to(root)))
    return changed


def _repo_root() -> Path:
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "galaxy.yml").is_file():
            return parent
    return Path.cwd()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fabricops.roce.generate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--check", action="store_true", help="exit 1 naming stale files; write nothing")
    parser.add_argument("--root", type=Path, default=None, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root or _repo_root()
    try:
        if args.check:
            stale = check(root)
            if stale:
                print(
                    f"stale generated regions in {', '.join(stale)}; run python -m {TAG} to regenerate.",
                    file=sys.stderr,
                )
                return 1
            print("generated regions are current.")
            return 0
        written = write(root)
    except GenerateError as exc:
        print(exc, file=sys.stderr)
        return 4
    print(f"wrote {', '.join(written)}." if written else "generated regions are current.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
