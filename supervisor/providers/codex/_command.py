"""How the app-server is started: its argv and the ``thread/start`` permissions of a mode."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from supervisor.providers.codex._config import PermissionMode

__all__ = ["APP_SERVER_ARGS", "app_server_argv", "thread_permissions"]

APP_SERVER_ARGS: Final = (
    "app-server",
    "-c",
    "features.unbounded_connection_retries=false",
    "-c",
    "features.shell_snapshot=false",
)
"""Without the first, a refused model connection retries forever; the second keeps a
login-shell snapshot (which can stall ~10 s) from running at start."""


def thread_permissions(mode: PermissionMode) -> dict[str, str]:
    """The ``thread/start`` fields for a mode (``never`` keeps the child's sandbox setting)."""
    if mode is PermissionMode.APPROVE_FOR_ME:
        return {
            "approvalPolicy": "on-request",
            "approvalsReviewer": "auto_review",
            "sandbox": "workspace-write",
        }
    if mode is PermissionMode.BYPASS:
        return {"approvalPolicy": "never", "sandbox": "danger-full-access"}
    return {"approvalPolicy": "never"}


def app_server_argv(binary: Path, overrides: Sequence[str]) -> list[str]:
    """The native binary, then ``app-server``; the configured ``-c`` overrides come first so
    that the two fixed ones (last wins) can never be undone by configuration."""
    argv = [str(binary), APP_SERVER_ARGS[0]]
    for override in overrides:
        argv += ["-c", override]
    argv += APP_SERVER_ARGS[1:]
    return argv
