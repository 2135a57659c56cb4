"""Claude Code conversations against the real CLI: the next user message to the same process.

The model is the mock Messages API on 127.0.0.1.  A turn that must be "running" is a
``Hang`` the test waits for at the mock (event-driven: the request has arrived).
"""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from supervisor import ConversationOver, Registry, StopReason, SubagentRequest
from tests.claude_code.conftest import ClaudeHome, claude_provider
from tests.conftest import internals, tagged
from tests.mockmodel import Hang, HttpError, MockModelServer, Text
from tests.mockmodel import Usage as ModelUsage
from tests.support.watch import Watch

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]

INVALID_LINE = "Subagent failure (provider: Claude Code; stage: query-run; category: invalid-result)"


def registry_of(home: ClaudeHome, server: MockModelServer) -> Registry:
    registry = Registry()
    registry.register(claude_provider(home, server))
    return registry


async def until_requests(server: MockModelServer, count: int) -> None:
    """Return once the mock has received ``count`` model requests."""
    await anyio.to_thread.run_sync(lambda: server.wait_for_requests(count, timeout_s=120))


async def test_turns_continue_the_same_cli_session_with_their_own_usage(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    mock_model.script(
        Text("first answer", usage=ModelUsage(input_tokens=100, output_tokens=10, cached_input_tokens=40)),
        HttpError(500, message="upstream exploded"),
        Text("third answer", usage=ModelUsage(input_tokens=200, output_tokens=20, cached_input_tokens=80)),
    )
    request = SubagentRequest(task="turn one", parent_cwd=claude_home.work)
    async with registry_of(claude_home, mock_model).run("claude-code", request, conversation=True) as run:
        first = await run.result()
        pid = internals(run).process.pid  # type: ignore[union-attr]
        failed = await run.send("turn two")  # a failed turn whose CLI lives: the conversation goes on
        assert run.state == "idle"
        third = await run.send("turn three")
        assert internals(run).process.pid == pid  # type: ignore[union-attr]
    assert run.quiescent is True
    assert first.output == "first answer"
    assert (failed.stop_reason, failed.diagnostic) == (StopReason.ERROR, INVALID_LINE)
    assert third.output == "third answer"
    # token counts are the turn's own; Anthropic's cache reads are part of the input count
    assert first.usage is not None
    assert third.usage is not None
    assert (first.usage.input_tokens, first.usage.output_tokens, first.usage.cached_input_tokens) == (
        140,
        10,
        40,
    )
    assert (third.usage.input_tokens, third.usage.output_tokens, third.usage.cached_input_tokens) == (
        280,
        20,
        80,
    )
    # the result's total_cost_usd is the session's running total: each turn gets what it added
    assert first.usage.cost_usd is not None
    assert third.usage.cost_usd is not None
    assert third.usage.cost_usd == pytest.approx(2 * first.usage.cost_usd)
    said = mock_model.model_requests[-1].user_texts()
    assert any("turn one" in text for text in said)
    assert any("turn three" in text for text in said)


async def test_a_cancelled_turn_ends_with_its_result_before_the_next(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    mock_model.script(Text("first answer"), Hang("thinking"), Text("third answer"))
    watch = Watch()
    request = SubagentRequest(task="turn one", parent_cwd=claude_home.work)
    registry = Registry()
    registry.register(
        claude_provider(claude_home, mock_model, dispose_grace_ms=60_000)
    )  # the wind-down's bound
    async with registry.run("claude-code", request, conversation=True, trace=watch) as run:
        await run.result()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.send, "turn two")
            await until_requests(mock_model, 2)
            run.cancel()
        cancelled = await run.result()
        assert (cancelled.stop_reason, cancelled.diagnostic) == (StopReason.ABORTED, None)
        third = await run.send("turn three")
    mock_model.release()
    assert third.output == "third answer"
    assert run.quiescent is True
    events = [(e.event, e.turn) for e in run.audit.entries if e.machine == "lifecycle"]
    # the CLI ended the interrupted turn with its own result message before turn three began
    assert events.index(("result_failed", 2)) < events.index(("turn_sent", 3))


async def test_a_cli_killed_between_turns_ends_the_conversation(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    mock_model.script(Text("first answer"))
    watch = Watch()
    request = SubagentRequest(task="turn one", parent_cwd=claude_home.work)
    registry = registry_of(claude_home, mock_model)
    async with registry.run("claude-code", request, conversation=True, trace=watch) as run:
        await run.result()
        process = internals(run).process
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        await watch.reached("quiescent")
        assert tagged(run.id) == []
        with pytest.raises(ConversationOver) as info:
            await run.send("turn two")
    assert str(info.value) == (
        "subagent conversation is over (provider: Claude Code; turn: 1; reason: child exited; signal: SIGKILL)"
    )
