"""ACP conversations against the built-in example agent: ``session/prompt`` again on one session.

The example agent remembers what a session was asked (``@recall``), so a later turn
proves it reached the same agent session, not a fresh one; ``@usage`` makes it report
token counts in the prompt response and a cumulative cost in ``usage_update``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from supervisor import (
    ConversationOver,
    Registry,
    StopReason,
    SubagentRequest,
    SubagentResult,
    Usage,
)
from supervisor.providers.acp import Config, Provider, example_agent_config
from tests.conftest import internals, tagged
from tests.support.watch import Watch

pytestmark = pytest.mark.anyio

FAIL_LINE = "Subagent failure (provider: ACP; stage: prompt; category: transport)"


def registry_of(config: Config | None = None) -> Registry:
    registry = Registry()
    registry.register(Provider(config or example_agent_config()))
    return registry


def request(tmp_path: Path, task: str) -> SubagentRequest:
    return SubagentRequest(task=task, parent_cwd=tmp_path)


async def test_later_turns_reach_the_same_agent_session(tmp_path: Path) -> None:
    async with registry_of().run("acp", request(tmp_path, "what is 2+2"), conversation=True) as run:
        first = await run.result()
        assert first.output == "Hello! You asked: what is 2+2"
        pid = internals(run).process.pid  # type: ignore[union-attr]
        second = await run.send("and 3+3?")
        assert second == SubagentResult(output="Hello! You asked: and 3+3?", stop_reason=StopReason.COMPLETED)
        recalled = await run.send("@recall")
        assert recalled.output == "Earlier in this session you asked: what is 2+2; and 3+3?"
        assert run.turn == 3
        assert internals(run).process.pid == pid  # type: ignore[union-attr]
        assert run.stages_entered == ("initialize", "new-session", "prompt")
    assert run.quiescent is True
    assert tagged(run.id) == []


async def test_each_turn_carries_its_own_usage(tmp_path: Path) -> None:
    async with registry_of().run(
        "acp", request(tmp_path, "count these four words\n@usage"), conversation=True
    ) as run:
        first = await run.result()
        # 4 words asked; "Hello! You asked: count these four words" is 7 words; 11 tokens at 0.0001
        assert first.usage == Usage(input_tokens=4, output_tokens=7, cost_usd=0.0011)
        second = await run.send("two words\n@usage")
        # the session's cumulative cost is now 0.0011 + 7 tokens: the turn added 0.0007
        assert second.usage == Usage(input_tokens=2, output_tokens=5, cost_usd=0.0007)
        silent = await run.send("no usage this time")
        assert silent.usage is None


async def test_a_failed_turn_whose_child_lives_leaves_the_conversation_open(tmp_path: Path) -> None:
    async with registry_of().run("acp", request(tmp_path, "first"), conversation=True) as run:
        await run.result()
        failed = await run.send("this one fails\n@fail")
        assert failed == SubagentResult(
            output="Hello! You asked: this one fails", stop_reason=StopReason.ERROR, diagnostic=FAIL_LINE
        )
        limited = await run.send("stop early\n@stop max_tokens")
        assert limited.stop_reason == StopReason.MAX_TOKENS
        assert (
            await run.send("@recall")
        ).output == "Earlier in this session you asked: first; this one fails; stop early"
        assert run.state == "idle"


async def test_a_turn_whose_child_exits_ends_the_conversation(tmp_path: Path) -> None:
    async with registry_of().run("acp", request(tmp_path, "first"), conversation=True) as run:
        await run.result()
        failed = await run.send("goodbye\n@exit 3")
        assert failed.stop_reason == StopReason.ERROR
        assert failed.diagnostic == (
            "Subagent failure (provider: ACP; stage: process; category: process-exit; exit code: 3)"
        )
        with pytest.raises(ConversationOver) as info:
            await run.send("still there?")
        assert str(info.value) == (
            "subagent conversation is over (provider: ACP; turn: 2; reason: child exited; exit code: 3)"
        )
    assert run.quiescent is True


async def test_a_cancelled_turn_ends_at_the_agent_and_the_next_turn_runs(tmp_path: Path) -> None:
    watch = Watch()
    registry = registry_of(example_agent_config(dispose_grace_ms=60_000))  # the wind-down's bound
    async with registry.run("acp", request(tmp_path, "first"), conversation=True, trace=watch) as run:
        await run.result()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.send, "a long answer with many words in it\n@slow 60000")
            await watch.reached("turn_sent", turn=2)
            await run.output_arrived()
            run.cancel()
        cancelled = await run.result()
        assert cancelled.stop_reason == StopReason.ABORTED
        assert cancelled.diagnostic is None
        assert cancelled.output.startswith("Hello!")
        # the agent answered the cancelled prompt ``cancelled`` (session/cancel went out)
        # before the next prompt was sent: one prompt at a time on the session
        third = await run.send("@recall")
        assert third.output == "Earlier in this session you asked: first; a long answer with many words in it"
    events = [(e.event, e.turn) for e in run.audit.entries if e.machine == "lifecycle"]
    assert ("stop_reason_received", 2) in events
    assert events.index(("stop_reason_received", 2)) < events.index(("turn_sent", 3))


async def test_one_shot_results_carry_no_usage_unless_reported(tmp_path: Path) -> None:
    async with registry_of().run("acp", request(tmp_path, "say hello")) as run:
        result = await run.result()
    assert result.usage is None
    async with registry_of().run("acp", request(tmp_path, "say hello\n@usage")) as run:
        result = await run.result()
    assert result.usage is not None
    assert result.usage.input_tokens == 2
