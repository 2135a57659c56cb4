"""A warm Claude Code CLI (warm starts): the real bundled CLI, the mock model on 127.0.0.1.

Besides its start and the SDK's ``initialize``, a warm CLI is asked for its context usage
before any task exists: answering it, the CLI builds its system prompt, its tool schemas
and its API client (token counts go to the mock's ``count_tokens``), which it would
otherwise build at the run's first prompt.  Then it is sent a placeholder prompt that a
``UserPromptSubmit`` hook of its own blocks: the CLI takes in a first user message and
drops it, with no model request.  Nothing of either reaches the session: the run's first
model request is a cold run's, the task the session's only user message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from supervisor import Registry, SessionPlan, StopReason, SubagentRequest
from supervisor.providers.claude_code import _run
from supervisor.providers.claude_code._warm_prompt import PromptGate
from tests.claude_code.conftest import ClaudeHome, claude_provider
from tests.conftest import tagged
from tests.mockmodel import MockModelServer, Text
from tests.support.resume import written_under
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]


def counted(server: MockModelServer) -> int:
    return sum(1 for seen in server.requests if seen.path.endswith("/count_tokens"))


async def test_a_warm_cli_is_set_up_before_its_task_and_its_session_stays_untouched(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    mock_model.script(Text("warm answer"), Text("second answer"))
    registry = Registry()
    registry.register(claude_provider(claude_home, mock_model))
    async with registry:
        await registry.prestart("claude-code", 1, cwd=claude_home.work)
        assert registry._warm is not None
        (slot,) = registry._warm._slots.values()
        (waiting,) = [run.id for run in slot.ready]
        # the setup ran before the child was ready: its token counts, and no model turn
        assert counted(mock_model) > 0
        assert mock_model.model_requests == []
        request = SubagentRequest(task="turn one", parent_cwd=claude_home.work)
        async with registry.run("claude-code", request, conversation=True) as run:
            assert run.id == waiting
            first = await run.result()
            second = await run.send("turn two")
    assert (first.output, first.stop_reason) == ("warm answer", StopReason.COMPLETED)
    assert second.output == "second answer"
    assert run.quiescent is True
    assert tagged(run.id) == []
    turn_one, turn_two = mock_model.model_requests
    said = turn_one.user_texts()
    assert len(said) == 1  # the task is the session's first user message: no setup turn before it
    assert said[0].endswith("turn one")
    assert [text for text in turn_two.user_texts() if text.endswith(("turn one", "turn two"))] == [
        said[0],
        turn_two.user_texts()[-1],
    ]


async def test_a_journaled_warm_cli_keeps_a_session_that_resumes_with_only_its_turns(
    claude_home: ClaudeHome, mock_model: MockModelServer, tmp_path: Path
) -> None:
    """A journaled registry's warm child keeps its session on disk: the setup request
    leaves nothing in it that a resumed turn would carry."""
    mock_model.script(Text("Noted: cobalt."), Text("You asked me to remember cobalt."))
    journaled = Registry(journal=tmp_path / "journal.db")
    journaled.register(claude_provider(claude_home, mock_model))
    async with journaled:
        await journaled.prestart("claude-code", 1, cwd=claude_home.work)
        assert counted(mock_model) > 0  # set up
        request = SubagentRequest(task="Remember the word cobalt.", parent_cwd=claude_home.work)
        # what a front-end's run on a journaled registry asks for (``acquire_run(journaled=True)``)
        async with journaled.run("claude-code", request, session=SessionPlan(keep=True)) as run:
            first = await run.result()
            assert any(entry.machine == "warm" for entry in run.audit.entries)  # a warm child
        session_id = run.agent_session_id
    assert first.output == "Noted: cobalt."
    assert isinstance(session_id, str)
    persisted = written_under(claude_home.config_dir / "projects", "Noted: cobalt.")
    await until(persisted)  # the CLI's own write of its session file
    resumed = Registry()
    resumed.register(claude_provider(claude_home, mock_model))
    plan = SessionPlan(run_id=run.id, resume=session_id, turns_before=1)
    again = SubagentRequest(task="(resumed)", parent_cwd=claude_home.work)
    async with resumed.run("claude-code", again, conversation=True, session=plan) as later:
        second = await later.send("Which word did I ask you to remember?")
    assert second.output == "You asked me to remember cobalt."
    said = mock_model.model_requests[-1].user_texts()
    # the session's user messages are the two turns', nothing of the setup before them
    assert len(said) == 2
    assert said[0].endswith("Remember the word cobalt.")
    assert said[1].endswith("Which word did I ask you to remember?")


class RecordingGate(PromptGate):
    """The real gate, keeping every prompt it was asked about and what it answered."""

    seen: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def decide(self, hook_input: Any) -> Any:
        answer = super().decide(hook_input)
        RecordingGate.seen.append((hook_input["prompt"], dict(answer)))
        return answer


def sent(body: dict[str, Any] | None) -> dict[str, Any]:
    """A model request's body without its per-session metadata (a device and session id)."""
    assert body is not None
    return {key: value for key, value in body.items() if key != "metadata"}


async def test_a_warm_clis_placeholder_prompt_is_dropped_and_its_run_asks_what_a_cold_one_asks(
    claude_home: ClaudeHome, mock_model: MockModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The placeholder reaches the CLI and its hook, which blocks it: no model request,
    no result taken as the run's, no cost or turn counted; the warm run's model request
    and result are the cold run's, and its later turns pass the hook untouched."""
    monkeypatch.setattr(RecordingGate, "seen", [])
    monkeypatch.setattr(_run, "PromptGate", RecordingGate)
    mock_model.script(Text("cold answer"), Text("warm answer"), Text("second answer"))
    registry = Registry()
    registry.register(claude_provider(claude_home, mock_model))
    request = SubagentRequest(task="the task", parent_cwd=claude_home.work)
    async with registry:
        async with registry.run("claude-code", request) as cold:
            cold_result = await cold.result()
        assert RecordingGate.seen == []  # a cold run's CLI has no hook
        await registry.prestart("claude-code", 1, cwd=claude_home.work)
        ((placeholder, blocked),) = RecordingGate.seen
        assert placeholder.startswith("(warm child setup ")
        assert blocked["decision"] == "block"
        assert len(mock_model.model_requests) == 1  # the cold run's only: the placeholder asked nothing
        async with registry.run("claude-code", request, conversation=True) as warm:
            warm_result = await warm.result()
            second = await warm.send("turn two")
        assert any(entry.machine == "warm" for entry in warm.audit.entries)
    assert (cold_result.output, warm_result.output, second.output) == (
        "cold answer",
        "warm answer",
        "second answer",
    )
    assert warm_result.usage == cold_result.usage  # nothing of the placeholder counted
    assert [prompt for prompt, _ in RecordingGate.seen[1:3]] == ["the task", "turn two"]
    assert [answer for _, answer in RecordingGate.seen[1:3]] == [{}, {}]  # passed on untouched
    cold_request, warm_request, _ = mock_model.model_requests
    assert sent(warm_request.body) == sent(cold_request.body)
    assert tagged(cold.id) == []
    assert tagged(warm.id) == []


async def test_a_placeholder_whose_result_the_warm_up_did_not_read_is_never_the_runs_answer(
    claude_home: ClaudeHome, mock_model: MockModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm-up cut short after the placeholder was sent (its setup overran): the run
    reads the placeholder's result first, then its own task's; a child ended with its
    placeholder in flight (the refill, when the registry closes) has it dropped first:
    the model sees the task alone."""

    async def sent_only(self: _run.ClaudeCodeRun) -> None:
        assert self._client is not None
        assert self._gate is not None
        self._placeholder_open = True
        await self._client.query(self._gate.text)

    monkeypatch.setattr(_run.ClaudeCodeRun, "_placeholder", sent_only)
    mock_model.script(Text("warm answer"))
    registry = Registry()
    registry.register(claude_provider(claude_home, mock_model))
    async with registry:
        await registry.prestart("claude-code", 1, cwd=claude_home.work)
        request = SubagentRequest(task="the task", parent_cwd=claude_home.work)
        async with registry.run("claude-code", request) as run:
            result = await run.result()
    assert (result.output, result.stop_reason) == ("warm answer", StopReason.COMPLETED)
    (turn,) = mock_model.model_requests
    assert len(turn.user_texts()) == 1
    assert turn.user_texts()[0].endswith("the task")
    assert tagged(run.id) == []
