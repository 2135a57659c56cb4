"""The keys of a ``dsh-sdk`` provider entry (pydantic at the boundary)."""

from __future__ import annotations

from pydantic import Field, field_validator

from supervisor.provider import CommandConfig, check_timer_ms

MAX_SAFE_INTEGER = 2**53 - 1


class Config(CommandConfig):
    """Keys of a ``dsh-sdk`` provider entry."""

    provider: str = "deepseek-official"
    model: str = "deepseek-v4-flash"
    max_tokens: int | None = Field(default=None, strict=True)
    shutdown_timeout_ms: float = 1000

    @field_validator("max_tokens")
    @classmethod
    def _positive_safe_integer(cls, value: int | None) -> int | None:
        if value is not None and not 0 < value <= MAX_SAFE_INTEGER:
            raise ValueError("must be a positive safe integer")
        return value

    @field_validator("shutdown_timeout_ms")
    @classmethod
    def _positive_timeout(cls, value: float) -> float:
        return check_timer_ms(value)

    @property
    def shutdown_timeout(self) -> float:
        """``shutdown_timeout_ms`` in seconds."""
        return self.shutdown_timeout_ms / 1000
