"""Progress never carries child text (closed values and numbers only): hostile scripted children of
every kind.

Each example draws the child's updates (tool calls, their updates, plans, usage, answer
text, permission requests) with every string field carrying :data:`MARK`, and every
closed field (a tool kind, a status, an item type, a tool name) either a real value or
a marked string.  Every snapshot a watcher received, the final one, their lines and
their ``as_dict()`` must be free of the marker, and every key must come from its closed
set.  The children are the scripted ones (``tests/children``, ``tests/claude_code``; the
fake DSH runtime takes the marker in its tool call's id and name and in its answer):
only they can be made to send anything at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from supervisor import Progress, Registry, Run, SubagentRequest, progress_line
from supervisor.provider import PERMISSION_DECISIONS, PLAN_STATUSES, TOOL_CALL_STATUSES, TOOL_KINDS
from supervisor.providers.acp import Config as AcpConfig
from supervisor.providers.acp import Provider as AcpProvider
from supervisor.providers.claude_code._progress import TOOL_KINDS as CLAUDE_KINDS
from supervisor.providers.codex._progress import TOOL_KINDS as CODEX_KINDS
from tests.claude_code.conftest import FakeCli, assistant_message, fake_cli, result_message
from tests.support.codex import agent_message, notify, standin, turn_completed
from tests.test_cli import ACP_CHILD

__all__ = ["fake_cli"]  # the scripted Claude Code CLI's fixture, used here too

MARK = "HOSTILE-MARKER"
SESSION = "hostile-progress-session"
_PROFILE = settings.default
FUZZ = settings(
    max_examples=max(3, (_PROFILE.max_examples if _PROFILE is not None else 15) // 3),
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: every step runs processes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

marked = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8).map(
    lambda text: MARK + text
)


def closed(*values: str) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(values), marked)


@st.composite
def updates(draw: st.DrawFn) -> dict[str, Any]:
    """What a hostile child reports, whatever its protocol."""
    calls = draw(st.integers(min_value=0, max_value=4))
    return {
        "calls": [
            {
                "id": draw(marked),
                "title": draw(marked),
                "kind": draw(closed("read", "edit", "execute", "other")),
                "status": draw(closed(*TOOL_CALL_STATUSES)),
                "then": draw(closed(*TOOL_CALL_STATUSES)),
                "argument": draw(marked),
            }
            for _ in range(calls)
        ],
        "plan": [(draw(marked), draw(closed(*PLAN_STATUSES))) for _ in range(draw(st.integers(0, 3)))],
        "answer": draw(marked),
        "currency": draw(st.one_of(st.just("USD"), marked)),
    }


def check(snapshots: list[Progress], final: Progress, kinds: frozenset[str]) -> None:
    for p in [*snapshots, final]:
        for text in (repr(p), progress_line(p), json.dumps(p.as_dict(), ensure_ascii=False)):
            assert MARK not in text
        assert set(p.tool_calls) <= kinds
        assert set(p.tool_call_status) <= set(TOOL_CALL_STATUSES)
        assert set(p.plan) <= set(PLAN_STATUSES)
        assert set(p.permissions) <= set(PERMISSION_DECISIONS)


async def watched(registry: Registry, name: str, cwd: Path) -> tuple[list[Progress], Progress, Run]:
    seen: list[Progress] = []
    async with registry.run(name, SubagentRequest(task=f"task {MARK}", parent_cwd=cwd)) as run:

        async def watch() -> None:
            async for p in run.watch():
                seen.append(p)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await run.result()
        final = run.progress
    return seen, final, run


# -- ACP -----------------------------------------------------------------------------------


def acp_frames(u: dict[str, Any]) -> list[str]:
    def update(body: dict[str, Any]) -> str:
        params = {"sessionId": SESSION, "update": body, "_meta": {MARK: MARK}}
        return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params})

    frames = []
    for call in u["calls"]:
        frames.append(
            update(
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": call["id"],
                    "title": call["title"],
                    "kind": call["kind"],
                    "status": call["status"],
                    "rawInput": {call["argument"]: call["argument"]},
                    "content": [{"type": "content", "content": {"type": "text", "text": call["argument"]}}],
                    "locations": [{"path": "/" + call["argument"]}],
                }
            )
        )
        frames.append(
            update(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": call["id"],
                    "status": call["then"],
                    "title": call["title"],
                    "rawOutput": {"out": call["argument"]},
                }
            )
        )
    entries = [{"content": c, "priority": "high", "status": s} for c, s in u["plan"]]
    frames.append(update({"sessionUpdate": "plan", "entries": entries}))
    cost = {"amount": 0.5, "currency": u["currency"]}
    frames.append(update({"sessionUpdate": "usage_update", "used": 1, "size": 9, "cost": cost}))
    frames.append(
        update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": u["answer"]}})
    )
    return frames


async def hostile_acp(tmp_path: Path, u: dict[str, Any]) -> None:
    listed = tmp_path / "frames.json"
    listed.write_text(json.dumps(acp_frames(u)), encoding="utf-8")
    env: dict[str, str | None] = {
        "ACP_CHILD_SESSION_ID": SESSION,
        "ACP_CHILD_TEXT": "",
        "ACP_CHILD_FRAMES_AT": "prompt",
        "ACP_CHILD_FRAMES_FILE": str(listed),
        "ACP_CHILD_PERMISSION": f"{MARK}-kind,edit",
    }
    registry = Registry()
    registry.register(
        AcpProvider(AcpConfig(command=ACP_CHILD[0], args=ACP_CHILD[1:], env=env, permission="allow"))
    )
    seen, final, _ = await watched(registry, "acp", tmp_path)
    check(seen, final, TOOL_KINDS)
    assert final.permissions.total == 2  # both requests were answered, whatever their kind


# -- Codex (the stand-in app-server) ------------------------------------------------------


def codex_script(u: dict[str, Any]) -> list[dict[str, Any]]:
    script: list[dict[str, Any]] = []
    where = {"threadId": "$THREAD", "turnId": "$TURN"}
    for call in u["calls"]:
        kind = {"read": "commandExecution", "edit": "fileChange", "execute": "mcpToolCall"}.get(
            call["kind"], call["kind"]
        )
        item = {"type": kind, "id": call["id"], "command": call["argument"], "status": call["status"]}
        script.append(notify("item/started", item=item, **where))
        script.append(notify("item/completed", item={**item, "status": call["then"]}, **where))
    plan = [{"step": step, "status": status} for step, status in u["plan"]]
    script.append(notify("turn/plan/updated", explanation=MARK, plan=plan, **where))
    script.append(agent_message(u["answer"]))
    script.append(turn_completed())
    return script


async def hostile_codex(tmp_path: Path, u: dict[str, Any]) -> None:
    provider = standin(tmp_path, script=codex_script(u))
    registry = Registry()
    registry.register(provider)
    seen, final, _ = await watched(registry, provider.name, tmp_path)
    check(seen, final, CODEX_KINDS)


# -- Claude Code (the scripted fake CLI) -------------------------------------------------


def claude_steps(u: dict[str, Any]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    names = {"read": "Read", "edit": "Edit", "execute": "Bash"}
    for call in u["calls"]:
        use = {"type": "tool_use", "id": call["id"], "name": names.get(call["kind"], call["kind"])}
        use["input"] = {"command": call["argument"], "description": call["title"]}
        message = assistant_message(call["title"])
        message["message"]["content"].append(use)
        message["message"]["id"] = call["id"]
        message["message"]["usage"] = {"input_tokens": 3, "output_tokens": 2, MARK: MARK}
        steps.append({"emit": message})
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": call["argument"]}
        result["is_error"] = call["then"] == "failed"
        steps.append(
            {"emit": {"type": "user", "message": {"role": "user", "content": [result]}, "session_id": MARK}}
        )
    todos = [{"content": step, "status": status, "activeForm": step} for step, status in u["plan"]]
    todo = assistant_message(u["answer"])
    todo["message"]["content"].append(
        {"type": "tool_use", "id": MARK, "name": "TodoWrite", "input": {"todos": todos}}
    )
    steps.append({"emit": todo})
    steps.append({"emit": {"type": "system", "subtype": "permission_denied", "data": {"tool_use_id": MARK}}})
    steps.append({"emit": result_message(result=u["answer"])})
    return steps


async def hostile_claude(fake: FakeCli, u: dict[str, Any]) -> None:
    provider = fake.provider({"steps": claude_steps(u)})
    registry = Registry()
    registry.register(provider)
    seen, final, _ = await watched(registry, provider.name, fake.work)
    check(seen, final, CLAUDE_KINDS)
    assert final.permissions == {"denied": 1}


# -- DSH (the fake runtime) ---------------------------------------------------------------


async def hostile_dsh(tmp_path: Path, u: dict[str, Any]) -> None:
    from tests.dsh_sdk.test_provider import dsh

    call = u["calls"][0] if u["calls"] else {"id": MARK, "title": MARK}
    knobs = {
        "MESSAGE": "textless",
        "TOOL_CALL_ID": call["id"],
        "TOOL_NAME": call["title"],
        "DELTAS": u["answer"],
    }
    provider = dsh(tmp_path, {k: v.replace("\x00", "") for k, v in knobs.items()})
    registry = Registry()
    registry.register(provider)
    seen, final, _ = await watched(registry, provider.name, tmp_path)
    check(seen, final, frozenset({"other"}))
    assert final.tool_calls == {"other": 1}


# -- the fuzz ------------------------------------------------------------------------------


@FUZZ
@given(u=updates())
def test_no_child_text_reaches_progress_from_any_kind(
    tmp_path_factory: pytest.TempPathFactory, fake_cli: FakeCli, u: dict[str, Any]
) -> None:
    anyio.run(hostile_acp, tmp_path_factory.mktemp("acp"), u, backend="asyncio")
    anyio.run(hostile_codex, tmp_path_factory.mktemp("codex"), u, backend="asyncio")
    anyio.run(hostile_claude, fake_cli, u, backend="asyncio")
    anyio.run(hostile_dsh, tmp_path_factory.mktemp("dsh"), u, backend="asyncio")
