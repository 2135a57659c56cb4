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


async def test_acp_tool_calls_plan_answer_and_usage_are_counted(tmp_path: Path) -> None:
    task = "count my tools\n@tools read,edit*2,execute\n@usage\n@permission edit"
    registry = Registry()
    registry.register(Provider(example_agent_config(permission="allow")))
    async with registry.run("acp", SubagentRequest(task=task, parent_cwd=tmp_path)) as run:
        result = await run.result()
        final = run.progress
    assert final.tool_calls == {"read": 1, "edit": 2, "execute": 1, "other": 0}
    assert final.tool_call_status == {"completed": 4}
    assert final.plan == {"completed": 4}
    assert final.permissions == {"allowed": 1}
    assert final.answer_bytes == len(result.output.encode())
    assert final.usage == result.usage
    assert final.usage is not None
    assert progress_line(final) == (
        f"prompt · turn 1 · {final.elapsed_ms // 1000} s · 4 tool calls (edit 2, execute 1, read 1)"
        f" · plan 4/4 done · 1 permission request (allowed 1) · {final.answer_bytes:,} answer bytes"
        f" · {final.usage.output_tokens} output tokens"
    )


async def test_a_denied_permission_is_counted(tmp_path: Path) -> None:
    task = "may I?\n@permission delete"
    async with acp_registry().run("acp", SubagentRequest(task=task, parent_cwd=tmp_path)) as run:
        result = await run.result()
    assert result.stop_reason == StopReason.ABORTED  # the example agent ends a denied turn cancelled
    assert run.progress.permissions == {"denied": 1}


async def test_dsh_tool_calls_and_answer_bytes_are_counted(tmp_path: Path) -> None:
    from tests.dsh_sdk.test_provider import dsh, registry_with

    provider = dsh(tmp_path, {"MESSAGE": "textless", "DELTAS": "fake answer"})
    async with registry_with(provider).run(
        provider.name, SubagentRequest(task="t", parent_cwd=tmp_path)
    ) as run:
        await run.result()
        final = run.progress
    assert final.tool_calls == {"other": 1}
    assert final.tool_call_status == {"completed": 1}  # the turn ended: the call is done
    assert final.answer_bytes == len(b"fake answer")
    assert final.settled
