"""Cold resume against the two real ACP agents (codex-acp, claude-agent-acp), offline.

Turn 1 runs in a supervising process of its own, which is then SIGKILLed (its keeper ends
the agent); this process continues the agent's session in a new child and sends turn 2.
The mock model server, the only fake, sees turn 2's request carry turn 1's exchange: the
agent continued its own session, from its own disk.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor import Registry, SessionPlan, StderrMode, SubagentRequest
from supervisor.providers.acp import Config, Provider
from tests.mockmodel import MockModelServer, Text
from tests.support import peers, skip_module_without_acp_peers
from tests.support.resume import killed_host, written_under

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]

skip_module_without_acp_peers()

Launcher = Callable[..., peers.PeerLaunch]
PEERS: dict[str, Launcher] = {
    "codex-acp": peers.codex_acp_launch,
    "claude-agent-acp": peers.claude_agent_acp_launch,
}
METHODS = {"codex-acp": "session/resume", "claude-agent-acp": "session/resume"}
"""What each agent advertises (and so what the provider uses), as measured here."""
TURN_1 = "Remember the word cobalt."
ANSWER_1 = "Noted: cobalt."
TURN_2 = "Which word did I ask you to remember?"
ANSWER_2 = "You asked me to remember cobalt."


@pytest.fixture
def server() -> Iterator[MockModelServer]:
    with MockModelServer() as srv:
        yield srv


@pytest.fixture(params=sorted(PEERS))
def launch(
    request: pytest.FixtureRequest, server: MockModelServer, tmp_path: Path
) -> Iterator[peers.PeerLaunch]:
    with PEERS[request.param](server, root=tmp_path) as launched:
        yield launched


def keys(launch: peers.PeerLaunch) -> dict[str, Any]:
    return {
        "command": launch.argv[0],
        "args": list(launch.argv[1:]),
        "env": dict(launch.env),
        "stderr": "discard",
        "dispose_eof_grace_ms": 300,  # neither agent exits on EOF once a session exists
        "dispose_grace_ms": 3000,
    }


async def test_turn_2_after_a_killed_host_carries_turn_1(
    launch: peers.PeerLaunch, server: MockModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="supervisor")
    server.script(Text(ANSWER_1), Text(ANSWER_2))
    spec = {"kind": "acp", "config": keys(launch), "cwd": str(launch.cwd), "task": TURN_1}
    # claude-agent-acp answers the prompt before it writes the answer to its session file
    (facts,) = killed_host(spec, persisted=written_under(launch.home, ANSWER_1))
    assert ANSWER_1 in facts["output"]
    session_id = facts["agent_session_id"]
    assert isinstance(session_id, str)
    turn_1_requests = len(server.model_requests)

    registry = Registry()
    registry.register(Provider(Config.model_validate({**keys(launch), "stderr": StderrMode.LOG})))
    plan = SessionPlan(run_id=facts["run_id"], resume=session_id, turns_before=1)
    request = SubagentRequest(task="(resumed)", parent_cwd=launch.cwd)
    async with registry.run("acp", request, conversation=True, session=plan) as run:
        assert (run.id, run.turn, run.state) == (facts["run_id"], 1, "idle")
        second = await run.send(TURN_2)
        assert run.turn == 2
    assert run.quiescent is True
    assert f"continuing the agent's session with {METHODS[launch.name]}" in caplog.text
    assert second.stop_reason == "completed", second.diagnostic
    assert ANSWER_2 in second.output
    assert ANSWER_1 not in second.output  # a replayed history is never output
    later = server.model_requests[turn_1_requests:]
    assert later, "turn 2 reached no model"
    turn_2 = later[-1]
    assert TURN_2 in turn_2.user_texts()[-1]
    assert any(TURN_1 in text for text in turn_2.user_texts()[:-1])  # turn 1's question
    assert ANSWER_1 in turn_2.json()  # and turn 1's answer
    assert session_id not in second.output
    assert not [r for r in caplog.records if session_id in r.getMessage()]
