"""The ``claude-code`` provider: the real Claude Code CLI, driven through claude-agent-sdk.

The SDK (the ``claude-code`` extra) is imported only when a provider is constructed; it
bundles the CLI, and ``cli_path`` overrides it (the CLI is never looked up on ``PATH``).
The supervisor owns the CLI process: the SDK reaches it only through
:class:`~supervisor.providers.claude_code._transport.SupervisedTransport`, so no CLI ever
starts outside the supervisor, and the SDK's own close wait is never on the way out.

Unattended by construction: no session persistence; ``permission_mode`` (``dontAsk``
by default); a ``can_use_tool`` callback that denies and records the decision (not in
``bypassPermissions``); MCP elicitations declined; blocking dialogs cancelled;
``AskUserQuestion`` (and ``ExitPlanMode`` in ``plan`` mode) disallowed; optional
``max_turns``.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from machines import TransitionSink
from machines.claude_code import CLAUDE_CODE_VOCABULARY, MACHINES
from supervisor.provider import (
    Capabilities,
    ConfigurationError,
    ProviderKind,
    Readiness,
    Run,
    RunContext,
    SessionPlan,
    SubagentRequest,
)
from supervisor.providers.claude_code._command import bundled_cli
from supervisor.providers.claude_code._config import Config, PermissionMode

log = logging.getLogger("supervisor")

PINNED_SDK_VERSION = "0.2.189"
MISSING_SDK = (
    "the claude-code provider needs claude-agent-sdk: install the claude-code extra "
    "(pip install 'subagent-supervisor[claude-code]')"
)
NO_BUNDLED_CLI = (
    "the installed claude-agent-sdk bundles no Claude Code CLI for this platform: "
    "set cli_path to a Claude Code executable"
)


CAPABILITIES = Capabilities(conversation=True, resume=True)
"""No start-time option; a run can converse (the next user message to the same CLI) and
continue a kept session in a new CLI (``--resume <session id>``)."""


class Provider:
    """Runs the Claude Code CLI for each request (``Provider(config, name=None)``)."""

    inherits_parent_context = False

    def __init__(self, config: Config, name: str | None = None) -> None:
        try:
            import claude_agent_sdk
        except ImportError as exc:
            raise ConfigurationError(MISSING_SDK) from exc
        sdk_version = str(getattr(claude_agent_sdk, "__version__", "unknown"))
        if sdk_version != PINNED_SDK_VERSION:
            log.warning(
                "claude-agent-sdk %s is installed; the claude-code provider is tested with %s",
                sdk_version,
                PINNED_SDK_VERSION,
            )
        cli = config.cli_path or bundled_cli(Path(claude_agent_sdk.__file__).resolve().parent)
        if cli is None:
            raise ConfigurationError(NO_BUNDLED_CLI)
        self.config = config
        self.name = name or config.name or "claude-code"
        self.cli = cli
        self.sdk_version = sdk_version

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def create_run(
        self,
        request: SubagentRequest,
        *,
        trace: TransitionSink | None = None,
        session: SessionPlan | None = None,
    ) -> Run:
        from supervisor.providers.claude_code._run import ClaudeCodeRun

        context = RunContext(self.name, self.config, request, trace, session=session)
        return ClaudeCodeRun(context, cli=self.cli, sdk_version=self.sdk_version)


def readiness() -> Readiness:
    """``subagents doctor``: is claude-agent-sdk (which bundles the CLI) installed?"""
    if importlib.util.find_spec("claude_agent_sdk") is None:
        return Readiness(False, "install the claude-code extra")
    return Readiness(True, f"claude-agent-sdk {_installed_version('claude-agent-sdk') or 'unknown version'}")


def _installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None (imported here: ``doctor`` only)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


KIND = ProviderKind(
    config=Config,
    provider=Provider,
    vocabulary=CLAUDE_CODE_VOCABULARY,
    capabilities=CAPABILITIES,
    charts=MACHINES,
    ready=readiness,
    gen_ai_provider="anthropic",
)
"""Registered under the ``subagent_supervisor.providers`` entry point."""

__all__ = ("KIND", "MISSING_SDK", "Config", "PermissionMode", "Provider")
