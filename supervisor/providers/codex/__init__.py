"""The ``codex`` provider: OpenAI's ``codex app-server`` driven over JSONL JSON-RPC.

Configuration, besides the keys every kind accepts::

    [[provider]]
    kind = "codex"
    permission_mode = "never"   # never | approve-for-me | dangerously-bypass-approvals-and-sandbox
    codex_path = "/opt/codex/bin/codex"   # optional; relative = against the config file's folder
    config = ["model=\\"gpt-5.1-codex\\""]  # extra `-c key=value` overrides for the app-server
    dispose_eof_grace_ms = 1000

The binary is ``codex_path`` when given, else the one in the ``openai-codex-cli-bin``
wheel (the ``codex`` extra) when it is installed; never whatever ``codex`` is on PATH.
It is spawned directly (not through the npm node wrapper, which ignores SIGTERM on
Node < 22.15).

Modes (no mode ever asks a human; requests the app-server sends are answered without
granting authority and reported in the permission line of a failed run):

* ``never``: ``approvalPolicy: never``; the sandbox is whatever the child's Codex
  configuration says;
* ``approve-for-me``: ``approvalPolicy: on-request`` reviewed by Codex's own automatic
  reviewer (``approvalsReviewer: auto_review``), ``sandbox: workspace-write``;
* ``dangerously-bypass-approvals-and-sandbox``: ``approvalPolicy: never``,
  ``sandbox: danger-full-access``.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from machines import TransitionSink
from machines.codex import CODEX_VOCABULARY, MACHINES
from supervisor.provider import (
    Capabilities,
    ConfigurationError,
    Containment,
    ProviderKind,
    Readiness,
    RunContext,
    SessionPlan,
    SubagentRequest,
)
from supervisor.providers.codex._command import app_server_argv
from supervisor.providers.codex._config import Config, PermissionMode
from supervisor.providers.codex._run import CodexRun as CodexRun
from supervisor.providers.codex._wire import RunTap

__all__ = (
    "KIND",
    "WHEEL",
    "CodexRun",
    "Config",
    "PermissionMode",
    "Provider",
    "app_server_argv",
    "resolve_binary",
)

WHEEL = "openai-codex-cli-bin"
_WHEEL_MODULE = "codex_cli_bin"


def resolve_binary(config: Config) -> Path:
    """``codex_path``, else the ``openai-codex-cli-bin`` wheel's binary; never PATH."""
    if config.codex_path is not None:
        return config.codex_path
    try:
        module = importlib.import_module(_WHEEL_MODULE)
        path = Path(module.bundled_codex_path())
    except (ImportError, OSError, AttributeError, TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"no Codex binary: set codex_path, or install the {WHEEL} wheel "
            "(pip install 'subagent-supervisor[codex]')"
        ) from exc
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ConfigurationError(
            f"no Codex binary: the {WHEEL} wheel's binary is not executable; set codex_path instead"
        )
    return path


CAPABILITIES = Capabilities(conversation=True, resume=True)
"""No start-time option; a run can converse (``turn/start`` again on its thread) and
continue a thread kept on disk in a new app-server (``thread/resume``)."""


class Provider:
    """Runs ``codex app-server`` per run.

    ``tap(run_id, direction, frame)`` sees every JSON-RPC frame of every run, decoded
    (debugging, tests); it runs on the reader and must not block.
    """

    inherits_parent_context = False

    def __init__(
        self,
        config: Config,
        name: str | None = None,
        *,
        tap: RunTap | None = None,
        tree: Containment | None = None,
    ) -> None:
        self.config = config
        self.name = name or config.name or "codex"
        self.capabilities: Capabilities = CAPABILITIES
        self.binary = resolve_binary(config)
        self._tap = tap
        self._tree = tree

    def create_run(
        self,
        request: SubagentRequest,
        *,
        trace: TransitionSink | None = None,
        session: SessionPlan | None = None,
    ) -> CodexRun:
        return CodexRun(
            RunContext(self.name, self.config, request, trace, self._tree, session=session),
            binary=self.binary,
            tap=self._tap,
        )

    def __repr__(self) -> str:
        return f"<codex Provider {self.name!r} mode={self.config.permission_mode.value}>"


def readiness() -> Readiness:
    """``subagents doctor``: the ``openai-codex-cli-bin`` wheel's binary, resolved as a run
    without ``codex_path`` resolves it."""
    try:
        module = importlib.import_module(_WHEEL_MODULE)
        path = Path(module.bundled_codex_path())
    except (ImportError, OSError, AttributeError, TypeError, ValueError):
        return Readiness(False, "install the codex extra, or set codex_path")
    if not path.is_file() or not os.access(path, os.X_OK):
        return Readiness(False, f"{path} is not executable; set codex_path")
    return Readiness(True, str(path))


KIND = ProviderKind(
    config=Config,
    provider=Provider,
    vocabulary=CODEX_VOCABULARY,
    capabilities=CAPABILITIES,
    charts=MACHINES,
    ready=readiness,
    gen_ai_provider="openai",
)
"""Registered under the ``subagent_supervisor.providers`` entry point."""
