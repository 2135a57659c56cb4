"""The keys of a ``codex`` provider entry (pydantic at the boundary)."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from supervisor.provider import ProviderConfig, resolve_executable


class PermissionMode(enum.StrEnum):
    """How the child's approvals are configured.  No mode ever asks a human."""

    NEVER = "never"
    APPROVE_FOR_ME = "approve-for-me"
    BYPASS = "dangerously-bypass-approvals-and-sandbox"


class Config(ProviderConfig):
    """The keys of a ``codex`` entry."""

    permission_mode: PermissionMode = PermissionMode.NEVER
    codex_path: Path | None = None
    config: list[str] = Field(default_factory=list)
    dispose_eof_grace_ms: float = 1000

    @field_validator("codex_path", mode="before")
    @classmethod
    def _resolve_codex_path(cls, value: Any, info: ValidationInfo) -> Any:
        return resolve_executable(value, info, "the codex binary")

    @field_validator("config")
    @classmethod
    def _overrides(cls, value: list[str]) -> list[str]:
        for entry in value:
            key, sep, _ = entry.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"each override must be KEY=VALUE, got {entry!r}")
        return value
