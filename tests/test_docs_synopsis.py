"""Every option a command takes is in the synopsis its page shows (a new user reads the page, not
``--help``): an option added to the parser and not to the page fails here."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from supervisor.cli._main import _parser

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGE = {"batch": "batch.md", "mcp": "mcp-server.md"}  # every other command: cli.md


def _commands() -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _synopsis(page: str) -> str:
    """The page's first fenced block: its synopsis."""
    found = re.search(r"^```[a-z]*\n(.*?)^```$", (DOCS / page).read_text(encoding="utf-8"), re.S | re.M)
    assert found is not None, page
    return found.group(1)


@pytest.mark.parametrize("command", sorted(_commands()))
def test_the_synopsis_shows_every_option_of_the_command(command: str) -> None:
    synopsis = _synopsis(PAGE.get(command, "cli.md"))
    lines = [line for line in synopsis.splitlines() if line.startswith(f"subagents {command}")]
    assert lines, f"the synopsis has no `subagents {command}` line"
    start = synopsis.index(lines[0])
    nxt = re.search(r"^subagents ", synopsis[start + 1 :], re.M)
    shown = synopsis[start : start + 1 + nxt.start()] if nxt else synopsis[start:]
    if "[the options of run]" in shown:
        shown += "\n" + _synopsis("cli.md").split("subagents chat", 1)[0]
    options = {
        option
        for action in _commands()[command]._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }
    assert sorted(o for o in options if not re.search(rf"(\[|\| ){re.escape(o)}\b", shown)) == []
