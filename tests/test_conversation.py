"""Conversations in the base run (one turn at a time, the child kept between turns), over the
scripted provider's real child.

The line agent answers every later line as the next turn (``do:wait`` waits for a
``cancel`` line, ``do:exit:N`` exits mid-turn, ``do:hang`` never ends the turn), so
each rule of the turn loop is driven over real stdio: the turn number, the chart's
``settled -> idle -> prompt`` loop in the audit, one turn at a time, the cancelled turn
that winds down before the next, the child that dies during or between turns, the idle
timeout, the abort signal, dispose, and nothing left running afterwards.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from machines import IDLE
from supervisor import (
    AbortSignal,
    Capabilities,
    ConversationEnd,
    ConversationOver,
    InvalidRequest,
    Registry,
    StopReason,
    SubagentRequest,
    SubagentResult,
    TurnInProgress,
    UnsupportedCapability,
)
from tests.conftest import internals, tagged
from tests.support.scripted import ScriptedProvider, scripted
from tests.support.watch import Watch

pytestmark = pytest.mark.anyio


def request(tmp_path: Path, task: str = "first") -> SubagentRequest:
    return SubagentRequest(task=task, parent_cwd=tmp_path)


def registry_of(provider: ScriptedProvider) -> Registry:
    registry = Registry()
    registry.register(provider)
    return registry


def answer(text: str) -> SubagentResult:
    return SubagentResult(output=text, stop_reason=StopReason.COMPLETED)


# -- the turn loop ------------------------------------------------------------------------


async def test_turns_run_on_the_same_child_and_the_audit_carries_the_turn(tmp_path: Path) -> None:
    provider = scripted()
    async with registry_of(provider).run("scripted", request(tmp_path), conversation=True) as run:
        assert run.conversation is True
        assert await run.result() == answer("first")
        assert run.turn == 1
        pid = internals(run).process.pid  # type: ignore[union-attr]
        assert run.state == IDLE
        second = await run.send("second")
        assert second == answer("second")
        assert run.turn == 2
        assert await run.result() == second  # the latest turn's result
        assert await run.send("third") == answer("third")
        assert internals(run).process.pid == pid  # type: ignore[union-attr]
        assert run.state == IDLE
        assert run.stage == "prompt"
    assert run.quiescent is True
    assert run.state == "quiescent"
    assert tagged(run.id) == []
    loop = [(e.event, e.source, e.target, e.turn) for e in run.audit.entries if e.machine == "lifecycle"]
    assert loop == [
        ("hello_received", "initialize", "prompt", 1),
        ("answer_received", "prompt", "settled", 1),
        ("turn_ended", "settled", "idle", 1),
        ("turn_sent", "idle", "prompt", 2),
        ("answer_received", "prompt", "settled", 2),
        ("turn_ended", "settled", "idle", 2),
        ("turn_sent", "idle", "prompt", 3),
        ("answer_received", "prompt", "settled", 3),
        ("turn_ended", "settled", "idle", 3),
        ("dispose_requested", "idle", "teardown", 3),
        ("tree_gone", "teardown", "quiescent", 3),
    ]
    assert {e.turn for e in run.audit.entries if e.machine == "ladder"} == {3}
    assert {d["turn"] for d in run.audit.as_dicts()} == {1, 2, 3}


async def test_a_one_shot_run_never_idles_and_cannot_be_sent_to(tmp_path: Path) -> None:
    async with registry_of(scripted()).run("scripted", request(tmp_path)) as run:
        assert await run.result() == answer("first")
        assert run.conversation is False
        assert run.state == "settled"
        with pytest.raises(InvalidRequest, match=r"^subagent run was not started as a conversation$"):
            await run.send("more")
    assert [e.event for e in run.audit.entries if e.machine == "lifecycle"] == [
        "hello_received",
        "answer_received",
        "dispose_requested",
        "tree_gone",
    ]


async def test_a_kind_that_cannot_converse_is_refused_before_anything_spawns(tmp_path: Path) -> None:
    provider = ScriptedProvider(capabilities=Capabilities())
    registry = registry_of(provider)
    with pytest.raises(
        UnsupportedCapability,
        match=r'^subagent provider "scripted" does not support the "conversation" capability$',
    ) as info:
        async with registry.run("scripted", request(tmp_path), conversation=True):
            pass
    assert info.value.code == "UNSUPPORTED_CAPABILITY"
    assert not provider.events.spawned.is_set()
    async with anyio.create_task_group() as tg:
        with pytest.raises(UnsupportedCapability):
            await registry.start("scripted", request(tmp_path), task_group=tg, conversation=True)
    assert not provider.events.spawned.is_set()
    # the start-time options are checked first, in the contract's order
    provider = ScriptedProvider(capabilities=Capabilities())
    with pytest.raises(UnsupportedCapability, match='"persona"'):
        registry_of(provider).check(
            "scripted", request(tmp_path).model_copy(update={"persona": "p"}), conversation=True
        )


@pytest.mark.parametrize("task", ["", "   \n", None, 3])
async def test_a_blank_task_is_refused_and_loses_nothing(tmp_path: Path, task: Any) -> None:
    async with registry_of(scripted()).run("scripted", request(tmp_path), conversation=True) as run:
        await run.result()
        with pytest.raises(InvalidRequest, match=r"^subagent task must not be blank$"):
            await run.send(task)
        assert run.turn == 1
        assert run.state == IDLE
        assert await run.send("after") == answer("after")


async def test_a_send_while_a_turn_runs_is_refused_and_the_turn_goes_on(tmp_path: Path) -> None:
    provider = scripted(dispose_grace_ms=60_000)  # the wind-down's bound: never reached
    async with registry_of(provider).run("scripted", request(tmp_path), conversation=True) as run:
        await run.result()
        async with anyio.create_task_group() as tg:
            results: list[SubagentResult] = []

            async def second() -> None:
                results.append(await run.send("do:wait"))

            tg.start_soon(second)
            await provider.events.partial_output.wait()  # turn 2 is running
            with pytest.raises(TurnInProgress, match=r"^a turn is already running$") as info:
                await run.send("third")
            assert info.value.code == "TURN_IN_PROGRESS"
            assert run.turn == 2
            run.cancel()
        assert results == [SubagentResult(output="waiting", stop_reason=StopReason.ABORTED)]
        assert await run.send("third") == answer("third")  # the cancelled turn ended first
        assert run.turn == 3


async def test_two_sends_at_once_run_one_turn(tmp_path: Path) -> None:
    async with registry_of(scripted()).run("scripted", request(tmp_path), conversation=True) as run:
        await run.result()
        outcomes: list[object] = []

        async def send(text: str) -> None:
            try:
                outcomes.append(await run.send(text))
            except TurnInProgress as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "a")
            tg.start_soon(send, "b")
        assert sorted(type(o).__name__ for o in outcomes) == ["SubagentResult", "TurnInProgress"]
        assert run.turn == 2


# -- cancellation ---------------------------------------------------------------------------


async def test_a_cancelled_turn_keeps_the_conversation_open(tmp_path: Path) -> None:
    provider = scripted(dispose_grace_ms=60_000)  # the wind-down's bound: never reached
    watch = Watch()
    registry = registry_of(provider)
    async with registry.run("scripted", request(tmp_path), conversation=True, trace=watch) as run:
        await run.result()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.send, "do:wait")
            await provider.events.partial_output.wait()
            run.cancel()
            assert run.settled
            assert await run.result() == SubagentResult(output="waiting", stop_reason=StopReason.ABORTED)
            assert run.cancelled_locally
        await watch.reached("turn_ended", turn=2)  # the agent ended the cancelled turn (it read the cancel)
        assert run.state == IDLE
        third = await run.send("third")
        assert third == answer("third")
        assert run.cancelled_locally is False
    events = [(e.event, e.turn) for e in run.audit.entries if e.machine == "lifecycle"]
    assert events[3:8] == [
        ("turn_sent", 2),
        ("cancelled", 2),
        ("answer_received", 2),  # the agent's own end of the cancelled turn, recorded late
        ("turn_ended", 2),
        ("turn_sent", 3),
    ]


async def test_cancelling_the_task_awaiting_send_cancels_the_turn(tmp_path: Path) -> None:
    provider = scripted(dispose_grace_ms=60_000)  # the wind-down's bound: never reached
    async with registry_of(provider).run("scripted", request(tmp_path), conversation=True) as run:
        await run.result()
        with anyio.CancelScope() as scope:

            async def cancel_when_running() -> None:
                await provider.events.partial_output.wait()
                scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_when_running)
                await run.send("do:wait")
        assert scope.cancelled_caught
        assert await run.result() == SubagentResult(output="waiting", stop_reason=StopReason.ABORTED)
        assert await run.send("again") == answer("again")


async def test_a_cancelled_turn_the_agent_never_ends_ends_the_conversation(tmp_path: Path) -> None:
    provider = scripted(dispose_grace_ms=200)
    async with registry_of(provider).run("scripted", request(tmp_path), conversation=True) as run:
        await run.result()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.send, "do:hang")
            await provider.events.partial_output.wait()
            run.cancel()
        with pytest.raises(ConversationOver) as info:
            await run.send("more")  # waits for the wind-down, which the grace cuts off
        assert str(info.value) == (
            "subagent conversation is over (provider: Scripted; turn: 2; reason: cancelled turn did not end)"
        )
        assert info.value.reason is ConversationEnd.CANCEL_UNFINISHED
        assert info.value.code == "CONVERSATION_OVER"
    assert run.quiescent is True
    assert tagged(run.id) == []
    assert ("conversation_ended", "settled", "teardown") in [
        (e.event, e.source, e.target) for e in run.audit.entries
    ]


# -- the conversation ends ---------------------------------------------------------------------


async def test_a_turn_whose_child_dies_ends_the_conversation(tmp_path: Path) -> None:
    watch = Watch()
    async with registry_of(scripted()).run(
        "scripted", request(tmp_path), conversation=True, trace=watch
    ) as run:
        await run.result()
        failed = await run.send("do:exit:5")
        assert failed.stop_reason == StopReason.ERROR
        assert failed.diagnostic == (
            "Subagent failure (provider: Scripted; stage: process; category: process-exit; exit code: 5)"
        )
        await watch.reached("quiescent")  # torn down at once, not at dispose
        assert tagged(run.id) == []
        with pytest.raises(ConversationOver) as info:
            await run.send("more")
        assert str(info.value) == (
            "subagent conversation is over (provider: Scripted; turn: 2; reason: child exited; exit code: 5)"
        )
        assert (info.value.exit_code, info.value.signal) == (5, None)
        assert run.turn == 2
        assert await run.result() == failed
    assert run.quiescent is True


async def test_a_child_that_dies_between_turns_ends_the_conversation(tmp_path: Path) -> None:
    watch = Watch()
    async with registry_of(scripted()).run(
        "scripted", request(tmp_path), conversation=True, trace=watch
    ) as run:
        await run.result()
        process = internals(run).process
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        await watch.reached("quiescent")
        with pytest.raises(ConversationOver, match=r"reason: child exited; signal: SIGKILL\)$"):
            await run.send("more")
    assert run.quiescent is True
    assert ("child_lost", "idle", "teardown") in [(e.event, e.source, e.target) for e in run.audit.entries]


async def test_an_idle_conversation_is_torn_down_after_idle_timeout(tmp_path: Path) -> None:
    watch = Watch()
    provider = scripted(idle_timeout_ms=50)
    async with registry_of(provider).run(
        "scripted", request(tmp_path), conversation=True, trace=watch
    ) as run:
        await run.result()
        await watch.reached("quiescent")
        assert tagged(run.id) == []
        with pytest.raises(ConversationOver, match=r"\(provider: Scripted; turn: 1; reason: idle timeout\)$"):
            await run.send("too late")
    assert ("idle_timed_out", "idle", "teardown") in [
        (e.event, e.source, e.target) for e in run.audit.entries
    ]


async def test_the_abort_signal_ends_the_conversation(tmp_path: Path) -> None:
    provider = scripted()
    abort = AbortSignal()
    watch = Watch()
    registry = registry_of(provider)
    async with registry.run(
        "scripted", request(tmp_path), abort=abort, conversation=True, trace=watch
    ) as run:
        await run.result()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.send, "do:wait")
            await provider.events.partial_output.wait()
            abort.abort()
        assert await run.result() == SubagentResult(output="waiting", stop_reason=StopReason.ABORTED)
        await watch.reached("quiescent")
        with pytest.raises(ConversationOver, match=r"reason: aborted\)$"):
            await run.send("more")
    assert run.quiescent is True


async def test_dispose_ends_a_running_turn_and_the_conversation(tmp_path: Path) -> None:
    provider = scripted()
    async with anyio.create_task_group() as tg:
        run = await registry_of(provider).start(
            "scripted", request(tmp_path), task_group=tg, conversation=True
        )
        await run.result()
        results: list[SubagentResult] = []

        async def second() -> None:
            results.append(await run.send("do:hang"))

        tg.start_soon(second)
        await provider.events.partial_output.wait()
        await run.dispose()
    assert results == [SubagentResult(output="working on do:hang", stop_reason=StopReason.ABORTED)]
    assert run.quiescent is True
    assert tagged(run.id) == []
    with pytest.raises(ConversationOver, match=r"reason: closed\)$"):
        await run.send("more")
    await run.dispose()  # idempotent


async def test_leaving_the_block_ends_an_idle_conversation_over_the_whole_tree(tmp_path: Path) -> None:
    provider = scripted({"LINE_AGENT_IGNORE_EOF": "1"}, dispose_eof_grace_ms=100)
    async with registry_of(provider).run("scripted", request(tmp_path), conversation=True) as run:
        await run.result()
        await run.send("second")
    assert run.quiescent is True
    assert tagged(run.id) == []
    assert run.exit_facts is not None
    assert run.exit_facts.signal == "SIGTERM"
    with pytest.raises(ConversationOver, match=r"\(provider: Scripted; turn: 2; reason: closed\)$"):
        await run.send("more")


async def test_sending_before_the_run_started_is_refused(tmp_path: Path) -> None:
    run = scripted().create_run(request(tmp_path))
    with pytest.raises(InvalidRequest, match=r"^subagent run has not been started$"):
        await run.send("hello")


def test_idle_timeout_is_a_positive_key_of_every_kind() -> None:
    from pydantic import ValidationError

    from tests.support.scripted import ScriptedConfig

    assert ScriptedConfig().idle_timeout_ms == 600_000
    bad: Any
    for bad in (0, -1, "60000", True, float("inf")):
        with pytest.raises(ValidationError, match="idle_timeout_ms"):
            ScriptedConfig(idle_timeout_ms=bad)


# -- the turn guard and a provider's bugs ---------------------------------------------------------


async def test_a_turn_a_limit_stops_ends_the_conversation(tmp_path: Path) -> None:
    """``stall_timeout_ms`` guards every turn (the idle time between turns is no turn): a
    later turn that goes silent is stopped, and with it the conversation."""
    watch = Watch()
    provider = scripted(stall_timeout_ms=1000)
    async with registry_of(provider).run(
        "scripted", request(tmp_path), conversation=True, trace=watch
    ) as run:
        assert await run.result() == answer("first")
        stopped = await run.send("do:hang")  # prints its partial line, then neither writes nor computes
        assert stopped.stop_reason == StopReason.ERROR
        assert stopped.output == "working on do:hang"
        assert stopped.diagnostic is not None
        assert stopped.diagnostic.endswith("\nSubagent limit (resource: silence; limit: 1 s)")
        await watch.reached("quiescent")  # torn down at once
        with pytest.raises(ConversationOver, match=r"\(provider: Scripted; turn: 2; reason: limit\)$"):
            await run.send("more")
    assert tagged(run.id) == []


async def test_a_begin_turn_that_raises_ends_the_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.scripted import ScriptedRun

    def broken(self: ScriptedRun) -> None:
        raise RuntimeError("a provider's bug")

    monkeypatch.setattr(ScriptedRun, "begin_turn", broken)
    async with registry_of(scripted()).run("scripted", request(tmp_path), conversation=True) as run:
        await run.result()
        with pytest.raises(ConversationOver, match=r"reason: session unusable\)$"):
            await run.send("second")
        assert run.turn == 1
    assert run.quiescent is True
    assert tagged(run.id) == []


async def test_a_sent_task_with_a_lone_surrogate_reaches_the_child_as_utf8(tmp_path: Path) -> None:
    async with registry_of(scripted()).run("scripted", request(tmp_path), conversation=True) as run:
        await run.result()
        assert await run.send("half an emoji \ud83d here") == answer("half an emoji \ufffd here")


async def test_conversation_over_is_the_error_a_send_would_raise_once_final(tmp_path: Path) -> None:
    """``run.conversation_over``: None while open and for a one-shot run; then the same closed
    facts a send raises (what the MCP server reports as a conversation's ``ended``)."""
    watch = Watch()
    async with registry_of(scripted()).run(
        "scripted", request(tmp_path), conversation=True, trace=watch
    ) as run:
        await run.result()
        assert run.conversation_over is None
        await run.send("do:exit:5")
        await watch.reached("quiescent")
        over = run.conversation_over
        assert over is not None
        with pytest.raises(ConversationOver) as info:
            await run.send("more")
        assert (str(over), over.reason, over.turn, over.exit_code) == (
            str(info.value),
            ConversationEnd.CHILD_EXITED,
            2,
            5,
        )
    async with registry_of(scripted()).run("scripted", request(tmp_path)) as once:
        await once.result()
    assert once.conversation_over is None  # not a conversation, even once disposed
    async with registry_of(scripted()).run("scripted", request(tmp_path), conversation=True) as closed:
        await closed.result()
    assert (
        str(closed.conversation_over)
        == "subagent conversation is over (provider: Scripted; turn: 1; reason: closed)"
    )
