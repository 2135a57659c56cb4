"""The authors' guide names the authors' surface exactly: every name ``supervisor.provider``
exports is in its table, and every name the table or an import on the authors' pages names is
exported (a name added to ``__all__`` and not to the page, or one the page names and the module
dropped, fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import supervisor.provider

DOCS = Path(__file__).resolve().parent.parent / "docs"
HEADING = "## Everything `supervisor.provider` exports"


def _table() -> set[str]:
    section = (DOCS / "authors.md").read_text(encoding="utf-8").split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [
        line.split("|")[2] for line in section.splitlines() if line.startswith("| ") and "---" not in line
    ]
    # a row's names are its ticked words outside parentheses (the parentheses explain)
    return {name for row in rows[1:] for name in re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", row))}


def test_the_authors_table_is_the_authors_surface() -> None:
    assert sorted(set(supervisor.provider.__all__) - _table()) == [], "exported, not in the table"
    assert sorted(_table() - set(supervisor.provider.__all__)) == [], "in the table, not exported"


def test_every_import_from_the_authors_surface_on_a_page_is_exported() -> None:
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for names in re.findall(r"from supervisor\.provider import (?:\(([^)]*)\)|([\w, ]+)$)", text, re.M):
            imported = {n.strip() for n in "".join(names).replace("\n", ",").split(",")} - {"", "..."}
            assert sorted(imported - set(supervisor.provider.__all__)) == [], page.name
