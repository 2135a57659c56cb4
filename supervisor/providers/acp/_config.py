"""The keys of an ``acp`` provider entry (pydantic at the boundary)."""

from __future__ import annotations

from typing import Literal

from supervisor.provider import CommandConfig


class Config(CommandConfig):
    """Keys of an ``acp`` provider entry."""

    permission: Literal["reject", "allow"] = "reject"
    authenticate: str | None = None
