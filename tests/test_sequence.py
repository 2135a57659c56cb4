"""The one start -> result -> dispose sequence every front-end shares (``supervisor.supervise``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import anyio
import pytest

from supervisor import (
    AbortSignal,
    RunOutcome,
    StartAborted,
    StartFailed,
    StopReason,
    SubagentRequest,
    supervise,
)
from tests.support.scripted import ScriptedConfig, ScriptedProvider, scripted
from tests.support.unkillable import UnkillableTree, phantom_process

pytestmark = pytest.mark.anyio


def request(tmp_path: Path, task: str = "t") -> SubagentRequest:
    return SubagentRequest(task=task, parent_cwd=tmp_path)


async def test_a_completed_run_is_disposed_before_the_outcome(tmp_path: Path) -> None:
    run = scripted().create_run(request(tmp_path, "hi"))
    outcome = await supervise(run)
    assert (outcome.started, outcome.completed, outcome.stop_reason) == (True, True, "completed")
    assert (outcome.output, outcome.diagnostic, outcome.quiescent) == ("hi", None, True)
    assert run.state == "quiescent"
    assert not outcome.cancelled


async def test_a_failed_start_is_an_outcome_not_an_exception(tmp_path: Path) -> None:
    run = scripted({"LINE_AGENT_START": "exit:4"}).create_run(request(tmp_path))
    outcome = await supervise(run)
    assert isinstance(outcome.start_error, StartFailed)
    assert (outcome.started, outcome.result, outcome.stop_reason, outcome.output) == (
        False,
        None,
        "error",
        "",
    )
    assert outcome.diagnostic == (
        "Subagent failure (provider: Scripted; stage: initialize; category: process-exit; exit code: 4)"
    )
    assert outcome.quiescent


async def test_an_aborted_start_is_a_cancellation(tmp_path: Path) -> None:
    abort = AbortSignal()
    abort.abort()
    outcome = await supervise(scripted().create_run(request(tmp_path)), abort)
    assert isinstance(outcome.start_error, StartAborted)
    assert (outcome.stop_reason, outcome.cancelled, outcome.diagnostic, outcome.quiescent) == (
        "aborted",
        True,
        None,
        True,
    )


async def test_an_abort_after_publication_keeps_the_partial_output(tmp_path: Path) -> None:
    provider = scripted({"LINE_AGENT_ANSWER": "hang"})
    abort = AbortSignal()
    async with anyio.create_task_group() as tg:

        async def abort_on_output() -> None:
            await provider.events.partial_output.wait()
            abort.abort()

        tg.start_soon(abort_on_output)
        outcome = await supervise(provider.create_run(request(tmp_path, "t1")), abort)
    assert (outcome.stop_reason, outcome.output, outcome.cancelled) == ("aborted", "working on t1", True)
    assert outcome.quiescent


async def test_a_cancelled_caller_gets_the_cancellation_after_the_tree_is_gone(tmp_path: Path) -> None:
    provider = scripted({"LINE_AGENT_ANSWER": "hang"})
    run = provider.create_run(request(tmp_path))
    outcomes: list[RunOutcome] = []
    async with anyio.create_task_group() as tg:

        async def cancel_on_output() -> None:
            await provider.events.partial_output.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(cancel_on_output)
        outcomes.append(await supervise(run))
    assert outcomes == []  # the cancellation went on; nothing was swallowed
    assert tg.cancel_scope.cancelled_caught
    assert run.state == "quiescent"  # disposed (shielded) before the cancellation arrived
    assert (await run.result()).stop_reason == StopReason.ABORTED


async def test_a_caller_cancelled_before_the_start_leaves_nothing_waiting(tmp_path: Path) -> None:
    """A scope cancelled while the run's host task is being started must not strand it."""
    run = scripted().create_run(request(tmp_path))
    with anyio.fail_after(60):  # a regression hangs here: the shielded host task is never closed
        async with anyio.create_task_group() as tg:
            with anyio.CancelScope() as scope:
                scope.cancel()
                await run.start(tg)
    assert scope.cancelled_caught
    assert run.state == "quiescent"


@pytest.fixture
def phantom() -> Iterable[int]:
    with phantom_process() as pid:
        yield pid


async def test_a_completed_run_whose_tree_survives_is_an_error(
    tmp_path: Path, phantom: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("supervisor.process._managed.DEFAULT_KILL_WAIT_SECONDS", 0.2)
    config = ScriptedConfig(dispose_eof_grace_ms=50, dispose_grace_ms=50)
    provider = ScriptedProvider(config=config, tree=UnkillableTree(phantom))
    outcome = await supervise(provider.create_run(request(tmp_path, "hi")))
    assert outcome.result is not None
    assert outcome.result.stop_reason == "completed"
    assert outcome.teardown_error is not None
    assert (outcome.stop_reason, outcome.output, outcome.quiescent) == ("error", "hi", False)
    assert (
        outcome.diagnostic
        == outcome.teardown_error.diagnostic
        == ("Subagent failure (provider: Scripted; stage: teardown; category: unknown; exit code: 0)")
    )
