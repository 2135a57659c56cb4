"""Claude Code bounds: the start deadline, and unanswered control requests."""

from __future__ import annotations

import pytest

from supervisor import Registry, StartFailed, SubagentRequest
from tests.claude_code.conftest import FakeCli

pytestmark = pytest.mark.anyio


async def test_a_hung_initialize_overruns_the_start_deadline(fake_cli: FakeCli) -> None:
    registry = Registry()
    registry.register(fake_cli.provider({"answer_initialize": False}, start_timeout_ms=500))
    request = SubagentRequest(task="the task", parent_cwd=fake_cli.work)
    with pytest.raises(StartFailed) as info:
        async with registry.run("claude-code", request):
            pytest.fail("a start that never finished was published")
    assert (
        str(info.value) == "Subagent failure (provider: Claude Code; stage: query-start; category: unknown)"
    )
    assert info.value.quiescent is True


async def test_a_control_request_flood_fails_the_stream(fake_cli: FakeCli) -> None:
    """A CLI that floods control requests without reading the answers cannot grow the parent."""
    ask = {"subtype": "can_use_tool", "tool_name": "Write", "input": {"file_path": "/x"}, "tool_use_id": "t1"}
    script = {"steps": [{"flood": {"count": 100_000, "request": ask}}]}
    registry = Registry()
    registry.register(fake_cli.provider(script, env={"FAKE_CLAUDE_IGNORE_TERM": ""}))
    request = SubagentRequest(task="the task", parent_cwd=fake_cli.work)
    async with registry.run("claude-code", request) as run:
        result = await run.result()
    assert result.diagnostic == (
        "Subagent failure (provider: Claude Code; stage: query-run; category: unknown)\n"
        "Claude Code unattended decision (mode: dontAsk; request: tool permission; decision: denied)"
    )
    assert run.quiescent is True
