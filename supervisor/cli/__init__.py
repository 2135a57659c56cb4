"""The ``subagents`` command: ``run``, ``chat``, ``batch``, ``mcp``, ``doctor``, ``diagrams``,
``providers`` and ``reap``, a thin shell over the public API.

:func:`main` returns the exit status (for callers in the same process); :func:`console` is the
``subagents`` executable: ``main``, then a quick exit.
"""

from __future__ import annotations

from supervisor.cli._main import console as console
from supervisor.cli._main import main as main

__all__ = ("console", "main")
