"""Codex conversations against the real app-server: ``turn/start`` again on the same thread.

Every frame is validated against the pinned binary's schema (the ``transcript``
fixture); the model is the mock Responses API on 127.0.0.1.
"""

from __future__ import annotations

import signal

import anyio
import pytest

from supervisor import ConversationOver, Registry, StopReason, SubagentResult, Usage
from tests.conftest import internals, tagged
from tests.mockmodel import Hang, HttpError, MockModelServer, Text
from tests.mockmodel import Usage as ModelUsage
from tests.support.codex import Transcript, kill, provider, request
from tests.support.peers import PeerLaunch
from tests.support.watch import Watch

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]


def registry_of(launch: PeerLaunch, transcript: Transcript) -> Registry:
    registry = Registry()
    registry.register(provider(launch, transcript))
    return registry


async def test_turns_continue_the_same_thread_with_their_own_usage(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    mock.script(
        Text("first answer", usage=ModelUsage(input_tokens=100, output_tokens=10, cached_input_tokens=40)),
        Text("second answer", usage=ModelUsage(input_tokens=200, output_tokens=20, cached_input_tokens=80)),
        Text("third answer"),
    )
    async with registry_of(launch, transcript).run(
        "codex", request(launch.cwd, "turn one"), conversation=True
    ) as run:
        first = await run.result()
        second = await run.send("turn two")
        third = await run.send("turn three")
        assert run.turn == 3
    assert run.quiescent is True
    assert first == SubagentResult(
        output="first answer",
        stop_reason=StopReason.COMPLETED,
        usage=Usage(input_tokens=100, output_tokens=10, cached_input_tokens=40),
    )
    # the thread's counts are cumulative: a turn's usage is what it added
    assert second == SubagentResult(
        output="second answer",
        stop_reason=StopReason.COMPLETED,
        usage=Usage(input_tokens=200, output_tokens=20, cached_input_tokens=80),
    )
    assert third.output == "third answer"
    (started,) = transcript.results("thread/start")
    thread = started["thread"]["id"]
    assert [frame["params"]["threadId"] for frame in transcript.sent("turn/start")] == [thread] * 3
    assert [frame["params"]["input"][0]["text"] for frame in transcript.sent("turn/start")] == [
        "turn one",
        "turn two",
        "turn three",
    ]
    # the model saw the earlier turns: the app-server kept the thread's history
    said = mock.model_requests[2].user_texts()
    assert "turn one" in said
    assert "turn two" in said
    assert run.stages_entered == ("initialize", "thread-start", "turn-start", "turn", "teardown")
    turns = [(e.event, e.turn) for e in run.audit.entries if e.machine == "lifecycle"]
    assert ("turn_sent", 2) in turns
    assert ("turn_completed", 3) in turns


async def test_a_failed_turn_leaves_the_conversation_open(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    mock.script(Text("first answer"), HttpError(500), Text("after the failure"))
    async with registry_of(launch, transcript).run(
        "codex", request(launch.cwd, "turn one"), conversation=True
    ) as run:
        await run.result()
        failed = await run.send("turn two")
        assert failed.stop_reason == StopReason.ERROR
        assert failed.diagnostic == "Subagent failure (provider: Codex; stage: turn; category: service)"
        assert run.state == "idle"
        after = await run.send("turn three")
        assert after.output == "after the failure"
    assert run.quiescent is True


async def test_a_cancelled_turn_is_interrupted_before_the_next_starts(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    mock.script(Text("first answer"), Hang("thinking"), Text("third answer"))
    watch = Watch()
    registry = Registry()
    registry.register(provider(launch, transcript, dispose_grace_ms=60_000))  # the wind-down's bound
    async with registry.run("codex", request(launch.cwd, "turn one"), conversation=True, trace=watch) as run:
        await run.result()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.send, "turn two")
            await watch.reached("turn_sent", turn=2)
            await run.output_arrived()
            run.cancel()
        assert await run.result() == SubagentResult(output="thinking", stop_reason=StopReason.ABORTED)
        third = await run.send("turn three")
        assert third.output == "third answer"
    mock.release()
    interrupts = transcript.sent("turn/interrupt")
    second_turn = transcript.results("turn/start")[1]["turn"]["id"]
    assert [frame["params"]["turnId"] for frame in interrupts] == [second_turn]
    completed = transcript.received("turn/completed")
    assert [frame["params"]["turn"]["status"] for frame in completed] == [
        "completed",
        "interrupted",
        "completed",
    ]
    # turn three began only once the app-server had ended turn two
    order = [(direction, frame.get("method")) for direction, frame in transcript.frames]
    assert (
        order.index(("recv", "turn/completed"), order.index(("send", "turn/interrupt")))
        < [i for i, step in enumerate(order) if step == ("send", "turn/start")][2]
    )


async def test_an_app_server_killed_between_turns_ends_the_conversation(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    mock.script(Text("first answer"))
    watch = Watch()
    registry = registry_of(launch, transcript)
    async with registry.run("codex", request(launch.cwd, "turn one"), conversation=True, trace=watch) as run:
        await run.result()
        child = internals(run).process
        assert child is not None
        kill(child.pid, signal.SIGKILL)
        await watch.reached("quiescent")
        assert tagged(run.id) == []
        with pytest.raises(ConversationOver) as info:
            await run.send("turn two")
        assert str(info.value) == (
            "subagent conversation is over (provider: Codex; turn: 1; reason: child exited; signal: SIGKILL)"
        )
    assert len(transcript.sent("turn/start")) == 1
