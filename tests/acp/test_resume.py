"""Cold resume of ACP conversations against the built-in example agent (real processes).

Turn 1 runs in a supervising process of its own (``tests/children/resume_host.py``), which
is then SIGKILLed; its keeper ends the agent.  This process then continues the agent's
session in a new child with ``SessionPlan(resume=..., run_id=..., turns_before=1)``.  The
example agent keeps its sessions as files under ``SUBAGENT_EXAMPLE_SESSIONS`` and
remembers what a session was asked (``@recall``), so turn 2's answer proves that the
session, not a fresh one, was continued.
"""

from __future__ import annotations

import logging
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from supervisor import (
    ConversationEnd,
    ConversationOver,
    InvalidRequest,
    Registry,
    SessionPlan,
    StartFailed,
    StopReason,
    SubagentRequest,
    Usage,
)
from supervisor.providers.acp import EXAMPLE_AGENT, Config, Provider
from tests.conftest import CHILDREN, PYTHON, internals, tagged
from tests.support.resume import exiting_host, killed_host

pytestmark = pytest.mark.anyio

TURN_1 = "remember the blue door"


def agent_env(sessions: Path, offer: str | None = None) -> dict[str, str | None]:
    env: dict[str, str | None] = {"SUBAGENT_EXAMPLE_SESSIONS": str(sessions)}
    if offer is not None:
        env["SUBAGENT_EXAMPLE_OFFER"] = offer
    return env


def example_keys(sessions: Path, offer: str | None = None) -> dict[str, Any]:
    return {"command": PYTHON, "args": ["-I", str(EXAMPLE_AGENT)], "env": agent_env(sessions, offer)}


def registry_of(keys: dict[str, Any]) -> Registry:
    registry = Registry()
    registry.register(Provider(Config.model_validate(keys)))
    return registry


def first_turn(tmp_path: Path, task: str = TURN_1) -> tuple[dict[str, Any], Path]:
    """Turn 1 in a host that is then SIGKILLed: its facts, and the agent's sessions folder."""
    sessions = tmp_path / "sessions"
    sessions.mkdir(exist_ok=True)
    spec = {"kind": "acp", "config": example_keys(sessions), "cwd": str(tmp_path), "task": task}
    (facts,) = killed_host(spec)
    assert facts["turn"] == 1
    assert facts["output"] == f"Hello! You asked: {task.splitlines()[0]}"
    assert isinstance(facts["agent_session_id"], str)
    return facts, sessions


def plan_after(facts: dict[str, Any]) -> SessionPlan:
    return SessionPlan(run_id=facts["run_id"], resume=facts["agent_session_id"], turns_before=1)


def placeholder(tmp_path: Path) -> SubagentRequest:
    """A resumed run's request: its cwd counts, its task is never sent."""
    return SubagentRequest(task="(resumed)", parent_cwd=tmp_path)


@pytest.mark.parametrize(
    ("offer", "method"), [(None, "session/resume"), ("load", "session/load")], ids=["resume", "load"]
)
async def test_a_conversation_continues_after_its_host_was_killed(
    tmp_path: Path, offer: str | None, method: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="supervisor")
    facts, sessions = first_turn(tmp_path, f"{TURN_1}\n@usage")
    plan = plan_after(facts)
    registry = registry_of(example_keys(sessions, offer))
    async with registry.run("acp", placeholder(tmp_path), conversation=True, session=plan) as run:
        assert run.id == facts["run_id"]  # the run keeps its id
        assert tagged(run.id) != []  # and its child carries it
        assert (run.turn, run.state, run.settled) == (1, "idle", True)
        assert run.agent_session_id == facts["agent_session_id"]
        assert run.stages_entered == ("initialize", "new-session")
        with pytest.raises(InvalidRequest, match="has run no turn yet"):
            await run.result()
        second = await run.send("@recall\n@usage")
        # the answer is turn 2's alone: a load's replayed history is swallowed
        assert second.output == f"Earlier in this session you asked: {TURN_1}"
        assert second.stop_reason == StopReason.COMPLETED
        assert run.turn == 2
        assert await run.result() == second
        # Usage is turn 2's: 0 words asked, 10 answered.  Its cost needs the session's
        # cumulative cost before the turn: a load replays it, a resume does not (unknown: None).
        cost = 0.001 if method == "session/load" else None
        assert second.usage == Usage(input_tokens=0, output_tokens=10, cost_usd=cost)
        third = await run.send("@recall")
        assert third.output == f"Earlier in this session you asked: {TURN_1}"  # directives are not asked
        assert run.turn == 3
        audit = [(e.event, e.source, e.target, e.turn) for e in run.audit.entries]
        assert ("resumed", "new-session", "idle", 1) in audit
        assert ("turn_sent", "idle", "prompt", 2) in audit
    assert run.quiescent is True
    assert f"continuing the agent's session with {method}" in caplog.text
    session_id = facts["agent_session_id"]
    assert not [r for r in caplog.records if r.levelno >= logging.INFO and session_id in r.getMessage()]
    assert session_id not in repr(run)
    assert session_id not in str(run.audit.as_dicts())


async def test_a_resumed_conversation_can_be_resumed_again(tmp_path: Path) -> None:
    facts, sessions = first_turn(tmp_path)
    keys = example_keys(sessions)
    spec = {"kind": "acp", "config": keys, "cwd": str(tmp_path), "task": "(resumed)"}
    session = {"run_id": facts["run_id"], "resume": facts["agent_session_id"], "turns_before": 1}
    (second,) = killed_host({**spec, "session": session, "sends": ["the green window"]}, turns=2)[1:]
    assert (second["run_id"], second["turn"]) == (facts["run_id"], 2)
    plan = SessionPlan(run_id=facts["run_id"], resume=second["agent_session_id"], turns_before=2)
    async with registry_of(keys).run("acp", placeholder(tmp_path), conversation=True, session=plan) as run:
        third = await run.send("@recall")
        assert third.output == f"Earlier in this session you asked: {TURN_1}; the green window"
        assert run.turn == 3


async def test_a_conversation_closed_by_its_host_can_be_resumed(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    keys = example_keys(sessions)
    spec = {"kind": "acp", "config": keys, "cwd": str(tmp_path), "task": TURN_1, "sends": ["and then"]}
    *_, facts = exiting_host(spec)
    assert facts["turn"] == 2
    plan = SessionPlan(run_id=facts["run_id"], resume=facts["agent_session_id"], turns_before=2)
    async with registry_of(keys).run("acp", placeholder(tmp_path), conversation=True, session=plan) as run:
        assert (await run.send("@recall")).output == f"Earlier in this session you asked: {TURN_1}; and then"


async def test_the_permission_policy_is_applied_again(tmp_path: Path) -> None:
    facts, sessions = first_turn(tmp_path)
    keys = {**example_keys(sessions), "permission": "reject"}
    async with registry_of(keys).run(
        "acp", placeholder(tmp_path), conversation=True, session=plan_after(facts)
    ) as run:
        denied = await run.send("write it\n@permission edit")
        assert denied.stop_reason == StopReason.ABORTED
        assert (
            denied.diagnostic == "ACP unattended decision (policy: reject; request: edit; decision: denied)"
        )
    assert not (tmp_path / "subagent-example.txt").exists()


async def test_an_agent_that_does_not_offer_resume_is_not_resumable_and_sees_no_prompt(
    tmp_path: Path,
) -> None:
    log = tmp_path / "frames.log"
    keys = {
        "command": PYTHON,
        "args": ["-I", str(CHILDREN / "acp_child.py")],
        "env": {"ACP_CHILD_LOG_FILE": str(log)},
    }
    plan = SessionPlan(run_id=str(uuid.uuid4()), resume="sess-1", turns_before=1)
    registry = registry_of(keys)
    with pytest.raises(ConversationOver) as caught:
        async with registry.run("acp", placeholder(tmp_path), conversation=True, session=plan):
            pytest.fail("a run that cannot resume must not be published")
    assert caught.value.reason is ConversationEnd.NOT_RESUMABLE
    assert (
        str(caught.value) == "subagent conversation is over (provider: ACP; turn: 1; reason: not resumable)"
    )
    methods = log.read_text()
    assert '"initialize"' in methods
    assert "session/prompt" not in methods
    assert "session/new" not in methods
    assert tagged(plan.run_id or "") == []


@pytest.mark.parametrize("offer", ["", "resume,load"], ids=["offers-nothing", "unknown-session"])
async def test_an_agent_that_cannot_continue_the_session_is_not_resumable(tmp_path: Path, offer: str) -> None:
    facts, sessions = first_turn(tmp_path)
    before = {path.name: path.read_bytes() for path in sessions.iterdir()}
    plan = plan_after(facts)
    if offer:  # advertised, but the agent has no such session: it refuses
        plan = SessionPlan(run_id=facts["run_id"], resume="example-0000000000000000", turns_before=1)
    registry = registry_of(example_keys(sessions, offer))
    with pytest.raises(ConversationOver) as caught:
        async with registry.run("acp", placeholder(tmp_path), conversation=True, session=plan):
            pytest.fail("a run that cannot resume must not be published")
    assert caught.value.reason is ConversationEnd.NOT_RESUMABLE
    assert {path.name: path.read_bytes() for path in sessions.iterdir()} == before  # no prompt reached it
    assert tagged(facts["run_id"]) == []


async def test_a_transient_start_failure_stays_a_start_failure(tmp_path: Path) -> None:
    keys = {"command": str(tmp_path / "no-such-agent")}
    plan = SessionPlan(run_id=str(uuid.uuid4()), resume="example-0123456789abcdef", turns_before=1)
    with pytest.raises(StartFailed) as caught:
        async with registry_of(keys).run("acp", placeholder(tmp_path), conversation=True, session=plan):
            pytest.fail("unreachable")
    assert (
        caught.value.diagnostic == "Subagent failure (provider: ACP; stage: process; category: process-start)"
    )


async def test_a_new_conversation_reports_its_agent_session_id_and_takes_a_planned_run_id(
    tmp_path: Path,
) -> None:
    run_id = str(uuid.uuid4())
    keys = example_keys(tmp_path)
    async with registry_of(keys).run(
        "acp",
        SubagentRequest(task="hi", parent_cwd=tmp_path),
        conversation=True,
        session=SessionPlan(run_id=run_id),
    ) as run:
        result = await run.result()
        assert run.id == run_id
        assert run.turn == 1
        session_id = run.agent_session_id
        assert session_id is not None
        assert session_id.startswith("example-")
        assert session_id not in result.output
        assert internals(run).process is not None


async def test_a_one_shot_run_keeps_its_agent_session_id_host_side(tmp_path: Path) -> None:
    async with registry_of(example_keys(tmp_path)).run(
        "acp", SubagentRequest(task="hi", parent_cwd=tmp_path)
    ) as run:
        await run.result()
        assert run.agent_session_id is not None


@pytest.mark.parametrize(
    ("plan", "conversation", "message"),
    [
        (SessionPlan(run_id="not-a-uuid"), True, "run_id must be a run id"),
        (SessionPlan(run_id=str(uuid.uuid4()).upper()), True, "run_id must be a run id"),
        (SessionPlan(turns_before=-1), True, "turns_before must be a non-negative integer"),
        (SessionPlan(resume="two words", turns_before=1), True, "resume must be an agent session id"),
        (SessionPlan(resume="x" * 257, turns_before=1), True, "resume must be an agent session id"),
        (SessionPlan(resume="sess-1", turns_before=1), False, "start it with conversation=True"),
    ],
)
async def test_a_malformed_plan_is_refused_before_anything_spawns(
    tmp_path: Path, plan: SessionPlan, conversation: bool, message: str
) -> None:
    marker = tmp_path / "spawned"
    keys = {"command": sys.executable, "args": ["-c", f"open({str(marker)!r}, 'w')"]}
    with pytest.raises(InvalidRequest, match=message):
        async with registry_of(keys).run(
            "acp", placeholder(tmp_path), conversation=conversation, session=plan
        ):
            pytest.fail("unreachable")
    assert not marker.exists()
