"""The keys of a ``claude-code`` provider entry (pydantic at the boundary)."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from supervisor.provider import ProviderConfig, resolve_executable


class PermissionMode(enum.StrEnum):
    """The CLI's ``--permission-mode``; the four a supervised, unattended run may use."""

    DONT_ASK = "dontAsk"
    ACCEPT_EDITS = "acceptEdits"
    PLAN = "plan"
    BYPASS_PERMISSIONS = "bypassPermissions"


class Config(ProviderConfig):
    """Keys of a ``claude-code`` provider entry.

    ``cli_path`` overrides the CLI bundled in the claude-agent-sdk wheel; a relative
    path is resolved against the base directory in the validation context (the CLI
    passes the config file's folder), and the file must exist and be executable.  The
    supervisor never looks the CLI up on ``PATH``.
    """

    permission_mode: PermissionMode = PermissionMode.DONT_ASK
    cli_path: Path | None = None
    max_turns: int | None = Field(default=None, gt=0, strict=True)
    dispose_eof_grace_ms: float = 1000

    @field_validator("cli_path", mode="before")
    @classmethod
    def _resolve_cli_path(cls, value: Any, info: ValidationInfo) -> Any:
        return resolve_executable(value, info, "the Claude Code CLI")
