"""MkDocs hooks for this repository's documentation site.

The nav in ``mkdocs.yml`` names every page the site is meant to have, some of them written on
other lines of work that land later: an entry whose page is not under ``docs/`` yet is dropped
here, so the strict build neither fails on it nor shows a dead link.

The docstrings the API reference renders use Sphinx roles (``:class:`~supervisor.Run```), which
mkdocstrings shows as they are written: each is shown here as the name it refers to, and a path
through a private module (``supervisor._errors.X``) as the bare name, which is what a reader imports.
"""

from __future__ import annotations

import re
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


_ROLE = re.compile(r":(?:class|func|meth|data|attr|mod|exc|obj):<code>(~?)([^<]+)</code>")


def _name(match: re.Match[str]) -> str:
    target = match[2]
    short = match[1] == "~" or any(part.startswith("_") for part in target.split(".")[:-1])
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


_TITLE = re.compile(r'title="([^"]*)"')
_PRIVATE_PATH = re.compile(r"\b[A-Za-z_]\w*(?:\.\w+)*\._\w+(?:\.\w+)*")


def _title(match: re.Match[str]) -> str:
    """A link's hover title without a private module's path: ``X (supervisor._errors.X)`` is ``X``."""
    title = _PRIVATE_PATH.sub(lambda path: path[0].rsplit(".", 1)[-1], match[1])
    title = re.sub(r"^(\w+) \(\1\)$", r"\1", title)
    return f'title="{title}"'


def on_page_content(html: str, **_: Any) -> str:
    """Show a docstring's Sphinx role as the name it refers to (see the module's docstring)."""
    return _ROLE.sub(_name, html)


def on_post_page(output: str, **_: Any) -> str:
    """A hover title without a private module's path, once cross-references are resolved."""
    return _TITLE.sub(_title, output)
