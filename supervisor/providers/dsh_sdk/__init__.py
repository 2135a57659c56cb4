"""The ``dsh-sdk`` provider: a DeepSeek Harness (DSH) SDK runtime as a supervised child.

The runtime speaks the DSH SDK JSON-RPC protocol (NDJSON on stdio; the client is
:mod:`supervisor.providers.dsh_sdk._client`, written here because no Python SDK exists).
One run: spawn ``command`` with ``args``, ``initialize`` (cwd, provider, model,
maxTokens), one ``session/prompt`` on a session id the client mints, the turn folded
until the root session is idle; teardown is the ``shutdown`` request bounded by
``shutdown_timeout_ms``, then the supervisor's whole-tree ladder.
"""

from __future__ import annotations

from machines import TransitionSink
from machines.dsh_sdk import DSH_SDK_VOCABULARY, MACHINES
from supervisor.provider import (
    Capabilities,
    Containment,
    ProviderKind,
    Readiness,
    RunContext,
    SessionPlan,
    SubagentRequest,
)
from supervisor.providers.dsh_sdk._config import MAX_SAFE_INTEGER, Config
from supervisor.providers.dsh_sdk._run import DshSdkRun

CAPABILITIES = Capabilities(conversation=True)
"""No start-time option; a run can converse (the next prompt on its session)."""


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
        return CAPABILITIES

    def create_run(
        self,
        request: SubagentRequest,
        *,
        trace: TransitionSink | None = None,
        session: SessionPlan | None = None,
    ) -> DshSdkRun:
        """A run; a session plan's ``run_id`` is honoured (``resume`` never reaches this kind:
        it cannot resume)."""
        return DshSdkRun(RunContext(self.name, self.config, request, trace, self._tree, session=session))


def readiness() -> Readiness:
    """``subagents doctor``: the client is part of the base install; the runtime is configured."""
    return Readiness(True, "base install; the runtime is the configured command")


KIND = ProviderKind(
    config=Config,
    provider=Provider,
    vocabulary=DSH_SDK_VOCABULARY,
    capabilities=CAPABILITIES,
    charts=MACHINES,
    ready=readiness,
)
"""Registered under the ``subagent_supervisor.providers`` entry point."""

__all__ = ("KIND", "MAX_SAFE_INTEGER", "Config", "DshSdkRun", "Provider")
