"""MkDocs hooks for this repository's documentation site.

The nav in ``mkdocs.yml`` names every page the site is meant to have, some of them written on
other lines of work that land later: an entry whose page is not under ``docs/`` yet is dropped
here, so the strict build neither fails on it nor shows a dead link.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _page(docs: Path, name: str) -> bool:
    return (docs / name).is_file()


def _present(items: list[Any], docs: Path) -> list[Any]:
    kept: list[Any] = []
    for item in items:
        if isinstance(item, dict):
            [(title, value)] = item.items()
            if isinstance(value, list):
                children = _present(value, docs)
                if children:
                    kept.append({title: children})
            elif isinstance(value, str) and (value.startswith(("http://", "https://")) or _page(docs, value)):
                kept.append(item)
        elif isinstance(item, str) and _page(docs, item):
            kept.append(item)
    return kept


def on_config(config: Any, **_: Any) -> Any:
    """Drop nav entries whose page does not exist (yet)."""
    if config.nav:
        config.nav = _present(config.nav, Path(config.docs_dir))
    return config
