"""Progress from the real ACP agents (codex-acp, claude-agent-acp) against the mock model:
a tool call that writes a file is counted by its ACP kind, with its permission decision."""

from __future__ import annotations

import pytest

from supervisor import Registry, SubagentRequest, progress_line
from supervisor.providers.acp import Provider
from tests.acp.test_real_peers import config, launch, server, tool_writing
from tests.mockmodel import MockModelServer, Text
from tests.support import peers

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]
__all__ = ["launch", "server"]  # the real peers' fixtures, shared


async def test_a_real_agent_s_tool_call_and_permission_are_counted(
    launch: peers.PeerLaunch, server: MockModelServer
) -> None:
    server.script(tool_writing(launch, "proof.txt"), Text("done"))
    registry = Registry()
    registry.register(Provider(config(launch, permission="allow")))
    async with registry.run("acp", SubagentRequest(task="write it", parent_cwd=launch.cwd)) as run:
        result = await run.result()
        final = run.progress
    assert result.stop_reason == "completed"
    assert final.tool_call_total >= 1
    assert set(final.tool_calls) <= {"edit", "execute", "other"}  # the agents' kinds for writing a file
    assert final.tool_call_status.get("completed", 0) >= 1
    assert final.permissions == {"allowed": 1}
    assert final.answer_bytes >= len(b"done")
    assert "proof.txt" not in repr(final)
    assert "proof.txt" not in progress_line(final)
