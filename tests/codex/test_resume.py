"""Cold resume against the real Codex app-server: ``thread/resume`` of a thread kept on disk.

Turn 1 runs in a supervising process of its own with ``SessionPlan(keep=True)`` (the thread
is started non-ephemeral, so the app-server writes its rollout), and that process is
SIGKILLed.  This process then resumes the thread in a new app-server and sends turn 2: the
mock model's turn-2 request carries turn 1's exchange.  Every frame of this process's runs
is validated against the pinned binary's schema (the ``transcript`` fixture).
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from supervisor import ConversationEnd, ConversationOver, Registry, SessionPlan, StopReason
from tests.mockmodel import MockModelServer, Text
from tests.support.codex import FAST, Transcript, provider, request
from tests.support.peers import PeerLaunch
from tests.support.resume import killed_host

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]

TURN_1 = "Remember the word cobalt."
ANSWER_1 = "Noted: cobalt."
TURN_2 = "Which word did I ask you to remember?"
ANSWER_2 = "You asked me to remember cobalt."


def host_keys(launch: PeerLaunch) -> dict[str, Any]:
    return {"codex_path": launch.argv[0], "env": dict(launch.env), "stderr": "discard", **FAST}


def first_turn(launch: PeerLaunch, *, keep: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": "codex",
        "config": host_keys(launch),
        "cwd": str(launch.cwd),
        "task": TURN_1,
    }
    if keep:
        spec["session"] = {"keep": True}
    (facts,) = killed_host(spec)
    assert facts["output"] == ANSWER_1
    assert isinstance(facts["agent_session_id"], str)
    return facts


def registry_of(launch: PeerLaunch, transcript: Transcript) -> Registry:
    registry = Registry()
    registry.register(provider(launch, transcript))
    return registry


async def test_a_kept_thread_continues_after_its_host_was_killed(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="supervisor")
    mock.script(Text(ANSWER_1), Text(ANSWER_2))
    facts = first_turn(launch, keep=True)
    thread = facts["agent_session_id"]
    plan = SessionPlan(run_id=facts["run_id"], resume=thread, turns_before=1)
    async with registry_of(launch, transcript).run(
        "codex", request(launch.cwd, "(resumed)"), conversation=True, session=plan
    ) as run:
        assert (run.id, run.turn, run.state, run.agent_session_id) == (facts["run_id"], 1, "idle", thread)
        second = await run.send(TURN_2)
        assert run.turn == 2
    assert run.quiescent is True
    assert second.stop_reason == StopReason.COMPLETED, second.diagnostic
    assert second.output == ANSWER_2
    (resumed,) = transcript.sent("thread/resume")
    assert resumed["params"]["threadId"] == thread
    assert transcript.sent("thread/start") == []
    assert [f["params"]["threadId"] for f in transcript.sent("turn/start")] == [thread]
    turn_2 = mock.model_requests[-1]
    assert TURN_2 in turn_2.user_texts()
    assert TURN_1 in turn_2.user_texts()  # turn 1's question
    assert ANSWER_1 in turn_2.json()  # and turn 1's answer
    assert run.stages_entered == ("initialize", "thread-start", "turn-start", "turn", "teardown")
    assert not [r for r in caplog.records if thread in r.getMessage()]


async def test_a_new_thread_is_ephemeral_unless_kept(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    mock.script(Text("one"), Text("two"))
    registry = registry_of(launch, transcript)
    for keep in (False, True):
        session = SessionPlan(keep=True) if keep else None
        async with registry.run("codex", request(launch.cwd), conversation=True, session=session) as run:
            await run.result()
            assert run.agent_session_id is not None
    assert [f["params"]["ephemeral"] for f in transcript.sent("thread/start")] == [True, False]
    assert [r["thread"]["ephemeral"] for r in transcript.results("thread/start")] == [True, False]


@pytest.mark.parametrize("case", ["ephemeral", "unknown"])
async def test_a_thread_the_app_server_cannot_resume_is_not_resumable(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript, case: str
) -> None:
    if case == "ephemeral":  # started without keep: no rollout to resume from
        mock.script(Text(ANSWER_1))
        thread = first_turn(launch, keep=False)["agent_session_id"]
    else:
        thread = str(uuid.uuid4())
    plan = SessionPlan(run_id=str(uuid.uuid4()), resume=thread, turns_before=1)
    with pytest.raises(ConversationOver) as caught:
        async with registry_of(launch, transcript).run(
            "codex", request(launch.cwd, "(resumed)"), conversation=True, session=plan
        ):
            pytest.fail("a thread that cannot be resumed must not be published")
    assert caught.value.reason is ConversationEnd.NOT_RESUMABLE
    assert (
        str(caught.value) == "subagent conversation is over (provider: Codex; turn: 1; reason: not resumable)"
    )
    assert len(transcript.sent("thread/resume")) == 1
    assert transcript.sent("turn/start") == []  # no task was sent


async def test_the_codex_provider_declares_resume(tmp_path: Path, launch: PeerLaunch) -> None:
    assert provider(launch).capabilities.resume is True
