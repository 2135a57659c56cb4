"""Each turn's span carries the turn's final progress counts: ``subagent.tool_calls.<kind>``
and ``subagent.permissions.<decision>`` (closed names, numbers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor import Registry, SubagentRequest
from supervisor.providers import acp
from supervisor.providers.acp import example_agent_config
from tests.telemetry.conftest import Traced

pytestmark = pytest.mark.anyio


async def test_each_turn_s_span_has_its_own_tool_call_counts(traced: Traced, tmp_path: Path) -> None:
    registry = Registry()
    registry.register(acp.Provider(example_agent_config(permission="allow")))
    first_task = "first\n@tools read*3,execute\n@permission edit"
    async with registry.run(
        "acp", SubagentRequest(task=first_task, parent_cwd=tmp_path), conversation=True
    ) as run:
        await run.result()
        await run.send("second\n@tools edit*2")
        await run.send("third")
    spans = [dict(s.attributes or {}) for s in traced.spans() if s.name == "invoke_agent acp"]
    counts = [
        {k: v for k, v in span.items() if k.startswith(("subagent.tool_calls.", "subagent.permissions."))}
        for span in spans
    ]
    assert counts == [
        {"subagent.tool_calls.read": 3, "subagent.tool_calls.execute": 1, "subagent.permissions.allowed": 1},
        {"subagent.tool_calls.edit": 2},
        {},
    ]
