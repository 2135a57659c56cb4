"""Progress from the real Claude Code CLI: built-in tool names (any other is ``other``),
tool results, the todos' statuses, the answer's bytes and the tokens so far."""

from __future__ import annotations

import pytest

from supervisor import Registry, SubagentRequest, progress_line
from tests.claude_code.conftest import ClaudeHome, claude_provider
from tests.mockmodel import MockModelServer, Shell, Text, ToolCall

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]

MARK = "SECRET-MARKER"


async def test_tools_todos_answer_and_tokens_are_counted(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    claude_home.allow("Bash")
    todos = {
        "todos": [
            {"content": f"{MARK} one", "status": "completed", "activeForm": MARK},
            {"content": f"{MARK} two", "status": "in_progress", "activeForm": MARK},
        ]
    }
    mock_model.script(
        Shell(f"echo {MARK}", text=f"Let me check {MARK}."),
        ToolCall(f"mcp__{MARK}__tool", {"arg": MARK}),
        ToolCall("TodoWrite", todos),
        Text("All done."),
    )
    provider = claude_provider(claude_home, mock_model)
    registry = Registry()
    registry.register(provider)
    request = SubagentRequest(task=f"do it {MARK}", parent_cwd=claude_home.work)
    async with registry.run(provider.name, request) as run:
        result = await run.result()
        final = run.progress
    assert final.tool_calls == {"Bash": 1, "other": 1, "TodoWrite": 1}
    assert final.tool_call_status.total == 3
    assert final.tool_call_status.get("completed", 0) >= 1  # Bash ran; the unknown tool failed
    assert final.tool_call_status.get("failed", 0) >= 1
    assert final.plan == {"completed": 1, "in_progress": 1}
    assert final.answer_bytes == len(f"Let me check {MARK}.".encode()) + len(b"All done.")
    assert final.usage == result.usage
    line = progress_line(final)
    assert line.startswith("query-run · turn 1 · ")
    assert "3 tool calls (Bash 1, TodoWrite 1, other 1" in line
    assert MARK not in line
    assert MARK not in repr(final)
