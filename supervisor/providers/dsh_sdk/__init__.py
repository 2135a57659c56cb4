"""The ``dsh-sdk`` provider: a DeepSeek Harness (DSH) SDK runtime as a supervised child.

The runtime speaks the DSH SDK JSON-RPC protocol (NDJSON on stdio; the client is
:mod:`supervisor.providers.dsh_sdk._wire`, written here because no Python SDK exists).
One run: spawn ``command`` with ``args``, ``initialize`` (cwd, provider, model,
maxTokens), one ``session/prompt`` on a session id the client mints, the turn folded
until the root session is idle; teardown is the ``shutdown`` request bounded by
``shutdown_timeout_ms``, then the supervisor's whole-tree ladder.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from machines import TransitionSink
from supervisor._config import CommandConfig, _grace
from supervisor._seam import NO_CAPABILITIES, Capabilities, SubagentRequest
from supervisor.process import Containment
from supervisor.providers.dsh_sdk._run import DshSdkRun

MAX_SAFE_INTEGER = 2**53 - 1


class Config(CommandConfig):
    """Keys of a ``dsh-sdk`` provider entry (SPEC section 7)."""

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
        return _grace(value)

    @property
    def shutdown_timeout(self) -> float:
        """``shutdown_timeout_ms`` in seconds."""
        return self.shutdown_timeout_ms / 1000


class Provider:
    """Runs ``config.command`` as a DSH SDK runtime for each request.

    ``tree`` replaces the containment (tests model an unkillable tree with it).
    """

    inherits_parent_context = False

    def __init__(self, config: Config, name: str | None = None, *, tree: Containment | None = None) -> None:
        self.config = config
        self.name = name or config.name or "dsh-sdk"
        self._tree = tree

    @property
    def capabilities(self) -> Capabilities:
        return NO_CAPABILITIES

    def create_run(self, request: SubagentRequest, *, trace: TransitionSink | None = None) -> DshSdkRun:
        return DshSdkRun(
            provider_name=self.name,
            config=self.config,
            request=request,
            trace=trace,
            tree=self._tree,
        )


__all__ = ("Config", "DshSdkRun", "Provider")
