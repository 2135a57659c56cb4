"""A warm claude-agent-acp child's Claude Code CLI is compiled eagerly (``node --no-lazy``).

The flag reaches the CLI the adapter spawns at ``session/new`` through that request's
``_meta.claudeCode.options.executableArgs``, for a warm child only, and changes nothing
the model sees: the warm run's model request is the cold run's.  The real adapter and
its real CLI, the mock model on 127.0.0.1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from supervisor import Registry, StderrMode, SubagentRequest
from supervisor.providers.acp import Config, Provider
from supervisor.providers.acp._eager import CLAUDE_AGENT_ACP, EAGER_FLAGS, warm_session_meta
from tests.conftest import tagged
from tests.mockmodel import MockModelServer, Text
from tests.support import peers, peers_required

NODE = "/usr/bin/node"
FLAGS = {"claudeCode": {"options": {"executableArgs": list(EAGER_FLAGS)}}}


def test_the_flags_go_to_claude_agent_acp_run_by_node_with_its_script_cli() -> None:
    assert warm_session_meta(CLAUDE_AGENT_ACP, NODE, {}) == FLAGS
    assert warm_session_meta(CLAUDE_AGENT_ACP, "nodejs", {"CLAUDE_CODE_EXECUTABLE": "/x/cli.js"}) == FLAGS


def test_no_flags_for_a_run_with_a_memory_ceiling_of_its_own() -> None:
    """The flags cost the CLI about 165 MB more: not where that counts against a ``memory_max``."""
    assert warm_session_meta(CLAUDE_AGENT_ACP, NODE, {}, memory_max=2**31) == {}


@pytest.mark.parametrize(
    ("name", "command", "env"),
    [
        ("codex-acp", NODE, {}),  # another agent: its _meta means something else, if anything
        (None, NODE, {}),  # an agent that did not name itself
        (CLAUDE_AGENT_ACP, "/usr/local/bin/claude-agent-acp", {}),  # not node: its CLI may not be either
        (CLAUDE_AGENT_ACP, "bun", {}),
        (CLAUDE_AGENT_ACP, NODE, {"CLAUDE_AGENT_ACP_IS_SINGLE_FILE_BUN": "1"}),  # a native CLI
        (CLAUDE_AGENT_ACP, NODE, {"CLAUDE_CODE_EXECUTABLE": "/opt/claude/bin/claude"}),  # a native CLI
    ],
)
def test_no_flags_where_they_could_reach_anything_but_node_running_the_cli_script(
    name: str | None, command: str, env: dict[str, str]
) -> None:
    assert warm_session_meta(name, command, env) == {}


# Run as the adapter's CLI (``CLAUDE_CODE_EXECUTABLE``, a script: still run by node): writes
# the node flags it was started with, then runs the real CLI.  The CLI renames its process
# (its command line then reads "claude"), so this is how a test sees them.
RECORDER = """\
import { appendFileSync } from "node:fs";
appendFileSync(process.env.EAGER_TEST_RECORD, JSON.stringify(process.execArgv) + "\\n");
process.argv[1] = process.env.EAGER_TEST_CLI;
await import(process.env.EAGER_TEST_CLI);
"""


def recorded(record: Path) -> list[list[str]]:
    """The node flags of each CLI started so far, in order."""
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]


def sent(body: dict[str, Any] | None) -> dict[str, Any]:
    """A model request's body without its per-session metadata (a device and session id)."""
    assert body is not None
    return {key: value for key, value in body.items() if key != "metadata"}


@pytest.mark.anyio
@pytest.mark.real_peer
async def test_a_warm_childs_cli_is_compiled_eagerly_and_asks_the_model_what_a_cold_one_asks(
    tmp_path: Path,
) -> None:
    missing = peers.missing_peers()
    if missing and not peers_required():
        pytest.skip(f"real ACP peers not installed ({'; '.join(missing)}): run `npm ci` in tests/")
    with MockModelServer() as server, peers.claude_agent_acp_launch(server, root=tmp_path) as launch:
        server.script(Text("cold answer"), Text("warm answer"))
        recorder, record = tmp_path / "recorder.mjs", tmp_path / "node-flags.jsonl"
        recorder.write_text(RECORDER, encoding="utf-8")
        real_cli = peers.NODE_MODULES / "@anthropic-ai" / "claude-agent-sdk" / "cli.js"
        env: dict[str, str | None] = {
            **launch.env,
            "CLAUDE_CODE_EXECUTABLE": str(recorder),
            "EAGER_TEST_CLI": str(real_cli),
            "EAGER_TEST_RECORD": str(record),
        }
        config = Config(
            command=launch.argv[0],
            args=launch.argv[1:],
            env=env,
            stderr=StderrMode.LOG,
            dispose_eof_grace_ms=300,
            dispose_grace_ms=3000,
        )
        registry = Registry()
        registry.register(Provider(config))
        request = SubagentRequest(task="the task", parent_cwd=launch.cwd)
        async with registry:
            async with registry.run("acp", request) as cold:
                cold_result = await cold.result()
            assert recorded(record) == [[]]  # a cold run's CLI starts as it always did
            await registry.prestart("acp", 1, cwd=launch.cwd)
            async with registry.run("acp", request) as warm:
                warm_result = await warm.result()
            assert any(entry.machine == "warm" for entry in warm.audit.entries)
        assert (cold_result.output, warm_result.output) == ("cold answer", "warm answer")
        # the warm child's CLI, then its refill's (started once the warm run took the child)
        assert recorded(record)[1:] == [list(EAGER_FLAGS)] * (len(recorded(record)) - 1) != []
        cold_request, warm_request = server.model_requests
        assert sent(warm_request.body) == sent(cold_request.body)
    assert tagged(cold.id) == []
    assert tagged(warm.id) == []
