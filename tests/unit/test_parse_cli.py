"""`fabricops parse`: every tool reads its real captures, and refuses every other tool's output."""

from __future__ import annotations

import json

import pytest
from captures import FIXTURES, read_fixture

from fabricops.cli import main
from fabricops.errors import EXIT_BADINPUT, EXIT_NORUN
from fabricops.parsers import PARSERS


def fixture_dirs(tool: str) -> list[str]:
    """Fixture folders of a tool: tests/fixtures/<tool>/."""
    return [tool] if (FIXTURES / tool).is_dir() else []


def captures(tool: str) -> list[tuple[str, str]]:
    return [
        (d, p.name)
        for d in fixture_dirs(tool)
        for p in sorted((FIXTURES / d).iterdir())
        if p.is_file()
    ]


def family(tool: str) -> str:
    """Switch outputs of one OS are one family: `show running-config` holds the PFC lines too."""
    return tool.split("-")[0] if tool.startswith(("onyx", "nvue")) else tool


ALL = [(tool, d, name) for tool in sorted(PARSERS) for d, name in captures(tool)]


@pytest.mark.parametrize("tool", sorted(PARSERS))
def test_every_tool_has_real_captures(tool):
    assert captures(tool), f"no real captures under tests/fixtures/{tool}/"


@pytest.mark.parametrize(("tool", "folder", "name"), ALL)
def test_parse_reads_capture(tool, folder, name, tmp_path, capsys):
    path = tmp_path / name
    path.write_text(read_fixture(folder, name))
    if "noheader" in name:
        # CSV without its header cannot say which fields it holds: refused, not guessed.
        assert main(["parse", tool, str(path)]) == EXIT_BADINPUT
        assert "include the header" in capsys.readouterr().err
        return
    assert main(["parse", tool, str(path)]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data, f"{tool} printed an empty record for {folder}/{name}"
    assert err == ""


@pytest.mark.parametrize("tool", sorted(PARSERS))
def test_parse_refuses_other_tools_output(tool, tmp_path, capsys):
    """Every capture of an unrelated tool must be refused with exit 5 (invalid input) and one line."""
    # Tools that read the same command's output in another form are related, not "other".
    others = [
        (t, d, n)
        for t, d, n in ALL
        if family(t) != family(tool) and not {tool, t} <= {"ibstat", "ibstatus"}
    ]
    assert others
    for other_tool, folder, name in others:
        path = tmp_path / "input.txt"
        path.write_text(read_fixture(folder, name))
        status = main(["parse", tool, str(path)])
        out, err = capsys.readouterr()
        assert status == EXIT_BADINPUT, f"{tool} accepted {other_tool} capture {folder}/{name}: {out[:200]}"
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"fabricops parse: input is not {tool}"), err
        assert "Traceback" not in err


# An empty `nv config diff` is the real output for "nothing pending", an empty `dkms status` for
# "no module registered" (docs/parsers.md).
EMPTY_IS_OUTPUT = {"nvue-config-diff", "dkms-status"}


@pytest.mark.parametrize("tool", sorted(set(PARSERS) - EMPTY_IS_OUTPUT))
def test_parse_refuses_empty_input(tool, tmp_path, capsys):
    path = tmp_path / "empty.txt"
    path.write_text("")
    assert main(["parse", tool, str(path)]) == EXIT_BADINPUT
    _, err = capsys.readouterr()
    assert err.startswith(f"fabricops parse: input is not {tool}")


def test_parse_unknown_file_is_one_line(capsys):
    assert main(["parse", "ibstat", "/nonexistent/file"]) == EXIT_NORUN
    _, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        "fabricops parse: cannot read /nonexistent/file: No such file or directory"
    ]


def test_empty_nvue_diff_means_nothing_pending(tmp_path, capsys):
    path = tmp_path / "empty.txt"
    path.write_text("")
    assert main(["parse", "nvue-config-diff", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["empty"] is True


def test_parse_reads_stdin_as_utf8_bytes(monkeypatch, capsys):
    """stdin is read as bytes up to the tool's cap and decoded strictly (docs/parsers.md, Bounds)."""
    import io
    import sys

    text = read_fixture("sminfo", sorted(p.name for p in (FIXTURES / "sminfo").iterdir())[0])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))
    assert main(["parse", "sminfo"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["state_name"].startswith("SMINFO_") and err == ""
