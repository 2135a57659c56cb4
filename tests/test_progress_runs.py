"""Progress on real runs: ``run.progress`` and ``run.watch()`` over real children."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from supervisor import Progress, Registry, StopReason, SubagentRequest, progress_line
from supervisor.providers.acp import Provider, example_agent_config

pytestmark = pytest.mark.anyio


def acp_registry() -> Registry:
    registry = Registry()
    registry.register(Provider(example_agent_config()))
    return registry


async def test_a_one_shot_run_is_watched_until_it_settles(tmp_path: Path) -> None:
    seen: list[Progress] = []
    request = SubagentRequest(task="say hello\n@slow 100", parent_cwd=tmp_path)
    async with acp_registry().run("acp", request) as run:

        async def watch() -> None:
            async for p in run.watch():
                seen.append(p)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            result = await run.result()
        assert result.stop_reason == StopReason.COMPLETED
        final = run.progress
    assert seen[-1] == final
    assert final.settled
    assert final.stage == "prompt"
    assert final.turn == 1
    assert all(not p.settled for p in seen[:-1])
    assert progress_line(final).startswith("prompt · turn 1 · ")


async def test_a_conversation_is_watched_turn_by_turn_until_it_is_over(tmp_path: Path) -> None:
    seen: list[Progress] = []
    request = SubagentRequest(task="first", parent_cwd=tmp_path)
    async with acp_registry().run("acp", request, conversation=True) as run:

        async def watch() -> None:
            async for p in run.watch():
                seen.append(p)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await run.result()
            await run.send("second")
            assert run.progress.turn == 2
            assert run.progress.settled
            await run.dispose()  # the conversation is over: the watcher ends
    assert seen[-1].turn == 2
    assert seen[-1].settled
    assert {p.turn for p in seen} <= {1, 2}
