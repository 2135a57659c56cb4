"""The ``acp`` provider: any Agent Client Protocol agent as a supervised child.

The parent side imports the ``acp`` SDK lazily, only once an ACP run needs it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from machines import TransitionSink
from machines.acp import ACP_VOCABULARY, MACHINES
from supervisor.provider import (
    Capabilities,
    ProviderKind,
    Readiness,
    RunContext,
    SessionPlan,
    SubagentRequest,
)
from supervisor.providers.acp._config import Config
from supervisor.providers.acp._run import AcpRun

EXAMPLE_AGENT = Path(__file__).resolve().parent / "_example_agent.py"
CAPABILITIES = Capabilities(conversation=True, resume=True)
"""No start-time option; a run can converse (``session/prompt`` again on its session) and
continue a session in a new process (``session/resume``, else ``session/load``, where the
agent advertises one)."""


def example_agent_config(**keys: object) -> Config:
    """The built-in keyless example agent (stdlib only, so it starts in ~30 ms)."""
    return Config(command=sys.executable, args=["-I", str(EXAMPLE_AGENT)], **keys)  # type: ignore[arg-type]


class Provider:
    """Runs ``config.command`` as an ACP agent for each request."""

    inherits_parent_context = False

    def __init__(self, config: Config, name: str | None = None) -> None:
        self.config = config
        self.name = name or config.name or "acp"

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def create_run(
        self,
        request: SubagentRequest,
        *,
        trace: TransitionSink | None = None,
        session: SessionPlan | None = None,
    ) -> AcpRun:
        return AcpRun(RunContext(self.name, self.config, request, trace, session=session))


def readiness() -> Readiness:
    """``subagents doctor``: the ACP SDK and the example agent are part of the base install."""
    if EXAMPLE_AGENT.is_file() and importlib.util.find_spec("acp") is not None:
        return Readiness(True, f"built-in example agent {EXAMPLE_AGENT}")
    return Readiness(False, "the example agent or the acp SDK is not installed")


KIND = ProviderKind(
    config=Config,
    provider=Provider,
    vocabulary=ACP_VOCABULARY,
    capabilities=CAPABILITIES,
    example=example_agent_config,
    charts=MACHINES,
    ready=readiness,
)
"""Registered under the ``subagent_supervisor.providers`` entry point."""

__all__ = ("KIND", "AcpRun", "Config", "Provider", "example_agent_config")
