"""The ACP provider closes its session before the teardown ladder, only where the agent offers it.

Scripted child: the paths a real agent cannot be made to take (no ``session/close`` offered, a
close never answered).  The real claude-agent-acp's case is in ``test_teardown_real``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from supervisor import Registry, SubagentRequest
from supervisor.providers.acp import Config, Provider
from tests.conftest import CHILDREN, PYTHON

pytestmark = pytest.mark.anyio

ACP_CHILD = str(CHILDREN / "acp_child.py")
EOF_RUNG = [("stdin_closed", "running", "eof-wait"), ("tree_exited", "eof-wait", "gone")]


async def run_logged(tmp_path: Path, **env: str) -> tuple[list[dict[str, Any]], Any]:
    """One run of the scripted child; the frames it read and the run."""
    log = tmp_path / "frames.log"
    config = Config(
        command=PYTHON,
        args=["-I", ACP_CHILD],
        env={f"ACP_CHILD_{k}": v for k, v in {**env, "LOG_FILE": str(log)}.items()},
        dispose_eof_grace_ms=30_000,  # the child leaves on EOF: never ridden out
    )
    registry = Registry()
    registry.register(Provider(config))
    async with registry.run("acp", SubagentRequest(task="t", parent_cwd=tmp_path)) as run:
        result = await run.result()
    assert result.stop_reason == "completed"
    assert run.quiescent
    return [json.loads(line) for line in log.read_text().splitlines()], run


def ladder(run: Any) -> list[tuple[str, str, str]]:
    return [(e.event, e.source, e.target) for e in run.audit.entries if e.machine == "ladder"]


async def test_an_offered_close_is_sent_for_the_run_s_session(tmp_path: Path) -> None:
    frames, run = await run_logged(tmp_path, SESSION_CLOSE="answer")
    methods = [frame.get("method") for frame in frames]
    assert methods[-2:] == ["session/prompt", "session/close"]
    assert frames[-1]["params"] == {"sessionId": run.agent_session_id}
    assert ladder(run) == EOF_RUNG


async def test_no_close_where_the_agent_does_not_offer_it(tmp_path: Path) -> None:
    frames, run = await run_logged(tmp_path)
    assert "session/close" not in [frame.get("method") for frame in frames]
    assert ladder(run) == EOF_RUNG


async def test_a_close_never_answered_does_not_hold_the_teardown(tmp_path: Path) -> None:
    frames, run = await run_logged(tmp_path, SESSION_CLOSE="hang")
    assert frames[-1].get("method") == "session/close"
    assert ladder(run) == EOF_RUNG  # EOF still goes out, and the child leaves on it
