"""A real harness as the MCP client: the Codex app-server delegates to ``subagents mcp``.

The mock model asks Codex to call ``run_subagent`` on the ``subagents`` MCP server; the
server runs the built-in example agent under supervision and the answer comes back into
Codex's turn as the tool result, which the mock then echoes as the turn's final answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from supervisor import StopReason
from supervisor.providers.codex import PermissionMode
from tests.conftest import PYTHON
from tests.mockmodel import EchoToolResult, MockModelServer, ToolCall
from tests.support.codex import Transcript, guarded, namespaced_tool_calls, provider, run_once
from tests.support.peers import codex_app_server_launch

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]

EXAMPLE_ANSWER = "Hello! I'm the subagent-supervisor example agent"


async def test_codex_calls_run_subagent_and_gets_the_subagents_answer(
    mock: MockModelServer,
    tmp_path: Path,
    codex_bin: Path,
    transcript: Transcript,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    call = ToolCall("mcp__subagents::run_subagent", {"task": "say hello"})
    mock.script(*guarded("allow", call, EchoToolResult("subagent said: ")))
    with namespaced_tool_calls(monkeypatch), codex_app_server_launch(mock, root=tmp_path) as launch:
        overrides = [
            f"mcp_servers.subagents.command={json.dumps(PYTHON)}",
            "mcp_servers.subagents.args="
            + json.dumps(["-m", "supervisor.cli", "mcp", "--root", str(launch.cwd)]),
            # Required: Codex then waits for the server before the turn instead of giving an
            # optional server a short grace (a loaded machine starts Python slower than that).
            "mcp_servers.subagents.required=true",
            "mcp_servers.subagents.startup_timeout_sec=60",
        ]
        codex = provider(launch, transcript, permission_mode=PermissionMode.APPROVE_FOR_ME, config=overrides)
        result, run = await run_once(codex, launch.cwd, task="delegate a greeting")

    assert result.stop_reason == StopReason.COMPLETED, result
    # Codex hands the model the tool's structured result; the mock echoes it as the answer.
    assert result.output.startswith("subagent said: ")
    assert EXAMPLE_ANSWER in result.output
    assert '"stop_reason":"completed"' in result.output
    assert '"provider":"acp"' in result.output
    assert run.quiescent is True
