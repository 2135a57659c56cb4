"""The ``subagents`` command: ``run``, ``chat``, ``batch``, ``mcp``, ``doctor``, ``diagrams``,
``providers`` and ``reap``, a thin shell over the public API (console script ``subagents``)."""

from __future__ import annotations

from supervisor.cli._main import main as main

__all__ = ("main",)
