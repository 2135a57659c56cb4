"""A resumed conversation's spans: the run id as the conversation id, the agent's own session
id nowhere, and the turn numbers going on from the turns before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from supervisor import Registry, SessionPlan, SubagentRequest
from supervisor.providers.acp import EXAMPLE_AGENT, Config, Provider
from tests.conftest import PYTHON
from tests.support.resume import killed_host
from tests.telemetry.conftest import Traced

pytestmark = pytest.mark.anyio


async def test_a_resumed_conversation_spans_its_turns_under_its_run_id(
    tmp_path: Path, traced: Traced
) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    keys = {
        "command": PYTHON,
        "args": ["-I", str(EXAMPLE_AGENT)],
        "env": {"SUBAGENT_EXAMPLE_SESSIONS": str(sessions)},
    }
    (facts,) = killed_host({"kind": "acp", "config": keys, "cwd": str(tmp_path), "task": "first"})
    session_id = facts["agent_session_id"]
    registry = Registry()
    registry.register(Provider(Config.model_validate(keys)))
    plan = SessionPlan(run_id=facts["run_id"], resume=session_id, turns_before=1)
    request = SubagentRequest(task="(resumed)", parent_cwd=tmp_path)
    async with registry.run("acp", request, conversation=True, session=plan) as run:
        await run.send("second")
        await run.send("third")
    spans = traced.spans()
    turns = [span.attributes["subagent.turn"] for span in spans if span.attributes]
    assert turns == [1, 2, 3]  # the resume itself (no turn), then turns 2 and 3
    assert {span.attributes["gen_ai.conversation.id"] for span in spans if span.attributes} == {run.id}
    assert run.id == facts["run_id"]
    exported = json.dumps([json.loads(span.to_json()) for span in spans])
    assert session_id not in exported
    assert any(event.name == "resumed" for span in spans for event in span.events)  # an event of its span
