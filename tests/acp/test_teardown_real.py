"""A one-shot run's teardown against real ACP agents, the mock model server the only fake.

claude-agent-acp keeps one Claude Code CLI per session, fed over a pipe it never closes
on its own stdin's end: with a session open, neither exits on EOF.  The provider closes
the session first (``session/close``, which it advertises), so the ladder's first rung,
EOF, ends the whole tree: no signal, no EOF grace ridden out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor import Registry, StderrMode, SubagentRequest
from supervisor.providers.acp import Config, Provider
from tests.mockmodel import MockModelServer, Text
from tests.support import peers, skip_module_without_acp_peers

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]

skip_module_without_acp_peers()

# Long enough that a loaded machine's slow exit is never mistaken for a tree that stayed.
GENEROUS_EOF_GRACE_MS = 30_000


@pytest.fixture
def server() -> Iterator[MockModelServer]:
    with MockModelServer() as srv:
        yield srv


async def test_claude_agent_acp_tree_exits_on_eof(server: MockModelServer, tmp_path: Path) -> None:
    server.script(Text("The answer is 42."))
    with peers.claude_agent_acp_launch(server, root=tmp_path) as launch:
        config = Config(
            command=launch.argv[0],
            args=launch.argv[1:],
            env=dict(launch.env),
            stderr=StderrMode.LOG,
            dispose_eof_grace_ms=GENEROUS_EOF_GRACE_MS,
        )
        registry = Registry()
        registry.register(Provider(config))
        async with registry.run("acp", SubagentRequest(task="go", parent_cwd=launch.cwd)) as run:
            result = await run.result()
    assert result.stop_reason == "completed"
    assert "The answer is 42." in result.output
    assert run.quiescent
    ladder = [
        (entry.event, entry.source, entry.target) for entry in run.audit.entries if entry.machine == "ladder"
    ]
    assert ladder == [("stdin_closed", "running", "eof-wait"), ("tree_exited", "eof-wait", "gone")]
    exit_facts = run.exit_facts
    assert exit_facts is not None
    assert (exit_facts.exit_code, exit_facts.signal) == (0, None)
