"""DSH SDK conversations against the DSH stand-in: the next ``session/prompt`` on the same session.

A prompt's ``@NAME value`` lines set the stand-in's ``FAKE_DSH_<NAME>`` for that prompt
only; ``@GATE <fifo>`` holds a turn open until the test writes the FIFO (the protocol
has no cancel: a cancelled turn runs on in the runtime until it goes idle).
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from supervisor import ConversationOver, StopReason, SubagentResult
from tests.conftest import tagged
from tests.dsh_sdk.test_provider import RECORD, dsh, registry_with, request, requests_of
from tests.support.watch import Watch

pytestmark = pytest.mark.anyio


def line(category: str) -> str:
    return f"Subagent failure (provider: DSH SDK; stage: session-run; category: {category})"


async def test_every_turn_is_a_prompt_on_the_same_session(tmp_path: Path) -> None:
    provider = dsh(tmp_path)
    async with registry_with(provider).run(
        provider.name, request(tmp_path, "turn one"), conversation=True
    ) as run:
        first = await run.result()
        second = await run.send("turn two\n@TEXT the second answer")
        failed = await run.send("turn three\n@REASON error")
        assert run.state == "idle"  # a failed turn whose runtime lives: the conversation goes on
        fourth = await run.send("turn four\n@TEXT the fourth answer")
        assert run.turn == 4
    assert run.quiescent is True
    assert first == SubagentResult(output="fake answer", stop_reason=StopReason.COMPLETED)
    assert second == SubagentResult(output="the second answer", stop_reason=StopReason.COMPLETED)
    assert (failed.stop_reason, failed.diagnostic) == (StopReason.ERROR, line("child-error"))
    assert fourth.output == "the fourth answer"
    prompts = requests_of(tmp_path / RECORD, "session/prompt")
    assert len(prompts) == 4
    assert len({prompt["params"]["sessionId"] for prompt in prompts}) == 1
    assert [prompt["params"]["contentBlocks"][0]["text"].splitlines()[0] for prompt in prompts] == [
        "turn one",
        "turn two",
        "turn three",
        "turn four",
    ]
    assert run.stages_entered == ("initialize", "session-run", "shutdown")
    assert ("turn_sent", "idle", "session-run") in [(e.event, e.source, e.target) for e in run.audit.entries]


async def test_a_refused_prompt_leaves_the_conversation_open(tmp_path: Path) -> None:
    provider = dsh(tmp_path)
    async with registry_with(provider).run(
        provider.name, request(tmp_path, "turn one"), conversation=True
    ) as run:
        await run.result()
        refused = await run.send("turn two\n@PROMPT_ERROR")
        assert (refused.stop_reason, refused.diagnostic) == (StopReason.ERROR, line("protocol"))
        after = await run.send("turn three")
        assert after.output == "fake answer"


async def test_a_runtime_that_exits_mid_turn_ends_the_conversation(tmp_path: Path) -> None:
    provider = dsh(tmp_path)
    async with registry_with(provider).run(
        provider.name, request(tmp_path, "turn one"), conversation=True
    ) as run:
        await run.result()
        failed = await run.send("turn two\n@EXIT_MID_TURN 4")
        assert (failed.stop_reason, failed.diagnostic) == (StopReason.ERROR, line("transport"))
        with pytest.raises(ConversationOver) as info:
            await run.send("turn three")
    assert str(info.value) == (
        "subagent conversation is over (provider: DSH SDK; turn: 2; reason: child exited; exit code: 4)"
    )
    assert run.quiescent is True
    assert tagged(run.id) == []


async def test_a_cancelled_turn_runs_on_until_idle_then_the_next_turn(tmp_path: Path) -> None:
    gate = tmp_path / "gate.fifo"
    os.mkfifo(gate)
    provider = dsh(tmp_path, dispose_grace_ms=60_000)  # the wind-down's bound: never reached here
    watch = Watch()
    async with registry_with(provider).run(
        provider.name, request(tmp_path, "turn one"), conversation=True, trace=watch
    ) as run:
        await run.result()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.send, f"turn two\n@ORDER after\n@GATE {gate}")
            await watch.reached("prompt_spliced", turn=2)  # the runtime is in the turn
            run.cancel()
            cancelled = await run.result()
            assert (cancelled.stop_reason, cancelled.diagnostic) == (StopReason.ABORTED, None)
            assert "fake answer".startswith(cancelled.output)  # what had arrived when it was cancelled
            tg.start_soon(run.send, "turn three\n@TEXT after the gate")  # waits for turn two's idle
            await anyio.to_thread.run_sync(gate.write_text, "go\n")
        assert (await run.result()).output == "after the gate"
    events = [(e.event, e.turn) for e in run.audit.entries if e.machine == "lifecycle"]
    assert events.index(("root_idle", 2)) < events.index(("turn_sent", 3))


async def test_a_cancelled_turn_that_never_ends_ends_the_conversation(tmp_path: Path) -> None:
    provider = dsh(tmp_path, dispose_grace_ms=200)
    watch = Watch()
    async with registry_with(provider).run(
        provider.name, request(tmp_path, "turn one"), conversation=True, trace=watch
    ) as run:
        await run.result()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.send, "turn two\n@HANG_PROMPT partial")
            await watch.reached("prompt_spliced", turn=2)
            run.cancel()
        with pytest.raises(ConversationOver, match=r"reason: cancelled turn did not end\)$"):
            await run.send("turn three")
    assert run.quiescent is True
    assert tagged(run.id) == []


async def test_the_session_id_is_host_side_and_a_dsh_session_is_not_resumable(tmp_path: Path) -> None:
    import uuid

    from supervisor import ConversationEnd, ConversationOver, SessionPlan

    provider = dsh(tmp_path)
    registry = registry_with(provider)
    async with registry.run(provider.name, request(tmp_path, "turn one"), conversation=True) as run:
        result = await run.result()
        session_id = run.agent_session_id
    prompts = requests_of(tmp_path / RECORD, "session/prompt")
    assert session_id == prompts[0]["params"]["sessionId"]
    assert session_id is not None
    assert session_id not in result.output
    assert provider.capabilities.resume is False  # the protocol has no way to continue a session
    plan = SessionPlan(run_id=str(uuid.uuid4()), resume=session_id, turns_before=1)
    with pytest.raises(ConversationOver) as caught:
        async with registry.run(provider.name, request(tmp_path, "x"), conversation=True, session=plan):
            pytest.fail("unreachable")
    assert caught.value.reason is ConversationEnd.NOT_RESUMABLE
    assert (
        str(caught.value)
        == "subagent conversation is over (provider: DSH SDK; turn: 1; reason: not resumable)"
    )
    assert len(requests_of(tmp_path / RECORD, "initialize")) == 1  # nothing spawned
    assert len(requests_of(tmp_path / RECORD, "session/prompt")) == 1  # nothing sent


async def test_a_planned_run_id_is_honoured(tmp_path: Path) -> None:
    import uuid

    from supervisor import SessionPlan

    provider = dsh(tmp_path)
    run_id = str(uuid.uuid4())
    async with registry_with(provider).run(
        provider.name, request(tmp_path, "turn one"), conversation=True, session=SessionPlan(run_id=run_id)
    ) as run:
        await run.result()
        assert run.id == run_id
