"""A real harness as the MCP client: the Codex app-server delegates to ``subagents mcp``.

The mock model asks Codex to call ``run_subagent`` on the ``subagents`` MCP server; the
server runs the built-in example agent under supervision and the answer comes back into
Codex's turn as the tool result, which the mock then echoes as the turn's final answer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from supervisor import StopReason
from supervisor.providers.codex import PermissionMode
from tests.conftest import PYTHON
from tests.mockmodel import EchoToolResult, MockModelServer, ToolCall
from tests.mockmodel.turns import RecordedRequest, TurnFactory
from tests.support.codex import Transcript, guarded, is_guardian, namespaced_tool_calls, provider, run_once
from tests.support.peers import codex_app_server_launch

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]

EXAMPLE_ANSWER = "Hello! I'm the subagent-supervisor example agent"


def _server_overrides(root: Path) -> list[str]:
    return [
        f"mcp_servers.subagents.command={json.dumps(PYTHON)}",
        "mcp_servers.subagents.args=" + json.dumps(["-m", "supervisor.cli", "mcp", "--root", str(root)]),
        # Required: Codex then waits for the server before the turn instead of giving an
        # optional server a short grace (a loaded machine starts Python slower than that).
        "mcp_servers.subagents.required=true",
        "mcp_servers.subagents.startup_timeout_sec=60",
    ]


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
        overrides = _server_overrides(launch.cwd)
        codex = provider(launch, transcript, permission_mode=PermissionMode.APPROVE_FOR_ME, config=overrides)
        result, run = await run_once(codex, launch.cwd, task="delegate a greeting")

    assert result.stop_reason == StopReason.COMPLETED, result
    # Codex hands its model a tool's structuredContent when there is one; the model reads the
    # subagent's answer text (the mock echoes what the model was given as the answer).
    assert result.output.startswith("subagent said: ")
    assert f"Output:{EXAMPLE_ANSWER}" in result.output  # Codex's own wrapping, then the answer
    assert "stop_reason" not in result.output
    assert "{" not in result.output
    assert run.quiescent is True


def _with_run_id(name: str, **arguments: object) -> TurnFactory:
    """A call of ``name`` on the conversation whose run id the latest tool result names (its
    fixed last line: all a model that reads text alone has to go on)."""

    def turn(request: RecordedRequest) -> ToolCall:
        (run_id,) = set(re.findall(r"\(run_id: ([0-9a-f-]{36})\)", request.tool_results()[-1]))
        return ToolCall(f"mcp__subagents::{name}", {"run_id": run_id, **arguments})

    return turn


async def test_codex_holds_a_conversation_with_a_kept_subagent(
    mock: MockModelServer,
    tmp_path: Path,
    codex_bin: Path,
    transcript: Transcript,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """run_subagent with keep_alive, send_subagent (the subagent remembers turn 1), close_subagent."""
    mock.script(
        *guarded(
            "allow",
            ToolCall("mcp__subagents::run_subagent", {"task": "what is 2+2?", "keep_alive": True}),
            _with_run_id("send_subagent", task="@recall"),
            _with_run_id("close_subagent"),
            EchoToolResult("subagent closed: "),
        )
    )
    with namespaced_tool_calls(monkeypatch), codex_app_server_launch(mock, root=tmp_path) as launch:
        codex = provider(
            launch,
            transcript,
            permission_mode=PermissionMode.APPROVE_FOR_ME,
            config=_server_overrides(launch.cwd),
        )
        result, run = await run_once(codex, launch.cwd, task="hold a conversation")

    assert result.stop_reason == StopReason.COMPLETED, result
    assert result.output.startswith("subagent closed: ")
    assert "subagent conversation is over (provider: ACP; turn: 2; reason: closed)" in result.output
    last = [r for r in mock.model_requests if not is_guardian(r)][-1]
    first, recalled, _closed = last.tool_results()
    assert "Output:Hello! You asked: what is 2+2?\n\nThis subagent conversation stays open" in first
    assert "Output:Earlier in this session you asked: what is 2+2?\n\n" in recalled
    assert run.quiescent is True
