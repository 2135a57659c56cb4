"""A Claude Code start that overruns ``start_timeout_ms`` fails as ``<stage>/unknown``, rolled back."""

from __future__ import annotations

import pytest

from supervisor import Registry, StartFailed, SubagentRequest
from tests.claude_code.conftest import FakeCli

pytestmark = pytest.mark.anyio


async def test_a_hung_initialize_overruns_the_start_deadline(fake_cli: FakeCli) -> None:
    registry = Registry()
    registry.register(fake_cli.provider({"answer_initialize": False}, start_timeout_ms=500))
    request = SubagentRequest(task="the task", parent_cwd=fake_cli.work)
    with pytest.raises(StartFailed) as info:
        async with registry.run("claude-code", request):
            pytest.fail("a start that never finished was published")
    assert (
        str(info.value) == "Subagent failure (provider: Claude Code; stage: query-start; category: unknown)"
    )
    assert info.value.quiescent is True
