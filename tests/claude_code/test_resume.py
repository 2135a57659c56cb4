"""Cold resume against the real Claude Code CLI: ``--resume <session id>`` of a kept session.

Turn 1 runs in a supervising process of its own with ``SessionPlan(keep=True)`` (the CLI
then keeps its session on disk: no ``--no-session-persistence``), and that process is
SIGKILLed.  This process then starts a new CLI with ``--resume`` in the same cwd and
config directory and sends turn 2: the mock model's turn-2 request carries turn 1's
exchange.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from supervisor import ConversationEnd, ConversationOver, Registry, SessionPlan, StopReason, SubagentRequest
from supervisor.providers.claude_code._command import cli_argv
from tests.claude_code.conftest import ClaudeHome, claude_provider
from tests.mockmodel import MockModelServer, Text
from tests.support.resume import killed_host, written_under

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]

TURN_1 = "Remember the word cobalt."
ANSWER_1 = "Noted: cobalt."
TURN_2 = "Which word did I ask you to remember?"
ANSWER_2 = "You asked me to remember cobalt."


def host_keys(home: ClaudeHome, server: MockModelServer) -> dict[str, Any]:
    return {"env": home.env(server), "dispose_grace_ms": 2000, "stderr": "discard"}


def registry_of(home: ClaudeHome, server: MockModelServer) -> Registry:
    registry = Registry()
    registry.register(claude_provider(home, server))
    return registry


def first_turn(home: ClaudeHome, server: MockModelServer, *, keep: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": "claude-code",
        "config": host_keys(home, server),
        "cwd": str(home.work),
        "task": TURN_1,
    }
    if keep:
        spec["session"] = {"keep": True}
    # the CLI may answer before its session file holds the answer: wait for its own write
    persisted = written_under(home.config_dir / "projects", ANSWER_1) if keep else None
    (facts,) = killed_host(spec, persisted=persisted)
    assert facts["output"] == ANSWER_1
    assert isinstance(facts["agent_session_id"], str)
    return facts


async def test_a_kept_session_continues_after_its_host_was_killed(
    claude_home: ClaudeHome, mock_model: MockModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="supervisor")
    mock_model.script(Text(ANSWER_1), Text(ANSWER_2))
    facts = first_turn(claude_home, mock_model, keep=True)
    session_id = facts["agent_session_id"]
    before = len(mock_model.model_requests)
    plan = SessionPlan(run_id=facts["run_id"], resume=session_id, turns_before=1)
    request = SubagentRequest(task="(resumed)", parent_cwd=claude_home.work)
    async with registry_of(claude_home, mock_model).run(
        "claude-code", request, conversation=True, session=plan
    ) as run:
        assert (run.id, run.turn, run.state) == (facts["run_id"], 1, "idle")
        assert run.agent_session_id == session_id
        assert len(mock_model.model_requests) == before  # resuming asks the model nothing
        second = await run.send(TURN_2)
        assert run.turn == 2
    assert run.quiescent is True
    assert second.stop_reason == StopReason.COMPLETED, second.diagnostic
    assert second.output == ANSWER_2
    turn_2 = mock_model.model_requests[-1]
    assert any(TURN_2 in text for text in turn_2.user_texts())
    assert any(TURN_1 in text for text in turn_2.user_texts()[:-1])  # turn 1's question
    assert ANSWER_1 in turn_2.json()  # and turn 1's answer
    assert run.stages_entered == ("query-start", "query-run", "teardown")
    assert not [r for r in caplog.records if session_id in r.getMessage()]


async def test_a_session_the_cli_does_not_have_is_not_resumable(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    plan = SessionPlan(run_id=str(uuid.uuid4()), resume=str(uuid.uuid4()), turns_before=1)
    request = SubagentRequest(task="(resumed)", parent_cwd=claude_home.work)
    with pytest.raises(ConversationOver) as caught:
        async with registry_of(claude_home, mock_model).run(
            "claude-code", request, conversation=True, session=plan
        ):
            pytest.fail("a session the CLI cannot resume must not be published")
    assert caught.value.reason is ConversationEnd.NOT_RESUMABLE
    assert mock_model.model_requests == []  # no task was sent


def test_only_kept_or_resumed_sessions_are_persisted(claude_home: ClaudeHome) -> None:
    from pathlib import Path

    from supervisor.providers.claude_code import Config

    config = Config()
    cli = Path("/bin/claude")
    assert "--no-session-persistence" in cli_argv(cli, config)
    assert "--no-session-persistence" not in cli_argv(cli, config, keep=True)
    resumed = cli_argv(cli, config, resume="abc")
    assert "--no-session-persistence" not in resumed
    assert resumed[resumed.index("--resume") + 1] == "abc"
