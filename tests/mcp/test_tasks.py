"""MCP 2026-07-28 and the tasks extension, driven by the official SDK's own client over real
stdio: a declaring client's ``run_subagent`` / ``send_subagent`` is a task at once, polled
with ``tasks/get`` to the very result the blocking call returns; ``tasks/cancel`` ends the
tree; bad input is one JSON-RPC error; other clients (not declaring, or of the 2025-11-25
handshake era) keep the blocking tools.  The board's TTL and cap are driven directly."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.lowlevel
import mcp_types as types
import pytest
from mcp.client.client import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict, Field, TypeAdapter

from supervisor.mcp._answers import result_facts
from supervisor.mcp._tasks import TASKS_EXTENSION, Pending, TaskBoard, TaskStatus
from tests.conftest import tagged
from tests.mcp.test_server import EXAMPLE_ANSWER_START, SERVER, write_config
from tests.support.raw_mcp import RawMcp
from tests.test_progress_hostile import MARK, SESSION, acp_frames

pytestmark = pytest.mark.anyio

EVENTUALLY = 60.0  # a bound for "eventually", never a claim about speed
RAW: Any = TypeAdapter(dict[str, Any])  # any result, as the wire has it


class CreatedTask(types.Result):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str


class TaskIdParams(types.RequestParams):
    task_id: str = Field(alias="taskId")


class GetTask(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams


class CancelTask(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams


class BareGet(types.Request[types.RequestParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: types.RequestParams


async def get_task(client: Client, task_id: str) -> dict[str, Any]:
    task: dict[str, Any] = await client.session.send_request(
        GetTask(params=TaskIdParams(taskId=task_id)), RAW
    )
    return task


async def until_finished(client: Client, task_id: str) -> dict[str, Any]:
    with anyio.fail_after(EVENTUALLY):
        while True:
            task = await get_task(client, task_id)
            if task["status"] != "working":
                return task
            await anyio.sleep(task["pollIntervalMs"] / 1000)


async def resolve(created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
    """What a client that hands a task off does: poll until it is finished, take its result."""
    with anyio.fail_after(EVENTUALLY):
        while True:
            task = await ctx.session.send_request(GetTask(params=TaskIdParams(taskId=created.task_id)), RAW)
            if task["status"] != "working":
                assert task["status"] == "completed", task
                return types.CallToolResult.model_validate(task["result"])
            await anyio.sleep(task["pollIntervalMs"] / 1000)


class Tasks(ClientExtension):
    identifier = TASKS_EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=resolve)]


@asynccontextmanager
async def modern(*args: str, cwd: Path, tasks: bool = True) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=SERVER[0], args=[*SERVER[1:], *args], cwd=str(cwd))
    extensions = [Tasks()] if tasks else None
    async with Client(params, mode="auto", extensions=extensions) as client:  # server/discover
        assert client.protocol_version == "2026-07-28"
        yield client


async def created(client: Client, tool: str, arguments: dict[str, Any]) -> CreatedTask:
    answer = await client.session.call_tool(tool, arguments, allow_claimed=True)
    assert isinstance(answer, CreatedTask), answer
    return answer


async def test_a_declaring_clients_run_is_a_task_polled_to_the_blocking_calls_result(tmp_path: Path) -> None:
    async with modern(cwd=tmp_path) as client:
        assert client.protocol_version == "2026-07-28"
        assert TASKS_EXTENSION in (client.server_capabilities.extensions or {})  # advertised
        task = await created(client, "run_subagent", {"task": "say hello"})
        assert task.status == "working"  # answered at once, before the run settled
        extra = task.model_extra or {}
        assert " · turn 1 · " in extra["statusMessage"]  # the progress line
        assert (extra["ttlMs"], extra["pollIntervalMs"]) == (None, 1000)  # a working task stays
        finished = await until_finished(client, task.task_id)
        assert finished["status"] == "completed"
        assert finished["resultType"] == "complete"
        assert finished["ttlMs"] >= 3_600_000
        result = types.CallToolResult.model_validate(finished["result"])
        assert result.is_error is False
        assert result.structured_content is None
        assert result.content[0].type == "text"
        assert result.content[0].text.startswith(EXAMPLE_ANSWER_START)
        facts = result_facts(result)
        assert facts is not None
        assert (facts["stop_reason"], facts["state"]) == ("completed", "settled")
        assert not tagged(facts["run_id"])
        again = await get_task(client, task.task_id)  # a finished task is kept
        assert again["status"] == "completed"

        # The SDK client's own claim resolution: a plain call_tool returns the answer.
        resolved = await client.call_tool("run_subagent", {"task": "say hello"})
        assert resolved.content[0].type == "text"
        assert resolved.content[0].text.startswith(EXAMPLE_ANSWER_START)


async def test_a_failed_run_is_a_completed_task_whose_result_is_an_error(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", broken={"EXIT_AT": "prompt", "EXIT_CODE": "3", "TEXT": "part"})
    async with modern("--config", str(config), cwd=tmp_path) as client:
        task = await created(client, "run_subagent", {"task": "t"})
        finished = await until_finished(client, task.task_id)
    assert finished["status"] == "completed"  # the request did not fail: the run did
    assert finished["result"]["isError"] is True
    assert finished["result"]["content"][0]["text"].startswith(
        "subagent run failed\nDiagnostic: Subagent failure"
    )


async def test_tasks_cancel_ends_the_run_and_its_tree_and_the_task_is_cancelled(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", hang={"HANG": "1", "GRANDCHILD": "1"})
    async with modern("--config", str(config), cwd=tmp_path) as client:
        task = await created(client, "run_subagent", {"task": "t"})
        with anyio.fail_after(EVENTUALLY):
            while True:
                if (await get_task(client, task.task_id))["statusMessage"].startswith("prompt · "):
                    break
                await anyio.sleep(0.05)
        listed = result_facts(await client.call_tool("list_subagents", {}))
        assert listed is not None
        (run,) = listed["runs"]
        assert tagged(run["run_id"])
        ack = await client.session.send_request(CancelTask(params=TaskIdParams(taskId=task.task_id)), RAW)
        assert ack["resultType"] == "complete"
        finished = await until_finished(client, task.task_id)
        assert finished["status"] == "cancelled"
        assert "result" not in finished
        assert not tagged(run["run_id"])  # the tree was gone before the task said cancelled
        with pytest.raises(MCPError) as again:  # a finished task cannot be cancelled
            await client.session.send_request(CancelTask(params=TaskIdParams(taskId=task.task_id)), RAW)
        assert again.value.error.code == types.INVALID_PARAMS
        assert "already finished (cancelled)" in again.value.error.message


async def test_send_subagent_is_a_task_and_the_conversation_goes_on(tmp_path: Path) -> None:
    async with modern(cwd=tmp_path) as client:
        first = await client.call_tool("run_subagent", {"task": "what is 2+2?", "keep_alive": True})
        facts = result_facts(first)
        assert facts is not None
        run_id = facts["run_id"]
        task = await created(client, "send_subagent", {"run_id": run_id, "task": "@recall"})
        finished = await until_finished(client, task.task_id)
        text = finished["result"]["content"][0]["text"]
        assert text.startswith("Earlier in this session you asked: what is 2+2?\n\n")
        assert f"(run_id: {run_id})" in text.splitlines()[-1]  # how to go on, in the text itself
        closed = await client.call_tool("close_subagent", {"run_id": run_id})
        assert closed.is_error is False
        assert not tagged(run_id)


async def test_bad_input_is_one_error_never_a_crash(tmp_path: Path) -> None:
    async with modern(cwd=tmp_path) as client:
        with pytest.raises(MCPError) as unknown:
            await get_task(client, "no-such-task")
        assert (unknown.value.error.code, unknown.value.error.message) == (
            types.INVALID_PARAMS,
            "Failed to retrieve task: Task not found",
        )
        with pytest.raises(MCPError) as cancel_unknown:
            await client.session.send_request(CancelTask(params=TaskIdParams(taskId="nope")), RAW)
        assert cancel_unknown.value.error.code == types.INVALID_PARAMS
        with pytest.raises(MCPError) as malformed:  # no taskId at all
            await client.session.send_request(BareGet(params=types.RequestParams()), RAW)
        assert malformed.value.error.code == types.INVALID_PARAMS
        # Bad arguments answer at once, as the blocking call would: no task.
        refused = await client.session.call_tool("run_subagent", {"task": " "}, allow_claimed=True)
        assert isinstance(refused, types.CallToolResult)
        (block,) = refused.content
        assert isinstance(block, types.TextContent)
        assert (refused.is_error, block.text) == (True, "task must be a non-empty string")
        no_run = await client.session.call_tool(
            "send_subagent", {"run_id": "x", "task": "t"}, allow_claimed=True
        )
        assert isinstance(no_run, types.CallToolResult)
        assert no_run.is_error is True
        # The server is still there.
        answer = await client.call_tool("run_subagent", {"task": "say hello"})
        assert answer.content[0].type == "text"
        assert answer.content[0].text.startswith(EXAMPLE_ANSWER_START)


async def test_a_client_that_does_not_declare_the_extension_keeps_the_blocking_tools(tmp_path: Path) -> None:
    async with modern(cwd=tmp_path, tasks=False) as client:
        answer = await client.session.call_tool("run_subagent", {"task": "say hello"}, allow_claimed=True)
        assert isinstance(answer, types.CallToolResult)  # the result itself, never a task
        assert answer.content[0].type == "text"
        assert answer.content[0].text.startswith(EXAMPLE_ANSWER_START)
        with pytest.raises(MCPError) as refused:
            await get_task(client, "anything")
        assert refused.value.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY


async def test_a_2025_11_25_client_keeps_the_blocking_tools(tmp_path: Path) -> None:
    params = StdioServerParameters(command=SERVER[0], args=SERVER[1:], cwd=str(tmp_path))
    async with Client(params, mode="legacy", extensions=[Tasks()]) as client:
        assert client.protocol_version == "2025-11-25"
        answer = await client.session.call_tool("run_subagent", {"task": "say hello"}, allow_claimed=True)
        assert isinstance(answer, types.CallToolResult)
        assert answer.content[0].type == "text"
        assert answer.content[0].text.startswith(EXAMPLE_ANSWER_START)


# -- the board: TTL, cap, ids ---------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def answering(text: str) -> Pending:
    async def finish() -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=text)])

    return Pending(finish=finish, stop=lambda: None, status=lambda: "prompt")


async def finished_all(board: TaskBoard, ids: list[str]) -> None:
    with anyio.fail_after(EVENTUALLY):
        while True:
            if all(board.get(task_id).status is not TaskStatus.WORKING for task_id in ids):
                return
            await anyio.lowlevel.checkpoint()


async def test_finished_tasks_are_kept_for_their_ttl_and_at_most_the_cap_oldest_first_out() -> None:
    clock = Clock()
    async with anyio.create_task_group() as tg:
        board = TaskBoard(tg, ttl_seconds=60.0, max_finished=3, clock=clock)
        ids = [board.create(answering(str(n))).task_id for n in range(3)]
        assert len(set(ids)) == 3
        await finished_all(board, ids)
        clock.now = 30.0
        fourth = board.create(answering("3")).task_id
        await finished_all(board, [fourth])
        with pytest.raises(MCPError):  # four finished, cap three: the oldest went first
            board.get(ids[0])
        assert [board.get(i).status for i in (*ids[1:], fourth)] == [TaskStatus.COMPLETED] * 3
        clock.now = 60.0  # the first three finished at 0: past their TTL
        for task_id in ids[1:]:
            with pytest.raises(MCPError):
                board.get(task_id)
        assert board.get(fourth).status is TaskStatus.COMPLETED  # finished at 30
        clock.now = 90.0
        with pytest.raises(MCPError):
            board.get(fourth)
        fresh = board.create(answering("later")).task_id
        assert fresh not in {*ids, fourth}  # an id is never handed out again


# -- the status notification ----------------------------------------------------------------

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
}


def test_a_listen_stream_carries_each_status_change_of_its_tasks(tmp_path: Path) -> None:
    """``subscriptions/listen`` with ``taskIds``: acknowledged with those ids, then each status
    change of a listed task as ``notifications/tasks`` (the whole task), on that stream."""
    config = write_config(tmp_path / "c.toml", hang={"HANG": "1"})
    stderr = tmp_path / "server.stderr"
    server = RawMcp("--config", str(config), cwd=tmp_path, stderr=stderr, handshake=False)
    try:
        answer = server.request(
            "tools/call", {"name": "run_subagent", "arguments": {"task": "t"}, "_meta": ENVELOPE}
        )
        task = answer["result"]
        assert (task["resultType"], task["status"]) == ("task", "working")
        stream = server.send(
            "subscriptions/listen", {"notifications": {"taskIds": [task["taskId"]]}, "_meta": ENVELOPE}
        )
        ack = server.until(lambda f: f.get("method") == "notifications/subscriptions/acknowledged")
        assert ack["params"]["notifications"] == {"taskIds": [task["taskId"]]}
        assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == stream
        cancel = server.request("tasks/cancel", {"taskId": task["taskId"], "_meta": ENVELOPE})
        assert cancel["result"]["resultType"] == "complete"
        changed = server.until(lambda f: f.get("method") == "notifications/tasks")
        assert changed["params"]["taskId"] == task["taskId"]
        assert changed["params"]["status"] == "cancelled"
        assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == stream
        # A client that does not declare the extension cannot listen for tasks.
        bare = {**ENVELOPE, "io.modelcontextprotocol/clientCapabilities": {}}
        refused = server.request("subscriptions/listen", {"notifications": {"taskIds": ["x"]}, "_meta": bare})
        assert refused["error"]["code"] == types.MISSING_REQUIRED_CLIENT_CAPABILITY
    finally:
        assert server.close() == 0
    assert "Traceback" not in stderr.read_text(encoding="utf-8", errors="replace")


# -- no child text ---------------------------------------------------------------------------


def hostile_child(tmp_path: Path) -> Path:
    """A scripted child whose tool calls, plan and answer all carry :data:`MARK`, then hangs."""
    hostile = {
        "calls": [
            {
                "id": MARK + "id",
                "title": MARK + "title",
                "kind": MARK + "kind",
                "status": "pending",
                "then": MARK + "status",
                "argument": MARK + "argument",
            },
            {
                "id": MARK + "2",
                "title": MARK,
                "kind": "execute",
                "status": "in_progress",
                "then": "completed",
                "argument": "rm -rf /" + MARK,
            },
        ],
        "plan": [(MARK + "entry", "pending"), (MARK, MARK + "status")],
        "answer": MARK + "answer",
        "currency": MARK,
    }
    listed = tmp_path / "frames.json"
    listed.write_text(json.dumps(acp_frames(hostile)), encoding="utf-8")
    return write_config(
        tmp_path / "c.toml",
        hostile={
            "SESSION_ID": SESSION,
            "TEXT": "",
            "FRAMES_AT": "prompt",
            "FRAMES_FILE": str(listed),
            "HANG": "1",
        },
    )


async def test_status_messages_and_progress_never_carry_child_text(tmp_path: Path) -> None:
    """A hostile child's titles, commands, plan entries and kinds never reach a task's
    ``statusMessage`` nor a progress notification: closed facts and numbers only."""
    config = hostile_child(tmp_path)
    seen: list[str] = []
    async with modern("--config", str(config), cwd=tmp_path) as client:
        task = await created(client, "run_subagent", {"task": "t"})
        with anyio.fail_after(EVENTUALLY):
            while True:  # until the child's tool calls are counted
                message = (await get_task(client, task.task_id))["statusMessage"]
                seen.append(message)
                if "tool call" in message:
                    break
                await anyio.sleep(0.05)
        await client.session.send_request(CancelTask(params=TaskIdParams(taskId=task.task_id)), RAW)
        finished = await until_finished(client, task.task_id)
        assert finished["status"] == "cancelled"
        assert MARK not in json.dumps(finished)

        progressed = anyio.Event()

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(message or "")
            if message is not None and "tool call" in message:
                progressed.set()

        with anyio.fail_after(EVENTUALLY):
            async with anyio.create_task_group() as tg:

                async def blocking() -> None:
                    params = StdioServerParameters(
                        command=SERVER[0], args=[*SERVER[1:], "--config", str(config)], cwd=str(tmp_path)
                    )
                    async with Client(params, mode="legacy") as legacy:
                        await legacy.call_tool("run_subagent", {"task": "t"}, progress_callback=progress)

                tg.start_soon(blocking)
                await progressed.wait()
                tg.cancel_scope.cancel()
    assert any("tool call" in line for line in seen)
    for line in seen:
        assert MARK not in line
        assert "rm -rf" not in line
