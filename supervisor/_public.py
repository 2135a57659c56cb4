"""Public names report their public module.

A name defined in a private module (``supervisor._seam.StopReason``) and exported from a
public one (``supervisor``) reports the public one in ``__module__``, so ``repr``, ``help``,
tracebacks and pickles name what a user imports (trio and anyio do the same).  Each
defining module calls :func:`home` once for its public names, so the fact holds however
the name was reached; ``tests/test_public_api.py`` pins it for every exported name.
"""

from __future__ import annotations

from typing import Any


def home(module: str, *objects: Any) -> None:
    """Make each of ``objects`` (classes, functions) report ``module`` as its ``__module__``."""
    for obj in objects:
        obj.__module__ = module
